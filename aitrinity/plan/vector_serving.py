"""Vectorized pricing of many serving plans at once (numpy), for the planner.

The phases and memory of every row come from :class:`aitrinity.cost.serving.ServingArrays`, the same arrays
:func:`aitrinity.cost.serving.serving_ledger` reads for one plan (a batch of one), and their price from
:mod:`aitrinity.cost.serving_pricing`, which :func:`aitrinity.cost.estimate.price_serving_ledger` renders for one
plan: the operator model's steady state at fixed concurrency (``mode: concurrency``, the default; the same
:func:`~aitrinity.cost.concurrency.steady_state` on the rows' arrays) or the static-batch roofline. What this module
adds is the planner's own part: the steady states of many layouts in one call (:func:`answer_steady`), the
feasibility columns and the binding resource of every row. Rows share a
model, a job and a system and differ in layout (TP, PP and EP degrees), batch size (the concurrency), the fraction of
the KV cache offloaded to host memory, weight quantization and KV quantization: a search prices all its layouts in
one call. A prefix cache, KV compression or weight
streaming written in the scenario's plan applies to every row. ``tests/plan/test_vector_serving.py`` checks every
row of small spaces against the one-plan path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from aitrinity.cost.concurrency import steady_state
from aitrinity.cost.kernels import KV, WEIGHTS, Dtypes, Kernels, MixedKernels, roofline
from aitrinity.cost.operators import Layout, ScaleOut
from aitrinity.cost.serving import KV_DTYPES as KV_DTYPES
from aitrinity.cost.serving import WEIGHT_DTYPES as WEIGHT_DTYPES
from aitrinity.cost.serving import (
    PhaseColumns,
    ServingArrays,
    ServingEffects,
    effects,
)
from aitrinity.cost.serving import ServingRows as ServingRows
from aitrinity.cost.serving_pricing import (
    PhaseTimes,
    ServingRates,
    concurrency_rates,
    concurrency_times,
    phase_times,
    static_rates,
    static_times,
)
from aitrinity.cost.speculation import Speculation
from aitrinity.plan import registry
from aitrinity.plan.rows import first_failed, first_largest
from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, ServingJob, System, moves_kv

F = NDArray[np.float64]
Ints = NDArray[np.int64]

REASONS = (
    "feasible",
    "device memory",
    "more clients than device memory holds at once",  # one fits: diagnose prices the wait for a slot; not proposed
    "host (or lower-tier) memory",
    "TTFT above the SLO",
    "TPOT above the SLO",
    "quantization to no fewer bytes",
    "offload needs host memory",
    "KV compression with no KV crossing a link (no KV offload, no prefix cache outside HBM)",
    "accuracy drop above the budget",
)
OVER_BUDGET = REASONS[-1]
"""Set by the search (:mod:`aitrinity.plan.search_serving`), not by the pricing: the row's lossy exchanges
lose more accuracy than ``workload.serving.max_accuracy_drop`` allows."""
RESOURCES = (
    "compute",
    "device-memory bandwidth",
    "link",
    "operator launch / collective latency",
    "other requests' prefill in the step",
)
LAYOUT_COLUMNS = ("tp", "pp", "ep", "cp")
"""The rows' columns that are the layout (the search's own); each of the others is one technique's dimension."""


def dimensions() -> list[tuple[str, registry.Dimension]]:
    """The serving grid's dimensions (:func:`aitrinity.plan.registry.dimensions`) in the order of the rows'
    columns."""
    columns = [c for c in ServingRows.__dataclass_fields__ if c not in LAYOUT_COLUMNS]
    dims = sorted(registry.dimensions("serving"), key=lambda kd: columns.index(kd[1].column))
    assert [d.column for _, d in dims] == columns, "each non-layout column of the serving rows is one technique's"
    return dims


def searched_kinds() -> list[str]:
    """The exchanges the serving search chooses, in the rows' column order: the ``plan.exchanges`` entries of its
    grid's dimensions; the scenario's others apply to every candidate."""
    return [kind for kind, _ in dimensions() if registry.get(kind).spec is not None]


def fixed_exchanges(base: Plan) -> list[Any]:
    """The scenario's exchanges the serving search keeps as they are (a prefix cache, KV compression, streaming)."""
    searched = searched_kinds()
    return [x for x in base.exchanges if x.kind not in searched]


@dataclass(frozen=True)
class ServingPriced:
    feasible: NDArray[np.bool_]
    reason: Ints
    ttft_s: F
    tpot_s: F
    latency_s: F
    tokens_per_s: F
    """Decode rate: batch x in-flight batches x replicas / TPOT."""
    throughput_tokens_per_s: F
    """End to end, prefill included: output tokens in flight / request latency."""
    hbm_bytes: F
    link_bytes: F
    usd_per_million_tokens: F
    joules_per_token: F
    binding: Ints


def row_plan(base: Plan, tp: int, pp: int, values: Mapping[str, Any]) -> Plan:
    """The scalar plan of one row: the scenario's plan, its searched exchanges replaced by the row's ``values`` (by
    technique kind, as results spell them: ``{"kv-offload": 0.5, "weight-quantization": "fp8"}``; the ones not given:
    none), each entry as its technique's move makes it."""
    plan = base.model_copy(update={"tp": tp, "pp": pp, "dp": None, "exchanges": fixed_exchanges(base)})
    for kind in searched_kinds():
        move = registry.get(kind).move
        assert move is not None
        plan = move.put(plan, values.get(kind, move.naive), base)
    return plan


def price_rows(
    m: ModelSpec,
    job: ServingJob,
    base: Plan,
    system: System,
    rows: ServingRows,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    kernels: Kernels | None = None,
) -> ServingPriced:
    """Price every row (each with its own layout); ``kernels`` time the steady state's operators at fixed
    concurrency (default: the device's catalog roofline)."""
    request, finish = price_rows_deferred(m, job, base, system, rows, ttft_slo_s, tpot_slo_s)
    if request is None:
        return finish(None)
    return finish(answer_steady(m, kernels or roofline(system.device), system, job, [request])[0])


@dataclass(frozen=True)
class SteadyRequest:
    """The fixed-concurrency steady states the rows that run need, by (TP, EP, batch, weight dtype, KV dtype). They
    do not depend on ``pp``, so the layouts of one TP degree share their steady states."""

    weights_dtype: str
    cache_dtype: str
    prefix_hit: float
    tp: Ints
    ep: Ints
    keys: Ints
    """``(batch * len(WEIGHT_DTYPES) + weight dtype) * len(KV_DTYPES) + KV dtype`` of each row that runs."""
    speculation: Speculation | None = None
    cp: Ints | None = None
    """Each row's context-parallel degree (None: 1): a request may mix degrees, as the serving search's does."""
    cp_method: str = "ring"
    """How the CP groups attend (``plan.cp_method``)."""
    compute_dtype: str = "bf16"
    """``plan.compute_dtype``: the LM head's and the router's, and what a quantized KV cache is read into for
    attention (:attr:`aitrinity.cost.operators.Layout.compute_dtype`)."""


def _degrees_of(r: SteadyRequest) -> Ints:
    """The context-parallel degree of each of the request's rows."""
    return r.cp if r.cp is not None else np.ones(len(r.keys), dtype=np.int64)


@dataclass(frozen=True)
class SteadyAnswer:
    """Per key of the request: the steady state's TTFT, TPOT, decode step and prefill interference."""

    ttft_s: F
    tpot_s: F
    decode_step_s: F
    interference_s: F


def answer_steady(
    m: ModelSpec, k: Kernels, system: System, job: ServingJob, requests: list[SteadyRequest]
) -> list[SteadyAnswer]:
    """One steady-state call for all the requests' rows that share dtypes and a prefix hit rate, over their distinct
    (TP, EP, context-parallel degree, batch, weight dtype, KV dtype); each request gets its own rows' values back (a
    value does not depend on which others are in the call)."""
    nw, nk = len(WEIGHT_DTYPES), len(KV_DTYPES)
    groups: dict[tuple[str, str, float, Speculation | None, str, str], list[int]] = {}
    for i, r in enumerate(requests):
        shared = (r.weights_dtype, r.cache_dtype, r.prefix_hit, r.speculation, r.cp_method, r.compute_dtype)
        groups.setdefault(shared, []).append(i)
    out: list[list[F] | None] = [None] * len(requests)
    for (wd, kd, hit, spec, method, cd), members in groups.items():
        tps = np.concatenate([requests[i].tp for i in members])
        eps = np.concatenate([requests[i].ep for i in members])
        cps = np.concatenate([_degrees_of(requests[i]) for i in members])
        keys = np.concatenate([requests[i].keys for i in members])
        values = np.zeros((4, 0))
        if len(keys):  # (no row runs -- none fits: nothing to price)
            span, deg, cdeg = int(keys.max()) + 1, int(eps.max()) + 1, int(cps.max()) + 1
            distinct, at = np.unique(((tps * deg + eps) * cdeg + cps) * span + keys, return_inverse=True)
            key, rest = distinct % span, distinct // span
            cp, ep, tp = rest % cdeg, rest // cdeg % deg, rest // cdeg // deg
            mixed = MixedKernels(
                k, Dtypes((wd, *WEIGHT_DTYPES[1:]), key // nk % nw), Dtypes((kd, *KV_DTYPES[1:]), key % nk)
            )
            layout = Layout(
                tp,
                ep,
                WEIGHTS,
                KV,
                system.engine,
                routing=job.moe_routing,
                scale_out=ScaleOut.of(system),
                cp=cp,
                cp_method=method,
                compute_dtype=cd,
            )
            ss = steady_state(
                m,
                mixed,
                layout,
                key // (nk * nw),
                job.prompt_tokens,
                job.output_tokens,
                prefill_fraction=1.0 - hit,
                speculation=spec,
            )
            values = np.stack([ss.ttft_s, ss.tpot_s, ss.decode_step.total, ss.interference_s])[:, at]
        start = 0
        for i in members:
            end = start + len(requests[i].keys)
            out[i] = list(values[:, start:end])
            start = end
    return [SteadyAnswer(*a) for a in out if a is not None]


@dataclass(frozen=True)
class _Fit:
    """Where every row stands on memory and on its exchanges' preconditions, before it is timed."""

    hbm_bytes: F
    """Bytes on each device."""
    over: NDArray[np.bool_]
    """More than the device's usable memory with every client's request in it."""
    waits: NDArray[np.bool_]
    """Of those, the rows where one request fits (fixed concurrency: ``diagnose`` prices the wait for a slot; the
    planner does not propose it)."""
    lower_over: NDArray[np.bool_]
    """Over the host's (or a lower tier's) share."""
    no_gain: NDArray[np.bool_]
    """A quantization to no fewer bytes than the scenario's own dtype."""
    no_host: NDArray[np.bool_]
    """KV offload with no host tier."""
    nothing_to_compress: NDArray[np.bool_]
    """KV compression where no KV crosses a link (:func:`aitrinity.spec.scenario.moves_kv`)."""

    @property
    def runs(self) -> NDArray[np.bool_]:
        """Rows that can run, and are priced (the others are NaN)."""
        out: NDArray[np.bool_] = ~(self.over | self.lower_over | self.no_gain | self.no_host | self.nothing_to_compress)
        return out


def _fit(
    job: ServingJob, system: System, rows: ServingRows, arrays: ServingArrays, fplan: Plan, fx: ServingEffects
) -> _Fit:
    """The rows' device and host memory and the preconditions of their quantization and KV offload."""
    n, P, n_out = len(rows), job.prompt_tokens, job.output_tokens
    mem = arrays.memory(rows.batch.astype(np.float64), P, P + n_out)
    ws = fx.weight_stream
    hbm = arrays.device_bytes(mem)
    host = mem.kv_cache * rows.kv_offload + (mem.weights * ws.fraction if ws and ws.tier == "host" else 0.0)
    host = host + (mem.prefix_cache if fx.prefix_tier == "host" else 0.0)
    host_cap = system.tier_capacity_per_device("host")
    mem_over = hbm > system.usable_memory_bytes
    waits = np.zeros(n, dtype=bool)  # at fixed concurrency: one request fits, not all the clients' at once
    if job.mode == "concurrency" and mem_over.any():
        one = arrays.device_bytes(arrays.memory(np.ones(n), P, P + n_out))
        waits = mem_over & (one <= system.usable_memory_bytes)
    quantized = rows.weight_dtype > 0
    # KV compression with nothing else moving KV compresses only what a row's own offload moves
    idle = any(x.kind == "kv-compression" for x in fplan.exchanges) and not moves_kv(fplan.exchanges)
    base_w, base_kv = BYTES_PER_DTYPE[fplan.weights_dtype], BYTES_PER_DTYPE[fplan.cache_dtype]
    return _Fit(
        hbm_bytes=hbm,
        over=mem_over,
        waits=waits,
        lower_over=(host > (host_cap or 0.0)) | _lower_tier_over(system, fx.prefix_tier, mem.prefix_cache, n),
        no_gain=(quantized & (arrays.per_row.weight_bytes >= base_w))
        | ((rows.kv_dtype > 0) & (arrays.per_row.kv_bytes >= base_kv)),
        no_host=(rows.kv_offload > 0) & (host_cap is None),
        nothing_to_compress=(rows.kv_offload == 0) & idle,
    )


@dataclass(frozen=True)
class _Metrics:
    """Every row's times, rates and prices."""

    ttft: F
    tpot: F
    latency: F
    tokens_per_s: F
    throughput: F
    usd_per_million: F
    joules_per_token: F
    binding: Ints


def _concurrency_metrics(
    system: System,
    rows: ServingRows,
    job: ServingJob,
    phases: tuple[PhaseTimes, PhaseTimes],
    runs: NDArray[np.bool_],
    answer: SteadyAnswer,
) -> _Metrics:
    """At fixed concurrency: the steady state's TTFT and TPOT, and Little's law's rate over every replica."""
    pre, dec = phases
    ttft, tpot, binding = _steady(system, rows, pre, dec, runs, answer)
    n_out = job.output_tokens
    if n_out == 1:  # no step after the first token: no TPOT (cost.concurrency's module doc)
        tpot = np.zeros_like(tpot)
    r = concurrency_rates(system, rows.batch, _replicas(system, rows), n_out, ttft, tpot)
    return _Metrics(ttft, tpot, *_rates(r), binding)


def _static_metrics(
    system: System, rows: ServingRows, job: ServingJob, phases: tuple[PhaseTimes, PhaseTimes]
) -> _Metrics:
    """A static batch: the batch prefilled at once, then decoded, on the phase roofline with the per-operator
    overhead; every pipeline stage holds a batch."""
    pre, dec = phases
    ttft, tpot = static_times(system, pre, dec)
    binding = first_largest([dec.compute, dec.hbm, dec.link_max()])
    r = static_rates(system, rows.batch, rows.pp, _replicas(system, rows), job.output_tokens, ttft, tpot)
    return _Metrics(ttft, tpot, *_rates(r), binding)


def _rates(r: ServingRates) -> tuple[F, F, F, F, F]:
    return r.latency_s, r.tokens_per_s, r.throughput_tokens_per_s, r.usd_per_million_tokens, r.joules_per_token


def _replicas(system: System, rows: ServingRows) -> Ints:
    """Model replicas on the system's devices: each holds ``tp x pp x cp`` of them."""
    out: Ints = system.num_devices // (rows.tp * rows.pp * (rows.cp if rows.cp is not None else 1))
    return out


def _steady_request(rows: ServingRows, runs: NDArray[np.bool_], fplan: Plan, fx: ServingEffects) -> SteadyRequest:
    """The steady states the rows that run (``runs``) need, keyed by (batch, weight dtype, KV dtype) for
    :func:`answer_steady`."""
    nw, nk = len(WEIGHT_DTYPES), len(KV_DTYPES)
    keys = (rows.batch[runs] * nw + rows.weight_dtype[runs]) * nk + rows.kv_dtype[runs]
    return SteadyRequest(
        fplan.weights_dtype,
        fplan.cache_dtype,
        fx.prefix_hit,
        rows.tp[runs],
        rows.ep[runs],
        keys,
        fx.speculation,
        rows.cp[runs] if rows.cp is not None else None,
        fplan.cp_method,
        fplan.compute_dtype,
    )


def price_rows_deferred(
    m: ModelSpec,
    job: ServingJob,
    base: Plan,
    system: System,
    rows: ServingRows,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
) -> tuple[SteadyRequest | None, Callable[[SteadyAnswer | None], ServingPriced]]:
    """:func:`price_rows` in two steps, so that a search prices the steady states of all its layouts together
    (:func:`answer_steady`): the steady states the rows need (None for a static batch), and the function that
    finishes the rows from them."""
    n = len(rows)
    # the scenario's fixed exchanges (prefix cache, KV compression, streaming) as the one-plan ledger sees them; the
    # rows' own quantization and KV offload (to host memory) on top
    fixed = base.model_copy(update={"exchanges": fixed_exchanges(base)})
    fplan, fx = effects(fixed)
    arrays = ServingArrays(m, fplan, fx, rows)
    B = rows.batch.astype(np.float64)
    P, n_out = job.prompt_tokens, job.output_tokens

    def resources(ph: PhaseColumns) -> PhaseTimes:
        return phase_times(ph, system, base.compute_dtype)

    # the prefill of the batch (a static batch's TTFT) or of one request (the floor of a TTFT at fixed concurrency)
    pre_cols = arrays.prefill(B if job.mode == "static" else np.ones(n), P)
    phases = (resources(pre_cols), resources(arrays.decode(B, P + n_out // 2)))  # decode at the mean context
    fit = _fit(job, system, rows, arrays, fplan, fx)
    runs = fit.runs
    request = _steady_request(rows, runs, fplan, fx) if job.mode == "concurrency" else None

    def finish(answer: SteadyAnswer | None) -> ServingPriced:
        """The rows' metrics and feasibility once their steady states (or the static batch's phases) are in."""
        if answer is not None:
            x = _concurrency_metrics(system, rows, job, phases, runs, answer)
        else:
            x = _static_metrics(system, rows, job, phases)
        none = np.zeros(n, dtype=bool)
        slo_ttft = x.ttft > ttft_slo_s if ttft_slo_s is not None else none
        slo_tpot = x.tpot > tpot_slo_s if tpot_slo_s is not None else none
        checks = [fit.over & ~fit.waits, fit.waits, fit.lower_over, slo_ttft, slo_tpot, fit.no_gain, fit.no_host]
        reason = first_failed([*checks, fit.nothing_to_compress], n)
        return ServingPriced(
            feasible=reason == 0,
            reason=reason,
            ttft_s=x.ttft,
            tpot_s=x.tpot,
            latency_s=x.latency,
            tokens_per_s=x.tokens_per_s,
            throughput_tokens_per_s=x.throughput,
            hbm_bytes=fit.hbm_bytes,
            link_bytes=phases[0].moved + n_out * phases[1].moved,
            usd_per_million_tokens=x.usd_per_million,
            joules_per_token=x.joules_per_token,
            binding=x.binding,
        )

    return request, finish


def _steady(
    system: System, rows: ServingRows, one: PhaseTimes, dec: PhaseTimes, runs: NDArray[np.bool_], answer: SteadyAnswer
) -> tuple[F, F, Ints]:
    """TTFT, TPOT and the binding resource of every row at fixed concurrency, as
    :func:`aitrinity.cost.estimate.price_concurrency` prices one plan: the rows' steady states (``answer``, for
    the rows that run; NaN for the others), exchanges' streams combined under the overlap model, never faster
    than the roofline's slowest resource (one request's prefill for TTFT, the row's decode for TPOT)."""
    n = len(rows)
    ttft_op, tpot_op, dec_step, interference = (np.full(n, np.nan) for _ in range(4))
    ttft_op[runs], tpot_op[runs] = answer.ttft_s, answer.tpot_s
    dec_step[runs], interference[runs] = answer.decode_step_s, answer.interference_s
    ttft, tpot = concurrency_times(system, one, dec, ttft_op, tpot_op)
    latency = np.maximum(dec_step - dec.floor(), 0.0)
    parts = np.stack([dec.compute, dec.hbm, dec.link_max(), latency, interference])
    parts[np.isnan(parts)] = 0.0  # (rows that do not run)
    binding: Ints = np.argmax(parts, axis=0)
    return ttft, tpot, binding


def _lower_tier_over(system: System, tier: str, share: F, n: int) -> NDArray[np.bool_]:
    """A prefix cache in SSD or a remote pool that exceeds the device's share of that tier (``share``: per row)."""
    if tier not in ("ssd", "remote"):
        return np.zeros(n, dtype=bool)
    out: NDArray[np.bool_] = (share > 0) & (share > (system.tier_capacity_per_device(tier) or 0.0))
    return out
