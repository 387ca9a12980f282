"""Transformer model inputs (dense, GQA, MoE, MLA, sliding window).

Parameter counts are *derived* from these fields (``aitrinity.cost.params``);
``reference_params`` is only the published figure used to validate them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from aitrinity.spec._base import Spec


class MoESpec(Spec):
    """Mixture of experts in the MLP (Switch / GShard / DeepSeekMoE style)."""

    num_experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0)
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = Field(default=0, ge=0)
    first_dense_layers: int = Field(default=0, ge=0)
    layer_step: int = Field(default=1, ge=1)
    """After the first dense layers, every ``layer_step``-th layer is MoE and the others dense (Llama 4
    Maverick's ``interleave_moe_layer_step: 2``: layers 1, 3, 5, ... are MoE)."""
    router_bias: bool = False

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) exceeds num_experts ({self.num_experts})")
        return self


class MLASpec(Spec):
    """Multi-head latent attention (DeepSeek-V2 §2.1): low-rank joint KV compression.

    The KV cache holds ``kv_lora_rank + qk_rope_head_dim`` values per token per layer.
    """

    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)
    index_heads: int | None = Field(default=None, gt=0)
    """DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the lightning indexer's heads; it scores every cached token
    with ``index_head_dim``-wide fp8 keys, and each query attends only the ``index_topk`` best."""
    index_head_dim: int | None = Field(default=None, gt=0)
    index_topk: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> MLASpec:
        given = [x is not None for x in (self.index_heads, self.index_head_dim, self.index_topk)]
        if any(given) and not all(given):
            raise ValueError("index_heads, index_head_dim and index_topk come together (DeepSeek Sparse Attention)")
        if any(given) and self.q_lora_rank is None:
            raise ValueError("the sparse-attention indexer projects from the query's low-rank latent: q_lora_rank")
        return self

    @property
    def sparse(self) -> bool:
        return self.index_topk is not None


class ModelSpec(Spec):
    """A decoder-only transformer."""

    name: str
    source: str
    family: str = ""
    hf_ids: list[str] = []
    aliases: list[str] = []
    reference_params: float | None = Field(default=None, gt=0)
    reference_source: str | None = None

    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_seq_len: int = Field(gt=0)

    mlp: Literal["gated", "standard"] = "gated"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    qkv_bias: bool = False
    linear_bias: bool = False
    position: Literal["rope", "learned"] = "rope"
    learned_positions: int = Field(default=0, ge=0)
    tie_embeddings: bool = False
    sliding_window: int | None = Field(default=None, gt=0)
    sliding_window_layers: int | None = Field(default=None, ge=0)
    """How many layers attend within ``sliding_window`` (local); the others attend to the whole context
    (global). None: every layer (Mistral). Gemma 2 and gpt-oss alternate (half), Gemma 3 has five local
    layers to one global; the cost model needs the count, not the order."""
    dropout: bool = False
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    fp8_weight_block: int | None = Field(default=None, gt=0)
    """The block of its published fp8 checkpoint's weight scales (``config.json``'s
    ``quantization_config.weight_block_size``: 128 x 128 for DeepSeek-V3 / R1 and Kimi-K2); None: no such
    checkpoint, or per-tensor scales. An fp8 plan of such a model runs the engines' block-scaled kernels."""
    mtp_layers: int = Field(default=0, ge=0, le=16)
    """Multi-token-prediction modules (DeepSeek-V3 report, §2.2; ``config.json``'s ``num_nextn_predict_layers``): each
    predicts one more future token from the previous depth's last hidden state and that token's embedding -- an
    RMSNorm of each, a ``2h x h`` projection, one transformer block like the model's deepest and the shared output
    head. Training trains them beside the model, on its last pipeline stage; serving loads them only as a speculative
    decoder's draft (``speculative-decoding`` with ``draft_layers``). The published totals leave them out
    (DeepSeek-V3: 671B parameters without its 14B module), and so does the parameter count."""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.num_attention_heads % self.kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads ({self.kv_heads})"
            )
        if self.head_dim is None and self.mla is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                f"({self.num_attention_heads}); give head_dim explicitly"
            )
        if self.position == "learned" and self.learned_positions == 0:
            raise ValueError("position 'learned' needs learned_positions (rows of the position table)")
        if self.moe and self.moe.first_dense_layers > self.num_layers:
            raise ValueError("moe.first_dense_layers exceeds num_layers")
        if self.sliding_window_layers is not None:
            if self.sliding_window is None:
                raise ValueError("sliding_window_layers needs sliding_window")
            if self.sliding_window_layers > self.num_layers:
                raise ValueError("sliding_window_layers exceeds num_layers")
        return self

    @property
    def local_layers(self) -> int:
        """Layers attending within the sliding window (0 without one)."""
        if self.sliding_window is None:
            return 0
        return self.num_layers if self.sliding_window_layers is None else self.sliding_window_layers

    # ------------------------------------------------------------------ derived shapes
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def dim_head(self) -> int:
        """Query/key head dimension (for MLA: nope + rope)."""
        if self.mla:
            return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def v_head_dim(self) -> int:
        return self.mla.v_head_dim if self.mla else self.dim_head

    @property
    def num_moe_layers(self) -> int:
        return self.moe_layers_below(self.num_layers)

    def moe_layers_below(self, layer: int) -> int:
        """MoE layers among layers ``[0, layer)``: after ``first_dense_layers``, every ``layer_step``-th one."""
        if not self.moe:
            return 0
        return max(layer - self.moe.first_dense_layers, 0) // self.moe.layer_step

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def attention_kind(self) -> str:
        if self.mla:
            return "MLA"
        if self.kv_heads == 1:
            return "MQA"
        return "GQA" if self.kv_heads < self.num_attention_heads else "MHA"
