"""Hugging Face config.json ingestion for the 2025-2026 model types: the same architecture, and so the same
parameter counts, as the catalog entries written from the published configs."""

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
