"""What each exchange in ``plan.exchanges`` does to the numbers of a ledger (pure).

The ledger builders read these effects; :mod:`aitrinity.plan.exchanges` adds
each exchange's pathway and break-even rule on top.

Gradient compression (per gradient element ``x`` of ``g`` bytes, ``n`` DP ranks):

==========  ===========================  ===============  ==========================================
method      bytes sent                   collective       source
==========  ===========================  ===============  ==========================================
fp16/bf16   2                            all-reduce       cast (PyTorch DDP ``fp16_compress_hook``)
int8        1 (+ fp32 scale per bucket)  all-reduce       quantized reduce-scatter/all-gather
                                                          (ZeRO++ qgZ, Wang et al. 2023, §3.3)
top-k       density · (g + 4) (idx)      all-gather       Lin et al. 2018 (DGC); error feedback,
                                                          Stich et al. 2018
sign        1/8 (+ one scale)            all-gather       Karimireddy et al. 2019 (EF-signSGD)
PowerSGD    r(rows + cols) per matrix    all-reduce       Vogels et al. 2019, Alg. 1
==========  ===========================  ===============  ==========================================

Sparse and sign messages cannot be summed on the way, so they are gathered:
each rank sends ``(n-1)`` times its compressed gradient, which is why their
advantage shrinks as ``n`` grows. The encode/decode work is element-wise and
memory-bound: it is charged as device-memory bytes per gradient element
(``hbm_bytes_per_element``); PowerSGD's two products per matrix are matmul FLOPs
``4·rows·cols·r``. Error feedback keeps a residual per parameter in the
gradient dtype (as PyTorch's ``powerSGD_hook`` keeps its ``error_dict``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aitrinity.cost.params import weight_matrices
from aitrinity.spec.exchanges import ExchangeSpec, GradientCompression
from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan

SCALE_BUCKET = 2048
"""Elements sharing one fp32 scale in int8 quantization (a DDP bucket chunk)."""


@dataclass(frozen=True)
class GradSync:
    """How data-parallel gradients are synchronised under the plan's exchanges."""

    bytes_per_element: float
    """Bytes one rank contributes per gradient element (before the collective's (n-1)/n factor)."""
    collective: str
    """'all-reduce' (summable messages) or 'all-gather' (each rank's message gathered)."""
    period: int
    """Synchronise every ``period`` steps (local SGD); 1 = every step."""
    hbm_bytes_per_element: float
    """Encode/decode device-memory traffic per gradient element per synchronisation."""
    error_feedback_bytes_per_param: float
    flops_per_param: float
    """Matmul FLOPs of the compressor per parameter per synchronisation (PowerSGD)."""
    method: str


def find(plan: Plan, kind: str) -> ExchangeSpec | None:
    for x in plan.exchanges:
        if x.kind == kind:
            return x
    return None


SyncEffect = Callable[[Any, GradSync], GradSync]
"""What one ``plan.exchanges`` entry does to the data-parallel gradient synchronisation: (entry, sync so far)
-> the sync after it."""

EXTRA_SYNC_EFFECTS: dict[str, SyncEffect] = {}
"""The sync effects of training exchanges registered besides the built-in ones, by kind
(:func:`aitrinity.plan.registry.register` fills it). The one-plan ledger and the planner's vectorized rows both
read the synchronisation through :func:`grad_sync`, so an effect given here is written once for both."""


def grad_sync(m: ModelSpec, plan: Plan) -> GradSync:
    """How the plan's gradients are synchronised: the built-in compressors and local SGD, then registered
    techniques in the plan's order."""
    sync = _builtin_grad_sync(m, plan)
    for x in plan.exchanges:
        extra = EXTRA_SYNC_EFFECTS.get(x.kind)
        if extra is not None:
            sync = extra(x, sync)
    return sync


def _builtin_grad_sync(m: ModelSpec, plan: Plan) -> GradSync:
    g = BYTES_PER_DTYPE[plan.grads_dtype]
    local = find(plan, "local-sgd")
    period = getattr(local, "period", 1)
    x = find(plan, "gradient-compression")
    if not isinstance(x, GradientCompression):
        return GradSync(g, "all-reduce", period, 0.0, 0.0, 0.0, "none")
    if x.method in ("fp16", "bf16"):
        return GradSync(2.0, "all-reduce", period, g + 2.0 + 2.0 * 2.0, 0.0, 0.0, x.method)
    if x.method == "int8":
        # quantize (read g, write 1) + dequantize-accumulate at each of the two phases
        return GradSync(1.0 + 4.0 / SCALE_BUCKET, "all-reduce", period, g + 1.0 + 2.0 * (1.0 + g), 0.0, 0.0, "int8")
    if x.method == "topk":
        # error feedback add (read grad, read + write residual), selection pass, residual update
        return GradSync(x.density * (g + 4.0), "all-gather", period, 4 * g + g, g, 0.0, "topk")
    if x.method == "sign":
        return GradSync(1.0 / 8.0 + 4.0 / SCALE_BUCKET, "all-gather", period, 4 * g + g, g, 0.0, "sign")
    # PowerSGD rank r: all-reduce P and Q, per matrix r(rows + cols) values of g bytes
    mats = weight_matrices(m)
    elems = sum(r * c * k for r, c, k in mats)
    factors = sum(min(x.rank * (r + c), r * c) * k for r, c, k in mats)
    flops = sum(4.0 * r * c * min(x.rank, r, c) * k for r, c, k in mats)
    # error feedback (read grad, read + write residual) and two reads of M for the two products
    return GradSync(g * factors / elems, "all-reduce", period, 4 * g + 2 * g, g, flops / elems, "powersgd")
