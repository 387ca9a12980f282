"""The edge stream: adaptive splitting beats every static choice and comes within 10% of the oracle."""

import pytest

from aitrinity import api
from aitrinity.catalog.loader import DATA
from aitrinity.catalog.traces import load_link_trace
from aitrinity.edge import resolve
from aitrinity.sim.edge import EdgeStream, compare_edge, simulate_edge

TRACE = load_link_trace(DATA / "traces" / "uplink-swing.csv")


@pytest.fixture(scope="module")
def options():
    s, base = api.load("camera-analytics-edge")
    return resolve(s, base).options()


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 11])  # 7 and 11: held out, never tuned on
def test_adaptive_beats_every_static_choice_and_nears_the_oracle(options, seed):
    results = {r.policy: r for r in compare_edge(options, TRACE, seed=seed)}
    ad, orc = results.pop("adaptive"), results.pop("oracle")
    best_static = min(results.values(), key=lambda r: r.mean_latency_s)
    assert ad.mean_latency_s < best_static.mean_latency_s
    assert ad.mean_latency_s <= 1.1 * orc.mean_latency_s
    assert ad.switches > 0


def test_frames_are_conserved_and_runs_repeat(options):
    s = EdgeStream(duration_s=60)
    a = simulate_edge(options, TRACE, "adaptive", s, seed=4)
    assert a.frames == 120 == sum(a.frames_by_choice.values())
    assert a == simulate_edge(options, TRACE, "adaptive", s, seed=4)
    local = simulate_edge(options, TRACE, "static:all local", EdgeStream(fps=1, duration_s=60))
    assert local.latency_s.p50 == pytest.approx(next(o for o in options if o.label == "all local").latency_s)
    queued = simulate_edge(options, TRACE, "static:all local", s)  # 569 ms a frame, one every 500 ms: a queue
    assert queued.latency_s.p99 > 10 * local.latency_s.p99


def test_bad_policies_are_named(options):
    from aitrinity.errors import SpecError

    with pytest.raises(SpecError, match="static:"):
        simulate_edge(options, TRACE, "static:nowhere")
    with pytest.raises(SpecError, match="adaptive or oracle"):
        simulate_edge(options, TRACE, "greedy")
