"""Exact message sizes per method, and their agreement with the per-element model in cost.effects."""

import pytest

from aitrinity.cost.grad_compression import message, step_time


def test_message_sizes():
    n = 10_000
    assert message("none", n, 4).payload_bytes == 40_000
    assert message("fp16", n, 4).payload_bytes == 20_000
    # int8: padded to a multiple of 4 ranks x 2048, plus one fp32 scale per 2048
    assert message("int8", n, 4).payload_bytes == 16_384 + 4 * 8
    assert message("topk", n, 4, density=0.01).payload_bytes == 100 * 8
    assert message("topk", 10, 4, density=0.01).payload_bytes == 8  # at least one entry
    assert message("sign", n, 4).payload_bytes == 1250 + 4 * 5
    assert message("none", n, 4).sent_bytes(4) == 2 * 3 / 4 * 40_000
    assert message("sign", n, 4).sent_bytes(4) == 3 * 1270
    assert message("none", n, 1).sent_bytes(1) == 0
    with pytest.raises(ValueError):
        message("zip", n, 2)


def test_large_buckets_match_the_per_element_model():
    from aitrinity.cost.effects import SCALE_BUCKET

    n = 2048 * 4 * 1000
    assert message("int8", n, 4).payload_bytes / n == pytest.approx(1 + 4 / SCALE_BUCKET)
    assert message("sign", n, 4).payload_bytes / n == pytest.approx(1 / 8 + 4 / SCALE_BUCKET)
    assert message("topk", n, 4, density=0.01).payload_bytes / n == pytest.approx(0.01 * 8)


def test_step_time_break_even():
    common = {"latency_s": 50e-6, "compute_s": 0.01}
    slow = {
        m: step_time(m, [1_000_000], 2, bandwidth_Bps=12.5e6, codec_s_per_element=2e-8, **common)
        for m in ("none", "topk")
    }
    fast = {
        m: step_time(m, [1_000_000], 2, bandwidth_Bps=10e9, codec_s_per_element=2e-8 if m != "none" else 0, **common)
        for m in ("none", "topk")
    }
    assert slow["topk"] < slow["none"] and fast["topk"] > fast["none"]
