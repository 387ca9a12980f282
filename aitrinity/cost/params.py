"""Parameter counts derived from the architecture (never typed in).

Per layer (weights ``W`` and biases ``b``; h hidden, a heads, g KV heads, d head dim):

* attention (MHA/GQA/MQA): ``W_q h·a·d + W_k, W_v 2·h·g·d + W_o a·d·h`` (+ biases)
* attention (MLA, DeepSeek-V2 §2.1 / V3 config): ``W_DQ h·r_q + W_UQ r_q·a·(d_n+d_r)
  + W_DKV h·(r_kv+d_r) + W_UKV r_kv·a·(d_n+d_v) + W_O a·d_v·h`` plus the two
  latent RMSNorms ``r_q + r_kv``
* MLP: gated (SwiGLU, Shazeer 2020) ``3·h·f``; standard (GELU) ``2·h·f`` (+ biases)
* MoE: ``E`` routed experts of ``3·h·f_e`` + shared experts + router ``h·E`` (+ ``E`` bias)
* norms: RMSNorm ``h`` each, LayerNorm ``2h`` each, two per layer plus a final one
* embeddings ``V·h`` (+ learned positions ``P·h``); LM head ``V·h`` unless tied.
"""

from __future__ import annotations

from dataclasses import dataclass

from aitrinity.spec.model import ModelSpec


def norm_params(m: ModelSpec, width: int) -> int:
    return width * (2 if m.norm == "layernorm" else 1)


def attention_params(m: ModelSpec) -> int:
    """Weights (+ biases) of one attention block, norms inside MLA included."""
    h, a = m.hidden_size, m.num_attention_heads
    if m.mla:
        c = m.mla
        dqk = c.qk_nope_head_dim + c.qk_rope_head_dim
        q = h * c.q_lora_rank + c.q_lora_rank + c.q_lora_rank * a * dqk if c.q_lora_rank else h * a * dqk
        kv = h * (c.kv_lora_rank + c.qk_rope_head_dim) + c.kv_lora_rank
        kv += c.kv_lora_rank * a * (c.qk_nope_head_dim + c.v_head_dim)
        index = 0
        if c.sparse and c.index_heads and c.index_head_dim and c.q_lora_rank:  # the indexer's wq_b, wk, k-norm, weights
            ih, d = c.index_heads, c.index_head_dim
            index = c.q_lora_rank * ih * d + h * d + 2 * d + h * ih
        return q + kv + a * c.v_head_dim * h + index
    d, g = m.dim_head, m.kv_heads
    weights = h * a * d + 2 * h * g * d + a * d * h
    bias = (a * d + 2 * g * d) * m.qkv_bias + h * m.linear_bias
    return weights + bias


def mlp_params(m: ModelSpec, ffn: int) -> int:
    """One MLP (dense or one expert) of intermediate width ``ffn``."""
    h = m.hidden_size
    if m.mlp == "gated":
        return 3 * h * ffn + (2 * ffn + h) * m.linear_bias
    return 2 * h * ffn + (ffn + h) * m.linear_bias


@dataclass(frozen=True)
class ParamCount:
    """Parameters of a model by part; ``active`` is what one token touches (MoE)."""

    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    routed_experts: int
    shared_experts: int
    router: int
    norms: int

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.dense_mlp
            + self.routed_experts
            + self.shared_experts
            + self.router
            + self.norms
        )

    @property
    def non_expert(self) -> int:
        """Everything replicated across expert-parallel ranks."""
        return self.total - self.routed_experts

    def active(self, m: ModelSpec) -> float:
        """Parameters used per token: routed experts count ``k/E`` of their total."""
        frac = m.moe.experts_per_token / m.moe.num_experts if m.moe else 0.0
        return self.non_expert + self.routed_experts * frac


def count(m: ModelSpec) -> ParamCount:
    h, L = m.hidden_size, m.num_layers
    moe_layers, dense_layers = m.num_moe_layers, m.num_dense_layers
    routed = shared = router = 0
    if m.moe:
        e = m.moe
        routed = moe_layers * e.num_experts * mlp_params(m, e.expert_intermediate_size)
        shared = moe_layers * e.num_shared_experts * mlp_params(m, e.expert_intermediate_size)
        router = moe_layers * (h * e.num_experts + e.num_experts * e.router_bias)
    return ParamCount(
        embedding=m.vocab_size * h + m.learned_positions * h,
        lm_head=0 if m.tie_embeddings else m.vocab_size * h,
        attention=L * attention_params(m),
        dense_mlp=dense_layers * mlp_params(m, m.intermediate_size),
        routed_experts=routed,
        shared_experts=shared,
        router=router,
        norms=(2 * L + 1) * norm_params(m, h),
    )


def weight_matrices(m: ModelSpec) -> list[tuple[int, int, int]]:
    """2-D weight matrices as (rows, cols, how many): what low-rank compressors (PowerSGD) see."""
    h, a, g, d, dv = m.hidden_size, m.num_attention_heads, m.kv_heads, m.dim_head, m.v_head_dim
    L = m.num_layers
    out: list[tuple[int, int, int]] = [(m.vocab_size, h, 1 if m.tie_embeddings else 2)]
    if m.mla:
        c = m.mla
        q = [(h, c.q_lora_rank, L), (c.q_lora_rank, a * d, L)] if c.q_lora_rank else [(h, a * d, L)]
        out += [*q, (h, c.kv_lora_rank + c.qk_rope_head_dim, L), (c.kv_lora_rank, a * (c.qk_nope_head_dim + dv), L)]
    else:
        out += [(h, a * d, L), (h, g * d, 2 * L)]
    out.append((a * dv, h, L))
    per_mlp = 3 if m.mlp == "gated" else 2
    if m.num_dense_layers:
        out.append((h, m.intermediate_size, per_mlp * m.num_dense_layers))
    if m.moe:
        e = m.moe
        out.append((h, e.expert_intermediate_size, per_mlp * m.num_moe_layers * (e.num_experts + e.num_shared_experts)))
        out.append((h, e.num_experts, m.num_moe_layers))
    return out
