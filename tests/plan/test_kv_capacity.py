"""Trace replay priced for a model, and the capacity search for a target hit rate."""

import random

import pytest

from aitrinity import catalog
from aitrinity.cost.kv_reuse import prefill_flops
from aitrinity.errors import SpecError
from aitrinity.plan.kv_capacity import TierInput, block_bytes, kv_plan, kv_replay
from aitrinity.spec.traces import TraceRequest


@pytest.fixture(scope="module")
def model():
    return catalog.model("llama-3.1-8b")


@pytest.fixture(scope="module")
def device():
    return catalog.device("h100-sxm")


def synthetic(n=400, seed=0, block=16):
    """Sessions that grow turn by turn (shared history), as in a chat trace."""
    rng = random.Random(seed)
    sessions: list[list[int]] = []
    out, next_id = [], 0
    for i in range(n):
        if sessions and rng.random() < 0.7:
            s = rng.choice(sessions)
        else:
            s = []
            sessions.append(s)
        for _ in range(rng.randint(1, 4)):
            s.append(next_id)
            next_id += 1
        out.append(TraceRequest(float(i * 100), len(s) * block + rng.randint(0, block - 1), 10, tuple(s)))
    return out


def test_exclusive_lru_tiers_hit_like_one_cache_of_their_sum(model, device):
    reqs = synthetic()
    bb = block_bytes(model, "bf16", 16)
    one = kv_replay(reqs, model, [TierInput("cache", 300 * bb)], device, block_tokens=16)
    two = kv_replay(reqs, model, [TierInput("a", 100 * bb), TierInput("b", 200 * bb)], device, block_tokens=16)
    assert two.hit_tokens == one.hit_tokens and two.prefill_flops_saved == pytest.approx(one.prefill_flops_saved)
    assert sum(two.bytes_served.values()) == pytest.approx(one.bytes_served["cache"])
    assert two.tiers[0].peak_bytes <= 100 * bb and two.tiers[1].peak_bytes <= 200 * bb


def test_flops_saved_count_each_reused_block_at_its_position(model, device):
    reqs = [TraceRequest(0, 40, 1, (1, 2)), TraceRequest(1000, 40, 1, (1, 2))]
    r = kv_replay(reqs, model, [TierInput("cache", None)], device, block_tokens=16)
    assert r.hit_tokens == 32 and r.duration_s == 1.0
    assert r.prefill_flops_saved == pytest.approx(prefill_flops(model, 0, 32))
    assert r.prefill_flops == pytest.approx(2 * prefill_flops(model, 0, 40))
    assert r.tiers[0].read_Bps == pytest.approx(2 * block_bytes(model, "bf16", 16) / 1.0)


def test_plan_reaches_the_target_with_the_least_capacity(model, device):
    reqs = synthetic()
    tiers = [
        TierInput("host-dram", 50 * block_bytes(model, "bf16", 16), catalog.tier("host-dram")),
        TierInput("nvme-gen4", None, catalog.tier("nvme-gen4")),
    ]
    top = kv_replay(reqs, model, [TierInput("cache", None)], device, block_tokens=16).token_hit_rate
    p = kv_plan(reqs, model, 0.5 * top, tiers, device, block_tokens=16)
    assert p.allocation.token_hit_rate >= 0.5 * top
    assert p.unbounded_hit_rate == pytest.approx(top)
    less = kv_replay(
        reqs, model, [TierInput("c", p.capacity_bytes - 2 * block_bytes(model, "bf16", 16))], device, block_tokens=16
    )
    assert less.token_hit_rate < 0.5 * top + 0.001
    dram, nvme = p.allocation.tiers
    assert (dram.name, nvme.name) == ("host-dram", "nvme-gen4")
    # 8B with GQA: ~131 kB of KV per token against ~15 GFLOP: loading pays above ~7 GB/s; NVMe's 7 GB/s and
    # 80 us per 16-token block do not, DRAM's 307 GB/s does
    assert dram.worth_loading and not nvme.worth_loading
    assert 5e9 < dram.breakeven_bandwidth_Bps < 10e9
    rates = [c.token_hit_rate for c in p.curve]
    assert rates == sorted(rates)  # LRU: more capacity never hits less


def test_plan_rejects_unreachable_targets_and_small_tiers(model, device):
    reqs = synthetic()
    with pytest.raises(SpecError, match="unbounded"):
        kv_plan(reqs, model, 0.99, [TierInput("c", None)], device, block_tokens=16)
    with pytest.raises(SpecError, match="room"):
        kv_plan(reqs, model, 0.3, [TierInput("c", block_bytes(model, "bf16", 16))], device, block_tokens=16)
