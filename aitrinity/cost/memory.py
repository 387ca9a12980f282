"""Resident memory: model states (ZeRO), activations (Korthikanti et al.), KV cache.

Model states, mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", §3.1 and
Figure 1): 2Ψ fp16 weights + 2Ψ fp16 gradients + KΨ optimizer states with
K = 12 (fp32 master weights, momentum, variance). Stages over N_d ranks:
ZeRO-1 shards the K term, ZeRO-2 also the gradients, ZeRO-3 also the weights.

Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models", §4. Per layer, 16-bit activations and 1-byte dropout
masks, the paper's GPT layer stores ``sbh(34 + 5as/h)`` bytes; with tensor
parallelism ``sbh(10 + 24/t + 5as/(ht))``; with sequence parallelism too
``sbh(34/t + 5as/(ht))``; selective recomputation drops the ``5as/h`` term;
full recomputation keeps only the layer input ``2sbh`` (``/t`` with SP). We
derive these terms tensor by tensor so that GQA, gated MLPs, MoE, MLA and
dropout-free models get their own coefficients; for the paper's layer (MHA,
4h GELU MLP, dropout) the derivation reproduces its numbers exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import numpy as np
from numpy.typing import NDArray

from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import OPTIMIZER_STATE_BYTES, Plan

# ----------------------------------------------------------------------------- model states


@dataclass(frozen=True)
class ModelStates:
    """Bytes of weights, gradients and optimizer states on one device."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def optimizer_bytes_per_param(plan: Plan) -> float:
    """K of the ZeRO paper: optimizer states (+ fp32 master copy under mixed precision)."""
    master = 4.0 if plan.master_weights and BYTES_PER_DTYPE[plan.weights_dtype] < 4 else 0.0
    return master + OPTIMIZER_STATE_BYTES[plan.optimizer]


def model_states(params: float, plan: Plan, shard: int, training: bool = True) -> ModelStates:
    """States of ``params`` parameters held by one device, ZeRO-sharded over ``shard`` ranks.

    ZeRO paper §5: stage 1 partitions optimizer states, stage 2 also gradients,
    stage 3 also parameters. For inference only the weights are resident.
    """
    wb = BYTES_PER_DTYPE[plan.weights_dtype]
    if not training:
        return ModelStates(params * wb, 0.0, 0.0)
    gb = BYTES_PER_DTYPE[plan.grads_dtype]
    k = optimizer_bytes_per_param(plan)
    z = plan.zero
    return ModelStates(
        weights=params * wb / (shard if z >= 3 else 1),
        gradients=params * gb / (shard if z >= 2 else 1),
        optimizer=params * k / (shard if z >= 1 else 1),
    )


# ----------------------------------------------------------------------------- activations


@dataclass(frozen=True)
class LayerActivations:
    """Saved-for-backward bytes of one layer, split as Korthikanti §4.1 splits them.

    ``replicated``: tensors outside tensor-parallel regions (layer-norm inputs,
    block inputs, dropout masks) -- split only by sequence parallelism.
    ``split``: tensors inside TP regions (Q, K, V, MLP intermediates), split by t.
    ``scores``: the s x s attention tensors (softmax output, dropout mask/output),
    split by t; dropped by selective recomputation and by flash attention.
    ``flash``: what flash attention saves instead of scores (fp32 log-sum-exp).
    """

    replicated: float
    split: float
    scores: float
    flash: float
    layer_input: float


def layer_activations(m: ModelSpec, s: int, b: int, moe_layer: bool, act_bytes: float = 2.0) -> LayerActivations:
    h, a, g = m.hidden_size, m.num_attention_heads, m.kv_heads
    dqk, dv = m.dim_head, m.v_head_dim
    sb = float(s) * b
    mask = 1.0 if m.dropout else 0.0
    # Korthikanti §4.1: 10sbh outside TP regions, 24sbh inside, 5as^2b of scores (GPT layer)
    replicated = 2 * act_bytes * sb * h  # the two layer-norm inputs
    replicated += act_bytes * sb * h  # QKV matmul input (LN output)
    replicated += act_bytes * sb * h  # MLP first-linear input (LN output)
    replicated += 2 * mask * sb * h  # attention-output and MLP-output dropout masks
    if m.mla:  # the latent vectors feeding the up-projections are saved too
        c = m.mla
        split_attn = act_bytes * sb * ((c.q_lora_rank or 0) + c.kv_lora_rank + c.qk_rope_head_dim)
        split_attn += act_bytes * sb * (a * dqk + a * dqk + a * dv)  # Q, K (per head), V
    else:
        split_attn = act_bytes * sb * (a * dqk + g * dqk + g * dv)  # Q, K for QK^T; V for AV
    split_attn += act_bytes * sb * a * dv  # output-projection input
    # softmax output 2as^2b; with dropout also its mask as^2b and its output 2as^2b
    scores = act_bytes * a * s * sb + mask * (1.0 + act_bytes) * a * s * sb
    if moe_layer and m.moe:
        e = m.moe
        per_token = _mlp_intermediates(m, e.expert_intermediate_size, act_bytes)
        split_mlp = (e.experts_per_token + e.num_shared_experts) * per_token * sb + 4.0 * sb * e.num_experts
    else:
        split_mlp = _mlp_intermediates(m, m.intermediate_size, act_bytes) * sb
    flash = 4.0 * a * sb  # fp32 log-sum-exp per query and head (Dao et al. 2022, Alg. 2)
    return LayerActivations(replicated, split_attn + split_mlp, scores, flash, act_bytes * sb * h)


def _mlp_intermediates(m: ModelSpec, ffn: int, act_bytes: float) -> float:
    """Per token: GELU MLP saves its input and output (2 x f); SwiGLU saves gate, up, silu(gate), product."""
    return act_bytes * ffn * (4 if m.mlp == "gated" else 2)


def layer_activation_bytes(acts: LayerActivations, plan: Plan) -> float:
    """Bytes one device keeps for one layer and one micro-batch under the plan."""
    return kept_activation_bytes(acts, plan.tp, plan.sequence_parallel, plan.recompute, plan.flash_attention)


def kept_activation_bytes(acts: LayerActivations, t: int, sp: bool, recompute: str, flash: bool) -> float:
    """:func:`layer_activation_bytes` from the four settings it reads (the planner's tables, without a plan each)."""
    if recompute == "full":
        return acts.layer_input / (t if sp else 1)
    rep = acts.replicated / (t if sp else 1)
    keep_scores = recompute == "none" and not flash
    scores = acts.scores if keep_scores else (acts.flash if flash else 0.0)
    return rep + (acts.split + scores) / t


def korthikanti_coefficient(m: ModelSpec, s: int, plan: Plan) -> float:
    """Bytes per (s·b·h) of one layer: 34 + 5as/h for the paper's GPT layer, no parallelism."""
    acts = layer_activations(m, s, 1, moe_layer=False)
    return layer_activation_bytes(acts, plan) / (s * m.hidden_size)


# ----------------------------------------------------------------------------- KV cache


def kv_bytes_per_token(m: ModelSpec, dtype: str) -> float:
    """KV-cache bytes per token for the whole model.

    MHA/GQA/MQA: ``2 · L · g · d`` values (K and V) -- vLLM (Kwon et al. 2023,
    §2.3) gives 800 KB per token for OPT-13B. MLA (DeepSeek-V2 §2.1.2):
    ``L · (d_c + d_R)`` values, the compressed latent plus the decoupled RoPE key.
    """
    b = BYTES_PER_DTYPE[dtype]
    if m.mla:
        index = m.mla.index_head_dim or 0  # DeepSeek Sparse Attention's fp8 index keys
        return m.num_layers * ((m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * b + index * BYTES_PER_DTYPE["fp8"])
    return 2.0 * m.num_layers * m.kv_heads * m.dim_head * b


@overload
def kv_tokens_held(m: ModelSpec, context: float) -> float: ...
@overload
def kv_tokens_held(m: ModelSpec, context: NDArray[np.float64]) -> NDArray[np.float64]: ...
def kv_tokens_held(m: ModelSpec, context: float | NDArray[np.float64]) -> float | NDArray[np.float64]:
    """Tokens one sequence keeps in cache, per layer on average: capped by a sliding window on the layers
    that have one (rolling buffer, Mistral §2; Gemma 2/3 and gpt-oss keep the whole context on their global
    layers). ``context`` one length, or one per element."""
    local, w = m.local_layers, m.sliding_window
    if not local or w is None:
        return context
    windowed = np.minimum(context, w) if isinstance(context, np.ndarray) else min(context, w)
    if local == m.num_layers:
        return windowed
    return (local * windowed + (m.num_layers - local) * context) / m.num_layers


@overload
def kv_shard_factor(m: ModelSpec, tp: int) -> float: ...
@overload
def kv_shard_factor(m: ModelSpec, tp: NDArray[np.int64]) -> NDArray[np.float64]: ...
def kv_shard_factor(m: ModelSpec, tp: int | NDArray[np.int64]) -> float | NDArray[np.float64]:
    """Fraction of the KV cache one TP rank holds (``tp`` one degree, or one per row).

    KV heads split across TP ranks; with more ranks than KV heads each rank keeps
    one head (replication). MLA's latent is shared by all heads and replicated.
    """
    if m.mla:
        return 1.0 if isinstance(tp, int) else np.ones(np.shape(tp))
    if isinstance(tp, int):
        return max(m.kv_heads / tp, 1.0) / m.kv_heads
    out: NDArray[np.float64] = np.maximum(m.kv_heads / tp, 1.0) / m.kv_heads
    return out
