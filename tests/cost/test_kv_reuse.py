"""The load-vs-recompute decision and its break-even bandwidth."""

import math

import pytest

from aitrinity import catalog
from aitrinity.catalog.hf import from_hf_config
from aitrinity.cost.flops import causal_score_flops, token_flops
from aitrinity.cost.kv_reuse import Source, breakeven_bandwidth, decide, prefill_flops
from aitrinity.cost.memory import kv_bytes_per_token


@pytest.fixture(scope="module")
def llama8b():
    return catalog.model("llama-3.1-8b")


def test_prefill_flops_splits_exactly(llama8b):
    whole = prefill_flops(llama8b, 0, 4096)
    assert prefill_flops(llama8b, 0, 1024) + prefill_flops(llama8b, 1024, 3072) == pytest.approx(whole)
    tf = token_flops(llama8b)
    assert whole == pytest.approx(4096 * (tf.dense - tf.lm_head) + causal_score_flops(llama8b, 0, 4096))


def test_fast_tier_loads_slow_tier_recomputes(llama8b):
    fast = Source("dram", 100e9, 1e-6)
    slow = Source("wan", 10e6, 20e-3)
    g = 400e12
    d = decide(llama8b, 8192, [fast] * 16, block_tokens=512, flops_per_s=g)
    assert d.choice == "load" and d.load_tokens == 15 * 512  # the last token is always computed
    d = decide(llama8b, 8192, [slow] * 15, block_tokens=512, flops_per_s=g)
    assert d.choice == "recompute" and d.load_tokens == 0 and "not worth loading" in d.reason
    d = decide(llama8b, 8192, [fast] * 4 + [slow] * 11, block_tokens=512, flops_per_s=g)
    assert d.choice == "partial" and d.tokens_by_tier == {"dram": 2048}
    assert d.time_s < d.recompute_all_s and d.speedup > 1


def test_breakeven_matches_mooncake_form_without_latency(llama8b):
    g, n = 300e12, 4096
    b = breakeven_bandwidth(llama8b, n, flops_per_s=g)
    # B* = kv_bytes(n) / (flops(n) / G): Mooncake FAST'25 Eq. 2's B/G > kv/flops
    assert b == pytest.approx(kv_bytes_per_token(llama8b, "bf16") * n * g / prefill_flops(llama8b, 0, n))
    assert breakeven_bandwidth(llama8b, n, flops_per_s=g, compression=4) == pytest.approx(b / 4)
    assert math.isinf(breakeven_bandwidth(llama8b, 16, flops_per_s=g, latency_s=1.0))
    # at exactly the break-even bandwidth loading and recomputing cost the same
    at = decide(llama8b, n + 1, [Source("x", b * 1.01, 0.0)] * (n // 512), block_tokens=512, flops_per_s=g)
    below = decide(llama8b, n + 1, [Source("x", b * 0.99, 0.0)] * (n // 512), block_tokens=512, flops_per_s=g)
    assert at.choice == "load" and below.choice == "recompute"
    tb = at.breakeven[0]
    assert tb.breakeven_bandwidth_Bps == pytest.approx(b)


def test_gaps_and_bad_input(llama8b):
    d = decide(llama8b, 4096, [Source("m", 1e12, 0), None, Source("m", 1e12, 0)], block_tokens=512, flops_per_s=1e14)
    assert d.cached_tokens == 512
    assert decide(llama8b, 100, [], block_tokens=512, flops_per_s=1e14).reason == "nothing cached"
    with pytest.raises(ValueError):
        decide(llama8b, 0, [], block_tokens=512, flops_per_s=1e14)


def test_masked_past_kernel_computes_the_whole_score_rectangle(llama8b):
    m, tf = llama8b, token_flops(llama8b)
    dense = 2048 * (tf.dense - tf.lm_head)
    rect = 2.0 * m.num_layers * m.num_attention_heads * 2048 * (512 + 2048) * (m.dim_head + m.v_head_dim)
    assert prefill_flops(m, 512, 2048, masked_past=True) == pytest.approx(dense + rect)
    assert prefill_flops(m, 0, 2560, masked_past=True) == prefill_flops(m, 0, 2560)  # no past: causal kernel
    assert prefill_flops(m, 512, 2048, masked_past=True) > prefill_flops(m, 512, 2048)


def test_masked_past_makes_a_short_prefix_not_worth_loading():
    # bench_kvcache.py's tiny Llama on a 2,560-token prompt: attention dominates, so with the masked kernel a
    # short cached prefix costs more compute after it than it saves (measured there: 1.13-1.27x slower)
    tiny = from_hf_config(
        {
            "model_type": "llama",
            "vocab_size": 2048,
            "hidden_size": 256,
            "intermediate_size": 688,
            "num_hidden_layers": 4,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "max_position_embeddings": 8192,
        },
        "tiny",
        "test",
    )
    free = [Source("mem", 1e15, 0.0)] * 9
    causal = decide(tiny, 2560, free[:2], block_tokens=256, flops_per_s=1e11)
    masked = decide(tiny, 2560, free[:2], block_tokens=256, flops_per_s=1e11, masked_past=True)
    assert causal.choice == "load" and masked.choice == "recompute"
    assert masked.breakeven[0].breakeven_bandwidth_Bps is None  # loading never pays at any bandwidth
    deep = decide(tiny, 2560, free, block_tokens=256, flops_per_s=1e11, masked_past=True)
    assert deep.choice == "load" and deep.load_tokens == 2304
    head = 2 * 2048 * 256
    assert deep.compute_time_s == pytest.approx((prefill_flops(tiny, 2304, 256, masked_past=True) + head) / 1e11)
