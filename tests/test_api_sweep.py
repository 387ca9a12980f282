"""``api.sweep``: the best plan at each value of a what-if key, as ``api.plan`` gives it value by value -- with the
training searches of a hardware sweep sharing each layout's system-free pricing (``plan.search.Reuse``)."""

import pytest

from aitrinity import api, catalog
from aitrinity.errors import SpecError
from aitrinity.plan import search
from aitrinity.plan.search import Reuse, search_training
from aitrinity.spec.scenario import TrainingJob
from tests.conftest import make_system


def _dumps(reports):
    return [r.model_dump(mode="json") for r in reports]


@pytest.mark.parametrize(
    ("scenario", "key", "values", "kw"),
    [
        # bandwidths: every value times the same feasible rows (the ledger columns are built once)
        ("trillion-param-training", "link", ["25Gbit/s", "400Gbit/s", "3.2Tbit/s"], {}),
        ("trillion-param-training", "hbm_bandwidth", ["x0.5", "x2"], {"objective": "cost"}),
        # capacities: the feasible rows change with the value (the columns are built again for other rows)
        ("trillion-param-training", "hbm_capacity", ["141GiB", "x4", "40GiB", "141GiB"], {}),
        ("llama-70b-training-h100", "host_capacity", ["x0.25", "x1"], {"start": "scenario"}),
        ("llama-70b-training-h100", "flops", ["x0.5", "x2"], {"overrides": ["gpus=64"]}),
        # not hardware, or not training: value by value
        ("trillion-param-training", "link", ["ethernet-100g", "400Gbit/s"], {}),
        ("llama-70b-serving-long-context", "link", ["25Gbit/s", "400Gbit/s"], {"tpot_slo": "60ms"}),
        ("camera-analytics-edge", "uplink", ["10Mbit/s", "100Mbit/s"], {}),  # (an edge scenario's own key)
    ],
)
def test_a_sweep_is_the_plan_of_each_value(scenario, key, values, kw):
    overrides = kw.pop("overrides", [])
    swept = api.sweep(scenario, key, values, overrides=overrides, **kw)
    one_by_one = [
        api.plan(
            scenario,
            kw.get("objective"),
            1,
            [*overrides, f"{key}={v}"],
            kw.get("start", "naive"),
            None,
            kw.get("tpot_slo"),
        )
        for v in values
    ]
    assert _dumps(swept) == _dumps(one_by_one)


def test_a_hardware_sweep_of_a_training_scenario_builds_each_layout_ledger_once(monkeypatch):
    built = []
    real = search.layout_ledger
    monkeypatch.setattr(search, "layout_ledger", lambda *a: built.append(a[3:6]) or real(*a))
    calls = []
    monkeypatch.setattr(search, "search_training", lambda *a, **k: calls.append(k["reuse"]) or search_training(*a, **k))
    api.sweep("trillion-param-training", "link", ["25Gbit/s", "100Gbit/s", "400Gbit/s"])
    assert len(calls) == 3 and calls[0] is calls[1] is calls[2] is not None
    assert built and len(built) == len(calls[0].parts)  # every part once, for the first value
    built.clear()
    api.plan("trillion-param-training", overrides=["link=25Gbit/s"])
    assert len(built) == len(calls[0].parts)  # a plan alone builds them all (nothing kept)


def test_sweep_progress_and_errors():
    seen = []
    api.sweep("trillion-param-training", "link", ["25Gbit/s", "50Gbit/s"], progress=lambda d, n: seen.append((d, n)))
    assert seen == [(1, 2), (2, 2)]
    with pytest.raises(SpecError, match="at least one value"):
        api.sweep("trillion-param-training", "link", [])
    with pytest.raises(SpecError, match="no TTFT/TPOT objective"):
        api.sweep("trillion-param-training", "link", ["25Gbit/s"], ttft_slo="1s")
    with pytest.raises(SpecError, match="naive or scenario"):
        api.sweep("trillion-param-training", "link", ["25Gbit/s"], start="nowhere")
    with pytest.raises(SpecError, match="inter_node_bandwidth"):
        api.sweep("trillion-param-training", "link", ["25Gbit/s", "-3Gbit/s"])


def test_a_reuse_refuses_a_search_of_another_job_or_system_layout():
    m = catalog.model("llama-2-7b")
    base = catalog.load_scenario("llama-70b-training-h100").plan
    job = TrainingJob(seq_len=2048, global_batch=64)
    reuse = Reuse()
    first = search_training(m, job, base, make_system(n=16), pareto=False, reuse=reuse)
    again = search_training(m, job, base, make_system(n=16, inter_node_link="ethernet-100g"), pareto=False, reuse=reuse)
    assert first.evaluated == again.evaluated
    with pytest.raises(ValueError, match="one model, job, plan, space and system layout"):
        search_training(m, TrainingJob(seq_len=1024, global_batch=64), base, make_system(n=16), reuse=reuse)
    with pytest.raises(ValueError, match="one model, job, plan, space and system layout"):
        search_training(m, job, base, make_system(n=32), reuse=reuse)
