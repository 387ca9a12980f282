"""Fixed-concurrency steady state: Little's law, and the order of the times."""

import numpy as np
import pytest

from aitrinity import catalog, silicon
from aitrinity.cost.concurrency import ENGINE_PROFILES, EngineProfile, steady_state
from aitrinity.cost.operators import Layout


@pytest.fixture(scope="module")
def setup():
    return catalog.model("llama-3.1-8b"), silicon.roofline(catalog.device("h100-sxm")), Layout(tp=1, engine="vllm")


def test_littles_law_and_request_latency(setup):
    m, k, lay = setup
    c = np.array([1.0, 8.0, 64.0])
    ss = steady_state(m, k, lay, c, 1024, 256)
    assert ss.request_latency_s == pytest.approx(ss.ttft_s + 255 * ss.tpot_s)
    assert ss.requests_per_s == pytest.approx(c / ss.request_latency_s)
    assert ss.output_tokens_per_s == pytest.approx(ss.requests_per_s * 256)


def test_more_clients_slow_each_token_but_raise_throughput(setup):
    m, k, lay = setup
    ss = steady_state(m, k, lay, np.array([1.0, 8.0, 64.0]), 1024, 256)
    assert (np.diff(ss.tpot_s) > 0).all()
    assert (np.diff(ss.output_tokens_per_s) > 0).all()


def test_tpot_carries_the_prefills_that_share_its_steps(setup):
    m, k, lay = setup
    ss = steady_state(m, k, lay, 32, 4096, 128)
    assert float(ss.tpot_s) > float(ss.decode_step.total)
    quiet = EngineProfile(step_overhead_s=0.0, prefill_interference=0.0, prefill_steps=1.0, batch_wait=0.0)
    ss0 = steady_state(m, k, lay, 32, 4096, 128, quiet)
    assert float(ss0.tpot_s) == pytest.approx(float(ss0.decode_step.total))
    assert float(ss0.ttft_s) == pytest.approx(float(ss0.mixed_step.total))


def test_every_engine_has_a_profile_and_an_unknown_one_gets_the_generic():
    assert {"trtllm", "vllm", "sglang", "generic"} <= set(ENGINE_PROFILES)
    m, k = catalog.model("llama-3.1-8b"), silicon.roofline(catalog.device("h100-sxm"))
    a = steady_state(m, k, Layout(engine="no-such-engine"), 8, 1024, 128)
    b = steady_state(m, k, Layout(engine="generic"), 8, 1024, 128)
    assert float(a.tpot_s) == float(b.tpot_s)


def test_a_lone_client_pays_no_other_prompt_in_its_tpot(setup):
    m, k, lay = setup
    ss = steady_state(m, k, lay, np.array([1.0, 2.0, 9.0]), 4096, 32)
    assert float(ss.tpot_s[0]) == pytest.approx(float(ss.decode_step.total[0]))  # its own prompt is in its TTFT
    extra = ss.mixed_step.total - ss.decode_step.total
    f = ENGINE_PROFILES["vllm"].prefill_interference
    assert ss.interference_s[1:] == pytest.approx(f * np.array([1.0, 8.0]) / 32 * extra[1:])  # the c - 1 others


def test_host_time_per_sequence_grows_with_the_batch(setup):
    m, k, lay = setup
    base = EngineProfile(1e-3, 0.0, 1.0, 0.0)
    per = EngineProfile(1e-3, 0.0, 1.0, 0.0, sequence_overhead_s=2e-4)
    a = steady_state(m, k, lay, np.array([1.0, 16.0]), 512, 64, base)
    b = steady_state(m, k, lay, np.array([1.0, 16.0]), 512, 64, per)
    assert b.decode_step.engine - a.decode_step.engine == pytest.approx([2e-4, 16 * 2e-4])
    assert b.mixed_step.engine - a.mixed_step.engine == pytest.approx([2e-4, 16 * 2e-4])  # c - 1 decodes + 1 prompt


def test_lockstep_waves_wait_for_their_steps(setup):
    """Lock-step clients: a wave that fits one step's budget is one step everyone waits for, and no prompt shares
    a decode step; a wave of two steps waits 1.5 steps on average, and its decodes carry half a wave step."""
    from aitrinity.cost.operators import StepShape, step_times

    m, k, lay = setup
    prof = EngineProfile(1e-3, 0.9, 3.0, 0.5, request_overhead_s=0.01, lockstep=True, token_budget=2048.0)
    one = steady_state(m, k, lay, 4, 512, 64, prof)  # 4 x 512 = one step of 2,048 tokens
    step = step_times(m, k, lay, StepShape(0.0, 512.0, 4.0, 512.0), 1e-3).total
    assert float(one.ttft_s) == pytest.approx(0.01 + float(step))
    assert float(one.tpot_s) == pytest.approx(float(one.decode_step.total))
    two = steady_state(m, k, lay, 8, 512, 64, prof)  # two steps of 4 prompts, 2 decodes riding along on average
    wave = step_times(m, k, lay, StepShape(2.0, 512.0, 4.0, 512.0), 1e-3).total
    assert float(two.ttft_s) == pytest.approx(0.01 + 1.5 * float(wave))
    assert float(two.tpot_s) == pytest.approx(float(two.decode_step.total) + 0.5 * float(wave) / 63)
    drift = steady_state(m, k, lay, 8, 512, 64, EngineProfile(1e-3, 0.9, 3.0, 0.5, request_overhead_s=0.01))
    assert float(drift.ttft_s) != pytest.approx(float(two.ttft_s))  # the fitted weights are not read
