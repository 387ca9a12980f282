"""Fixed-concurrency steady state: Little's law, and the order of the times."""

from dataclasses import replace
from pathlib import Path

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
    """Lock-step clients: the first prompt of a round finds the engine idle and runs alone; the others wait for it
    and then for their wave steps, and the first request's decodes carry those steps."""
    from aitrinity.cost.operators import StepShape, step_times

    m, k, lay = setup
    prof = EngineProfile(1e-3, 0.9, 3.0, 0.5, request_overhead_s=0.01, lockstep=True, token_budget=2048.0)

    def step(decode: float, prompts: float) -> float:
        return float(step_times(m, k, lay, StepShape(decode, 512.0, prompts, 512.0), 1e-3).total)

    first = step(0.0, 1.0)
    one = steady_state(m, k, lay, 4, 512, 64, prof)  # 1 alone, then 3 x 512 in one step of the 2,048-token budget
    dec = float(one.decode_step.total)
    assert float(one.ttft_s) == pytest.approx(0.01 + first + 3 / 4 * step(1.0, 3.0))
    assert float(one.tpot_s) == pytest.approx(dec + 1 / 4 * (step(1.0, 3.0) - dec) / 63)  # only the first carries it
    two = steady_state(m, k, lay, 8, 512, 64, prof)  # 1 alone, then 7 in two steps: 3.5 prompts, 2.75 decodes each
    dec, wave = float(two.decode_step.total), step(2.75, 3.5)
    assert float(two.ttft_s) == pytest.approx(0.01 + first + 7 / 8 * 1.5 * wave)
    assert float(two.tpot_s) == pytest.approx(dec + (2 + 7 * 0.5) / 8 * (wave - dec) / 63)
    lone = steady_state(m, k, lay, 1, 512, 64, prof)
    assert float(lone.ttft_s) == pytest.approx(0.01 + first) and float(lone.tpot_s) == float(lone.decode_step.total)
    drift = steady_state(m, k, lay, 8, 512, 64, EngineProfile(1e-3, 0.9, 3.0, 0.5, request_overhead_s=0.01))
    assert float(drift.ttft_s) != pytest.approx(float(two.ttft_s))  # the fitted weights are not read


@pytest.mark.parametrize(("c", "isl", "osl"), [(4, 512, 32), (8, 128, 32), (16, 128, 64), (4, 640, 64)])
def test_lockstep_closed_form_is_what_the_simulator_replays(setup, c, isl, osl):
    """The lock-step formulas are the simulator's closed loop with no output spread, in closed form: same
    steps, same waves, round after round (the simulator draws each request's overhead at random, so not to the last
    digit). Their premises hold here as on vLLM's CPU engine: the requests' host time (0.2 ms) is shorter than a
    prefill, so the prompts after the first reach the engine during its lone step, and the rest of the round fits
    one step's budget (the module doc says what happens when it does not)."""
    from aitrinity.sim.serving import ClosedLoop, OperatorStep, for_device, simulate_closed_loop

    m, k, lay = setup
    prof = EngineProfile(1e-3, 0.0, 1.0, 0.0, request_overhead_s=2e-4, lockstep=True, token_budget=2048.0)
    ss = steady_state(m, k, lay, c, isl, osl, prof)
    cfg = for_device(
        catalog.device("h100-sxm"),
        1,
        token_budget=2048,
        max_batch=c,
        step_time=OperatorStep(m, k, lay, prof.step_overhead_s),
    )
    sim = simulate_closed_loop(m, cfg, ClosedLoop(c, isl, osl, 3 * c, prof.request_overhead_s))
    assert sim.ttft_s.mean == pytest.approx(float(ss.ttft_s), rel=0.05)
    assert sim.tpot_s.mean == pytest.approx(float(ss.tpot_s), rel=0.02)


@pytest.mark.parametrize(
    ("mixed", "lag", "c", "isl", "osl"),
    [
        (False, 1, 4, 512, 32),
        (False, 1, 16, 1024, 64),
        (False, 2, 8, 128, 32),
        (False, 0, 1, 512, 16),
        (True, 1, 8, 128, 32),
    ],
)
def test_lockstep_separate_prefill_steps_and_a_lag_are_what_the_simulator_replays(setup, mixed, lag, c, isl, osl):
    """SGLang's kind of lock-step: prompt steps run no decodes, so the round's decodes stall through its waves and the
    whole round then decodes together -- it repeats exactly even when its wave takes several steps (16 x 1,024 tokens:
    eight of the 2,048-token budget); an overlap scheduler's lag adds the steps after a prompt's own, waves first."""
    from aitrinity.sim.serving import ClosedLoop, OperatorStep, for_device, simulate_closed_loop

    m, k, lay = setup
    prof = EngineProfile(
        1e-3, 0.0, 1.0, 0.0, 2e-4, lockstep=True, token_budget=2048.0, mixed_batches=mixed, first_token_lag=lag
    )
    ss = steady_state(m, k, lay, c, isl, osl, prof)
    cfg = for_device(
        catalog.device("h100-sxm"),
        1,
        token_budget=2048,
        max_batch=c,
        mixed_batches=mixed,
        first_token_lag=lag,
        step_time=OperatorStep(m, k, lay, prof.step_overhead_s),
    )
    sim = simulate_closed_loop(m, cfg, ClosedLoop(c, isl, osl, 3 * c, prof.request_overhead_s))
    assert sim.ttft_s.mean == pytest.approx(float(ss.ttft_s), rel=0.02)
    assert sim.tpot_s.mean == pytest.approx(float(ss.tpot_s), rel=0.01)
    waves = steady_state(m, k, lay, c, isl, osl, replace(prof, first_token_lag=0))
    assert float(ss.ttft_s) - float(waves.ttft_s) >= lag * float(ss.decode_step.total) * (1 - 1e-9)  # never free
    assert float(ss.tpot_s) == float(waves.tpot_s)  # TPOT counts from when a token is computed


def test_sglang_replays_its_waves_and_the_simulator_schedules_as_the_profile_says():
    from aitrinity.sim.serving import scheduling

    for engine, prof in ENGINE_PROFILES.items():
        s = scheduling(engine)
        assert (s.token_budget, s.mixed_batches, s.first_token_lag) == (
            prof.token_budget,
            prof.mixed_batches,
            prof.first_token_lag,
        )
    assert ENGINE_PROFILES["sglang"].lockstep and not ENGINE_PROFILES["sglang"].mixed_batches
    assert scheduling("sglang").output_spread_tokens == 0.0  # lock-step in the simulator too


def test_clients_beyond_the_kv_slots_wait_for_one(setup):
    """A closed loop of c clients around n < c KV slots: n requests run (TPOT and the requests' own TTFT are those of
    n clients) and the rest wait; each client's cycle is c/n times a request's time in the engine (Little's law), and
    the wait is what the request overhead does not fill of the difference."""
    m, k, lay = setup
    prof = ENGINE_PROFILES["vllm"]
    assert_same = steady_state(m, k, lay, [8, 64], 1024, 256, kv_slots=[8, 100])
    free = steady_state(m, k, lay, [8, 64], 1024, 256)
    np.testing.assert_array_equal(assert_same.ttft_s, free.ttft_s)
    np.testing.assert_array_equal(assert_same.tpot_s, free.tpot_s)
    assert (assert_same.slot_wait_s == 0).all()

    n, c = 16, 64
    run = steady_state(m, k, lay, n, 1024, 256)
    held = steady_state(m, k, lay, c, 1024, 256, kv_slots=n)
    service = float(run.ttft_s) - prof.request_overhead_s + 255 * float(run.tpot_s)
    assert float(held.tpot_s) == float(run.tpot_s)
    assert float(held.slot_wait_s) == pytest.approx((c / n - 1) * service - prof.request_overhead_s)
    assert float(held.ttft_s) == pytest.approx(float(run.ttft_s) + float(held.slot_wait_s))
    assert float(held.requests_per_s) == pytest.approx(n / service)  # the slots never idle


def test_a_prompt_longer_than_the_token_budget_is_not_repeated_by_the_other_steps_of_its_ttft(setup):
    """TTFT = t_request + t_mix + (c-1)/c x (n_prefill - 1) x a step of at most a token budget of prompt work
    (+ 1/c of the lag's decode steps, + the prompts waiting ahead): the same as t_mix per step up to the budget (the
    development runs' prompts are at most 8,192 tokens), while a 64k-token prompt's own work is counted once, not
    n_prefill times."""
    from aitrinity.cost.operators import StepShape, step_times

    m, k, lay = setup
    prof = replace(ENGINE_PROFILES["trtllm"], batch_wait=0.0)  # n_prefill 2.86, no wave: the steps alone
    c, busy, osl = 4, 0.75, 64
    short = steady_state(m, k, lay, c, 8192, osl, prof)
    mix, dec = float(short.mixed_step.total), float(short.decode_step.total)
    lag = (1 - busy) * prof.first_token_lag * dec
    ahead = (c - 1) / osl * prof.prefill_steps / 2  # Little's law: prompts waiting when it arrives
    f = prof.prefill_interference
    expected = prof.request_overhead_s + mix + busy * (prof.prefill_steps - 1.0) * mix + lag + f * ahead * (mix - dec)
    assert float(short.ttft_s) == pytest.approx(expected)
    long = steady_state(m, k, lay, c, 65536, osl, prof)
    chunk = StepShape(c - 1.0, 65536 + osl / 2, 1.0, prof.token_budget)
    budget = step_times(m, k, lay, chunk, prof.step_overhead_s).total
    lag = (1 - busy) * prof.first_token_lag * float(long.decode_step.total)
    queued = f * ahead * (float(long.mixed_step.total) - float(long.decode_step.total))  # whole prompts, not chunks
    expected = prof.request_overhead_s + float(long.mixed_step.total) + busy * (prof.prefill_steps - 1.0) * budget
    assert float(long.ttft_s) == pytest.approx(expected + lag + queued)
    assert float(long.ttft_s) < prof.request_overhead_s + prof.prefill_steps * float(long.mixed_step.total)


def test_a_one_token_output_has_no_tpot_in_the_estimate_the_planner_or_the_simulator(setup):
    """osl = 1 (scoring, a router, a prefill benchmark): no step follows the first token. The amortised share of the
    other clients' prompts made TPOT 93 ms here (24.5 s on the built-in long-context example), and a TPOT objective
    then refused every plan of a workload that has no TPOT. It is 0, as the simulator and vLLM's bench count it."""
    from aitrinity import api
    from aitrinity.sim.serving import replay_benchmark

    m, k, lay = setup
    one, two = (steady_state(m, k, lay, 8, 1024, osl) for osl in (1, 2))
    assert float(one.tpot_s) == 0.0 and float(one.interference_s) == 0.0 and float(two.tpot_s) > 0.0
    assert float(one.request_latency_s) == float(one.ttft_s)
    sim = replay_benchmark(m, k, lay, catalog.device("h100-sxm"), 8, 1024, 1, rounds=2)
    assert sim.tpot_s.mean == 0.0
    scenario, over = "llama-70b-serving-long-context", ["workload.serving.output_tokens=1"]
    d = api.diagnose(scenario, over)
    assert d.estimate.serving.tpot_s == 0.0 and "no decode steps" in d.verdict and "TPOT" not in d.verdict
    example = Path(__file__).resolve().parents[2] / "examples" / "deepseek-r1-gb200-nvl72-disaggregated.yaml"
    pools = api.diagnose(str(example), over).estimate.serving
    assert pools is not None and pools.tpot_s == 0.0 and pools.pools is not None  # disaggregated pools too
    rep = api.plan(scenario, "throughput", 1, over, tpot_slo="1ms")
    assert "TPOT above the SLO" not in {r.reason for r in rep.search.infeasible} and rep.search.best is not None
