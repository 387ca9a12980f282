"""An objective in $ needs a device-hour price and one in joules a device power: without it the search says which
figure is missing (it used to report every plan infeasible and blame the candidates)."""

import numpy as np
import pytest

from aitrinity import catalog
from aitrinity.errors import SpecError
from aitrinity.plan.objective import require
from aitrinity.plan.rows import frontier
from aitrinity.plan.search import Space, search_training
from aitrinity.plan.search_disaggregated import search_splits
from aitrinity.plan.search_serving import search_serving
from aitrinity.spec.scenario import Plan, ServingJob, TrainingJob
from tests.conftest import make_system

SMALL = Space.of({"zero": (1,), "recompute": ("none",), "micro-batch": (1,)})


def test_cost_without_a_price_names_the_price():
    h200 = make_system("h200")  # the catalog has no price for it
    assert h200.price_per_hour_usd is None
    with pytest.raises(SpecError, match=r"system\.price_per_device_hour.*h200"):
        require("cost", h200)
    with pytest.raises(SpecError, match="price"):
        require("tokens_per_dollar", h200)
    require("energy", h200)  # it has a power
    require("cost", make_system("h200", price_per_device_hour="$3.5/h"))


def test_energy_without_a_power_names_the_power():
    tpu = make_system("tpu-v6e", 8, 8)
    assert tpu.power_W is None
    with pytest.raises(SpecError, match=r"system\.power_per_device.*tpu-v6e"):
        require("energy", tpu)
    with pytest.raises(SpecError, match="power"):
        require("tokens_per_joule", tpu)
    for fine in ("time", "throughput", "latency", "performance"):
        require(fine, tpu)
    require("energy", make_system("tpu-v6e", 8, 8, power_per_device="300 W"))


def test_every_search_asks_before_it_prices():
    m = catalog.model("llama-3.1-8b")
    tpu, h200 = make_system("tpu-v6e", 8, 8), make_system("h200")
    job = TrainingJob(seq_len=2048, global_batch=64)
    with pytest.raises(SpecError, match="power"):
        search_training(m, job, Plan(), tpu, "energy", space=SMALL)
    serving = ServingJob(prompt_tokens=512, output_tokens=128, batch=8)
    with pytest.raises(SpecError, match="price"):
        search_serving(m, serving, Plan(), h200, "cost")
    with pytest.raises(SpecError, match="power"):
        search_splits(m, serving, Plan(), tpu, "energy")
    # the same searches by time rank the plans; their rows carry no joules, as rows without a price carry no $
    best = search_training(m, job, Plan(), tpu, "time", space=SMALL).best
    assert best is not None and best.joules_per_token is None and best.usd_per_million_tokens is None
    row = search_serving(m, serving, Plan(), tpu, "throughput").best
    assert row is not None and row.joules_per_token is None


def test_the_frontier_does_not_depend_on_a_price_or_a_power():
    """$ and J are the system's price and power over the throughput (times the step time in training), so the
    frontier leaves them out: the same plans with or without either. (With them as a column, a system without a
    price or a power gave a column of NaNs -- never dominated -- and the frontier kept almost every feasible row.)"""
    m = catalog.model("llama-3.1-8b")
    serving = ServingJob(prompt_tokens=512, output_tokens=128, batch=8)
    labels = []
    for extra in ({}, {"power_per_device": "300 W", "price_per_device_hour": "$2/h"}):
        r = search_serving(m, serving, Plan(), make_system("tpu-v6e", 8, 8, **extra), "throughput", top=10**6)
        labels.append([c.label for c in r.pareto])
        assert 0 < len(r.pareto) < r.feasible / 2
        # the frontier is the non-dominated set of its five axes
        cols = np.array(
            [[c.latency_s, c.hbm_bytes, c.link_bytes, -c.throughput_tokens_per_s, c.accuracy_drop] for c in r.top]
        )
        assert len(frontier(np.arange(len(r.top)), list(cols.T))) == len(r.pareto)
    assert labels[0] == labels[1]
    job = TrainingJob(seq_len=2048, global_batch=64)
    fronts = [
        [
            c.label
            for c in search_training(m, job, Plan(), make_system("tpu-v6e", 8, 8, **extra), "time", space=SMALL).pareto
        ]
        for extra in ({}, {"power_per_device": "300 W"})
    ]
    assert fronts[0] == fronts[1] and fronts[0]
