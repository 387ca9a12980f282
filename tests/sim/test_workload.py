"""Generated streams: rates, burstiness, diurnal thinning and sessions that share their history's blocks."""

import numpy as np
import pytest

from aitrinity.cost.prefix_reuse import replay
from aitrinity.sim.workload import Workload, diurnal, generate


def gaps(reqs):
    t = np.array([r.timestamp_ms for r in reqs]) / 1e3
    return np.diff(t)


def test_poisson_rate_and_determinism():
    reqs = generate(Workload(duration_s=2000, rate_rps=2.0), seed=1)
    assert len(reqs) == pytest.approx(4000, rel=0.05)
    g = gaps(reqs)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.08)
    assert reqs == generate(Workload(duration_s=2000, rate_rps=2.0), seed=1)
    assert [r.timestamp_ms for r in reqs] == sorted(r.timestamp_ms for r in reqs)


def test_bursty_gaps_vary_more():
    g = gaps(generate(Workload(duration_s=2000, rate_rps=2.0, burstiness=3.0, followup=0), seed=2))
    assert g.std() / g.mean() > 2.2


def test_diurnal_shape_thins_the_night():
    reqs = generate(Workload(duration_s=1000, rate_rps=5.0, rate_shape=diurnal(1000, low=0.1)), seed=3)
    t = np.array([r.timestamp_ms for r in reqs]) / 1e3
    night = ((t < 100) | (t > 900)).sum()
    day = ((t > 400) & (t < 600)).sum()
    assert day > 4 * night


def test_sessions_share_their_history_as_a_block_prefix():
    w = Workload(duration_s=300, rate_rps=2.0, followup=0.8, prompt_tokens_median=600)
    reqs = generate(w, seed=4)
    assert all(len(r.hash_ids) == r.prompt_tokens // 512 for r in reqs)
    assert replay(reqs, None, 512).token_hit_rate > 0.3  # histories come back
    alone = generate(Workload(duration_s=300, rate_rps=2.0, followup=0.0, prompt_tokens_median=600), seed=4)
    assert replay(alone, None, 512).token_hit_rate == 0.0


def test_bad_inputs():
    with pytest.raises(ValueError):
        generate(Workload(rate_rps=0))
    with pytest.raises(ValueError):
        diurnal(0)
