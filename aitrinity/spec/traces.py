"""Trace types: requests of a serving trace and a link's bandwidth over time (validated, no I/O).

Readers are in :mod:`aitrinity.catalog.traces`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True)
class TraceRequest:
    """One request of a Mooncake-format trace: arrival (ms), prompt and output tokens (the format's ``input_length``
    and ``output_length``, named as a serving job names them), prefix-chained block ids (equal ids mean reusable
    KV)."""

    timestamp_ms: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class LinkTrace:
    """Piecewise-constant bandwidth: ``bandwidth_Bps[i]`` from ``times_s[i]`` on."""

    times_s: tuple[float, ...]
    bandwidth_Bps: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.times_s or len(self.times_s) != len(self.bandwidth_Bps):
            raise ValueError("a link trace needs as many times as bandwidths, at least one")
        if list(self.times_s) != sorted(self.times_s) or any(b <= 0 for b in self.bandwidth_Bps):
            raise ValueError("times must ascend and bandwidths be positive")

    def at(self, t: float) -> float:
        i = bisect.bisect_right(self.times_s, t) - 1
        return self.bandwidth_Bps[max(i, 0)]
