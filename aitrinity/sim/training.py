"""A data-parallel training job whose link bandwidth follows a trace, under static, adaptive or oracle plans.

Each step is one event: its duration is ``cost.grad_compression.step_time``
for the step's gradient compressor at the link bandwidth of the moment
(piecewise constant, from a trace of ``time_s, Mbit/s`` rows). Policies:

- ``static:<method>``: one compressor throughout.
- ``adaptive``: every ``period`` steps the Controller (``aitrinity.control``,
  the object the real adaptive hook uses) re-plans from telemetry -- the
  bandwidth the last step observed, with multiplicative measurement noise
  drawn from the simulator's seeded generator -- with its margin and
  patience, paying ``switch_cost_s`` per switch.
- ``oracle``: for each period, the compressor that is fastest over that period
  with the true bandwidth, in hindsight (an upper bound for any policy that
  switches at period boundaries; no switch cost).

The objective is the time to finish ``steps`` steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aitrinity.control import Controller
from aitrinity.cost.grad_compression import step_time
from aitrinity.cost.ledger import Result
from aitrinity.errors import SpecError
from aitrinity.sim.core import Event, Simulator
from aitrinity.spec.traces import LinkTrace

DEGRADING = LinkTrace((0.0, 20.0, 40.0, 70.0), (10e9 / 8, 1e9 / 8, 100e6 / 8, 1e9 / 8))
"""10 Gbit/s, then contention: 1 Gbit/s at 20 s, 100 Mbit/s at 40 s, 1 Gbit/s again at 70 s."""


@dataclass(frozen=True)
class TrainingJob:
    """The 1.1M-parameter MLP of ``benchmarks/bench_ddp.py`` on 2 ranks, by default with compute and codec
    costs of the order that benchmark measured on this project's 2-core machine (inputs, not constants)."""

    steps: int = 2000
    bucket_numels: tuple[int, ...] = (1_100_000,)
    world: int = 2
    compute_s: float = 0.013
    latency_s: float = 2e-4
    codec_s_per_element: tuple[tuple[str, float], ...] = (
        ("none", 4e-9),
        ("fp16", 5.5e-9),
        ("int8", 1.8e-8),
        ("topk", 2.6e-8),
        ("sign", 2.7e-8),
    )
    density: float = 0.01

    @property
    def methods(self) -> list[str]:
        return [m for m, _ in self.codec_s_per_element]

    def step_s(self, method: str, bandwidth_Bps: float) -> float:
        return step_time(
            method,
            list(self.bucket_numels),
            self.world,
            bandwidth_Bps=bandwidth_Bps,
            latency_s=self.latency_s,
            compute_s=self.compute_s,
            codec_s_per_element=dict(self.codec_s_per_element)[method],
            density=self.density,
        )


@dataclass
class _State:
    method: str
    seen: float
    """The bandwidth the last step observed (with measurement noise)."""
    switches: int = 0
    end: float = 0.0
    """When the latest step finishes."""


class TrainingSimResult(Result):
    policy: str
    steps: int
    total_s: float
    switches: int
    steps_by_method: dict[str, int]
    timeline: list[tuple[float, str, float]]
    """(time, method, bandwidth B/s) at each change of method or bandwidth."""


def _check_policy(policy: str, methods: Sequence[str]) -> None:
    if policy.startswith("static:"):
        if policy.split(":", 1)[1] not in methods:
            raise SpecError("--policy", policy, f"static:<one of {', '.join(methods)}>")
    elif policy not in ("adaptive", "oracle"):
        raise SpecError("--policy", policy, "static:<method>, adaptive or oracle")


def _period_time(job: TrainingJob, link: LinkTrace, method: str, t0: float, n: int) -> float:
    """The oracle's score of a method: ``n`` steps from ``t0`` with it, at the link's true bandwidth."""
    t = t0
    for _ in range(n):
        t += job.step_s(method, link.at(t))
    return t - t0


def simulate_training(
    job: TrainingJob,
    link: LinkTrace,
    policy: str,
    *,
    period: int = 10,
    switch_cost_s: float = 0.05,
    noise: float = 0.05,
    seed: int = 0,
) -> TrainingSimResult:
    if period < 1 or job.steps < 1:
        raise ValueError("period and steps must be positive")
    methods = job.methods
    _check_policy(policy, methods)
    sim = Simulator(seed)
    ctl = Controller(methods, "none", switch_cost_s=switch_cost_s)
    state = _State(policy.split(":", 1)[1] if policy.startswith("static:") else "none", link.at(0.0))
    counts = dict.fromkeys(methods, 0)
    timeline: list[tuple[float, str, float]] = []

    def step(i: int) -> list[Event]:
        now = sim.now
        if i % period == 0 and policy == "adaptive" and i:
            seen = state.seen
            d = ctl.decide(lambda m: job.step_s(m, seen))
            if d.choice != state.method:
                state.method, state.switches = d.choice, state.switches + 1
                now += switch_cost_s
        elif i % period == 0 and policy == "oracle":
            n = min(period, job.steps - i)
            best = min(methods, key=lambda m: _period_time(job, link, m, now, n))
            state.switches += i > 0 and best != state.method
            state.method = best
        method, bw = state.method, link.at(now)
        if not timeline or timeline[-1][1:] != (method, bw):
            timeline.append((now, method, bw))
        counts[method] += 1
        end = now + job.step_s(method, bw)
        state.seen = bw * float(sim.rng.lognormal(0.0, noise)) if noise else bw
        state.end = end
        return [(end, step, (i + 1,))] if i + 1 < job.steps else []

    sim.at(0.0, step, 0)
    sim.run()
    return TrainingSimResult(
        policy=policy,
        steps=job.steps,
        total_s=state.end,
        switches=state.switches,
        steps_by_method={m: c for m, c in counts.items() if c},
        timeline=timeline,
    )


def compare(
    job: TrainingJob, link: LinkTrace, policies: Sequence[str] | None = None, **kw: float
) -> list[TrainingSimResult]:
    """Every static plan, adaptive and oracle (or the ``policies`` given) on the same job and link."""
    names = list(policies) if policies else [f"static:{m}" for m in job.methods] + ["adaptive", "oracle"]
    return [simulate_training(job, link, p, **kw) for p in names]  # type: ignore[arg-type]  # float kwargs
