"""Validation against published memory figures; units and tolerances stated per test."""

import pytest

from aitrinity import catalog
from aitrinity.cost.memory import (
    korthikanti_coefficient,
    kv_bytes_per_token,
    kv_shard_factor,
    kv_tokens_held,
    layer_activation_bytes,
    layer_activations,
    model_states,
)
from aitrinity.spec.scenario import Plan

GB = 1e9  # the ZeRO paper's Figure 1 uses decimal GB: 16 x 7.5e9 B = 120 GB


@pytest.mark.parametrize(("stage", "expected_gb"), [(0, 120), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(stage, expected_gb):
    """Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, N_d = 64, K = 12, decimal GB, to the figure's 3 digits."""
    states = model_states(7.5e9, Plan(zero=stage, weight_dtype="fp16"), shard=64)
    assert states.total / GB == pytest.approx(expected_gb, abs=0.05)


def test_zero_k_is_twelve_for_mixed_precision_adam():
    s = model_states(1.0, Plan(zero=0), shard=1)
    assert (s.weights, s.gradients, s.optimizer) == (2.0, 2.0, 12.0)


def test_opt_13b_kv_cache_is_800_kb_per_token():
    """vLLM (Kwon et al. 2023, section 3): 800 KB per token for OPT-13B; binary KiB: 2·40·5120·2 B = 800 KiB exactly."""
    assert kv_bytes_per_token(catalog.model("opt-13b"), "fp16") == 800 * 1024


def test_flexgen_opt_175b_figures():
    """FlexGen (Sheng et al. 2023, section 3): fp16 weights ≈ 325 GB; KV cache ≈ 1.2 TB for batch 512,
    prompt 512 + 32 generated tokens. FlexGen's GB/TB are binary (GiB/TiB); tolerance 1%."""
    from aitrinity.cost.params import count

    m = catalog.model("opt-175b")
    assert 2 * count(m).total / 2**30 == pytest.approx(325, rel=0.01)
    kv = kv_bytes_per_token(m, "fp16") * (512 + 32) * 512
    assert kv / 2**40 == pytest.approx(1.2, rel=0.01)


def test_mla_kv_cache_is_the_latent_plus_rope_key():
    """DeepSeek-V2 §2.1.2: (d_c + d_R) = 512 + 64 values per token per layer; 61 layers, bf16."""
    assert kv_bytes_per_token(catalog.model("deepseek-v3"), "bf16") == 61 * 576 * 2


def test_sliding_window_caps_tokens_and_tp_splits_or_replicates_kv_heads():
    mistral = catalog.model("mistral-7b")
    assert kv_tokens_held(mistral, 32768) == 4096
    assert kv_tokens_held(mistral, 1000) == 1000
    assert kv_shard_factor(mistral, 2) == pytest.approx(1 / 2)  # 8 KV heads over 2 ranks
    assert kv_shard_factor(mistral, 16) == pytest.approx(1 / 8)  # one head each: replicated past 8
    assert kv_shard_factor(catalog.model("deepseek-v3"), 8) == 1.0  # the MLA latent is not split


# Korthikanti et al. 2022, Table 2: activation bytes per layer, as multiples of s·b·h (16-bit activations)
S, H, A, T = 2048, 12288, 96, 8
CASES = [
    (Plan(flash_attention=False), 34 + 5 * A * S / H),
    (Plan(tp=T, flash_attention=False), 10 + 24 / T + 5 * A * S / (H * T)),
    (Plan(tp=T, sequence_parallel=True, flash_attention=False), 34 / T + 5 * A * S / (H * T)),
    (Plan(tp=T, recompute="selective", flash_attention=False), 10 + 24 / T),
    (Plan(tp=T, sequence_parallel=True, recompute="selective", flash_attention=False), 34 / T),
    (Plan(recompute="full", flash_attention=False), 2),
    (Plan(tp=T, sequence_parallel=True, recompute="full"), 2 / T),
]


@pytest.mark.parametrize(("plan", "coefficient"), CASES)
def test_korthikanti_table_2(gpt3, plan, coefficient):
    """Exact (relative 1e-12) for the paper's GPT layer: MHA, 4h GELU MLP, dropout."""
    assert korthikanti_coefficient(gpt3, S, plan) == pytest.approx(coefficient, rel=1e-12)


def test_activation_bytes_scale_with_micro_batch(gpt3):
    one = layer_activation_bytes(layer_activations(gpt3, S, 1, False), Plan(tp=T))
    four = layer_activation_bytes(layer_activations(gpt3, S, 4, False), Plan(tp=T))
    assert four == pytest.approx(4 * one)


def test_flash_attention_drops_the_s_squared_term(gpt3):
    eager = korthikanti_coefficient(gpt3, S, Plan(flash_attention=False))
    flash = korthikanti_coefficient(gpt3, S, Plan(flash_attention=True))
    assert eager - flash == pytest.approx(5 * A * S / H - 4 * A / H, rel=1e-12)  # keeps fp32 log-sum-exp


def test_llama_layer_has_no_dropout_terms():
    """Gated MLP (4 saved f-wide tensors), GQA K/V at 8 heads, no dropout masks."""
    m = catalog.model("llama-3.1-70b")
    acts = layer_activations(m, 4096, 1, False)
    h, f, d, g = 8192, 28672, 128, 8
    sb = 4096
    assert acts.replicated == 2 * sb * h * 4  # two norm inputs, QKV input, MLP input
    assert acts.split == 2 * sb * (h + g * d + g * d + h) + 2 * sb * 4 * f
