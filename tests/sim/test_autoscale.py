"""Serving under a diurnal load: the adaptive autoscaler beats every static instance count; the oracle bounds it."""

import pytest

from aitrinity import catalog
from aitrinity.errors import SpecError
from aitrinity.sim.autoscale import Autoscale, compare_autoscale, periods, simulate_autoscale, table
from aitrinity.sim.serving import for_device
from aitrinity.sim.workload import diurnal_chat, generate

M = catalog.model("llama-3.1-8b")
L4 = catalog.device("l4")
BASE = for_device(L4)


@pytest.fixture(scope="module")
def day():
    a = Autoscale(max_instances=5)
    return table(generate(diurnal_chat(600), seed=0), M, BASE, a), a


def test_adaptive_beats_every_static_count_and_the_oracle_bounds_it(day):
    t, a = day
    res = {r.policy: r for r in compare_autoscale(t, a)}
    ad, orc = res.pop("adaptive"), res.pop("oracle")
    assert ad.objective_usd < min(r.objective_usd for r in res.values())
    assert orc.objective_usd <= ad.objective_usd
    assert ad.switches > 0 and len(set(ad.instances)) > 2
    assert all(r.requests == sum(len(p) for p in t.periods) for r in (ad, orc))


def test_periods_and_policy_errors(day):
    t, a = day
    assert sum(len(p) for p in t.periods) == len(periods([r for p in t.periods for r in p], 1e9)[0])
    with pytest.raises(SpecError, match="static:N"):
        simulate_autoscale(t, "static:9", a)
    with pytest.raises(SpecError, match="adaptive or oracle"):
        simulate_autoscale(t, "greedy", a)
