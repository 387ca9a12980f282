"""Hardware what-if: the value of each resource, and how flexibly a design serves a workload mix.

For one design x workload the planner finds the best plan; then each resource
(peak FLOP/s, device-memory bandwidth and capacity, each link's bandwidth,
host-memory capacity) is scaled and the planner runs again. Two numbers per
resource come out of those full re-plans (never of a plan held fixed):

* **elasticity** at ``+step`` (default +10%): ``e_r = (V(r·(1+δ)) / V - 1) / δ``,
  the system-level exchange rate ("+10% HBM capacity buys +4% tokens/s");
* **kept under constraint** at ``×constraint`` (default ×0.5):
  ``k_r = V(r·c) / V``, and whether (and between which factors) the best plan
  switches as the resource shrinks -- where the design starts converting
  another resource into relief for this one.

``V`` is the objective, larger-is-better: tokens/s (``performance``), tokens
per dollar, or tokens per joule. A workload no plan fits has ``V = 0``.

Across a suite of workloads with weights ``w`` (normalised), for design ``D``:

* relative performance  ``s_D,w = V_D,w / max_D' V_D',w``  (1 = the best design on ``w``);
* performance           ``P_D = Σ_w w · s_D,w``;
* mix-shift retention   ``M_D = min_w s_D,w / P_D``  -- what it keeps if the mix collapses
  onto its worst workload;
* constraint retention  ``C_D = Σ_w w · min_r k_r(D, w)``  -- what it keeps, on average,
  when its scarcest-for-it resource is halved and it re-plans;
* flexibility           ``F_D = sqrt(M_D · C_D)``, reported with the number of distinct
  exchange pathways its best plans use, nominal and constrained.

Pure functions over resolved inputs (:mod:`aitrinity.hardware` resolves names).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from aitrinity.cost.ledger import Result
from aitrinity.plan import registry
from aitrinity.plan.exchanges import CATALOG
from aitrinity.plan.objective import require
from aitrinity.plan.rows import pareto_indices
from aitrinity.plan.search import Objective, PlanChoice, Space, search_training
from aitrinity.plan.search_serving import ServingChoice, ServingObjective, search_serving
from aitrinity.spec import quantities
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Scenario, System

HardwareObjective = Literal["performance", "tokens_per_dollar", "tokens_per_joule"]
HARDWARE_OBJECTIVES: dict[str, HardwareObjective] = {
    "performance": "performance",
    "tokens_per_s": "performance",
    "tokens_per_dollar": "tokens_per_dollar",
    "tokens_per_joule": "tokens_per_joule",
    "joules_per_token": "tokens_per_joule",
}
"""Accepted spellings; ``joules_per_token`` is ranked as its inverse, tokens per joule."""
_PLANNER: dict[str, tuple[Objective, ServingObjective]] = {
    "performance": ("time", "throughput"),
    "tokens_per_dollar": ("cost", "cost"),
    "tokens_per_joule": ("energy", "energy"),
}
WHATIF_SPACE = Space.of({"micro-batch": (1, 2, 4, 8), "virtual-stages": (1, 2), "activation-offload": (0.0, 1.0)})
"""The training space the what-if re-plans over: the planner's default less its rarest corners
(micro-batch 16, 4 virtual stages, half offload), a third of the candidates, since every design x
workload x resource is a full re-plan."""
UNIT = {"performance": "tokens/s", "tokens_per_dollar": "tokens/$", "tokens_per_joule": "tokens/J"}


@dataclass(frozen=True)
class Case:
    """One workload of a suite on one design, resolved."""

    workload: str
    design: str
    weight: float
    model: ModelSpec
    scenario: Scenario
    system: System
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None


class Best(Result):
    """The planner's best plan for a case and what it achieves."""

    value: float
    """The objective, larger is better; 0 when no plan fits."""
    plan: str
    techniques: list[str]
    pathways: list[str]
    tokens_per_s: float | None
    usd_per_million_tokens: float | None
    joules_per_token: float | None
    ttft_s: float | None = None
    tpot_s: float | None = None
    step_time_s: float | None = None
    binding: str | None = None


class ResourceEffect(Result):
    """The best plan again after one resource is scaled by ``factor``."""

    resource: str
    factor: float
    value: float
    change: float
    """``value / nominal - 1``."""
    elasticity: float | None
    """``change / (factor - 1)``: percent gained per percent of the resource (None at factor 1)."""
    switched: bool
    """The best plan differs from the nominal one."""
    plan: str
    pathways: list[str]
    switch_between: tuple[float, float] | None = None
    """Factors bracketing where the best plan first changes as the resource shrinks (bisection)."""


class WorkloadResult(Result):
    workload: str
    design: str
    weight: float
    nominal: Best
    elasticities: list[ResourceEffect]
    constrained: list[ResourceEffect]


class DesignScore(Result):
    design: str
    performance: float
    mix_retention: float
    constraint_retention: float
    flexibility: float
    pathways: list[str]
    usd_per_million_tokens: float | None
    """Weighted mean over the suite's workloads of the best plans' $ per million tokens (None: no price)."""
    joules_per_token: float | None
    pareto: bool
    """Not dominated in (performance up, $ down, J down) by another design."""


class Comparison(Result):
    suite: str
    objective: str
    unit: str
    step: float
    constraint: float
    designs: list[str]
    results: list[WorkloadResult]
    scores: list[DesignScore]
    replans: int


def resources(system: System) -> list[str]:
    """The resources of ``system`` whose elasticity is measured (links it lacks are left out)."""
    out = ["flops", "hbm_bandwidth", "hbm_capacity"]
    if system.num_devices > 1:
        out.append("intra_node_bandwidth")
    if system.num_devices > system.devices_per_node and system.inter_node_link is not None:
        out.append("inter_node_bandwidth")
    if system.host_memory is not None:
        out += ["host_bandwidth", "host_capacity"]
    return out


def _best(objective: HardwareObjective, c: PlanChoice | ServingChoice | None, plan: str, tech: list[str]) -> Best:
    if c is None:
        return Best(
            value=0.0,
            plan="no plan fits",
            techniques=[],
            pathways=[],
            tokens_per_s=None,
            usd_per_million_tokens=None,
            joules_per_token=None,
        )
    tokens = c.throughput_tokens_per_s if isinstance(c, ServingChoice) else c.tokens_per_s
    usd, joules = c.usd_per_million_tokens, c.joules_per_token
    if objective == "performance":
        value = tokens
    elif objective == "tokens_per_dollar":
        value = 1e6 / usd if usd else 0.0
    else:
        value = 1.0 / joules if joules else 0.0
    return Best(
        value=value,
        plan=plan,
        techniques=tech,
        pathways=sorted({CATALOG[t].pathway for t in tech}),
        tokens_per_s=tokens,
        usd_per_million_tokens=usd,
        joules_per_token=joules,
        ttft_s=c.ttft_s if isinstance(c, ServingChoice) else None,
        tpot_s=c.tpot_s if isinstance(c, ServingChoice) else None,
        step_time_s=None if isinstance(c, ServingChoice) else c.step_time_s,
        binding=c.binding,
    )


def best(case: Case, system: System, objective: HardwareObjective) -> Best:
    """Run the planner on ``case`` with ``system`` and return its best plan (value 0 when none fits)."""
    w, base = case.scenario.workload, case.scenario.plan
    require(objective, system, case.design)
    train_obj, serve_obj = _PLANNER[objective]
    if w.training is not None:
        c = search_training(case.model, w.training, base, system, train_obj, 1, WHATIF_SPACE, pareto=False).best
        if c is None:
            return _best(objective, None, "", [])
        return _best(objective, c, c.label, registry.used_by(c.plan(base), "training"))
    assert w.serving is not None
    s = search_serving(
        case.model, w.serving, base, system, serve_obj, 1, case.ttft_slo_s, case.tpot_slo_s, pareto=False
    ).best
    if s is None:
        return _best(objective, None, "", [])
    return _best(objective, s, s.label, registry.used_by(s.plan(base), "serving"))


def _effect(resource: str, factor: float, nominal: Best, after: Best) -> ResourceEffect:
    change = after.value / nominal.value - 1.0 if nominal.value > 0 else (0.0 if after.value == 0 else math.inf)
    return ResourceEffect(
        resource=resource,
        factor=factor,
        value=after.value,
        change=change,
        elasticity=change / (factor - 1.0) if factor != 1.0 and math.isfinite(change) else None,
        switched=after.plan != nominal.plan,
        plan=after.plan,
        pathways=after.pathways,
    )


def analyse(
    case: Case,
    objective: HardwareObjective = "performance",
    step: float = 0.1,
    constraint: float = 0.5,
    refine: int = 2,
    on_replan: Callable[[], None] | None = None,
) -> WorkloadResult:
    """Best plan, elasticity of every resource at ``1 + step``, and its re-plan at ``constraint``.

    ``refine``: bisection steps (in log space) locating where the best plan first switches when a
    constrained resource's plan differs from the nominal one.
    """
    tick = on_replan or (lambda: None)

    def plan_at(resource: str, factor: float) -> Best:
        tick()
        return best(case, quantities.scale(case.system, resource, factor), objective)

    tick()
    nominal = best(case, case.system, objective)
    ups, downs = [], []
    for r in resources(case.system):
        ups.append(_effect(r, 1.0 + step, nominal, plan_at(r, 1.0 + step)))
        down = _effect(r, constraint, nominal, plan_at(r, constraint))
        if down.switched and refine:
            lo, hi = constraint, 1.0  # plan differs at lo, equals nominal at hi
            for _ in range(refine):
                mid = math.sqrt(lo * hi)
                if plan_at(r, mid).plan != nominal.plan:
                    lo = mid
                else:
                    hi = mid
            down = down.model_copy(update={"switch_between": (lo, hi)})
        downs.append(down)
    return WorkloadResult(
        workload=case.workload,
        design=case.design,
        weight=case.weight,
        nominal=nominal,
        elasticities=ups,
        constrained=downs,
    )


def _weighted(pairs: Sequence[tuple[float, float | None]]) -> float | None:
    if any(v is None for _, v in pairs):
        return None
    total = sum(w for w, _ in pairs)
    return sum(w * (v or 0.0) for w, v in pairs) / total


def score(results: Sequence[WorkloadResult], designs: Sequence[str]) -> list[DesignScore]:
    """Performance, retention, flexibility and the ($, J, performance) Pareto set of each design."""
    workloads = list(dict.fromkeys(r.workload for r in results))
    by = {(r.design, r.workload): r for r in results}
    top = {w: max(by[d, w].nominal.value for d in designs) for w in workloads}
    out = []
    for d in designs:
        rs = [by[d, w] for w in workloads]
        total = sum(r.weight for r in rs)
        rel = [r.nominal.value / top[r.workload] if top[r.workload] > 0 else 0.0 for r in rs]
        perf = sum(r.weight * s for r, s in zip(rs, rel, strict=True)) / total
        mix = min(rel) / perf if perf > 0 else 0.0
        kept = [
            min((e.value / r.nominal.value for e in r.constrained), default=1.0) if r.nominal.value > 0 else 0.0
            for r in rs
        ]
        cons = sum(r.weight * k for r, k in zip(rs, kept, strict=True)) / total
        paths = sorted(
            {p for r in rs for p in r.nominal.pathways} | {p for r in rs for e in r.constrained for p in e.pathways}
        )
        out.append(
            DesignScore(
                design=d,
                performance=perf,
                mix_retention=mix,
                constraint_retention=cons,
                flexibility=math.sqrt(max(mix, 0.0) * max(cons, 0.0)),
                pathways=paths,
                usd_per_million_tokens=_weighted([(r.weight, r.nominal.usd_per_million_tokens) for r in rs]),
                joules_per_token=_weighted([(r.weight, r.nominal.joules_per_token) for r in rs]),
                pareto=False,
            )
        )
    front = set(_pareto(out))
    return [s.model_copy(update={"pareto": i in front}) for i, s in enumerate(out)]


def _pareto(scores: Sequence[DesignScore]) -> list[int]:
    import numpy as np

    cols = [[-s.performance for s in scores]]
    for attr in ("usd_per_million_tokens", "joules_per_token"):
        vals = [getattr(s, attr) for s in scores]
        if all(v is not None for v in vals):
            cols.append(vals)
    return pareto_indices(np.array(cols, dtype=float).T)


def compare(
    cases: Sequence[Case],
    suite: str,
    objective: HardwareObjective = "performance",
    step: float = 0.1,
    constraint: float = 0.5,
    refine: int = 2,
    progress: Callable[[str], None] | None = None,
) -> Comparison:
    """Analyse every case and score the designs."""
    count = [0]

    def tick() -> None:
        count[0] += 1

    results = []
    for c in cases:
        if progress:
            progress(f"{c.design} / {c.workload}")
        results.append(analyse(c, objective, step, constraint, refine, tick))
    return comparison(suite, objective, step, constraint, results, count[0])


def comparison(
    suite: str,
    objective: HardwareObjective,
    step: float,
    constraint: float,
    results: list[WorkloadResult],
    replans: int,
) -> Comparison:
    """The comparison of the analysed cases (in suite order, design by design): the designs scored."""
    designs = list(dict.fromkeys(r.design for r in results))
    return Comparison(
        suite=suite,
        objective=objective,
        unit=UNIT[objective],
        step=step,
        constraint=constraint,
        designs=designs,
        results=results,
        scores=score(results, designs),
        replans=replans,
    )
