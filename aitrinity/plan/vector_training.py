"""Vectorized pricing of many training plans at once (numpy), for the planner.

It evaluates the same formulas as :func:`aitrinity.cost.training.training_ledger`
followed by :func:`aitrinity.cost.estimate.price`, for arrays of plans that
share a model, a job, a system and a parallel layout ``(tp, pp)``, and differ in
micro-batch, ZeRO stage, recomputation, sequence parallelism, gradient
compression and optimizer offload. ``tests/plan/test_vector_training.py``
checks every configuration of small spaces against the scalar ledger; the
scalar code is the reference, this is the fast path.

Structure: everything that depends only on ``(tp, pp)`` (stage partition,
parameters per stage, FLOPs per stage, per-layer activation coefficients) is
computed once per layout in Python; everything else is numpy over the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from aitrinity.cost import collectives as coll
from aitrinity.cost.effects import GradSync, grad_sync
from aitrinity.cost.flops import OPERATORS_PER_LAYER, layer_dense_flops, score_flops_per_query
from aitrinity.cost.kernels import Kernels, roofline
from aitrinity.cost.memory import layer_activation_bytes, layer_activations, optimizer_bytes_per_param
from aitrinity.cost.train_operators import (
    RECOMPUTE_INDEX,
    TRAIN_OPERATOR_CLASSES,
    ClassTimes,
    MicroBatch,
    schedule,
    slowest_stage,
)
from aitrinity.cost.training import Layout, stage_layers, stage_params
from aitrinity.plan.rows import combine, first_failed
from aitrinity.spec.exchanges import GradientCompression
from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, System, TrainingJob

F = NDArray[np.float64]
Ints = NDArray[np.int64]
B = NDArray[np.bool_]

RECOMPUTE = tuple(RECOMPUTE_INDEX)
COMPRESSION = ("none", "int8", "powersgd")
"""Gradient compressors the planner considers (PowerSGD at rank 4)."""
POWERSGD_RANK = 4


@dataclass(frozen=True)
class Rows:
    """One row per candidate plan (all arrays of the same length)."""

    micro_batch: Ints
    zero: Ints
    recompute: Ints  # index into RECOMPUTE
    sequence_parallel: B
    compression: Ints  # index into COMPRESSION
    optimizer_offload: B
    virtual_stages: Ints
    activation_offload: F
    """Fraction of saved activations kept in host memory (0 = none)."""

    def __len__(self) -> int:
        return len(self.micro_batch)

    @classmethod
    def from_grid(cls, grid: list[tuple[int, int, int, bool, int, bool, int, float]]) -> Rows:
        """Rows from tuples (micro_batch, zero, recompute, sp, compression, optimizer offload, virtual stages,
        activation offload)."""
        cols = list(zip(*grid, strict=True))
        types = (np.int64, np.int64, np.int64, np.bool_, np.int64, np.bool_, np.int64, np.float64)
        return cls(*(np.array(c, dtype=t) for c, t in zip(cols, types, strict=True)))


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
    "layers not divisible by pp x virtual stages",
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


@dataclass(frozen=True)
class _Layout:
    """Per-(tp, pp) constants."""

    tp: int
    pp: int
    dp: int
    rep: list[float]
    expert: list[float]
    layers: list[tuple[int, int]]
    act_dense: dict[tuple[int, bool], float]  # (recompute index, sp) -> bytes per layer for b = 1
    act_moe: dict[tuple[int, bool], float]
    dense_f: float  # busiest stage forward dense FLOPs per token through the pipeline, / tp
    score_f: float
    sync: dict[str, GradSync]


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


def _layout(m: ModelSpec, job: TrainingJob, base: Plan, system: System, tp: int, pp: int) -> _Layout:
    dp = system.num_devices // (tp * pp)
    lay = Layout(tp, pp, dp, base.ep, 1, 1)
    rep, expert = zip(*(stage_params(m, lay, st) for st in range(pp)), strict=True)
    act = BYTES_PER_DTYPE[base.compute_dtype]
    la_dense = layer_activations(m, job.seq_len, 1, False, act)
    la_moe = layer_activations(m, job.seq_len, 1, True, act)
    act_dense, act_moe = {}, {}
    for ri, rec in enumerate(RECOMPUTE):
        for sp in (False, True):
            p = base.model_copy(update={"tp": tp, "recompute": rec, "sequence_parallel": sp})
            act_dense[(ri, sp)] = layer_activation_bytes(la_dense, p)
            act_moe[(ri, sp)] = layer_activation_bytes(la_moe, p)
    # FLOPs per token through one pipeline, per stage (the scalar _stage_flops without the token count)
    best = (-1.0, 0.0, 0.0)
    for st in range(pp):
        dl, ml = stage_layers(m, pp, st)
        per_tok = dl * layer_dense_flops(m, False).dense + (ml * layer_dense_flops(m, True).dense if ml else 0.0)
        if st == pp - 1:
            per_tok += 2.0 * m.vocab_size * m.hidden_size
        score = (dl + ml) / m.num_layers * score_flops_per_query(m, job.seq_len)
        if per_tok + score > best[0]:
            best = (per_tok + score, per_tok, score)
    sync = _syncs(m, base)
    return _Layout(
        tp,
        pp,
        dp,
        list(rep),
        list(expert),
        [stage_layers(m, pp, st) for st in range(pp)],
        act_dense,
        act_moe,
        best[1] / tp,
        best[2] / tp,
        sync,
    )


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
    """Price every row for layout ``(tp, pp)``; ``base`` supplies dtypes, ep, flash attention, optimizer.

    A GPU's step comes from the operator model (``kernels``, default the catalog roofline of the device),
    as :func:`aitrinity.cost.estimate.estimate_training` prices one plan; other devices keep the phase
    roofline of :func:`aitrinity.cost.estimate.price`."""
    L = _layout(m, job, base, system, tp, pp)
    n, t, p, d, e = len(rows), tp, pp, L.dp, base.ep
    s, h = job.seq_len, m.hidden_size
    b = rows.micro_batch.astype(np.float64)
    per_step = d * rows.micro_batch
    divisible = (job.global_batch % per_step) == 0
    mb = np.maximum(job.global_batch // per_step, 1).astype(np.float64)
    zero, rec, sp = rows.zero, rows.recompute, rows.sequence_parallel
    comp, off = rows.compression, rows.optimizer_offload
    v, a_off = rows.virtual_stages.astype(np.float64), rows.activation_offload
    interleave = np.where(v > 1, 1.0 + (p - 1) / (p * v), 1.0)
    act = BYTES_PER_DTYPE[base.compute_dtype]
    wb, gb = BYTES_PER_DTYPE[base.weights_dtype], BYTES_PER_DTYPE[base.grads_dtype]
    k_opt = optimizer_bytes_per_param(base)

    # --- memory per stage; the peak stage is the busiest device
    key = rec * 2 + sp  # (recompute, sequence parallel) -> 0..5

    def per_layer(table: dict[tuple[int, bool], float]) -> F:
        out: F = np.array([table[(ri, spv)] for ri in range(3) for spv in (False, True)])[key]
        return out

    full_ws = per_layer({(ri, spv): L.act_dense[(0, spv)] for ri in range(3) for spv in (False, True)})
    full_ws_moe = per_layer({(ri, spv): L.act_moe[(0, spv)] for ri in range(3) for spv in (False, True)})
    pl_dense, pl_moe = per_layer(L.act_dense) * b, per_layer(L.act_moe) * b
    sp_div = np.where(sp, float(t), 1.0)
    exp_shard = max(d // e, 1)
    # every stage at once: arrays of (stages, rows)
    st = np.arange(p)[:, None]
    dl = np.array([x for x, _ in L.layers], dtype=np.float64)[:, None]
    ml = np.array([y for _, y in L.layers], dtype=np.float64)[:, None]
    rep_s, ex_s = np.array(L.rep)[:, None], np.array(L.expert)[:, None]
    stage_w = rep_s * wb / np.where(zero >= 3, d, 1) + ex_s * wb / np.where(zero >= 3, exp_shard, 1)
    stage_g = rep_s * gb / np.where(zero >= 2, d, 1) + ex_s * gb / np.where(zero >= 2, exp_shard, 1)
    stage_o = rep_s * k_opt / np.where(zero >= 1, d, 1) + ex_s * k_opt / np.where(zero >= 1, exp_shard, 1)
    in_flight = np.minimum(p - st, mb)
    stage_acts = (dl * pl_dense + ml * pl_moe) * in_flight * interleave
    stage_acts = stage_acts + np.where(rec == 2, np.where(ml > 0, full_ws_moe, full_ws) * b, 0.0)
    if m.dropout:
        stage_acts[0] = stage_acts[0] + s * b * h * in_flight[0] / sp_div
    stage_acts[p - 1] = stage_acts[p - 1] + 4.0 * s * b * (h + m.vocab_size) / t
    totals = stage_w + stage_g + stage_o + stage_acts
    peak = np.argmax(totals, axis=0)  # first maximum, as the scalar loop keeps the first
    pick = np.arange(n)

    def at_peak(values: F) -> F:
        out: F = values[peak, pick]
        return out

    acts_peak, opt_peak = at_peak(stage_acts), at_peak(stage_o)
    rep_peak = np.array(L.rep)[peak]
    exp_peak = np.array(L.expert)[peak]
    params_peak = rep_peak + exp_peak
    bpe = np.array([L.sync[c].bytes_per_element for c in COMPRESSION])[comp]
    ef = np.array([L.sync[c].error_feedback_bytes_per_param for c in COMPRESSION])[comp]
    hbm_mem = totals[peak, pick] + params_peak * ef - np.where(off, opt_peak, 0.0) - a_off * acts_peak
    host_mem = np.where(off, opt_peak, 0.0) + a_off * acts_peak

    # --- FLOPs (busiest stage by FLOPs; independent of the row)
    tokens_per_pipe = job.global_batch * s / d
    dense_f, score_f = tokens_per_pipe * L.dense_f, tokens_per_pipe * L.score_f
    fwd = dense_f + score_f
    recomp = np.select([rec == 0, rec == 1, rec == 2], [0.0, score_f, fwd])
    if base.flash_attention:
        recomp = recomp + np.where(rec != 2, 0.5 * score_f, 0.0)
    period = float(L.sync["none"].period)  # the scenario's local SGD: synchronise every period steps
    overhead = params_peak * np.array([L.sync[c].flops_per_param for c in COMPRESSION])[comp] / period
    hardware = 3.0 * fwd + recomp + overhead

    # --- HBM traffic
    w_dev, g_dev = params_peak * wb, params_peak * gb
    in_flight_peak = np.maximum(np.minimum(p - peak, mb), 1)
    per_mb_acts = acts_peak / in_flight_peak
    hbm = mb * (3.0 * w_dev + 2.0 * g_dev + 2.0 * per_mb_acts)
    hbm = hbm + np.where(off, 0.0, 2.0 * opt_peak + g_dev + w_dev)
    hbm = hbm + params_peak * np.array([L.sync[c].hbm_bytes_per_element for c in COMPRESSION])[comp] / period

    # --- link bytes and messages per channel
    dpn = system.devices_per_node
    ch_bytes = {c: np.zeros(n) for c in _CHANNELS}
    ch_msgs = {c: np.zeros(n) for c in _CHANNELS}
    timed_bytes = {c: np.zeros(n) for c in ("intra_node", "inter_node")}  # what the operator model times itself
    timed_msgs = {c: np.zeros(n) for c in timed_bytes}

    def add(
        kind: coll.Collective, payload: F | float, group: int, times: F | float, stride: int, ops: bool = False
    ) -> F:
        """Add a collective's bytes and messages to its channel; returns its α-β time on that channel."""
        if group <= 1 and kind != "p2p":
            return np.zeros(n)
        crosses = coll.crosses_nodes(stride, group if kind != "p2p" else 2, dpn) and system.inter_node_link
        c = "inter_node" if crosses else "intra_node"
        nbytes, msgs = times * coll.bytes_sent(kind, 1.0, group) * payload, times * coll.steps(kind, group)
        ch_bytes[c] += nbytes
        ch_msgs[c] += msgs
        if ops:
            timed_bytes[c] += nbytes
            timed_msgs[c] += msgs
        spec = system.channel(c)
        out: F = np.broadcast_to(msgs * spec.latency_s + nbytes / spec.bandwidth_Bps, (n,))
        return out

    layers_peak = np.array([dl + ml for dl, ml in L.layers])[peak]
    moe_peak = np.array([ml for _, ml in L.layers])[peak]
    a_bytes = b * s * h * act
    extra = np.where(rec == 2, 2.0, 0.0)
    add("all-reduce", a_bytes, t, layers_peak * mb * (4.0 + extra), 1, ops=True)
    send = add("p2p", a_bytes / t, p, 2.0 * mb, t * d, ops=True) if p > 1 else np.zeros(n)
    gather = np.array([L.sync[c].collective == "all-gather" for c in COMPRESSION])[comp]
    for params, group, stride in ((rep_peak, d, t), (exp_peak, d // e, t * e)):
        if not np.any(params > 0):
            continue
        payload = params * bpe
        z3 = zero >= 3
        has = params > 0  # the scalar ledger skips a group with no parameters on the device
        # ZeRO 0-2: one all-reduce (or a gather of every rank's message); ZeRO-3: per micro-batch RS + 2 AG
        if group > 1:
            ar, ag, z3 = has & ~z3 & ~gather, has & ~z3 & gather, has & z3
            add("all-reduce", np.where(ar, payload, 0.0), group, np.where(ar, 1.0 / period, 0.0), stride)
            add("all-gather", np.where(ag, payload * group, 0.0), group, np.where(ag, 1.0 / period, 0.0), stride)
            add("reduce-scatter", np.where(z3, payload, 0.0), group, np.where(z3, mb, 0.0), stride)
            add("all-gather", np.where(z3, params * wb, 0.0), group, np.where(z3, 2.0 * mb, 0.0), stride)
    if m.moe and e > 1:
        k = m.moe.experts_per_token
        a2a = np.where(moe_peak > 0, moe_peak * mb * (4.0 + extra), 0.0)
        add("all-to-all", b * s * k * h * act / t, e, a2a, t)
    ch_bytes["host"] += np.where(off, g_dev + w_dev, 0.0)
    ch_msgs["host"] += np.where(off, 2.0, 0.0)
    ch_bytes["host_dram"] += np.where(off, 2.0 * opt_peak + g_dev + w_dev, 0.0)
    ch_msgs["host_dram"] += np.where(off, 1.0, 0.0)
    ch_bytes["host"] += 2.0 * a_off * per_mb_acts * mb
    ch_msgs["host"] += np.where(a_off > 0, 2.0 * mb * layers_peak, 0.0)

    # --- pricing (estimate.resource_times + combine, vectorized)
    eff = system.eff
    rows_per_gemm = b * s
    curve = (
        eff.compute
        if eff.compute_half_rows <= 0
        else eff.compute * rows_per_gemm / (rows_per_gemm + eff.compute_half_rows)
    )  # Efficiency.compute_at, row-wise
    rate = system.device.peak_flops_for(base.compute_dtype) * curve
    times = [hardware / rate, hbm / (system.device.memory_bandwidth_Bps * eff.memory)]
    for c in _CHANNELS:
        if c == "host_dram" and system.host_memory is None:
            times.append(np.zeros(n))  # only offloading rows use it, and they are infeasible without host memory
            continue
        spec = system.channel(c)
        times.append(ch_msgs[c] * spec.latency_s + ch_bytes[c] / spec.bandwidth_Bps)
    if kernels is None and system.device.kind == "gpu":
        kernels = roofline(system.device)
    if kernels is None:
        bubble = (p - 1) / (mb * v) * times[0]
        operators = mb * layers_peak * OPERATORS_PER_LAYER * (3.0 + (rec == 2))
        step = combine(times, system) + bubble + operators * system.eff.op_overhead_s
    else:  # estimate.estimate_training / price_training, row-wise
        # the micro-batch's kernels depend on (micro-batch, recompute, SP) only: time each distinct one once
        combos, inv = np.unique(rows.micro_batch * 6 + rec * 2 + sp, return_inverse=True)
        ub = (combos // 6).astype(np.float64)
        micro = MicroBatch(ub, s, (combos % 6) // 2, combos % 2 > 0, base.flash_attention, base.compute_dtype)
        per_mb = slowest_stage(m, kernels, t, p, e, micro)
        per_mb = ClassTimes(*(getattr(per_mb, c)[inv] for c in TRAIN_OPERATOR_CLASSES))
        opt_bytes = np.where(off, 0.0, 2.0 * opt_peak + at_peak(stage_g) + at_peak(stage_w))
        sched = schedule(per_mb, kernels, p, v, mb, send / mb, opt_bytes)
        exchange_s = overhead / rate
        ops_compute = mb * (sched.per_microbatch.gemm + sched.per_microbatch.attention) + exchange_s
        streams = []
        for i, c in enumerate(_CHANNELS):
            if c in timed_bytes:
                spec = system.channel(c)
                rest_b, rest_m = ch_bytes[c] - timed_bytes[c], ch_msgs[c] - timed_msgs[c]
                streams.append(rest_m * spec.latency_s + rest_b / spec.bandwidth_Bps)
            else:
                streams.append(times[2 + i])
        busy = sched.busy + sched.optimizer_s + exchange_s
        floor = np.max(np.stack([ops_compute, *times[1:]]), axis=0)
        step = np.maximum(combine([busy + sched.bubble_s, *streams], system), floor)
        times = [ops_compute, *times[1:], np.maximum(busy - floor, 0.0)]

    # --- feasibility, first failed constraint wins
    heavy = np.array([c in ("topk", "sign", "powersgd") for c in COMPRESSION])[comp]
    host_cap = system.tier_capacity_per_device("host") or 0.0
    checks = [
        ~divisible,
        hbm_mem > system.usable_memory_bytes,
        host_mem > host_cap,
        heavy & (zero >= 2),
        (off & (zero >= 3)) | ((off | (a_off > 0)) & (system.host_memory is None)),
        sp & (t == 1),
        (m.num_layers % (p * rows.virtual_stages)) != 0,
        (zero >= 3) & (period > 1),
    ]
    reason = first_failed(checks, n)
    nodes = system.num_devices
    price = system.price_per_hour_usd
    return Priced(
        feasible=reason == 0,
        reason=reason,
        step_time_s=step,
        hbm_bytes=hbm_mem,
        host_bytes=host_mem,
        link_bytes=ch_bytes["intra_node"] + ch_bytes["inter_node"] + ch_bytes["host"],
        compute_s=times[0],
        binding=np.argmax(np.stack(times), axis=0),
        usd_per_step=step * (price * nodes / 3600.0 if price is not None else np.nan),
        joules_per_step=step * system.power_W * nodes,
    )
