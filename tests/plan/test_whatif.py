"""Hardware what-if: elasticities are finite differences of full re-plans, and their story holds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aitrinity import api, catalog
from aitrinity.cli.main import main
from aitrinity.errors import SpecError, UnknownNameError
from aitrinity.hardware import cases, compare_hardware, parse_design
from aitrinity.plan.whatif import Best, ResourceEffect, WorkloadResult, analyse, best, resources, score
from aitrinity.spec import quantities

SMALL = str(Path(__file__).parents[1] / "data" / "small-suite.yaml")
SUITE = catalog.suite("representative")


def _case(label: str, design: str = "h100-sxm"):
    (c,) = [c for c in cases(SUITE, [parse_design(design)]) if c.workload == label]
    return c


def _replanned_throughput(label: str, extra: list[str]) -> float:
    """The best plan's throughput through the public planner path (``trinity plan --set ...``)."""
    (w,) = [w for w in SUITE.workloads if w.label == label]
    rep = api.plan(w.scenario, overrides=[*w.set, *extra])
    return rep.search.best.throughput_tokens_per_s if rep.search.best else 0.0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["serve-70b-long-generation", "serve-70b-prefill-heavy", "serve-8b-1gpu"]),
    st.sampled_from(["flops", "hbm_bandwidth", "hbm_capacity", "host_bandwidth"]),
    st.floats(min_value=0.3, max_value=3.0),
)
def test_a_resource_change_is_a_full_replan(label, resource, factor):
    """The what-if's value after scaling a resource equals the public planner's best after ``--set r=xK``;
    more of a resource never lowers it (the old plan stays feasible and no slower)."""
    case = _case(label)
    nominal = best(case, case.system, "performance").value
    scaled = best(case, quantities.scale(case.system, resource, factor), "performance").value
    assert scaled == pytest.approx(_replanned_throughput(label, [f"{resource}=x{factor}"]), rel=1e-9)
    if factor >= 1:
        assert scaled >= nominal * (1 - 1e-12)
    else:
        assert scaled <= nominal * (1 + 1e-12)


def test_reported_elasticities_are_the_finite_differences():
    r = analyse(_case("serve-8b-1gpu"), step=0.1, refine=0)
    base = _replanned_throughput("serve-8b-1gpu", [])
    assert r.nominal.value == pytest.approx(base, rel=1e-12)
    assert {e.resource for e in r.elasticities} == set(resources(_case("serve-8b-1gpu").system))
    for e in r.elasticities:
        after = _replanned_throughput("serve-8b-1gpu", [f"{e.resource}=x1.1"])
        assert e.elasticity == pytest.approx((after / base - 1) / 0.1, rel=1e-9, abs=1e-12)
    for e in r.constrained:
        assert e.value == pytest.approx(_replanned_throughput("serve-8b-1gpu", [f"{e.resource}=x0.5"]), rel=1e-9)


def test_switch_points_bracket_the_first_plan_change():
    r = analyse(_case("serve-8b-1gpu"), refine=3)
    c = _case("serve-8b-1gpu")
    nominal = best(c, c.system, "performance").plan
    bracketed = [e for e in r.constrained if e.switch_between]
    assert bracketed
    for e in bracketed:
        lo, hi = e.switch_between
        assert 0.5 <= lo < hi <= 1.0 and hi / lo == pytest.approx(2 ** (1 / 8), rel=1e-9)  # three halvings in log space
        assert best(c, quantities.scale(c.system, e.resource, lo), "performance").plan != nominal
        assert best(c, quantities.scale(c.system, e.resource, hi), "performance").plan == nominal


def test_h200_helps_long_context_decode_more_than_compute_bound_prefill():
    """H200 = H100 compute with 1.43x HBM bandwidth and 1.76x capacity (datasheets): the what-if reproduces the
    published direction, and H100's elasticities explain it: decode gains from bandwidth; prefill-heavy
    serving gains less, and only from capacity (more, smaller replicas fit), not from bandwidth."""
    cmp = compare_hardware(["h100-sxm", "h200"], SMALL, refine=0)
    by = {(r.design, r.workload): r for r in cmp.results}
    decode = by["h200", "long-generation"].nominal.value / by["h100-sxm", "long-generation"].nominal.value
    prefill = by["h200", "prefill-heavy"].nominal.value / by["h100-sxm", "prefill-heavy"].nominal.value
    assert decode > 1.2 and 1.0 <= prefill < decode
    e = {x.resource: x.elasticity for x in by["h100-sxm", "long-generation"].elasticities}
    assert e["hbm_bandwidth"] > 1.5 * e["flops"]  # the 16k prompts' prefill in the decode steps is compute
    e = {x.resource: x.elasticity for x in by["h100-sxm", "prefill-heavy"].elasticities}
    assert e["flops"] > 0.8 and e["hbm_bandwidth"] < 0.05 and e["hbm_capacity"] > e["hbm_bandwidth"]


def _result(design: str, workload: str, weight: float, value: float, kept: list[float], paths: list[str]):
    b = Best(
        value=value,
        plan="p",
        techniques=[],
        pathways=paths,
        tokens_per_s=value,
        usd_per_million_tokens=None,
        joules_per_token=1.0 / value,
    )
    cons = [
        ResourceEffect(
            resource=f"r{i}",
            factor=0.5,
            value=k * value,
            change=k - 1,
            elasticity=None,
            switched=False,
            plan="p",
            pathways=["compute->memory"],
        )
        for i, k in enumerate(kept)
    ]
    return WorkloadResult(workload=workload, design=design, weight=weight, nominal=b, elasticities=[], constrained=cons)


def test_scores_follow_the_documented_formulas():
    results = [
        _result("A", "w1", 1, 100, [0.5, 0.8], ["memory->compute"]),
        _result("A", "w2", 3, 10, [0.9], []),
        _result("B", "w1", 1, 50, [1.0], []),
        _result("B", "w2", 3, 20, [0.25, 0.6], []),
    ]
    a, b = score(results, ["A", "B"])
    # s_A = (1, 0.5), s_B = (0.5, 1); weights 1/4, 3/4
    assert a.performance == pytest.approx(0.25 * 1 + 0.75 * 0.5)
    assert b.performance == pytest.approx(0.25 * 0.5 + 0.75 * 1)
    assert a.mix_retention == pytest.approx(0.5 / a.performance)
    assert a.constraint_retention == pytest.approx(0.25 * 0.5 + 0.75 * 0.9)
    assert b.constraint_retention == pytest.approx(0.25 * 1.0 + 0.75 * 0.25)
    assert a.flexibility == pytest.approx(math.sqrt(a.mix_retention * a.constraint_retention))
    assert a.pathways == ["compute->memory", "memory->compute"]
    assert a.usd_per_million_tokens is None
    assert a.joules_per_token == pytest.approx(0.25 / 100 + 0.75 / 10)
    assert b.joules_per_token == pytest.approx(0.25 / 50 + 0.75 / 20)
    assert b.pareto and not a.pareto  # B: higher performance and fewer joules per token


def test_designs_by_edit_and_by_file(tmp_path):
    d = parse_design("h100-sxm:hbm_capacity=141GiB,hbm_bandwidth=4.8TB/s")
    assert d.device == "h100-sxm" and d.set == ["hbm_capacity=141GiB", "hbm_bandwidth=4.8TB/s"]
    f = tmp_path / "d.yaml"
    f.write_text("name: fat-h100\ndevice: h100-sxm\nset: [hbm_capacity=141GiB, hbm_bandwidth=4.8TB/s]\n")
    cmp = compare_hardware(["h200", str(f)], SMALL, refine=0)
    assert cmp.designs == ["h200", "fat-h100"]
    by = {(r.design, r.workload): r.nominal.value for r in cmp.results}
    # an H100 given H200's memory performs like an H200 (same compute, same NVLink); not to the digit, since
    # each catalog GPU carries its own measured kernel efficiencies (devices' kernels: entries)
    assert by["fat-h100", "long-generation"] == pytest.approx(by["h200", "long-generation"], rel=0.02)


def test_device_swap_brings_its_platform_link():
    (c,) = [c for c in cases(SUITE, [parse_design("mi300x")]) if c.workload == "serve-70b-chat"]
    assert c.system.intra_node_link.name == "infinity-fabric-mi300x"


def test_bad_input_is_named():
    with pytest.raises(UnknownNameError) as e:
        compare_hardware(["h1000"], SMALL)
    assert "h100" in str(e.value)
    with pytest.raises(SpecError, match="--objective"):
        compare_hardware(["h100"], SMALL, objective="speed")
    with pytest.raises(SpecError, match="price"):
        compare_hardware(["h200"], SMALL, objective="tokens_per_dollar", refine=0)
    with pytest.raises(SpecError, match="distinct"):
        compare_hardware(["h100", "h100"], SMALL)
    cmp = compare_hardware(["h200:price=$4.54/h"], SMALL, objective="tokens_per_dollar", refine=0)
    assert all(r.nominal.usd_per_million_tokens for r in cmp.results)


def test_cli_json_and_table(capsys):
    assert (
        main(["hardware", "compare", "h100-sxm", "h200", "--suite", SMALL, "--json", "--quiet", "--refine", "0"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["designs"] == ["h100-sxm", "h200"] and len(out["results"]) == 4 and len(out["scores"]) == 2
    assert main(["hardware", "compare", "h100-sxm", "h200", "--suite", SMALL, "--refine", "0"]) == 0
    cap = capsys.readouterr()
    assert "long-generation" in cap.out and "flexibility" in cap.out and "planning h200" in cap.err
    assert main(["hardware", "compare", "h100", "--suite", SMALL, "--step", "2"]) == 2


def test_suite_slos_constrain_the_plans(tmp_path):
    f = tmp_path / "slo.yaml"
    f.write_text(
        "name: slo\nworkloads:\n"
        "  - {label: free, scenario: llama-70b-serving-long-context}\n"
        "  - {label: strict, scenario: llama-70b-serving-long-context, ttft_slo: 5 s, tpot_slo: 30 ms}\n"
        "  - {label: impossible, scenario: llama-70b-serving-long-context, tpot_slo: 1 us}\n"
    )
    cmp = compare_hardware(["h100-sxm"], str(f), refine=0)
    v = {r.workload: r.nominal for r in cmp.results}
    assert v["strict"].ttft_s <= 5 and v["strict"].tpot_s <= 0.030
    assert 0 < v["strict"].value < v["free"].value
    assert v["impossible"].value == 0 and v["impossible"].plan == "no plan fits"
