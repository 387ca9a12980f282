"""The time of training steps, priced once for one plan and for the planner's rows (pure, on arrays).

The ledger of a training step is computed on arrays, one row per plan (:func:`aitrinity.cost.training.columns`;
one plan is a batch of one). :func:`price_columns` prices those columns: it is what ``trinity diagnose`` reads for
one plan (:func:`aitrinity.cost.estimate.estimate_training` renders its first row as an Estimate) and what
``trinity plan`` reads for hundreds of thousands (:func:`aitrinity.plan.vector_training.price_rows`).

* On a GPU, the operator model (:mod:`aitrinity.cost.train_operators`): the slowest stage's micro-batch from
  kernel times, the 1F1B schedule around it with the pipeline sends (and ``cp_method: allgather``'s K/V gathers)
  in series, the optimizer's pass; the streams it does not time (data-parallel gradients, EP all-to-all,
  offloads) combine with that under the system's overlap model (:func:`gpu_training_step`).
* Elsewhere, the phase roofline (:mod:`aitrinity.cost.estimate`'s module doc): the resources combined under the
  overlap model, plus the pipeline bubble and the operators' dispatch in series.

Every resource's time is the roofline's (:func:`aitrinity.cost.estimate.roofline_times`): compute at the
efficiency of the micro-batch's GEMM rows, device memory, each link by the α-β model.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from aitrinity.cost import collectives as coll
from aitrinity.cost.estimate import GPU_CHANNELS, combine_rows, link_time, roofline_times
from aitrinity.cost.flops import OPERATORS_PER_LAYER
from aitrinity.cost.kernels import Kernels
from aitrinity.cost.train_operators import (
    TRAIN_OPERATOR_CLASSES,
    ClassTimes,
    MicroBatch,
    StepTimes,
    schedule,
    slowest_stage,
)
from aitrinity.cost.training import CP_GATHER, PP_TRAFFIC, Columns, Rows
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, System

F = NDArray[np.float64]

CHANNELS = ("intra_node", "inter_node", "host", "host_dram")
"""The links a training step's traffic moves on: NVLink / PCIe inside a node, the network between nodes, the host
link and host DRAM (the offloads)."""


@dataclass(frozen=True)
class GpuStep:
    """A GPU training step timed by the operator model (arrays of rows, or one plan's numbers)."""

    time_s: NDArray[np.float64]
    compute_s: NDArray[np.float64]
    """The GEMM and attention kernels (and a compressor's matmuls)."""
    latency_s: NDArray[np.float64]
    """The GPU's busy time above the slowest roofline resource: launches, collective latency, memory-bound
    kernels in series with the GEMMs."""
    sm_share_s: NDArray[np.float64]
    """The GPU work's slowdown beside overlapped collectives that hold SMs (``system.comm_sm_share``)."""


def gpu_training_step(
    st: StepTimes,
    exchange_s: ArrayLike,
    resources: Sequence[ArrayLike],
    streams: Sequence[ArrayLike],
    system: System,
    on_sms: Sequence[bool] = (),
) -> GpuStep:
    """The step of :func:`price_columns` for one plan or the planner's rows: the GPU's busy time and bubble,
    combined with the ``streams`` the operator model does not time under the system's overlap model, never
    below the slowest of compute and the roofline ``resources`` (device memory, links).

    ``on_sms``: which streams are collectives that GPU kernels drive (over NVLink or the network; a host-link copy
    runs on the copy engines). While the overlapped ones run, they hold ``system.comm_sm_share`` of the SMs, so the
    GPU work beside them slows: ``B + share·C`` for ``C`` seconds of them overlapped (the longest; ``overlap_fraction``
    of it under partial overlap, none under ``sum``)."""
    ex = np.asarray(exchange_s, dtype=np.float64)
    compute = np.asarray(st.microbatches * (st.per_microbatch.gemm + st.per_microbatch.attention), dtype=np.float64)
    compute = compute + ex
    busy = np.asarray(st.busy + st.optimizer_s, dtype=np.float64) + ex
    floor = functools.reduce(np.maximum, (np.asarray(r, dtype=np.float64) for r in resources), compute)
    bubble = np.asarray(st.bubble_s, dtype=np.float64)
    lent = np.zeros(np.shape(busy))
    sm = [np.asarray(t, dtype=np.float64) for t, on in zip(streams, on_sms, strict=False) if on]
    if system.comm_sm_share > 0 and system.overlap != "sum" and sm:
        overlapped = functools.reduce(np.maximum, sm)
        if system.overlap == "partial":
            overlapped = system.overlap_fraction * overlapped
        lent = system.comm_sm_share * overlapped
    time_s = np.maximum(combine_rows([busy + bubble + lent, *streams], system.overlap, system.overlap_fraction), floor)
    return GpuStep(time_s, compute, np.maximum(busy - floor, 0.0), lent)


@dataclass(frozen=True)
class StepPrice:
    """The priced step of every row (arrays of the rows' length)."""

    step_s: F
    compute_s: F
    """The operator model's GEMM and attention kernels (and an exchange's compute); the roofline's compute
    elsewhere."""
    memory_s: F
    """Device memory at its achievable bandwidth."""
    links_s: dict[str, F]
    """Each link of :data:`CHANNELS` (zero where a row sends nothing on it; host DRAM only with host memory)."""
    latency_s: F
    """The GPU's busy time above the slowest roofline resource (launches, collective latency, memory-bound
    kernels in series with the GEMMs); zero on the phase roofline."""
    bubble_s: F
    dispatch_s: F
    """The phase roofline's host-side launches (operators x ``op_overhead_s``); zero with the operator model,
    which counts them per kernel."""
    link_bytes: dict[str, F]
    """Bytes one device sends per step, by channel (the channels some row uses)."""
    exchange_s: F | None = None
    """An exchange's compute (a compressor's matmuls), in the operator model's compute; None on the roofline."""
    steps: StepTimes | None = None
    """The operator model's step (None on the phase roofline)."""
    gpu: GpuStep | None = None
    cp_gather_s: F | None = None
    """``cp_method: allgather``'s K/V gathers per micro-batch slot, in series (part of ``steps.p2p_s``)."""

    @property
    def resources(self) -> list[F]:
        """Compute, device memory, each link of :data:`CHANNELS`, latency: the order of the planner's ``RESOURCES``."""
        return [self.compute_s, self.memory_s, *(self.links_s[ch] for ch in CHANNELS), self.latency_s]


def serial_sends(c: Columns, system: System, n: int, purposes: tuple[str, ...] = (PP_TRAFFIC, CP_GATHER)) -> F:
    """Seconds per row of the link traffic in series with the kernels: pipeline sends and the K/V all-gathers of
    ``cp_method: allgather`` (or only those of ``purposes``)."""
    send = np.zeros(n)
    for x in c.streams:
        link = x.channel(system)
        if x.purpose in purposes and link is not None:
            nbytes, msgs = x.sent()
            send = send + link_time(system, link, nbytes, msgs)
    return send


@dataclass(frozen=True)
class TrainingRows:
    """What the pricing of training steps reads: the scenario's model, sequence length, plan (dtypes, ep, cp, flash
    attention) and system, and the rows of one ``layout = (tp, pp)`` with their ledger columns."""

    m: ModelSpec
    seq_len: int
    base: Plan
    system: System
    layout: tuple[int, int]
    rows: Rows
    columns: Columns
    shared: dict[tuple[Any, ...], Any] | None = None
    """What the layouts of one search share, kept for the next: each layer's operator times per TP and EP degree
    (they do not depend on the pipeline). The search owns it and prices every layout on one model, one sequence
    length, one system's kernels and one grid of rows; None: nothing kept."""


def price_columns(t: TrainingRows, kernels: Kernels | None) -> StepPrice:
    """Price the rows' ledger columns: with the operator model on ``kernels`` (a GPU), else on the phase roofline."""
    base, system, rows, c = t.base, t.system, t.rows, t.columns
    n = len(rows)
    zeros = np.zeros(n)
    ch_bytes, ch_msgs = coll.channel_totals(c.streams, system, n)
    priced = [ch for ch in CHANNELS if ch != "host_dram" or system.host_memory is not None]
    r = roofline_times(
        system,
        base.compute_dtype,
        3.0 * c.forward + c.recompute + c.exchange,
        rows.micro_batch.astype(np.float64) * t.seq_len / base.cp,
        c.hbm_bytes,
        {ch: ch_bytes.get(ch, zeros) for ch in priced},
        {ch: ch_msgs.get(ch, zeros) for ch in priced},
    )
    links = {ch: r.links_s.get(ch, zeros) for ch in CHANNELS}
    v = rows.virtual_stages.astype(np.float64)
    if kernels is None:
        bubble = (t.layout[1] - 1) / (c.mb * v) * r.compute_s
        operators = c.mb * c.layers_peak * OPERATORS_PER_LAYER * (3.0 + (rows.recompute == 2))
        dispatch = operators * system.eff.op_overhead_s
        step = combine_rows([r.compute_s, r.memory_s, *links.values()], system.overlap, system.overlap_fraction)
        return StepPrice(step + bubble + dispatch, r.compute_s, r.memory_s, links, zeros, bubble, dispatch, ch_bytes)
    sched = _schedule(t, kernels)
    timed_bytes, timed_msgs = coll.channel_totals([x for x in c.streams if x.timed], system, n)
    streams = []  # the operator model times the TP and PP streams itself: the links carry the rest
    for ch in CHANNELS:
        if ch in GPU_CHANNELS:
            rest_b = ch_bytes.get(ch, zeros) - timed_bytes.get(ch, zeros)
            rest_m = ch_msgs.get(ch, zeros) - timed_msgs.get(ch, zeros)
            streams.append(link_time(system, ch, rest_b, rest_m))
        else:
            streams.append(links[ch])
    resources = [r.memory_s, *links.values()]
    sms = [ch in GPU_CHANNELS for ch in CHANNELS]
    exchange_s = c.exchange / r.rate
    gpu = gpu_training_step(sched, exchange_s, resources, streams, system, sms)
    return StepPrice(
        step_s=np.asarray(gpu.time_s),
        compute_s=np.asarray(gpu.compute_s),
        memory_s=r.memory_s,
        links_s=links,
        latency_s=np.asarray(gpu.latency_s),
        bubble_s=np.asarray(sched.bubble_s, dtype=np.float64),
        dispatch_s=zeros,
        link_bytes=ch_bytes,
        exchange_s=exchange_s,
        steps=sched,
        gpu=gpu,
        cp_gather_s=serial_sends(c, system, n, (CP_GATHER,)) / c.mb,
    )


def _schedule(t: TrainingRows, kernels: Kernels) -> StepTimes:
    """The operator model's 1F1B step of every row around its slowest stage."""
    m, base, system, rows, c = t.m, t.base, t.system, t.rows, t.columns
    tp, pp = t.layout
    # the micro-batch's kernels depend on (micro-batch, recompute, SP) only: time each distinct one once
    combos, inv = rows.distinct(("micro_batch", "recompute", "sequence_parallel"))
    micro = MicroBatch(
        combos.micro_batch.astype(np.float64),
        t.seq_len,
        combos.recompute,
        combos.sequence_parallel,
        base.flash_attention,
        base.compute_dtype,
        base.cp,
    )
    kept = None
    if t.shared is not None:  # besides tp and ep the layer times read these (the grid's rows live through the search)
        key = ("layer times", id(combos), base.flash_attention, base.compute_dtype, base.cp)
        kept = t.shared.setdefault(key, {})
    per_mb = slowest_stage(m, kernels, tp, pp, base.ep, micro, kept)
    per_mb = ClassTimes(*(getattr(per_mb, k)[inv] for k in TRAIN_OPERATOR_CLASSES))
    opt_bytes = np.where(rows.optimizer_offload, 0.0, 2.0 * c.optimizer + c.gradients + c.weights)
    v = rows.virtual_stages.astype(np.float64)
    return schedule(per_mb, kernels, pp, v, c.mb, serial_sends(c, system, len(rows)) / c.mb, opt_bytes)
