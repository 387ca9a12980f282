"""Exact bytes of one compressed gradient bucket (pure): the messages a rank hands to its collectives.

Per bucket of ``N`` gradient elements of ``g`` bytes on ``n`` ranks
(``cost.effects`` gives the same methods per element, for whole models):

==========  =====================================================  ==============================
method      message (bytes)                                        collectives
==========  =====================================================  ==============================
none        N·g                                                    all-reduce
fp16/bf16   2N                                                     all-reduce
int8        P + 4P/B,  P = N padded to a multiple of n·B           all-to-all then all-gather
            (stochastic rounding, one fp32 scale per B = 2048)      (a quantized all-reduce, ZeRO++
                                                                   qgZ, Wang et al. 2023 §3.3)
topk        k(g + 4),  k = max(1, ceil(density·N)) (int32 index)   all-gather
sign        ceil(N/8) + 4·ceil(N/B) (packed signs, ℓ1 scales)      all-gather
powersgd    per parameter viewed as n x m: r(n + m)·g when          all-reduce (P, then Q;
            r(n + m)·2 < n·m, else n·m·g (PyTorch's rule)          Vogels et al. 2019, Alg. 1)
==========  =====================================================  ==============================

Bytes one rank sends and latency steps are the ledger's (``cost.collectives.bytes_sent`` and ``steps``, what
``trinity diagnose`` prices a data-parallel synchronisation with): an all-reduce of ``S`` bytes sends
``2(n-1)/n·S`` in ``2(n-1)`` steps; the int8 pair sends ``(n-1)/n·S`` twice, the same; an all-gather of an
``m``-byte message from each rank (``n·m`` gathered) sends ``(n-1)·m`` in ``n-1`` steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from aitrinity.cost.collectives import bytes_sent, steps

Method = Literal["none", "fp16", "bf16", "int8", "topk", "sign"]
METHODS: tuple[Method, ...] = ("none", "fp16", "bf16", "int8", "topk", "sign")
SCALE_BLOCK = 2048
"""Elements sharing one fp32 scale (int8 and sign), as ``cost.effects.SCALE_BUCKET``."""


@dataclass(frozen=True)
class BucketMessage:
    method: str
    payload_bytes: int
    """The bytes this rank hands to its collectives for the bucket (one message)."""
    collective: Literal["all-reduce", "all-gather"]

    def sent_bytes(self, world: int) -> float:
        """Bytes this rank sends over the links for the bucket (``cost.collectives.bytes_sent``)."""
        if self.collective == "all-reduce":
            return bytes_sent("all-reduce", self.payload_bytes, world)
        return float((world - 1) * self.payload_bytes)  # bytes_sent of the n·m gathered, without its rounding

    def steps(self, world: int) -> int:
        """Latency terms of the bucket's collective (``cost.collectives.steps``)."""
        return steps(self.collective, world)


def int8_padded(numel: int, world: int) -> int:
    step = world * SCALE_BLOCK
    return math.ceil(numel / step) * step


def topk_count(numel: int, density: float) -> int:
    return max(1, math.ceil(density * numel))


def message(method: str, numel: int, world: int, *, grad_bytes: int = 4, density: float = 0.01) -> BucketMessage:
    if numel < 0 or world < 1:
        raise ValueError("numel >= 0 and world >= 1")
    if method == "none":
        return BucketMessage(method, numel * grad_bytes, "all-reduce")
    if method in ("fp16", "bf16"):
        return BucketMessage(method, 2 * numel, "all-reduce")
    if method == "int8":
        p = int8_padded(numel, world)
        return BucketMessage(method, p + 4 * (p // SCALE_BLOCK), "all-reduce")
    if method == "topk":
        if not 0 < density <= 1:
            raise ValueError("density must be in (0, 1]")
        return BucketMessage(method, topk_count(numel, density) * (grad_bytes + 4), "all-gather")
    if method == "sign":
        return BucketMessage(method, math.ceil(numel / 8) + 4 * math.ceil(numel / SCALE_BLOCK), "all-gather")
    raise ValueError(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")


def powersgd_message(
    shapes: list[tuple[int, ...]], world: int, *, rank: int = 4, grad_bytes: int = 4, min_compression_rate: float = 2.0
) -> BucketMessage:
    """PowerSGD's bytes for a bucket of parameters of these shapes (PyTorch's ``powerSGD_hook`` rule)."""
    elems = 0
    for shape in shapes:
        n = shape[0] if shape else 1
        m = math.prod(shape[1:]) if len(shape) > 1 else 1
        r = min(n, m, rank)
        elems += r * (n + m) if r * (n + m) * min_compression_rate < n * m else n * m
    return BucketMessage("powersgd", elems * grad_bytes, "all-reduce")


def step_time(
    method: str,
    bucket_numels: list[int],
    world: int,
    *,
    bandwidth_Bps: float,
    latency_s: float,
    compute_s: float,
    codec_s_per_element: float = 0.0,
    grad_bytes: int = 4,
    density: float = 0.01,
) -> float:
    """Predicted step time with ``method``: compute, then each bucket's encode, transfer and decode in turn.

    Transfer of a bucket: α-β with one latency per collective step (ring all-reduce
    ``2(n-1)``, all-gather ``n-1``; the int8 pair ``2(n-1)``). Nothing overlaps:
    the hooks in ``systems.ddp`` run their collectives synchronously.
    """
    total = compute_s
    for numel in bucket_numels:
        msg = message(method, numel, world, grad_bytes=grad_bytes, density=density)
        total += msg.steps(world) * latency_s + msg.sent_bytes(world) / bandwidth_Bps + codec_s_per_element * numel
    return total
