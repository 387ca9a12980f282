"""Telemetry: what a running loop measured, per resource, in one shape every real mechanism reports.

The Controller's predictions are only as good as the rates they are priced at. Each loop measures
something different -- the data-parallel hook a link's α and β and the step's compute time, the split
runtime its uplink, the vLLM connector each store tier's block reads and the engine's prefill FLOP/s,
``trinity watch`` the FLOP/s and bytes/s a server achieved in a period -- and each reports it as
:class:`Rates`: achieved bandwidth and per-message latency by link or tier, compute as FLOP/s and / or
seconds per unit of the loop's work, memory bandwidth. A :class:`Telemetry` is anything that answers
``rates()``; the loops' own objects implement it (``systems.ddp.worker.Telemetry``,
``systems.split.device.AdaptiveSplit``, ``systems.vllm.lookup.Rates``, ``systems.vllm.watch.Verdict``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Rates:
    """Measured rates per resource; a resource the loop does not measure is absent (None or no entry)."""

    links_Bps: Mapping[str, float] = field(default_factory=dict)
    """Achieved bandwidth by link or tier (its name in the loop: ``data-parallel link``, ``uplink``, a store
    tier), bytes per second."""
    latency_s: Mapping[str, float] = field(default_factory=dict)
    """Per-message latency by link, seconds."""
    flops_per_s: float | None = None
    """Achieved compute rate."""
    compute_s: float | None = None
    """Compute time of one unit of the loop's work (a training step), seconds."""
    memory_Bps: float | None = None
    """Achieved device-memory bandwidth."""

    def __post_init__(self) -> None:
        numbers = [*self.links_Bps.values(), *self.latency_s.values()]
        numbers += [x for x in (self.flops_per_s, self.compute_s, self.memory_Bps) if x is not None]
        if any(not x >= 0 for x in numbers):  # (NaN too)
            raise ValueError(f"rates are non-negative numbers: {self}")

    def to_json(self) -> dict[str, Any]:
        return {
            "links_Bps": dict(self.links_Bps),
            "latency_s": dict(self.latency_s),
            "flops_per_s": self.flops_per_s,
            "compute_s": self.compute_s,
            "memory_Bps": self.memory_Bps,
        }


class Telemetry(Protocol):
    """Anything that reports what it measured as :class:`Rates`."""

    def rates(self) -> Rates: ...
