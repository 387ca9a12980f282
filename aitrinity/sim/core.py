"""A discrete-event simulator: a heap of timestamped events whose handlers return follow-up events (pure).

Events at the same time run in the order they were scheduled (a sequence
number breaks ties), and all randomness comes from the simulator's seeded
generator, so a run is a function of its inputs and seed.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

Handler = Callable[..., "Iterable[Event] | None"]
Event = tuple[float, Handler, tuple[Any, ...]]


class Simulator:
    def __init__(self, seed: int = 0) -> None:
        self.now = 0.0
        self.rng = np.random.default_rng(seed)
        self.processed = 0
        self._heap: list[tuple[float, int, Handler, tuple[Any, ...]]] = []
        self._seq = itertools.count()

    def at(self, t: float, handler: Handler, *args: Any) -> None:
        if t < self.now or math.isnan(t):
            raise ValueError(f"event at {t} is before now ({self.now})")
        heapq.heappush(self._heap, (t, next(self._seq), handler, args))

    def run(self, until: float = math.inf, progress: Callable[[int], None] | None = None) -> int:
        """Process events in time order up to ``until``; returns how many ran."""
        heap = self._heap
        while heap and heap[0][0] <= until:
            t, _, handler, args = heapq.heappop(heap)
            self.now = t
            follow = handler(*args)
            if follow:
                for ft, fh, fa in follow:
                    self.at(ft, fh, *fa)
            self.processed += 1
            if progress is not None and self.processed % 10_000 == 0:
                progress(self.processed)
        return self.processed

    @property
    def pending(self) -> int:
        return len(self._heap)
