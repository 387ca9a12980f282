"""Search serving plans: layout x context parallelism x batch x KV offload x weight and KV quantization, vectorized.

Objectives: ``throughput`` (output tokens/s of the system, prefill included), ``latency`` (request
latency), ``cost`` ($ per million output tokens), ``energy`` (J per output
token), optionally under TTFT / TPOT service-level objectives. Exchanges the
scenario's plan already lists (a prefix cache with its hit rate, KV
compression, weight streaming) apply to every candidate.

Every candidate carries its quality cost (:mod:`aitrinity.plan.registry`): the accuracy its lossy
exchanges lose, summed. Candidates above the job's ``max_accuracy_drop`` are infeasible; among equally
good ones the search prefers the smaller loss, and the Pareto frontier has the loss as one more axis.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import TypeAdapter

from aitrinity.cost.kernels import Kernels, roofline
from aitrinity.cost.ledger import Result
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.plan import registry
from aitrinity.plan.objective import require
from aitrinity.plan.rows import Ints, frontier, or_none, quantize, rank, records
from aitrinity.plan.search import CP_MIN_TOKENS, ReasonCount, expert_degrees, layouts
from aitrinity.plan.vector_serving import (
    OVER_BUDGET,
    REASONS,
    RESOURCES,
    ServingPriced,
    ServingRows,
    answer_steady,
    dimensions,
    fixed_exchanges,
    price_rows_deferred,
    row_plan,
)
from aitrinity.spec.exchanges import PrefixCache
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, ServingJob, System, ulysses_serving_refusal
from aitrinity.units import format_bytes

ServingObjective = Literal["throughput", "latency", "cost", "energy"]
SERVING_OBJECTIVES: tuple[ServingObjective, ...] = ("throughput", "latency", "cost", "energy")


class ServingChoice(Result):
    tp: int
    pp: int
    replicas: int
    batch: int
    kv_offload: float
    weight_quantization: str
    kv_quantization: str
    ttft_s: float
    tpot_s: float
    latency_s: float
    tokens_per_s: float
    throughput_tokens_per_s: float
    hbm_bytes: float
    link_bytes: float
    usd_per_million_tokens: float | None
    joules_per_token: float | None
    """None without a device power, as $ without a price."""
    binding: str
    accuracy_drop: float
    """The share of the exact model's benchmark score its lossy exchanges lose (summed; see each technique)."""

    prefix_capacity_bytes: float | None = None
    """The prefix cache's size when the search chose it (from a trace), else None."""
    prefix_hit_rate: float | None = None
    added: list[dict[str, Any]] = []
    """Entries of registered techniques the search added (:func:`aitrinity.plan.registry.searched_extras`)."""
    ep: int = 1
    """Expert parallelism (MoE): each expert lives on one of ``ep`` replicas' GPUs, tokens cross by all-to-all."""
    cp: int = 1
    """Context parallelism: each prompt split over ``cp`` groups of ``tp`` GPUs (:func:`context_degrees`)."""

    @property
    def layout(self) -> str:
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        return f"tp{self.tp}{cp} pp{self.pp} x{self.replicas}" + (f" ep{self.ep}" if self.ep > 1 else "")

    @property
    def techniques(self) -> str:
        extras = [x for x in (d.label(getattr(self, d.result_field)) for _, d in dimensions()) if x]
        if self.prefix_capacity_bytes is not None:
            extras.append(f"prefix {format_bytes(self.prefix_capacity_bytes)} (hit {self.prefix_hit_rate:.0%})")
        extras += [e["kind"] for e in self.added]
        return " ".join(extras)

    @property
    def label(self) -> str:
        return f"{self.layout} {self.techniques}"

    def plan(self, base: Plan) -> Plan:
        if self.prefix_capacity_bytes is not None:
            base = with_prefix(base, self.prefix_hit_rate or 0.0, self.prefix_capacity_bytes)
        update = {"ep": self.ep, "cp": self.cp}
        base = registry.with_added(base, [registry.entry(e) for e in self.added]).model_copy(update=update)
        return row_plan(base, self.tp, self.pp, {kind: getattr(self, d.result_field) for kind, d in dimensions()})


def with_prefix(base: Plan, hit_rate: float, capacity: float) -> Plan:
    """The plan with its prefix cache set to a hit rate and a capacity."""
    ex = [
        x.model_copy(update={"hit_rate": hit_rate, "capacity": capacity}) if isinstance(x, PrefixCache) else x
        for x in base.exchanges
    ]
    return base.model_copy(update={"exchanges": ex})


def _searches_prefix(base: Plan, system: System, hit_rate: Callable[[int, int], float] | None) -> bool:
    """Whether the prefix cache's capacity is searched: a trace to replay, in a tier outside HBM that has a size."""
    pc = next((x for x in base.exchanges if isinstance(x, PrefixCache)), None)
    if pc is None or pc.trace is None or hit_rate is None or pc.tier == "hbm":
        return False
    return system.tier_capacity_per_device(pc.tier) is not None


PREFIX_SHARES = (0.125, 0.25, 0.5, 1.0)
"""Prefix-cache capacities tried: these fractions of the replica's share of the cache's tier."""


def _prefix_options(
    m: ModelSpec,
    base: Plan,
    system: System,
    tp: int,
    pp: int,
    hit_rate: Callable[[int, int], float] | None,
    replayed: dict[int, float],
) -> list[tuple[Plan, float | None, float | None]]:
    """(plan, capacity, hit rate) per prefix-cache size to try; the plan itself when there is nothing to vary."""
    pc = next((x for x in base.exchanges if isinstance(x, PrefixCache)), None)
    if not _searches_prefix(base, system, hit_rate) or pc is None or hit_rate is None:
        return [(base, None, None)]
    share = system.tier_capacity_per_device(pc.tier)
    assert share is not None
    per_token = kv_bytes_per_token(m, base.cache_dtype)
    out: list[tuple[Plan, float | None, float | None]] = []
    for frac in PREFIX_SHARES:
        capacity = frac * share * tp * pp
        tokens = int(capacity // per_token)
        if tokens not in replayed:
            replayed[tokens] = hit_rate(tokens, pc.block_tokens)
        out.append((with_prefix(base, replayed[tokens], capacity), capacity, replayed[tokens]))
    return out


class ServingSearchResult(Result):
    objective: str
    evaluated: int
    feasible: int
    best: ServingChoice | None
    top: list[ServingChoice]
    pareto: list[ServingChoice]
    """Non-dominated over (request latency, device memory, bytes moved, throughput, accuracy drop); $ and J per
    token are the system's price and power over the throughput, so they rank as it does."""
    infeasible: list[ReasonCount]
    max_accuracy_drop: float
    """The accuracy budget the search kept to (``workload.serving.max_accuracy_drop``)."""


def _accuracy_drop(base: Plan, rows: ServingRows) -> np.ndarray:
    """Per row: the accuracy its searched exchanges lose (:func:`_lossy`), plus what the scenario's own lossy
    exchanges do."""
    drop: np.ndarray = np.full(len(rows), registry.quality_of(fixed_exchanges(base)).accuracy_drop)
    for column, code, loss in _lossy():
        drop[getattr(rows, column) == code] += loss
    return drop


def _lossy() -> tuple[tuple[str, Any, float], ...]:
    """(column, coded value, accuracy drop) of every value of the grid's dimensions that loses accuracy: what its
    technique's quality cost says of the entry its move makes (int8 weights 2%, fp8 nothing, KV offload nothing)."""
    return _lossy_of(tuple((registry.get(kind), d) for kind, d in dimensions()))


@functools.lru_cache(maxsize=8)
def _lossy_of(dims: tuple[tuple[registry.Exchange, registry.Dimension], ...]) -> tuple[tuple[str, Any, float], ...]:
    """:func:`_lossy` of these techniques (kept: a search asks once per context-parallel degree)."""
    out = []
    for x, d in dims:
        if x.move is None or x.spec is None:
            continue
        for v in d.values:
            loss = registry.quality_of(x.move.put(Plan(), v, Plan()).exchanges).accuracy_drop
            if loss:
                out.append((d.column, d.code(v), loss))
    return tuple(out)


def _grid(host: bool, job: ServingJob, layouts: list[tuple[int, int, int]], cp: int = 1) -> ServingRows:
    """Every layout x each dimension's values (:func:`aitrinity.plan.vector_serving.dimensions`: batch, KV offload,
    weight and KV dtype), layout by layout; every row at the context-parallel degree ``cp`` (one per call:
    :func:`search_serving` makes one call per degree)."""
    axes = tuple(d.tried(d.values, host, job) for _, d in dimensions())
    return _grid_of(axes, tuple(layouts), cp)


@functools.lru_cache(maxsize=64)
def _grid_of(axes: tuple[tuple[Any, ...], ...], layouts: tuple[tuple[int, int, int], ...], cp: int) -> ServingRows:
    """:func:`_grid`, kept: searches of one system ask for the same grid again (its arrays are never written)."""
    grid = list(itertools.product(*axes))
    lay = np.repeat(np.array(layouts, dtype=np.int64).reshape(-1, 3), len(grid), axis=0)
    cols: dict[str, Any] = {  # each column's type as its values have it: counts and indices int64, fractions float64
        d.column: np.tile(np.array(values), len(layouts))
        for (_, d), values in zip(dimensions(), zip(*grid, strict=True), strict=True)
    }
    cols.update(tp=lay[:, 0].copy(), pp=lay[:, 1].copy(), ep=lay[:, 2].copy())
    rows = ServingRows(**cols, cp=np.full(len(lay), cp, dtype=np.int64))
    for f in ServingRows.__dataclass_fields__:
        getattr(rows, f).flags.writeable = False
    return rows


def search_serving(
    m: ModelSpec,
    job: ServingJob,
    base: Plan,
    system: System,
    objective: ServingObjective = "throughput",
    top: int = 5,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    prefix_hit_rate: Callable[[int, int], float] | None = None,
    pareto: bool = True,
    kernels: Kernels | None = None,
) -> ServingSearchResult:
    """``prefix_hit_rate(capacity_tokens, block_tokens)``: the token hit rate of the trace of a trace-based
    prefix cache in ``base`` (e.g. :func:`aitrinity.api.replayed_hit_rate`); its capacity is then searched.

    ``pareto=False`` leaves the frontier out; ``kernels`` time the operators at fixed concurrency (default:
    the device's catalog roofline).
    """
    from aitrinity.errors import SpecError

    require(objective, system)
    ctx = job.prompt_tokens + job.output_tokens
    if ctx > m.max_seq_len:
        raise SpecError(
            "workload.serving", ctx, f"prompt + output tokens at most {m.name}'s max_seq_len ({m.max_seq_len})"
        )
    combos = registry.option_combinations("serving")
    parts: list[_Part] = []
    for cp in context_degrees(job, base, system.num_devices, m):
        offset = int(max((p.rank.max() for p in parts if len(p.rank)), default=-1)) + 1
        parts += _parts(m, job, base.model_copy(update={"cp": cp}), system, prefix_hit_rate, combos, offset)
    calls = _calls(parts)
    deferred = [
        price_rows_deferred(m, job, c[0].plan, system, _joined([p.rows for p in c]), ttft_slo_s, tpot_slo_s)
        for c in calls
    ]
    # the steady states of every layout of every context-parallel degree at once (they share the model's constants)
    answers = iter(
        answer_steady(m, kernels or roofline(system.device), system, job, [r for r, _ in deferred if r is not None])
    )
    t = _complete(
        calls, [finish(next(answers) if r is not None else None) for r, finish in deferred], job, combos, base
    )
    priced = t.priced
    idx, order = _ranking(t, objective, combos)
    # (no $ or J column: for one system both are a constant over the throughput, so they rank as it does -- and a
    # system without a price or a power would give a column of NaNs, which nothing dominates)
    columns = [priced.latency_s, priced.hbm_bytes, priced.link_bytes, -priced.throughput_tokens_per_s, t.drop]
    front = frontier(order, columns) if pareto else []
    counts = np.bincount(priced.reason, minlength=len(REASONS))
    ranked = _choices(t, order[: max(top, 1)].tolist(), system, combos)
    return ServingSearchResult(
        objective=objective,
        evaluated=len(priced.latency_s),
        feasible=len(idx),
        best=ranked[0] if ranked else None,
        top=ranked[:top],
        pareto=_choices(t, front, system, combos),
        infeasible=[ReasonCount(reason=REASONS[j], count=int(c)) for j, c in enumerate(counts) if j and c],
        max_accuracy_drop=job.max_accuracy_drop,
    )


def _ranking(t: _Table, objective: ServingObjective, combos: list[list[Any]]) -> tuple[Ints, Ints]:
    """The feasible candidates, and the same ranked: the objective's score first (quantized), then the smaller
    accuracy drop, the simpler plan (fewer exchanges and devices), less HBM, and the candidates' order."""
    priced = t.priced
    score = {
        "throughput": -priced.throughput_tokens_per_s,
        "latency": priced.latency_s,
        "cost": priced.usd_per_million_tokens,
        "energy": priced.joules_per_token,
    }[objective]
    idx = np.flatnonzero(priced.feasible & np.isfinite(score))
    rows = t.rows
    tp, pp, ep = rows.tp[idx], rows.pp[idx], rows.ep[idx]
    cps = rows.cp[idx] if rows.cp is not None else np.ones(len(idx), dtype=np.int64)
    simple = tp * cps * pp + (ep > 1) + (cps > 1)
    for _, d in dimensions():
        if d.plain is not None:
            simple += getattr(rows, d.column)[idx] != d.code(d.plain)
    simple += np.array([len(entries) for entries in combos])[t.added[idx]]
    order, drop, hbm = t.rank[idx], t.drop[idx], priced.hbm_bytes[idx]
    if (drop == drop[:1]).all() and (order[1:] > order[:-1]).all():  # (one drop, rows in search order: most searches)
        return idx, idx[rank(score[idx], hbm, simple)]
    return idx, idx[np.lexsort((order, quantize(hbm), simple, drop, quantize(score[idx])))]


@dataclasses.dataclass(frozen=True)
class _Table:
    """Every candidate of a search, row-wise: its layout and searched values, pricing and quality cost."""

    rows: ServingRows
    priced: ServingPriced
    capacity: np.ndarray
    """The prefix cache's capacity the row tried (NaN: not searched)."""
    hit: np.ndarray
    added: np.ndarray
    """Index into the combinations of registered techniques' options."""
    drop: np.ndarray
    """Accuracy drop (those above the job's budget are marked infeasible)."""
    rank: Ints
    """The row's place in the one-layout-at-a-time search's order (the ranking's last tie-break): rows are kept in
    the order they were priced, not sorted into it, which would gather every column once more."""


def context_degrees(job: ServingJob, base: Plan, devices: int, m: ModelSpec | None = None) -> list[int]:
    """The context-parallel degrees the serving search tries: 1, each power of two that divides the devices while a
    group keeps :data:`aitrinity.plan.search.CP_MIN_TOKENS` of a prompt (below that the ring is not hidden behind the
    attention, and a prompt that short fits without it) -- with ``cp_method: ulysses``, only those that some TP degree
    leaves heads to split (:func:`aitrinity.spec.scenario.ulysses_serving_refusal`) -- and the scenario's own; only 1
    for a scenario with disaggregated pools or expert parallelism (CP is priced for aggregated replicas without EP)."""
    if base.disaggregation is not None or base.ep > 1:
        return [1]
    out, cp = [1], 2
    while devices % cp == 0 and job.prompt_tokens // cp >= CP_MIN_TOKENS:
        heads_split = m is None or base.cp_method != "ulysses" or not ulysses_serving_refusal(m, 1, cp)
        if heads_split:  # (TP only divides the heads further: if tp 1 cannot split them, no TP degree can)
            out.append(cp)
        cp *= 2
    if base.cp not in out:
        out.append(base.cp)
    return out


@dataclasses.dataclass(frozen=True)
class _Part:
    """Candidates of one context-parallel degree that share a plan: one prefix-cache size (or none searched) and one
    combination of registered options, over their layouts x the row grid (:func:`_parts`)."""

    plan: Plan
    rows: ServingRows
    capacity: float | None
    """The prefix cache's capacity the rows try (None: not searched)."""
    hit: float | None
    added: int
    """Index into the combinations of registered techniques' options."""
    rank: Ints
    """Each row's place in the one-layout-at-a-time search's order."""
    shared: bool
    """Whether the plan is the scenario's own but for the degree and the options (no prefix-cache size searched), so
    that the same options' parts of every degree are priced in one call: the rows carry their degree."""


def _parts(
    m: ModelSpec,
    job: ServingJob,
    base: Plan,
    system: System,
    prefix_hit_rate: Callable[[int, int], float] | None,
    combos: list[list[Any]],
    offset: int,
) -> list[_Part]:
    """Every layout (and, for a MoE model, expert-parallel degree) x prefix-cache size x registered options x the row
    grid of ``base``'s context-parallel degree, one part per prefix-cache size and option (the prefix cache's sizes,
    when searched, depend on the layout: one part per layout and size); their ranks start at ``offset``, layout by
    layout, then by prefix-cache size, option and grid row."""
    host = system.host_memory is not None
    lays = _layouts(m, system, base.ep, base.cp)
    if base.cp > 1 and base.cp_method == "ulysses":  # Ulysses splits a TP rank's query and KV heads over the group
        lays = [lay for lay in lays if not ulysses_serving_refusal(m, lay[0], base.cp)]
    variants: list[tuple[Plan, list[tuple[int, int, int]], float | None, float | None, int]] = []
    replayed: dict[int, float] = {}
    searched = _searches_prefix(base, system, prefix_hit_rate)
    if searched:
        for li, (tp, pp, ep) in enumerate(lays):
            for plan, capacity, hit in _prefix_options(m, base, system, tp * base.cp, pp, prefix_hit_rate, replayed):
                variants.append((plan, [(tp, pp, ep)], capacity, hit, li))
    else:
        variants.append((base, lays, None, None, 0))
    out = []
    for v, (plan, group, capacity, hit, first) in enumerate(variants):
        rows = _grid(host, job, group, base.cp)
        per = len(rows) // max(len(group), 1)
        # the order of the one-layout-at-a-time search: layout, prefix-cache size (variant), option, grid row
        layout = first + np.arange(len(rows)) // per
        for c, entries in enumerate(combos):
            rank = offset + ((layout * len(variants) + v) * len(combos) + c) * per + np.arange(len(rows)) % per
            out.append(_Part(registry.with_added(plan, entries), rows, capacity, hit, c, rank, not searched))
    return out


def _calls(parts: list[_Part]) -> list[list[_Part]]:
    """The parts grouped into pricing calls: the :attr:`_Part.shared` ones of the same options together (one call
    for every context-parallel degree), each other part alone."""
    calls: list[list[_Part]] = []
    together: dict[int, list[_Part]] = {}
    for p in parts:
        if not p.shared:
            calls.append([p])
        elif p.added in together:
            together[p.added].append(p)
        else:
            together[p.added] = [p]
            calls.append(together[p.added])
    return calls


def _joined(rows: list[ServingRows]) -> ServingRows:
    """One table of several parts' rows."""
    if len(rows) == 1:
        return rows[0]
    return ServingRows(*(np.concatenate([getattr(r, f) for r in rows]) for f in ServingRows.__dataclass_fields__))


def _complete(
    calls: list[list[_Part]],
    priced: list[ServingPriced],
    job: ServingJob,
    combos: list[list[Any]],
    base: Plan,
) -> _Table:
    """The candidates of every pricing call (``priced``, one table per call of ``calls``), in the order they were
    priced, with their place in search order and their accuracy drop (over the job's budget: infeasible). One
    concatenation of each column for all the calls."""
    parts = [p for call in calls for p in call]
    table = ServingPriced(
        *(np.concatenate([getattr(x, f) for x in priced]) for f in ServingPriced.__dataclass_fields__)
    )
    tiled = _joined([p.rows for p in parts])
    n = [len(p.rows) for p in parts]
    caps = np.repeat([np.nan if p.capacity is None else p.capacity for p in parts], n)
    hits = np.repeat([np.nan if p.hit is None else p.hit for p in parts], n)
    added = np.repeat(np.array([p.added for p in parts], dtype=np.int64), n)
    rank = np.concatenate([p.rank for p in parts])
    combo_drop = np.array([registry.quality_of(entries).accuracy_drop for entries in combos])
    drop = _accuracy_drop(base, tiled) + combo_drop[added]  # (the parts add to ``base`` no loss but their options')
    over = table.feasible & (drop > job.max_accuracy_drop + 1e-12)
    table = dataclasses.replace(
        table, feasible=table.feasible & ~over, reason=np.where(over, REASONS.index(OVER_BUDGET), table.reason)
    )
    return _Table(tiled, table, caps, hits, added, drop, rank)


def _choices(t: _Table, idx: list[int], system: System, combos: list[list[Any]]) -> list[ServingChoice]:
    """Rows ``idx`` as results (each column gathered once: a search makes about a hundred for its frontier)."""
    if not idx:
        return []
    at = np.asarray(idx, dtype=np.int64)
    p, r = t.priced, t.rows
    tp, pp = r.tp[at].tolist(), r.pp[at].tolist()
    cp = (r.cp[at] if r.cp is not None else np.ones(len(at), dtype=np.int64)).tolist()
    cols = {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "replicas": [system.num_devices // (t * c * q) for t, c, q in zip(tp, cp, pp, strict=True)],
        **{d.result_field: d.decode_all(getattr(r, d.column)[at]) for _, d in dimensions()},
        "ttft_s": p.ttft_s[at].tolist(),
        "tpot_s": p.tpot_s[at].tolist(),
        "latency_s": p.latency_s[at].tolist(),
        "tokens_per_s": p.tokens_per_s[at].tolist(),
        "throughput_tokens_per_s": p.throughput_tokens_per_s[at].tolist(),
        "hbm_bytes": p.hbm_bytes[at].tolist(),
        "link_bytes": p.link_bytes[at].tolist(),
        "usd_per_million_tokens": or_none(p.usd_per_million_tokens[at]),
        "joules_per_token": or_none(p.joules_per_token[at]),
        "accuracy_drop": t.drop[at].tolist(),
        "binding": [RESOURCES[j] for j in p.binding[at].tolist()],
        "prefix_capacity_bytes": or_none(t.capacity[at]),
        "prefix_hit_rate": or_none(t.hit[at]),
        "added": [[e.model_dump(mode="json") for e in combos[j]] for j in t.added[at].tolist()],
        "ep": r.ep[at].tolist(),
    }
    return _choice_list().validate_python(records(cols))


@functools.cache
def _choice_list() -> TypeAdapter[list[ServingChoice]]:
    """Validates a list of choices in one call (faster than one model at a time)."""
    return TypeAdapter(list[ServingChoice])


def _layouts(m: ModelSpec, system: System, ep: int, cp: int = 1) -> list[tuple[int, int, int]]:
    """(tp, pp, ep) to search at the scenario's context-parallel degree ``cp``: every layout and, for a MoE model
    without CP, every expert-parallel degree its replicas allow (:func:`aitrinity.plan.search.expert_degrees`); a
    dense model keeps the scenario's ``ep``."""
    lays = layouts(m, system, 1 if m.moe else ep, uneven=False, cp=cp)  # serving prices the mean pipeline stage
    if not m.moe:
        return [(tp, pp, ep) for tp, pp in lays]
    if cp > 1:  # CP serving is priced without expert parallelism (spec.scenario)
        return [(tp, pp, 1) for tp, pp in lays]
    n = system.num_devices
    return [(tp, pp, e) for tp, pp in lays for e in expert_degrees(m, n // (tp * pp), ep)]
