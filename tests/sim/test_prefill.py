"""The prefill-cluster simulation: conservation, determinism, and a global pool against per-instance caches."""

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


@settings(max_examples=40, deadline=None)
@given(reqs=requests_st, cache=st.sampled_from(["local", "global"]), instances=st.integers(1, 5))
def test_conservation(reqs, cache, instances):
    r = simulate_prefill(reqs, MODEL, cfg(cache=cache, instances=instances))
    assert r.finished == r.requests == len(reqs)  # every request finishes
    assert all(0.0 <= u <= 1.0 + 1e-9 for u in r.utilization)  # no instance above 100%
    assert 0 <= r.hit_tokens <= r.prompt_tokens
    assert r.prefill_flops <= r.prefill_flops_without_cache + 1e-6
    assert r.ttft_s.p50 > 0 and r.ttft_s.p99 >= r.ttft_s.p50
    assert r == simulate_prefill(reqs, MODEL, cfg(cache=cache, instances=instances))  # deterministic


def test_one_instance_local_is_global():
    reqs = traces.load(TRACE)[:500]
    a = simulate_prefill(reqs, MODEL, cfg(instances=1, cache="local", capacity_tokens=200_000, block_tokens=512))
    b = simulate_prefill(reqs, MODEL, cfg(instances=1, cache="global", capacity_tokens=200_000, block_tokens=512))
    assert a.model_dump(exclude={"cache"}) == b.model_dump(exclude={"cache"})


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
    pool = simulate_prefill(reqs, MODEL, ClusterConfig(cache="global", **kw))
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
