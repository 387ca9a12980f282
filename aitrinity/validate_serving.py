"""``trinity validate --serving FILE``: price every measured serving run of a CSV and say how far off we are.

The file's format is that of ``aiconfigurator-core``'s end-to-end samples (and of
``../shared/validation/serving_h100_dense.csv``): one row per benchmark run of a server at a fixed
concurrency -- ``model_path`` (a Hugging Face id), ``system`` (``h100_sxm``), ``backend`` and
``backend_version``, ``mode``, ``isl``, ``osl``, ``batch_size`` (the concurrency), ``gemm_quant_mode``
(``''`` = bf16, ``fp8``, ``nvfp4``), and the measured ``silicon_ttft_ms`` and ``silicon_tpot_ms``. The layout:

- ``mode: agg`` (prefill and decode on the same GPUs): ``tp_size``, ``pp_size``, ``attention_dp_size``,
  ``moe_tp_size``, ``moe_ep_size`` -- ``tp x attention_dp`` GPUs, the MoE layers split ``moe_tp x moe_ep`` over
  them (:class:`~aitrinity.cost.operators.Layout`); the clients spread over the ``attention_dp`` replicas.
  Priced by :func:`aitrinity.cost.concurrency.steady_state`.
- ``mode: disagg``: the same five sizes with a ``prefill_`` and a ``decode_`` prefix, each pool's
  ``*_num_workers`` and ``*_batch_size`` (an engine's cap on the sequences of one replica). Priced by
  :func:`aitrinity.cost.disaggregated.disaggregated_steady_state`, the KV crossing NVLink when both pools fit
  in one NVLink domain of the GPU, else the GPU's scale-out NIC.

Pipeline parallelism is priced as ``trinity diagnose`` prices it at a fixed concurrency: a token passes every
stage, so a step is the whole model on one TP group (PP adds capacity, not speed).

The kernels are those :mod:`aitrinity.silicon` chooses (the measured tables with ``[silicon]``, else the
catalog roofline). A run's model is the catalog's, or with ``[silicon]`` the one read from the ``config.json``
aiconfigurator-core ships for its id (:func:`aitrinity.catalog.model`; said in the notes). Rows the model cannot
express (a model neither describes, an unknown GPU, a MoE split that does not fit the
GPUs or the experts, a disaggregated run without its pools) are counted and listed with the reason, never
silently dropped.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from aitrinity import catalog, silicon
from aitrinity.catalog import kernel_tables
from aitrinity.catalog.kernel_tables import SYSTEM_OF_DEVICE
from aitrinity.cost.concurrency import steady_state
from aitrinity.cost.disaggregated import KVLink, Pool, disaggregated_steady_state
from aitrinity.cost.kernels import kernel_notes
from aitrinity.cost.kv_pool import kv_pool, kv_slots
from aitrinity.cost.ledger import Result
from aitrinity.cost.operators import Layout, ScaleOut
from aitrinity.errors import SpecError, TrinityError
from aitrinity.spec.hardware import DeviceSpec
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import check_tp_heads

DEVICE_OF_SYSTEM = {system: device for device, system in reversed(SYSTEM_OF_DEVICE.items())}
"""Table folder -> catalog device (the first catalog device listed for it: a100_sxm is the 80 GB part)."""
DTYPE_OF_QUANT = {"": "bf16", "bfloat16": "bf16", "float16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4"}
REQUIRED = (
    "model_path",
    "system",
    "backend",
    "mode",
    "isl",
    "osl",
    "batch_size",
    "tp_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
)
WITHIN = 0.15


class PricedRun(Result):
    id: str
    model: str
    device: str
    engine: str
    dtype: str
    tp: int
    """The TP size of the (decode) pool."""
    layout: str = ""
    """Beyond plain TP: ``tp1 dp8 ep8``, ``pp2``, ``prefill 2 x tp4 + decode 1 x tp8``; empty for ``tpN``."""
    concurrency: int
    isl: int
    osl: int
    ttft_measured_s: float
    ttft_predicted_s: float
    tpot_measured_s: float
    tpot_predicted_s: float


class Skipped(Result):
    id: str
    reason: str


class ErrorStats(Result):
    """Relative errors ``(predicted - measured) / measured`` of one quantity over a group of runs."""

    runs: int
    mape: float
    median_error: float
    within_15: float


class GroupStats(Result):
    group: str
    """``all``, or ``model=...``, ``engine=...``, ``dtype=...``, ``tp=...``."""
    ttft: ErrorStats
    tpot: ErrorStats


class ServingValidation(Result):
    file: str
    kernels: list[str]
    """Kernel sources used (``table h100_sxm/vllm/0.24.0``, ``roofline (catalog h100-sxm)``)."""
    notes: list[str]
    groups: list[GroupStats]
    runs: list[PricedRun]
    skipped: list[Skipped]

    @property
    def overall(self) -> GroupStats:
        return self.groups[0]


@dataclasses.dataclass(frozen=True)
class _Pool:
    """One engine layout of a run: ``workers`` instances of ``tp x dp`` GPUs (``pp`` stages), MoE ``moe_tp x ep``."""

    tp: int
    pp: int = 1
    dp: int = 1
    ep: int = 1
    workers: int = 1
    batch: float = np.inf

    def label(self) -> str:
        parts = [f"tp{self.tp}"] + [f"{k}{v}" for k, v in (("pp", self.pp), ("dp", self.dp), ("ep", self.ep)) if v > 1]
        return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class _Row:
    id: str
    model: str
    device: str
    engine: str
    version: str | None
    dtype: str
    pool: _Pool
    """The aggregated layout, or the decode pool of a disaggregated run."""
    prefill: _Pool | None
    """The prefill pool of a disaggregated run; None: aggregated."""
    c: int
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    fp8_block: bool = False
    """Its fp8 weights are block-scaled (``gemm_quant_mode`` or ``moe_quant_mode`` ``fp8_block``): priced with the
    block-scaled kernels' tables (:func:`aitrinity.silicon.block_scaled`)."""

    @property
    def tp(self) -> int:
        return self.pool.tp

    @property
    def layout(self) -> str:
        if self.prefill is not None:
            p, d = self.prefill, self.pool
            return f"prefill {p.workers} x {p.label()} + decode {d.workers} x {d.label()}"
        return "" if self.pool.label() == f"tp{self.pool.tp}" else self.pool.label()


def read_rows(path: Path) -> tuple[list[_Row], list[Skipped]]:
    """Parse the CSV (bytes, decoded with a clear error); rows the model cannot express come back as Skipped."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as e:
        raise SpecError.at(path, f"cannot read the file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise SpecError.at(path, f"not UTF-8 text (byte {e.start})") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise SpecError.at(path, f"not a serving-runs CSV: missing column(s) {', '.join(missing)}")
    rows: list[_Row] = []
    skipped: list[Skipped] = []
    for n, raw in enumerate(reader, start=2):
        rid = raw.get("id") or f"line {n}"
        try:
            row = _parse(rid, raw)
        except _Skip as s:
            skipped.append(Skipped(id=rid, reason=str(s)))
            continue
        except (ValueError, TypeError):
            raise SpecError.at(f"{path}:{n}", "a run with non-numeric or missing sizes or times") from None
        rows.append(row)
    return rows, skipped


class _Skip(Exception):
    pass


def _int(raw: dict[str, str], key: str, default: int = 1) -> int:
    v = (raw.get(key) or "").strip()
    return int(float(v)) if v else default


def _parse(rid: str, raw: dict[str, str]) -> _Row:
    mode = raw["mode"].strip()
    if mode not in ("agg", "disagg"):
        raise _Skip(f"mode {mode!r}: neither aggregated ('agg') nor disaggregated ('disagg')")
    device = DEVICE_OF_SYSTEM.get(raw["system"].strip())
    if device is None:
        raise _Skip(f"no catalog device for system {raw['system']!r}")
    model = _model_name(raw["model_path"].strip())
    quant = raw.get("gemm_quant_mode", "").strip()
    if quant not in DTYPE_OF_QUANT:
        raise _Skip(f"GEMM precision {quant!r} not modelled")
    engine = raw["backend"].strip()
    if engine not in silicon.ENGINES:
        raise _Skip(f"engine {engine!r} unknown")
    values = [float(raw[k]) for k in ("isl", "osl", "batch_size", "silicon_ttft_ms", "silicon_tpot_ms")]
    if not all(np.isfinite(values)) or min(values) <= 0:
        raise _Skip("a size or a measured time that is not a positive number")
    m = catalog.model(model)
    if mode == "agg":
        pool, prefill = _pool(m, raw, ""), None
    else:
        if not (raw.get("prefill_tp_size") or "").strip() or not (raw.get("decode_tp_size") or "").strip():
            raise _Skip("a disaggregated run without its prefill_/decode_ pool sizes")
        pool, prefill = _pool(m, raw, "decode_"), _pool(m, raw, "prefill_")
    return _Row(
        id=rid,
        model=model,
        device=device,
        engine=engine,
        version=(raw.get("backend_version") or "").strip() or None,
        dtype=DTYPE_OF_QUANT[quant],
        pool=pool,
        prefill=prefill,
        c=_int(raw, "batch_size"),
        isl=_int(raw, "isl"),
        osl=_int(raw, "osl"),
        ttft_ms=float(raw["silicon_ttft_ms"]),
        tpot_ms=float(raw["silicon_tpot_ms"]),
        fp8_block="fp8_block" in (quant, (raw.get("moe_quant_mode") or "").strip()),
    )


def _model_name(model_path: str) -> str:
    """A run's model: the catalog's name for it, else its Hugging Face id where aiconfigurator-core ships its
    ``config.json`` (the package's model list is wider than the catalog's) and the importer reads it."""
    try:
        return catalog.canonical("models", model_path)
    except TrinityError:
        pass
    if kernel_tables.shipped_model_config(model_path) is None:
        raise _Skip(f"no catalog model for {model_path!r}, nor a config.json of it in aiconfigurator-core")
    try:
        catalog.model(model_path)  # (from the shipped config)
    except SpecError as e:  # (a new architecture: the field and value say which, e.g. model_type 'qwen3_5')
        why = f"{e.field} {e.value!r}" if e.field else e.expected
        raise _Skip(
            f"{model_path!r}: aiconfigurator-core's config.json of it is not one the importer reads ({why})"
        ) from None
    return model_path


def _pool(m: ModelSpec, raw: dict[str, str], prefix: str) -> _Pool:
    """One layout from the columns with ``prefix`` (``''``, ``prefill_`` or ``decode_``)."""
    tp, pp, dp = (_int(raw, f"{prefix}{k}_size") for k in ("tp", "pp", "attention_dp"))
    if min(tp, pp, dp) < 1:
        raise _Skip(f"{prefix}tp/pp/attention_dp sizes below 1")
    try:
        check_tp_heads(m, tp, f"{prefix}tp_size")
    except SpecError as e:
        raise _Skip(str(e)) from None
    ep = 1
    if m.moe:  # the MoE split; a dense model's moe_* columns say nothing (the files hold 1 or 0 there)
        ep, moe_tp = _int(raw, f"{prefix}moe_ep_size", 0), _int(raw, f"{prefix}moe_tp_size", 0)
        ep = ep or (tp * dp // moe_tp if moe_tp else dp)
        moe_tp = moe_tp or tp * dp // max(ep, 1)
        if ep < 1 or moe_tp * ep != tp * dp:
            raise _Skip(f"{prefix}moe_tp x moe_ep ({moe_tp} x {ep}) is not the {tp * dp} GPUs of tp x attention_dp")
        if m.moe.num_experts % ep:
            raise _Skip(f"{prefix}moe_ep {ep} does not divide the {m.moe.num_experts} experts")
    workers = _int(raw, f"{prefix}num_workers") if prefix else 1
    batch = float(_int(raw, f"{prefix}batch_size", 0)) if prefix else 0.0
    return _Pool(tp=tp, pp=pp, dp=dp, ep=ep, workers=max(workers, 1), batch=batch if batch > 0 else np.inf)


def _stats(errors: Iterable[float]) -> ErrorStats:
    e = np.fromiter(errors, dtype=np.float64)
    return ErrorStats(
        runs=len(e),
        mape=float(np.mean(np.abs(e))),
        median_error=float(np.median(e)),
        within_15=float(np.mean(np.abs(e) <= WITHIN)),
    )


def price_rows(
    rows: list[_Row], tables: bool = True, progress: Callable[[int, int], None] | None = None
) -> tuple[list[PricedRun], list[str], list[str]]:
    """Price every row, one vectorized call per (model, GPU, engine, dtype, layout) group."""
    groups: dict[tuple[str, str, str, str | None, str, bool, _Pool, _Pool | None], list[_Row]] = defaultdict(list)
    for r in rows:
        groups[(r.model, r.device, r.engine, r.version, r.dtype, r.fp8_block, r.pool, r.prefill)].append(r)
    priced: list[PricedRun] = []
    sources: set[str] = set()
    notes: set[str] = set()
    for done, ((model, device, engine, version, dtype, block, pool, prefill), rs) in enumerate(groups.items(), 1):
        m, dev = catalog.model(model), catalog.device(device)
        if model != m.name:
            notes.add(f"{model}: not in the catalog; priced from the config.json aiconfigurator-core ships for it")
        choice = silicon.kernels(dev, engine, version, tables, fp8_block=block)
        sources.add(choice.source)
        if choice.note:
            notes.add(choice.note)
        c, isl, osl = (np.array([getattr(r, f) for r in rs], dtype=np.float64) for f in ("c", "isl", "osl"))
        if prefill is None:
            lay = _layout(pool, dtype, engine, dev)
            slots = kv_slots(m, lay, dev.memory_capacity_bytes, isl, osl, kv_pool(engine), pool.pp)
            ss = steady_state(m, choice.kernels, lay, c / pool.dp, isl, osl, kv_slots=slots)
            ttft, tpot = ss.ttft_s, ss.tpot_s
        else:
            ds = disaggregated_steady_state(
                m,
                choice.kernels,
                Pool(prefill.workers, _layout(prefill, dtype, engine, dev), prefill.batch),
                Pool(pool.workers, _layout(pool, dtype, engine, dev), pool.batch),
                _kv_link(
                    dev,
                    prefill.workers * prefill.tp * prefill.dp * prefill.pp + pool.workers * pool.tp * pool.dp * pool.pp,
                ),
                c,
                isl,
                osl,
            )
            ttft, tpot = ds.ttft_s, ds.tpot_s
        priced += [_priced_run(r, float(ttft[i]), float(tpot[i])) for i, r in enumerate(rs)]
        notes.update(f"{choice.source}: {note}" for note in kernel_notes(choice.kernels))
        if progress:
            progress(done, len(groups))
    return priced, sorted(sources), sorted(notes)


def _priced_run(r: _Row, ttft_s: float, tpot_s: float) -> PricedRun:
    return PricedRun(
        id=r.id,
        model=r.model,
        device=r.device,
        engine=r.engine,
        dtype=r.dtype,
        tp=r.tp,
        layout=r.layout,
        concurrency=r.c,
        isl=r.isl,
        osl=r.osl,
        ttft_measured_s=r.ttft_ms * 1e-3,
        ttft_predicted_s=ttft_s,
        tpot_measured_s=r.tpot_ms * 1e-3,
        tpot_predicted_s=tpot_s,
    )


def row_layout(r: _Row) -> Layout:
    """The layout a measured run's (aggregated) server ran, as this module prices it."""
    return _layout(r.pool, r.dtype, r.engine, catalog.device(r.device))


def _layout(pool: _Pool, dtype: str, engine: str, dev: DeviceSpec) -> Layout:
    # TensorRT-LLM's fp8 runs keep an fp8 KV cache (NVIDIA's FP8 checkpoints quantize it; docs/silicon.md)
    kv = "fp8" if engine == "trtllm" and dtype == "fp8" else "bf16"
    return Layout(
        tp=pool.tp,
        ep=pool.ep,
        attention_dp=pool.dp,
        weight_dtype=dtype,
        kv_dtype=kv,
        engine=engine,
        # the device's usual nodes (or NVLink racks) and the NIC between them: an EP group wider than one crosses it
        scale_out=ScaleOut.over(dev.typical_devices_per_node, catalog.link(dev.typical_inter_node_link)),
    )


def _kv_link(dev: DeviceSpec, gpus: int) -> KVLink:
    """NVLink when both pools fit in one NVLink domain of the GPU, else its scale-out NIC; at the link's efficiency."""
    name = dev.typical_intra_node_link if gpus <= dev.typical_devices_per_node else dev.typical_inter_node_link
    return KVLink.of(catalog.link(name))


def summarize(priced: list[PricedRun]) -> list[GroupStats]:
    def err(p: PricedRun, q: str) -> float:
        meas = getattr(p, f"{q}_measured_s")
        return float((getattr(p, f"{q}_predicted_s") - meas) / meas)

    keyed: dict[str, list[PricedRun]] = defaultdict(list)
    for p in priced:
        keyed["all"].append(p)
        for k in ("model", "engine", "dtype", "tp", "device"):
            keyed[f"{k}={getattr(p, k)}"].append(p)
        if p.layout:  # beyond plain TP: attention DP, EP, PP, disaggregated pools
            keyed[f"layout={p.layout}"].append(p)
    return [
        GroupStats(group=g, ttft=_stats(err(p, "ttft") for p in ps), tpot=_stats(err(p, "tpot") for p in ps))
        for g, ps in sorted(keyed.items(), key=lambda kv: (kv[0] != "all", kv[0]))
    ]


def validate(
    path: str | Path, tables: bool = True, progress: Callable[[int, int], None] | None = None
) -> ServingValidation:
    p = Path(path)
    rows, skipped = read_rows(p)
    if not rows:
        raise SpecError.at(p, f"no run the model can express ({len(skipped)} skipped)")
    priced, sources, notes = price_rows(rows, tables, progress)
    return ServingValidation(
        file=str(p), kernels=sources, notes=notes, groups=summarize(priced), runs=priced, skipped=skipped
    )


def markdown(report: ServingValidation) -> str:
    """The error table: one row per group (overall first), then the kernels used and the skipped runs."""
    lines = [
        f"{len(report.runs)} runs of {Path(report.file).name} priced with {', '.join(report.kernels)}"
        f" ({len(report.skipped)} skipped)",
        "",
        "| group | runs | TTFT MAPE | TTFT median | TTFT within 15% | TPOT MAPE | TPOT median | TPOT within 15% |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in report.groups:
        t, p = g.ttft, g.tpot
        lines.append(
            f"| {g.group} | {t.runs} | {t.mape:.1%} | {t.median_error:+.1%} | {t.within_15:.0%} "
            f"| {p.mape:.1%} | {p.median_error:+.1%} | {p.within_15:.0%} |"
        )
    reasons: dict[str, int] = defaultdict(int)
    for s in report.skipped:
        reasons[s.reason] += 1
    for reason, n in sorted(reasons.items()):
        lines.append(f"\nskipped {n}: {reason}")
    return "\n".join(lines)
