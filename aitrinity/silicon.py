"""Which kernel times price a GPU: the measured tables (``[silicon]`` extra) or the catalog's compact
roofline parameters, and the one line that says which (front door: it may read the tables).

``kernels(device, engine, version)`` answers with :class:`~aitrinity.cost.kernels.TableKernels` when
``aiconfigurator-core`` is installed and has tables for the device, else with
:class:`~aitrinity.cost.kernels.RooflineKernels` from the device's ``kernels:`` entry (or, for a device
without one, from its generic efficiency figures). :class:`KernelChoice` records the choice, the asked
and the used engine version, and why a fallback happened, for stderr and ``--json``.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from aitrinity.cost.concurrency import ENGINE_PROFILES
from aitrinity.cost.kernels import Array, AttentionTables, Grid, Kernels, TableKernels, generic_params, roofline
from aitrinity.errors import SpecError
from aitrinity.spec.hardware import DeviceSpec

__all__ = [
    "ENGINES",
    "IMPLAUSIBLE_STREAMING",
    "KernelChoice",
    "block_scaled",
    "decode_streaming_ratio",
    "generic_params",
    "implausible_gemm",
    "kernels",
    "roofline",
    "table_kernels",
]

ENGINES = tuple(ENGINE_PROFILES)
"""Engines a scenario may name: those with a scheduling profile (``generic`` among them)."""


@dataclass(frozen=True)
class KernelChoice:
    kernels: Kernels
    source: str
    """``table h100_sxm/vllm/0.24.0`` or ``roofline (catalog h100-sxm)``."""
    note: str | None
    """Why the source differs from what was asked (no extra, no table, another version), or None."""


def kernels(
    dev: DeviceSpec, engine: str = "generic", version: str | None = None, tables: bool = True, fp8_block: bool = False
) -> KernelChoice:
    """The kernel times for ``dev`` under ``engine``; ``tables=False`` or ``engine="generic"`` (no engine
    named) gives the catalog roofline, so that a scenario's numbers do not depend on an optional extra.
    ``fp8_block``: fp8 weights with block scales (:func:`block_scaled`; a model's ``fp8_weight_block``)."""
    choice = _kernels(dev, engine, version, tables)
    return dataclasses.replace(choice, kernels=block_scaled(choice.kernels)) if fp8_block else choice


def _kernels(dev: DeviceSpec, engine: str, version: str | None, tables: bool) -> KernelChoice:
    if engine not in ENGINES:
        raise SpecError("system.engine", engine, f"one of {', '.join(ENGINES)}")
    fallback = roofline(dev)
    if not tables or engine == "generic":  # no engine named: the catalog's parameters, by choice
        return KernelChoice(fallback, fallback.source, None)
    from aitrinity.catalog import kernel_tables as kt

    if not kt.available():
        note = "measured kernel tables not installed (pip install 'aitrinity[silicon]'): catalog roofline"
        return KernelChoice(fallback, fallback.source, note if dev.kind == "gpu" else None)
    if dev.name not in kt.SYSTEM_OF_DEVICE:
        note = f"no kernel tables for {dev.name}: catalog roofline"
        return KernelChoice(fallback, fallback.source, note if dev.kind == "gpu" else None)
    table = table_kernels(dev, engine, version)
    used = kt.read(dev.name, engine, version).choice
    if version is not None and used.version != version:
        return KernelChoice(table, table.source, f"no {engine} {version} tables for {dev.name}: using {used.version}")
    return KernelChoice(table, table.source, None)


@functools.lru_cache(maxsize=16)
def _grids(
    device: str, engine: str, version: str | None
) -> tuple[
    dict[str, Grid],
    dict[tuple[int, str], AttentionTables],
    dict[int, Grid],
    dict[int, Grid],
    dict[tuple[str, int, int, int, int, int, int, str], Grid],
]:
    from aitrinity.catalog import kernel_tables as kt

    t = kt.read(device, engine, version)
    # beyond a table's largest shape the work grows at the edge's rate: linear in a GEMM's m, n, k, in batch, heads
    # and decode context; quadratic in a causal prefill's length (Grid)
    attention = {
        key: AttentionTables(
            {h: Grid(*g, growth=(1.0, 2.0, 1.0)) for h, g in a.prefill.items()},
            {h: Grid(*g, growth=(1.0, 1.0, 1.0)) for h, g in a.decode.items()},
        )
        for key, a in t.attention.items()
    }
    gemm = {d: Grid(g[0], monotone_rows(g[1]), growth=(1.0, 1.0, 1.0)) for d, g in t.gemm.items()}
    all_reduce = {n: Grid(*g) for n, g in t.all_reduce.items()}
    all_to_all = {n: Grid(*g) for n, g in t.all_to_all.items()}
    return gemm, attention, all_reduce, all_to_all, {key: Grid(*g) for key, g in t.moe.items()}


NOISE = 0.1
"""How far above a shape with more rows a GEMM table's cell may sit and still be read as measured (the tables' flat,
latency-bound region scatters by a few percent between neighbouring ``m``)."""


def monotone_rows(seconds: Array) -> Array:
    """A GEMM table whose cells more than :data:`NOISE` slower than some shape with more rows (its first axis, ``m``)
    are read as that shape. A GEMM of ``m`` rows can always run as one of ``m' > m`` rows, padded, so such a point
    is not what the GEMM costs. vLLM's and SGLang's per-tensor fp8 tables on H100 measure most ``m = 256j + 1``
    points well above the next ``256(j + 1)`` (``tools/kernel_table_audit.py`` prints each table's share of such
    cells and how far above they sit), and a prefill step of ``256j + c`` tokens read them through interpolation. On
    the development runs (``trinity validate --serving``, the engine profiles unchanged) TTFT MAPE 23.5% -> 23.4%,
    TPOT 9.2% -> 9.0%; Llama-3.1-70B (vLLM, fp8) TPOT 7.4% -> 5.8%."""
    import numpy as np

    floor = np.minimum.accumulate(seconds[::-1], axis=0)[::-1]
    out: Array = np.where(seconds > (1.0 + NOISE) * floor, floor, seconds)
    return out


IMPLAUSIBLE_STREAMING = 10.0
"""A GEMM table whose decode-sized GEMMs (m <= 64, at least 16 MiB of weights) take, in the median, more than this
many times the time to stream their weights at the device's HBM bandwidth is not read (:func:`implausible_gemm`).
Every table aiconfigurator-core 0.12 ships for A100, H100, H200, B200, B300, GB200, GB300 and L40S lies between 1.2x and
5.5x, but vLLM 0.24's block-scaled fp8 tables on Blackwell (DeepGEMM): 29x on B200 and B300, 53-55x on GB200 and
GB300 -- a cost that the other engines' block-scaled tables on the same GPUs do not show (2.4-2.6x), and that would
make a DeepSeek decode step several times slower under vLLM than under them (``tools/kernel_table_audit.py`` prints
every table's ratio)."""


def decode_streaming_ratio(grid: Grid, weight_bytes: float, bandwidth_Bps: float) -> float | None:
    """The median, over a GEMM table's decode-sized GEMMs (m <= 64, at least 16 MiB of weights), of their time over
    the time to stream their weights at ``bandwidth_Bps``; None when it has none. ``weight_bytes``: bytes per weight
    of the table's dtype."""
    import numpy as np

    m, n, k = np.meshgrid(*grid.axes, indexing="ij")
    streamed = n * k * weight_bytes
    sel = (m <= 64) & (streamed >= 16 * 2**20)
    if not sel.any():
        return None
    return float(np.median(grid.values[sel] / (streamed[sel] / bandwidth_Bps)))


def implausible_gemm(grid: Grid, weight_bytes: float, bandwidth_Bps: float) -> float | None:
    """:func:`decode_streaming_ratio` when it exceeds :data:`IMPLAUSIBLE_STREAMING`; else None (the table reads as
    measured)."""
    ratio = decode_streaming_ratio(grid, weight_bytes, bandwidth_Bps)
    return ratio if ratio is not None and ratio > IMPLAUSIBLE_STREAMING else None


@functools.lru_cache(maxsize=16)
def _set_aside(device: str, engine: str, version: str | None, bandwidth_Bps: float) -> tuple[tuple[str, str], ...]:
    """The GEMM tables of one GPU and engine version not read, and why (read once, as the grids are): only
    block-scaled fp8 has another table to take instead (the per-tensor one), so the check is for it."""
    from aitrinity.catalog import kernel_tables as kt

    gemm = _grids(device, engine, version)[0]
    block = gemm.get("fp8_block")
    ratio = implausible_gemm(block, 1.0, bandwidth_Bps) if block is not None and "fp8" in gemm else None
    if ratio is None:
        return ()
    label = kt.read(device, engine, version).choice.label
    return (("fp8_block", f"{label}: decode GEMMs at {ratio:.0f}x the time to stream their weights"),)


def table_kernels(dev: DeviceSpec, engine: str, version: str | None = None) -> TableKernels:
    """The measured kernels of ``dev`` under ``engine``, the catalog roofline for what no table covers
    (recorded in ``fallbacks``); a GEMM table that streams decode weights implausibly slowly is set aside
    (:func:`implausible_gemm`). Raises SpecError when the tables cannot be read."""
    from aitrinity.catalog import kernel_tables as kt

    gemm, attention, all_reduce, all_to_all, moe = _grids(dev.name, engine, version)
    label = kt.read(dev.name, engine, version).choice.label
    set_aside = dict(_set_aside(dev.name, engine, version, dev.memory_bandwidth_Bps))
    kept = {d: g for d, g in gemm.items() if d not in set_aside}
    return TableKernels(
        kept,
        attention,
        all_reduce,
        roofline(dev),
        source=f"table {label}",
        all_to_all_grids=all_to_all,
        moe_grids=moe,
        set_aside=set_aside,
    )


def block_scaled(k: Kernels) -> Kernels:
    """``k`` for fp8 weights with block scales (DeepSeek-V3's checkpoints, a measured run's ``fp8_block``): the
    block-scaled kernels' tables first (:attr:`~aitrinity.cost.kernels.TableKernels.fp8_block`). The roofline has
    one fp8 and is returned as is. A block-scaled model's scenarios ask for it through :func:`kernels`."""
    return dataclasses.replace(k, fp8_block=True) if isinstance(k, TableKernels) else k
