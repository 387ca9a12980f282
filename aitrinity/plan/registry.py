"""The exchange registry: every technique the planner, chain, what-if and report know, one entry each.

An :class:`Exchange` is one technique as ``../shared/DESIGN.md`` defines it: its pathway and break-even
metadata (:class:`~aitrinity.plan.exchanges.ExchangeInfo`), the ``plan.exchanges`` entry that carries its
parameters and their ranges (``spec``; None for the techniques that are plan fields, such as ZeRO or
recomputation), the workloads it applies to, its **move** -- how the chain between two plans reads, sets,
orders and names its value (:class:`Move`; the chain enumerates :func:`moves` and names no technique itself) --,
its **dimension** in the planner's grid -- the values the search tries, how a result spells one
(:class:`Dimension`; the searches enumerate :func:`dimensions`) -- and its **quality cost**: what it costs besides
time and memory (:class:`Quality`). Each built-in technique is
one module of :mod:`aitrinity.plan.techniques` that registers itself; :func:`register` adds another.

Quality costs combine over a plan's exchanges as independent losses: accuracy drops add (a first-order
approximation for small drops), step factors multiply.

Effects on the ledger: the built-in techniques' are written in the ledger builders (:mod:`aitrinity.cost.training`,
:mod:`aitrinity.cost.serving`), on arrays that one plan and the planner's rows share. A
serving technique registered from outside gives its effect as a :data:`~aitrinity.cost.serving.ServingEffect`
on the serving effects every pricing path reads (:func:`aitrinity.cost.serving.effects`), and the entries the
planner should try as ``options``: it is then priced by ``diagnose`` and the planner alike, searched,
explained in the chain and reported (``tests/plan/test_registry.py`` registers a toy one). A training
technique registered from outside gives its effect on the data-parallel gradient synchronisation
(:data:`~aitrinity.cost.effects.SyncEffect`, read through :func:`aitrinity.cost.effects.grad_sync` by the
one-plan ledger and the vectorized rows alike), with the same four consequences.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from aitrinity.cost.effects import EXTRA_SYNC_EFFECTS, SyncEffect
from aitrinity.cost.serving import EXTRA_EFFECTS, ServingEffect
from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.spec._base import Spec
from aitrinity.spec.scenario import Plan

Workload = Literal["training", "serving", "edge"]


@dataclass(frozen=True)
class Quality:
    """What a technique costs besides time and memory."""

    accuracy_drop: float = 0.0
    """Share of the exact model's benchmark score lost (0.01 = one percent of it), as the edge split's
    ``accuracy_drop`` is."""
    steps_factor: float = 1.0
    """Optimizer steps needed to reach the loss the exact method reaches, as a multiple (statistical cost)."""
    source: str = ""

    def __add__(self, other: Quality) -> Quality:
        sources = "; ".join(s for s in (self.source, other.source) if s)
        return Quality(self.accuracy_drop + other.accuracy_drop, self.steps_factor * other.steps_factor, sources)

    @property
    def free(self) -> bool:
        return self.accuracy_drop == 0.0 and self.steps_factor == 1.0


FREE = Quality()


def _free(_: Any) -> Quality:
    return FREE


def accuracy_table(table: Mapping[Any, float], field: str, source: str) -> Callable[[Any], Quality]:
    """A quality cost looked up by one parameter of the entry (e.g. the dtype of a quantization)."""

    def quality(x: Any) -> Quality:
        drop = table[getattr(x, field)]
        return Quality(accuracy_drop=drop, source=source if drop else "")

    return quality


def given_steps_factor(source: str) -> Callable[[Any], Quality]:
    """A statistical cost the entry states itself (its ``steps_factor``)."""

    def quality(x: Any) -> Quality:
        return Quality(steps_factor=x.steps_factor, source=source if x.steps_factor != 1.0 else "")

    return quality


@dataclass(frozen=True)
class Move:
    """A technique as one dimension of the chain between two plans (:mod:`aitrinity.plan.chain`): its value in a plan,
    and the plan with another value. The chain compares values by ``order`` where given, else by ``>``."""

    words: str
    """How a chain step names it ("optimizer offload")."""
    get: Callable[[Plan], Any]
    put: Callable[[Plan, Any, Plan], Plan]
    """(plan, value, target) -> the plan with that value; ``target`` is the plan the chain heads for (a technique the
    scenario gives is taken from it)."""
    rank: int
    """The order the chain tries the moves in: of two equally good moves, the first is taken. The built-ins: ZeRO 0,
    the layout 1-4 (tp, pp, ep, cp), sequence parallelism and recomputation 5-6, the batch sizes 7-8, the training
    exchanges 9-11, the serving ones 12-18; a registered technique picks its place among them."""
    order: tuple[Any, ...] = ()
    """Values whose "more" is not numeric order, from none to the most."""
    naive: Any = None
    """Its value in the naive plan the chain starts from (none of the technique)."""


def field_move(name: str, words: str, rank: int, naive: Any, order: tuple[Any, ...] = ()) -> Move:
    """A plan field (``plan.tp``, ``plan.recompute``, ...) as a move; ``naive``: the field without the technique."""
    return Move(words, lambda p: getattr(p, name), lambda p, v, _: p.model_copy(update={name: v}), rank, order, naive)


def entry_move(
    kind: str,
    words: str,
    rank: int,
    value: Callable[[Any], Any],
    entry: Callable[[Any], Any],
    none: Any,
    order: tuple[Any, ...] = (),
) -> Move:
    """A ``plan.exchanges`` entry as a move by one value: ``value(entry)`` reads it (``none`` without one),
    ``entry(value)`` makes it (appended after the plan's other entries)."""

    def get(p: Plan) -> Any:
        return next((value(x) for x in p.exchanges if x.kind == kind), none)

    def put(p: Plan, v: Any, _: Plan) -> Plan:
        rest = [x for x in p.exchanges if x.kind != kind]
        return p.model_copy(update={"exchanges": rest if v == none else [*rest, entry(v)]})

    return Move(words, get, put, rank, order, none)


def given_move(kind: str, words: str, rank: int) -> Move:
    """A technique the scenario gives and the search keeps as given: present (its entry as the target has it) or not."""

    def get(p: Plan) -> bool:
        return any(x.kind == kind for x in p.exchanges)

    def put(p: Plan, v: Any, target: Plan) -> Plan:
        rest = [x for x in p.exchanges if x.kind != kind]
        return p.model_copy(update={"exchanges": [*rest, *(x for x in target.exchanges if x.kind == kind and v)]})

    return Move(words, get, put, rank, naive=False)


@dataclass(frozen=True)
class Dimension:
    """A technique as a column of a planner's grid: the values the search tries and how a result spells one. The
    column is a field of the rows the workload's pricer reads -- :class:`aitrinity.cost.training.Rows` (priced by
    :func:`aitrinity.cost.training.columns`), :class:`aitrinity.cost.serving.ServingRows` -- and, unless ``field``
    says otherwise, of the search's result (:class:`aitrinity.plan.search.PlanChoice`,
    :class:`aitrinity.plan.search_serving.ServingChoice`)."""

    column: str
    values: tuple[Any, ...]
    """The values the search tries unless a :class:`~aitrinity.plan.search.Space` says otherwise."""
    label: Callable[[Any], str]
    """How a plan's technique list names a value ("" where it names nothing)."""
    plain: Any = None
    """The value that means the technique is not used, for the tie-break toward simpler plans (None: never counted,
    as a micro-batch size)."""
    choices: tuple[Any, ...] = ()
    """Where the column holds an index into these (recomputation, the compressors), not the value itself."""
    host: bool = False
    """Tried only where the system has host memory (elsewhere its plain value only)."""
    field: str = ""
    """The result's name for it, where not the column's."""
    given: Callable[[Any], Any] | None = None
    """The workload's own value (None: it has none), tried with the others: a serving job's batch."""

    @property
    def result_field(self) -> str:
        return self.field or self.column

    def tried(self, values: tuple[Any, ...], host: bool, job: Any) -> tuple[Any, ...]:
        """The values the search tries, coded as the column holds them: ``values`` (its own or a space's) and the
        job's own, in order; its plain value alone where it needs host memory and the system has none."""
        if self.host and not host:
            values = (self.plain,)
        own = self.given(job) if self.given is not None else None
        if own is not None and own not in values:
            values = tuple(sorted((*values, own)))
        return tuple(self.code(v) for v in values)

    def code(self, value: Any) -> Any:
        return self.choices.index(value) if self.choices else value

    def decode(self, value: Any) -> Any:
        """A column's entry (a numpy scalar) as the value a result holds."""
        v = value.item() if hasattr(value, "item") else value
        return self.choices[v] if self.choices else v

    def decode_all(self, column: Any) -> list[Any]:
        """Column entries (an array) as the values results hold."""
        values: list[Any] = column.tolist()
        return [self.choices[v] for v in values] if self.choices else values


@dataclass(frozen=True)
class Exchange:
    info: ExchangeInfo
    workloads: tuple[Workload, ...]
    spec: type[Spec] | None = None
    """The ``plan.exchanges`` entry (a :mod:`aitrinity.spec.exchanges` class); None for a plan field."""
    quality: Callable[[Any], Quality] = _free
    """The quality cost of one ``plan.exchanges`` entry of this kind (or of a plan field's value)."""
    searched: bool = False
    """Whether the planner searches its parameters (otherwise a scenario that lists it keeps it as given)."""
    serving_effect: ServingEffect | None = None
    """A registered (not built-in) serving technique's effect (:data:`aitrinity.cost.serving.ServingEffect`)."""
    sync_effect: SyncEffect | None = None
    """A registered (not built-in) training technique's effect on the gradient synchronisation
    (:data:`aitrinity.cost.effects.SyncEffect`)."""
    options: tuple[Any, ...] = ()
    """Entries of a registered technique the planner tries, each against leaving it out."""
    used: Callable[[Plan], bool] | None = None
    """Whether a plan uses it, for the plan fields (``tp > 1``, ``zero > 0``, ...); None: an entry of its kind
    is in ``plan.exchanges``."""
    move: Move | None = None
    """The technique as a dimension of the chain; None: the chain does not move it (a workload's batch, local SGD
    kept in every state, the edge split)."""
    dimension: Dimension | None = None
    """The technique as a column of its workload's planner grid (the built-ins whose effect the grid's rows carry);
    None: not one (a registered technique is searched through its ``options``)."""

    def uses(self, plan: Plan) -> bool:
        if self.used is not None:
            return self.used(plan)
        return any(e.kind == self.kind for e in plan.exchanges)

    @property
    def kind(self) -> str:
        return self.info.kind


_REGISTRY: dict[str, Exchange] = {}
_LOADED = False


def _load() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        import aitrinity.plan.techniques  # noqa: F401  (each module registers itself)


def register(x: Exchange, *, replace: bool = False) -> Exchange:
    """Add a technique; a second one of the same kind is refused unless ``replace``."""
    _load()
    if x.kind in _REGISTRY and not replace:
        raise ValueError(f"an exchange of kind {x.kind!r} is already registered")
    if (x.serving_effect is not None or x.sync_effect is not None or x.options) and x.spec is None:
        raise ValueError(f"{x.kind}: a technique with an effect or options needs its entry's spec class")
    _REGISTRY[x.kind] = x
    EXTRA_EFFECTS.pop(x.kind, None)
    EXTRA_SYNC_EFFECTS.pop(x.kind, None)
    if x.serving_effect is not None:
        EXTRA_EFFECTS[x.kind] = x.serving_effect
    if x.sync_effect is not None:
        EXTRA_SYNC_EFFECTS[x.kind] = x.sync_effect
    return x


def unregister(kind: str) -> None:
    _load()
    _REGISTRY.pop(kind, None)
    EXTRA_EFFECTS.pop(kind, None)
    EXTRA_SYNC_EFFECTS.pop(kind, None)


def searched_extras(workload: Workload) -> list[Exchange]:
    """Registered techniques with planner options (the built-in ones are searched by the planner's own grid)."""
    return [x for x in registered(workload) if x.options]


def option_combinations(workload: Workload) -> list[list[Any]]:
    """Every combination of the registered techniques' options, each also left out; [[]] when there are none."""
    extras = searched_extras(workload)
    return [[e for e in c if e is not None] for c in itertools.product(*[(None, *x.options) for x in extras])]


def entry(data: dict[str, Any]) -> Any:
    """A registered technique's ``plan.exchanges`` entry from its JSON (as a search result records it)."""
    spec = get(data["kind"]).spec
    assert spec is not None
    return spec.model_validate(data)


def with_added(base: Plan, entries: list[Any]) -> Plan:
    """The plan with registered techniques' entries appended (they are not in the validated union of built-ins)."""
    return base.model_copy(update={"exchanges": [*base.exchanges, *entries]}) if entries else base


def get(kind: str) -> Exchange:
    _load()
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise KeyError(f"no exchange of kind {kind!r} is registered") from None


def choices(kind: str, name: str) -> tuple[Any, ...]:
    """The values a registered technique's parameter may take (its spec's ``Literal``): what a Controller can
    switch between at run time, e.g. ``choices("gradient-compression", "method")``."""
    spec = get(kind).spec
    if spec is None or name not in spec.model_fields:
        raise KeyError(f"{kind!r} has no parameter {name!r}")
    values = typing.get_args(spec.model_fields[name].annotation)
    if typing.get_origin(spec.model_fields[name].annotation) is not Literal or not values:
        raise KeyError(f"{kind}.{name} is not a choice among fixed values")
    return values


def registered(workload: Workload | None = None) -> list[Exchange]:
    """Every registered technique (for one workload), in registration order."""
    _load()
    return [x for x in _REGISTRY.values() if workload is None or workload in x.workloads]


def moves(workload: Workload) -> list[tuple[str, Move]]:
    """The registered techniques the chain moves for a workload, by kind, in their ``rank`` order (ties: registration
    order)."""
    out = [(x.kind, x.move) for x in registered(workload) if x.move is not None]
    return sorted(out, key=lambda km: km[1].rank)


def dimensions(workload: Workload = "training") -> list[tuple[str, Dimension]]:
    """The columns of a workload's planner grid, by kind, in registration order."""
    return [(x.kind, x.dimension) for x in registered(workload) if x.dimension is not None]


def used_by(plan: Plan, workload: Workload) -> list[str]:
    """The kinds of the registered techniques ``plan`` uses, in registration order."""
    return [x.kind for x in registered(workload) if x.uses(plan)]


def quality_of(entries: Iterable[Any]) -> Quality:
    """The combined quality cost of ``plan.exchanges`` entries (anything with a registered ``kind``)."""
    total = FREE
    for e in entries:
        total = total + get(e.kind).quality(e)
    return total
