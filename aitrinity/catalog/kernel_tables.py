"""Measured kernel tables: NVIDIA's ``aiconfigurator-core`` (PyPI, Apache-2.0), read lazily.

Layout of that package: ``aiconfigurator_core/systems/data/<gpu>/<op>/<engine>/<version>/<table>.parquet``
(``gemm/gemm_perf``, ``attention/{context,generation}_attention_perf``, ``comm/<engine>/custom_allreduce_perf``,
``comm/nccl/<nccl version>/nccl_perf``). Latencies are in milliseconds; GEMM shapes are ``m x n x k``;
collective sizes are in elements of the table's dtype (bf16 / half: 2 bytes each; read so, NCCL's
all-reduce on 8 x H100 reaches a bus bandwidth of ~445 GB/s at 512 MiB, and 222 GB/s were they bytes). The
all-to-all (MoE token dispatch and combine) comes from NCCL's table, the newest NCCL version measured, as
nccl-tests counts it: each GPU's send buffer, a ``1/n`` share to each of the ``n`` GPUs. A version that did not
measure a table again says so in its folder's ``reuse.yaml`` (``reuse: [{table, from_version}]``: TensorRT-LLM
1.3.0rc23's GEMM table on B200, B300, GB200 and GB300 is 1.3.0rc20's, and so are its MoE shapes but DeepSeek-V4's,
which it measured again); such a table is read from the version it names, after the version's own file.

Installed with ``pip install 'aitrinity[silicon]'`` (which brings pyarrow). Only the per-operator tables
are read. The same package ships ``systems/silicon_sample.csv`` (end-to-end runs kept apart as an
independent check): this module never opens it.

:func:`read` returns :class:`MeasuredTables` -- plain grids of seconds, no pricing logic (the catalog layer
sits below ``cost``; :mod:`aitrinity.silicon` turns them into kernel times) -- for a catalog device and an
engine, or raises :class:`~aitrinity.errors.SpecError` with one line (extra not installed, no table for
the device, a corrupt file). Results are cached per (device, engine, version).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from aitrinity.errors import SpecError

PACKAGE = "aiconfigurator_core"
ENGINES = ("trtllm", "vllm", "sglang")

SYSTEM_OF_DEVICE = {
    "h100-sxm": "h100_sxm",
    "h100-pcie": "h100_pcie",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "a100-80gb-sxm": "a100_sxm",
    "a100-40gb-sxm": "a100_sxm",
    "l40s": "l40s",
    "l4": "l4",
}
"""Catalog device -> the table folder measured on it (an A100 40 GB runs the 80 GB's kernels)."""

GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "fp4"}
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "int4_wo": "int4", "w4a16_mxfp4": "fp4"}

MoEKey = tuple[str, int, int, int, int, int, int, str]
"""(dtype, hidden, expert intermediate, top-k, experts, MoE TP size, MoE EP size, routing) of a measured MoE layer;
routing is the table's token distribution: ``balanced``, ``power_law_1.01`` or ``power_law_1.2``."""
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}


MeasuredGrid = tuple[tuple[np.ndarray, ...], np.ndarray]
"""(axes, seconds): ``seconds[i, j, ...]`` measured at ``axes[0][i], axes[1][j], ...``; every cell filled."""


@dataclass(frozen=True)
class MeasuredAttention:
    """One (head_dim, KV dtype): grids over (batch, tokens or context, query heads) per KV-head count."""

    prefill: dict[int, MeasuredGrid]
    decode: dict[int, MeasuredGrid]


@dataclass(frozen=True)
class TableChoice:
    """Which tables were read: the GPU folder, the engine and the version, and what was asked for."""

    system: str
    engine: str
    version: str
    asked_version: str | None

    @property
    def label(self) -> str:
        return f"{self.system}/{self.engine}/{self.version}"


def data_root() -> Path:
    """The tables' folder inside the installed package (SpecError when the extra is missing)."""
    try:
        import importlib.util

        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise SpecError.at("system.engine", "measured kernel tables need: pip install 'aitrinity[silicon]'")
    return Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"


_HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def shipped_model_config(hf_id: str) -> Path | None:
    """The Hugging Face ``config.json`` the package ships for ``hf_id`` (``model_configs/<org>--<name>_config.json``),
    or None: no such file, no package, or an id that is not ``org/name`` (nothing else becomes a path)."""
    if not _HF_ID.fullmatch(hf_id) or ".." in hf_id:
        return None
    try:
        path = data_root().parents[1] / "model_configs" / f"{hf_id.replace('/', '--', 1)}_config.json"
    except SpecError:
        return None
    return path if path.is_file() else None


def available() -> bool:
    try:
        data_root()
    except SpecError:
        return False
    return True


def _version_key(v: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"[.\-+]", v))


def versions(system: str, op: str, engine: str) -> list[str]:
    folder = data_root() / system / op / engine
    return sorted((p.name for p in folder.iterdir() if p.is_dir()), key=_version_key) if folder.is_dir() else []


def choose(device: str, engine: str, version: str | None = None) -> TableChoice:
    """The GPU folder and the engine version to read: the asked version if measured, else the newest
    measured version not newer than it, else the oldest (and the output says which)."""
    system = SYSTEM_OF_DEVICE.get(device)
    if system is None or not (data_root() / system).is_dir():
        raise SpecError("system.device", device, f"a GPU with measured tables ({', '.join(SYSTEM_OF_DEVICE)})")
    if engine not in ENGINES:
        raise SpecError("system.engine", engine, f"one of {', '.join(ENGINES)}")
    have = versions(system, "gemm", engine)
    if not have:
        raise SpecError("system.engine", engine, f"an engine with GEMM tables for {system}")
    if version in have:
        chosen = version
    elif version is not None:
        older = [v for v in have if _version_key(v) <= _version_key(version)]
        chosen = older[-1] if older else have[0]
    else:
        chosen = have[-1]
    return TableChoice(system, engine, chosen, version)


def table_path(root: Path, op: str, engine: str, version: str, table: str) -> Path:
    """The file of ``table`` for ``version``: its own, or the one of the version its ``reuse.yaml`` names for that
    table (followed in turn; a cycle or an unreadable declaration leaves the version's own path, which then reads
    as missing)."""
    found = table_paths(root, op, engine, version, table)
    return found[0] if found else root / op / engine / version / f"{table}.parquet"


def table_paths(root: Path, op: str, engine: str, version: str, table: str) -> list[Path]:
    """The files of ``table`` for ``version``, its own first: a version that measured some shapes again and declares
    that "the remaining shapes reuse" an older version's table (``reuse.yaml``; TensorRT-LLM 1.3.0rc23's MoE table on
    B200, B300, GB200 and GB300 holds only DeepSeek-V4's shapes) has both; readers take a shape from the first file
    that measured it. The declaration is followed in turn; a cycle stops."""
    out: list[Path] = []
    seen: set[str] = set()
    while version not in seen:
        seen.add(version)
        folder = root / op / engine / version
        path = folder / f"{table}.parquet"
        if path.is_file():
            out.append(path)
        try:
            doc = yaml.safe_load((folder / "reuse.yaml").read_text())
        except (OSError, yaml.YAMLError):
            break
        names = [
            r.get("from_version")
            for r in (doc.get("reuse") if isinstance(doc, dict) else None) or []
            if isinstance(r, dict) and r.get("table") == table
        ]
        if not names or not names[0]:
            break
        version = str(names[0])
    return out


def _read(path: Path, columns: list[str], optional: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Columns of a parquet table; ``optional`` columns absent from older tables take their default."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SpecError.at(path.name, "reading the tables needs pyarrow: pip install 'aitrinity[silicon]'") from None
    optional = optional or {}
    try:
        present = set(pq.read_schema(path).names)
        table = pq.read_table(path, columns=[*columns, *(c for c in optional if c in present)])
    except (OSError, ValueError, KeyError) as e:  # pyarrow's ArrowInvalid is a ValueError
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SpecError.at(path, f"not a readable kernel table ({first[:120]})") from None
    out = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
    for c, default in optional.items():
        out.setdefault(c, np.full(table.num_rows, default))
    return out


def _fill(values: np.ndarray) -> np.ndarray:
    """Fill the cells a table did not measure: along each axis in turn, linear in the index between
    measured neighbours and constant past the ends; repeated until none is left."""
    v = values.copy()
    for _ in range(2 * v.ndim):
        if not np.isnan(v).any():
            break
        for axis in range(v.ndim):
            moved = np.moveaxis(v, axis, -1)
            flat = moved.reshape(-1, moved.shape[-1])
            x = np.arange(flat.shape[1])
            for row in flat:
                ok = ~np.isnan(row)
                if ok.any() and not ok.all():
                    row[~ok] = np.interp(x[~ok], x[ok], row[ok])
            v = np.moveaxis(flat.reshape(moved.shape), -1, axis)
    if np.isnan(v).any() or (v <= 0).any():
        raise ValueError("a table with no measured cell on some slice")
    return v


def _grid(keys: list[np.ndarray], seconds: np.ndarray) -> MeasuredGrid:
    """A grid from scattered rows on a (possibly incomplete) product of axis values; duplicates: the
    fastest (the engine picks its best kernel)."""
    axes = [np.unique(k.astype(np.float64)) for k in keys]
    shape = tuple(len(a) for a in axes)
    vals = np.full(shape, np.inf)
    index = tuple(np.searchsorted(a, k.astype(np.float64)) for a, k in zip(axes, keys, strict=True))
    np.minimum.at(vals, index, seconds)
    vals[np.isinf(vals)] = np.nan
    return tuple(axes), _fill(vals)


def _groups(rows: dict[str, np.ndarray], by: list[str]) -> Iterator[tuple[tuple[Any, ...], np.ndarray]]:
    """(key values, row mask) for each distinct combination of the ``by`` columns."""
    uniques, codes = zip(*(np.unique(rows[b], return_inverse=True) for b in by), strict=True)
    combined = np.zeros(len(rows[by[0]]), dtype=np.int64)
    for u, code in zip(uniques, codes, strict=True):
        combined = combined * len(u) + code.reshape(-1)
    for key in np.unique(combined):
        sel = combined == key
        first = int(np.argmax(sel))
        yield tuple(u[code.reshape(-1)[first]] for u, code in zip(uniques, codes, strict=True)), sel


def _gemm(root: Path, c: TableChoice) -> dict[str, MeasuredGrid]:
    """By dtype, from the first file (:func:`table_paths`) that measured it."""
    out: dict[str, MeasuredGrid] = {}
    paths = table_paths(root, "gemm", c.engine, c.version, "gemm_perf")
    for path in paths or [table_path(root, "gemm", c.engine, c.version, "gemm_perf")]:  # (none: reads as missing)
        rows = _read(path, ["gemm_dtype", "m", "n", "k", "latency"])
        for (dtype,), sel in _groups(rows, ["gemm_dtype"]):
            name = GEMM_DTYPES.get(str(dtype))
            if name and name not in out:
                out[name] = _grid([rows["m"][sel], rows["n"][sel], rows["k"][sel]], rows["latency"][sel] * 1e-3)
    return out


def _attention_version(c: TableChoice, op: str = "attention") -> str | None:
    have = versions(c.system, op, c.engine)
    if not have:
        return None
    older = [v for v in have if _version_key(v) <= _version_key(c.version)]
    return older[-1] if older else have[0]


MLA_HEAD_DIM = 576
"""DeepSeek's MLA as the attention kernels see it (``kv_lora_rank`` 512 + ``qk_rope_head_dim`` 64: one latent "KV head"
per rank), the shape every ``mla`` table measured (DeepSeek-V2/V3/R1, Kimi-K2)."""


def _mla(root: Path, c: TableChoice) -> dict[tuple[int, str], MeasuredAttention]:
    """The engine's MLA attention kernels (``mla/<engine>/<version>/{context,generation}_mla_perf``: FlashMLA-style,
    the prefill over the prompt, the decode over the latent cache), as one KV head of :data:`MLA_HEAD_DIM` per KV
    dtype; a version that measured only the wide-EP module (its ``wideep_*`` tables time the projections too) has
    none."""
    v = _attention_version(c, "mla")
    if v is None:
        return {}
    paths = [table_path(root, "mla", c.engine, v, f"{kind}_mla_perf") for kind in ("context", "generation")]
    if not all(p.is_file() for p in paths):
        return {}
    cols = ["batch_size", "num_heads", "kv_cache_dtype", "latency"]
    pre, dec = _read(paths[0], [*cols, "isl"]), _read(paths[1], [*cols, "step"])
    found: dict[tuple[int, str], MeasuredAttention] = {}
    for rows, length, kind in ((pre, pre["isl"], "prefill"), (dec, dec["step"] + 1, "decode")):
        for (kv,), sel in _groups(rows, ["kv_cache_dtype"]):
            name = KV_DTYPES.get(str(kv))
            if name and sel.sum() >= 8:
                grid = _grid(
                    [rows["batch_size"][sel], length[sel], rows["num_heads"][sel]], rows["latency"][sel] * 1e-3
                )
                getattr(found.setdefault((MLA_HEAD_DIM, name), MeasuredAttention({}, {})), kind)[1] = grid
    return {k: v for k, v in found.items() if v.prefill and v.decode}


def _attention(root: Path, c: TableChoice) -> dict[tuple[int, str], MeasuredAttention]:
    mla = _mla(root, c)
    v = _attention_version(c)
    if v is None:
        return mla
    cols = ["batch_size", "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype", "latency"]
    pre = _read(
        table_path(root, "attention", c.engine, v, "context_attention_perf"), [*cols, "isl"], {"window_size": 0}
    )
    dec = _read(
        table_path(root, "attention", c.engine, v, "generation_attention_perf"), [*cols, "step"], {"window_size": 0}
    )
    found: dict[tuple[int, str], MeasuredAttention] = {}
    for rows, length, kind in ((pre, pre["isl"], "prefill"), (dec, dec["step"] + 1, "decode")):
        full = rows["window_size"] == 0  # full attention; sliding windows are other rows
        for (hd, kv, kvh), sel in _groups(rows, ["head_dim", "kv_cache_dtype", "num_key_value_heads"]):
            sel = sel & full
            name = KV_DTYPES.get(str(kv))
            if not name or sel.sum() < 8:
                continue
            grid = _grid([rows["batch_size"][sel], length[sel], rows["num_heads"][sel]], rows["latency"][sel] * 1e-3)
            at = found.setdefault((int(hd), name), MeasuredAttention({}, {}))
            getattr(at, kind)[int(kvh)] = grid
    return {**mla, **{k: v for k, v in found.items() if v.prefill and v.decode}}


def _all_reduce(root: Path, c: TableChoice) -> dict[int, MeasuredGrid]:
    have = versions(c.system, "comm", c.engine)
    older = [v for v in have if _version_key(v) <= _version_key(c.version)] or have
    for v in reversed(older):
        path = table_path(root, "comm", c.engine, v, "custom_allreduce_perf")
        if path.is_file():
            rows = _read(path, ["kernel_source", "num_gpus", "message_size", "latency"])
            graph = np.array(["eager" not in str(s) for s in rows["kernel_source"]])  # CUDA-graph kernels
            out = {}
            for (n,), sel in _groups(rows, ["num_gpus"]):
                sel = sel & graph
                out[int(n)] = _grid([rows["message_size"][sel] * 2.0], rows["latency"][sel] * 1e-3)  # bf16 bytes
            return out
    return {}


def _all_to_all(root: Path) -> dict[int, MeasuredGrid]:
    nccl = root / "comm" / "nccl"
    have = sorted((p.name for p in nccl.iterdir() if p.is_dir()), key=_version_key) if nccl.is_dir() else []
    for v in reversed(have):
        path = nccl / v / "nccl_perf.parquet"
        if path.is_file():
            rows = _read(path, ["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"])
            mine = (rows["op_name"] == "alltoall") & (rows["nccl_dtype"] == "half")
            if not mine.any():
                continue
            return {
                int(n): _grid([rows["message_size"][sel & mine] * 2.0], rows["latency"][sel & mine] * 1e-3)
                for (n,), sel in _groups(rows, ["num_gpus"])
                if (sel & mine).any()
            }
    return {}


def _moe(root: Path, c: TableChoice) -> dict[MoEKey, MeasuredGrid]:
    """The engine's fused MoE kernels (routing and grouped expert GEMMs) for the model shapes measured, for each
    token distribution the table measured (uniform 'balanced', and power-law expert popularity); over the tokens of
    the step."""
    have = versions(c.system, "moe", c.engine)
    older = [v for v in have if _version_key(v) <= _version_key(c.version)] or have
    cols = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"]
    by = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    for v in reversed(older):
        paths = table_paths(root, "moe", c.engine, v, "moe_perf")
        if not paths:
            continue
        out: dict[MoEKey, MeasuredGrid] = {}
        for path in paths:  # a shape from the first file that measured it (the version's own, then the reused)
            rows = _read(path, [*cols, "moe_ep_size", "distribution", "latency"])
            for (dtype, h, f, k, e, tp, ep, routing), sel in _groups(rows, [*by, "distribution"]):
                name = MOE_DTYPES.get(str(dtype))
                key = (str(name), int(h), int(f), int(k), int(e), int(tp), int(ep), str(routing))
                if name and sel.any() and key not in out:
                    out[key] = _grid([rows["num_tokens"][sel]], rows["latency"][sel] * 1e-3)
        return out
    return {}


@dataclass(frozen=True)
class MeasuredTables:
    """What was read for one GPU and engine version."""

    choice: TableChoice
    gemm: dict[str, MeasuredGrid]
    """By dtype: bf16, fp8, fp8_block, fp4; axes (m, n, k)."""
    attention: dict[tuple[int, str], MeasuredAttention]
    """By (head_dim, KV dtype)."""
    all_reduce: dict[int, MeasuredGrid]
    """By GPU count; axis: payload bytes."""
    all_to_all: dict[int, MeasuredGrid]
    """By GPU count (NCCL's table); axis: each GPU's send buffer, bytes."""
    moe: dict[MoEKey, MeasuredGrid]
    """By model shape and MoE TP / EP sizes; axis: tokens in the step."""


@functools.lru_cache(maxsize=16)
def read(device: str, engine: str, version: str | None) -> MeasuredTables:
    """The measured tables of ``device`` under ``engine`` (``version`` or the closest measured), read once."""
    c = choose(device, engine, version)
    root = data_root() / c.system
    try:
        return MeasuredTables(
            c, _gemm(root, c), _attention(root, c), _all_reduce(root, c), _all_to_all(root), _moe(root, c)
        )
    except (ValueError, KeyError) as e:
        raise SpecError.at(root, f"kernel tables unusable ({e})") from None
