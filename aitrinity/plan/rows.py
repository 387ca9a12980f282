"""Row-wise helpers shared by the vectorized pricers and the searches."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from aitrinity.spec.scenario import System

F = NDArray[np.float64]
Ints = NDArray[np.int64]


def combine(times: Sequence[F], system: System) -> F:
    """:func:`aitrinity.cost.estimate.combine` for arrays of rows: max, sum or partial overlap."""
    stacked = np.stack(times)
    hi, total = stacked.max(axis=0), stacked.sum(axis=0)
    if system.overlap == "max":
        out: F = hi
    elif system.overlap == "sum":
        out = total
    else:
        out = hi + (1.0 - system.overlap_fraction) * (total - hi)
    return out


def first_failed(checks: Sequence[NDArray[np.bool_]], n: int) -> Ints:
    """Per row, 1 + the index of the first check that fails, 0 when every check passes."""
    reason = np.zeros(n, dtype=np.int64)
    for i in range(len(checks) - 1, -1, -1):
        reason = np.where(checks[i], i + 1, reason)
    return reason


def quantize(x: np.ndarray) -> np.ndarray:
    """Values rounded to 9 significant digits, so that ties are ties whatever the summation order."""
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.where(x != 0, 10.0 ** (8 - np.floor(np.log10(np.abs(np.where(x != 0, x, 1.0))))), 1.0)
    out: np.ndarray = np.round(x * mag) / mag
    return out


def pareto_indices(points: np.ndarray) -> list[int]:
    """Indices of the non-dominated rows of ``points`` (minimise every column), in row order.

    Sorted lexicographically, a row can only be dominated by an earlier one, so
    the first surviving row is always on the front: keep it and strike out, in
    one vectorized pass, every later row it dominates (one pass per front
    point, not one per row).
    """
    rest = np.lexsort(points.T[::-1])
    kept: list[int] = []
    while len(rest):
        head, rest = rest[0], rest[1:]
        kept.append(int(head))
        rest = rest[~np.all(points[head] <= points[rest], axis=1)]
    return sorted(kept)


def frontier(order: Ints, columns: Sequence[np.ndarray]) -> list[int]:
    """The Pareto frontier of the ranked candidates ``order`` over ``columns`` (all minimised).

    Identical points keep their best-ranked candidate; the result is in rank order.
    """
    if not len(order):
        return []
    pts = quantize(np.stack([c[order] for c in columns], axis=1))
    _, first = np.unique(pts, axis=0, return_index=True)
    reps = np.sort(first)  # positions in rank order
    front = pareto_indices(pts[reps])
    return [int(order[reps[k]]) for k in sorted(front)]
