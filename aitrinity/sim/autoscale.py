"""Serving under a diurnal load: how many instances to run each period -- static, adaptive or oracle.

The day is cut into periods; each period's requests are served by the serving
simulator (:func:`aitrinity.sim.serving.simulate_serving`) on the number of
instances the policy picks for it (each period starts with empty queues -- an
approximation that favours no policy). The objective, in dollars:
instance-hours at ``price_per_hour_usd`` plus ``penalty_usd`` for every
request that misses its TTFT or TPOT objective or is rejected.

- ``static:N``: N instances all day;
- ``adaptive``: before each period the Controller forecasts the period's
  arrival count from the counts it has observed (Holt's linear trend: a
  smoothed level plus a smoothed trend), provisions for that forecast plus
  ``quantile_z`` Poisson standard deviations (a missed request costs more than
  an idle instance-period), and predicts the cost of every N by replaying each
  of the last ``history`` periods' requests -- the traffic it has seen -- on N
  instances through the same simulator, their arrivals scaled to the
  provisioned count, averaging the costs; it switches with a 10% margin;
- ``oracle``: for each period the N with the least cost on that period's own
  requests, in hindsight.

Every (period, N, load factor) is simulated once and shared by all policies.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from aitrinity.control import Controller
from aitrinity.cost.ledger import Result
from aitrinity.errors import SpecError
from aitrinity.sim.serving import ServingConfig, simulate_serving
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.traces import TraceRequest


@dataclass(frozen=True)
class Autoscale:
    period_s: float = 30.0
    max_instances: int = 6
    price_per_hour_usd: float = 1.0
    """Of one instance."""
    penalty_usd: float = 0.01
    """Lost value of one request that misses its SLO (or is rejected)."""
    quantile_z: float = 1.5
    """Provision for the forecast count plus this many standard deviations (Poisson: its square root)."""
    history: int = 2
    """Past periods replayed for each prediction; more average out their bursts but look further back."""
    margin: float = 0.1
    """The Controller's hysteresis: switch only for a predicted saving above this share of the current cost."""
    level_weight: float = 0.5
    trend_weight: float = 0.3
    """Holt's smoothing weights for the level and the trend of the arrival count (Holt 1957)."""


class AutoscaleResult(Result):
    policy: str
    objective_usd: float
    instance_hours: float
    missed: int
    requests: int
    switches: int
    instances: list[int]
    """The instance count of each period."""


@dataclass
class Table:
    """Missed requests of every (period, instance count, load factor), simulated on demand and kept."""

    periods: list[list[TraceRequest]]
    model: ModelSpec
    base: ServingConfig
    missed: dict[tuple[int, int, float], float]

    def get(self, k: int, n: int, load: float = 1.0) -> float:
        """Requests of period ``k`` that miss on ``n`` instances; with ``load`` g the arrivals come g times as
        fast and the count is scaled to a whole period at that rate."""
        key = (k, n, round(load, 3))
        if key not in self.missed:
            reqs = self.periods[k]
            if not reqs:
                self.missed[key] = 0.0
            else:
                g = key[2]
                if g != 1.0:
                    reqs = [
                        TraceRequest(r.timestamp_ms / g, r.prompt_tokens, r.output_tokens, r.hash_ids) for r in reqs
                    ]
                res = simulate_serving(reqs, self.model, replace(self.base, instances=n))
                self.missed[key] = (res.requests - round(res.goodput_rps * res.makespan_s)) * g
        return self.missed[key]


def periods(reqs: Sequence[TraceRequest], period_s: float) -> list[list[TraceRequest]]:
    """Requests by period of arrival, each period's timestamps shifted to start at 0."""
    if not reqs:
        return []
    end = max(r.timestamp_ms for r in reqs) / 1e3
    out: list[list[TraceRequest]] = [[] for _ in range(int(end // period_s) + 1)]
    for r in reqs:
        k = int(r.timestamp_ms / 1e3 // period_s)
        out[k].append(TraceRequest(r.timestamp_ms - k * period_s * 1e3, r.prompt_tokens, r.output_tokens, r.hash_ids))
    return out


def table(requests: Sequence[TraceRequest], m: ModelSpec, base: ServingConfig, a: Autoscale) -> Table:
    if a.period_s <= 0 or a.max_instances < 1 or a.history < 1 or a.quantile_z < 0:
        raise ValueError("period_s, max_instances and history must be positive, quantile_z not negative")
    if not (0 < a.level_weight <= 1 and 0 <= a.trend_weight <= 1):
        raise ValueError("level_weight in (0, 1], trend_weight in [0, 1]")
    return Table(periods(requests, a.period_s), m, base, {})


def simulate_autoscale(t: Table, policy: str, a: Autoscale = Autoscale()) -> AutoscaleResult:
    options = list(range(1, a.max_instances + 1))
    fixed = 0
    if policy.startswith("static:"):
        tail = policy.split(":", 1)[1]
        fixed = int(tail) if tail.isdigit() else 0
        if fixed not in options:
            raise SpecError("--policy", policy, f"static:N with N in 1..{a.max_instances}")
    elif policy not in ("adaptive", "oracle"):
        raise SpecError("--policy", policy, "static:N, adaptive or oracle")
    hours = a.period_s / 3600

    def cost(n: int, k: int, load: float = 1.0) -> float:
        return n * a.price_per_hour_usd * hours + a.penalty_usd * t.get(k, n, load)

    ctl = Controller([str(n) for n in options], str(a.max_instances), margin=a.margin, patience=1)
    counts = [len(p) for p in t.periods]
    forecast = Holt(a.level_weight, a.trend_weight)
    chosen: list[int] = []
    for k in range(len(t.periods)):
        if fixed:
            n = fixed
        elif policy == "oracle":
            n = min(options, key=lambda n: (cost(n, k), n))
        elif k == 0:
            n = a.max_instances  # nothing observed yet: the safe side
        else:
            expected = max(1.0, forecast.update(counts[k - 1]))
            provision = expected + a.quantile_z * math.sqrt(expected)
            seen = [j for j in range(max(0, k - a.history), k) if counts[j]]

            def predict(label: str, seen: list[int] = seen, provision: float = provision) -> float:
                if not seen:
                    return int(label) * a.price_per_hour_usd * hours
                return sum(cost(int(label), j, round(provision / counts[j], 2)) for j in seen) / len(seen)

            n = int(ctl.decide(predict).choice)
        chosen.append(n)
    return AutoscaleResult(
        policy=policy,
        objective_usd=sum(cost(n, k) for k, n in enumerate(chosen)),
        instance_hours=sum(chosen) * hours,
        missed=round(sum(t.get(k, n) for k, n in enumerate(chosen))),
        requests=sum(len(p) for p in t.periods),
        switches=sum(1 for x, y in itertools.pairwise(chosen) if x != y),
        instances=chosen,
    )


@dataclass
class Holt:
    """Holt's linear-trend exponential smoothing of a series (Holt 1957; Hyndman & Athanasopoulos, *Forecasting:
    Principles and Practice*, §8.2): ``update(x)`` takes the newest value and returns the one-step forecast."""

    alpha: float
    beta: float
    level: float | None = None
    trend: float = 0.0

    def update(self, x: float) -> float:
        if self.level is None:
            self.level = x
        else:
            previous = self.level
            self.level = self.alpha * x + (1 - self.alpha) * (previous + self.trend)
            self.trend = self.beta * (self.level - previous) + (1 - self.beta) * self.trend
        return self.level + self.trend


def compare_autoscale(
    t: Table, a: Autoscale = Autoscale(), progress: Callable[[int, int], None] | None = None
) -> list[AutoscaleResult]:
    """Every static count, adaptive and oracle; ``progress(done, total)`` after each policy."""
    names = [f"static:{n}" for n in range(1, a.max_instances + 1)] + ["adaptive", "oracle"]
    out = []
    for i, p in enumerate(names, 1):
        out.append(simulate_autoscale(t, p, a))
        if progress:
            progress(i, len(names))
    return out
