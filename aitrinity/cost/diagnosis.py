"""Diagnosis: which resource binds each phase, how busy every resource is, and the headroom.

Structured first; the one-sentence verdicts are rendered from the fields.

* binding resource of a phase: the one with the longest time (under ``max``
  overlap it alone sets the phase time; under ``sum`` it is the largest term);
* utilization of a resource: its busy time / the phase time;
* headroom: the phase time if the binding resource were free (its time set to
  zero, the others unchanged), and the speed-up that would give;
* capacity: device memory used vs usable, the largest category, and how many
  devices the workload needs before it fits (when it does not).
"""

from __future__ import annotations

from aitrinity.cost.estimate import Estimate, PhaseEstimate, ResourceId, ResourceKind, combine
from aitrinity.cost.ledger import Result
from aitrinity.units import format_bytes, format_time

PHASE_NAMES = {"train_step": "training step", "prefill": "prefill", "decode_step": "decode step"}


class ResourceUse(Result):
    id: ResourceId
    resource: str
    kind: ResourceKind
    time_s: float
    utilization: float


class PhaseDiagnosis(Result):
    phase: str
    time_s: float
    binding: ResourceId
    binding_label: str
    """The binding resource's display name."""
    binding_kind: ResourceKind
    binding_share: float
    """Binding resource's time / phase time."""
    uses: list[ResourceUse]
    bubble_fraction: float
    time_if_free_s: float
    speedup_if_free: float | None
    """None when nothing else takes time (unbounded)."""
    sentence: str


class CapacityDiagnosis(Result):
    tier: str
    used_bytes: float
    usable_bytes: float
    fits: bool
    largest_category: str
    largest_bytes: float
    min_devices: int | None
    """Devices needed to fit (None: fits already, or no device count suffices with this plan)."""
    sentence: str


class ExchangeReport(Result):
    """One exchange of the plan: its pathway, what it buys, and its break-even rule evaluated here."""

    kind: str
    title: str
    pathway: str
    spends: str
    relieves: str
    time_per_unit_with_s: float
    """Seconds per training token, or per output token of a serving batch, with the exchange."""
    time_per_unit_without_s: float
    device_bytes_relieved: float
    fits_without: bool
    resource: str | None
    """The resource whose bandwidth decides it."""
    threshold_Bps: float | None
    current_Bps: float | None
    pays_off: bool
    accuracy_drop: float = 0.0
    """Its quality cost: the share of the exact model's benchmark score it loses."""
    steps_factor: float = 1.0
    """Its statistical cost: optimizer steps to the same loss, as a multiple (counted in the times above)."""
    sentence: str


class Diagnosis(Result):
    scenario: str
    kind: str
    model: str
    device: str
    num_devices: int
    binding: ResourceId
    """``capacity:hbm`` when the workload does not fit, else the slowest phase's binding resource."""
    binding_label: str
    """Its display name (``capacity (hbm)``, ``intra-node link (nvlink-4)``)."""
    verdict: str
    phases: list[PhaseDiagnosis]
    capacity: CapacityDiagnosis
    estimate: Estimate
    exchanges: list[ExchangeReport] = []


def diagnose_phase(ph: PhaseEstimate, overlap_fraction: float) -> PhaseDiagnosis:
    res = ph.resources
    top = max(res, key=lambda r: r.time_s)
    others = [r.time_s for r in res if r is not top]
    if ph.operators:  # the operator model runs its terms in series: freeing one removes its time (and,
        # in a pipeline, its share of the bubble, which is a number of stage slots)
        scale = ph.time_s / (ph.time_s - ph.bubble_s) if ph.time_s > ph.bubble_s else 1.0
        free = max(ph.time_s - top.time_s * scale, max(others, default=0.0))
    else:
        free = combine(others, ph.overlap, overlap_fraction) + (ph.bubble_s if top.kind != "compute" else 0.0)
        free += ph.dispatch_s
    uses = [
        ResourceUse(
            id=r.id,
            resource=r.resource,
            kind=r.kind,
            time_s=r.time_s,
            utilization=r.time_s / ph.time_s if ph.time_s else 0.0,
        )
        for r in res
    ]
    speedup = ph.time_s / free if free > 0 else None
    share = top.time_s / ph.time_s if ph.time_s else 0.0
    name = PHASE_NAMES.get(ph.phase, ph.phase)
    runner = max(others) if others else 0.0
    runner_name = next((r.resource for r in res if r is not top and r.time_s == runner), None)
    tail = f"; next is {runner_name} at {runner / ph.time_s:.0%}" if runner_name and ph.time_s else ""
    bubble = f", pipeline bubble {ph.bubble_s / ph.time_s:.0%}" if ph.bubble_s > 0 and ph.time_s else ""
    gain = _x(speedup)
    sentence = (
        f"The {name} takes {format_time(ph.time_s)}, bound by {top.resource} "
        f"({share:.0%} of the time{bubble}){tail}; if {top.resource} were free the {name} would be {gain} faster."
    )
    return PhaseDiagnosis(
        phase=ph.phase,
        time_s=ph.time_s,
        binding=top.id,
        binding_label=top.resource,
        binding_kind=top.kind,
        binding_share=share,
        uses=uses,
        bubble_fraction=ph.bubble_s / ph.time_s if ph.time_s else 0.0,
        time_if_free_s=free,
        speedup_if_free=speedup,
        sentence=sentence,
    )


_CATEGORY = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer": "optimizer states",
    "activations": "activations",
    "kv_cache": "KV cache",
    "buffers": "buffers",
}


def diagnose_capacity(est: Estimate, min_devices: int | None) -> CapacityDiagnosis:
    """Device memory first; when it fits, the first lower tier that does not (offloaded bytes)."""
    over = [t for t in est.lower_tiers if not t.fits]
    if est.memory.fits and over:
        t = over[0]
        largest = max(t.items, key=lambda i: i.bytes)
        return CapacityDiagnosis(
            tier=t.tier,
            used_bytes=t.used_bytes,
            usable_bytes=t.usable_bytes,
            fits=False,
            largest_category=largest.category,
            largest_bytes=largest.bytes,
            min_devices=None,
            sentence=f"Does not fit: the plan offloads {format_bytes(t.used_bytes)} per device to {t.tier} memory, "
            f"whose share per device is {format_bytes(t.usable_bytes)}.",
        )
    mem = est.memory
    largest = max(mem.items, key=lambda i: i.bytes)
    used, usable = format_bytes(mem.used_bytes), format_bytes(mem.usable_bytes)
    what = f"{_CATEGORY[largest.category]} {format_bytes(largest.bytes)}"
    if mem.fits:
        sentence = f"Fits: {used} of {usable} usable device memory per {est.device} (largest: {what})."
        need = None
    else:
        need = min_devices
        if need is None:
            more = "no device count fits with this plan's parallel layout; raise tp/pp or the ZeRO stage"
        else:
            more = f"it fits from {need} x {est.device}"
        sentence = f"Does not fit: needs {used} per device of {usable} usable (largest: {what}); {more}."
    return CapacityDiagnosis(
        tier=mem.tier,
        used_bytes=mem.used_bytes,
        usable_bytes=mem.usable_bytes,
        fits=mem.fits,
        largest_category=largest.category,
        largest_bytes=largest.bytes,
        min_devices=need,
        sentence=sentence,
    )


def diagnose(est: Estimate, overlap_fraction: float = 0.5, min_devices: int | None = None) -> Diagnosis:
    """Diagnose a priced ledger. ``min_devices`` comes from :mod:`aitrinity.cost.capacity`."""
    phases = [diagnose_phase(p, overlap_fraction) for p in est.phases]
    capacity = diagnose_capacity(est, min_devices)
    led = est.ledger
    slowest = max(phases, key=lambda p: p.time_s)
    if led.serving:  # per request, decode runs output_tokens times
        weight = {"prefill": 1.0, "decode_step": float(led.serving.output_tokens)}
        slowest = max(phases, key=lambda p: p.time_s * weight.get(p.phase, 1.0))
    binding: ResourceId = "capacity:hbm" if not capacity.fits else slowest.binding
    label = f"capacity ({capacity.tier})" if not capacity.fits else slowest.binding_label
    if not capacity.fits:
        verdict = capacity.sentence
    elif led.serving:
        verdict = _serving_verdict(est, phases)
    else:
        verdict = f"{slowest.sentence} {_metrics(est)}".strip()
    return Diagnosis(
        scenario=led.scenario,
        kind="training" if led.training else "serving",
        model=led.model,
        device=est.device,
        num_devices=led.num_devices,
        binding=binding,
        binding_label=label,
        verdict=verdict,
        phases=phases,
        capacity=capacity,
        estimate=est,
    )


def _serving_verdict(est: Estimate, phases: list[PhaseDiagnosis]) -> str:
    pre, dec = phases[0], phases[1]
    items = {i.category: i.bytes for i in est.memory.items}
    kv, w = items.get("kv_cache", 0.0), items.get("weights", 0.0)
    kv_note = ""
    if w > 0 and kv > w:
        kv_note = f" The KV cache ({format_bytes(kv)} per device) is {kv / w:.1f}x the weights ({format_bytes(w)})."
    f = est.ledger.serving
    if f is not None and 0 < f.running < f.batch:
        kv_note += (
            f" Device memory holds {f.running} of the {f.batch} clients' requests at once; the others wait for a slot"
            " (fewer clients, a smaller KV cache -- quantized or offloaded -- or more devices shorten the wait)."
        )
    if f is not None and f.output_tokens == 1:  # nothing is decoded after the first token
        return (
            f"Prefill is bound by {pre.binding_label} ({pre.binding_share:.0%}); freeing it would make prefill "
            f"{_x(pre.speedup_if_free)} faster. One output token: no decode steps.{kv_note} {_metrics(est)}"
        )
    return (
        f"Prefill is bound by {pre.binding_label} ({pre.binding_share:.0%}), decode by {dec.binding_label} "
        f"({dec.binding_share:.0%}); freeing the first would make prefill {_x(pre.speedup_if_free)} faster, "
        f"freeing the second decode {_x(dec.speedup_if_free)}.{kv_note} {_metrics(est)}"
    )


def _x(speedup: float | None) -> str:
    return "unboundedly" if speedup is None else f"{speedup:.2f}x"


def _metrics(est: Estimate) -> str:
    if est.training:
        t = est.training
        return f"MFU {t.mfu:.0%}, {t.tokens_per_s:,.0f} tokens/s."
    if est.serving:
        s = est.serving
        one_token = est.ledger.serving is not None and est.ledger.serving.output_tokens == 1  # no TPOT
        tpot = "" if one_token else f", TPOT {format_time(s.tpot_s)}"
        return f"TTFT {format_time(s.ttft_s)}{tpot}, {s.output_tokens_per_s:,.0f} tokens/s."
    return ""
