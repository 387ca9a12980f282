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


def test_the_boundary_scan_stops_at_the_first_flip_and_finds_it_to_the_printed_figures():
    """The scan prices its points only up to the first flip (then halves the bracket), and the threshold it returns
    is the flip's to far better than the three figures it is printed with; a verdict that never flips gives None."""
    from aitrinity.plan.breakeven import BISECTIONS, SCAN, _boundary

    asked: list[float] = []

    def pays(k: float) -> bool:
        asked.append(k)
        return k < 0.0123  # pays below the flip

    k = _boundary(pays, below=True)
    assert k == pytest.approx(0.0123, rel=1e-4)
    scanned = [x for x in asked if x in SCAN]
    assert scanned == [x for x in SCAN if x <= 0.0123 * 1.8]  # up to the first point past the flip, no further
    assert len(asked) == len(scanned) + BISECTIONS
    asked.clear()
    assert _boundary(lambda k: asked.append(k) or True, below=True) is None
    assert len(asked) == len(SCAN)


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
