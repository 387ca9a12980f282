"""The chain from a baseline plan to the chosen one: which exchange relieved what, and what binds next.

Starting from the baseline, the moves that separate it from the target plan
are applied one at a time, greedily: first the move that brings the plan
closest to fitting in device memory, then, once it fits, the one that saves
the most time. Each step is priced with the scalar ledger and diagnosed, so it
names the resource it relieved (what bound before), what binds after, and the
gain -- computation -> bandwidth -> memory -> computation made visible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aitrinity.cost.diagnosis import diagnose
from aitrinity.cost.estimate import price
from aitrinity.cost.ledger import Result
from aitrinity.cost.training import training_ledger
from aitrinity.errors import SpecError
from aitrinity.plan.exchanges import CATALOG
from aitrinity.plan.search import PlanChoice, layouts
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, System, TrainingJob
from aitrinity.units import format_bytes, format_time

# plan field -> exchange kind in the catalog
MOVES = {
    "zero": "zero",
    "tp": "tp",
    "pp": "pp",
    "sequence_parallel": "sequence-parallel",
    "recompute": "recompute",
    "micro_batch": "micro-batch",
    "virtual_stages": "virtual-stages",
    "compression": "gradient-compression",
    "optimizer_offload": "optimizer-offload",
    "activation_offload": "activation-offload",
}


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
    time_before_s: float
    time_after_s: float
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
    plan: Plan
    fits: bool
    memory: float
    time: float
    binding: str


def baseline_plan(base: Plan) -> Plan:
    """The naive starting point: plain data parallelism, no memory technique, no exchange."""
    return base.model_copy(
        update={
            "tp": 1,
            "pp": 1,
            "dp": None,
            "micro_batch": 1,
            "zero": 0,
            "recompute": "none",
            "sequence_parallel": False,
            "virtual_stages": 1,
            "exchanges": [],
        }
    )


def _values(plan: Plan) -> dict[str, Any]:
    kinds = {x.kind: x for x in plan.exchanges}
    comp = kinds.get("gradient-compression")
    act = kinds.get("activation-offload")
    return {
        "zero": plan.zero,
        "tp": plan.tp,
        "pp": plan.pp,
        "sequence_parallel": plan.sequence_parallel,
        "recompute": plan.recompute,
        "micro_batch": plan.micro_batch,
        "virtual_stages": plan.virtual_stages,
        "compression": getattr(comp, "method", "none"),
        "optimizer_offload": "optimizer-offload" in kinds,
        "activation_offload": getattr(act, "fraction", 0.0),
    }


def _plan(base: Plan, v: dict[str, Any]) -> Plan:
    choice = PlanChoice(
        tp=v["tp"],
        pp=v["pp"],
        dp=1,
        micro_batch=v["micro_batch"],
        zero=v["zero"],
        recompute=v["recompute"],
        sequence_parallel=v["sequence_parallel"],
        compression=v["compression"],
        optimizer_offload=v["optimizer_offload"],
        virtual_stages=v["virtual_stages"],
        activation_offload=v["activation_offload"],
        step_time_s=0,
        tokens_per_s=0,
        hbm_bytes=0,
        link_bytes=0,
        usd_per_million_tokens=None,
        joules_per_token=0,
        binding="",
    )
    return choice.plan(base)


def _evaluate(values: dict[str, Any], base: Plan, run: Callable[[Plan], Any]) -> _State | None:
    plan = _plan(base, values)
    try:
        d = run(plan)
    except SpecError:
        return None
    fits = d.capacity.fits
    return _State(
        dict(values),
        plan,
        fits,
        d.estimate.memory.used_bytes,
        d.phases[0].time_s,
        d.binding if fits else f"capacity ({d.capacity.tier})",
    )


def _better(a: _State, b: _State) -> bool:
    """Is ``a`` a better next state than ``b``? Fitting first, then less memory while not fitting, then time."""
    if a.fits != b.fits:
        return a.fits
    if not a.fits:
        return a.memory < b.memory
    return a.time < b.time


def _describe(field: str, before: Any, after: Any) -> str:
    names = {
        "tp": "tensor parallel",
        "pp": "pipeline parallel",
        "zero": "ZeRO stage",
        "micro_batch": "micro-batch",
        "virtual_stages": "virtual pipeline stages",
        "sequence_parallel": "sequence parallelism",
        "recompute": "recomputation",
        "compression": "gradient compression",
        "optimizer_offload": "optimizer offload",
        "activation_offload": "activation offload",
    }
    return f"{names[field]} {before} -> {after}"


def training_chain(
    m: ModelSpec, job: TrainingJob, base: Plan, system: System, target: PlanChoice, start: Plan | None = None
) -> Chain:
    """Greedy chain from ``start`` (default: :func:`baseline_plan`) to ``target``."""

    def run(plan: Plan) -> Any:
        return diagnose(price(training_ledger("chain", m, job, plan, system), system))

    goal = _values(target.plan(base))
    if start is not None:
        state = _evaluate(_values(start), base, run)
    else:  # plain data parallelism, or the smallest model-parallel layout the global batch allows
        naive = _values(baseline_plan(base))
        state = None
        for tp, pp in sorted(layouts(m, system, base.ep), key=lambda x: (x[0] * x[1], x[1])):
            state = _evaluate({**naive, "tp": tp, "pp": pp}, base, run)
            if state is not None:
                break
    if state is None:
        raise SpecError("plan", "baseline", "a valid starting plan for this system (global batch divisible by dp)")
    origin = dict(state.values)
    steps: list[ChainStep] = []
    while True:
        todo = [f for f in MOVES if state.values[f] != goal[f]]
        if not todo:
            break
        options = []
        for f in todo:
            nxt = _evaluate({**state.values, f: goal[f]}, base, run)
            if nxt is not None:
                options.append((f, nxt))
        if options:
            best_f, best = options[0]
            for f, s in options[1:]:
                if _better(s, best):
                    best_f, best = f, s
            fields = [best_f]
        else:  # no single move is valid on its own (e.g. tp and pp must change together)
            fields = todo
            joint = _evaluate({**state.values, **{f: goal[f] for f in todo}}, base, run)
            if joint is None:
                raise SpecError("plan", "chain", "a reachable target plan")
            best = joint
        steps.append(_step(fields, state, best))
        state = best
    pathways: list[str] = []
    for step in steps:
        if not pathways or pathways[-1] != step.pathway:
            pathways.append(step.pathway)
    sentence = " -> ".join(f"{step.relieved} binds -> {step.change}" for step in steps)
    sentence = (
        sentence + f" -> {state.binding} binds" if steps else f"the baseline is the chosen plan; {state.binding} binds"
    )
    return Chain(
        baseline=(
            f"naive (tp {origin['tp']}, pp {origin['pp']}; no sharding, recomputation or exchange)"
            if start is None
            else "scenario's own"
        ),
        steps=steps,
        pathways=pathways,
        sentence=sentence,
    )


_ORDER = {"recompute": ["none", "selective", "full"]}


def _applies(field: str, before: Any, after: Any) -> bool:
    """Does the move apply more of the technique (True) or back it out (False)?"""
    if field in _ORDER:
        return _ORDER[field].index(after) > _ORDER[field].index(before)
    if field == "compression":
        return bool(after != "none")
    return bool(after > before)


def _step(fields: list[str], before: _State, after: _State) -> ChainStep:
    kinds = [MOVES[f] for f in fields]
    info = CATALOG[kinds[0]]
    pathway: str = info.pathway
    spends, relieves = info.spends, info.relieves
    if not _applies(fields[0], before.values[fields[0]], after.values[fields[0]]):  # backing out: the reverse trade
        src, dst = pathway.split("->")
        pathway, spends, relieves = f"{dst}->{src}", relieves, spends
    change = ", ".join(_describe(f, before.values[f], after.values[f]) for f in fields)
    if not before.fits and after.fits:
        gain = f"now fits ({format_bytes(after.memory)} per device)"
    elif not before.fits:
        gain = f"memory {format_bytes(before.memory)} -> {format_bytes(after.memory)} per device, still too much"
    else:
        gain = f"step {format_time(before.time)} -> {format_time(after.time)} ({before.time / after.time:.2f}x)"
    sentence = (
        f"{before.binding} bound; {change} [{pathway}: spends {spends}, relieves "
        f"{relieves}]: {gain}; now {after.binding} binds."
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
        time_before_s=before.time,
        time_after_s=after.time,
        sentence=sentence,
    )
