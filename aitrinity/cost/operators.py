"""One serving step of a transformer as a sequence of GPU operators, timed per operator class.

A step on one tensor-parallel rank processes ``decode`` sequences (one new token each, over its cached
context) and ``prefill_seqs`` sequences of ``prefill_len`` new tokens each (continuous batching mixes
the two; Yu et al. 2022, "Orca", OSDI; Agrawal et al. 2024, "Sarathi-Serve"). Its ``T`` tokens go through,
per layer (the operator list of Megatron-style TP, Shoeybi et al. 2019, Fig. 3; the same decomposition
LLM-Viewer and aiconfigurator time):

==============  ===================================================  ====================
operator        shape on one rank                                    class
==============  ===================================================  ====================
QKV projection  GEMM ``T x h -> (a + 2g)·d / tp``                     gemm
attention       prefill (flash, causal) and decode (paged) kernels   attention
O projection    GEMM ``T x a·d/tp -> h``                              gemm
all-reduce      ``T·h`` bf16 over ``tp`` GPUs                         communication
all-to-all      MoE with ``ep > 1``: ``T·k·h`` bf16 dispatched, then  communication
                combined, over ``ep`` GPUs (GShard, Lepikhin 2020)
CP exchange     ``cp > 1``: a prompt's K and V around the ring, as    communication
                much as its attention does not hide; the decodes'
                partial attention merged (``context_parallel_time``)
gate/up, down   GEMMs ``T x h -> 2f/tp`` (gated) and ``T x f/tp -> h`` gemm
MoE             router GEMM; the experts the batch touches, each a    gemm
                GEMM of its share of the ``T·k`` routed tokens
norms, act, +   memory-bound element-wise kernels                    elementwise
==============  ===================================================  ====================

and once per step the embedding gather, the final norm and the LM head (``s x h -> V/tp`` for the ``s``
sequences that sample). Each kernel's time comes from :class:`~aitrinity.cost.kernels.Kernels` (measured
tables or the roofline); kernels of one step run back to back on one stream, so a step's time is their
sum plus the engine's own per-step time (scheduling, sampling, input preparation), which no kernel
table holds: ``step_overhead_s``, an engine property (:mod:`aitrinity.cost.concurrency`).

Every argument broadcasts: one step or a million candidate steps are one call -- the layout's degrees too
(a :class:`Layout` of per-element TP and EP degrees prices the candidates of many layouts at once).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from aitrinity.cost.kernels import Array, Kernels, MoEShape, unquantized, value_bytes
from aitrinity.spec.hardware import LinkSpec
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import System

Degree = int | NDArray[np.int64]
"""A parallel degree: one for every element, or one per element (the candidates of many layouts)."""

OPERATOR_CLASSES = ("gemm", "attention", "communication", "elementwise", "engine")
"""Operator classes in the order a breakdown lists them; ``engine`` is the per-step host-side time."""

OPERATOR_LABELS = {
    "gemm": "GEMMs (projections, MLP, LM head)",
    "attention": "attention kernels",
    "communication": "TP all-reduces, EP all-to-alls (collective latency)",
    "elementwise": "element-wise kernels (launch-bound)",
    "engine": "engine per-step overhead (scheduler, sampling)",
}


@dataclass(frozen=True)
class StepShape:
    """What one engine step processes (arrays broadcast)."""

    decode: ArrayLike
    """Sequences generating one token."""
    context: ArrayLike
    """Their mean context (cached tokens attended to)."""
    prefill_seqs: ArrayLike = 0.0
    """Sequences whose prompt (or a chunk of it) is processed in this step."""
    prefill_len: ArrayLike = 1.0
    """New tokens of each prefilling sequence."""
    prefill_prefix: ArrayLike = 0.0
    """Tokens each prefilling sequence already has in the KV cache (a prefix-cache hit or earlier chunks): its
    new tokens attend to them too."""


ROUTING_SKEW: dict[str, tuple[float, float]] = {
    "balanced": (1.0, 0.0),
    "power_law_1.01": (0.976, 0.059),
    "power_law_1.2": (0.965, 0.096),
}
"""``(a, s)`` of ``gamma(ep) = max(1, a + s·log2(ep))``: the hottest EP rank's routed work over the mean when the
experts' popularity follows a power law -- the median latency ratio (power law / balanced) of NVIDIA's measured
fused-MoE kernels at >= 1,024 tokens per EP size (aiconfigurator-core, h100_sxm/moe/trtllm/1.3.0rc23; derived by
``tools/derive_routing_skew.py``: 1.12 at EP 8, 1.55 at EP 256 for power_law_1.01). Where a table measured the
engine's MoE for the shape, its rows of that distribution are used instead."""


@dataclass(frozen=True)
class ScaleOut:
    """Where the GPUs of a layout sit: NVLink domains of ``domain`` GPUs (a node of 8, a 72-GPU NVL72 rack), joined
    by a scale-out network of ``bandwidth_Bps`` per GPU (achievable) and ``latency_s`` per collective step."""

    domain: int
    bandwidth_Bps: float
    latency_s: float

    @staticmethod
    def of(system: System) -> ScaleOut | None:
        """The system's nodes and the link between them (None: a single node, nothing crosses)."""
        link = system.inter_node_link
        return None if link is None else ScaleOut.over(system.devices_per_node, link)

    @staticmethod
    def over(domain: int, link: LinkSpec) -> ScaleOut:
        """Domains of ``domain`` GPUs joined by ``link`` (per GPU, at its achievable rate)."""
        return ScaleOut(domain, link.bandwidth_Bps * link.efficiency, link.latency_s)

    def all_to_all(self, k: Kernels, payload_bytes: Array, gpus: ArrayLike, stride: ArrayLike = 1) -> Array:
        """An all-to-all of ``payload_bytes`` per GPU over ``gpus`` GPUs ``stride`` apart: within one domain, the
        kernels' own; over several, the share bound for the GPU's own domain on NVLink (the kernels' all-to-all of that
        share) while the rest leaves through the GPU's NIC at the same time (DeepEP's normal mode; NCCL's all-to-all
        likewise puts the peers of other nodes on the network), the longer of the two. An all-gather of a
        ``payload_bytes`` total moves the same bytes."""
        n = np.asarray(gpus, dtype=np.float64)
        d = np.maximum(self.domain // np.asarray(stride), 1).astype(np.float64)  # the group's GPUs in one domain
        inside = k.all_to_all(payload_bytes, np.minimum(n, d).astype(np.int64))
        if not np.any(n > d):
            return inside
        near = k.all_to_all(payload_bytes * d / n, np.minimum(n, d).astype(np.int64))
        far = self.latency_s + payload_bytes * (n - d) / n / self.bandwidth_Bps
        out: Array = np.where(n > d, np.maximum(near, far), inside)
        return out


@dataclass(frozen=True)
class Layout:
    """How the model is split and stored: TP degree, EP degree (MoE), and the dtypes kernels run in.

    A MoE layer runs on a group of ``tp x dp`` GPUs -- ``dp`` attention data-parallel replicas of ``tp`` GPUs each
    -- split ``moe_tp x ep`` (an expert's GEMMs over ``moe_tp`` GPUs, the experts over ``ep``; the layouts
    aiconfigurator and the engines name ``tp / attention_dp / moe_tp / moe_ep``). ``attention_dp`` None is ``ep``:
    DP attention with EP MoE, each expert split over the replica's ``tp`` GPUs (SGLang's and TensorRT-LLM's
    DeepSeek layout); ``attention_dp=1`` with ``ep == tp`` is attention TP with EP MoE on the same GPUs
    (TensorRT-LLM's "TEP"). A dense model ignores ``ep``; ``dp`` replicas of it only share out the clients."""

    tp: Degree = 1
    ep: Degree = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    engine: str = "generic"
    attention_dp: Degree | None = None
    routing: str = "power_law_1.01"
    """How the tokens spread over the experts (:data:`ROUTING_SKEW`): ``balanced``, or power-law expert popularity
    (``power_law_1.01``, the default of NVIDIA's aiconfigurator, or the steeper ``power_law_1.2``)."""
    scale_out: ScaleOut | None = None
    """The NVLink domains the GPUs sit in and the network between them: an EP group larger than a domain sends the
    tokens bound for other domains over it. None: every group inside one domain."""
    cp: Degree = 1
    """Context parallelism: ``cp`` groups of ``tp`` GPUs share each sequence (see :func:`step_times`)."""
    cp_method: str = "ring"
    """How the ``cp`` groups attend (:func:`context_parallel_time`): ``ring`` (pass-KV / pass-Q ring attention, Yang
    et al. 2024) or ``ulysses`` (all-to-alls to a head split and back, Jacobs et al. 2023)."""
    compute_dtype: str = "bf16"
    """The plan's compute dtype: the LM head and the MoE router run in it, in bf16 where it is a quantized one
    (:func:`aitrinity.cost.kernels.unquantized`: engines keep them unquantized when the weights are), and a quantized
    KV cache is read into it for attention (:func:`aitrinity.cost.kernels.attention_dtype`)."""

    def __post_init__(self) -> None:
        tp, ep, dp = self.tp, self.ep, self.dp
        if isinstance(tp, int) and isinstance(ep, int) and isinstance(dp, int):  # one layout: no arrays to build
            bad = min(tp, ep, dp) < 1 or (tp * dp) % max(ep, 1) != 0
        else:
            a, e, d = np.asarray(tp), np.asarray(ep), np.asarray(dp)
            bad = bool(np.any(np.minimum(np.minimum(a, e), d) < 1) or np.any((a * d) % np.maximum(e, 1)))
        if bad:
            raise ValueError(f"a MoE group of tp {self.tp} x dp {self.dp} GPUs cannot hold ep {self.ep}")
        if self.routing not in ROUTING_SKEW:
            raise ValueError(f"routing {self.routing!r}: one of {', '.join(ROUTING_SKEW)}")

    @property
    def skew(self) -> float | Array:
        """The hottest EP rank's routed work over the mean (:data:`ROUTING_SKEW`)."""
        a, s = ROUTING_SKEW[self.routing]
        if isinstance(self.ep, int):
            return max(1.0, a + s * float(np.log2(self.ep)))
        out: Array = np.maximum(1.0, a + s * np.log2(self.ep))
        return out

    @property
    def dp(self) -> Degree:
        """Attention data-parallel replicas whose tokens meet in one MoE group."""
        return self.ep if self.attention_dp is None else self.attention_dp

    @property
    def moe_tp(self) -> Degree:
        """The GPUs one expert's GEMMs are split over."""
        return self.tp * self.dp // self.ep


@dataclass(frozen=True)
class StepTimes:
    """Seconds of one step by operator class (arrays of the broadcast shape), and their sum."""

    gemm: Array
    attention: Array
    communication: Array
    elementwise: Array
    engine: Array

    @property
    def total(self) -> Array:
        return self.gemm + self.attention + self.communication + self.elementwise + self.engine

    def by_class(self) -> dict[str, Array]:
        return {c: getattr(self, c) for c in OPERATOR_CLASSES}


Heads = tuple[Degree, Degree, int]
"""An attention's query heads, KV groups and head width on one rank (:func:`attention_shape`)."""


def _arrays(s: StepShape) -> tuple[Array, Array, Array, Array, Array]:
    """A step's decodes, their context, its prompts, their new tokens and cached prefix, as float arrays."""
    f = np.float64
    return (
        np.asarray(s.decode, dtype=f),
        np.asarray(s.context, dtype=f),
        np.asarray(s.prefill_seqs, dtype=f),
        np.asarray(s.prefill_len, dtype=f),
        np.asarray(s.prefill_prefix, dtype=f),
    )


def _attention(
    k: Kernels, lay: Layout, heads: Heads, step: StepShape, window: int | None, mla: tuple[int, int] | None
) -> Array:
    """One layer's attention kernels: decode over the context, prefill (flash, causal) over the new tokens
    and the ``prefix`` tokens cached before them -- the new rows of the causal score matrix, timed as the
    kernel over ``prefix + new`` less the kernel over ``prefix``; within ``window`` keys when given -- decode
    over ``min(context, window)``, prefill scaled by the share of the causal score matrix the window keeps
    (``s(s+1)/2`` cells, ``w(w+1)/2 + (s-w)w`` with it). ``mla``: the (QK, V) widths of a latent cache read once
    (:meth:`Kernels.prefill_attention`). With context parallelism (``lay.cp``) a rank attends its ``1/cp`` of each
    context in decode and does ``1/cp`` of a prompt's causal attention (load-balanced chunks)."""
    a, g, d = heads
    dec, ctx, nps, plen, prefix = _arrays(step)
    cp = np.asarray(lay.cp, dtype=np.float64)
    c = np.maximum(ctx, 1.0) if window is None else np.minimum(np.maximum(ctx, 1.0), window)
    c = np.maximum(c / cp, 1.0)
    attn = np.where(dec > 0, k.decode_attention(np.maximum(dec, 1.0), c, a, g, d, lay.kv_dtype, mla), 0.0)

    def causal(s: Array) -> Array:
        t = k.prefill_attention(np.maximum(nps, 1.0), s, a, g, d, lay.kv_dtype, mla, lay.compute_dtype)
        return t if window is None else t * window_share(s, window)

    s = np.maximum(plen, 1.0)
    pre = causal(s + prefix)
    if np.any(prefix > 0):  # the cached rows' own attention was paid when they were computed
        pre = pre - np.where(prefix > 0, causal(np.maximum(prefix, 1.0)), 0.0)
    out: Array = attn + np.where(nps > 0, pre / cp, 0.0)
    return out


def window_share(s: ArrayLike, window: int) -> Array:
    """The share of a causal ``s x s`` score matrix a sliding window of ``window`` keys keeps: ``s(s+1)/2`` cells,
    ``w(w+1)/2 + (s-w)w`` with it (the count :func:`aitrinity.cost.flops.causal_score_flops` makes)."""
    s, w = np.asarray(s, dtype=np.float64), float(window)
    kept = np.where(s <= w, s * (s + 1.0) / 2.0, w * (w + 1.0) / 2.0 + (s - w) * w)
    out: Array = kept / (s * (s + 1.0) / 2.0)
    return out


def _split(heads: int, tp: Degree) -> Degree:
    """``heads`` over ``tp`` ranks, at least one on each."""
    if isinstance(tp, int):
        return max(heads // tp, 1)
    out: NDArray[np.int64] = np.maximum(heads // tp, 1)
    return out


def attention_shape(m: ModelSpec, tp: Degree) -> tuple[Degree, Degree, int]:
    """(query heads, KV heads, head dim) on one TP rank; MLA's latent cache is one 'KV head' of its rank."""
    if m.mla:
        c = m.mla
        return _split(m.num_attention_heads, tp), 1, c.kv_lora_rank + c.qk_rope_head_dim
    return _split(m.num_attention_heads, tp), _split(m.kv_heads, tp), m.dim_head


def mla_widths(m: ModelSpec) -> tuple[int, int] | None:
    """(QK, V) widths of an MLA head as a prefill computes it (the latent up-projected: no-RoPE part + RoPE part, and
    the value), None for other attention."""
    c = m.mla
    return None if c is None else (c.qk_nope_head_dim + c.qk_rope_head_dim, c.v_head_dim)


def projection_time(m: ModelSpec, k: Kernels, lay: Layout, rows: Array) -> Array:
    """The attention's input and output projections of one layer on one TP rank (``rows`` tokens)."""
    h, wd = m.hidden_size, lay.weight_dtype
    a, g, d = attention_shape(m, lay.tp)
    if not m.mla:
        return k.gemm(rows, (a + 2 * g) * d, h, wd) + k.gemm(rows, h, a * d, wd)
    # MLA (DeepSeek-V2 §2.1.2): the query's and the KV's down-projections (replicated on every rank), their
    # up-projections (split by head), and the output projection
    c = m.mla
    qk = c.qk_nope_head_dim + c.qk_rope_head_dim
    q = k.gemm(rows, a * qk, h, wd)
    if c.q_lora_rank:
        q = k.gemm(rows, c.q_lora_rank, h, wd) + k.gemm(rows, a * qk, c.q_lora_rank, wd)
    kv = k.gemm(rows, c.kv_lora_rank + c.qk_rope_head_dim, h, wd)
    up = k.gemm(rows, a * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, wd)
    out: Array = q + kv + up + k.gemm(rows, h, a * c.v_head_dim, wd)
    if c.sparse and c.index_heads and c.index_head_dim and c.q_lora_rank:  # the indexer's query, key and weights
        ih, d = c.index_heads, c.index_head_dim
        out = out + k.gemm(rows, ih * d, c.q_lora_rank, wd) + k.gemm(rows, d, h, wd) + k.gemm(rows, ih, h, wd)
    return out


def mlp_time(m: ModelSpec, k: Kernels, lay: Layout, tokens: Array, moe_layer: bool) -> Array:
    """The MLP of one layer on one rank: dense, or MoE (router, shared experts, touched routed experts)."""
    h, wd, tp, dp, ep = m.hidden_size, lay.weight_dtype, lay.tp, lay.dp, lay.ep
    gated = m.mlp == "gated"

    def ffn(rows: Array, width: int) -> Array:
        up = k.gemm(rows, (2 if gated else 1) * width // tp, h, wd)
        return up + k.gemm(rows, h, width // tp, wd)

    if not (moe_layer and m.moe):
        return ffn(tokens, m.intermediate_size)
    e = m.moe
    local = e.num_experts / ep
    # token-expert pairs landing on this rank's experts: each of the dp replicas of the MoE group dispatches its
    # tokens' top-k copies over the group, so a rank's 1/ep of the experts receive (dp x tokens) x top-k / ep pairs
    # (attention DP "globalizes" the tokens, as aiconfigurator's MoE query does)
    routed = tokens * dp * e.experts_per_token / ep
    touched = local * (1.0 - (1.0 - 1.0 / local) ** np.maximum(routed, 0.0))  # uniform routing
    # the hottest rank sets the layer's pace: its experts hold ``skew`` times the mean rows (the popular experts
    # gather the extra tokens, so about as many experts are touched)
    per_expert = np.maximum(routed / np.maximum(touched, 1.0), 1.0) * lay.skew
    # the touched experts in grouped GEMMs (one launch each for the up and the down projection, as a fused MoE
    # kernel runs them), where no table measured the engine's fused MoE for this shape
    width = e.expert_intermediate_size // lay.moe_tp
    experts = k.grouped_gemm(touched, per_expert, (2 if gated else 1) * width, h, wd) + k.grouped_gemm(
        touched, per_expert, h, width, wd
    )
    # the engine's fused MoE kernel where a table measured this shape (uniform routing, as here)
    shape = MoEShape(h, e.expert_intermediate_size, e.experts_per_token, e.num_experts, lay.moe_tp, ep, lay.routing)
    measured = k.moe(tokens * dp, shape, wd)  # the tables count the MoE group's tokens
    experts = np.where(np.isnan(measured), experts, measured)
    router = k.gemm(tokens, e.num_experts, h, unquantized(lay.compute_dtype))
    return router + experts + shared_expert_time(m, k, lay, tokens)


def shared_expert_time(m: ModelSpec, k: Kernels, lay: Layout, tokens: Array) -> Array:
    """A MoE layer's shared experts on one rank (DeepSeek's one, Llama 4's): a dense FFN of their width, split by TP;
    0 for a model without."""
    e = m.moe
    if e is None or not e.num_shared_experts:
        return np.zeros(np.shape(tokens))
    width, wd = e.num_shared_experts * e.expert_intermediate_size, lay.weight_dtype
    up = k.gemm(tokens, (2 if m.mlp == "gated" else 1) * width // lay.tp, m.hidden_size, wd)
    out: Array = up + k.gemm(tokens, m.hidden_size, width // lay.tp, wd)
    return out


def cp_ring_bytes(m: ModelSpec, heads: ArrayLike, kv_per_token: ArrayLike, new: Array, held: Array) -> Array:
    """One layer's ring-attention payload for a prompt of ``new`` tokens over a context of ``held`` tokens on a TP
    rank of ``heads`` query heads (its whole, gathered: each rank receives ``(cp-1)/cp`` of it): pass-KV, the context's
    K and V at ``kv_per_token`` bytes, or pass-Q, the new tokens' queries round and their partial outputs back,
    whichever is smaller (Yang et al. 2024: pass-Q once the cache is much longer than the new tokens)."""
    widths = mla_widths(m)
    qk, dv = widths if widths else (m.dim_head, m.dim_head)  # MLA: a query's up-projected no-RoPE and RoPE parts
    pass_q = new * np.asarray(heads) * (qk * 2.0 + dv * 2.0 + 4.0)  # bf16 queries out; bf16 outputs, fp32 lse back
    out: Array = np.minimum(held * np.asarray(kv_per_token), pass_q)
    return out


def cp_merge_bytes(m: ModelSpec, heads: ArrayLike, decodes: Array, cp: ArrayLike) -> Array:
    """One layer's merge of a decode step's partial attention over ``cp`` ranks (the whole, gathered): each rank's
    outputs and log-sum-exps for every decode's ``heads`` query heads on its TP rank."""
    dv = m.mla.v_head_dim if m.mla else m.dim_head
    out: Array = decodes * np.asarray(heads) * (dv * 2.0 + 4.0) * np.asarray(cp)
    return out


def context_parallel_time(m: ModelSpec, k: Kernels, lay: Layout, step: StepShape, heads: Heads) -> Array:
    """One layer's context-parallel traffic on a rank, as much of it as the attention does not hide (Yang et al.
    2024, "Context Parallelism for Scalable Million-Token Inference"): ring attention for a prompt -- pass-KV, every
    rank receiving the other ranks' K and V of the prompt and of its cached prefix, ``(cp-1)/cp`` of them, or pass-Q,
    the new tokens' queries going round and their partial outputs coming back, whichever moves fewer bytes (the
    paper's choice: pass-Q once the cache is much longer than the new tokens), a block at a time while the rank
    attends to the blocks it has, so only what outlasts its prefill attention shows -- and, for decodes, the merge of
    each rank's partial attention (its outputs and log-sum-exps for every decode's heads), gathered from every rank.
    The ranks are ``tp`` GPUs apart; a group wider than an NVLink domain crosses the scale-out network. Each rank runs
    the decodes' projections and MLP itself (the weights are whole on every CP rank), so their queries need no
    exchange. With ``lay.cp_method == "ulysses"`` the traffic is Ulysses's head all-to-alls instead
    (:func:`_ulysses_time`)."""
    if lay.cp_method == "ulysses":
        return _ulysses_time(m, k, lay, step, heads)
    a, g, d = heads
    dec, _, nps, plen, prefix = _arrays(step)
    cp = np.asarray(lay.cp)
    kv_bytes = value_bytes(k, lay.kv_dtype)
    per_token = (1 if m.mla else 2) * g * d * kv_bytes  # one layer's K and V (MLA: its latent) on a TP rank

    def gather(total: Array) -> Array:
        if lay.scale_out is None:
            return k.all_to_all(total, cp)
        return lay.scale_out.all_to_all(k, total, cp, lay.tp)

    prompt = nps * plen
    ring = np.where(prompt > 0, gather(cp_ring_bytes(m, a, per_token, prompt, nps * (plen + prefix))), 0.0)
    zero = np.zeros(np.shape(prompt))
    pre = _attention(k, lay, heads, StepShape(zero, zero, nps, plen, prefix), None, mla_widths(m))
    merge = np.where(dec > 0, gather(cp_merge_bytes(m, a, dec, cp)), 0.0)
    out: Array = np.where(cp > 1, np.maximum(ring - np.where(prompt > 0, pre, 0.0), 0.0) + merge, 0.0)
    return out


def ulysses_bytes(m: ModelSpec, heads: ArrayLike, kv_heads: ArrayLike, tokens: ArrayLike) -> tuple[Array, Array]:
    """One layer's Ulysses all-to-all buffers on a rank holding ``tokens`` new tokens with a TP rank's ``heads`` query
    and ``kv_heads`` KV heads (bf16): their Q, K and V out to the head split, and their attention outputs back."""
    t, d = np.asarray(tokens, dtype=np.float64), m.dim_head
    qkv: Array = t * (np.asarray(heads) + 2.0 * np.asarray(kv_heads)) * d * 2.0
    back: Array = t * np.asarray(heads) * m.v_head_dim * 2.0
    return qkv, back


def _ulysses_time(m: ModelSpec, k: Kernels, lay: Layout, step: StepShape, heads: Heads) -> Array:
    """One layer's Ulysses traffic on a rank (DeepSpeed-Ulysses, Jacobs et al. 2023, §3.1), in series with the
    attention that waits for it: a prompt's new tokens, ``1/cp`` of them on each rank with all of its TP rank's heads,
    go through an all-to-all of their Q, K and V to ``1/cp`` of the heads over all the tokens, and their attention
    outputs through the all-to-all back; the K and V stay where they were attended, so each rank keeps its heads'
    KV of every sequence (the KV cache sharded by head, not by token). A decode attends its rank's heads over the
    whole context, and the ranks' outputs for their heads are gathered every layer."""
    a, g, d = heads
    dec, _, nps, plen, _ = _arrays(step)
    cp = np.asarray(lay.cp, dtype=np.float64)
    act = 2.0  # bf16 activations

    def exchange(total: Array) -> Array:
        if lay.scale_out is None:
            out: Array = k.all_to_all(total, cp)
            return out
        return lay.scale_out.all_to_all(k, total, cp, lay.tp)

    qkv, back = ulysses_bytes(m, a, g, nps * plen / cp)
    prompt = np.where(nps * plen > 0, exchange(qkv) + exchange(back), 0.0)
    gather = np.where(dec > 0, exchange(dec * a * d * act), 0.0)  # the decodes' outputs, the whole gathered
    out: Array = np.where(cp > 1, prompt + gather, 0.0)
    return out


def _sparse_attention(m: ModelSpec, k: Kernels, lay: Layout, heads: Heads, step: StepShape) -> Array:
    """DeepSeek Sparse Attention: each query attends its ``index_topk`` best tokens -- counted as a window of that
    many keys -- after the indexer scored every cached token with its fp8 keys (``heads``: the attention's heads,
    KV groups and head width on one rank)."""
    assert m.mla is not None and m.mla.index_heads and m.mla.index_head_dim
    sparse = dataclasses.replace(lay, kv_dtype="fp8")
    # the indexer's cache is keys only: its scores are QK^T at its head width, and a decode reads each key once
    keys_only = (m.mla.index_head_dim, 0)
    ih, idim = m.mla.index_heads, m.mla.index_head_dim
    index = _attention(k, sparse, (ih, 1, idim), step, None, keys_only)
    out: Array = _attention(k, lay, heads, step, m.mla.index_topk, mla_widths(m)) + index
    return out


def _moe_collectives(m: ModelSpec, k: Kernels, lay: Layout, rows: Array) -> Array | None:
    """A MoE layer's own collectives where attention replicas (``dp > 1``) meet in it (None: none). EP: dispatch the
    tokens' top-k copies to their experts' ranks and combine them back; without EP, every expert is split over the
    whole group: all-gather the tokens, reduce-scatter the outputs (a layout that does neither asks for a collective
    over one GPU: nothing)."""
    spread = np.asarray(lay.dp) > 1 if m.moe else np.False_
    if not (m.moe and spread.any()):
        return None
    h = m.hidden_size
    dispatch = np.where(spread & (np.asarray(lay.ep) > 1), lay.ep, 1)
    gather = np.where(spread & (np.asarray(lay.ep) <= 1), lay.tp * lay.dp, 1)
    routed = rows * m.moe.experts_per_token * h * 2.0 * lay.skew  # the hottest rank's share
    a2a = k.all_to_all(routed, dispatch) if lay.scale_out is None else lay.scale_out.all_to_all(k, routed, dispatch)
    out: Array = 2.0 * a2a + k.all_reduce(rows * lay.dp * h * 2.0, gather)
    return out


def _shared_experts_hidden(
    m: ModelSpec, k: Kernels, lay: Layout, rows: Array, nps: Array, moe_mlp: Array, moe_comm: Array
) -> Array:
    """The shared experts' time a MoE layer hides: a decode step runs as a CUDA graph, the shared experts on a second
    stream beside the routed path (router, dispatch, experts, combine), and the layer takes the longer of the two
    (TensorRT-LLM's maybe_execute_in_parallel, SGLang's and vLLM's shared-expert streams; aiconfigurator's
    OverlapOp). Prefill steps run them in turn: nothing hidden."""
    shared = shared_expert_time(m, k, lay, rows)
    out: Array = np.where(nps > 0, 0.0, np.minimum(shared, moe_mlp - shared + moe_comm))
    return out


def step_times(
    m: ModelSpec,
    k: Kernels,
    lay: Layout,
    s: StepShape,
    step_overhead_s: float = 0.0,
    sequence_overhead_s: float = 0.0,
) -> StepTimes:
    """Time of one engine step on one TP rank, by operator class (see module doc). The engine's host time is
    ``step_overhead_s`` plus ``sequence_overhead_s`` per sequence the step runs (decodes and prompts)."""
    dec = np.asarray(s.decode, dtype=np.float64)
    ctx = np.asarray(s.context, dtype=np.float64)
    nps = np.asarray(s.prefill_seqs, dtype=np.float64)
    plen = np.asarray(s.prefill_len, dtype=np.float64)
    prefix = np.asarray(s.prefill_prefix, dtype=np.float64)
    cp = np.asarray(lay.cp, dtype=np.float64)
    tokens = dec + nps * plen / cp  # a prompt's tokens split over the CP ranks; decodes run on every rank
    rows = np.maximum(tokens, 1.0)
    tp, h = lay.tp, m.hidden_size
    a, g, d = attention_shape(m, tp)

    projections = projection_time(m, k, lay, rows)
    step = StepShape(dec, ctx, nps, plen, prefix)
    attn = _attention(k, lay, (a, g, d), step, None, mla_widths(m))
    if m.mla and m.mla.sparse and m.mla.index_heads and m.mla.index_head_dim:
        attn = _sparse_attention(m, k, lay, (a, g, d), step)
    dense_mlp = mlp_time(m, k, lay, rows, moe_layer=False)
    moe_mlp = mlp_time(m, k, lay, rows, moe_layer=True) if m.moe else dense_mlp
    act_bytes = rows * h * 2.0
    ar = k.all_reduce(act_bytes, tp)
    elem = 4.0 * k.elementwise(2.0 * act_bytes)  # 2 norms, residual adds, activation: ~4 memory passes

    layers = m.num_layers
    samplers = np.maximum(dec + nps, 1.0)
    comm = 2.0 * layers * ar + k.all_reduce(samplers * m.vocab_size / tp * 4.0, tp) * (tp > 1)  # + logits gather
    moe_comm = _moe_collectives(m, k, lay, rows)
    if moe_comm is not None:
        comm = comm + m.num_moe_layers * moe_comm
    else:
        moe_comm = np.zeros(np.shape(rows))
    if m.moe and m.moe.num_shared_experts:
        moe_mlp = moe_mlp - _shared_experts_hidden(m, k, lay, rows, nps, moe_mlp, moe_comm)
    if np.any(cp > 1):
        comm = comm + layers * context_parallel_time(m, k, lay, step, (a, g, d))
    gemm = layers * projections + m.num_dense_layers * dense_mlp + m.num_moe_layers * moe_mlp
    gemm = gemm + k.gemm(samplers, m.vocab_size // tp, h, unquantized(lay.compute_dtype))  # LM head
    elementwise = layers * elem + 2.0 * k.elementwise(act_bytes)  # embedding gather, final norm
    shape = np.broadcast(dec, ctx, nps, plen, prefix).shape
    engine = np.broadcast_to(step_overhead_s + sequence_overhead_s * (dec + nps), shape).astype(np.float64)
    attention = layers * attn
    if m.local_layers and m.sliding_window:  # local layers attend within the window (Mistral, Gemma, gpt-oss)
        local = _attention(k, lay, (a, g, d), step, m.sliding_window, mla_widths(m))
        attention = m.local_layers * local + (layers - m.local_layers) * attn
    return StepTimes(
        gemm=np.broadcast_to(gemm, shape).astype(np.float64),
        attention=np.broadcast_to(attention, shape).astype(np.float64),
        communication=np.broadcast_to(comm, shape).astype(np.float64),
        elementwise=np.broadcast_to(elementwise, shape).astype(np.float64),
        engine=engine,
    )
