"""Matmul FLOPs of a forward pass, per token, by part.

A GEMM of (m x k) by (k x n) costs ``2·m·k·n`` FLOPs (multiply + add), the
convention of Kaplan et al. 2020 and of torch's FlopCounterMode; element-wise
ops, norms, softmax and bias adds are not counted (they show up as memory
traffic, not matmul FLOPs).

Attention scores: each query position attending to ``c`` keys costs
``2·c·a·d_qk`` (QK^T) + ``2·c·a·d_v`` (AV). For training we follow
Narayanan et al. 2021 (eq. 3) and PaLM (Chowdhery et al. 2022, App. B), which
count the full ``s x s`` score matrix (no causal halving) so that MFU matches
the published convention. Serving uses exact causal context lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

from aitrinity.cost.params import attention_params
from aitrinity.spec.model import ModelSpec


@dataclass(frozen=True)
class TokenFlops:
    """Forward matmul FLOPs for one token, excluding the attention-score part."""

    attention_proj: float
    mlp: float
    router: float
    lm_head: float

    @property
    def dense(self) -> float:
        """Everything proportional to tokens (not to context length)."""
        return self.attention_proj + self.mlp + self.router + self.lm_head


def layer_dense_flops(m: ModelSpec, moe_layer: bool) -> TokenFlops:
    """Forward FLOPs one token spends in one layer, outside the attention scores."""
    h = m.hidden_size
    attn = 2.0 * (attention_params(m) - _attention_non_matmul(m))
    if moe_layer and m.moe:
        e = m.moe
        mlp = 2.0 * (e.experts_per_token + e.num_shared_experts) * _mlp_weights(m, e.expert_intermediate_size)
        router = 2.0 * h * e.num_experts
    else:
        mlp, router = 2.0 * _mlp_weights(m, m.intermediate_size), 0.0
    return TokenFlops(attention_proj=attn, mlp=mlp, router=router, lm_head=0.0)


def token_flops(m: ModelSpec) -> TokenFlops:
    """Forward FLOPs of one token through the whole model (2 x weights it multiplies by)."""
    dense = layer_dense_flops(m, moe_layer=False)
    moe = layer_dense_flops(m, moe_layer=True) if m.moe else dense
    nd, nm = m.num_dense_layers, m.num_moe_layers
    return TokenFlops(
        attention_proj=m.num_layers * dense.attention_proj,
        mlp=nd * dense.mlp + nm * moe.mlp,
        router=nm * moe.router,
        lm_head=2.0 * m.vocab_size * m.hidden_size,
    )


def _mlp_weights(m: ModelSpec, ffn: int) -> int:
    return (3 if m.mlp == "gated" else 2) * m.hidden_size * ffn


def _attention_non_matmul(m: ModelSpec) -> int:
    """Biases and MLA's latent norms: parameters that are not GEMM weights."""
    if m.mla:
        return (m.mla.q_lora_rank or 0) + m.mla.kv_lora_rank
    d, g = m.dim_head, m.kv_heads
    return (m.num_attention_heads * d + 2 * g * d) * m.qkv_bias + m.hidden_size * m.linear_bias


def score_flops_per_query(m: ModelSpec, context: float) -> float:
    """QK^T + AV FLOPs of one query position over ``context`` keys, all layers.

    With a sliding window the context of its layers is capped at the window (Mistral 7B, §2); models that
    mix local and global layers (Gemma 2/3, gpt-oss) pay the full context on the global ones.
    """
    local = m.local_layers
    if local == m.num_layers and m.sliding_window:
        context = min(context, m.sliding_window)
    elif local:
        w = m.sliding_window or 0
        per_layer = 2.0 * m.num_attention_heads * (m.dim_head + m.v_head_dim)
        return per_layer * (local * min(context, w) + (m.num_layers - local) * context)
    return 2.0 * m.num_layers * m.num_attention_heads * context * (m.dim_head + m.v_head_dim)


def causal_score_flops(m: ModelSpec, start: int, new: int) -> float:
    """Score FLOPs for ``new`` query positions after ``start`` cached ones (causal).

    Position i (0-based) attends to i+1 keys: sum over i in [start, start+new).
    With a window w the context of position i is min(i+1, w) on the layers that have it.
    """
    local = m.local_layers
    if 0 < local < m.num_layers:
        per_layer = 2.0 * m.num_attention_heads * (m.dim_head + m.v_head_dim)
        windowed, full = _causal_contexts(start, new, m.sliding_window), _causal_contexts(start, new, None)
        return per_layer * (local * windowed + (m.num_layers - local) * full)
    total_ctx = _causal_contexts(start, new, m.sliding_window)
    return 2.0 * m.num_layers * m.num_attention_heads * total_ctx * (m.dim_head + m.v_head_dim)


def _causal_contexts(start: int, new: int, w: int | None) -> float:
    """Keys attended to, summed over positions ``start .. start+new-1``, each over min(i+1, w)."""
    lo, hi = start + 1, start + new  # contexts
    if w is None or hi <= w:
        return (lo + hi) * new / 2.0
    if lo >= w:
        return float(w) * new
    below = w - lo + 1  # contexts lo..w
    return (lo + w) * below / 2.0 + float(w) * (new - below)


def forward_flops_training(m: ModelSpec, tokens: float, seq_len: int) -> tuple[float, float]:
    """(dense, attention-score) forward FLOPs for ``tokens`` tokens in sequences of ``seq_len``.

    Full s x s score matrix, as Narayanan et al. 2021 eq. 3 counts it.
    """
    return tokens * token_flops(m).dense, tokens * score_flops_per_query(m, seq_len)


__all__ = [
    "TokenFlops",
    "causal_score_flops",
    "forward_flops_training",
    "layer_dense_flops",
    "score_flops_per_query",
    "token_flops",
]


OPERATORS_PER_LAYER = 20
"""Operators one transformer layer launches in a forward pass in eager mode: two norms, four
attention projections, the score matmul, mask, softmax and value matmul with their reshapes, the
MLP's linears and activation, two residual adds (a count of the reference decoder in
``aitrinity.systems.torch_models``). Backward launches about twice as many."""
