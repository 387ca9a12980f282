"""The planner's rows are the one-plan estimate: every configuration of small spaces, priced as rows of one layout,
gives the step, memory, bytes and feasibility of ``training_ledger`` + its Estimate. Both price with
:func:`aitrinity.cost.training_pricing.price_columns`; what this checks is the rest -- a row's columns among many
equal the columns of a batch of one (the compressors' effects computed once per scenario, the grid), the feasibility
columns agree with the one-plan checks and memory checks, and on devices without the operator model the columns'
phase roofline equals the ledger's (:func:`aitrinity.cost.estimate.price`)."""

import itertools

import pytest

from aitrinity import catalog
from aitrinity.cost.estimate import estimate_training, price
from aitrinity.cost.kernels import roofline
from aitrinity.cost.training import training_ledger
from aitrinity.errors import SpecError
from aitrinity.plan.vector_training import COMPRESSION, RECOMPUTE, Rows, _plan_for, price_rows
from aitrinity.spec.exchanges import LocalSGD
from aitrinity.spec.hardware import Efficiency
from aitrinity.spec.scenario import Plan, TrainingJob
from tests.conftest import make_system

CASES = [
    # (model, devices, devices per node, tp, pp, job, base plan, system kwargs)
    ("llama-3.1-8b", 16, 8, 2, 2, TrainingJob(seq_len=2048, global_batch=32), Plan(), {"host_memory": "host-dram"}),
    (  # Llama 3's context parallelism: the K/V all-gathers in series with the kernels
        "llama-3.1-8b",
        32,
        8,
        2,
        2,
        TrainingJob(seq_len=32768, global_batch=16),
        Plan(cp=2, cp_method="allgather"),
        {"host_memory": "host-dram"},
    ),
    (  # collectives holding SMs beside the GEMMs, under max overlap
        "llama-3.1-8b",
        16,
        8,
        2,
        2,
        TrainingJob(seq_len=2048, global_batch=32),
        Plan(),
        {"host_memory": "host-dram", "comm_sm_share": 0.2},
    ),
    ("gpt-3-175b", 64, 8, 8, 4, TrainingJob(seq_len=2048, global_batch=64), Plan(flash_attention=False), {}),
    (
        "mixtral-8x7b",
        32,
        8,
        2,
        2,
        TrainingJob(seq_len=4096, global_batch=64),
        Plan(ep=4),
        {"host_memory": "host-dram", "overlap": "partial", "comm_sm_share": 0.15},
    ),
    ("deepseek-v3", 32, 8, 8, 1, TrainingJob(seq_len=4096, global_batch=64), Plan(ep=2), {"overlap": "sum"}),
    # its multi-token-prediction module's block among the last of 4 stages' layers, its head pass on that stage
    ("deepseek-v3", 64, 8, 4, 4, TrainingJob(seq_len=4096, global_batch=64), Plan(ep=4), {}),
    ("llama-3.1-8b", 8, 4, 4, 1, TrainingJob(seq_len=1024, global_batch=24), Plan(), {"host_memory": "host-dram"}),
    (  # the scenario's local SGD applies to every candidate (synchronise every 4 steps; no ZeRO-3)
        "llama-3.1-8b",
        32,
        8,
        2,
        1,
        TrainingJob(seq_len=2048, global_batch=64),
        Plan(exchanges=[LocalSGD(kind="local-sgd", period=4)]),
        {"host_memory": "host-dram", "inter_node_link": "ethernet-25g"},
    ),
    (
        "llama-3.1-8b",
        8,
        8,
        2,
        2,
        TrainingJob(seq_len=1024, global_batch=16),
        Plan(),
        {"efficiency": Efficiency(compute=0.6, compute_half_rows=32, memory=0.8, op_overhead_s=2e-5)},
    ),
]


def _rows():
    grid = list(
        itertools.product([1, 2, 4], range(4), range(3), [False, True], range(3), [False, True], [1, 2], [0.0, 0.5])
    )
    return Rows.from_grid(grid), grid


@pytest.mark.parametrize("gpu", [True, False], ids=["operator-model", "roofline"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-tp{c[3]}-pp{c[4]}")
def test_every_row_is_the_one_plan_estimate(case, gpu):
    name, n, per_node, tp, pp, job, base, sys_kw = case
    m = catalog.model(name)
    system = make_system(n=n, per_node=per_node, **sys_kw)
    if not gpu:  # the same device as another kind: priced by the phase roofline
        system = system.model_copy(update={"device": system.device.model_copy(update={"kind": "accelerator"})})
    rows, grid = _rows()
    got = price_rows(m, job, base, system, tp, pp, rows)
    checked = 0
    for i, (mb, zero, rec, sp, comp, off, v, aoff) in enumerate(grid):
        plan = _plan_for(base, tp, pp, RECOMPUTE[rec], sp, COMPRESSION[comp])
        ex = list(plan.exchanges)
        if off:
            ex.append({"kind": "optimizer-offload"})
        if aoff:
            ex.append({"kind": "activation-offload", "fraction": aoff})
        try:
            plan = Plan.model_validate(
                {**plan.model_dump(), "micro_batch": mb, "zero": zero, "exchanges": ex, "virtual_stages": v}
            )
            led = training_ledger("t", m, job, plan, system)
        except SpecError:
            assert not got.feasible[i], (i, grid[i])
            continue
        est = estimate_training(led, m, plan, system, roofline(system.device), []) if gpu else price(led, system)
        assert got.step_time_s[i] == pytest.approx(est.training.step_time_s, rel=1e-9), grid[i]
        assert got.hbm_bytes[i] == pytest.approx(led.memory_bytes("hbm"), rel=1e-9), grid[i]
        assert got.host_bytes[i] == pytest.approx(led.memory_bytes("host"), rel=1e-9, abs=1e-6), grid[i]
        moved = sum(t.bytes_per_device for t in led.phases[0].traffic if t.channel != "host_dram")
        assert got.link_bytes[i] == pytest.approx(moved, rel=1e-9, abs=1e-6), grid[i]
        fits = est.memory.fits and all(t.fits for t in est.lower_tiers)
        assert bool(got.feasible[i]) == fits, (grid[i], got.reason[i])
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("gpu", [True, False], ids=["operator-model", "roofline"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-tp{c[3]}-pp{c[4]}")
def test_the_search_times_the_feasible_rows_only_and_the_same(case, gpu):
    """``every_row=False`` (the search's pricing): the feasible rows' numbers, bit for bit, the others' NaN; memory and
    reasons for every row."""
    import numpy as np

    name, n, per_node, tp, pp, job, base, sys_kw = case
    m = catalog.model(name)
    system = make_system(n=n, per_node=per_node, **sys_kw)
    if not gpu:
        system = system.model_copy(update={"device": system.device.model_copy(update={"kind": "accelerator"})})
    rows, _ = _rows()
    every = price_rows(m, job, base, system, tp, pp, rows)
    some = price_rows(m, job, base, system, tp, pp, rows, every_row=False)
    ok = every.feasible
    assert not ok.all()  # (the deepseek-v3 cases fit in none)
    for f in ("feasible", "reason", "hbm_bytes", "host_bytes"):
        assert np.array_equal(getattr(some, f), getattr(every, f)), f
    for f in ("step_time_s", "compute_s", "link_bytes", "usd_per_step", "joules_per_step", "binding"):
        assert np.array_equal(getattr(some, f)[ok], getattr(every, f)[ok]), f
    assert np.isnan(some.step_time_s[~ok]).all()


def test_no_feasible_row_prices_nothing():
    import numpy as np

    m = catalog.model("llama-3.1-70b")
    rows, _ = _rows()
    got = price_rows(
        m, TrainingJob(seq_len=8192, global_batch=8), Plan(), make_system(n=1), 1, 1, rows, every_row=False
    )
    assert not got.feasible.any() and np.isnan(got.step_time_s).all() and (got.reason == 2).any()


def test_layouts_sharing_their_layer_times_price_as_each_alone():
    """A search's store of layer times (``shared``): layouts of one TP degree and several pipeline depths priced
    with it give, bit for bit, what each gives alone; the store keeps one entry per (tp, ep, MoE layer)."""
    import numpy as np

    from aitrinity.plan.search import DEFAULT_SPACE, _rows

    m, job = catalog.model("llama-3.1-8b"), TrainingJob(seq_len=2048, global_batch=64)
    system = make_system(n=32, per_node=8, host_memory="host-dram")
    rows = _rows(True, DEFAULT_SPACE)
    shared: dict = {}
    for tp, pp in ((2, 1), (2, 2), (2, 4), (4, 2)):
        alone = price_rows(m, job, Plan(), system, tp, pp, rows, every_row=False)
        together = price_rows(m, job, Plan(), system, tp, pp, rows, every_row=False, shared=shared)
        assert alone.feasible.any()
        for f in ("step_time_s", "compute_s", "binding", "hbm_bytes"):
            assert np.array_equal(getattr(alone, f), getattr(together, f), equal_nan=f != "binding"), (tp, pp, f)
    [kept] = shared.values()
    assert sorted(kept) == [(2, 1, False), (4, 1, False)]


def test_a_layout_ledger_prices_as_building_it_anew_and_only_its_own_layout():
    """``price_rows(ledger=)`` (a hardware sweep's kept ledger) gives, bit for bit, what pricing without it gives on
    two systems; a ledger of another layout or plan is refused."""
    import numpy as np

    from aitrinity.plan.vector_training import layout_ledger

    m = catalog.model("llama-3.1-8b")
    job = TrainingJob(seq_len=4096, global_batch=64)
    rows, _ = _rows()
    plan = Plan()
    ledger = layout_ledger(m, job, plan, 2, 2, 4, rows)
    for link in ("ib-ndr", "ethernet-100g"):
        system = make_system(n=16, host_memory="host-dram", inter_node_link=link)
        kept = price_rows(m, job, plan, system, 2, 2, rows, every_row=False, ledger=ledger)
        anew = price_rows(m, job, plan, system, 2, 2, rows, every_row=False)
        for f in type(kept).__dataclass_fields__:
            assert np.array_equal(getattr(kept, f), getattr(anew, f), equal_nan=True), (link, f)
    with pytest.raises(ValueError, match="another layout"):
        price_rows(m, job, plan, make_system(n=16), 4, 1, rows, ledger=ledger)
    with pytest.raises(ValueError, match="another layout"):
        price_rows(m, job, Plan(zero=1), make_system(n=16), 2, 2, rows, ledger=ledger)
