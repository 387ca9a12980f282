"""The Estimate: a Ledger priced on a System.

Time of each resource in a phase:

* compute: hardware FLOPs / (dense peak of the compute dtype x efficiency(rows));
* device memory: HBM bytes / (peak bandwidth x memory efficiency);
* each link: Σ messages x latency + bytes / (bandwidth x link efficiency) (α-β model).

The overlap model combines them (DESIGN.md): ``max`` (roofline: everything
overlaps, the slowest binds -- Williams et al. 2009), ``sum`` (nothing overlaps),
``partial`` with fraction f: ``max + (1 - f)·(sum - max)``. Operator dispatch
(operators x ``op_overhead_s``) and a pipeline bubble
(idle compute during fill and drain) adds serially.

Derived metrics: MFU and HFU (Chowdhery et al. 2022, PaLM, App. B; Korthikanti
§5), $ from price per device-hour x devices x time, joules from busy power x
devices x time (TDP unless the scenario gives a power: an upper bound); None without a price or a power.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from aitrinity.cost.ledger import Ledger, MemoryItem, PhaseLedger, Result, ServingFacts
from aitrinity.spec.scenario import System
from aitrinity.units import format_bandwidth, format_bytes, format_flop_rate, format_flops

if TYPE_CHECKING:
    from aitrinity.cost.concurrency import SteadyState
    from aitrinity.cost.kernels import Kernels
    from aitrinity.cost.serving_pricing import PhaseTimes
    from aitrinity.cost.training import PlanColumns
    from aitrinity.cost.training_pricing import StepPrice
    from aitrinity.spec.model import ModelSpec
    from aitrinity.spec.scenario import Plan, ServingJob, TrainingJob

ResourceKind = Literal["compute", "memory_bandwidth", "link", "latency"]
ResourceId = Literal[
    "compute",
    "memory_bandwidth",
    "link:intra_node",
    "link:inter_node",
    "link:host",
    "link:host_dram",
    "link:storage",
    "link:remote",
    "latency:launch",
    "latency:queueing",
    "latency:kv_slots",
    "compute:interference",
    "capacity:hbm",
]
"""A resource's stable identifier: what scripts and tests compare (``resource`` is its display name).
``capacity:hbm`` is what binds a workload that does not fit; ``latency:kv_slots`` the wait of clients beyond the
requests a server holds at once (fixed concurrency)."""
"""``latency``: time no bandwidth explains -- kernel launches, collective latency, engine scheduling and
queueing (the operator model's time above the roofline's slowest resource)."""


class OperatorTime(Result):
    """One operator class's share of a phase (the operator model; LLM-Viewer-style breakdown)."""

    operator: str
    label: str
    time_s: float
    share: float


class ResourceTime(Result):
    id: ResourceId
    resource: str
    """Display name (``intra-node link (nvlink-4)``)."""
    kind: ResourceKind
    time_s: float
    detail: str
    channel: str | None = None
    """For a link: which channel (``intra_node``, ``host``, ...)."""


class PhaseEstimate(Result):
    phase: str
    time_s: float
    resources: list[ResourceTime]
    bubble_s: float
    dispatch_s: float = 0.0
    """Operators launched x the per-operator overhead (added in series)."""
    overlap: str
    operators: list[OperatorTime] = []
    """Per operator class, where the operator model priced the phase (serving at fixed concurrency)."""


class MemoryCheck(Result):
    tier: str
    used_bytes: float
    usable_bytes: float
    capacity_bytes: float
    fits: bool
    items: list[MemoryItem]


class TrainingMetrics(Result):
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    joules_per_step: float | None
    """None without a device power (``DeviceSpec.tdp_W``, the scenario's ``system.power_per_device``), as $ without
    a price."""
    joules_per_token: float | None
    usd_per_step: float | None
    usd_per_million_tokens: float | None
    total_time_s: float | None
    total_usd: float | None
    total_joules: float | None
    total_flops_6nd: float | None = None
    """Training compute by the 6·N·D convention (N active parameters, D tokens): the GPT-3 (Brown et al. 2020,
    Table D.1) and Llama 3 (Dubey et al. 2024, Table 4 note) totals."""
    total_flops_with_attention: float | None = None
    """Training compute counting the attention scores too (PaLM's MFU convention, Chowdhery et al. 2022,
    App. B): the model FLOPs MFU is computed from."""


class PoolMetrics(Result):
    """How a disaggregated deployment's prefill and decode pools match (:mod:`aitrinity.cost.disaggregated`)."""

    prefill_devices: int
    prefill_workers: int
    prefill_layout: str
    decode_devices: int
    decode_replicas: int
    decode_layout: str
    clients: int
    """All the clients (``workload.serving.batch`` per decode replica)."""
    kv_link: str
    kv_transfer_s: float
    """One prompt's KV from a prefill to a decode worker (after the first token, before the second)."""
    prefill_utilization: float
    """The prefill pool's throughput over its capacity."""
    prefill_capacity_rps: float
    decode_capacity_rps: float
    requests_per_s: float
    binding_pool: str
    """``prefill`` or ``decode``: the pool nearer its capacity."""


class ServingMetrics(Result):
    ttft_s: float
    tpot_s: float
    request_latency_s: float
    output_tokens_per_s: float
    """Generation rate of the whole system: batch x in-flight batches x replicas / TPOT."""
    throughput_tokens_per_s: float
    """End to end, prefill included: output tokens of every batch in flight / request latency (static batching)."""
    joules_per_output_token: float | None
    """None without a device power, as $ without a price."""
    usd_per_million_output_tokens: float | None
    mode: str = "static"
    """``static`` (one batch prefilled, then decoded) or ``concurrency`` (closed-loop steady state)."""
    pools: PoolMetrics | None = None
    """A disaggregated plan's prefill and decode pools (``plan.disaggregation``); None when every replica does both."""


class Estimate(Result):
    ledger: Ledger
    device: str
    phases: list[PhaseEstimate]
    memory: MemoryCheck
    """Device memory (HBM)."""
    lower_tiers: list[MemoryCheck] = []
    """Host DRAM, SSD, remote pool: the share of each one device may use, where the plan puts bytes there."""
    training: TrainingMetrics | None = None
    serving: ServingMetrics | None = None
    kernels: str | None = None
    """Where kernel times came from (``table h100_sxm/vllm/0.24.0``, ``roofline (catalog h100-sxm)``);
    None when the phase roofline priced everything."""
    notes: list[str] = []
    """Fallbacks taken (no table for this engine version, dtype or GPU), one line each."""

    def phase(self, name: str) -> PhaseEstimate:
        for p in self.phases:
            if p.phase == name:
                return p
        raise KeyError(name)


def combine(times: list[float], overlap: str, fraction: float) -> float:
    """Combine resource times under an overlap model (see module doc)."""
    if not times:
        return 0.0
    return float(combine_rows(times, overlap, fraction))


def combine_rows(times: Sequence[ArrayLike], overlap: str, fraction: float) -> NDArray[np.float64]:
    """:func:`combine` for arrays of rows (the planner's candidates): max, sum or partial overlap."""
    arrays = [np.asarray(t, dtype=np.float64) for t in times]  # reduced pairwise in order: no (k, n) stack
    hi: NDArray[np.float64] = functools.reduce(np.maximum, arrays)
    if overlap == "max":
        return hi
    total: NDArray[np.float64] = functools.reduce(np.add, arrays)
    if overlap == "sum":
        return total
    return hi + (1.0 - fraction) * (total - hi)


CHANNEL_LABELS = {
    "intra_node": "intra-node link",
    "inter_node": "inter-node link",
    "host": "host link",
    "host_dram": "host memory",
    "storage": "storage path",
    "remote": "remote-pool path",
}


LINK_IDS: dict[str, ResourceId] = {
    "intra_node": "link:intra_node",
    "inter_node": "link:inter_node",
    "host": "link:host",
    "host_dram": "link:host_dram",
    "storage": "link:storage",
    "remote": "link:remote",
}


def link_time(system: System, channel: str, nbytes: ArrayLike, messages: ArrayLike) -> NDArray[np.float64]:
    """α-β: ``messages`` latencies and ``nbytes`` at the channel's achievable bandwidth (arrays broadcast)."""
    ch = system.channel(channel)
    out: NDArray[np.float64] = (
        np.asarray(messages, dtype=np.float64) * ch.latency_s + np.asarray(nbytes, dtype=np.float64) / ch.bandwidth_Bps
    )
    return out


@dataclass(frozen=True)
class RooflineTimes:
    """A phase's busy time per resource on the roofline -- for one plan (0-d arrays) or the planner's rows."""

    rate: NDArray[np.float64]
    """Achieved FLOP/s at the phase's GEMM rows."""
    compute_s: NDArray[np.float64]
    memory_Bps: float
    """Achievable device-memory bandwidth."""
    memory_s: NDArray[np.float64]
    links_s: dict[str, NDArray[np.float64]]
    """By channel, for the channels given bytes."""


def roofline_times(
    system: System,
    compute_dtype: str,
    hardware_flops: ArrayLike,
    gemm_rows: ArrayLike,
    hbm_bytes: ArrayLike,
    channel_bytes: Mapping[str, ArrayLike],
    channel_messages: Mapping[str, ArrayLike],
) -> RooflineTimes:
    """Compute at the device's peak times the efficiency curve at ``gemm_rows``, device memory at its achievable
    bandwidth, each channel by :func:`link_time`: what ``diagnose`` lists per resource and the planner prices on
    its rows (the one place these formulas are written)."""
    dev, eff = system.device, system.eff
    rate = np.asarray(dev.peak_flops_for(compute_dtype) * eff.compute_at(gemm_rows), dtype=np.float64)
    bw = dev.memory_bandwidth_Bps * eff.memory
    links = {ch: link_time(system, ch, nbytes, channel_messages[ch]) for ch, nbytes in channel_bytes.items()}
    return RooflineTimes(
        rate,
        np.asarray(hardware_flops, dtype=np.float64) / rate,
        bw,
        np.asarray(hbm_bytes, dtype=np.float64) / bw,
        links,
    )


def resource_times(ph: PhaseLedger, system: System, compute_dtype: str) -> list[ResourceTime]:
    """:func:`roofline_times` of one phase's ledger, each resource with what it moved or computed."""
    per_channel: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for t in ph.traffic:
        acc = per_channel[t.channel]
        acc[0] += t.bytes_per_device
        acc[1] += t.messages
    hw = ph.flops.hardware
    r = roofline_times(
        system,
        compute_dtype,
        hw,
        ph.gemm_rows,
        ph.hbm_bytes,
        {c: v[0] for c, v in per_channel.items()},
        {c: v[1] for c, v in per_channel.items()},
    )
    rate = float(r.rate)
    out = [
        ResourceTime(
            id="compute",
            resource="compute",
            kind="compute",
            time_s=float(r.compute_s),
            detail=f"{format_flops(hw)} at {format_flop_rate(rate)} ({compute_dtype})",
        ),
        ResourceTime(
            id="memory_bandwidth",
            resource=f"{system.device.memory_kind} bandwidth",
            kind="memory_bandwidth",
            time_s=float(r.memory_s),
            detail=f"{format_bytes(ph.hbm_bytes)} at {format_bandwidth(r.memory_Bps)}",
        ),
    ]
    for channel, (nbytes, msgs) in per_channel.items():
        ch = system.channel(channel)
        out.append(
            ResourceTime(
                id=LINK_IDS[channel],
                resource=f"{CHANNEL_LABELS[channel]} ({ch.label})",
                kind="link",
                time_s=float(r.links_s[channel]),
                detail=f"{format_bytes(nbytes)} at {format_bandwidth(ch.bandwidth_Bps)}"
                f" + {msgs:.0f} x {ch.latency_s * 1e6:.3g} µs",
                channel=channel,
            )
        )
    return out


def price_phase(ph: PhaseLedger, system: System, compute_dtype: str) -> PhaseEstimate:
    res = resource_times(ph, system, compute_dtype)
    compute = res[0].time_s
    bubble = ph.pipeline_bubble_fraction * compute
    dispatch = ph.operators * system.eff.op_overhead_s  # host-side launches, paid in series
    time = combine([r.time_s for r in res], system.overlap, system.overlap_fraction) + bubble + dispatch
    return PhaseEstimate(
        phase=ph.phase, time_s=time, resources=res, bubble_s=bubble, dispatch_s=dispatch, overlap=system.overlap
    )


def memory_check(ledger: Ledger, system: System) -> MemoryCheck:
    used = ledger.memory_bytes("hbm")
    usable = system.usable_memory_bytes
    return MemoryCheck(
        tier="hbm",
        used_bytes=used,
        usable_bytes=usable,
        capacity_bytes=system.device.memory_capacity_bytes,
        fits=used <= usable,
        items=[i for i in ledger.memory if i.tier == "hbm"],
    )


def lower_tier_checks(ledger: Ledger, system: System) -> list[MemoryCheck]:
    out = []
    for tier in ("host", "ssd", "remote"):
        items = [i for i in ledger.memory if i.tier == tier]
        if not items:
            continue
        used = sum(i.bytes for i in items)
        cap = system.tier_capacity_per_device(tier) or 0.0
        out.append(
            MemoryCheck(tier=tier, used_bytes=used, usable_bytes=cap, capacity_bytes=cap, fits=used <= cap, items=items)
        )
    return out


def training_metrics(ledger: Ledger, system: System, t: float) -> TrainingMetrics:
    """Throughput, MFU / HFU, $ and J of a training step of ``t`` seconds."""
    assert ledger.training is not None
    led, n = ledger.phases[0], system.num_devices
    peak = system.device.peak_flops_for(ledger.compute_dtype)
    power = system.power_W * n if system.power_W is not None else None
    usd_rate = system.price_per_hour_usd * n / 3600.0 if system.price_per_hour_usd is not None else None
    tokens = ledger.training.tokens_per_step
    total = ledger.training.total_tokens
    steps = total / tokens if total else None
    return TrainingMetrics(
        step_time_s=t,
        tokens_per_s=tokens / t,
        mfu=led.flops.model_total / (t * peak * n),
        hfu=led.flops.hardware / (t * peak),
        joules_per_step=power * t if power is not None else None,
        joules_per_token=power * t / tokens if power is not None else None,
        usd_per_step=usd_rate * t if usd_rate is not None else None,
        usd_per_million_tokens=usd_rate * t / tokens * 1e6 if usd_rate is not None else None,
        total_time_s=steps * t if steps else None,
        total_usd=steps * t * usd_rate if steps and usd_rate is not None else None,
        total_joules=steps * t * power if steps and power is not None else None,
        total_flops_6nd=6.0 * ledger.params_active * total if total else None,
        total_flops_with_attention=steps * led.flops.model_total if steps else None,
    )


def priced_resources(ledger: Ledger, system: System) -> Estimate:
    """Every phase of the ledger on the phase roofline and the memory checks, without metrics: what the operator
    model's pricings (:func:`price_concurrency`, :func:`price_training`, the disaggregated pools) start from before
    they time the phases and derive their metrics."""
    return Estimate(
        ledger=ledger,
        device=system.device.name,
        phases=[price_phase(ph, system, ledger.compute_dtype) for ph in ledger.phases],
        memory=memory_check(ledger, system),
        lower_tiers=lower_tier_checks(ledger, system),
    )


def price(ledger: Ledger, system: System) -> Estimate:
    """Price every phase of the ledger on the phase roofline and derive throughput, MFU, $ and J."""
    base = priced_resources(ledger, system)
    phases = base.phases
    training = serving = None
    if ledger.training:
        training = training_metrics(ledger, system, phases[0].time_s)
    if ledger.serving:
        serving = static_metrics(ledger, system, np.array([phases[0].time_s]), np.array([phases[1].time_s]))
    return base.model_copy(update={"training": training, "serving": serving})


LAUNCH_LATENCY = "operator launch / collective latency"


def _launch_latency(above_floor_s: float, detail: str) -> ResourceTime:
    """The operator model's time above the roofline's slowest resource, as a resource of its own."""
    return ResourceTime(
        id="latency:launch", resource=LAUNCH_LATENCY, kind="latency", time_s=max(above_floor_s, 0.0), detail=detail
    )


GPU_CHANNELS = ("intra_node", "inter_node")
"""Links whose collectives GPU kernels drive: the operator model prices their TP (and training's PP) traffic itself;
other channels carry exchanges' streams."""


def operator_phase(
    ph: PhaseEstimate,
    time_s: float,
    above_floor_s: float,
    extra: list[ResourceTime],
    parts: dict[str, tuple[str, float]],
) -> PhaseEstimate:
    """A phase at the operator model's ``time_s``: its roofline resources, the step's time above the slowest of them
    as the launch / collective-latency resource, the serving protocol's ``extra`` terms and the operator classes."""
    latency = _launch_latency(
        above_floor_s, "kernel launches, all-reduce latency and engine step time above the roofline's slowest resource"
    )
    ops = [
        OperatorTime(operator=k, label=label, time_s=t, share=t / time_s if time_s else 0.0)
        for k, (label, t) in parts.items()
        if t > 0
    ]
    return ph.model_copy(
        update={
            "time_s": time_s,
            "resources": [*ph.resources, latency, *(r for r in extra if r.time_s > 0)],
            "bubble_s": 0.0,
            "dispatch_s": 0.0,
            "operators": ops,
        }
    )


def retimed(
    resources: list[ResourceTime], compute: ArrayLike, memory: ArrayLike, links: Mapping[str, ArrayLike]
) -> list[ResourceTime]:
    """The ledger's resources (what each moved or computed) at the times the one pricing gives the plan's row."""
    times: dict[str, ArrayLike] = {"compute": compute, "memory_bandwidth": memory}
    times.update({LINK_IDS[ch]: t for ch, t in links.items()})
    return [r.model_copy(update={"time_s": float(np.asarray(times[r.id]).reshape(-1)[0])}) for r in resources]


def estimate_concurrency(
    ledger: Ledger, m: ModelSpec, plan: Plan, job: ServingJob, system: System, kernels: Kernels, notes: list[str]
) -> Estimate:
    """Serving at ``ledger.serving.batch`` clients: the ledger with one request's prefill (what TTFT prices),
    priced by the operator model's steady state on one replica (``kernels`` with ``system.engine``'s
    scheduling profile). With pipeline parallelism a token still passes every layer in turn, so the step is
    priced as the whole model on one TP group (PP adds capacity, not speed; the stage hops are in the
    ledger's links). ``plan`` is the scenario's (its quantizations applied here)."""
    from aitrinity.cost.concurrency import steady_state
    from aitrinity.cost.operators import Layout, ScaleOut
    from aitrinity.cost.serving import effects, phase_columns, plan_arrays
    from aitrinity.cost.serving_pricing import phase_times

    qplan, fx = effects(plan)
    assert ledger.serving is not None
    if plan.disaggregation is not None:
        from aitrinity.cost.disaggregated_estimate import estimate_disaggregated

        return estimate_disaggregated(ledger, m, plan, job, system, kernels, notes)
    c, running = max(ledger.serving.batch, 1), ledger.serving.running
    # one request's prefill (TTFT's floor) and the decode step of the requests that run, as the ledger has it
    one, dec = phase_columns(plan_arrays(m, qplan, fx), 1, max(running, 1), job.prompt_tokens, job.output_tokens)
    ledger = ledger.model_copy(update={"phases": [one.ledger("prefill", 0, system), ledger.phases[1]]})
    times = (phase_times(one, system, ledger.compute_dtype), phase_times(dec, system, ledger.compute_dtype))
    lay = Layout(
        tp=qplan.tp,
        ep=qplan.ep,
        weight_dtype=qplan.weights_dtype,
        kv_dtype=qplan.cache_dtype,
        engine=system.engine,
        routing=job.moe_routing,
        scale_out=ScaleOut.of(system),
        cp=qplan.cp,
        cp_method=qplan.cp_method,
        compute_dtype=qplan.compute_dtype,
    )
    ss = steady_state(
        m,
        kernels,
        lay,
        c,
        job.prompt_tokens,
        job.output_tokens,
        prefill_fraction=1.0 - fx.prefix_hit,
        speculation=fx.speculation,
        kv_slots=running if 0 < running < c else None,  # (none fits: the memory check says so)
    )
    from aitrinity.cost.kernels import kernel_notes

    notes = [*notes, *kernel_notes(kernels)]
    if float(ss.slot_wait_s) > 0 and preempts(system.engine) and 2 * job.output_tokens >= job.prompt_tokens:
        notes.append(preemption_note(m.name, system.device.name, system.engine, qplan, c, job))
    return price_concurrency(ledger, system, ss, times, kernels.source, notes)


def prices_with_operators(system: System, serving: ServingJob | None) -> bool:
    """Whether the operator model prices a scenario -- a GPU's training step (``serving`` None), serving at a fixed
    concurrency -- or the phase roofline does (other devices' training, ``mode: static`` serving)."""
    if serving is None:
        return system.device.kind == "gpu"
    return serving.mode == "concurrency"


def price_serving_ledger(
    ledger: Ledger,
    m: ModelSpec,
    plan: Plan,
    job: ServingJob,
    system: System,
    kernels: Kernels | None = None,
    notes: Sequence[str] = (),
) -> Estimate:
    """A serving ledger priced as ``trinity diagnose`` and the planner price it: at fixed concurrency through
    the operator model (``kernels``, default the device's catalog roofline; ``notes`` say where they fell back) for
    ``mode: concurrency``, the static-batch phase roofline for ``mode: static``."""
    if not prices_with_operators(system, job):
        return estimate_static(ledger, m, plan, system)
    from aitrinity.cost.kernels import roofline

    return estimate_concurrency(ledger, m, plan, job, system, kernels or roofline(system.device), list(notes))


def estimate_static(ledger: Ledger, m: ModelSpec, plan: Plan, system: System) -> Estimate:
    """A static batch (``mode: static``), priced as the planner prices its rows
    (:func:`aitrinity.cost.serving_pricing.static_times` on the plan's columns): the batch prefilled at once, then
    decoded, each phase on the roofline with its operators' dispatch; every pipeline stage holds a batch."""
    from aitrinity.cost.serving import effects, phase_columns, plan_arrays
    from aitrinity.cost.serving_pricing import phase_times, static_times

    f = ledger.serving
    assert f is not None
    qplan, fx = effects(plan)
    b = max(f.running, 1)
    cols = phase_columns(plan_arrays(m, qplan, fx), b, b, f.prompt_tokens, f.output_tokens)
    pre, dec = (phase_times(c, system, ledger.compute_dtype) for c in cols)
    ttft, tpot = static_times(system, pre, dec)
    base = priced_resources(ledger, system)
    phases = [
        ph.model_copy(
            update={
                "time_s": float(t[0]),
                "resources": retimed(ph.resources, times.compute, times.hbm, times.links),
                "dispatch_s": float(times.dispatch[0]),
            }
        )
        for ph, times, t in zip(base.phases, (pre, dec), (ttft, tpot), strict=True)
    ]
    serving = static_metrics(ledger, system, ttft, tpot)
    return base.model_copy(update={"phases": phases, "serving": serving})


def static_metrics(
    ledger: Ledger, system: System, ttft: NDArray[np.float64], tpot: NDArray[np.float64]
) -> ServingMetrics:
    """A static batch's metrics (:func:`aitrinity.cost.serving_pricing.static_rates`) from its phases' times."""
    from aitrinity.cost.serving_pricing import static_rates

    f = ledger.serving
    assert f is not None
    r = static_rates(system, max(f.batch, 1), f.pipeline_batches_in_flight, f.replicas, f.output_tokens, ttft, tpot)
    usd, joules = float(r.usd_per_million_tokens[0]), float(r.joules_per_token[0])
    return ServingMetrics(
        ttft_s=float(ttft[0]),
        tpot_s=float(tpot[0]),
        request_latency_s=float(r.latency_s[0]),
        output_tokens_per_s=float(r.tokens_per_s[0]),
        throughput_tokens_per_s=float(r.throughput_tokens_per_s[0]),
        joules_per_output_token=None if np.isnan(joules) else joules,
        usd_per_million_output_tokens=None if np.isnan(usd) else usd,
    )


PREEMPTION_NOTE = (
    "more clients than KV slots on an engine that preempts, with outputs at least half as long as the prompts: the "
    "whole wait for a slot is priced before the first token, where the engine's recompute preemption moves part of "
    "it after the first token (TTFT likely too high, TPOT too low; docs/silicon.md); the simulator replays the "
    "preemption"
)
"""The start of the note :func:`preemption_note` writes."""


def preemption_note(model: str, device: str, engine: str, plan: Plan, clients: int, job: ServingJob) -> str:
    """:data:`PREEMPTION_NOTE` with the ``trinity simulate serving`` command that replays one replica of the
    scenario (its model, device, TP / CP, weights dtype and engine; its other exchanges are not replayed)."""
    dtype = f" --dtype {plan.weights_dtype}" if plan.weights_dtype in ("bf16", "fp8", "fp4") else ""
    cp = f" --cp {plan.cp}" if plan.cp > 1 else ""
    return (
        f"{PREEMPTION_NOTE}: trinity simulate serving --model {model} --device {device} --tp {plan.tp}{cp}{dtype} "
        f"--engine {engine} --concurrency {clients} --isl {job.prompt_tokens} --osl {job.output_tokens}"
    )


def preempts(engine: str) -> bool:
    """The engine admits a request when its prompt fits and preempts the newest when a decode finds no room (vLLM,
    SGLang), rather than reserving each request's output at admission (TensorRT-LLM)."""
    from aitrinity.cost.kv_pool import kv_pool

    return not kv_pool(engine).reserve_output


def price_concurrency(
    ledger: Ledger,
    system: System,
    ss: SteadyState,
    phases: tuple[PhaseTimes, PhaseTimes],
    kernels: str,
    notes: list[str],
) -> Estimate:
    """The Estimate of serving at a fixed concurrency: the roofline resources of one request's prefill and of the
    decode step (``phases``, :func:`aitrinity.cost.serving_pricing.phase_times` of the ledger's columns), the phase
    times of the operator model's steady state (``ss``, one replica; :mod:`aitrinity.cost.concurrency`) with the
    exchanges' streams (:func:`aitrinity.cost.serving_pricing.concurrency_times`, as the planner prices its rows),
    and throughput, $ and J from it. ``prefill`` is one request's TTFT, ``decode_step`` its TPOT."""
    from aitrinity.cost.serving_pricing import concurrency_rates, concurrency_times

    base = priced_resources(ledger, system)
    f = ledger.serving
    assert f is not None
    one, dec = phases
    # the decode phase is a decode's step, which a one-token output (TPOT 0) never takes
    tpot_op = ss.tpot_s if float(ss.tpot_s) else ss.decode_step.total
    ttft_t, dec_t = concurrency_times(system, one, dec, ss.ttft_s, tpot_op)
    mix_total = float(ss.mixed_step.total)
    (pre_parts, pre_rows), (dec_parts, dec_rows) = _steady_breakdown(ss, f)
    pre_ph, dec_ph = (
        ph.model_copy(update={"resources": retimed(ph.resources, t.compute, t.hbm, t.links)})
        for ph, t in zip(base.phases, phases, strict=True)
    )
    out = [
        operator_phase(pre_ph, float(ttft_t[0]), mix_total - float(one.floor()[0]), pre_rows, pre_parts),
        operator_phase(dec_ph, float(dec_t[0]), float(ss.decode_step.total - dec.floor()[0]), dec_rows, dec_parts),
    ]
    osl = f.output_tokens
    tpot = dec_t if osl > 1 else np.zeros(1)  # one output token: no TPOT
    r = concurrency_rates(system, max(f.batch, 1), f.replicas, osl, ttft_t, tpot)
    serving = concurrency_metrics(
        system, float(ttft_t[0]), float(tpot[0]), float(r.latency_s[0]), float(r.tokens_per_s[0])
    )
    return base.model_copy(update={"phases": out, "serving": serving, "kernels": kernels, "notes": notes})


Breakdown = tuple[dict[str, tuple[str, float]], list[ResourceTime]]
"""A phase's operator classes (id -> label, seconds) and the latency rows above its roofline."""


def _steady_breakdown(ss: SteadyState, f: ServingFacts) -> tuple[Breakdown, Breakdown]:
    """What the steady state ``ss`` adds to the prefill (one request's TTFT) and to the decode step: their time by
    operator class, and the rows for the waits and the other requests' prompts that no roofline resource holds."""
    from aitrinity.cost.operators import OPERATOR_LABELS

    mix_total = float(ss.mixed_step.total)
    pre_parts = {"request": ("server work per request (HTTP, tokenization)", float(ss.request_s))}
    for op, t in ss.mixed_step.by_class().items():  # the mixed steps, split by operator class
        share = float(t) / mix_total if mix_total else 0.0
        pre_parts[op] = (OPERATOR_LABELS[op], float(ss.prefill_steps_s) * share)
    pre_parts["wave"] = ("wait behind prompts arriving together", float(ss.wave_wait_s))
    slot_wait = float(ss.slot_wait_s)
    pre_parts["slot"] = ("wait for a KV slot (more clients than the KV cache holds)", slot_wait)
    dec_parts = {op: (OPERATOR_LABELS[op], float(t)) for op, t in ss.decode_step.by_class().items()}
    dec_parts["interference"] = ("other requests' prefill in the same steps", float(ss.interference_s))
    queue = ResourceTime(
        id="latency:queueing",
        resource="queueing and scheduling",
        kind="latency",
        time_s=max(float(ss.ttft_s) - slot_wait - mix_total, 0.0),
        detail="server work per request, steps in flight, prompts arriving together (engine profile)",
    )
    slots = ResourceTime(
        id="latency:kv_slots",
        resource="KV cache slots",
        kind="latency",
        time_s=slot_wait,
        detail=f"{f.running} of {f.batch} clients' requests fit in device memory at once; the others wait for one "
        "to finish",
    )
    chunks = ResourceTime(
        id="compute:interference",
        resource="other requests' prefill in the step",
        kind="compute",
        time_s=float(ss.interference_s),
        detail="the amortised share of the prompts that join the running batch",
    )
    return (pre_parts, [queue, slots]), (dec_parts, [chunks])


def concurrency_metrics(
    system: System, ttft: float, tpot: float, latency: float, rate: float, pools: PoolMetrics | None = None
) -> ServingMetrics:
    """A closed loop's metrics: ``rate`` output tokens per second of the whole system, and its J and $ per token
    (every device of the system powered and paid for)."""
    n, power = system.num_devices, system.power_W
    usd_rate = system.price_per_hour_usd * n / 3600.0 if system.price_per_hour_usd is not None else None
    return ServingMetrics(
        ttft_s=ttft,
        tpot_s=tpot,
        request_latency_s=latency,
        output_tokens_per_s=rate,
        throughput_tokens_per_s=rate,
        joules_per_output_token=power * n / rate if power is not None else None,
        usd_per_million_output_tokens=usd_rate / rate * 1e6 if usd_rate is not None else None,
        mode="concurrency",
        pools=pools,
    )


TRAINING_PARTS = {
    "gemm": "GEMMs (projections, MLP, LM head; forward and backward)",
    "attention": "attention kernels (forward and backward)",
    "communication": "TP collectives",
    "elementwise": "element-wise kernels (norms, dropout, activation, loss)",
    "p2p": "pipeline sends and receives",
    "cp_gather": "CP K/V all-gathers in series (cp_method allgather)",
    "bubble": "pipeline bubble (fill and drain)",
    "optimizer": "optimizer step",
    "exchange": "exchange work (compression)",
    "sm_share": "GPU work slowed by the SMs overlapped collectives hold",
}


def price_training_ledger(
    ledger: Ledger,
    m: ModelSpec,
    plan: Plan,
    system: System,
    kernels: Kernels | None = None,
    notes: Sequence[str] = (),
    columns: PlanColumns | None = None,
) -> Estimate:
    """A training ledger priced as ``trinity diagnose`` and the planner price it: the operator model on a GPU
    (``kernels``, default the device's catalog roofline; ``notes`` say where they fell back), the phase roofline on
    other devices. ``columns``: the plan's :func:`aitrinity.cost.training.plan_columns` the ledger was built from
    (computed again otherwise)."""
    if not prices_with_operators(system, None):
        return estimate_training(ledger, m, plan, system, None, [], columns)
    from aitrinity.cost.kernels import roofline

    return estimate_training(ledger, m, plan, system, kernels or roofline(system.device), list(notes), columns)


def training_estimate(
    name: str,
    m: ModelSpec,
    job: TrainingJob,
    plan: Plan,
    system: System,
    kernels: Kernels | None = None,
    notes: Sequence[str] = (),
) -> Estimate:
    """One training plan's ledger (:func:`aitrinity.cost.training.training_ledger`) priced by
    :func:`price_training_ledger`, the plan's columns computed once for both (half of the time of a chain's or a
    break-even search's step)."""
    from aitrinity.cost.training import plan_columns, training_ledger

    pc = plan_columns(m, job, plan, system)
    return price_training_ledger(training_ledger(name, m, job, plan, system, pc), m, plan, system, kernels, notes, pc)


def estimate_training(
    ledger: Ledger,
    m: ModelSpec,
    plan: Plan,
    system: System,
    kernels: Kernels | None,
    notes: list[str],
    columns: PlanColumns | None = None,
) -> Estimate:
    """One plan's training step, priced as the planner prices its rows (:func:`aitrinity.cost.training_pricing.
    price_columns` on the plan's columns, a batch of one) and rendered with the ledger's items: the operator model on
    ``kernels`` (a GPU; the slowest stage's micro-batch from kernel times, the 1F1B schedule around it, the pipeline
    sends, the optimizer's pass), else the phase roofline. ``columns``: the plan's columns, if the caller has them."""
    from aitrinity.cost.training import plan_columns
    from aitrinity.cost.training_pricing import TrainingRows, price_columns
    from aitrinity.spec.scenario import TrainingJob

    facts = ledger.training
    assert facts is not None
    job = TrainingJob(seq_len=facts.seq_len, global_batch=facts.global_batch, total_tokens=facts.total_tokens)
    pc = columns or plan_columns(m, job, plan, system)
    lay = (pc.layout.tp, pc.layout.pp)
    sp = price_columns(TrainingRows(m, job.seq_len, plan, system, lay, pc.row, pc.columns), kernels)
    if kernels is None:
        return _roofline_training(ledger, system, sp)
    from aitrinity.cost.kernels import kernel_notes

    notes = [*notes, *kernel_notes(kernels)]
    return price_training(ledger, system, sp, kernels.source, notes)


def _roofline_training(ledger: Ledger, system: System, sp: StepPrice) -> Estimate:
    """The Estimate of a training step on the phase roofline (a device without the operator model)."""
    base = priced_resources(ledger, system)
    ph = base.phases[0]
    time_s = float(sp.step_s[0])
    phase = ph.model_copy(
        update={
            "time_s": time_s,
            "resources": retimed(ph.resources, sp.compute_s, sp.memory_s, sp.links_s),
            "bubble_s": float(sp.bubble_s[0]),
            "dispatch_s": float(sp.dispatch_s[0]),
        }
    )
    return base.model_copy(update={"phases": [phase], "training": training_metrics(ledger, system, time_s)})


def price_training(ledger: Ledger, system: System, sp: StepPrice, kernels: str, notes: list[str]) -> Estimate:
    """The Estimate of a training step timed by the operator model (``sp``, :mod:`aitrinity.cost.training_pricing`).

    Resources: compute is the GEMM and attention kernels' time; device memory and the links keep the
    roofline; the GPU time above the slowest of them is the launch / collective-latency resource. Streams
    the operator model does not time (data-parallel gradients, EP all-to-all, offloads) combine with the
    GPU step under the system's overlap model: ``sum`` for a framework that reduces gradients after the
    backward pass (Megatron-LM in 2021), ``max`` for one that overlaps them (FSDP, Megatron-Core)."""
    assert sp.steps is not None and sp.gpu is not None
    base = priced_resources(ledger, system)
    led, ph = ledger.phases[0], base.phases[0]
    time_s = float(sp.step_s[0])
    compute = ResourceTime(
        id="compute",
        resource="compute",
        kind="compute",
        time_s=float(sp.compute_s[0]),
        detail=f"{format_flops(led.flops.hardware)} in GEMM and attention kernels ({kernels})",
    )
    latency = _launch_latency(
        float(sp.latency_s[0]),
        "TP collectives, memory-bound kernels and launches in series with the GEMMs, above the slowest resource",
    )
    phase = ph.model_copy(
        update={
            "time_s": time_s,
            "resources": [compute, *retimed(ph.resources[1:], sp.compute_s, sp.memory_s, sp.links_s), latency],
            "bubble_s": float(sp.bubble_s[0]),
            "dispatch_s": 0.0,
            "operators": _training_parts(sp),
        }
    )
    return base.model_copy(
        update={
            "phases": [phase],
            "training": training_metrics(ledger, system, time_s),
            "kernels": kernels,
            "notes": notes,
        }
    )


def _training_parts(sp: StepPrice) -> list[OperatorTime]:
    """A training step's time by part (:data:`TRAINING_PARTS`): each operator class over the micro-batches, the
    pipeline sends and CP gathers, the bubble, the optimizer, the exchanges' compute and the SMs collectives hold."""
    st, gpu = sp.steps, sp.gpu
    assert st is not None and gpu is not None and sp.cp_gather_s is not None and sp.exchange_s is not None
    mb = float(st.microbatches[0])
    gather = float(sp.cp_gather_s[0]) * mb
    parts = {
        **{c: float(t[0]) * mb for c, t in st.per_microbatch.by_class().items()},
        "p2p": float(st.p2p_s[0]) * mb - gather,
        "cp_gather": gather,
        "bubble": float(st.bubble_s[0]),
        "optimizer": float(st.optimizer_s[0]),
        "exchange": float(sp.exchange_s[0]),
        "sm_share": float(gpu.sm_share_s[0]),
    }
    time_s = float(gpu.time_s[0])
    return [
        OperatorTime(operator=k, label=TRAINING_PARTS[k], time_s=t, share=t / time_s) for k, t in parts.items() if t > 0
    ]
