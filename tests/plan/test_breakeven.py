import math
import typing

import pytest

from aitrinity import api
from aitrinity.cost.estimate import price_serving_ledger, price_training_ledger
from aitrinity.plan.breakeven import _per_unit, _scaled, _without, report
from aitrinity.plan.exchanges import CATALOG
from aitrinity.spec import exchanges as ex
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Scenario

TRAIN = {
    "name": "t",
    "system": {"device": "h100-sxm", "num_devices": 64, "inter_node_link": "ethernet-25g", "host_memory": "host-dram"},
    "workload": {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "global_batch": 256}},
    "plan": {"zero": 1, "exchanges": [{"kind": "gradient-compression", "method": "int8"}]},
}


def _resolved(data):
    return api.resolve(validate(Scenario, data))


def _gain(r, index, channel, k):
    s = _scaled(r.system, channel, k)
    w = r.scenario.workload.training

    from aitrinity.cost.training import training_ledger

    with_, without = r.scenario.plan, _without(r.scenario.plan, index)
    a = _per_unit(price_training_ledger(training_ledger("t", r.model, w, with_, s), r.model, with_, s), with_)
    b = _per_unit(price_training_ledger(training_ledger("t", r.model, w, without, s), r.model, without, s), without)
    return a - b


def test_every_exchange_kind_is_in_the_catalog():
    union = typing.get_args(typing.get_args(ex.ExchangeSpec)[0])
    kinds = {typing.get_args(cls.model_fields["kind"].annotation)[0] for cls in union}
    assert kinds <= set(CATALOG)
    assert kinds == ex.TRAINING_ONLY | ex.SERVING_ONLY


def test_int8_gradients_pay_off_below_the_break_even_bandwidth():
    r = _resolved(TRAIN)
    rep = report(r.scenario, r.model, r.system, 0)
    assert rep.pathway == "compute->bandwidth" and rep.resource == "inter-node link"
    assert rep.pays_off and rep.threshold_Bps > rep.current_Bps
    k = rep.threshold_Bps / rep.current_Bps
    assert _gain(r, 0, "inter_node", k * 0.98) < 0  # faster just below the threshold
    assert _gain(r, 0, "inter_node", k * 1.02) >= 0  # no gain just above it
    assert "below" in rep.sentence and "so it does" in rep.sentence


def test_sparse_compression_with_many_ranks_never_pays():
    """All-gathered top-k at density 0.4 sends (n-1)·0.4·6 bytes per element: more than the 2(n-1)/n·2 of bf16."""
    data = {
        **TRAIN,
        "plan": {"zero": 1, "exchanges": [{"kind": "gradient-compression", "method": "topk", "density": 0.4}]},
    }
    r = _resolved(data)
    rep = report(r.scenario, r.model, r.system, 0)
    assert not rep.pays_off and rep.threshold_Bps is None and "never pays off" in rep.sentence


def test_offload_is_free_above_the_break_even_host_bandwidth_under_max_overlap():
    data = {
        **TRAIN,
        "system": {**TRAIN["system"], "inter_node_link": "infiniband-ndr"},
        "plan": {"zero": 1, "exchanges": [{"kind": "optimizer-offload"}]},
    }
    r = _resolved(data)
    rep = report(r.scenario, r.model, r.system, 0)
    assert rep.pathway == "bandwidth->memory" and rep.device_bytes_relieved > 0
    assert rep.threshold_Bps is not None
    k = rep.threshold_Bps / rep.current_Bps
    assert _gain(r, 0, "host", k * 1.02) <= 1e-6 * rep.time_per_unit_without_s
    assert _gain(r, 0, "host", k * 0.98) > 0
    data["system"] = {**data["system"], "overlap": "sum"}  # nothing hides: it costs time at today's bandwidth
    r = _resolved(data)
    serial = report(r.scenario, r.model, r.system, 0)
    assert not serial.pays_off and serial.time_per_unit_with_s > serial.time_per_unit_without_s


def test_diagnose_reports_every_exchange_with_its_pathway():
    from pathlib import Path

    d = api.diagnose(Path(__file__).resolve().parents[2] / "examples" / "serving-exchanges.yaml")
    assert [x.kind for x in d.exchanges] == [
        x.kind
        for x in api.resolve(
            Path(__file__).resolve().parents[2] / "examples" / "serving-exchanges.yaml"
        ).scenario.plan.exchanges
    ]
    assert {x.pathway for x in d.exchanges} >= {"bandwidth->memory", "memory->compute", "compute->memory"}
    assert all(x.sentence.endswith(".") for x in d.exchanges)


@pytest.mark.parametrize("name", ["training-exchanges.yaml", "serving-exchanges.yaml"])
def test_thresholds_are_where_the_verdict_flips(name):
    from pathlib import Path

    from aitrinity.cost.serving import serving_ledger
    from aitrinity.cost.training import training_ledger

    r = api.resolve(Path(__file__).resolve().parents[2] / "examples" / name)
    w = r.scenario.workload
    for i, x in enumerate(r.scenario.plan.exchanges):
        rep = report(r.scenario, r.model, r.system, i)
        if rep.threshold_Bps is None:
            continue
        inf = CATALOG[x.kind]
        channel = {
            "inter-node link": "inter_node",
            "intra-node link": "intra_node",
            "host link": "host",
            "storage path": "storage",
            "remote-pool path": "remote",
            "device-memory bandwidth": "hbm",
        }[rep.resource]

        def pays(k, i=i, channel=channel, inf=inf, rep=rep):
            s = _scaled(r.system, channel, k)
            build = (
                (lambda p: training_ledger("t", r.model, w.training, p, s))
                if w.training
                else (lambda p: serving_ledger("s", r.model, w.serving, p, s))
            )

            def cost(p):  # priced as trinity diagnose prices it
                if w.training:
                    return price_training_ledger(build(p), r.model, p, s)
                return price_serving_ledger(build(p), r.model, p, w.serving, s)

            plan, without = r.scenario.plan, _without(r.scenario.plan, i)
            g = _per_unit(cost(plan), plan) - _per_unit(cost(without), without)
            tol = 1e-6 * rep.time_per_unit_without_s
            return g < -tol if inf.rule == "faster" else g <= tol

        k = rep.threshold_Bps / rep.current_Bps
        assert pays(k * 0.97) != pays(k * 1.03), (x.kind, rep.sentence)


@pytest.mark.parametrize(
    ("shape", "most"),
    [
        (lambda k: math.log(k / 0.0123), 4),  # smooth in log k: interpolation closes in within a few pricings
        (lambda k: k - 0.0123, 6),  # smooth in k
        (lambda k: max(k - 0.0123, 0.0) * 1e3 - 1e-9, 13),  # flat, then a kink: a hidden exchange's margin
        (lambda k: -1.0 if k < 0.0123 else 1.0, 13),  # a jump: bisection's pace
    ],
    ids=["log", "linear", "kink", "jump"],
)
def test_the_boundary_scan_stops_at_the_first_flip_and_finds_it_to_the_printed_figures(shape, most):
    """The scan prices its points only up to the first flip, then Brent's method closes the bracket: the threshold
    it returns is the flip's to far better than the three figures it is printed with, in no more pricings than 12
    halvings of the bracket took (far fewer where the margin is smooth); a verdict that never flips gives None."""
    from aitrinity.plan.breakeven import SCAN, _boundary

    asked: list[float] = []

    def margin(k: float) -> float:
        asked.append(k)
        return shape(k)

    k = _boundary(margin, lambda m: m < 0, below=True)  # pays below the flip
    assert k == pytest.approx(0.0123, rel=1e-4)
    scanned = [x for x in asked if x in SCAN]
    assert scanned == [x for x in SCAN if x <= 0.0123 * 1.8]  # up to the first point past the flip, no further
    assert len(asked) - len(scanned) <= most
    asked.clear()
    assert _boundary(lambda k: asked.append(k) or -1.0, lambda m: m < 0, below=True) is None
    assert len(asked) == len(SCAN)


def test_a_scan_point_on_the_flip_is_the_threshold():
    """A margin of exactly zero at a scan point is the flip itself (it pays there only where zero pays)."""
    from aitrinity.plan.breakeven import SCAN, _boundary

    flip = SCAN[10]
    assert _boundary(lambda k: k - flip, lambda m: m <= 0, below=True) == SCAN[10]  # zero pays: the last paying
    assert _boundary(lambda k: k - flip, lambda m: m < 0, below=True) == SCAN[10]  # zero does not: the first not


def test_a_plan_that_moves_nothing_over_the_swept_path_is_priced_once():
    """Without prefix reuse the serving example sends nothing over the host link, so its price does not depend on
    that link: the break-even search prices it once, and the margin agrees with a full pricing at every scale."""
    from aitrinity.plan import registry
    from aitrinity.plan.breakeven import _Margin, _pricer

    r = api.resolve("llama-70b-serving-long-context")
    plan = r.scenario.plan
    (i,) = [j for j, x in enumerate(plan.exchanges) if x.kind == "prefix-cache"]
    without = _without(plan, i)
    estimate = _pricer(r.scenario, r.model, None)
    calls: list[bool] = []

    def counted(p, s):
        calls.append(p is without)
        return estimate(p, s)

    base = estimate(without, r.system)
    inf = registry.get("prefix-cache").info
    margin = _Margin(inf, counted, r.system, "host", (plan, without), (base.ledger, _per_unit(base, without)))
    for k in (1e-4, 0.01, 1.0, 100.0):
        full = _per_unit(estimate(plan, _scaled(r.system, "host", k)), plan) - _per_unit(
            estimate(without, _scaled(r.system, "host", k)), without
        )
        assert margin(k) == pytest.approx(full + 1e-6 * _per_unit(base, without), rel=1e-12, abs=1e-15)
    assert calls == [False] * 4  # the plan without the exchange was never re-priced
    hbm = _Margin(inf, counted, r.system, "hbm", (plan, without), (base.ledger, _per_unit(base, without)))
    hbm(0.5)
    assert calls[-2:] == [False, True]  # HBM reaches every plan: priced at each scale


def test_the_break_even_prices_with_the_kernels_the_diagnosis_used():
    """With an engine's measured tables (the ``[silicon]`` extra, which the dev install carries), ``diagnose`` prices
    the scenario with them, and so does its break-even report: the report's time with the exchange is the
    diagnosis's own, not the catalog roofline's."""
    from aitrinity.catalog import kernel_tables

    assert kernel_tables.available()  # installed by the test command (the dev extra)
    overrides = ["system.engine=vllm", "workload.model=llama-3.1-8b", "system.num_devices=1", "plan.tp=1"]
    d = api.diagnose("llama-70b-serving-long-context", overrides)
    assert d.estimate.kernels.startswith("table")
    (x,) = [e for e in d.exchanges if e.kind == "prefix-cache"]
    r = api.resolve("llama-70b-serving-long-context", overrides=overrides)
    assert x.time_per_unit_with_s == pytest.approx(_per_unit(d.estimate, r.scenario.plan), rel=1e-12)
    roofline = report(r.scenario, r.model, r.system, d.exchanges.index(x))  # the catalog's kernels instead
    assert roofline.time_per_unit_with_s != pytest.approx(x.time_per_unit_with_s, rel=1e-3)
