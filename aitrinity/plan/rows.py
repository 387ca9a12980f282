"""Row-wise helpers shared by the vectorized pricers and the searches."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

F = NDArray[np.float64]
Ints = NDArray[np.int64]


def first_failed(checks: Sequence[NDArray[np.bool_]], n: int) -> Ints:
    """Per row, 1 + the index of the first check that fails, 0 when every check passes."""
    reason = np.zeros(n, dtype=np.int64)
    for i in range(len(checks) - 1, -1, -1):
        reason = np.where(checks[i], i + 1, reason)
    return reason


def first_largest(columns: Sequence[np.ndarray]) -> Ints:
    """Per row, the index of the column holding the largest value, the first of equals: ``np.argmax`` over the
    stacked columns (NaN-free) without the stack, whose reduction across rows runs strided (2x slower)."""
    best = columns[0]
    out = np.zeros(np.shape(best), dtype=np.int64)
    for i in range(1, len(columns)):
        larger = columns[i] > best
        out[larger] = i
        best = np.maximum(best, columns[i])
    return out


def quantize(x: np.ndarray) -> np.ndarray:
    """Values rounded to 30 significant bits (about 9 decimal digits), so that ties are ties whatever the summation
    order. (Binary: the mantissa rounded in place, three times faster than rounding to 9 decimal digits.)"""
    mantissa, exponent = np.frexp(x)
    out: np.ndarray = np.ldexp(np.round(mantissa * 1073741824.0), exponent - 30)
    return out


def rank(score: np.ndarray, hbm: np.ndarray, simple: Ints) -> Ints:
    """Positions of the candidates, best first: the objective's ``score`` (quantized), then fewer techniques
    (``simple``), then less device memory (quantized), then their order: ``np.lexsort((quantize(hbm), simple,
    quantize(score)))`` (stable), the first two packed into one key where ``simple`` is in 0-63 (a third less sorting).
    The key: a float's bits as an integer order as it does once a negative one's other bits are flipped (-0.0 made
    0.0, which it equals), and a quantized one has its low 23 bits zero -- the score above the techniques."""
    q = quantize(score)
    if not len(q) or simple.min() < 0 or simple.max() >= 64:
        out: Ints = np.lexsort((quantize(hbm), simple, q))
        return out
    bits = (q + 0.0).view(np.int64)
    bits = np.where(bits < 0, bits ^ 0x7FFFFFFFFFFFFFFF, bits)
    out = np.lexsort((quantize(hbm), ((bits >> 22) << 6) | simple))
    return out


def _weakly_better(a: np.ndarray, b: np.ndarray) -> NDArray[np.bool_]:
    """``[i, j]``: point ``a[:, i] <= b[:, j]`` in every coordinate (points as columns; one 2-D comparison per
    coordinate, which is several times faster than one 3-D comparison reduced over its short last axis)."""
    out: NDArray[np.bool_] = a[0][:, None] <= b[0][None, :]
    for c in range(1, a.shape[0]):
        out &= a[c][:, None] <= b[c][None, :]
    return out


BLOCK = 128
"""The most rows :func:`pareto_indices` keeps or strikes in one pass: its rows are compared with each other, so a
block costs its square (128 measured ~15% faster than 256 on the serving and training searches' points)."""


STRIKE_FIRST = 4096
"""Above this many rows :func:`pareto_indices` strikes out strictly dominated rows first (below it the sort and the
passes cost about what the strike does: the serving searches' 2-3 thousand points measured within +-10% either
way)."""


@functools.cache
def _directions(d: int, steps: int = 3) -> np.ndarray:
    """Positive weights of ``d`` columns, spread over the simplex: every split of ``steps`` units among them, plus a
    quarter each (10 directions for the training frontier's 3 columns)."""
    return np.array([w for w in itertools.product(range(steps + 1), repeat=d) if sum(w) == steps], dtype=float) + 0.25


def pareto_indices(points: np.ndarray, work: int = 50_000, strike_first: int = STRIKE_FIRST) -> list[int]:
    """Indices of the non-dominated rows of ``points`` (minimise every column), in row order; of equal rows
    only the first counts.

    First (above ``strike_first`` rows), the rows that minimise a few positive weightings of the columns scaled to
    [0, 1] (:func:`_directions`: front rows spread along the frontier) strike out every row they dominate strictly:
    no worse in any column and a larger sum of the scaled columns (of the training search's 41 thousand feasible
    points, 7 thousand are left).
    The rest are visited in order of that sum (equal sums in row order). That
    sum never decreases from a row to one it dominates, so rows that dominate many come early. A block of
    rows at a time is kept unless an earlier row of the block dominates (or equals) it, and one vectorized
    pass strikes out every later row the kept ones dominate or equal: a struck row is always dominated by
    a kept one, a non-dominated row is never struck. Rounding can put a dominated row in a tie before its
    dominator, so the kept rows are finally checked against each other. The blocks grow as rows are struck
    out (about ``work`` comparisons a pass, at least 8 rows and at most :data:`BLOCK`: on the training search's 41-56
    thousand feasible points the first passes kept one row each before the floor, 20% slower; the serving searches'
    2-3 thousand take 23-128 rows a pass). A column equal in every row is left out.
    """
    if not len(points):
        return []
    cols = np.ascontiguousarray(points.T)  # one row per objective: reductions and comparisons run contiguous
    lo, hi = cols.min(axis=1), cols.max(axis=1)
    varies = hi > lo
    if not varies.all():  # a column equal in every row decides nothing: compared no more
        if not varies.any():
            return [0]
        cols, lo, hi = cols[varies], lo[varies], hi[varies]
    scaled = (cols - lo[:, None]) / (hi - lo)[:, None]
    total = scaled.sum(axis=0)
    # strike first what a few front rows dominate strictly (the best rows of several weighted sums of the scaled
    # columns): a row some other row is no worse than anywhere and whose sum is larger is no front row, and an equal
    # row (equal sums) is left for the passes, which keep the first of equals
    left = np.arange(len(total))
    if len(total) > strike_first:
        strikers = np.unique(np.argmin(_directions(len(cols)) @ scaled, axis=1))
        left = left[~np.any(_weakly_better(cols[:, strikers], cols) & (total[strikers, None] < total), axis=0)]
    rest = left[np.argsort(total[left], kind="stable")]
    kept: list[np.ndarray] = []
    while len(rest):
        block = max(8, min(BLOCK, work // len(rest)))
        head, rest = rest[:block], rest[block:]
        p = cols[:, head]
        front = head[~np.any(np.triu(_weakly_better(p, p), 1), axis=0)]  # no earlier row of the block <= it
        kept.append(front)
        if len(rest):
            rest = rest[~np.any(_weakly_better(cols[:, front], cols[:, rest]), axis=0)]
    k = np.sort(np.concatenate(kept))
    le = _weakly_better(cols[:, k], cols[:, k])  # [j, i]: row j <= row i
    return [int(i) for i in k[~np.any(le & ~le.T, axis=0)]]  # no row <= it and strictly better somewhere


def frontier(order: Ints, columns: Sequence[np.ndarray]) -> list[int]:
    """The Pareto frontier of the ranked candidates ``order`` over ``columns`` (all minimised).

    Identical points keep their best-ranked candidate; the result is in rank order.
    """
    if not len(order):
        return []
    pts = quantize(np.stack([c[order] for c in columns])).T  # (a view: pareto_indices works on the columns)
    return [int(order[k]) for k in pareto_indices(pts)]  # positions in rank order: equal points keep the best


def or_none(values: np.ndarray) -> list[float | None]:
    """The values as floats, NaN as None (a result's "not known", such as $ without a price)."""
    return [None if math.isnan(x) else x for x in values.tolist()]


def records(columns: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Columns of equal length as one dict per row: the searches build their results column-wise and validate the
    list in one call (faster than one model at a time)."""
    names = list(columns)
    return [dict(zip(names, v, strict=True)) for v in zip(*columns.values(), strict=True)]
