"""Training on a changing link: static plans, the adaptive Controller and the hindsight oracle."""

import pytest

from aitrinity.catalog.traces import load_link_trace
from aitrinity.errors import SpecError
from aitrinity.sim.training import DEGRADING, LinkTrace, TrainingJob, compare, simulate_training


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 11])  # 7 and 11: held out, never tuned on
def test_adaptive_beats_every_static_plan_and_nears_the_oracle(seed):
    results = {r.policy: r for r in compare(TrainingJob(), DEGRADING, seed=seed)}
    adaptive, oracle = results.pop("adaptive"), results.pop("oracle")
    assert all(adaptive.total_s < r.total_s for r in results.values())
    assert oracle.total_s <= adaptive.total_s <= 1.10 * oracle.total_s


def test_static_on_a_constant_link_is_steps_times_step_time():
    job = TrainingJob(steps=50)
    link = LinkTrace((0.0,), (1e9 / 8,))
    r = simulate_training(job, link, "static:int8", noise=0.0)
    assert r.total_s == pytest.approx(50 * job.step_s("int8", 1e9 / 8))
    assert r.steps_by_method == {"int8": 50} and r.switches == 0


def test_same_seed_same_run_and_bad_input(tmp_path):
    a = simulate_training(TrainingJob(steps=300), DEGRADING, "adaptive", seed=3)
    assert a == simulate_training(TrainingJob(steps=300), DEGRADING, "adaptive", seed=3)
    with pytest.raises(SpecError):
        simulate_training(TrainingJob(), DEGRADING, "static:zip")
    f = tmp_path / "link.csv"
    f.write_text("# time_s, Mbit/s\n0, 1000\n10, 100\n")
    link = load_link_trace(f)
    assert link.at(5) == 125e6 and link.at(10) == 12.5e6
    f.write_text("0 fast\n")
    with pytest.raises(SpecError, match=r"link\.csv:1"):
        load_link_trace(f)
