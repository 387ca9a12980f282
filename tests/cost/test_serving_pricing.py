"""The one pricing of serving phases: the operator model's time with the exchanges' streams, the static batch, and the
closed loop's rates."""

import numpy as np
import pytest

from aitrinity.cost.serving_pricing import PhaseTimes, concurrency_rates, concurrency_times, static_rates, static_times
from tests.conftest import make_system


def _phase(compute, hbm, intra=0.0, host=0.0, dispatch=0.0):
    a = lambda x: np.array([x], dtype=float)  # noqa: E731
    return PhaseTimes(a(compute), a(hbm), {"intra_node": a(intra), "host": a(host)}, a(0.0), a(dispatch))


@pytest.mark.parametrize(
    ("overlap", "ttft", "tpot"),
    [
        ("max", 0.9, 0.03),  # TTFT: the host stream (0.9 s) outlasts the steady state's 0.5 s
        ("sum", 1.4, 0.03),  # nothing overlaps: 0.5 + 0.9
    ],
)
def test_streams_on_host_links_combine_with_the_operator_time_and_the_floor_holds(overlap, ttft, tpot):
    """The NVLink time is the operator model's own (its TP collectives): only the host link's KV stream combines with
    it. The decode step is never faster than its slowest roofline resource (HBM, 30 ms) whatever the steady state."""
    system = make_system(n=8, overlap=overlap)
    one = _phase(0.2, 0.1, intra=0.4, host=0.9)
    dec = _phase(0.01, 0.03, intra=0.02)
    t1, t2 = concurrency_times(system, one, dec, 0.5, 0.02)
    assert float(t1[0]) == pytest.approx(ttft)
    assert float(t2[0]) == pytest.approx(tpot)


def test_static_batch_adds_the_dispatch_to_the_combined_resources():
    system = make_system(n=8, overlap="max")
    ttft, tpot = static_times(system, _phase(0.2, 0.1, intra=0.05, dispatch=0.01), _phase(0.01, 0.03, dispatch=0.002))
    assert float(ttft[0]) == pytest.approx(0.21)
    assert float(tpot[0]) == pytest.approx(0.032)


def test_rates_follow_littles_law_and_have_no_price_without_one():
    system = make_system(n=8)
    ttft, tpot = np.array([0.5]), np.array([0.02])
    r = concurrency_rates(system, 16, 2, 101, ttft, tpot)
    assert float(r.latency_s[0]) == pytest.approx(0.5 + 100 * 0.02)
    assert float(r.tokens_per_s[0]) == pytest.approx(16 * 101 / 2.5 * 2)
    assert float(r.joules_per_token[0]) == pytest.approx(system.power_W * 8 / float(r.tokens_per_s[0]))
    unpriced = system.model_copy(update={"device": system.device.model_copy(update={"price_per_hour_usd": None})})
    assert unpriced.price_per_hour_usd is None
    assert np.isnan(concurrency_rates(unpriced, 16, 2, 101, ttft, tpot).usd_per_million_tokens[0])
    assert float(r.usd_per_million_tokens[0]) == pytest.approx(2.99 * 8 / 3600 / float(r.tokens_per_s[0]) * 1e6)
    s = static_rates(system, 8, 2, 1, 100, ttft, tpot)  # 2 batches in flight (two pipeline stages)
    assert float(s.latency_s[0]) == pytest.approx(0.5 + 100 * 0.02)
    assert float(s.throughput_tokens_per_s[0]) == pytest.approx(8 * 100 * 2 / 2.5)
    assert float(s.tokens_per_s[0]) == pytest.approx(8 * 2 / 0.02)
