"""Hugging Face config.json ingestion for the 2025-2026 model types: the same architecture, and so the same
parameter counts, as the catalog entries written from the published configs."""

import importlib.resources
import json

import pytest

from aitrinity import catalog
from aitrinity.catalog.hf import from_hf_config
from aitrinity.cost.params import count
from aitrinity.errors import SpecError

# the architecture keys of Qwen/Qwen3-235B-A22B and Qwen/Qwen3-32B config.json (as published)
QWEN3_MOE = {
    "model_type": "qwen3_moe",
    "hidden_size": 4096,
    "num_hidden_layers": 94,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "use_sliding_window": False,
    "sliding_window": None,
}
QWEN3 = {
    "model_type": "qwen3",
    "hidden_size": 5120,
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 25600,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "use_sliding_window": False,
}


@pytest.mark.parametrize(("cfg", "name"), [(QWEN3_MOE, "qwen3-235b-a22b"), (QWEN3, "qwen3-32b")])
def test_qwen3_configs_give_the_catalog_architecture(cfg, name):
    got, want = from_hf_config(cfg, name), catalog.model(name)
    assert count(got) == count(want)
    assert count(got).active(got) == pytest.approx(count(want).active(want))


def test_qwen3_235b_counts_match_the_model_card():
    m = catalog.model("qwen3-235b-a22b")
    c = count(m)
    assert c.total == pytest.approx(235e9, rel=0.005)  # "235B in total"
    assert c.active(m) == pytest.approx(22e9, rel=0.01)  # "22B activated" (rounded to a billion)


def test_dense_layers_of_qwen3_moe_must_come_first():
    first = from_hf_config({**QWEN3_MOE, "mlp_only_layers": [0, 1]}, "q")
    assert first.moe is not None and first.moe.first_dense_layers == 2
    with pytest.raises(SpecError, match="interleaved dense and MoE layers"):
        from_hf_config({**QWEN3_MOE, "mlp_only_layers": [3, 7]}, "q")
    with pytest.raises(SpecError, match="decoder_sparse_step"):
        from_hf_config({**QWEN3_MOE, "decoder_sparse_step": 2}, "q")


def test_kimi_k2_reads_as_deepseek_v3():
    """Kimi-K2 ships DeepSeek-V3's architecture under its own model_type: the same keys give the same model."""
    v3 = catalog.model("deepseek-v3")
    cfg = {
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "topk_method": "noaux_tc",
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
    }
    a = from_hf_config({**cfg, "model_type": "deepseek_v3"}, "a")
    b = from_hf_config({**cfg, "model_type": "kimi_k2"}, "b")
    assert count(a) == count(b) == count(v3)
    # its published fp8 checkpoint scales weights per 128 x 128 block: an fp8 plan runs the block-scaled kernels
    fp8 = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    c = from_hf_config({**cfg, "model_type": "kimi_k2", "quantization_config": fp8}, "c")
    assert c.fp8_weight_block == 128 and b.fp8_weight_block is None
    assert catalog.model("kimi-k2").fp8_weight_block == catalog.model("deepseek-r1").fp8_weight_block == 128


GPT_OSS = {
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_hidden_layers": 36,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "attention_bias": True,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
}
GEMMA3 = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_hidden_layers": 62,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
    },
}


@pytest.mark.parametrize(("cfg", "name"), [(GPT_OSS, "gpt-oss-120b"), (GEMMA3, "gemma-3-27b")])
def test_local_global_attention_configs_give_the_catalog_architecture(cfg, name):
    got, want = from_hf_config(cfg, name), catalog.model(name)
    assert count(got) == count(want)
    assert got.local_layers == want.local_layers and got.sliding_window == want.sliding_window


def test_gpt_oss_120b_counts_match_the_model_card():
    m = catalog.model("gpt-oss-120b")
    c = count(m)
    assert c.total == pytest.approx(116.83e9, rel=0.0005)
    assert c.active(m) - c.embedding == pytest.approx(5.13e9, rel=0.005)  # the card counts no input embedding
    assert m.local_layers == 18


def test_gemma3_local_layers_follow_the_pattern_when_the_config_lists_no_layer_types():
    m = from_hf_config(GEMMA3, "g")
    assert m.local_layers == 62 - 62 // 6 == 52
    listed = {**GEMMA3["text_config"], "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
    assert from_hf_config({"model_type": "gemma3", "text_config": listed}, "g").local_layers == 5


# The released configs aiconfigurator-core ships (model_configs/, Apache-2.0; a dev dependency): the catalog's
# YAML facts must be what those configs say, parameter for parameter.
SHIPPED = {
    "deepseek-v3": "deepseek-ai--DeepSeek-V3",
    "deepseek-r1": "deepseek-ai--DeepSeek-R1",
    "kimi-k2": "moonshotai--Kimi-K2-Instruct",
    "qwen3-32b": "Qwen--Qwen3-32B",
    "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B",
    "gpt-oss-120b": "openai--gpt-oss-120b",
    "llama-3.1-8b": "meta-llama--Meta-Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama--Meta-Llama-3.1-70B",
    "llama-3.1-405b": "meta-llama--Meta-Llama-3.1-405B",
    "mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1",
    "llama-4-maverick": "meta-llama--Llama-4-Maverick-17B-128E-Instruct",
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_catalog_entries_match_the_released_configs(name):
    path = importlib.resources.files("aiconfigurator_core") / "model_configs" / f"{SHIPPED[name]}_config.json"
    shipped = from_hf_config(json.loads(path.read_text()), name)
    entry = catalog.model(name)
    assert count(shipped).total == count(entry).total
    assert count(shipped).active(shipped) == count(entry).active(entry)
    fields = ("num_layers", "hidden_size", "num_attention_heads", "kv_heads", "vocab_size", "moe", "mla")
    for field in (*fields, "intermediate_size", "local_layers", "sliding_window", "mtp_layers"):
        assert getattr(shipped, field) == getattr(entry, field), field


def _shipped(stem):
    path = importlib.resources.files("aiconfigurator_core") / "model_configs" / f"{stem}_config.json"
    return json.loads(path.read_text())


def test_llama4_interleaves_moe_and_dense_layers_as_the_config_says():
    """Maverick: every 2nd layer MoE (128 experts, top-1, a shared expert), the rest dense MLPs of 16384 -- 400.7B
    parameters (the card: 400B total, 17B active; its vision tower is not counted here); Scout: all 48 layers MoE
    with 16 experts, 107.8B of the card's 109B (the rest is the vision tower)."""
    mav = from_hf_config(_shipped("meta-llama--Llama-4-Maverick-17B-128E-Instruct"), "maverick")
    assert (mav.num_moe_layers, mav.num_dense_layers, mav.moe.layer_step) == (24, 24, 2)
    assert count(mav).total == pytest.approx(400e9, rel=0.005)
    assert count(mav).active(mav) == pytest.approx(17e9, rel=0.02)  # "17B" rounded
    scout = from_hf_config(_shipped("meta-llama--Llama-4-Scout-17B-16E-Instruct"), "scout")
    assert (scout.num_moe_layers, scout.num_dense_layers) == (48, 0)
    assert count(scout).total == pytest.approx(107.77e9, rel=0.001)
    assert count(scout).active(scout) == pytest.approx(count(mav).active(mav), rel=0.001)  # same 17B path
    # a pipeline stage holds the MoE layers that fall in it: 6 of 12 on each of 4 stages
    from aitrinity.cost.training import stage_layers

    assert [stage_layers(mav, 4, s) for s in range(4)] == [(6, 6)] * 4


def test_minimax_m2_is_read_from_its_config():
    """MiniMax-M2.5: 62 layers, GQA 48/8 heads of 128, 256 routed experts of 1536 with top-8 and a routing bias:
    228.7B parameters, 11.0B active (the card's "230B total, 10B active" counts differently; its MTP modules are
    not counted)."""
    m = from_hf_config(_shipped("MiniMaxAI--MiniMax-M2.5"), "minimax")
    assert (m.num_layers, m.kv_heads, m.moe.num_experts, m.moe.experts_per_token) == (62, 8, 256, 8)
    assert m.moe.router_bias and m.moe.num_shared_experts == 0
    assert count(m).total == pytest.approx(228.69e9, rel=0.001)


@pytest.mark.parametrize(
    "stem, total",
    [("nvidia--GLM-5-NVFP4", 743.91e9), ("deepseek-ai--DeepSeek-V3.2", 671.88e9)],
)
def test_sparse_attention_models_count_their_indexer(stem, total):
    """GLM-5 (glm_moe_dsa) and DeepSeek-V3.2 (deepseek_v32): DeepSeek-V3's MLA and MoE keys plus DeepSeek Sparse
    Attention's lightning indexer (per layer: wq_b q_lora x heads x dim, wk hidden x dim, a LayerNorm, weights
    hidden x heads). GLM-5: 743.9B with the indexer's 0.73B; DeepSeek-V3.2: DeepSeek-V3's 671.0B plus 0.84B."""
    m = from_hf_config(_shipped(stem), "m")
    assert m.mla.sparse and m.mla.index_topk == 2048 and m.mla.index_head_dim == 128
    assert count(m).total == pytest.approx(total, rel=1e-4)
    dense = m.model_copy(
        update={"mla": m.mla.model_copy(update={"index_heads": None, "index_head_dim": None, "index_topk": None})}
    )
    c = m.mla
    per_layer = c.q_lora_rank * c.index_heads * c.index_head_dim + m.hidden_size * (c.index_head_dim + c.index_heads)
    assert count(m).total - count(dense).total == m.num_layers * (per_layer + 2 * c.index_head_dim)


@pytest.mark.parametrize(
    "stem, text_model",
    [
        ("Qwen--Qwen3-VL-8B-Instruct", "qwen3-8b"),
        ("Qwen--Qwen3-VL-32B-Instruct", "qwen3-32b"),
        ("Qwen--Qwen3-VL-30B-A3B-Instruct", "qwen3-30b-a3b"),
        ("Qwen--Qwen3-VL-235B-A22B-Instruct", "qwen3-235b-a22b"),
    ],
)
def test_qwen3_vl_reads_its_text_model_as_qwen3(stem, text_model):
    """Qwen3-VL (qwen3_vl, qwen3_vl_moe): the text model in ``text_config`` is Qwen3's of the same size, layer for
    layer; the vision tower is not counted."""
    vl, entry = from_hf_config(_shipped(stem), "vl"), catalog.model(text_model)
    fields = ("num_layers", "hidden_size", "num_attention_heads", "kv_heads", "dim_head", "intermediate_size", "moe")
    assert [getattr(vl, f) for f in fields] == [getattr(entry, f) for f in fields]
    assert count(vl).total == count(entry).total and vl.max_seq_len == 262144


def test_a_vision_wrappers_outer_keys_reach_its_text_model():
    """Tied embeddings and quantization may sit outside ``text_config`` (Qwen3-VL-2B ties them at both levels)."""
    cfg = _shipped("Qwen--Qwen3-VL-2B-Instruct")
    assert from_hf_config(cfg, "vl").tie_embeddings
    text = {k: v for k, v in cfg["text_config"].items() if k != "tie_word_embeddings"}
    assert from_hf_config({**cfg, "text_config": text}, "vl").tie_embeddings  # the outer key alone
    untied = {**cfg["text_config"], "tie_word_embeddings": False}
    assert from_hf_config({**cfg, "text_config": untied}, "vl").tie_embeddings  # the wrapper's wins (it ties lm_head)
    with pytest.raises(SpecError, match="text_config"):
        from_hf_config({"model_type": "qwen3_vl"}, "vl")
