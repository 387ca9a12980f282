"""tools/probe.py: random scenarios whose plans ``diagnose`` must confirm (hypothesis draws the seeds, so a failure
shrinks to one and replays with ``python tools/probe.py --cases 1 --seed N --family F``); and the checks themselves
see a number the planner got wrong."""

import random
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aitrinity import api
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Scenario
from tools.probe import FAMILIES, Case, Cases, _serving_problems, _training_problems, run_case


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), family=st.sampled_from(FAMILIES))
def test_what_plan_reports_diagnose_confirms(seed, family):
    case = Cases(random.Random(seed)).draw(family)
    out = run_case(case)
    assert out.verdict in ("ok", "refused"), f"{case.describe()}: {out.problems}"


SERVING = Case(
    "serving",
    {
        "name": "probe",
        "system": {"device": "h100-sxm", "num_devices": 4},
        "workload": {"model": "llama-3.1-8b", "serving": {"prompt_tokens": 1024, "output_tokens": 256, "batch": 16}},
        "plan": {"exchanges": []},
    },
)
TRAINING = Case(
    "training",
    {
        "name": "probe",
        "system": {"device": "h100-sxm", "num_devices": 16},
        "workload": {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "global_batch": 128}},
        "plan": {"exchanges": []},
    },
)


def _planned(case):
    s = validate(Scenario, case.scenario)
    return s, api.plan(s, top=5)


def test_the_checks_pass_an_honest_report_and_catch_a_moved_number():
    s, rep = _planned(SERVING)
    assert list(_serving_problems(SERVING, s, rep, 1e-6)) == []
    row = rep.search.top[1]
    moved = rep.model_copy(deep=True)
    moved.search.top[1] = row.model_copy(update={"tpot_s": row.tpot_s * 1.001})
    assert any("row 1" in p for p in _serving_problems(SERVING, s, moved, 1e-6))
    worse = rep.model_copy(deep=True)  # a frontier row with more throughput than the best
    best = worse.search.best
    worse.search.pareto.append(best.model_copy(update={"throughput_tokens_per_s": best.throughput_tokens_per_s * 2}))
    assert any("frontier" in p for p in _serving_problems(SERVING, s, worse, 1e-6))

    s, rep = _planned(TRAINING)
    assert list(_training_problems(TRAINING, s, rep, 1e-6)) == []
    moved = rep.model_copy(deep=True)
    moved.search.top.reverse()  # out of the objective's order (and the best's step no longer the first row's)
    assert any("before row" in p for p in _training_problems(TRAINING, s, moved, 1e-6))
