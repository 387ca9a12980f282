"""Disaggregated serving at a fixed concurrency: each pool's work, the loop that couples them, and the simulator."""

import numpy as np
import pytest

from aitrinity import catalog, silicon
from aitrinity.cost.concurrency import profile
from aitrinity.cost.disaggregated import KVLink, Pool, disaggregated_steady_state
from aitrinity.cost.operators import Layout, StepShape, step_times
from aitrinity.sim.serving import ClosedLoop, OperatorStep, for_device, simulate_closed_loop

DEV = catalog.device("h100-sxm")
LINK = KVLink(50e9, 1e-5)


@pytest.fixture(scope="module")
def k():
    return silicon.roofline(DEV)


@pytest.fixture(scope="module")
def m():
    return catalog.model("llama-3.1-8b")


def _state(m, k, p=1, d=1, c=64, isl=2048, osl=256, link=LINK, tp=1):
    lay = Layout(tp=tp, engine="vllm")
    return disaggregated_steady_state(m, k, Pool(p, lay), Pool(d, lay), link, c, isl, osl)


def test_tpot_is_the_decode_pools_step_without_prompts(m, k):
    s = _state(m, k)
    lay = Layout(tp=1, engine="vllm")
    alone = step_times(m, k, lay, StepShape(s.decode_batch, 2048 + 128), profile("vllm").step_overhead_s)
    assert float(s.tpot_s) == pytest.approx(float(alone.total))
    assert 0 < float(s.decode_batch) <= 64


def test_little_s_law_holds_for_the_whole_loop(m, k):
    s = _state(m, k, c=np.array([4.0, 64.0, 512.0]))
    assert s.requests_per_s * s.request_latency_s == pytest.approx([4.0, 64.0, 512.0])


def test_a_prefill_bound_split_runs_at_the_prefill_pools_capacity_and_a_second_worker_relieves_it(m, k):
    """4k-token prompts for 64 output tokens from 256 clients: one prefill worker cannot keep three decode workers
    fed; the loop runs at its capacity and the prompts queue. Two prefill workers halve the wait."""
    one = _state(m, k, p=1, d=3, c=256, isl=4096, osl=64)
    assert str(one.binding_pool) == "prefill"
    assert float(one.requests_per_s) == pytest.approx(float(one.prefill_capacity_rps), rel=0.01)
    two = _state(m, k, p=2, d=3, c=256, isl=4096, osl=64)
    assert float(two.ttft_s) < 0.6 * float(one.ttft_s)
    assert float(two.requests_per_s) > 1.5 * float(one.requests_per_s)


def test_a_slower_kv_link_delays_the_second_token_not_the_first(m, k):
    fast = _state(m, k, c=4)
    slow = _state(m, k, c=4, link=KVLink(1e9, 1e-5))  # 8 Gbit/s
    kv = 2 * 32 * 8 * 128 * 2 * 2048  # llama-3.1-8b: 32 layers x 8 KV heads x 128 dims, K and V, bf16
    assert float(slow.transfer_s) == pytest.approx(1e-5 + kv / 1e9)
    assert float(slow.request_latency_s - fast.request_latency_s) > 0.9 * float(slow.transfer_s - fast.transfer_s)
    assert float(slow.ttft_s) == pytest.approx(float(fast.ttft_s), rel=0.02)


def test_a_pool_needs_a_worker():
    with pytest.raises(ValueError, match="at least one worker"):
        Pool(0, Layout())


@pytest.mark.parametrize(
    "p, d, c, isl, osl",
    [(1, 1, 16, 1024, 128), (1, 1, 64, 2048, 256), (2, 2, 128, 1024, 512), (1, 3, 64, 4096, 256)],
)
def test_the_estimate_agrees_with_the_simulator(m, k, p, d, c, isl, osl):
    """The same pools replayed request by request (``trinity simulate serving --concurrency`` with
    ``--prefill-instances``): within 15% on TTFT and 5% on TPOT (benchmarks/bench_disaggregated.py measures a
    wider grid)."""
    prof = profile("vllm")
    lay = Layout(tp=1, engine="vllm")
    est = disaggregated_steady_state(m, k, Pool(p, lay), Pool(d, lay), LINK, c, isl, osl)
    cfg = for_device(
        DEV,
        p + d,
        prefill_instances=p,
        kv_link_Bps=LINK.bandwidth_Bps,
        kv_link_latency_s=LINK.latency_s,
        token_budget=8192,
        max_batch=c,
        step_time=OperatorStep(m, k, lay, prof.step_overhead_s),
    )
    sim = simulate_closed_loop(m, cfg, ClosedLoop(c, isl, osl, 10 * c, prof.request_overhead_s, 0.2 * osl))
    assert sim.ttft_s.mean == pytest.approx(float(est.ttft_s), rel=0.15)
    assert sim.tpot_s.mean == pytest.approx(float(est.tpot_s), rel=0.05)
