"""What an exchange declares: its pathway, what it spends and relieves, its break-even rule and its source.

Each technique registers one :class:`ExchangeInfo` in its own module of
:mod:`aitrinity.plan.techniques` (see :mod:`aitrinity.plan.registry`); :data:`CATALOG` is the read-only
view by kind. Techniques written in ``plan.exchanges`` change the ledger through
:mod:`aitrinity.cost.effects` and the ledger builders; the parallel-layout
techniques (ZeRO, TP/PP/SP/EP degrees, recomputation) are plan fields with
the same metadata, so a chain of plans can name the pathway of every step.

===================  =======================  ==========================================
pathway              spends                   relieves
===================  =======================  ==========================================
compute->bandwidth   FLOPs / memory passes    bytes on a link
bandwidth->memory    bytes on a link          resident bytes on the device
memory->compute      resident bytes           FLOPs
compute->memory      FLOPs                    resident bytes (recomputation, quantization)
===================  =======================  ==========================================
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

Pathway = Literal["compute->bandwidth", "bandwidth->memory", "memory->compute", "compute->memory"]
Swept = Literal["dp_link", "host", "tier", "kv_link", "hbm_bandwidth"]


@dataclass(frozen=True)
class ExchangeInfo:
    kind: str
    title: str
    pathway: Pathway
    spends: str
    relieves: str
    swept: Swept | None
    """The resource whose bandwidth decides whether it pays off (for the break-even rule)."""
    pays_when: Literal["below", "above"]
    """It pays off while that bandwidth is below / above the break-even point."""
    rule: Literal["faster", "hidden"]
    """'faster': it pays when the plan gets faster; 'hidden': it buys memory and pays when it costs no time."""
    source: str


class _Catalog(Mapping[str, ExchangeInfo]):
    """Every registered exchange's metadata by kind: a read-only view of :mod:`aitrinity.plan.registry`."""

    def __getitem__(self, kind: str) -> ExchangeInfo:
        from aitrinity.plan import registry

        try:
            return registry.get(kind).info
        except KeyError:
            raise KeyError(kind) from None

    def __iter__(self) -> Iterator[str]:
        from aitrinity.plan import registry

        return iter([x.kind for x in registry.registered()])

    def __len__(self) -> int:
        from aitrinity.plan import registry

        return len(registry.registered())


CATALOG: Mapping[str, ExchangeInfo] = _Catalog()
