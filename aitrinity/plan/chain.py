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
from aitrinity.cost.estimate import price_serving_ledger, price_training_ledger
from aitrinity.cost.kernels import Kernels
from aitrinity.cost.ledger import Result
from aitrinity.cost.serving import serving_ledger
from aitrinity.cost.training import training_ledger
from aitrinity.errors import SpecError
from aitrinity.plan import registry
from aitrinity.plan.exchanges import CATALOG
from aitrinity.plan.search import PlanChoice, layouts
from aitrinity.plan.search_serving import ServingChoice
from aitrinity.plan.vector_serving import SEARCHED, row_plan
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


# ----------------------------------------------------------------------------- training

_TRAINING = _Kind(
    moves={
        "zero": "zero",
        "tp": "tp",
        "pp": "pp",
        "ep": "ep",
        "cp": "cp",
        "sequence_parallel": "sequence-parallel",
        "recompute": "recompute",
        "micro_batch": "micro-batch",
        "virtual_stages": "virtual-stages",
        "compression": "gradient-compression",
        "optimizer_offload": "optimizer-offload",
        "activation_offload": "activation-offload",
    },
    names={
        "tp": "tensor parallel",
        "pp": "pipeline parallel",
        "ep": "expert parallel",
        "cp": "context parallel",
        "zero": "ZeRO stage",
        "micro_batch": "micro-batch",
        "virtual_stages": "virtual pipeline stages",
        "sequence_parallel": "sequence parallelism",
        "recompute": "recomputation",
        "compression": "gradient compression",
        "optimizer_offload": "optimizer offload",
        "activation_offload": "activation offload",
    },
    order={
        "recompute": ["none", "selective", "full"],
        "compression": ["none", "int8", "powersgd", "topk", "sign", "fp16", "bf16"],
    },
    score=lambda d: d.phases[0].time_s,
    show=lambda s: f"step {format_time(s)}",
)


def baseline_plan(base: Plan) -> Plan:
    """The naive starting point: plain data parallelism, no memory technique, no exchange."""
    return base.model_copy(
        update={
            "tp": 1,
            "pp": 1,
            "dp": None,
            "ep": 1,
            "cp": 1,
            "micro_batch": 1,
            "zero": 0,
            "recompute": "none",
            "sequence_parallel": False,
            "virtual_stages": 1,
            "exchanges": [],
        }
    )


def _training_values(plan: Plan) -> dict[str, Any]:
    kinds = {x.kind: x for x in plan.exchanges}
    return {
        **_extra_values(plan, "training"),
        "zero": plan.zero,
        "tp": plan.tp,
        "pp": plan.pp,
        "ep": plan.ep,
        "cp": plan.cp,
        "sequence_parallel": plan.sequence_parallel,
        "recompute": plan.recompute,
        "micro_batch": plan.micro_batch,
        "virtual_stages": plan.virtual_stages,
        "compression": getattr(kinds.get("gradient-compression"), "method", "none"),
        "optimizer_offload": "optimizer-offload" in kinds,
        "activation_offload": getattr(kinds.get("activation-offload"), "fraction", 0.0),
    }


def _training_plan(base: Plan, v: dict[str, Any]) -> Plan:
    return PlanChoice(
        tp=v["tp"],
        pp=v["pp"],
        ep=v["ep"],
        cp=v["cp"],
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
        added=[e.model_dump(mode="json") for e in _extra_entries(v, "training")],
    ).plan(base)


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
    kind = _with_extras(_TRAINING, "training")

    def run(values: dict[str, Any]) -> _State | None:
        try:
            plan = _training_plan(base, values)
            led = training_ledger("chain", m, job, plan, system)
            d = diagnose(price_training_ledger(led, m, plan, system, kernels))
        except SpecError:
            return None
        return _state(values, d, kind, plan)

    goal = _training_values(target.plan(base))
    state = (
        run(_training_values(start))
        if start is not None
        else _naive(m, system, base, run, _training_values(baseline_plan(base)))
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


def _fixed() -> tuple[str, ...]:
    """The scenario's own serving exchanges the search keeps as given -- a prefix cache, KV compression, weight
    streaming, speculative decoding, a registered technique without options -- each a step of the chain."""
    return tuple(
        x.kind for x in registry.registered("serving") if x.spec is not None and not x.searched and not x.options
    )


_FIXED_WORDS = {"prefix-cache": "prefix cache", "kv-compression": "KV compression"}
"""How the chain names a fixed exchange, where not by its title."""

_SERVING = _Kind(
    moves={
        "tp": "tp",
        "pp": "pp",
        "ep": "ep",
        "cp": "cp",
        "batch": "batch",
        "kv_offload": "kv-offload",
        "weight_quantization": "weight-quantization",
        "kv_quantization": "kv-quantization",
    },
    names={
        "tp": "tensor parallel",
        "pp": "pipeline parallel",
        "ep": "expert parallel",
        "cp": "context parallel",
        "batch": "batch",
        "kv_offload": "KV offload",
        "weight_quantization": "weight quantization",
        "kv_quantization": "KV quantization",
    },
    order={"weight_quantization": ["none", "fp8", "int8", "int4"], "kv_quantization": ["none", "fp8", "int8"]},
    score=lambda d: 1.0 / d.estimate.serving.throughput_tokens_per_s if d.estimate.serving else 0.0,
    show=lambda s: f"{1.0 / s:,.0f} tokens/s",
)


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
    kinds = {x.kind: x for x in plan.exchanges}
    return {
        **_extra_values(plan, "serving"),
        "tp": plan.tp,
        "pp": plan.pp,
        "ep": plan.ep,
        "cp": plan.cp,
        "batch": batch,
        "kv_offload": getattr(kinds.get("kv-offload"), "fraction", 0.0),
        "weight_quantization": getattr(kinds.get("weight-quantization"), "dtype", "none"),
        "kv_quantization": getattr(kinds.get("kv-quantization"), "dtype", "none"),
        **{k: k in kinds for k in _fixed()},
    }


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

    chosen = target.plan(base)  # the fixed exchanges as the target has them (e.g. the prefix cache size it chose)
    fixed = _fixed()
    kind = _with_extras(_SERVING, "serving")
    kind = replace(
        kind,
        moves={**kind.moves, **{k: k for k in fixed}},
        names={**kind.names, **{k: _FIXED_WORDS.get(k, registry.get(k).info.title) for k in fixed}},
    )

    def run(values: dict[str, Any]) -> _State | None:
        kept = [x for x in chosen.exchanges if x.kind in fixed and values[x.kind]]
        kept += _extra_entries(values, "serving")
        plan = row_plan(
            base.model_copy(update={"exchanges": kept, "ep": values["ep"], "cp": values["cp"]}),
            values["tp"],
            values["pp"],
            values["kv_offload"],
            values["weight_quantization"],
            values["kv_quantization"],
        )
        try:
            row_job = job.model_copy(update={"batch": values["batch"]})
            led = serving_ledger("chain", m, row_job, plan, system)
            d = diagnose(price_serving_ledger(led, m, plan, row_job, system, kernels))
        except SpecError:
            return None
        return _state(values, d, kind, plan)

    goal = _serving_values(target.plan(base), target.batch)
    first_batch = job.batch if isinstance(job.batch, int) else 1
    if start is not None:
        state = run(
            _serving_values(
                start.model_copy(
                    update={"exchanges": [x for x in start.exchanges if x.kind in SEARCHED or x.kind in fixed]}
                ),
                first_batch,
            )
        )
    else:
        no_ep = base.model_copy(update={"ep": 1}) if m.moe else base  # a dense model keeps the scenario's ep
        naive = _serving_values(no_ep.model_copy(update={"tp": 1, "pp": 1, "cp": 1, "exchanges": []}), first_batch)
        state = _naive(m, system, no_ep, run, naive, uneven=False)
    if state is None:
        raise SpecError("plan", "baseline", "a valid starting plan for this system")
    return _greedy(kind, state, goal, run, _describe_start(state, start))
