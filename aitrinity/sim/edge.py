"""An edge camera stream whose uplink follows a trace, under static splits, the adaptive Controller and an oracle.

Frames arrive at ``fps``; the device handles one frame at a time (as the
split runtime does), so a frame waits while the previous one is in flight.
A frame's service time is its split x codec option's latency
(``cost.edge.SplitOption.latency_at``) at the uplink bandwidth of the moment
it starts (piecewise constant, from a trace); its latency is the wait plus the
service. Policies:

- ``static:<label>``: one split x codec throughout;
- ``adaptive``: before every frame the Controller (the object the real split
  runtime uses, with its margin) re-plans from telemetry -- the bandwidth the
  last upload saw, with multiplicative noise from the simulator's seeded
  generator; while the chosen option sends less than ``probe_bytes`` the
  device probes the link every ``probe_every`` frames instead;
- ``oracle``: for each window of ``oracle_window_s``, the option with the least
  mean latency over that window in hindsight -- the true bandwidth, and the
  queue the window inherits (the best fixed plan per period; a policy that
  re-plans every frame can beat it).

The objective is the mean frame latency (p95 and device energy are reported).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aitrinity.control import Controller
from aitrinity.cost.edge import SplitOption
from aitrinity.cost.ledger import Result
from aitrinity.errors import SpecError
from aitrinity.sim.core import Event, Simulator
from aitrinity.sim.metrics import Percentiles, percentiles
from aitrinity.spec.traces import LinkTrace


@dataclass(frozen=True)
class EdgeStream:
    fps: float = 2.0
    duration_s: float = 200.0
    noise: float = 0.1
    """Standard deviation of the log of the bandwidth measurement error."""
    probe_bytes: int = 2048
    probe_every: int = 5
    oracle_window_s: float = 5.0
    margin: float = 0.1


class EdgeSimResult(Result):
    policy: str
    frames: int
    latency_s: Percentiles
    mean_latency_s: float
    mean_energy_J: float
    switches: int
    frames_by_choice: dict[str, int]


@dataclass
class _State:
    choice: str
    free: float = 0.0
    switches: int = 0
    seen: float = 0.0
    """The bandwidth the device last measured."""


def _service(o: SplitOption, bw: float) -> float:
    return o.latency_at(bw)


def _allowed(options: Sequence[SplitOption], policy: str, stream: EdgeStream) -> dict[str, SplitOption]:
    """The allowed options by label, after checking the policy names one of them (or adaptive / oracle)."""
    allowed = {o.label: o for o in options if o.allowed}
    if not allowed:
        raise SpecError("options", len(options), "at least one allowed split option")
    if stream.fps <= 0 or stream.duration_s <= 0:
        raise ValueError("fps and duration must be positive")
    if policy.startswith("static:"):
        if policy.split(":", 1)[1] not in allowed:
            raise SpecError("--policy", policy, f"static:<one of {', '.join(allowed)}>")
    elif policy not in ("adaptive", "oracle"):
        raise SpecError("--policy", policy, "static:<choice>, adaptive or oracle")
    return allowed


def _window_mean(o: SplitOption, link: LinkTrace, fps: float, frames: range, free: float) -> float:
    """The oracle's score of an option: the mean latency of the window's ``frames`` under it, with the true
    bandwidth and the queue the window inherits (the device free from ``free``)."""
    total = 0.0
    for j in frames:
        arrival = j / fps
        start = max(arrival, free)
        free = start + _service(o, link.at(start))
        total += free - arrival
    return total / len(frames)


def simulate_edge(
    options: Sequence[SplitOption], link: LinkTrace, policy: str, stream: EdgeStream = EdgeStream(), *, seed: int = 0
) -> EdgeSimResult:
    allowed = _allowed(options, policy, stream)
    n = int(stream.duration_s * stream.fps)
    window = stream.oracle_window_s
    sim = Simulator(seed)
    labels = list(allowed)
    first = min(allowed.values(), key=lambda o: o.latency_at(link.at(0.0))).label
    ctl = Controller(labels, first, margin=stream.margin, patience=1)
    lat: list[float] = []
    energy: list[float] = []
    counts: dict[str, int] = {}
    state = _State(policy.split(":", 1)[1] if policy.startswith("static:") else first, seen=link.at(0.0))

    def frame(i: int) -> list[Event]:
        arrival = i / stream.fps
        start = max(arrival, state.free)
        if policy == "adaptive" and i:
            bw_seen = state.seen
            d = ctl.decide(lambda label: allowed[label].latency_at(bw_seen))
            state.switches += d.switched
            state.choice = d.choice
        elif policy == "oracle" and i % max(1, round(window * stream.fps)) == 0:
            frames = range(i, min(n, i + max(1, round(window * stream.fps))))
            best = min(labels, key=lambda label: _window_mean(allowed[label], link, stream.fps, frames, state.free))
            state.switches += i > 0 and best != state.choice
            state.choice = best
        o = allowed[state.choice]
        bw = link.at(start)
        service = _service(o, bw)
        state.free = start + service
        lat.append(start + service - arrival)
        energy.append(o.energy_at(bw))
        counts[o.label] = counts.get(o.label, 0) + 1
        noisy = bw * float(sim.rng.lognormal(0.0, stream.noise)) if stream.noise else bw
        if o.uplink_bytes >= stream.probe_bytes or i % stream.probe_every == 0:
            state.seen = noisy  # the upload, or a probe between frames, measured the link
        return [((i + 1) / stream.fps, frame, (i + 1,))] if i + 1 < n else []

    sim.at(0.0, frame, 0)
    sim.run()
    return EdgeSimResult(
        policy=policy,
        frames=len(lat),
        latency_s=percentiles(lat),
        mean_latency_s=sum(lat) / len(lat),
        mean_energy_J=sum(energy) / len(energy),
        switches=state.switches,
        frames_by_choice=counts,
    )


def compare_edge(
    options: Sequence[SplitOption], link: LinkTrace, stream: EdgeStream = EdgeStream(), *, seed: int = 0
) -> list[EdgeSimResult]:
    """Every allowed static choice, adaptive and oracle on the same stream and link."""
    names = [f"static:{o.label}" for o in options if o.allowed] + ["adaptive", "oracle"]
    return [simulate_edge(options, link, p, stream, seed=seed) for p in names]
