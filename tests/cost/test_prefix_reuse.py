"""Prefix-cache replay: exact semantics on tiny traces, and the Mooncake conversation trace's published rates."""

from pathlib import Path

import pytest

from aitrinity.catalog import traces
from aitrinity.cost.prefix_reuse import replay
from aitrinity.spec.traces import TraceRequest

TRACE = Path(__file__).resolve().parents[2] / "data" / "traces" / "mooncake_conversation_trace.jsonl"


def req(n, ids):
    return TraceRequest(0.0, n, 1, tuple(ids))


def test_full_block_prefix_semantics():
    # block 4: a 10-token prompt has 2 full blocks; its partial third block is never cached
    r = replay([req(10, [1, 2, 3]), req(10, [1, 2, 3])], None, 4)
    assert (r.hit_tokens, r.prompt_tokens) == (8, 20)
    # a diverging block stops the prefix: [1, 9, 2] reuses only block 1
    r = replay([req(12, [1, 2, 3]), req(12, [1, 9, 2])], None, 4)
    assert r.hit_tokens == 4
    # an unrelated prompt reuses nothing
    assert replay([req(12, [1, 2, 3]), req(12, [7, 8, 9])], None, 4).hit_tokens == 0


def test_lru_eviction_order():
    # capacity 2 blocks: 10, 20; 30 evicts 10 (least recent); 10 misses and evicts 20; 30 still hits
    seq = [req(4, [10]), req(4, [20]), req(4, [30]), req(4, [10]), req(4, [30])]
    r = replay(seq, 8, 4)
    # hits: only the last request (30 is still cached after 10 evicted 20)
    assert r.hit_tokens == 4 and r.evictions == 2
    assert replay(seq, 0, 4).hit_tokens == 0


def test_mooncake_conversation_trace_hit_rates():
    """Issue 4's reference figures: 512-token blocks, LRU, full blocks: unbounded 0.373, 3M tokens 0.143 (±0.002)."""
    reqs = traces.load(TRACE)
    assert len(reqs) == 12031
    assert replay(reqs, None).token_hit_rate == pytest.approx(0.373, abs=0.002)
    assert replay(reqs, 3_000_000).token_hit_rate == pytest.approx(0.143, abs=0.002)


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("[1, 2]", "not a JSON object"),
        ('{"timestamp": 0}', "missing"),
        ("nope", "not a JSON object"),
        ('{"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []}', "whole numbers"),
        ('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1, true]}', "whole numbers"),
        ('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1, 2.0]}', "whole numbers"),
    ],
)
def test_bad_trace_lines_name_the_line(tmp_path, line, needle):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n' + line + "\n")
    from aitrinity.errors import SpecError

    with pytest.raises(SpecError) as e:
        traces.load(p)
    assert f"{p}:2" in str(e.value) and needle in str(e.value)


def test_scenario_prefix_cache_from_a_trace(tmp_path):
    from aitrinity import api
    from aitrinity.cost.memory import kv_bytes_per_token

    r = api.resolve(
        "llama-70b-serving-long-context",
        overrides=["plan.exchanges=[{kind: prefix-cache, tier: host, trace: " + str(TRACE) + ", capacity: 3000000}]"],
    )
    m = r.model
    tokens = int(3_000_000 // kv_bytes_per_token(m, "bf16"))
    expected = replay(traces.load(TRACE), tokens).token_hit_rate
    [pc] = r.scenario.plan.exchanges
    assert pc.hit_rate == pytest.approx(expected)
    d = api.diagnose(
        "llama-70b-serving-long-context",
        ["plan.exchanges=[{kind: prefix-cache, tier: host, trace: " + str(TRACE) + "}]"],
    )
    assert d.exchanges[0].kind == "prefix-cache"


def test_tiered_replay_demotes_promotes_and_counts_bytes():
    from aitrinity.cost.prefix_reuse import ReplayTier, replay_tiers

    tiers = [ReplayTier("fast", 8), ReplayTier("slow", None)]
    seq = [req(8, [1, 2]), req(8, [3, 4]), req(8, [1, 2]), req(8, [1, 2])]
    r = replay_tiers(seq, tiers, block_tokens=4, block_bytes=4, block_flops=lambda j: 10.0 * (j + 1))
    # [3, 4] pushes 1, 2 down to slow; the third request finds them there (and promotes them), the fourth in fast
    assert [t.hit_blocks for t in r.tiers] == [2, 2]
    assert [t.bytes_served for t in r.tiers] == [8, 8]
    assert r.prefill_flops_saved == 2 * (10 + 20)
    assert r.tiers[0].evictions == 4 and r.tiers[0].peak_bytes == 8
    one = replay(seq, 8, 4)
    assert one.hit_tokens == 8  # a single 2-block cache keeps only the last request's blocks


@pytest.mark.parametrize("policy", ["lfu", "cost"])
def test_other_policies_replay(policy):
    seq = [req(4, [10]), req(4, [10]), req(4, [20]), req(4, [30]), req(4, [10])]
    r = replay(seq, 8, 4, policy)
    # 10 was used twice: LFU and cost-aware keep it where LRU would evict it
    assert r.hit_tokens == 8
    assert replay(seq, 8, 4, "lru").hit_tokens == 4


@pytest.mark.parametrize("seed", range(6))
def test_single_lru_fast_path_equals_the_block_index(seed):
    """The one-tier LRU replay skips BlockIndex for speed; it must evict exactly as BlockIndex does."""
    import random

    from aitrinity.cost.prefix_reuse import ReplayTier, replay_tiers

    rng = random.Random(seed)
    seq = []
    for _ in range(300):
        ids = [rng.randrange(40) for _ in range(rng.randint(0, 6))]
        seq.append(req(4 * len(ids) + rng.randint(0, 5), ids))
    for cap in (None, 0, 4, 24, 60):
        fast = replay_tiers(seq, [ReplayTier("c", cap)], block_tokens=4, block_flops=lambda j: j + 1.0)
        # two tiers where the second holds nothing behave like one tier, through BlockIndex
        slow = replay_tiers(
            seq, [ReplayTier("c", cap), ReplayTier("none", 0)], block_tokens=4, block_flops=lambda j: j + 1.0
        )
        assert (fast.hit_tokens, fast.prefill_flops_saved) == (slow.hit_tokens, slow.prefill_flops_saved)
        assert (fast.tiers[0].evictions, fast.tiers[0].peak_bytes) == (
            slow.tiers[0].evictions,
            slow.tiers[0].peak_bytes,
        )
