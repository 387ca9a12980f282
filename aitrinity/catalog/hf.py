"""Read a local Hugging Face ``config.json`` into a :class:`ModelSpec`.

Only the architecture matters; no weights are read and nothing is downloaded.
Supported ``model_type``: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe (dense layers, if any, first),
gemma2, gemma3 / gemma3_text (the text model; local and global attention layers), gpt_oss (MoE with biases,
alternating sliding-window layers; attention sinks not counted), opt, gpt2, deepseek_v2, deepseek_v3 and
kimi_k2 (DeepSeek-V3's architecture and keys; deepseek_v32 and GLM-5's glm_moe_dsa add DeepSeek Sparse Attention's
indexer), kimi_k25 (Kimi-K2.5 and its successors: Kimi-K2's text model in ``text_config`` beside a vision tower),
qwen3_vl / qwen3_vl_moe (Qwen3-VL: a Qwen3 / Qwen3-MoE text model in ``text_config``),
llama4 / llama4_text (the text model: interleaved MoE layers with a
shared expert, chunked local attention as a sliding window) and minimax_m2 (GQA, 256 routed experts with a routing
bias). Vision towers are not counted.
"""

from __future__ import annotations

from typing import Any

from aitrinity.errors import SpecError
from aitrinity.spec._base import validate
from aitrinity.spec.model import ModelSpec

_DEEPSEEK = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa")
_LLAMA_LIKE = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", *_DEEPSEEK}
_GEMMA = {"gemma2", "gemma3", "gemma3_text"}
_VISION_WRAPPED: dict[str, str | None] = {"kimi_k25": None, "qwen3_vl": "qwen3", "qwen3_vl_moe": "qwen3_moe"}
"""A vision-language wrapper -> the architecture of the text model in its ``text_config`` (None: the text config
names its own, Kimi-K2's ``kimi_k2``). Qwen3-VL's text model is Qwen3's (dense or MoE) layer for layer: its
interleaved multimodal RoPE and DeepStack visual inputs act only on image and video tokens."""


def _req(cfg: dict[str, Any], key: str, where: str) -> Any:
    if key not in cfg:
        raise SpecError(key, None, "a value (required by this model_type)", source=where, missing=True)
    return cfg[key]


def from_hf_config(cfg: dict[str, Any], name: str, where: str = "config.json") -> ModelSpec:
    """Map a transformers config dict to our schema (pure; the caller reads the file)."""
    mtype = cfg.get("model_type")
    if mtype in _VISION_WRAPPED:  # the text model sits in text_config; the wrapper's quantization and tying win
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise SpecError("text_config", text, f"the text model's config ({mtype})", source=where)
        outer: dict[str, Any] = {
            k: cfg[k] for k in ("quantization_config", "tie_word_embeddings", "_name_or_path") if k in cfg
        }
        inner = _VISION_WRAPPED[mtype]
        return from_hf_config({**text, **outer, **({"model_type": inner} if inner else {})}, name, where)
    if mtype in _LLAMA_LIKE:
        data = _llama_like(cfg, mtype, where)
    elif mtype == "opt":
        data = _opt(cfg, where)
    elif mtype == "gpt2":
        data = _gpt2(cfg, where)
    elif mtype in _GEMMA:
        data = _gemma(cfg.get("text_config", cfg) if mtype == "gemma3" else cfg, mtype, where)
    elif mtype == "gpt_oss":
        data = _gpt_oss(cfg, where)
    elif mtype in ("llama4", "llama4_text"):
        data = _llama4(cfg.get("text_config", cfg) if mtype == "llama4" else cfg, where)
    elif mtype == "minimax_m2":
        data = _minimax_m2(cfg, where)
    else:
        known = sorted(
            _LLAMA_LIKE
            | _GEMMA
            | set(_VISION_WRAPPED)
            | {"gpt_oss", "opt", "gpt2", "llama4", "llama4_text", "minimax_m2"}
        )
        raise SpecError("model_type", mtype, f"one of {known}", source=where)
    data.update(name=name, source=f"Hugging Face config ({where})", hf_ids=[cfg.get("_name_or_path") or name])
    if cfg.get("num_nextn_predict_layers"):  # DeepSeek-V3 / R1, GLM-4.5: multi-token-prediction modules
        data["mtp_layers"] = cfg["num_nextn_predict_layers"]  # validated with the rest (an integer 0..16)
    q = cfg.get("quantization_config")
    if isinstance(q, dict) and q.get("quant_method") == "fp8" and q.get("weight_block_size"):
        block = q["weight_block_size"]  # [128, 128]: the checkpoint's fp8 weights carry a scale per block
        data["fp8_weight_block"] = block[0] if isinstance(block, list) else block
    return validate(ModelSpec, data, source=where)


def _llama_like(cfg: dict[str, Any], mtype: str, where: str) -> dict[str, Any]:
    data: dict[str, Any] = {
        "family": mtype,
        "num_layers": _req(cfg, "num_hidden_layers", where),
        "hidden_size": _req(cfg, "hidden_size", where),
        "num_attention_heads": _req(cfg, "num_attention_heads", where),
        "num_kv_heads": cfg.get("num_key_value_heads"),
        "intermediate_size": _req(cfg, "intermediate_size", where),
        "vocab_size": _req(cfg, "vocab_size", where),
        "max_seq_len": cfg.get("max_position_embeddings", 4096),
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "qkv_bias": bool(cfg.get("attention_bias", mtype == "qwen2")),
    }
    if cfg.get("head_dim") and mtype not in _DEEPSEEK:
        data["head_dim"] = cfg["head_dim"]
    window = cfg.get("sliding_window")
    if window and (mtype == "mistral" or cfg.get("use_sliding_window")):
        data["sliding_window"] = window
    if mtype == "mixtral":
        data["moe"] = {
            "num_experts": _req(cfg, "num_local_experts", where),
            "experts_per_token": _req(cfg, "num_experts_per_tok", where),
            "expert_intermediate_size": cfg["intermediate_size"],
        }
    if mtype == "qwen3_moe":
        data["moe"] = _qwen3_moe(cfg, where)
    if mtype in _DEEPSEEK:
        data["moe"] = {
            "num_experts": _req(cfg, "n_routed_experts", where),
            "experts_per_token": _req(cfg, "num_experts_per_tok", where),
            "expert_intermediate_size": _req(cfg, "moe_intermediate_size", where),
            "num_shared_experts": cfg.get("n_shared_experts", 0) or 0,
            "first_dense_layers": cfg.get("first_k_dense_replace", 0),
            "router_bias": cfg.get("topk_method") == "noaux_tc",
        }
        data["mla"] = {
            "q_lora_rank": cfg.get("q_lora_rank"),
            "kv_lora_rank": _req(cfg, "kv_lora_rank", where),
            "qk_nope_head_dim": _req(cfg, "qk_nope_head_dim", where),
            "qk_rope_head_dim": _req(cfg, "qk_rope_head_dim", where),
            "v_head_dim": _req(cfg, "v_head_dim", where),
        }
        if cfg.get("index_topk"):  # DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5)
            data["mla"].update(
                index_heads=_req(cfg, "index_n_heads", where),
                index_head_dim=_req(cfg, "index_head_dim", where),
                index_topk=cfg["index_topk"],
            )
    return data


def _local_layers(cfg: dict[str, Any], layers: int, every: int) -> int:
    """Layers with sliding-window attention: counted from ``layer_types`` when the config lists them, else
    all but every ``every``-th layer (Gemma 2 and gpt-oss alternate: 2; Gemma 3: ``sliding_window_pattern``)."""
    types = cfg.get("layer_types")
    if types:
        return sum(1 for t in types if t == "sliding_attention")
    return layers - layers // every


def _gemma(cfg: dict[str, Any], mtype: str, where: str) -> dict[str, Any]:
    """Gemma 2 / 3 text models: GeGLU MLP, tied embeddings, local sliding-window layers between global ones
    (per-head q/k norms and the extra pre/post norms are not counted: under 0.01% of the parameters)."""
    layers = _req(cfg, "num_hidden_layers", where)
    every = 2 if mtype == "gemma2" else int(cfg.get("sliding_window_pattern", 6))
    data = _llama_like({**cfg, "tie_word_embeddings": cfg.get("tie_word_embeddings", True)}, mtype, where)
    data["head_dim"] = _req(cfg, "head_dim", where)
    data["sliding_window"] = _req(cfg, "sliding_window", where)
    data["sliding_window_layers"] = _local_layers(cfg, layers, every)
    return data


def _gpt_oss(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """gpt-oss: every layer MoE (experts of ``intermediate_size`` with biases, a biased router), biased
    attention, sliding-window and full attention alternating; the attention sinks (one scalar per head and
    layer) are not counted."""
    layers = _req(cfg, "num_hidden_layers", where)
    bias = bool(cfg.get("attention_bias", True))
    data = _llama_like({**cfg, "attention_bias": bias}, "gpt_oss", where)
    data.update(
        head_dim=_req(cfg, "head_dim", where),
        qkv_bias=bias,
        linear_bias=bias,
        sliding_window=_req(cfg, "sliding_window", where),
        sliding_window_layers=_local_layers(cfg, layers, 2),
        moe={
            "num_experts": _req(cfg, "num_local_experts", where),
            "experts_per_token": _req(cfg, "num_experts_per_tok", where),
            "expert_intermediate_size": _req(cfg, "intermediate_size", where),
            "router_bias": True,
        },
    )
    return data


def _llama4(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """Llama 4's text model: every ``interleave_moe_layer_step``-th layer MoE (routed experts of
    ``intermediate_size`` plus one shared expert of that size), the others dense MLPs of ``intermediate_size_mlp``;
    three layers in four attend within chunks of ``attention_chunk_size`` tokens (priced as a sliding window of
    that size), the fourth globally (no RoPE)."""
    layers = _req(cfg, "num_hidden_layers", where)
    data = _llama_like({**cfg, "intermediate_size": _req(cfg, "intermediate_size_mlp", where)}, "llama4", where)
    data["head_dim"] = _req(cfg, "head_dim", where)
    data["moe"] = {
        "num_experts": _req(cfg, "num_local_experts", where),
        "experts_per_token": _req(cfg, "num_experts_per_tok", where),
        "expert_intermediate_size": _req(cfg, "intermediate_size", where),
        "num_shared_experts": 1,
        "layer_step": int(cfg.get("interleave_moe_layer_step", 1)),
    }
    chunk = cfg.get("attention_chunk_size")
    if chunk:
        nope = cfg.get("no_rope_layers")  # 1: a chunked RoPE layer, 0: a global NoPE one (transformers' layout)
        data["sliding_window"] = chunk
        data["sliding_window_layers"] = sum(nope) if nope else layers - layers // 4
    return data


def _minimax_m2(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """MiniMax-M2: GQA attention, every layer MoE (routed experts of ``intermediate_size``, a routing-score bias,
    no shared expert); the per-layer q/k norms and the multi-token-prediction modules are not counted."""
    data = _llama_like(cfg, "minimax_m2", where)
    data["head_dim"] = _req(cfg, "head_dim", where)
    data["moe"] = {
        "num_experts": _req(cfg, "num_local_experts", where),
        "experts_per_token": _req(cfg, "num_experts_per_tok", where),
        "expert_intermediate_size": _req(cfg, "intermediate_size", where),
        "router_bias": bool(cfg.get("use_routing_bias", False)),
    }
    if cfg.get("shared_intermediate_size"):
        raise SpecError("shared_intermediate_size", cfg["shared_intermediate_size"], "0", source=where)
    return data


def _qwen3_moe(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """Qwen3-MoE: routed experts (no shared one) in every layer but ``mlp_only_layers``; those must be the
    first layers (``first_dense_layers``), the only dense/MoE mix the model spec expresses."""
    dense = sorted(cfg.get("mlp_only_layers") or [])
    step = cfg.get("decoder_sparse_step", 1)
    if step != 1 or dense != list(range(len(dense))):
        raise SpecError(
            "mlp_only_layers",
            {"mlp_only_layers": dense, "decoder_sparse_step": step},
            "dense layers only at the start (decoder_sparse_step 1): interleaved dense and MoE layers are not "
            "expressible yet",
            source=where,
        )
    return {
        "num_experts": _req(cfg, "num_experts", where),
        "experts_per_token": _req(cfg, "num_experts_per_tok", where),
        "expert_intermediate_size": _req(cfg, "moe_intermediate_size", where),
        "first_dense_layers": len(dense),
    }


def _opt(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    if cfg.get("word_embed_proj_dim", cfg.get("hidden_size")) != cfg.get("hidden_size"):
        raise SpecError("word_embed_proj_dim", cfg["word_embed_proj_dim"], "equal to hidden_size", source=where)
    positions = _req(cfg, "max_position_embeddings", where)
    return {
        "family": "opt",
        "num_layers": _req(cfg, "num_hidden_layers", where),
        "hidden_size": _req(cfg, "hidden_size", where),
        "num_attention_heads": _req(cfg, "num_attention_heads", where),
        "intermediate_size": _req(cfg, "ffn_dim", where),
        "vocab_size": _req(cfg, "vocab_size", where),
        "max_seq_len": positions,
        "mlp": "standard",
        "norm": "layernorm",
        "qkv_bias": bool(cfg.get("enable_bias", True)),
        "linear_bias": bool(cfg.get("enable_bias", True)),
        "position": "learned",
        "learned_positions": positions + 2,  # OPTLearnedPositionalEmbedding keeps an offset of 2
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", True)),
        "dropout": bool(cfg.get("dropout", 0.1)),
    }


def _gpt2(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    h = _req(cfg, "n_embd", where)
    positions = _req(cfg, "n_positions", where)
    return {
        "family": "gpt2",
        "num_layers": _req(cfg, "n_layer", where),
        "hidden_size": h,
        "num_attention_heads": _req(cfg, "n_head", where),
        "intermediate_size": cfg.get("n_inner") or 4 * h,
        "vocab_size": _req(cfg, "vocab_size", where),
        "max_seq_len": positions,
        "mlp": "standard",
        "norm": "layernorm",
        "qkv_bias": True,
        "linear_bias": True,
        "position": "learned",
        "learned_positions": positions,
        "tie_embeddings": True,
        "dropout": True,
    }
