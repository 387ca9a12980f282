"""The chain from a baseline plan to the chosen one: which exchange relieved what, and what binds next.

Starting from the baseline, the moves that separate it from the target plan
are applied one at a time, greedily: first the move that brings the plan
closest to fitting in memory, then, once it fits, the one that improves the
objective most. Each step is priced with the one-plan ledger and diagnosed, so it
names the resource it relieved (what bound before), what binds after, and the
gain -- computation -> bandwidth -> memory -> computation made visible. Backing
a technique out is shown as the reverse trade.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from aitrinity.cost.diagnosis import Diagnosis, diagnose
from aitrinity.cost.estimate import price_serving_ledger, training_estimate
from aitrinity.cost.kernels import Kernels
from aitrinity.cost.ledger import Result
from aitrinity.cost.serving import serving_ledger
from aitrinity.errors import SpecError
from aitrinity.plan import registry
from aitrinity.plan.exchanges import CATALOG
from aitrinity.plan.search import PlanChoice, layouts
from aitrinity.plan.search_serving import ServingChoice
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, ServingJob, System, TrainingJob
from aitrinity.units import format_bytes, format_time


class ChainStep(Result):
    change: str
    exchange: str
    pathway: str
    relieved: str
    """What bound before this step."""
    binds_after: str
    fits_before: bool
    fits_after: bool
    memory_before_bytes: float
    memory_after_bytes: float
    score_before: float
    score_after: float
    """The objective (lower is better): seconds per step, or per output token for serving."""
    accuracy_drop_after: float = 0.0
    """The plan's quality cost after this step (:class:`aitrinity.plan.registry.Quality`)."""
    sentence: str


class Chain(Result):
    baseline: str
    steps: list[ChainStep]
    pathways: list[str]
    """The pathways in the order the chain crosses them (repeats collapsed)."""
    sentence: str


@dataclass(frozen=True)
class _State:
    values: dict[str, Any]
    fits: bool
    memory: float
    score: float
    binding: str
    accuracy_drop: float


@dataclass(frozen=True)
class _Kind:
    """What differs between the training and the serving chains."""

    moves: dict[str, str]  # value name -> exchange kind in the catalog
    names: dict[str, str]  # value name -> words
    order: dict[str, list[Any]]  # values whose "more" is not numeric order
    score: Callable[[Diagnosis], float]
    show: Callable[[float], str]


def _better(a: _State, b: _State) -> bool:
    """Fitting first, then less memory while not fitting, then a lower score."""
    if a.fits != b.fits:
        return a.fits
    if not a.fits:
        return a.memory < b.memory
    return a.score < b.score


def _applies(kind: _Kind, field: str, before: Any, after: Any) -> bool:
    """Does the move apply more of the technique (True) or back it out (False)?"""
    if field in kind.order:
        return kind.order[field].index(after) > kind.order[field].index(before)
    return bool(after > before)


def _step(kind: _Kind, fields: list[str], before: _State, after: _State) -> ChainStep:
    kinds = [kind.moves[f] for f in fields]
    info = CATALOG[kinds[0]]
    pathway: str = info.pathway
    spends, relieves = info.spends, info.relieves
    if not _applies(kind, fields[0], before.values[fields[0]], after.values[fields[0]]):
        src, dst = pathway.split("->")
        pathway, spends, relieves = f"{dst}->{src}", relieves, spends
    change = ", ".join(f"{kind.names[f]} {before.values[f]} -> {after.values[f]}" for f in fields)
    if not before.fits and after.fits:
        gain = f"now fits ({format_bytes(after.memory)} per device)"
    elif not before.fits:
        gain = f"memory {format_bytes(before.memory)} -> {format_bytes(after.memory)} per device, still too much"
    else:
        gain = f"{kind.show(before.score)} -> {kind.show(after.score)} ({before.score / after.score:.2f}x)"
    if after.accuracy_drop != before.accuracy_drop:
        gain += f", accuracy drop {before.accuracy_drop:.1%} -> {after.accuracy_drop:.1%}"
    sentence = (
        f"{before.binding} bound; {change} [{pathway}: spends {spends}, relieves {relieves}]: {gain}; "
        f"now {after.binding} binds."
    )
    return ChainStep(
        change=change,
        exchange="+".join(kinds),
        pathway=pathway,
        relieved=before.binding,
        binds_after=after.binding,
        fits_before=before.fits,
        fits_after=after.fits,
        memory_before_bytes=before.memory,
        memory_after_bytes=after.memory,
        score_before=before.score,
        score_after=after.score,
        accuracy_drop_after=after.accuracy_drop,
        sentence=sentence,
    )


def _greedy(
    kind: _Kind, state: _State, goal: dict[str, Any], run: Callable[[dict[str, Any]], _State | None], baseline: str
) -> Chain:
    steps: list[ChainStep] = []
    while True:
        todo = [f for f in kind.moves if state.values[f] != goal[f]]
        if not todo:
            break
        best_f: list[str] = []
        best: _State | None = None
        for f in todo:
            nxt = run({**state.values, f: goal[f]})
            if nxt is not None and (best is None or _better(nxt, best)):
                best_f, best = [f], nxt
        if best is None:  # no single move is valid on its own (e.g. tp and pp must change together)
            best_f, best = todo, run({**state.values, **{f: goal[f] for f in todo}})
            if best is None:
                raise SpecError("plan", "chain", "a reachable target plan")
        steps.append(_step(kind, best_f, state, best))
        state = best
    pathways: list[str] = []
    for step in steps:
        if not pathways or pathways[-1] != step.pathway:
            pathways.append(step.pathway)
    if steps:
        sentence = " -> ".join(f"{s.relieved} binds -> {s.change}" for s in steps) + f" -> {state.binding} binds"
    else:
        sentence = f"the baseline is the chosen plan; {state.binding} binds"
    return Chain(baseline=baseline, steps=steps, pathways=pathways, sentence=sentence)


def _state(values: dict[str, Any], d: Diagnosis, kind: _Kind, plan: Plan) -> _State:
    """The binding resource of the phase that dominates the work (serving: prefill vs output x decode)."""
    fits = d.capacity.fits
    binding = d.binding_label
    return _State(
        dict(values),
        fits,
        d.estimate.memory.used_bytes,
        kind.score(d),
        binding if fits else f"capacity ({d.capacity.tier})",
        registry.quality_of(plan.exchanges).accuracy_drop,
    )


# ----------------------------------------------------------------------------- the moves


def _kind(
    workload: registry.Workload, own: list[tuple[str, registry.Move]], score: Callable[[Diagnosis], float]
) -> _Kind:
    """The chain's dimensions for a workload: every registered technique's move (``registry.moves``) and the
    workload's ``own`` (a serving batch), in rank order, then one per registered technique the planner tries
    (``registry.searched_extras``)."""
    moves = sorted([*registry.moves(workload), *own], key=lambda km: km[1].rank)
    kind = _Kind(
        moves={k: k for k, _ in moves},
        names={k: mv.words for k, mv in moves},
        order={k: list(mv.order) for k, mv in moves if mv.order},
        score=score,
        show=_SHOW[workload],
    )
    return _with_extras(kind, workload)


_SHOW: dict[str, Callable[[float], str]] = {
    "training": lambda s: f"step {format_time(s)}",
    "serving": lambda s: f"{1.0 / s:,.0f} tokens/s",
}


def _values(plan: Plan, workload: registry.Workload) -> dict[str, Any]:
    """A plan's value of every move (and of every registered technique the planner tries)."""
    return {**_extra_values(plan, workload), **{k: mv.get(plan) for k, mv in registry.moves(workload)}}


def _apply(base: Plan, values: dict[str, Any], workload: registry.Workload, target: Plan) -> Plan:
    """The chain state ``values`` as a plan: ``base`` with the exchanges no move sets (local SGD, a registered
    technique without a move or options: kept in every state), every move set to its value (in rank order), then the
    planner's registered options appended."""
    moved = {k for k, _ in registry.moves(workload)} | {x.kind for x in registry.searched_extras(workload)}
    plan = base.model_copy(update={"dp": None, "exchanges": [x for x in base.exchanges if x.kind not in moved]})
    for k, mv in registry.moves(workload):
        plan = mv.put(plan, values[k], target)
    return registry.with_added(plan, _extra_entries(values, workload))


# ----------------------------------------------------------------------------- training


def _naive_values(workload: registry.Workload) -> dict[str, Any]:
    """The naive plan's value of every move: none of any technique (plain data parallelism on one device each)."""
    return {
        **{x.kind: "none" for x in registry.searched_extras(workload)},
        **{k: mv.naive for k, mv in registry.moves(workload)},
    }


def training_chain(
    m: ModelSpec,
    job: TrainingJob,
    base: Plan,
    system: System,
    target: PlanChoice,
    start: Plan | None = None,
    kernels: Kernels | None = None,
) -> Chain:
    """Greedy chain from ``start`` (default: the naive plan) to ``target``, priced as the planner prices."""
    kind = _kind("training", [], lambda d: d.phases[0].time_s)

    def run(values: dict[str, Any]) -> _State | None:
        try:
            plan = _apply(base, values, "training", base)
            d = diagnose(training_estimate("chain", m, job, plan, system, kernels))
        except SpecError:
            return None
        return _state(values, d, kind, plan)

    goal = _values(target.plan(base), "training")
    state = (
        run(_values(start, "training"))
        if start is not None
        else _naive(m, system, base, run, _naive_values("training"))
    )
    if state is None:
        raise SpecError("plan", "baseline", "a valid starting plan for this system (global batch divisible by dp)")
    return _greedy(kind, state, goal, run, _describe_start(state, start))


def _naive(
    m: ModelSpec,
    system: System,
    base: Plan,
    run: Callable[[dict[str, Any]], _State | None],
    naive: dict[str, Any],
    uneven: bool = True,
) -> _State | None:
    """The naive plan on the smallest model-parallel layout the job allows (``uneven``: :func:`layouts`)."""
    for tp, pp in sorted(layouts(m, system, base.ep, uneven), key=lambda x: (x[0] * x[1], x[1])):
        state = run({**naive, "tp": tp, "pp": pp})
        if state is not None:
            return state
    return None


def _describe_start(state: _State, start: Plan | None) -> str:
    if start is not None:
        return "scenario's own"
    v = state.values
    return f"naive (tp {v['tp']}, pp {v['pp']}; no sharding, quantization, offload or other exchange)"


# ----------------------------------------------------------------------------- serving


def _throughput_score(d: Diagnosis) -> float:
    """Seconds per output token of the whole system (lower is better)."""
    return 1.0 / d.estimate.serving.throughput_tokens_per_s if d.estimate.serving else 0.0


_BATCH = registry.Move("batch", lambda _: None, lambda p, _v, _t: p, 7)
"""The serving batch: the workload's, not the plan's, so the chain sets it on the job (between the layout and the
exchanges in the order of its moves)."""


def _label(entry: Any) -> str:
    """A registered technique's entry as a chain value: its kind and parameters."""
    params = ", ".join(f"{k}={v}" for k, v in entry.model_dump(mode="json").items() if k != "kind")
    return f"{entry.kind}({params})" if params else entry.kind


def _with_extras(kind: _Kind, workload: registry.Workload) -> _Kind:
    """The moves plus one per registered technique the planner tries (``registry.searched_extras``)."""
    extras = registry.searched_extras(workload)
    if not extras:
        return kind
    return replace(
        kind,
        moves={**kind.moves, **{x.kind: x.kind for x in extras}},
        names={**kind.names, **{x.kind: x.info.title for x in extras}},
        order={**kind.order, **{x.kind: ["none", *(_label(e) for e in x.options)] for x in extras}},
    )


def _extra_values(plan: Plan, workload: registry.Workload) -> dict[str, str]:
    """Each registered technique the planner tries: the plan's entry of it (labelled), or "none"."""
    kinds = {x.kind: x for x in plan.exchanges}
    return {x.kind: _label(kinds[x.kind]) if x.kind in kinds else "none" for x in registry.searched_extras(workload)}


def _extra_entries(values: dict[str, Any], workload: registry.Workload) -> list[Any]:
    """The registered techniques' entries a chain state holds."""
    by_label = {_label(e): e for x in registry.searched_extras(workload) for e in x.options}
    return [by_label[values[x.kind]] for x in registry.searched_extras(workload) if values[x.kind] != "none"]


def _serving_values(plan: Plan, batch: int) -> dict[str, Any]:
    return {**_values(plan, "serving"), "batch": batch}


def serving_chain(
    m: ModelSpec,
    job: ServingJob,
    base: Plan,
    system: System,
    target: ServingChoice,
    start: Plan | None = None,
    kernels: Kernels | None = None,
) -> Chain:
    """Greedy chain from ``start`` (default: the naive plan) to ``target`` (with the scenario's fixed exchanges),
    priced as the planner prices."""

    chosen = target.plan(base)  # the exchanges it keeps as the target has them (e.g. the prefix cache size it chose)
    kind = _kind("serving", [("batch", _BATCH)], _throughput_score)

    def run(values: dict[str, Any]) -> _State | None:
        plan = _apply(base, values, "serving", chosen)
        try:
            row_job = job.model_copy(update={"batch": values["batch"]})
            led = serving_ledger("chain", m, row_job, plan, system)
            d = diagnose(price_serving_ledger(led, m, plan, row_job, system, kernels))
        except SpecError:
            return None
        return _state(values, d, kind, plan)

    goal = _serving_values(chosen, target.batch)
    first_batch = job.batch if isinstance(job.batch, int) else 1
    if start is not None:
        state = run(_serving_values(start, first_batch))
    else:
        no_ep = base.model_copy(update={"ep": 1}) if m.moe else base  # a dense model keeps the scenario's ep
        naive = {**_naive_values("serving"), "ep": no_ep.ep, "batch": first_batch}
        state = _naive(m, system, no_ep, run, naive, uneven=False)
    if state is None:
        raise SpecError("plan", "baseline", "a valid starting plan for this system")
    return _greedy(kind, state, goal, run, _describe_start(state, start))
