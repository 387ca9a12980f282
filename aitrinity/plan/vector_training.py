"""Vectorized pricing of many training plans at once (numpy), for the planner.

The ledger of every row comes from :func:`aitrinity.cost.training.columns`, the same function
:func:`aitrinity.cost.training.training_ledger` calls for one plan (a batch of one). What this module adds
is the pricing of those columns, row-wise: the per-resource times, the operator model's step and the
feasibility checks of :mod:`aitrinity.cost.estimate`. ``tests/plan/test_vector_training.py`` checks that
pricing against the one-plan estimate on every configuration of small spaces.

Rows share a model, a job, a system and a parallel layout ``(tp, pp)``, and differ in micro-batch, ZeRO
stage, recomputation, sequence parallelism, gradient compression and offloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from aitrinity.cost import collectives as coll
from aitrinity.cost.effects import GradSync, grad_sync
from aitrinity.cost.estimate import gpu_training_step, link_time, roofline_times
from aitrinity.cost.flops import OPERATORS_PER_LAYER
from aitrinity.cost.kernels import Kernels, roofline
from aitrinity.cost.train_operators import (
    TRAIN_OPERATOR_CLASSES,
    ClassTimes,
    MicroBatch,
    schedule,
    slowest_stage,
)
from aitrinity.cost.training import CP_GATHER, PP_TRAFFIC, Columns, columns, layout_constants
from aitrinity.cost.training import RECOMPUTE as RECOMPUTE
from aitrinity.cost.training import Rows as Rows
from aitrinity.plan.rows import combine, first_failed
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
_CHANNELS = ("intra_node", "inter_node", "host", "host_dram")


SEARCHED = ("gradient-compression", "optimizer-offload", "activation-offload")
"""The exchanges the training search chooses; the scenario's others (local SGD) apply to every candidate."""


def fixed_exchanges(base: Plan) -> list[Any]:
    """The scenario's exchanges the search keeps as they are."""
    return [x for x in base.exchanges if x.kind not in SEARCHED]


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


@dataclass(frozen=True)
class _Batch:
    """The rows of one ``(tp, pp)`` layout being priced: the scenario's model, job, base plan and system, the rows'
    ledger columns, and their link bytes and messages per channel."""

    m: ModelSpec
    job: TrainingJob
    base: Plan
    system: System
    tp: int
    pp: int
    rows: Rows
    c: Columns
    ch_bytes: dict[str, F]
    ch_msgs: dict[str, F]


def _roofline(b: _Batch) -> tuple[list[F], F]:
    """The roofline's compute, HBM and per-channel link times (:func:`aitrinity.cost.estimate.resource_times`), and
    the compute rate. Every channel is priced, host DRAM only with host memory (only offloading rows use it, and
    they are infeasible without it)."""
    system, base, job, rows, c, ch_bytes, ch_msgs = b.system, b.base, b.job, b.rows, b.c, b.ch_bytes, b.ch_msgs
    zeros = np.zeros(len(rows))
    priced = [ch for ch in _CHANNELS if ch != "host_dram" or system.host_memory is not None]
    r = roofline_times(
        system,
        base.compute_dtype,
        3.0 * c.forward + c.recompute + c.exchange,
        rows.micro_batch.astype(np.float64) * job.seq_len / base.cp,
        c.hbm_bytes,
        {ch: ch_bytes.get(ch, zeros) for ch in priced},
        {ch: ch_msgs.get(ch, zeros) for ch in priced},
    )
    return [r.compute_s, r.memory_s, *(r.links_s.get(ch, zeros) for ch in _CHANNELS)], r.rate


def _serial_sends(c: Columns, system: System, n: int) -> F:
    """The link traffic in series with the kernels: pipeline sends and CP all-gathers (``allgather``)."""
    send = np.zeros(n)
    for x in c.streams:
        link = x.channel(system)
        if x.purpose in (PP_TRAFFIC, CP_GATHER) and link is not None:
            nbytes, msgs = x.sent()
            send = send + link_time(system, link, nbytes, msgs)
    return send


def _gpu_step(b: _Batch, kernels: Kernels, times: list[F], rate: F) -> tuple[F, tuple[F, F]]:
    """A GPU's step from the operator model, row-wise (:func:`aitrinity.cost.estimate.price_training`): the step,
    and its compute and latency times. ``times``: the roofline's compute, HBM and per-channel link times, at
    ``rate`` FLOP/s."""
    m, job, base, system, tp, p, rows, c = b.m, b.job, b.base, b.system, b.tp, b.pp, b.rows, b.c
    n, mb = len(rows), c.mb
    v = rows.virtual_stages.astype(np.float64)
    zeros = np.zeros(n)
    # the micro-batch's kernels depend on (micro-batch, recompute, SP) only: time each distinct one once
    combos, inv = np.unique(rows.micro_batch * 6 + rows.recompute * 2 + rows.sequence_parallel, return_inverse=True)
    ub = (combos // 6).astype(np.float64)
    micro = MicroBatch(
        ub, job.seq_len, (combos % 6) // 2, combos % 2 > 0, base.flash_attention, base.compute_dtype, base.cp
    )
    per_mb = slowest_stage(m, kernels, tp, p, base.ep, micro)
    per_mb = ClassTimes(*(getattr(per_mb, k)[inv] for k in TRAIN_OPERATOR_CLASSES))
    opt_bytes = np.where(rows.optimizer_offload, 0.0, 2.0 * c.optimizer + c.gradients + c.weights)
    sched = schedule(per_mb, kernels, p, v, mb, _serial_sends(c, system, n) / mb, opt_bytes)
    timed_bytes, timed_msgs = coll.channel_totals([x for x in c.streams if x.timed], system, n)
    streams = []  # the operator model times the TP and PP streams itself: the links carry the rest
    for i, ch in enumerate(_CHANNELS):
        if ch in ("intra_node", "inter_node"):
            rest_b = b.ch_bytes.get(ch, zeros) - timed_bytes.get(ch, zeros)
            rest_m = b.ch_msgs.get(ch, zeros) - timed_msgs.get(ch, zeros)
            streams.append(link_time(system, ch, rest_b, rest_m))
        else:
            streams.append(times[2 + i])
    sms = [ch in ("intra_node", "inter_node") for ch in _CHANNELS]
    gpu = gpu_training_step(sched, c.exchange / rate, times[1:], streams, system, sms)
    return np.asarray(gpu.time_s), (np.asarray(gpu.compute_s), np.asarray(gpu.latency_s))


def _checks(b: _Batch) -> list[NDArray[np.bool_]]:
    """The feasibility constraints, in order (the first that fails names the reason)."""
    m, system, tp, p, rows, c = b.m, b.system, b.tp, b.pp, b.rows, b.c
    off, a_off, zero = rows.optimizer_offload, rows.activation_offload, rows.zero
    host_cap = system.tier_capacity_per_device("host") or 0.0
    return [
        ~c.divisible,
        c.hbm_resident > system.usable_memory_bytes,
        c.host_resident > host_cap,
        c.heavy & (zero >= 2),
        (off & (zero >= 3)) | ((off | (a_off > 0)) & (system.host_memory is None)),
        rows.sequence_parallel & (tp == 1),
        ~chunks_fit(m.num_layers, p, rows.virtual_stages),
        (zero >= 3) & (c.period > 1),
    ]


def price_rows(
    m: ModelSpec,
    job: TrainingJob,
    base: Plan,
    system: System,
    tp: int,
    pp: int,
    rows: Rows,
    kernels: Kernels | None = None,
) -> Priced:
    """Price every row for layout ``(tp, pp)``; ``base`` supplies dtypes, ep, cp, flash attention, optimizer.

    A GPU's step comes from the operator model (``kernels``, default the catalog roofline of the device),
    as :func:`aitrinity.cost.estimate.estimate_training` prices one plan; other devices keep the phase
    roofline of :func:`aitrinity.cost.estimate.price`."""
    dp = system.num_devices // (tp * pp * base.cp)
    L = layout_constants(m, job, base, tp, pp, dp)
    sync = _syncs(m, base)
    c = columns(m, job, base, L, rows, [sync[x] for x in COMPRESSION])
    n, p, mb = len(rows), pp, c.mb
    v = rows.virtual_stages.astype(np.float64)
    ch_bytes, ch_msgs = coll.channel_totals(c.streams, system, n)  # link bytes and messages per channel
    batch = _Batch(m, job, base, system, tp, pp, rows, c, ch_bytes, ch_msgs)

    # --- pricing (the roofline of estimate.resource_times, and combine)
    times, rate = _roofline(batch)
    zeros = np.zeros(n)
    if kernels is None and system.device.kind == "gpu":
        kernels = roofline(system.device)
    if kernels is None:
        bubble = (p - 1) / (mb * v) * times[0]
        operators = mb * c.layers_peak * OPERATORS_PER_LAYER * (3.0 + (rows.recompute == 2))
        step = combine(times, system) + bubble + operators * system.eff.op_overhead_s
    else:
        step, gpu_times = _gpu_step(batch, kernels, times, rate)
        times = [gpu_times[0], *times[1:], gpu_times[1]]

    # --- feasibility, first failed constraint wins
    reason = first_failed(_checks(batch), n)
    nodes = system.num_devices
    price = system.price_per_hour_usd
    return Priced(
        feasible=reason == 0,
        reason=reason,
        step_time_s=step,
        hbm_bytes=c.hbm_resident,
        host_bytes=c.host_resident,
        link_bytes=ch_bytes.get("intra_node", zeros) + ch_bytes.get("inter_node", zeros) + ch_bytes.get("host", zeros),
        compute_s=times[0],
        binding=np.argmax(np.stack(times), axis=0),
        usd_per_step=step * (price * nodes / 3600.0 if price is not None else np.nan),
        joules_per_step=step * system.power_W * nodes,
    )
