"""Kernel times: what one GPU operator takes, from a measured table or from the roofline.

Two sources answer the same questions (:class:`Kernels`), on arrays, so that one configuration and a
sweep of candidates go through the same code:

* :class:`TableKernels` -- measured per-operator latencies (NVIDIA's aiconfigurator-core tables,
  read by :mod:`aitrinity.catalog.kernel_tables`), interpolated over each table's shape axes;
* :class:`RooflineKernels` -- the roofline with a per-operator efficiency curve and a launch latency
  per kernel, the compact parameters a device's catalog entry carries (``kernels:``, derived from those
  same tables by ``tools/derive_kernel_params.py``).

Interpolation (:class:`Grid`): multilinear in ``log2`` of every axis on latency, clamped to the grid's
range on every axis except the first (tokens / batch), beyond which latency grows in proportion to the
first axis (a GEMM of 2m rows takes twice as long as one of m once m is past the table's largest). This
is the scheme aiconfigurator itself documents for its tables (interpolate inside, extrapolate by shape
outside); the choice of log axes follows their powers-of-two grids.

Roofline of one kernel (Williams et al. 2009, "Roofline", CACM 52(4)): ``t = launch + max(F / (P·e(m)),
B / (W·u))`` with ``e(m) = e_max·m / (m + m_half)`` the saturating GEMM efficiency in the rows ``m``
(the same curve as :class:`~aitrinity.spec.hardware.Efficiency`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from aitrinity.spec.hardware import (
    BYTES_PER_DTYPE,
    AttentionParams,
    CollectiveParams,
    DeviceSpec,
    GemmParams,
    KernelParams,
)

Array = NDArray[np.float64]
Size = float | NDArray[np.float64] | NDArray[np.int64]
"""A GEMM dimension or a head count: one number, or one per element (the shapes of many layouts)."""
_PAIR = 1 << 20
"""(TP, EP) pairs packed as ``tp * _PAIR + ep`` for :func:`per_value`."""


def _as(x: ArrayLike) -> Array:
    out: Array = np.asarray(x, dtype=np.float64)
    return out


def per_value(keys: ArrayLike, time: Callable[[int], Array]) -> Array:
    """``time(key)`` element by element, for an argument that picks a table or a parameter set (a GPU count, a
    KV-head count): once per distinct value of ``keys``, each element taking its own value's answer. A key given
    as one number is one call."""
    k = np.asarray(keys)
    if k.ndim == 0:
        return time(int(k))
    out: Array | None = None
    for v in np.unique(k).tolist():
        t = time(int(v))
        out = t if out is None else np.where(k == v, t, out)
    assert out is not None, "no element has a key"
    return np.broadcast_to(out, np.broadcast_shapes(np.shape(out), k.shape)).astype(np.float64)


@dataclass(frozen=True)
class Grid:
    """A measured table on a regular grid: ``values[i, j, ...]`` seconds at ``axes[0][i], axes[1][j], ...``.

    Axes are strictly increasing and positive; values are finite and positive (missing cells are filled
    by the reader before a Grid is built).

    Below an axis's smallest point the value is the edge's (a latency floor). Beyond its largest, the edge's
    value grows as ``(x / largest) ** growth`` of that axis: the work grows with the shape while the rate stays
    the largest measured one (a GEMM's m, n and k: 1 each; causal attention's sequence length: 2). ``growth``
    defaults to 1 for the first axis and 0 (the edge value) for the others.
    """

    axes: tuple[Array, ...]
    values: Array
    growth: tuple[float, ...] = ()
    _logs: tuple[Array, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.values.shape != tuple(len(a) for a in self.axes):
            raise ValueError(f"grid shape {self.values.shape} does not match its axes")
        if self.growth and len(self.growth) != len(self.axes):
            raise ValueError(f"{len(self.growth)} growth exponents for {len(self.axes)} axes")
        if not self.growth:
            object.__setattr__(self, "growth", (1.0,) + (0.0,) * (len(self.axes) - 1))
        object.__setattr__(self, "_logs", tuple(np.log2(a) for a in self.axes))

    def __call__(self, *coords: ArrayLike) -> Array:
        """Latency at ``coords`` (broadcast against each other), seconds."""
        pts = np.broadcast_arrays(*(_as(c) for c in coords))
        first = pts[0]
        scale = np.ones(first.shape)
        for ax, p, g in zip(self.axes, pts, self.growth, strict=True):
            if g:  # beyond the largest point: the edge's rate over the larger work
                scale = scale * np.maximum(p / ax[-1], 1.0) ** g
        idx, wts = [], []
        for ax, lg, p in zip(self.axes, self._logs, pts, strict=True):
            x = np.log2(np.clip(p, ax[0], ax[-1]))
            if len(ax) == 1:
                idx.append(np.zeros(x.shape, dtype=np.intp))
                wts.append(np.zeros(x.shape))
                continue
            i = np.clip(np.searchsorted(lg, x, side="right") - 1, 0, len(ax) - 2)
            idx.append(i)
            wts.append((x - lg[i]) / (lg[i + 1] - lg[i]))
        out = np.zeros(first.shape)
        for corner in range(1 << len(self.axes)):
            w = np.ones(first.shape)
            at = []
            for d, (i, t) in enumerate(zip(idx, wts, strict=True)):
                hi = (corner >> d) & 1
                if len(self.axes[d]) == 1 and hi:
                    w = w * 0.0
                at.append(np.minimum(i + hi, len(self.axes[d]) - 1))
                w = w * (t if hi else 1.0 - t)
            out += w * self.values[tuple(at)]
        result: Array = out * scale
        return result


class Kernels(Protocol):
    """Latency of the kernels a transformer step runs on one GPU; every argument broadcasts."""

    @property
    def source(self) -> str:
        """Where the numbers come from: ``table <gpu>/<engine>/<version>`` or ``roofline (catalog <device>)``."""
        ...

    def gemm(self, m: ArrayLike, n: Size, k: Size, dtype: str) -> Array:
        """``(m x k) @ (k x n)`` in ``dtype`` (weights and activations; bf16 / fp8 / fp4)."""
        ...

    def grouped_gemm(self, groups: ArrayLike, m: ArrayLike, n: Size, k: Size, dtype: str) -> Array:
        """One kernel over ``groups`` independent ``(m x k) @ (k x n)`` GEMMs (a fused MoE's experts): each
        group's work, one launch."""
        ...

    def prefill_attention(
        self,
        batch: ArrayLike,
        tokens: ArrayLike,
        heads: Size,
        kv_heads: Size,
        head_dim: int,
        kv_dtype: str,
        mla: tuple[int, int] | None = None,
        compute_dtype: str = "bf16",
    ) -> Array:
        """Causal attention of ``batch`` sequences of ``tokens`` new tokens each (flash attention). ``mla``: the
        (QK, V) widths of each head when the model's attention is MLA (``head_dim`` is then its latent, what the
        measured MLA kernels are keyed by): a prefill up-projects the latent and runs multi-head attention of those
        widths (DeepSeek-V2 §2.1.2; the absorbed form is the decode's). ``compute_dtype``: the plan's, what a
        quantized KV cache is dequantized to (:func:`attention_dtype`)."""
        ...

    def decode_attention(
        self,
        batch: ArrayLike,
        context: ArrayLike,
        heads: Size,
        kv_heads: Size,
        head_dim: int,
        kv_dtype: str,
        mla: tuple[int, int] | None = None,
    ) -> Array:
        """One query token per sequence over ``context`` cached tokens, ``batch`` sequences. ``mla`` (as for
        :meth:`prefill_attention`): the cache holds one latent of ``head_dim`` per token that serves as both keys and
        values (the absorbed decode of DeepSeek-V2 §2.1.2), so a step reads it once."""
        ...

    def all_reduce(self, payload_bytes: ArrayLike, gpus: ArrayLike) -> Array:
        """An all-reduce of ``payload_bytes`` over ``gpus`` GPUs of one node (0 for one GPU)."""
        ...

    def all_to_all(self, payload_bytes: ArrayLike, gpus: ArrayLike) -> Array:
        """An all-to-all in which each of ``gpus`` GPUs holds ``payload_bytes`` and keeps its own ``1/gpus``
        share (MoE token dispatch or combine; 0 for one GPU)."""
        ...

    def elementwise(self, nbytes: ArrayLike) -> Array:
        """A memory-bound kernel moving ``nbytes`` (norms, activations, residual adds, embedding gathers)."""
        ...

    def moe(self, tokens: ArrayLike, shape: MoEShape, dtype: str) -> Array:
        """A fused MoE layer's routed experts (routing and grouped GEMMs) for ``tokens`` tokens, measured;
        NaN where no table has the shape (the operator model then times the experts' GEMMs itself)."""
        ...


@dataclass(frozen=True)
class MoEShape:
    """A MoE layer as the tables key it: hidden size, expert intermediate size, top-k, experts, and the MoE
    TP and EP sizes it runs at."""

    hidden: int
    inter: int
    topk: int
    experts: int
    tp: int | NDArray[np.int64]
    """One size, or one per element (the shapes of many layouts: :func:`per_value` looks each one up)."""
    ep: int | NDArray[np.int64]
    routing: str = "balanced"
    """The tokens' distribution over the experts (:data:`aitrinity.cost.operators.ROUTING_SKEW`)."""


def _pair_shape(shape: MoEShape, pair: int) -> MoEShape:
    return dataclasses.replace(shape, tp=pair // _PAIR, ep=pair % _PAIR)


@dataclass(frozen=True)
class RooflineKernels:
    """The roofline with the device's compact kernel parameters (no tables needed)."""

    peak_flops: dict[str, float]
    memory_bandwidth_Bps: float
    params: KernelParams
    source: str

    def _peak(self, dtype: str) -> float:
        for d in (dtype, "fp8" if dtype == "fp4" else "bf16", "bf16", "fp16"):
            if d in self.peak_flops:
                return self.peak_flops[d]
        return max(self.peak_flops.values())

    def gemm(self, m: ArrayLike, n: Size, k: Size, dtype: str) -> Array:
        p = self.params.gemm_for(dtype)
        return self._gemm(m, n, k, p.efficiency, p.half_rows, p.launch_s, BYTES_PER_DTYPE[dtype], self._peak(dtype))

    def _gemm_terms(self, dtypes: Sequence[str], index: NDArray[np.intp]) -> tuple[Array, Array, Array, Array, Array]:
        """(efficiency, half rows, launch, weight bytes, peak FLOP/s) of ``dtypes[index]``, element by element."""
        ps = [self.params.gemm_for(d) for d in dtypes]
        terms = [
            [p.efficiency for p in ps],
            [p.half_rows for p in ps],
            [p.launch_s for p in ps],
            [BYTES_PER_DTYPE[d] for d in dtypes],
            [self._peak(d) for d in dtypes],
        ]
        e, h, launch, wb, peak = (np.asarray(t, dtype=np.float64)[index] for t in terms)
        return e, h, launch, wb, peak

    def _gemm(
        self,
        m: ArrayLike,
        n: Size,
        k: Size,
        e: float | Array,
        h: float | Array,
        launch: float | Array,
        wb: float | Array,
        peak: float | Array,
    ) -> Array:
        """The roofline of a GEMM from its dtype's terms (numbers, or one per element)."""
        rows = _as(m)
        eff = e * rows / (rows + h)
        flops = 2.0 * rows * n * k
        nbytes = n * k * wb + rows * (k + n) * 2.0  # weights in their dtype, activations in bf16
        mem = nbytes / (self.memory_bandwidth_Bps * self.params.memory_efficiency)
        out: Array = launch + np.maximum(flops / (peak * eff), mem)
        return out

    def gemm_each(self, m: ArrayLike, n: Size, k: Size, dt: Dtypes) -> Array:
        """:meth:`gemm` with a dtype per element, in one pass (the same arithmetic, element by element)."""
        return self._gemm(m, n, k, *self._gemm_terms(dt.names, dt.index))

    def grouped_gemm(self, groups: ArrayLike, m: ArrayLike, n: Size, k: Size, dtype: str) -> Array:
        launch = self.params.gemm_for(dtype).launch_s
        return launch + _as(groups) * (self.gemm(m, n, k, dtype) - launch)

    def grouped_gemm_each(self, groups: ArrayLike, m: ArrayLike, n: Size, k: Size, dt: Dtypes) -> Array:
        """:meth:`grouped_gemm` with a dtype per element, in one pass."""
        terms = self._gemm_terms(dt.names, dt.index)
        out: Array = terms[2] + _as(groups) * (self._gemm(m, n, k, *terms) - terms[2])
        return out

    def prefill_attention(
        self,
        batch: ArrayLike,
        tokens: ArrayLike,
        heads: Size,
        kv_heads: Size,
        head_dim: int,
        kv_dtype: str,
        mla: tuple[int, int] | None = None,
        compute_dtype: str = "bf16",
    ) -> Array:
        b, s = _as(batch), _as(tokens)
        width = 2.0 * head_dim if mla is None else float(sum(mla))  # QK^T's and AV's inner dimensions
        flops = b * s * s * heads * width  # QK^T and AV over the causal half: 2·s²/2·a·(d_qk + d_v)
        p = self.params.attention
        return p.launch_s + flops / (self._peak(attention_dtype(kv_dtype, compute_dtype)) * p.prefill_efficiency)

    def decode_attention(
        self,
        batch: ArrayLike,
        context: ArrayLike,
        heads: Size,
        kv_heads: Size,
        head_dim: int,
        kv_dtype: str,
        mla: tuple[int, int] | None = None,
    ) -> Array:
        return self._decode_attention(batch, context, kv_heads, head_dim, BYTES_PER_DTYPE[kv_dtype], mla)

    def _decode_attention(
        self,
        batch: ArrayLike,
        context: ArrayLike,
        kv_heads: Size,
        head_dim: int,
        kv_bytes: Size,
        mla: tuple[int, int] | None = None,
    ) -> Array:
        b, c = _as(batch), _as(context)
        kv = (1.0 if mla else 2.0) * b * c * kv_heads * head_dim * kv_bytes  # MLA's latent is both K and V
        p = self.params.attention
        out: Array = p.launch_s + kv / (self.memory_bandwidth_Bps * p.decode_memory_efficiency)
        return out

    def decode_attention_each(
        self,
        batch: ArrayLike,
        context: ArrayLike,
        kv_heads: Size,
        head_dim: int,
        dt: Dtypes,
        mla: tuple[int, int] | None = None,
    ) -> Array:
        """:meth:`decode_attention` with a KV dtype per element, in one pass."""
        kv_bytes = np.array([BYTES_PER_DTYPE[d] for d in dt.names])[dt.index]
        return self._decode_attention(batch, context, kv_heads, head_dim, kv_bytes, mla)

    def all_reduce(self, payload_bytes: ArrayLike, gpus: ArrayLike) -> Array:
        return self._collective(_as(payload_bytes), gpus, 2.0)

    def _collective(self, size: Array, gpus: ArrayLike, factor: float) -> Array:
        """``latency + factor·(n-1)/n · size / bus bandwidth`` at the all-reduce parameters of ``n`` GPUs (0 for one
        GPU); ``gpus`` one count or one per element (each element its own count's parameters, in one pass)."""
        g = np.asarray(gpus)
        if g.ndim == 0:
            n = int(g)
            if n <= 1:
                return np.zeros(size.shape)
            c = self.params.all_reduce_for(n)
            out: Array = c.latency_s + factor * (n - 1) / n * size / c.bus_bandwidth_Bps
            return out
        counts, at = np.unique(g, return_inverse=True)
        params = [self.params.all_reduce_for(int(n)) if n > 1 else None for n in counts.tolist()]
        lat = np.array([p.latency_s if p else 0.0 for p in params])[at]
        bw = np.array([p.bus_bandwidth_Bps if p else 1.0 for p in params])[at]
        nf = g.astype(np.float64)
        out = np.where(g > 1, lat + factor * (nf - 1.0) / nf * size / bw, 0.0)
        return np.broadcast_to(out, np.broadcast_shapes(out.shape, size.shape)).astype(np.float64)

    def all_to_all(self, payload_bytes: ArrayLike, gpus: ArrayLike) -> Array:
        """``(n-1)/n`` of the payload leaves each GPU once, at the all-reduce's bus bandwidth and latency (an
        all-reduce moves ``2(n-1)/n``: NCCL's bus-bandwidth convention, Jeaugey 2019, nccl-tests
        PERFORMANCE.md)."""
        return self._collective(_as(payload_bytes), gpus, 1.0)

    def elementwise(self, nbytes: ArrayLike) -> Array:
        return self.params.elementwise_launch_s + _as(nbytes) / (
            self.memory_bandwidth_Bps * self.params.memory_efficiency
        )

    def moe(self, tokens: ArrayLike, shape: MoEShape, dtype: str) -> Array:
        return np.full(np.shape(tokens), np.nan)


@dataclass(frozen=True)
class AttentionTables:
    """Measured attention for one (head_dim, KV dtype): grids over (batch, tokens or context, query heads),
    one per KV-head count measured."""

    prefill: dict[int, Grid]
    decode: dict[int, Grid]

    @staticmethod
    def nearest(grids: dict[int, Grid], kv_heads: int) -> tuple[int, Grid]:
        key = min(grids, key=lambda h: (abs(np.log2(h) - np.log2(kv_heads)), h))
        return key, grids[key]


@dataclass(frozen=True)
class TableKernels:
    """Measured kernel tables of one GPU and engine version, with the roofline for what they lack.

    GEMM grids are over (m, n, k) per dtype; all-reduce grids over payload bytes per GPU count; attention
    per (head_dim, KV dtype). A query outside every table (a dtype or head size never measured) falls back
    to ``fallback``, and :attr:`fallbacks` records which, so the output can say so.
    """

    gemm_grids: dict[str, Grid]
    attention: dict[tuple[int, str], AttentionTables]
    all_reduce_grids: dict[int, Grid]
    fallback: RooflineKernels
    source: str
    fallbacks: set[str] = field(default_factory=set, compare=False)
    all_to_all_grids: dict[int, Grid] = field(default_factory=dict)
    """NCCL's measured all-to-all by GPU count; axis: each GPU's send buffer, bytes."""
    moe_grids: dict[tuple[str, int, int, int, int, int, int, str], Grid] = field(default_factory=dict)
    """The engine's fused MoE by (dtype, hidden, intermediate, top-k, experts, TP, EP, routing); axis: tokens."""
    fp8_block: bool = False
    """fp8 weights are block-scaled (128 x 128 scales: DeepSeek-V3's checkpoints; aiconfigurator's ``fp8_block``):
    an fp8 GEMM or MoE takes the block-scaled kernels' tables first. False: per-tensor scales first (the tables'
    ``fp8``), block-scaled where per-tensor was not measured."""
    set_aside: dict[str, str] = field(default_factory=dict)
    """GEMM tables not read, by dtype, and why (:func:`aitrinity.silicon.implausible_gemm`); a query for one takes the
    next table in order (block-scaled fp8: the per-tensor one) and :attr:`substituted` records it."""
    substituted: set[str] = field(default_factory=set, compare=False)

    def moe(self, tokens: ArrayLike, shape: MoEShape, dtype: str) -> Array:
        if np.ndim(shape.tp) or np.ndim(shape.ep):  # many layouts: each (TP, EP) pair is its own table
            pair = np.asarray(shape.tp) * _PAIR + np.asarray(shape.ep)
            return per_value(pair, lambda p: self.moe(tokens, _pair_shape(shape, p), dtype))
        dims = (shape.hidden, shape.inter, shape.topk, shape.experts, int(shape.tp), int(shape.ep))
        for d in self._fp8_order(dtype):
            grid = self.moe_grids.get((d, *dims, shape.routing))
            if grid is not None:
                return grid(tokens)
        if self.moe_grids:
            self.fallbacks.add(f"moe {dtype} {'x'.join(map(str, dims))} {shape.routing}")
        return np.full(np.shape(tokens), np.nan)

    def _fp8_order(self, dtype: str) -> tuple[str, ...]:
        """The tables' dtypes an fp8 query reads, in order (:attr:`fp8_block`)."""
        if dtype != "fp8":
            return (dtype,)
        return ("fp8_block", "fp8") if self.fp8_block else ("fp8", "fp8_block")

    def gemm(self, m: ArrayLike, n: Size, k: Size, dtype: str) -> Array:
        grid = self.gemm_grids.get(dtype)
        if dtype == "fp8" and self.fp8_block:
            grid = self.gemm_grids.get("fp8_block", grid)
            if "fp8_block" in self.set_aside:
                self.substituted.add("fp8_block")
        if grid is None and dtype == "fp4" and "fp8" in self.gemm_grids:
            # no fp4 tensor cores before Blackwell: engines run fp4 weights through the fp8 path
            grid = self.gemm_grids["fp8"]
        if grid is None:
            self.fallbacks.add(f"gemm {dtype}")
            return self.fallback.gemm(m, n, k, dtype)
        return grid(m, n, k)

    def grouped_gemm(self, groups: ArrayLike, m: ArrayLike, n: Size, k: Size, dtype: str) -> Array:
        """Each group as the table's GEMM less one launch (the derived parameters' ``launch_s``: the table's
        smallest latency), plus one launch."""
        launch = self.fallback.params.gemm_for(dtype).launch_s
        out: np.ndarray = launch + _as(groups) * np.maximum(self.gemm(m, n, k, dtype) - launch, 0.0)
        return out

    def _attention(self, head_dim: int, kv_dtype: str) -> AttentionTables | None:
        at = self.attention.get((head_dim, kv_dtype)) or self.attention.get((head_dim, "bf16"))
        if at is None:
            self.fallbacks.add(f"attention head_dim {head_dim} kv {kv_dtype}")
        return at

    def prefill_attention(
        self,
        batch: ArrayLike,
        tokens: ArrayLike,
        heads: Size,
        kv_heads: Size,
        head_dim: int,
        kv_dtype: str,
        mla: tuple[int, int] | None = None,
        compute_dtype: str = "bf16",
    ) -> Array:
        at = self._attention(head_dim, kv_dtype)
        if at is None:
            return self.fallback.prefill_attention(
                batch, tokens, heads, kv_heads, head_dim, kv_dtype, mla, compute_dtype
            )
        tables = at

        def time(g: int) -> Array:
            measured_kv, grid = AttentionTables.nearest(tables.prefill, g)
            q = _as(heads) * measured_kv / g  # keep the GQA ratio; time scales with query heads
            out: Array = grid(batch, tokens, q) * (_as(heads) / q)
            return out

        return per_value(kv_heads, time)

    def decode_attention(
        self,
        batch: ArrayLike,
        context: ArrayLike,
        heads: Size,
        kv_heads: Size,
        head_dim: int,
        kv_dtype: str,
        mla: tuple[int, int] | None = None,
    ) -> Array:
        at = self._attention(head_dim, kv_dtype)
        if at is None:
            return self.fallback.decode_attention(batch, context, heads, kv_heads, head_dim, kv_dtype, mla)
        tables = at

        def time(g: int) -> Array:
            measured_kv, grid = AttentionTables.nearest(tables.decode, g)
            q = _as(heads) * measured_kv / g
            out: Array = grid(batch, context, q) * (g / measured_kv)  # decode reads KV: scales with KV heads
            return out

        return per_value(kv_heads, time)

    def all_reduce(self, payload_bytes: ArrayLike, gpus: ArrayLike) -> Array:
        return self._collective(_as(payload_bytes), gpus, self.all_reduce_grids, "all-reduce", self.fallback.all_reduce)

    def all_to_all(self, payload_bytes: ArrayLike, gpus: ArrayLike) -> Array:
        return self._collective(_as(payload_bytes), gpus, self.all_to_all_grids, "all-to-all", self.fallback.all_to_all)

    def _collective(
        self,
        size: Array,
        gpus: ArrayLike,
        grids: dict[int, Grid],
        what: str,
        fallback: Callable[[ArrayLike, ArrayLike], Array],
    ) -> Array:
        """A collective over ``gpus`` from its measured table per GPU count (0 for one GPU; the roofline, noted,
        for a count no table has)."""

        def time(n: int) -> Array:
            if n <= 1:
                return np.zeros(size.shape)
            grid = grids.get(n)
            if grid is None:
                self.fallbacks.add(f"{what} over {n} GPUs")
                return fallback(size, n)
            return grid(size)

        return per_value(gpus, time)

    def elementwise(self, nbytes: ArrayLike) -> Array:
        return self.fallback.elementwise(nbytes)


WEIGHTS = "weights per row"
"""A :class:`Layout <aitrinity.cost.operators.Layout>` dtype that :class:`MixedKernels` resolves row by row."""
KV = "kv per row"


@dataclass(frozen=True)
class Dtypes:
    """One dtype per element: ``names[index]`` (``index`` broadcasts against the kernel's arguments)."""

    names: tuple[str, ...]
    index: NDArray[np.intp]


def kernel_notes(k: Kernels | None) -> list[str]:
    """What the kernel times could not take from the tables: the queries the roofline answered, and the tables set
    aside for another (one line each, for stderr and ``--json``)."""
    fallbacks: set[str] = getattr(k, "fallbacks", set())
    notes = [f"no kernel table for {f}: roofline used" for f in sorted(fallbacks)]
    set_aside: dict[str, str] = getattr(k, "set_aside", {})
    substituted: set[str] = getattr(k, "substituted", set())
    notes += [f"{d} GEMM table set aside ({set_aside[d]}): the per-tensor fp8 table used" for d in sorted(substituted)]
    return notes


def value_bytes(k: Kernels, dtype: str) -> float | Array:
    """Bytes of one value in ``dtype`` -- per element for the :data:`WEIGHTS` / :data:`KV` dtypes of a
    :class:`MixedKernels`."""
    if isinstance(k, MixedKernels) and dtype in (WEIGHTS, KV):
        dt = k.weights if dtype == WEIGHTS else k.kv
        out: Array = np.array([BYTES_PER_DTYPE[n] for n in dt.names])[dt.index]
        return out
    return BYTES_PER_DTYPE[dtype]


def unquantized(dtype: str) -> str:
    """The dtype a matmul on activations runs in when its operands are in ``dtype``: ``dtype`` itself where it is a
    float of 16 bits or more (an fp32 model's LM head runs in fp32), else bf16 (an fp8 or fp4 model keeps its LM
    head and router in bf16)."""
    return dtype if dtype in ("fp32", "tf32", "fp16", "bf16") else "bf16"


def attention_dtype(kv_dtype: str, compute_dtype: str = "bf16") -> str:
    """The dtype attention's matmuls run in: the K and V's own where they are a float of 16 bits or more, else what
    a quantized cache is dequantized to -- the plan's compute dtype, unquantized (an fp32 model's fp8 cache is read
    into fp32; a bf16 or fp8 model's into bf16)."""
    return kv_dtype if unquantized(kv_dtype) == kv_dtype else unquantized(compute_dtype)


@dataclass(frozen=True)
class MixedKernels:
    """Kernels whose weight and KV dtypes differ from element to element: a query in :data:`WEIGHTS` or
    :data:`KV` is answered by ``base`` once per dtype present and each element takes its own dtype's value
    (the same arithmetic as one call per dtype group; the planner prices every dtype pair in one call)."""

    base: Kernels
    weights: Dtypes
    kv: Dtypes

    @property
    def source(self) -> str:
        return self.base.source

    @staticmethod
    def _mix(dt: Dtypes, time: Callable[[str], Array]) -> Array:
        out: Array | None = None
        for j, name in enumerate(dt.names):
            sel = dt.index == j
            if not sel.any():
                continue
            t = time(name)
            out = t if out is None else np.where(sel, t, out)
        assert out is not None, "no element has a dtype"
        return out

    def gemm(self, m: ArrayLike, n: Size, k: Size, dtype: str) -> Array:
        if dtype != WEIGHTS:
            return self.base.gemm(m, n, k, dtype)
        if isinstance(self.base, RooflineKernels):  # its dtypes are parameters: one pass
            return self.base.gemm_each(m, n, k, self.weights)
        return self._mix(self.weights, lambda d: self.base.gemm(m, n, k, d))

    def grouped_gemm(self, groups: ArrayLike, m: ArrayLike, n: Size, k: Size, dtype: str) -> Array:
        if dtype != WEIGHTS:
            return self.base.grouped_gemm(groups, m, n, k, dtype)
        if isinstance(self.base, RooflineKernels):
            return self.base.grouped_gemm_each(groups, m, n, k, self.weights)
        return self._mix(self.weights, lambda d: self.base.grouped_gemm(groups, m, n, k, d))

    def prefill_attention(
        self,
        batch: ArrayLike,
        tokens: ArrayLike,
        heads: Size,
        kv_heads: Size,
        head_dim: int,
        kv_dtype: str,
        mla: tuple[int, int] | None = None,
        compute_dtype: str = "bf16",
    ) -> Array:
        def t(d: str) -> Array:
            return self.base.prefill_attention(batch, tokens, heads, kv_heads, head_dim, d, mla, compute_dtype)

        if kv_dtype != KV:
            return t(kv_dtype)
        return self._mix(self.kv, t)

    def decode_attention(
        self,
        batch: ArrayLike,
        context: ArrayLike,
        heads: Size,
        kv_heads: Size,
        head_dim: int,
        kv_dtype: str,
        mla: tuple[int, int] | None = None,
    ) -> Array:
        def t(d: str) -> Array:
            return self.base.decode_attention(batch, context, heads, kv_heads, head_dim, d, mla)

        if kv_dtype != KV:
            return t(kv_dtype)
        if isinstance(self.base, RooflineKernels):
            return self.base.decode_attention_each(batch, context, kv_heads, head_dim, self.kv, mla)
        return self._mix(self.kv, t)

    def all_reduce(self, payload_bytes: ArrayLike, gpus: ArrayLike) -> Array:
        return self.base.all_reduce(payload_bytes, gpus)

    def all_to_all(self, payload_bytes: ArrayLike, gpus: ArrayLike) -> Array:
        return self.base.all_to_all(payload_bytes, gpus)

    def elementwise(self, nbytes: ArrayLike) -> Array:
        return self.base.elementwise(nbytes)

    def moe(self, tokens: ArrayLike, shape: MoEShape, dtype: str) -> Array:
        if dtype != WEIGHTS:
            return self.base.moe(tokens, shape, dtype)
        return self._mix(self.weights, lambda d: self.base.moe(tokens, shape, d))


def generic_params(dev: DeviceSpec) -> KernelParams:
    """Compact parameters for a device whose catalog entry has none: its efficiency figures, a launch of
    its measured per-operator overhead (``efficiency.op_overhead_s``, which ``trinity calibrate`` measures)
    or else 5 µs, and its memory efficiency; an all-reduce at NVLink-class latency (an assumption, said in
    ``source``)."""
    eff = dev.efficiency
    launch = eff.op_overhead_s or 5e-6
    said = f"{launch * 1e6:.3g} µs launches (measured)" if eff.op_overhead_s else "5 µs launches"
    gemm = GemmParams(efficiency=eff.compute, half_rows=eff.compute_half_rows, launch_s=launch)
    return KernelParams(
        source=f"generic: {dev.name}'s efficiency figures, {said} (no kernel tables derived)",
        gemm={"bf16": gemm},
        attention=AttentionParams(
            prefill_efficiency=eff.compute * 0.6, decode_memory_efficiency=eff.memory, launch_s=launch
        ),
        all_reduce={n: CollectiveParams(latency_s=10e-6 * n / 2, bus_bandwidth_Bps=150e9) for n in (2, 4, 8)},
        memory_efficiency=eff.memory,
    )


def roofline(dev: DeviceSpec) -> RooflineKernels:
    params = dev.kernels or generic_params(dev)
    return RooflineKernels(
        {str(k): v for k, v in dev.peak_flops.items()},
        dev.memory_bandwidth_Bps,
        params,
        f"roofline (catalog {dev.name})",
    )
