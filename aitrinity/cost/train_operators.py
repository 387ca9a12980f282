"""One training step as GPU operators: a micro-batch through one pipeline stage, timed per operator class.

The layer is Megatron's (Shoeybi et al. 2019, Fig. 3; the serving step of :mod:`aitrinity.cost.operators`)
with training's extra work. On one tensor-parallel rank, for ``T = b·s`` tokens of a micro-batch:

* **GEMMs** -- QKV, O, MLP up and down (``T x h -> ... / tp``). The backward pass runs two GEMMs per
  forward one (activation gradient and weight gradient), each of the forward's FLOPs; they are priced
  as twice the forward GEMM's time (the transposed layouts run at the forward's rate for these shapes).
* **attention** -- flash attention (Dao 2023): the forward kernel, and a backward of 2.5x its work (five
  matrix products against two, §3.1 there). Without flash attention (Megatron-LM in 2021) the scores
  are materialized: two batched GEMMs per head (``QKᵀ`` and ``AV``) and the fused scale-mask-softmax
  and dropout kernels reading and writing the ``s x s`` scores (Korthikanti et al. 2022, §4.1 counts
  the same tensors as activations), the backward moving twice the bytes.
* **communication** -- TP: two all-reduces of ``T·h`` per layer forward and two backward (Shoeybi et
  al. 2019, §3); with sequence parallelism an all-gather + reduce-scatter pair of the same volume
  (Korthikanti §4.2.2), timed as the all-reduce. Full recomputation repeats the forward ones.
* **elementwise** -- layer norms, bias-dropout-add, the activation function: memory-bound passes over the
  ``T·h`` residual stream (split by TP under sequence parallelism) and the ``T·f/tp`` MLP activation;
  the backward moves twice the forward's bytes.
* **recomputation** -- ``full`` repeats each layer's forward before its backward; ``selective`` repeats
  the attention core only (Korthikanti §5).
* **context parallelism** -- a rank's GEMMs and element-wise kernels run its ``b·s/cp`` tokens, and its
  attention ``1/cp`` of the sequence's causal attention (load-balanced chunks, :mod:`aitrinity.cost.training`);
  the K / V exchange is priced on its link there.

The first stage also gathers embeddings, the last runs the LM head and the loss over ``V/tp`` logits in
fp32. :func:`stage_times` gives one micro-batch on one stage; :mod:`aitrinity.cost.estimate` builds the
step from it (pipeline schedule, optimizer, data-parallel streams). Every argument broadcasts: the
planner's rows and one configuration go through the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from aitrinity.cost.kernels import Array, Kernels, unquantized
from aitrinity.cost.operators import Layout as ServingLayout
from aitrinity.cost.operators import attention_shape, mla_widths, mlp_time, projection_time, window_share
from aitrinity.spec.model import ModelSpec

TRAIN_OPERATOR_CLASSES = ("gemm", "attention", "communication", "elementwise")

FLASH_BACKWARD = 2.5
"""Flash attention's backward over its forward (Dao 2023, FlashAttention-2, §3.1: 5 matmuls against 2)."""


@dataclass(frozen=True)
class MicroBatch:
    """What one micro-batch is and how the plan runs it (arrays broadcast: one row per candidate)."""

    micro_batch: ArrayLike
    seq_len: int
    recompute: ArrayLike
    """0 none, 1 selective, 2 full (the order of ``plan.vector_training.RECOMPUTE``)."""
    sequence_parallel: ArrayLike
    flash_attention: bool
    dtype: str
    context_parallel: int = 1
    """The CP ranks a sequence is split over."""

    @property
    def tokens(self) -> Array:
        """``micro_batch x seq_len / cp``: the rows of every GEMM on one CP rank."""
        out: Array = np.asarray(self.micro_batch, dtype=np.float64) * self.seq_len / self.context_parallel
        return out


RECOMPUTE_INDEX = {"none": 0, "selective": 1, "full": 2}


@dataclass(frozen=True)
class ClassTimes:
    """Seconds by operator class (arrays of the broadcast shape)."""

    gemm: Array
    attention: Array
    communication: Array
    elementwise: Array

    @property
    def total(self) -> Array:
        return self.gemm + self.attention + self.communication + self.elementwise

    def __add__(self, o: ClassTimes) -> ClassTimes:
        return ClassTimes(*(getattr(self, c) + getattr(o, c) for c in TRAIN_OPERATOR_CLASSES))

    def scaled(self, f: ArrayLike) -> ClassTimes:
        return ClassTimes(*(getattr(self, c) * f for c in TRAIN_OPERATOR_CLASSES))

    def by_class(self) -> dict[str, Array]:
        return {c: getattr(self, c) for c in TRAIN_OPERATOR_CLASSES}


def _attention_forward(m: ModelSpec, k: Kernels, tp: int, mb: MicroBatch) -> tuple[Array, Array]:
    """(kernel seconds, memory-bound seconds) of one layer's attention core, forward; a CP rank's ``1/cp`` share
    (its queries against the whole sequence's keys: the sequence's kernel time split evenly). A model whose local
    layers attend within a sliding window (Mistral, Gemma, gpt-oss) pays, per layer on average, the share of the
    causal score matrix its layers keep (:func:`window_share` on the local ones, all of it on the global ones), as the
    serving step and :mod:`aitrinity.cost.flops` count it -- with flash attention, which skips the cells outside the
    window; the unfused products compute the whole matrix and mask it."""
    a, g, d = attention_shape(m, tp)
    b, s, cp = np.asarray(mb.micro_batch, dtype=np.float64), mb.seq_len, mb.context_parallel
    kept: Array | float = 1.0
    if m.local_layers and m.sliding_window:
        local = m.local_layers / m.num_layers
        kept = local * window_share(s, m.sliding_window) + (1.0 - local)
    dt = unquantized(mb.dtype)  # attention on activations: an fp8 run's in bf16, an fp32 run's in fp32
    if mb.flash_attention:
        return k.prefill_attention(b, s, a, g, d, dt, mla_widths(m), dt) * kept / cp, np.zeros(np.shape(b))
    qk, v = mla_widths(m) or (d, d)
    heads = b * a  # one (s x d)·(d x s) and one (s x s)·(s x d) product per head
    products = heads * (k.gemm(s, s, qk, dt) + k.gemm(s, v, s, dt)) / cp
    passes = 6.0 + (3.5 if m.dropout else 0.0)  # QKᵀ out, softmax in/out, (dropout in/out/mask), AV in
    return products, k.elementwise(heads * s * s * 2.0 * passes / cp)


def layer_times(m: ModelSpec, k: Kernels, tp: int, ep: int, mb: MicroBatch, moe_layer: bool) -> ClassTimes:
    """One layer, forward + backward (+ recomputation), on one TP rank (see module doc)."""
    rows = np.asarray(mb.tokens, dtype=np.float64)
    rec = np.asarray(mb.recompute)
    sp = np.asarray(mb.sequence_parallel, dtype=bool)
    h, dt = m.hidden_size, mb.dtype
    lay = ServingLayout(tp=tp, ep=ep, weight_dtype=dt)
    gemm_f = projection_time(m, k, lay, rows) + mlp_time(m, k, lay, rows, moe_layer)
    core, scores = _attention_forward(m, k, tp, mb)
    attn_bwd = FLASH_BACKWARD * core if mb.flash_attention else 2.0 * core + 2.0 * scores
    ar = k.all_reduce(rows * h * 2.0, tp)
    width = m.moe.expert_intermediate_size * m.moe.experts_per_token if moe_layer and m.moe else m.intermediate_size
    stream = rows * h * 2.0 / np.where(sp, tp, 1)
    passes = 10.0 + (1.0 if m.dropout else 0.0)  # 2 norms (in, out), 2 bias-dropout-adds (2 in, out, mask)
    act = rows * width / tp * 2.0 * (3.0 if m.mlp == "gated" else 2.0)
    elem_f = 6.0 * k.elementwise((passes * stream + act) / 6.0)  # ~6 fused kernels per layer forward
    full, sel = (rec == 2), (rec == 1)
    fwd = ClassTimes(gemm_f, core + scores, 2.0 * ar, elem_f)
    bwd = ClassTimes(2.0 * gemm_f, attn_bwd, 2.0 * ar, 2.0 * elem_f)
    again = ClassTimes(gemm_f * full, (core + scores) * (full | sel), 2.0 * ar * full, elem_f * full)
    return fwd + bwd + again


def stage_times(
    m: ModelSpec, k: Kernels, tp: int, ep: int, mb: MicroBatch, dense: int, moe: int, first: bool, last: bool
) -> ClassTimes:
    """One micro-batch, forward and backward, through a stage of ``dense`` + ``moe`` layers."""
    dense_t = layer_times(m, k, tp, ep, mb, moe_layer=False)
    moe_t = layer_times(m, k, tp, ep, mb, moe_layer=True) if moe else None
    return _stage_of(m, k, tp, mb, (dense_t, moe_t), dense, moe, first, last)


def _stage_of(
    m: ModelSpec,
    k: Kernels,
    tp: int,
    mb: MicroBatch,
    layer: tuple[ClassTimes, ClassTimes | None],
    dense: int,
    moe: int,
    first: bool,
    last: bool,
) -> ClassTimes:
    """:func:`stage_times` from a dense and a MoE layer's :func:`layer_times` (the MoE one where ``moe``)."""
    out = layer[0].scaled(dense)
    if moe:
        assert layer[1] is not None
        out = out + layer[1].scaled(moe)
    rows = np.asarray(mb.tokens, dtype=np.float64)
    zero = np.zeros(rows.shape)
    if first:  # embedding gather forward, scatter-add of its gradient backward
        e = k.elementwise(rows * m.hidden_size * 2.0 * 2.0)
        out = out + ClassTimes(zero, zero, zero, 3.0 * e)
    if last:  # final norm, LM head (forward + 2 backward GEMMs), fp32 logits through the loss
        heads = 1.0 + m.mtp_layers  # each multi-token-prediction module predicts through the same head again
        h = m.hidden_size
        head = heads * 3.0 * k.gemm(rows, m.vocab_size // tp, h, mb.dtype)
        loss = heads * k.elementwise(rows * m.vocab_size / tp * 4.0 * 5.0)  # logits out, softmax, loss, gradient
        reduce = heads * 3.0 * k.all_reduce(rows * 4.0, tp)  # vocab-parallel max, sum and target logit
        out = out + ClassTimes(head, zero, reduce, loss)
        if m.mtp_layers:  # which first projects [norm(hidden); norm(next embedding)], 2h -> h; its block is a layer
            proj = m.mtp_layers * 3.0 * k.gemm(rows, h // tp, 2 * h, mb.dtype)
            norms = m.mtp_layers * 3.0 * k.elementwise(rows * 2 * h * 2.0 * 2.0)
            out = out + ClassTimes(proj, zero, zero, norms)
    return out


@dataclass(frozen=True)
class StepTimes:
    """A training step on the busiest pipeline stage (arrays broadcast)."""

    per_microbatch: ClassTimes
    """One micro-batch, forward and backward, on the slowest stage."""
    microbatches: Array
    p2p_s: Array
    """Pipeline sends and receives on the critical path, per micro-batch slot."""
    bubble_s: Array
    """Fill and drain: ``(p - 1) / v`` slots (Narayanan et al. 2021, §2.2, interleaved schedule)."""
    optimizer_s: Array
    """The optimizer's pass over its states (memory-bound), after the last backward."""

    @property
    def busy(self) -> Array:
        return self.microbatches * (self.per_microbatch.total + self.p2p_s)

    @property
    def total(self) -> Array:
        return self.busy + self.bubble_s + self.optimizer_s


def slowest_stage(
    m: ModelSpec,
    k: Kernels,
    tp: int,
    pp: int,
    ep: int,
    mb: MicroBatch,
    kept: dict[tuple[int, int, bool], ClassTimes] | None = None,
) -> ClassTimes:
    """One micro-batch on the pipeline stage that takes longest (each distinct stage timed once). ``kept``: layer
    times by ``(tp, ep, moe layer)`` from earlier calls on the same model, kernels and micro-batches (a search's
    layouts), and where this call leaves its own."""
    from aitrinity.cost.training import stage_kinds

    def layer(moe_layer: bool) -> ClassTimes:
        if kept is None:
            return layer_times(m, k, tp, ep, mb, moe_layer)
        key = (tp, ep, moe_layer)
        if key not in kept:
            kept[key] = layer_times(m, k, tp, ep, mb, moe_layer)
        return kept[key]

    slowest: ClassTimes | None = None
    kinds = dict.fromkeys(stage_kinds(m, pp))  # each distinct stage once, in stage order; its layers' times once
    dense_t = layer(False)
    moe_t = layer(True) if any(moe for _, moe, _, _ in kinds) else None
    for key in kinds:
        t = _stage_of(m, k, tp, mb, (dense_t, moe_t), *key)
        if slowest is None:
            slowest = t
        else:
            pick = t.total > slowest.total
            slowest = ClassTimes(*(np.where(pick, getattr(t, c), getattr(slowest, c)) for c in TRAIN_OPERATOR_CLASSES))
    assert slowest is not None
    return slowest


def schedule(
    per_microbatch: ClassTimes,
    k: Kernels,
    pp: int,
    virtual_stages: ArrayLike,
    microbatches: ArrayLike,
    p2p_s: ArrayLike,
    optimizer_bytes: ArrayLike,
) -> StepTimes:
    """The 1F1B step around the slowest stage: ``m`` busy slots, ``(p - 1)/v`` slots of bubble, then the
    optimizer's memory-bound pass."""
    n = np.asarray(microbatches, dtype=np.float64)
    p2p = np.broadcast_to(np.asarray(p2p_s, dtype=np.float64), n.shape)
    bubble = (pp - 1) / np.asarray(virtual_stages, dtype=np.float64) * (per_microbatch.total + p2p)
    opt = np.asarray(optimizer_bytes, dtype=np.float64)
    return StepTimes(per_microbatch, n, p2p, bubble, np.where(opt > 0, k.elementwise(opt), 0.0))
