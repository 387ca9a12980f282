"""The prefill-cluster simulation: conservation, determinism, Mooncake's Algorithm 1 routing step by step, and a
global pool against per-instance caches."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitrinity import catalog
from aitrinity.catalog import traces
from aitrinity.sim.core import Simulator
from aitrinity.sim.prefill import ClusterConfig, simulate_prefill
from aitrinity.spec.traces import TraceRequest

TRACE = Path(__file__).resolve().parents[2] / "data" / "traces" / "mooncake_conversation_trace.jsonl"
MODEL = catalog.model("llama-3.1-8b")


def cfg(**kw):
    base = {
        "instances": 4,
        "cache": "local",
        "capacity_tokens": 64 * 16,
        "flops_per_s": 1e14,
        "load_bandwidth_Bps": 1e10,
        "block_tokens": 16,
    }
    return ClusterConfig(**(base | kw))


requests_st = st.lists(
    st.tuples(st.floats(0, 50), st.lists(st.integers(0, 30), max_size=8), st.integers(0, 15)),
    min_size=1,
    max_size=60,
).map(
    lambda rows: [
        TraceRequest(t * 1000, 16 * len(ids) + extra + 1, 1, tuple(ids))
        for t, ids, extra in sorted(rows, key=lambda r: r[0])
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    reqs=requests_st,
    cache=st.sampled_from(["local", "global", "pool"]),
    instances=st.integers(1, 5),
    router=st.sampled_from(["algorithm1", "least-loaded"]),
    slo=st.sampled_from([None, 1e-4, 1e-2]),
)
def test_conservation(reqs, cache, instances, router, slo):
    c = cfg(cache=cache, instances=instances, router=router, ttft_slo_s=slo)
    r = simulate_prefill(reqs, MODEL, c)
    assert r.finished + r.rejected == r.requests == len(reqs)  # every request finishes or is rejected
    assert slo is not None or r.rejected == 0
    assert 0 <= r.transferred_tokens <= r.hit_tokens
    assert cache == "global" or r.transferred_tokens == 0
    assert all(0.0 <= u <= 1.0 + 1e-9 for u in r.utilization)  # no instance above 100%
    assert 0 <= r.hit_tokens <= r.prompt_tokens
    assert r.prefill_flops <= r.prefill_flops_without_cache + 1e-6
    assert r.finished == 0 or (r.ttft_s.p50 > 0 and r.ttft_s.p99 >= r.ttft_s.p50)
    assert r.busy_s == pytest.approx(sum(r.utilization) * r.makespan_s)
    assert r == simulate_prefill(reqs, MODEL, c)  # deterministic


def test_one_instance_local_global_and_pool_are_one_cache():
    reqs = traces.load(TRACE)[:500]
    runs = [
        simulate_prefill(reqs, MODEL, cfg(instances=1, cache=c, capacity_tokens=200_000, block_tokens=512))
        for c in ("local", "global", "pool")
    ]
    assert runs[0].model_dump(exclude={"cache"}) == runs[1].model_dump(exclude={"cache"})
    assert runs[0].model_dump(exclude={"cache"}) == runs[2].model_dump(exclude={"cache"})


# Algorithm 1 step by step. Blocks of 16 tokens; prefill costs 1 s per 16 new tokens, loading a cached block
# 0.01 s, fetching one from another instance 0.1 s. Request A (blocks 1-4, 64 tokens) warms instance 0; B has
# the same four blocks and 16 more tokens.
def per_block(start, new):
    return new / 16


def test_algorithm1_follows_the_prefix_while_the_queue_is_short():
    # B arrives after A is done (t = 4 s): instance 0 holds its 4 blocks, 1 s of prefill against 5 s elsewhere
    a = TraceRequest(0.0, 64, 1, (1, 2, 3, 4))
    b = TraceRequest(4.5e3, 80, 1, (1, 2, 3, 4, 5))
    for cache in ("local", "global"):
        r = simulate_prefill([a, b], MODEL, cfg(instances=2, cache=cache), prefill_time=per_block)
        assert r.hit_tokens == 64 and r.transferred_tokens == 0
        assert r.utilization[1] == 0.0  # both on instance 0


def test_algorithm1_weighs_the_queue_against_the_match():
    # E (unrelated, arriving at 4.5 s with both instances idle) takes instance 0 first. B at 5 s waits for the
    # rest of E and then takes 1 s with the match: better than 5 s of prefill on instance 1 only if E is short.
    a = TraceRequest(0.0, 64, 1, (1, 2, 3, 4))
    b = TraceRequest(5e3, 80, 1, (1, 2, 3, 4, 5))
    c = cfg(instances=2, load_bandwidth_Bps=1e20)
    for e_tokens, hit in ((48, 64), (128, 0)):  # E ends at 7.5 s: wait 2.5 + 1 < 5; at 12.5 s: 7.5 + 1 > 5
        e = TraceRequest(4.5e3, e_tokens, 1, (40,))
        r = simulate_prefill([a, e, b], MODEL, c, prefill_time=per_block)
        assert r.hit_tokens == hit


def test_global_fetches_the_best_match_from_another_instance():
    # A second request C after B: instance 0 is busy for 100 s with D; local C recomputes on instance 1,
    # global C fetches the 4 blocks instance 0 holds (0.1 s each) and prefills 1 block.
    a = TraceRequest(0.0, 64, 1, (1, 2, 3, 4))
    d = TraceRequest(5e3, 1600, 1, tuple(range(100, 200)))
    c = TraceRequest(6e3, 80, 1, (1, 2, 3, 4, 5))
    runs = {
        cache: simulate_prefill(
            [a, d, c],
            MODEL,
            cfg(instances=2, cache=cache, load_bandwidth_Bps=1e20, transfer_bandwidth_Bps=1e8, capacity_tokens=10**6),
            prefill_time=per_block,
        )
        for cache in ("local", "global")
    }
    block_bytes = runs["global"].bytes_loaded / 64 * 16
    assert runs["local"].hit_tokens == 0
    assert runs["global"].hit_tokens == runs["global"].transferred_tokens == 64
    fetch = 4 * block_bytes / 1e8
    assert runs["global"].busy_s == pytest.approx(4 + 100 + fetch + 1)
    assert runs["local"].busy_s == pytest.approx(4 + 100 + 5)


def test_a_request_above_the_ttft_slo_is_rejected_and_counts_in_nothing():
    a = TraceRequest(0.0, 64, 1, (1, 2, 3, 4))
    b = TraceRequest(0.0, 64, 1, (6, 7, 8, 9))
    r = simulate_prefill([a, b], MODEL, cfg(instances=1, ttft_slo_s=5.0), prefill_time=per_block)
    assert (r.finished, r.rejected, r.prompt_tokens) == (1, 1, 64)  # b would wait 4 s and take 4 more


def test_the_least_loaded_router_does_not_look_at_the_caches():
    a = TraceRequest(0.0, 64, 1, (1, 2, 3, 4))  # instance 0, done at 4 s
    d = TraceRequest(9e3, 32, 1, (30, 31))  # instance 0 again (both idle), busy until 11 s
    c = TraceRequest(10e3, 80, 1, (1, 2, 3, 4, 5))  # instance 0: 1 s queue + 1 s; instance 1: 5 s
    base = {"instances": 2, "load_bandwidth_Bps": 1e20}
    follow = simulate_prefill([a, d, c], MODEL, cfg(**base), prefill_time=per_block)
    blind = simulate_prefill([a, d, c], MODEL, cfg(router="least-loaded", **base), prefill_time=per_block)
    assert follow.hit_tokens == 64 and blind.hit_tokens == 0


def test_rate_scale_is_the_trace_replayed_faster():
    reqs = traces.load(TRACE)[:300]
    fast = [TraceRequest(r.timestamp_ms / 4, r.prompt_tokens, r.output_tokens, r.hash_ids) for r in reqs]
    kw = {"capacity_tokens": 400_000, "block_tokens": 512, "flops_per_s": 1e15}
    a = simulate_prefill(reqs, MODEL, cfg(rate_scale=4, **kw))
    b = simulate_prefill(fast, MODEL, cfg(**kw))
    assert a.model_dump(exclude={"rate_scale"}) == b.model_dump(exclude={"rate_scale"})


def test_bad_configurations_are_refused():
    for bad in ({"cache": "shared"}, {"router": "random"}, {"rate_scale": 0.0}, {"balancing_threshold": 0.5}):
        with pytest.raises(ValueError):
            simulate_prefill([], MODEL, cfg(**bad))


def test_global_pool_beats_per_instance_caches_of_the_same_capacity():
    reqs = traces.load(TRACE)
    kw = {
        "instances": 16,
        "capacity_tokens": 3_200_000,
        "flops_per_s": 5e15,
        "load_bandwidth_Bps": 50e9,
        "block_tokens": 512,
    }
    local = simulate_prefill(reqs, MODEL, ClusterConfig(cache="local", **kw))
    pool = simulate_prefill(reqs, MODEL, ClusterConfig(cache="pool", **kw))
    assert pool.token_hit_rate > local.token_hit_rate * 1.1
    assert pool.prefill_flops < local.prefill_flops


def test_simulator_orders_ties_by_scheduling_and_rejects_the_past():
    sim, seen = Simulator(), []
    for name in "abc":
        sim.at(1.0, seen.append, name)
    sim.at(0.5, lambda: [(2.0, seen.append, ("d",))])  # a handler returns a follow-up event
    assert sim.run() == 5 and seen == ["a", "b", "c", "d"] and sim.now == 2.0
    with pytest.raises(ValueError):
        sim.at(1.0, seen.append, "late")
