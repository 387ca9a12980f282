"""Search training plans: enumerate, price vectorized, keep the feasible, rank, Pareto.

The space: every valid ``(tp, pp)`` layout of the system (tp divides the heads
and is compatible with the KV heads, pp at most the layers -- uneven stages hold
one layer fewer at the ends, Llama 3's balance --, ``tp · pp`` divides the
devices) x the context-parallel degrees of :func:`context_degrees` x, for a
MoE model, every expert-parallel degree ``ep`` that divides both the expert count
and the data-parallel degree x micro-batch x ZeRO stage x recomputation x
sequence parallelism x gradient compression x optimizer offload. Dtypes, flash
attention, the CP method, a dense model's ``ep`` and the optimizer come from the
scenario's plan. Deterministic: rows are enumerated in a fixed order and ties go
to the first row.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import TypeAdapter

from aitrinity.cost.kernels import Kernels
from aitrinity.cost.ledger import Result
from aitrinity.plan import registry
from aitrinity.plan.objective import require
from aitrinity.plan.rows import Ints, frontier, or_none, rank, records
from aitrinity.plan.vector_training import (
    REASONS,
    RESOURCES,
    LayoutLedger,
    Priced,
    Rows,
    fixed_exchanges,
    layout_ledger,
    price_rows,
)
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, System, TrainingJob, ulysses_training_refusal

Objective = Literal["time", "cost", "energy"]
OBJECTIVES: tuple[Objective, ...] = ("time", "cost", "energy")


@dataclass(frozen=True)
class Space:
    """The values the search tries for some of its dimensions, by technique kind (``Space.of({"zero": (1, 3)})``);
    every other dimension tries its technique's own (:class:`aitrinity.plan.registry.Dimension`)."""

    overrides: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    @classmethod
    def of(cls, values: Mapping[str, Sequence[Any]]) -> Space:
        """A space from ``{kind: values}``. Refused (``ValueError``, with the reason): a kind that is not a
        dimension of the grid, no values, or a value its technique does not take (checked as a plan with it)."""
        dims = dict(registry.dimensions())
        unknown = sorted(set(values) - set(dims))
        if unknown:
            raise ValueError(f"not a dimension of the training search: {', '.join(unknown)} (known: {sorted(dims)})")
        for kind, vs in values.items():
            if not len(vs):
                raise ValueError(f"{kind}: no values to try")
            for v in vs:
                _check_value(kind, dims[kind], v)
        return cls(tuple(sorted((k, tuple(v)) for k, v in values.items())))

    def values(self, kind: str, dim: registry.Dimension) -> tuple[Any, ...]:
        """What the search tries for ``kind`` (before :meth:`~aitrinity.plan.registry.Dimension.tried`): its
        override or its own values."""
        return dict(self.overrides).get(kind, dim.values)


def _check_value(kind: str, dim: registry.Dimension, value: Any) -> None:
    """Refuse a value a technique does not take: not among its choices, or a plan with it that does not validate."""
    from pydantic import ValidationError

    if dim.choices and value not in dim.choices:
        raise ValueError(f"{kind}: {value!r} is not one of {list(dim.choices)}")
    move = registry.get(kind).move
    assert move is not None, f"{kind}: a dimension of the grid has a move"
    try:
        plan = move.put(Plan(), value, Plan())
        Plan.model_validate(plan.model_dump())
    except (ValidationError, ValueError, TypeError) as e:
        reason = e.errors()[0]["msg"] if isinstance(e, ValidationError) else str(e)
        raise ValueError(f"{kind}: {value!r} is not a value it takes ({reason})") from None


DEFAULT_SPACE = Space()


class PlanChoice(Result):
    """One candidate plan and what it costs."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    zero: int
    recompute: str
    sequence_parallel: bool
    compression: str
    optimizer_offload: bool
    virtual_stages: int
    activation_offload: float
    step_time_s: float
    tokens_per_s: float
    hbm_bytes: float
    link_bytes: float
    usd_per_million_tokens: float | None
    joules_per_token: float | None
    """None without a device power, as $ without a price."""
    binding: str
    added: list[dict[str, Any]] = []
    """Entries of registered techniques the search added (:func:`aitrinity.plan.registry.searched_extras`)."""
    ep: int = 1
    """Expert parallelism: the experts split over ``ep`` ranks of the data-parallel group (MoE models)."""
    cp: int = 1
    """Context parallelism: each sequence split over ``cp`` ranks."""

    @property
    def layout(self) -> str:
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        v = f" v{self.virtual_stages}" if self.virtual_stages > 1 else ""
        return f"tp{self.tp}{cp} pp{self.pp} dp{self.dp}{ep}{v}"

    @property
    def techniques(self) -> str:
        named = (d.label(getattr(self, d.column)) for _, d in dimensions())
        return " ".join([*(x for x in named if x), *(e["kind"] for e in self.added)])

    @property
    def label(self) -> str:
        return f"{self.layout} {self.techniques}"

    def plan(self, base: Plan) -> Plan:
        """The scenario plan with this choice applied (dtypes, the exchanges the search does not choose, such as
        local SGD, and the rest kept)."""
        layout = {"tp": self.tp, "pp": self.pp, "dp": None, "ep": self.ep, "cp": self.cp}
        plan = base.model_copy(update={**layout, "exchanges": fixed_exchanges(base)})
        for kind, d in dimensions():  # each value as its technique's move sets it
            move = registry.get(kind).move
            assert move is not None
            plan = move.put(plan, getattr(self, d.column), base)
        return plan.model_copy(update={"exchanges": [*plan.exchanges, *(registry.entry(e) for e in self.added)]})


class ReasonCount(Result):
    reason: str
    count: int


class SearchResult(Result):
    objective: str
    evaluated: int
    feasible: int
    best: PlanChoice | None
    top: list[PlanChoice]
    pareto: list[PlanChoice]
    """Non-dominated over (step time, device memory, bytes moved); $ and J per step are the system's price and power
    times the step time, so they rank as it does."""
    infeasible: list[ReasonCount]
    """How many candidates each constraint removed (the first one they failed)."""


def layouts(m: ModelSpec, system: System, ep: int, uneven: bool = True, cp: int = 1) -> list[tuple[int, int]]:
    """``(tp, pp)`` layouts (module doc) of replicas of ``tp x cp x pp`` devices. ``uneven``: pipelines whose stages
    hold unequal layer counts too -- the training step prices each stage (:func:`aitrinity.cost.training.stage_bounds`);
    serving, which prices the mean stage, searches divisors of the layer count only."""
    n, kv = system.num_devices, m.kv_heads
    out = []
    for tp in range(1, min(m.num_attention_heads, system.devices_per_node) + 1):  # TP inside one node / domain
        if m.num_attention_heads % tp or (kv % tp and tp % kv) or n % tp:
            continue
        for pp in range(1, m.num_layers + 1):
            if n % (tp * cp * pp) or (not uneven and m.num_layers % pp):
                continue
            dp = n // (tp * cp * pp)
            if dp % ep or (m.moe and m.moe.num_experts % ep):
                continue
            out.append((tp, pp))
    return out


CP_MIN_TOKENS = 8192
"""The search tries a context-parallel degree only while each rank keeps at least this many tokens of a sequence:
below it the K / V exchange outgrows the attention it should hide behind (ring attention overlaps a block's
transfer with its compute only when the block is large enough, Liu et al. 2023, §3) and a short sequence fits
without CP. A pruning rule of the search, not a fit; a scenario's own ``plan.cp`` is always tried."""


def context_degrees(m: ModelSpec, job: TrainingJob, base: Plan, ranks: int, tp: int) -> list[int]:
    """The context-parallel degrees the search tries where ``ranks`` = devices / (tp x pp) are left for CP and DP
    to share: 1, each power of two that divides ``ranks``, splits the sequence in ``2·cp`` equal chunks and leaves a
    rank :data:`CP_MIN_TOKENS` of it (with Ulysses, also splits the heads per TP rank:
    :func:`aitrinity.spec.scenario.ulysses_training_refusal`), and the scenario's own."""

    def ok(cp: int) -> bool:
        heads_split = base.cp_method != "ulysses" or not ulysses_training_refusal(m, tp, cp)
        return ranks % cp == 0 and job.seq_len % (2 * cp) == 0 and heads_split

    out, cp = [1], 2
    while cp <= ranks and job.seq_len // cp >= CP_MIN_TOKENS:
        if ok(cp):
            out.append(cp)
        cp *= 2
    if base.cp not in out and ok(base.cp):
        out.append(base.cp)
    return out


def expert_degrees(m: ModelSpec, dp: int, ep: int) -> list[int]:
    """The expert-parallel degrees the search tries on a layout of ``dp`` data-parallel ranks: for a MoE model every
    divisor of the expert count that divides ``dp`` (1 included); for a dense model the scenario's ``ep``."""
    if not m.moe:
        return [ep]
    return [e for e in range(1, dp + 1) if dp % e == 0 and m.moe.num_experts % e == 0]


def dimensions() -> list[tuple[str, registry.Dimension]]:
    """The grid's dimensions (:func:`aitrinity.plan.registry.dimensions`) in the order of the rows' columns: every
    column of :class:`aitrinity.cost.training.Rows` is one technique's."""
    columns = list(Rows.__dataclass_fields__)
    dims = sorted(registry.dimensions(), key=lambda kd: columns.index(kd[1].column))
    assert [d.column for _, d in dims] == columns, "each column of the training rows is one technique's dimension"
    return dims


@functools.cache
def _rows(host: bool, space: Space) -> Rows:
    """The grid of non-layout choices (the same for every layout and system; cached, never mutated)."""
    axes = [d.tried(space.values(kind, d), host, None) for kind, d in dimensions()]
    return Rows.from_grid(list(itertools.product(*axes)))


@dataclass(frozen=True)
class _Table:
    """All candidates: the grid's rows for each part (a layout, its context- and expert-parallel degrees and one
    combination of the registered techniques' options) in turn; candidate ``i`` is row ``i % len(grid)`` of part
    ``i // len(grid)``. The per-candidate columns below are spread out only when asked for (tests, the brute force):
    the search reads the parts."""

    grid: Rows
    parts: np.ndarray
    """One row per part: tp, pp, ep, cp and ``added``, the index into ``combos`` of the options the part adds."""
    pieces: list[Priced]
    """Each part's rows priced (only the feasible ones timed: the others' times are NaN)."""
    combos: list[list[Any]]

    @functools.cached_property
    def priced(self) -> Priced:
        """Every candidate's columns, the parts' concatenated."""
        return Priced(*(np.concatenate([getattr(p, f) for p in self.pieces]) for f in Priced.__dataclass_fields__))

    def feasible(self) -> tuple[Ints, Priced]:
        """The feasible candidates' numbers, in order, and their columns (what the ranking reads: a third or less
        of the candidates, gathered part by part rather than concatenated whole)."""
        n = len(self.grid)
        which = [np.flatnonzero(p.feasible) for p in self.pieces]
        idx = np.concatenate([w + k * n for k, w in enumerate(which)])
        pairs = list(zip(self.pieces, which, strict=True))
        return idx, Priced(*(np.concatenate([getattr(p, f)[w] for p, w in pairs]) for f in Priced.__dataclass_fields__))

    @property
    def reasons(self) -> Ints:
        """How many candidates each reason of :data:`REASONS` names (0: feasible)."""
        out: Ints = np.sum([np.bincount(p.reason, minlength=len(REASONS)) for p in self.pieces], axis=0)
        return out

    def _spread(self, column: int) -> np.ndarray:
        out: np.ndarray = np.repeat(self.parts[:, column], len(self.grid))
        return out

    @property
    def tp(self) -> np.ndarray:
        return self._spread(0)

    @property
    def pp(self) -> np.ndarray:
        return self._spread(1)

    @property
    def ep(self) -> np.ndarray:
        return self._spread(2)

    @property
    def cp(self) -> np.ndarray:
        return self._spread(3)

    @property
    def rows(self) -> Rows:
        reps = len(self.parts)
        return Rows(*(np.tile(getattr(self.grid, f), reps) for f in Rows.__dataclass_fields__))


@dataclass
class Reuse:
    """What the training searches of one hardware sweep share (:func:`aitrinity.api.sweep`): each part's plan and
    the system-free part of pricing its rows (:class:`~aitrinity.plan.vector_training.LayoutLedger`: layout
    constants, memory section, ledger columns). Valid for searches of one model, job, plan and space on systems of one
    device count and node size, with host memory or without, that differ in their quantities alone (bandwidths,
    capacities, FLOPs, price, power): the first search fixes these and a later one that differs is refused."""

    parts: dict[tuple[int, int, int, int, int], tuple[Plan, LayoutLedger]] = field(default_factory=dict)
    scope: tuple[Any, ...] | None = None

    def enter(self, m: ModelSpec, job: TrainingJob, base: Plan, system: System, space: Space) -> None:
        scope = (m, job, base, space, system.num_devices, system.devices_per_node, system.host_memory is not None)
        if self.scope is None:
            self.scope = scope
        elif not all(a is b or a == b for a, b in zip(self.scope, scope, strict=True)):
            raise ValueError("a Reuse serves searches of one model, job, plan, space and system layout only")


def evaluate(
    m: ModelSpec,
    job: TrainingJob,
    base: Plan,
    system: System,
    space: Space = DEFAULT_SPACE,
    kernels: Kernels | None = None,
    reuse: Reuse | None = None,
) -> _Table:
    """Every candidate priced: the layouts (with their context- and expert-parallel degrees) x the registered
    techniques' option combinations x the grid of rows. ``reuse``: what an earlier search of a hardware sweep built
    and this one may read (:class:`Reuse`)."""
    if reuse is not None:
        reuse.enter(m, job, base, system, space)
    if job.seq_len > m.max_seq_len:  # the one job check the one-plan ledger makes first
        from aitrinity.errors import SpecError

        raise SpecError("workload.training.seq_len", job.seq_len, f"at most {m.name}'s max_seq_len ({m.max_seq_len})")
    rows = _rows(system.host_memory is not None, space)
    priced: list[Priced] = []
    parts: list[tuple[int, int, int, int, int]] = []
    combos = registry.option_combinations("training")
    shared: dict[tuple[Any, ...], Any] = {}  # what the layouts share (price_rows): this search's alone
    for tp, pp in layouts(m, system, 1 if m.moe else base.ep):
        ranks = system.num_devices // (tp * pp)
        for cp in context_degrees(m, job, base, ranks, tp):
            if not m.moe and (ranks // cp) % base.ep:
                continue
            for ep in expert_degrees(m, ranks // cp, base.ep):
                with_ep = base.model_copy(update={"ep": ep, "cp": cp}) if (ep, cp) != (base.ep, base.cp) else base
                for c, entries in enumerate(combos):
                    key = (tp, pp, ep, cp, c)
                    if reuse is not None and key in reuse.parts:
                        plan, ledger = reuse.parts[key]
                    else:
                        plan = registry.with_added(with_ep, entries)
                        ledger = layout_ledger(m, job, plan, tp, pp, system.num_devices // (tp * pp * cp), rows)
                        if reuse is not None:
                            reuse.parts[key] = plan, ledger
                    priced.append(price_rows(m, job, plan, system, tp, pp, rows, kernels, False, shared, ledger))
                    parts.append(key)
    if not parts:
        from aitrinity.errors import SpecError

        raise SpecError(
            "system.num_devices", system.num_devices, f"a device count some tp x pp layout of {m.name} divides"
        )
    return _Table(rows, np.array(parts, dtype=np.int64), priced, combos)


def _score(t: _Table, idx: Ints, p: Priced, job: TrainingJob, objective: Objective) -> np.ndarray:
    """Candidates ``idx`` (columns ``p``) per unit of useful work: a registered technique's statistical cost (more
    steps for the same loss) multiplies it, as the break-even rule counts it."""
    tokens = job.global_batch * job.seq_len
    factor = np.array([registry.quality_of(entries).steps_factor for entries in t.combos])
    steps = factor[t.parts[idx // len(t.grid), 4]]
    if objective == "time":
        out: np.ndarray = p.step_time_s * steps
    elif objective == "cost":
        out = p.usd_per_step / tokens * steps
    else:
        out = p.joules_per_step / tokens * steps
    return out


def _choices(t: _Table, idx: Ints, p: Priced, at: Ints, system: System, job: TrainingJob) -> list[PlanChoice]:
    """Candidates ``idx[at]`` (columns ``p[at]``) as results, each column gathered once and the list validated in one
    call (a search makes about two hundred for its frontier)."""
    part, row = np.divmod(idx[at], len(t.grid))
    tp, pp, ep, cp, added = (t.parts[part, k] for k in range(5))
    tokens = job.global_batch * job.seq_len
    step, usd, joules = p.step_time_s[at], p.usd_per_step[at], p.joules_per_step[at]
    cols = {
        "tp": tp.tolist(),
        "pp": pp.tolist(),
        "ep": ep.tolist(),
        "cp": cp.tolist(),
        "dp": (system.num_devices // (tp * pp * cp)).tolist(),
        **{d.column: d.decode_all(getattr(t.grid, d.column)[row]) for _, d in dimensions()},
        "step_time_s": step.tolist(),
        "tokens_per_s": (tokens / step).tolist(),
        "hbm_bytes": p.hbm_bytes[at].tolist(),
        "link_bytes": p.link_bytes[at].tolist(),
        "added": [[e.model_dump(mode="json") for e in t.combos[j]] for j in added.tolist()],
        "usd_per_million_tokens": or_none(usd / tokens * 1e6),
        "joules_per_token": or_none(joules / tokens),
        "binding": [RESOURCES[j] for j in p.binding[at].tolist()],
    }
    return _choice_list().validate_python(records(cols))


@functools.cache
def _choice_list() -> TypeAdapter[list[PlanChoice]]:
    """Validates a list of choices in one call (faster than one model at a time)."""
    return TypeAdapter(list[PlanChoice])


def complexity(rows: Rows) -> np.ndarray:
    """How many techniques a plan uses: the tie-break in favour of the simpler plan."""
    out = np.zeros(len(rows), dtype=np.int64)
    for _, d in dimensions():
        if d.plain is not None:
            out += getattr(rows, d.column) != d.code(d.plain)
    return out


def search_training(
    m: ModelSpec,
    job: TrainingJob,
    base: Plan,
    system: System,
    objective: Objective = "time",
    top: int = 5,
    space: Space = DEFAULT_SPACE,
    pareto: bool = True,
    kernels: Kernels | None = None,
    reuse: Reuse | None = None,
) -> SearchResult:
    """``pareto=False`` leaves the frontier out (most of the time of a search over many layouts); ``kernels``
    time a GPU's operators (default: the device's catalog roofline); ``reuse``: a hardware sweep's store of what its
    searches share (:class:`Reuse`)."""
    require(objective, system)
    t = evaluate(m, job, base, system, space, kernels, reuse)
    idx, p = t.feasible()
    score = _score(t, idx, p, job, objective)
    if not np.isfinite(score).all():  # (a $ or J objective without a price or a power: require() refuses it)
        keep = np.flatnonzero(np.isfinite(score))
        idx, score = idx[keep], score[keep]
        p = Priced(*(getattr(p, f)[keep] for f in Priced.__dataclass_fields__))
    n = len(t.grid)
    extra = (t.parts[:, 3] > 1) + np.array([len(entries) for entries in t.combos])[t.parts[:, 4]]  # cp, options
    simple = complexity(t.grid)[idx % n] + extra[idx // n]
    order = rank(score, p.hbm_bytes, simple)
    # (no $ or J column: for one system both are a constant times the step time)
    front = frontier(order, [p.step_time_s, p.hbm_bytes, p.link_bytes]) if pareto else []
    counts = t.reasons
    head = order[: max(top, 1)].tolist()  # the best, and the rest of the top
    chosen = _choices(t, idx, p, np.array(head + front, dtype=np.int64), system, job)
    return SearchResult(
        objective=objective,
        evaluated=n * len(t.parts),
        feasible=len(idx),
        best=chosen[0] if head else None,
        top=chosen[: min(top, len(head))],
        pareto=chosen[len(head) :],
        infeasible=[ReasonCount(reason=REASONS[k], count=int(c)) for k, c in enumerate(counts) if k and c],
    )
