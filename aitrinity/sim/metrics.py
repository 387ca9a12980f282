"""Summaries the simulations report."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aitrinity.cost.ledger import Result


class Percentiles(Result):
    p50: float
    p90: float
    p99: float
    mean: float


def percentiles(x: Sequence[float]) -> Percentiles:
    a = np.asarray(x, dtype=float)
    if not a.size:
        return Percentiles(p50=0.0, p90=0.0, p99=0.0, mean=0.0)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return Percentiles(p50=float(p50), p90=float(p90), p99=float(p99), mean=float(a.mean()))
