"""Vectorized pricing of many training plans at once (numpy), for the planner.

The ledger of every row comes from :func:`aitrinity.cost.training.columns` and its price from
:func:`aitrinity.cost.training_pricing.price_columns`: the functions ``trinity diagnose`` calls for one plan (a
batch of one). What this module adds is the planner's own part: the grid of rows, the compressors' effects
computed once per scenario, the feasibility checks as columns (the one-plan path raises or reports a memory check
instead: ``tests/plan/test_vector_training.py`` checks that they agree) and the $ and J of every row.

Rows share a model, a job, a system and a parallel layout ``(tp, pp)``, and differ in micro-batch, ZeRO
stage, recomputation, sequence parallelism, gradient compression and offloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from aitrinity.cost.effects import GradSync, grad_sync
from aitrinity.cost.kernels import Kernels, roofline
from aitrinity.cost.serving_pricing import usd_per_s, watts
from aitrinity.cost.training import RECOMPUTE as RECOMPUTE
from aitrinity.cost.training import Columns, LayoutConstants, Memory, columns, layout_constants, memory_columns
from aitrinity.cost.training import Rows as Rows
from aitrinity.cost.training_pricing import TrainingRows, price_columns
from aitrinity.plan import registry
from aitrinity.plan.rows import first_failed, first_largest
from aitrinity.spec.exchanges import GradientCompression
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, System, TrainingJob, chunks_fit

F = NDArray[np.float64]
Ints = NDArray[np.int64]
B = NDArray[np.bool_]

COMPRESSION = ("none", "int8", "powersgd")
"""Gradient compressors the planner considers (PowerSGD at rank 4)."""
POWERSGD_RANK = 4


@dataclass(frozen=True)
class Priced:
    """What the planner needs per row."""

    feasible: B
    reason: Ints  # index into REASONS (0 = feasible)
    step_time_s: F
    hbm_bytes: F
    """Peak device-memory bytes on the busiest device."""
    host_bytes: F
    link_bytes: F
    """Bytes one device sends over every link per step."""
    compute_s: F
    binding: Ints  # index into RESOURCES: the longest resource time
    usd_per_step: F
    joules_per_step: F


REASONS = (
    "feasible",
    "global_batch not divisible by dp x micro_batch",
    "device memory",
    "host memory",
    "compressor needs zero <= 1",
    "offload needs host memory (and zero <= 2 for the optimizer)",
    "sequence parallel needs tp > 1",
    "virtual stages without a pipeline, or more chunks than layers (+ embedding and loss)",
    "local SGD needs zero <= 2",
)
RESOURCES = (
    "compute",
    "device-memory bandwidth",
    "intra-node link",
    "inter-node link",
    "host link",
    "host memory",
    "operator launch / collective latency",
)


def fixed_exchanges(base: Plan) -> list[Any]:
    """The scenario's exchanges the search keeps as they are (local SGD, registered techniques): all but the
    ``plan.exchanges`` entries of the grid's dimensions (:func:`aitrinity.plan.registry.dimensions`), which the
    search chooses."""
    searched = {kind for kind, _ in registry.dimensions() if registry.get(kind).spec is not None}
    return [x for x in base.exchanges if x.kind not in searched]


def _plan_for(base: Plan, tp: int, pp: int, rec: str, sp: bool, comp: str) -> Plan:
    ex: list[Any] = fixed_exchanges(base)
    if comp != "none":
        ex.append(GradientCompression(kind="gradient-compression", method=comp, rank=POWERSGD_RANK))
    return base.model_copy(
        update={"tp": tp, "pp": pp, "recompute": rec, "sequence_parallel": sp, "exchanges": ex, "dp": None, "zero": 0}
    )


_SYNC_CACHE: dict[tuple[str, str, str], dict[str, GradSync]] = {}


def _syncs(m: ModelSpec, base: Plan) -> dict[str, GradSync]:
    """The compressors' effects depend on the architecture, the gradient dtype and the scenario's other
    exchanges (local SGD, registered techniques) only: computed once."""
    fixed = fixed_exchanges(base)
    key = (m.model_dump_json(include=_ARCH), base.grads_dtype, "|".join(x.model_dump_json() for x in fixed))
    if key not in _SYNC_CACHE:
        plan = Plan.model_validate({"grad_dtype": base.grads_dtype}).model_copy(update={"exchanges": fixed})
        _SYNC_CACHE[key] = {c: grad_sync(m, _plan_for(plan, 1, 1, "none", False, c)) for c in COMPRESSION}
    return _SYNC_CACHE[key]


_ARCH = {
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "mlp",
    "tie_embeddings",
    "moe",
    "mla",
    "qkv_bias",
    "linear_bias",
}


def _checks(m: ModelSpec, system: System, tp: int, pp: int, rows: Rows, mem: Memory) -> list[NDArray[np.bool_]]:
    """The feasibility constraints, in order (the first that fails names the reason)."""
    off, a_off, zero = rows.optimizer_offload, rows.activation_offload, rows.zero
    host_cap = system.tier_capacity_per_device("host") or 0.0
    return [
        ~mem.divisible,
        mem.hbm_resident > system.usable_memory_bytes,
        mem.host_resident > host_cap,
        mem.heavy & (zero >= 2),
        (off & (zero >= 3)) | ((off | (a_off > 0)) & (system.host_memory is None)),
        rows.sequence_parallel & (tp == 1),
        ~chunks_fit(m.num_layers, pp, rows.virtual_stages),
        (zero >= 3) & (mem.period > 1),
    ]


@dataclass
class LayoutLedger:
    """The part of pricing one layout's rows that no quantity of the system enters: the layout's constants, every
    row's memory section and the ledger columns of the rows last timed. It depends on the model, the job, the plan,
    the layout (``tp``, ``pp`` and ``dp``) and the rows only, so that the searches of a hardware sweep build it once
    and price it on each value's system (:class:`aitrinity.plan.search.Reuse`)."""

    m: ModelSpec
    job: TrainingJob
    base: Plan
    rows: Rows
    L: LayoutConstants
    syncs: list[GradSync]
    memory: Memory
    """Every row's memory section (:func:`aitrinity.cost.training.memory_columns`)."""
    _timed: Ints | None = None
    _some: tuple[Rows, Columns] | None = None

    def timed(self, timed: Ints) -> tuple[Rows, Columns]:
        """Rows ``timed`` and their ledger columns: built again only when other rows are asked for (a sweep of
        bandwidths or FLOPs times the same feasible rows at every value; of capacities, not)."""
        if self._some is None or self._timed is None or not np.array_equal(self._timed, timed):
            rows, mem = self.rows, self.memory
            some, some_mem = (rows, mem) if len(timed) == len(rows) else (rows.take(timed), mem.take(timed))
            self._some = (some, columns(self.m, self.job, self.base, self.L, some, self.syncs, some_mem))
            self._timed = timed
        return self._some


def layout_ledger(m: ModelSpec, job: TrainingJob, base: Plan, tp: int, pp: int, dp: int, rows: Rows) -> LayoutLedger:
    """The system-free part of pricing ``rows`` on layout ``(tp, pp)`` with ``dp`` data-parallel replicas."""
    L = layout_constants(m, job, base, tp, pp, dp)
    sync = _syncs(m, base)
    syncs = [sync[x] for x in COMPRESSION]
    return LayoutLedger(m, job, base, rows, L, syncs, memory_columns(m, job, base, L, rows, syncs))


def price_rows(
    m: ModelSpec,
    job: TrainingJob,
    base: Plan,
    system: System,
    tp: int,
    pp: int,
    rows: Rows,
    kernels: Kernels | None = None,
    every_row: bool = True,
    shared: dict[tuple[Any, ...], Any] | None = None,
    ledger: LayoutLedger | None = None,
) -> Priced:
    """Price every row for layout ``(tp, pp)``; ``base`` supplies dtypes, ep, cp, flash attention, optimizer.

    The rows' ledger columns (:func:`aitrinity.cost.training.columns`) priced by
    :func:`aitrinity.cost.training_pricing.price_columns`, as ``trinity diagnose`` prices one plan: the operator model
    on a GPU (``kernels``, default the catalog roofline of the device), the phase roofline on other devices.
    ``every_row=False`` times the feasible rows only (the search's case: most rows fail a check, and the checks
    need the memory columns only); the others' step time, compute, link bytes, $ and J are NaN, their binding 0.
    ``shared``: a search's store of what its layouts share (:attr:`aitrinity.cost.training_pricing.TrainingRows.shared`:
    one model, job, system, kernels and grid of rows for every call given it). ``ledger``: the rows'
    :func:`layout_ledger` on this model, job, plan and layout, when the caller keeps it (a hardware sweep)."""
    dp = system.num_devices // (tp * pp * base.cp)
    if ledger is None:
        ledger = layout_ledger(m, job, base, tp, pp, dp, rows)
    elif (ledger.L.tp, ledger.L.pp, ledger.L.dp) != (tp, pp, dp) or ledger.rows is not rows or ledger.base is not base:
        raise ValueError("a layout ledger priced with another layout, plan or rows than it was built for")
    mem = ledger.memory
    if kernels is None and system.device.kind == "gpu":
        kernels = roofline(system.device)
    reason = first_failed(_checks(m, system, tp, pp, rows, mem), len(rows))  # the first failed constraint wins
    feasible = reason == 0
    n = len(rows)
    step, compute, link = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    binding = np.zeros(n, dtype=np.int64)
    timed = np.arange(n) if every_row else np.flatnonzero(feasible)
    if len(timed):
        some, c = ledger.timed(timed)
        sp = price_columns(TrainingRows(m, job.seq_len, base, system, (tp, pp), some, c, shared), kernels)
        zeros = np.zeros(len(timed))
        step[timed], compute[timed] = sp.step_s, sp.compute_s
        link[timed] = sum((sp.link_bytes.get(ch, zeros) for ch in ("intra_node", "inter_node", "host")), zeros)
        binding[timed] = first_largest(sp.resources if kernels is not None else sp.resources[:-1])
    return Priced(
        feasible=feasible,
        reason=reason,
        step_time_s=step,
        hbm_bytes=mem.hbm_resident,
        host_bytes=mem.host_resident,
        link_bytes=link,
        compute_s=compute,
        binding=binding,
        usd_per_step=step * usd_per_s(system),
        joules_per_step=step * watts(system),
    )
