"""The library's front door: scenario -> Ledger -> Estimate -> Diagnosis.

This module resolves names through the catalog (I/O) and then calls the pure
functions of :mod:`aitrinity.cost`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from aitrinity import catalog, silicon
from aitrinity import overrides as ov
from aitrinity.catalog.loader import resolve_system
from aitrinity.cost.diagnosis import Diagnosis
from aitrinity.cost.estimate import Estimate
from aitrinity.cost.ledger import Ledger
from aitrinity.errors import UnknownNameError
from aitrinity.spec._base import validate
from aitrinity.spec.edge import EdgeScenario
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, Scenario, System

if TYPE_CHECKING:
    from aitrinity.cost.kernels import Kernels
    from aitrinity.plan.report import PlanReport
    from aitrinity.plan.search import Reuse
    from aitrinity.plan.split import EdgeDiagnosis, EdgePlanReport


@dataclass(frozen=True)
class Resolved:
    """A scenario with its names resolved: Workload (model + job) x Plan x System."""

    scenario: Scenario
    model: ModelSpec
    system: System


def load(scenario: Scenario | EdgeScenario | str | Path) -> tuple[Scenario | EdgeScenario, Path | None]:
    """A scenario object, file or built-in name -> the scenario and the folder its relative paths start from."""
    if isinstance(scenario, Scenario | EdgeScenario):
        return scenario, None
    if catalog.loader.is_file(scenario):
        return catalog.load_scenario(scenario), Path(scenario).resolve().parent
    return catalog.load_scenario(scenario), catalog.loader.DATA / "scenarios"  # built-ins: paths beside them


def resolve(scenario: Scenario | str | Path, base: Path | None = None, overrides: Sequence[str] = ()) -> Resolved:
    """Resolve names; file paths inside a scenario file are relative to that file's folder.

    ``overrides`` are ``KEY=VALUE`` what-if changes (:mod:`aitrinity.overrides`).
    """
    if not isinstance(scenario, Scenario):
        loaded, where = load(scenario)
        if isinstance(loaded, EdgeScenario):
            from aitrinity.errors import SpecError

            raise SpecError("workload", "edge", "a training or serving workload here (edge scenarios: diagnose, plan)")
        scenario, base = loaded, where or base
    fields, hardware = ov.split([ov.parse(o) for o in overrides])
    if fields:
        data = ov.apply_fields(scenario.model_dump(mode="json", exclude_unset=True), fields)
        scenario = validate(Scenario, data, source="--set")
    try:
        model = catalog.model(scenario.workload.model, base)
    except UnknownNameError as e:
        raise e.at("workload.model") from None
    scenario = _replay_prefix_traces(scenario, model, base)
    return Resolved(scenario, model, ov.apply_hardware(resolve_system(scenario.system, base), hardware))


def _replay_prefix_traces(scenario: Scenario, model: ModelSpec, base: Path | None) -> Scenario:
    """Turn a prefix cache given by (trace, capacity) into its replayed hit rate."""
    from aitrinity.spec.exchanges import PrefixCache

    if not any(isinstance(x, PrefixCache) and x.trace for x in scenario.plan.exchanges):
        return scenario
    from aitrinity.cost.memory import kv_bytes_per_token

    out = []
    for x in scenario.plan.exchanges:
        if isinstance(x, PrefixCache) and x.trace:
            path = Path(x.trace)
            if base is not None and not path.is_absolute() and catalog.loader.is_file(base / path):
                path = base / path
            tokens = None
            if x.capacity is not None:
                tokens = int(x.capacity // kv_bytes_per_token(model, scenario.plan.cache_dtype))
            x = x.model_copy(update={"hit_rate": replayed_hit_rate(path, tokens, x.block_tokens)})
        out.append(x)
    return scenario.model_copy(update={"plan": scenario.plan.model_copy(update={"exchanges": out})})


def replayed_hit_rate(path: Path, capacity_tokens: int | None, block_tokens: int) -> float:
    """A trace's LRU token hit rate, memoized by the file's identity (path, size, modification time)."""
    try:
        st = path.stat()
    except OSError as e:
        from aitrinity.errors import SpecError

        raise SpecError.at(path, f"cannot read the trace ({e.strerror})") from None
    return _replay_memo(str(path.resolve()), st.st_size, st.st_mtime_ns, capacity_tokens, block_tokens)


@lru_cache(maxsize=256)
def _replay_memo(path: str, size: int, mtime_ns: int, capacity_tokens: int | None, block_tokens: int) -> float:
    from aitrinity.catalog import traces
    from aitrinity.cost.prefix_reuse import replay

    return replay(traces.load(path), capacity_tokens, block_tokens).token_hit_rate


def ledger(r: Resolved) -> Ledger:
    from aitrinity.cost.serving import serving_ledger
    from aitrinity.cost.training import training_ledger

    w = r.scenario.workload
    if w.training is not None:
        return training_ledger(r.scenario.name, r.model, w.training, r.scenario.plan, r.system)
    assert w.serving is not None
    return serving_ledger(r.scenario.name, r.model, w.serving, r.scenario.plan, r.system)


def estimate(r: Resolved) -> Estimate:
    """Price a resolved scenario: serving at a fixed concurrency through the operator model (kernel tables
    or the catalog's kernel parameters, :mod:`aitrinity.silicon`), everything else by the phase roofline."""
    return _priced(r)[0]


def _priced(r: Resolved) -> tuple[Estimate, Kernels | None]:
    """:func:`estimate`, and the kernel times it used (None: the phase roofline, no operator model). The tables
    load only when the operator model prices."""
    from aitrinity.cost.estimate import price_serving_ledger, prices_with_operators, training_estimate

    w, plan = r.scenario.workload, r.scenario.plan
    kernels, notes = None, []
    if prices_with_operators(r.system, w.serving):
        choice = _kernels(r)
        kernels, notes = choice.kernels, [choice.note] if choice.note else []
    if w.training is not None:
        return training_estimate(r.scenario.name, r.model, w.training, plan, r.system, kernels, notes), kernels
    assert w.serving is not None
    return price_serving_ledger(ledger(r), r.model, plan, w.serving, r.system, kernels, notes), kernels


def _kernels(r: Resolved) -> silicon.KernelChoice:
    """The scenario's kernel times: its device, engine and version, block-scaled fp8 for a model published so."""
    sys_ = r.system
    return silicon.kernels(sys_.device, sys_.engine, sys_.engine_version, fp8_block=bool(r.model.fp8_weight_block))


def diagnose(
    scenario: Scenario | EdgeScenario | str | Path, overrides: Sequence[str] = ()
) -> Diagnosis | EdgeDiagnosis:
    """Diagnose a scenario (object, file path or built-in name), with optional ``KEY=VALUE`` overrides.

    An edge scenario gives an :class:`~aitrinity.plan.split.EdgeDiagnosis` (split inference)."""
    from aitrinity.cost import capacity
    from aitrinity.cost.diagnosis import diagnose as run

    loaded, base = load(scenario)
    if isinstance(loaded, EdgeScenario):
        from aitrinity import edge

        return edge.diagnose(loaded, base, overrides)
    r = resolve(loaded, base, overrides)
    est, kernels = _priced(r)
    need = None
    if not est.memory.fits:
        w, plan = r.scenario.workload, r.scenario.plan
        if w.training is not None:
            need = capacity.min_devices_training(r.model, w.training, plan, r.system)
        elif w.serving is not None:
            need = capacity.min_devices_serving(r.model, w.serving, plan, r.system)
    d = run(est, r.system.overlap_fraction, need)
    if r.scenario.plan.exchanges:
        from aitrinity.plan.breakeven import exchange_reports

        d = d.model_copy(update={"exchanges": exchange_reports(r.scenario, r.model, r.system, kernels)})
    return d


def builtin_scenarios() -> list[str]:
    return catalog.names("scenarios")


STARTS = ("naive", "scenario")
"""Where a plan's chain starts: the naive plan, or the scenario's own."""


def plan(
    scenario: Scenario | EdgeScenario | str | Path,
    objective: str | None = None,
    top: int = 5,
    overrides: Sequence[str] = (),
    start: str = "naive",
    ttft_slo: str | None = None,
    tpot_slo: str | None = None,
    *,
    pareto: bool = True,
    disaggregated: bool = False,
) -> PlanReport | EdgePlanReport:
    """Search plans for a scenario and explain the chain from the baseline to the best one.

    ``objective``: training ``time`` (default), ``cost`` or ``energy``; serving ``throughput`` (default),
    ``latency``, ``cost`` or ``energy``; edge ``latency`` or ``energy`` (default: the scenario's).
    ``start``: ``naive`` or ``scenario`` (the plan as written).
    ``ttft_slo`` / ``tpot_slo`` (serving): service-level objectives such as ``2 s`` or ``50 ms``.
    ``pareto=False`` skips the Pareto frontier (most of a large training search's time).
    ``disaggregated`` (serving): also search prefill / decode splits of the system
    (:mod:`aitrinity.plan.search_disaggregated`); on whenever the scenario's plan has a ``disaggregation``.
    """
    loaded, base = load(scenario)
    if isinstance(loaded, EdgeScenario):
        from aitrinity import edge
        from aitrinity.errors import SpecError

        if ttft_slo or tpot_slo:
            raise SpecError("--slo", ttft_slo or tpot_slo, "no TTFT/TPOT objective for an edge workload")
        return edge.plan(loaded, base, overrides, objective, top)
    from aitrinity.errors import SpecError

    if start not in STARTS:
        raise SpecError("--from", start, "naive or scenario")
    r = resolve(loaded, base, overrides)
    own = r.scenario.plan if start == "scenario" else None
    if r.scenario.workload.training is not None:
        _training_only(ttft_slo, tpot_slo, disaggregated)
        return _plan_training(r, objective, top, own, pareto)
    trace_base = (
        Path(scenario).resolve().parent
        if isinstance(scenario, str | Path) and catalog.loader.is_file(scenario)
        else None
    )
    splits = disaggregated or r.scenario.plan.disaggregation is not None
    return _plan_serving(r, objective, top, own, pareto, ttft_slo, tpot_slo, trace_base, splits)


def _training_only(ttft_slo: str | None, tpot_slo: str | None, disaggregated: bool) -> None:
    """Refuse a training plan's serving-only options."""
    from aitrinity.errors import SpecError

    if ttft_slo or tpot_slo:
        raise SpecError("--slo", ttft_slo or tpot_slo, "no TTFT/TPOT objective for a training workload")
    if disaggregated:
        raise SpecError("--disaggregated", True, "a serving workload (prefill and decode pools)")


def sweep(
    scenario: Scenario | EdgeScenario | str | Path,
    key: str,
    values: Sequence[str],
    objective: str | None = None,
    overrides: Sequence[str] = (),
    start: str = "naive",
    ttft_slo: str | None = None,
    tpot_slo: str | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> list[PlanReport | EdgePlanReport]:
    """The best plan at each of ``values`` of the what-if ``key`` (``trinity plan --sweep KEY=V1,V2,...``): for each,
    what ``plan(scenario, objective, 1, [*overrides, f"{key}={value}"], start, ttft_slo, tpot_slo)`` gives.

    Where the key is a quantity of the hardware (``link`` as a bandwidth, ``hbm_capacity``, ``flops``, ``price``, ...;
    :mod:`aitrinity.overrides`) of a training scenario, the scenario is resolved once and the searches share what no
    quantity of the system enters -- each layout's constants, memory and ledger columns
    (:class:`aitrinity.plan.search.Reuse`) -- so that a value after the first costs its pricing, ranking and chain
    alone. ``progress(done, total)`` is called after each value."""
    from aitrinity.errors import SpecError

    if not values:
        raise SpecError("--sweep", key, "at least one value")
    loaded, base = load(scenario)
    out: list[PlanReport | EdgePlanReport] = []
    if isinstance(loaded, Scenario) and loaded.workload.training is not None and start in STARTS:
        r0 = resolve(loaded, base, overrides)
        fields, points = ov.split([ov.parse(f"{key}={v}") for v in values])
        if r0.scenario.workload.training is not None and not fields:  # hardware quantities alone
            from aitrinity.plan.search import Reuse

            _training_only(ttft_slo, tpot_slo, False)
            reuse, own = Reuse(), r0.scenario.plan if start == "scenario" else None
            for i, point in enumerate(points):
                r = Resolved(r0.scenario, r0.model, ov.apply_hardware(r0.system, [point]))
                out.append(_plan_training(r, objective, 1, own, True, reuse))
                if progress is not None:
                    progress(i + 1, len(points))
            return out
    for i, v in enumerate(values):
        out.append(plan(scenario, objective, 1, [*overrides, f"{key}={v}"], start, ttft_slo, tpot_slo))
        if progress is not None:
            progress(i + 1, len(values))
    return out


def _plan_training(
    r: Resolved, objective: str | None, top: int, own: Plan | None, pareto: bool, reuse: Reuse | None = None
) -> PlanReport:
    """The training search, the chain to its best plan, or the devices the scenario's own plan needs."""
    from aitrinity.cost.estimate import prices_with_operators
    from aitrinity.errors import SpecError
    from aitrinity.plan.chain import training_chain
    from aitrinity.plan.report import PlanReport
    from aitrinity.plan.search import OBJECTIVES, search_training

    w = r.scenario.workload.training
    assert w is not None
    objective = objective or "time"
    if objective not in OBJECTIVES:
        raise SpecError("--objective", objective, f"one of {', '.join(OBJECTIVES)} for training")
    # the kernels diagnose prices the step with: the operator model on a GPU, the phase roofline elsewhere (a TPU's,
    # a CPU's training step) -- a plan the search ranks is then the step diagnose reports
    kernels = _kernels(r).kernels if prices_with_operators(r.system, None) else None
    plan = r.scenario.plan
    result = search_training(r.model, w, plan, r.system, objective, top, pareto=pareto, kernels=kernels, reuse=reuse)
    chain = training_chain(r.model, w, plan, r.system, result.best, own, kernels) if result.best else None
    need = None
    if result.best is None:
        from aitrinity.cost import capacity

        need = capacity.min_devices_training(r.model, w, plan, r.system)
    return PlanReport(scenario=r.scenario.name, kind="training", search=result, chain=chain, min_devices=need)


def _trace_hit_rate(r: Resolved, trace_base: Path | None) -> Callable[[int, int], float] | None:
    """With a trace-based prefix cache, its hit rate at a capacity (the search tries several sizes, replaying the
    trace for each, memoized); None without one. ``trace_base``: the folder a relative trace path is in."""
    traced = [x for x in r.scenario.plan.exchanges if getattr(x, "trace", None)]
    if not traced:
        return None
    from functools import partial

    trace = Path(getattr(traced[0], "trace", ""))
    if trace_base is not None and not trace.is_absolute():
        trace = trace_base / trace
    return partial(replayed_hit_rate, trace)


def _plan_serving(
    r: Resolved,
    objective: str | None,
    top: int,
    own: Plan | None,
    pareto: bool,
    ttft_slo: str | None,
    tpot_slo: str | None,
    trace_base: Path | None,
    splits: bool = False,
) -> PlanReport:
    """The serving search (a trace-based prefix cache's capacity searched too), the chain to its best plan, or
    the devices the scenario's own plan needs. ``trace_base``: the folder a relative trace path is in. ``splits``:
    the disaggregated splits too; the aggregated search and its chain price every replica doing both phases."""
    from aitrinity import units
    from aitrinity.errors import SpecError
    from aitrinity.plan.chain import serving_chain
    from aitrinity.plan.report import PlanReport
    from aitrinity.plan.search_serving import SERVING_OBJECTIVES, search_serving

    w = r.scenario.workload.serving
    assert w is not None
    objective = objective or "throughput"
    if objective not in SERVING_OBJECTIVES:
        raise SpecError("--objective", objective, f"one of {', '.join(SERVING_OBJECTIVES)} for serving")
    ttft = units.parse_time(ttft_slo) if ttft_slo else None
    tpot = units.parse_time(tpot_slo) if tpot_slo else None
    hit_rate = _trace_hit_rate(r, trace_base)
    kernels = _kernels(r).kernels
    plan = r.scenario.plan.model_copy(update={"disaggregation": None})
    own = own.model_copy(update={"disaggregation": None}) if own is not None else None
    sres = search_serving(r.model, w, plan, r.system, objective, top, ttft, tpot, hit_rate, pareto, kernels)
    schain = serving_chain(r.model, w, plan, r.system, sres.best, own, kernels) if sres.best else None
    split_result = None
    if splits:
        from aitrinity.plan.search_disaggregated import search_splits

        if w.mode != "concurrency":
            raise SpecError("--disaggregated", w.mode, "workload.serving.mode: concurrency (pools serve clients)")

        split_result = search_splits(r.model, w, r.scenario.plan, r.system, objective, top, ttft, tpot, kernels)
    need = None
    if sres.best is None:
        from aitrinity.cost import capacity

        need = capacity.min_devices_serving(r.model, w, plan, r.system)
    return PlanReport(
        scenario=r.scenario.name, kind="serving", search=sres, chain=schain, min_devices=need, splits=split_result
    )
