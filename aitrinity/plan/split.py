"""Plan and diagnose split inference: the chosen split x codec, what binds at N frames/s, the break-evens (pure).

At ``frames_per_s`` each resource is busy ``time per frame x frames/s`` of
the time: device compute (layers + encode), the uplink (bytes / bandwidth),
server compute. The busiest one binds; above 100% the stream cannot keep up
and frames queue. The diagnosis also says how the best choice moves with the
uplink bandwidth (the envelope of :func:`aitrinity.cost.edge.envelope`) and,
for a bandwidth trace, how much of the time each choice is best.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from aitrinity.cost.edge import Segment, SplitOption, best, envelope
from aitrinity.cost.ledger import Result


class TraceShare(Result):
    choice: str
    fraction_of_time: float


class EdgeDiagnosis(Result):
    scenario: str
    model: str
    device: str
    server: str
    uplink: str
    uplink_Bps: float
    frames_per_s: float
    objective: str
    chosen: SplitOption
    chosen_by: str
    """'plan' (the scenario fixed it) or 'planner' (split: auto)."""
    utilization: dict[str, float]
    binding: str
    sentence: str
    all_local: SplitOption
    all_offload: SplitOption
    latency_envelope: list[Segment]
    energy_envelope: list[Segment]
    trace_shares: list[TraceShare] = []
    excluded: dict[str, int] = {}
    """Why options were not allowed -> how many."""


class EdgePlanReport(Result):
    scenario: str
    kind: str = "edge"
    objective: str
    best: SplitOption
    top: list[SplitOption]
    latency_envelope: list[Segment]
    energy_envelope: list[Segment]
    options: int
    allowed: int


def utilization(o: SplitOption, uplink_Bps: float, fps: float) -> dict[str, float]:
    up = o.paced_bytes / uplink_Bps
    return {
        "device compute": (o.device_s + o.coding_s / 2) * fps,
        "uplink": up * fps,
        "server compute": (o.server_s + o.coding_s / 2) * fps,
    }


def _fmt_bw(Bps: float) -> str:
    from aitrinity import units

    return units.format_bandwidth(Bps)


def diagnose_split(
    scenario: str,
    model: str,
    options: Sequence[SplitOption],
    uplink: str,
    uplink_Bps: float,
    fps: float,
    device: str,
    server: str,
    fixed: SplitOption | None = None,
    objective: str = "latency",
    trace: Sequence[tuple[float, float]] = (),
) -> EdgeDiagnosis:
    """Diagnose the plan's choice (or, without one, the planner's best) at the nominal uplink bandwidth."""
    chosen = fixed or best(options, uplink_Bps, objective)
    util = utilization(chosen, uplink_Bps, fps)
    binding = max(util, key=lambda k: util[k])
    n = max(o.split for o in options)
    local = next(o for o in options if o.split == n)
    offload = next(o for o in options if o.split == 0 and o.lossless == "none")
    over = util[binding]
    if over > 1:
        keep = f"the stream needs {over:.0%} of it: frames queue; at most {fps / over:.3g} frames/s keep up"
    else:
        keep = f"{over:.0%} busy at {fps:g} frames/s, headroom to {fps / max(over, 1e-12):.3g} frames/s"
    sentence = (
        f"{chosen.label}: {chosen.latency_s * 1e3:.1f} ms and {chosen.device_energy_J * 1e3:.1f} mJ a frame "
        f"on {device} -> {uplink} -> {server}; {binding} binds, {keep}. "
        f"All local: {local.latency_s * 1e3:.1f} ms; raw offload: {offload.latency_s * 1e3:.1f} ms."
    )
    excluded: dict[str, int] = {}
    for o in options:
        if not o.allowed and o.why_not:
            reason = o.why_not.split(" at this split")[0] if "no measured accuracy" in o.why_not else o.why_not
            excluded[reason] = excluded.get(reason, 0) + 1
    return EdgeDiagnosis(
        scenario=scenario,
        model=model,
        device=device,
        server=server,
        uplink=uplink,
        uplink_Bps=uplink_Bps,
        frames_per_s=fps,
        objective=objective,
        chosen=chosen,
        chosen_by="plan" if fixed else "planner",
        utilization=util,
        binding=binding,
        sentence=sentence,
        all_local=local,
        all_offload=offload,
        latency_envelope=envelope(options, "latency"),
        energy_envelope=envelope(options, "energy"),
        trace_shares=trace_shares(options, trace, objective),
        excluded=excluded,
    )


def trace_shares(
    options: Sequence[SplitOption], trace: Sequence[tuple[float, float]], objective: str = "latency"
) -> list[TraceShare]:
    """For a trace of (time s, bandwidth B/s) steps: the fraction of time each choice is the best."""
    if len(trace) < 2:
        return []
    total = trace[-1][0] - trace[0][0]
    share: dict[str, float] = {}
    for (t0, bw), (t1, _) in itertools.pairwise(trace):
        label = best(options, bw, objective).label
        share[label] = share.get(label, 0.0) + (t1 - t0)
    return [TraceShare(choice=k, fraction_of_time=v / total) for k, v in sorted(share.items(), key=lambda kv: -kv[1])]


def plan_split(
    scenario: str, options: Sequence[SplitOption], uplink_Bps: float, objective: str = "latency", top: int = 5
) -> EdgePlanReport:
    """The best split x codec by ``objective`` at the nominal bandwidth, the runners-up and both envelopes."""
    if top < 1:
        raise ValueError("top must be positive")
    win = best(options, uplink_Bps, objective)

    def rank(o: SplitOption) -> tuple[float, int, int]:
        return (o.latency_s if objective == "latency" else o.device_energy_J), o.uplink_bytes, o.split

    ranked = sorted((o for o in options if o.allowed), key=rank)
    return EdgePlanReport(
        scenario=scenario,
        objective=objective,
        best=win,
        top=ranked[:top],
        latency_envelope=envelope(options, "latency"),
        energy_envelope=envelope(options, "energy"),
        options=len(options),
        allowed=sum(o.allowed for o in options),
    )
