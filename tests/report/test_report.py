"""The report's data equals the library's results, and the page is one self-contained file."""

import re

import pytest

from aitrinity import api
from aitrinity.cost.diagnosis import Diagnosis
from aitrinity.report import build, page
from tests.conftest import CONVERSATION_TRACE


@pytest.fixture(scope="module")
def report():
    return build(api.builtin_scenarios(), trace=CONVERSATION_TRACE)


def _figure(report, section, kind):
    s = next(s for s in report.sections if s.id == section)
    return next(f for f in s.figures if f.kind == kind)


def test_every_section_has_the_charts_the_issue_lists(report):
    kinds = {s.id: {f.kind for f in s.figures} for s in report.sections}
    for name in ("llama-70b-training-h100", "llama-70b-serving-long-context"):
        assert {"utilization", "roofline", "chain", "pareto"} <= kinds[name]
    assert {"utilization", "envelope", "timeline"} <= kinds["camera-analytics-edge"]
    assert "hitrate" in kinds["replay-mooncake-conversation-trace"]
    assert "timeline" in kinds["sim-training-link"]
    for s in report.sections:
        for f in s.figures:
            assert f.table.rows and all(len(r) == len(f.table.columns) for r in f.table.rows), f.id
            assert f'data-chart="{f.id}"' in f.svg


def test_utilization_table_is_the_diagnosis(report):
    d = api.diagnose("llama-70b-training-h100")
    assert isinstance(d, Diagnosis)
    fig = _figure(report, "llama-70b-training-h100", "utilization")
    want = {(p.phase, u.resource): u.utilization for p in d.phases for u in p.uses}
    got = {(r[0], r[1]): r[2] for r in fig.table.rows if r[1] != "pipeline bubble"}
    assert got == want
    assert [r[1] for r in fig.table.rows if r[4] == "yes"] == [d.phases[0].binding_label]


def test_roofline_places_decode_left_of_the_ridge_and_prefill_right():
    d = api.diagnose("llama-70b-serving-long-context")
    r = api.resolve("llama-70b-serving-long-context")
    from aitrinity.report.figures import roofline_figure

    fig = roofline_figure("s", d, r)
    rows = {row[0]: row for row in fig.table.rows}
    ridge = r.system.device.peak_flops_for("bf16") / r.system.device.memory_bandwidth_Bps
    assert rows["decode_step"][1] < ridge < rows["prefill"][1]
    for row in rows.values():  # achieved = FLOPs / phase time, never above the peak
        assert 0 < row[3] <= 1


def test_replay_curve_matches_the_issue_4_figures(report):
    fig = _figure(report, "replay-mooncake-conversation-trace", "hitrate")
    rows = {r[0]: r[2] for r in fig.table.rows}
    assert rows["unbounded"] == pytest.approx(0.373, abs=0.002)
    assert rows[3_000_000] == pytest.approx(0.143, abs=0.002)
    rates = [r[2] for r in fig.table.rows]
    assert rates == sorted(rates)  # more capacity never lowers LRU's hit rate on this trace


def test_page_is_self_contained_small_and_carries_its_data(report):
    html = page(report)
    assert len(html.encode()) < 2_000_000
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html and "url(http" not in html
    assert html.count('<svg class="chart"') == sum(len(s.figures) for s in report.sections)
    import json

    data = json.loads(re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1))
    assert [s["id"] for s in data["sections"]] == [s.id for s in report.sections]


def test_report_cli_writes_the_file_and_json(tmp_path, capsys):
    from aitrinity.cli.main import main

    out = tmp_path / "r.html"
    assert main(["report", "llama-70b-training-h100", "--no-simulate", "-o", str(out), "--quiet", "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert data["sections"][0]["id"] == "llama-70b-training-h100"
    assert "simulation" not in {s["kind"] for s in data["sections"]}
    assert "svg" not in data["sections"][0]["figures"][0]


def test_report_cli_bad_input_is_one_line(capsys):
    from aitrinity.cli.main import main

    assert main(["report", "no-such-scenario", "--no-simulate"]) == 2
    assert capsys.readouterr().err.startswith("trinity: error: ")
    assert main(["report", "--trace", "/nonexistent.jsonl"]) == 2


def test_the_same_scenario_twice_gets_distinct_ids():
    r = build(["trillion-param-training", "trillion-param-training"], simulate=False)
    ids = [s.id for s in r.sections]
    charts = [f.id for s in r.sections for f in s.figures]
    assert ids == ["trillion-param-training", "trillion-param-training-2"]
    assert len(charts) == len(set(charts))


def test_a_pareto_figure_without_price_or_power_plots_device_memory():
    """A TPU has neither a catalog price nor a published power: the frontier's figure plots device memory against
    time instead of asserting on a missing $; with a power it plots joules."""
    from aitrinity.plan.report import PlanReport
    from aitrinity.report.figures import pareto_figure

    for extra, label in (((), "device memory"), (("system.power_per_device=300W",), "joules per token")):
        rep = api.plan("llama-70b-serving-long-context", overrides=["system.device=tpu-v6e", *extra])
        assert isinstance(rep, PlanReport)
        fig = pareto_figure("s", rep)
        assert fig is not None and fig.table.columns[2] == label and all(r[2] > 0 for r in fig.table.rows)
