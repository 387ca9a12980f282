"""Open the report of the built-in examples in real headless Chromium: every chart rendered, its marks
carry the table's numbers, the console is clean; a full-page screenshot is kept as an artifact."""

import pytest

from aitrinity import api
from aitrinity.report import build, page
from tests.conftest import CONVERSATION_TRACE

pytestmark = pytest.mark.browser


def test_report_renders_in_chromium(browser, tmp_path, artifacts):
    report = build(api.builtin_scenarios(), trace=CONVERSATION_TRACE)
    path = tmp_path / "report.html"
    path.write_text(page(report), encoding="utf-8")
    p = browser.page()
    p.goto(path.as_uri())

    charts = p.eval(
        """[...document.querySelectorAll('svg.chart')].map(s => {
             const r = s.getBoundingClientRect();
             return {id: s.dataset.chart, w: r.width, h: r.height,
                     bars: [...s.querySelectorAll('.bar')]
                             .map(b => [b.dataset.label, +b.dataset.value, b.getBBox().width]),
                     points: [...s.querySelectorAll('.point')].map(m => [+m.dataset.x, +m.dataset.y]),
                     hops: s.querySelectorAll('.hop').length, bands: s.querySelectorAll('.band').length,
                     lines: s.querySelectorAll('polyline.series').length};
           })"""
    )
    figures = {f.id: f for s in report.sections for f in s.figures}
    assert [c["id"] for c in charts] == list(figures)
    for c in charts:
        f = figures[c["id"]]
        assert c["w"] > 200 and c["h"] > 100, c["id"]  # laid out, not collapsed
        if f.kind == "utilization":
            res, util = f.table.columns.index("resource"), f.table.columns.index("utilization")
            assert [b[0] for b in c["bars"]] == [r[res] for r in f.table.rows]
            assert [b[1] for b in c["bars"]] == pytest.approx([r[util] for r in f.table.rows], rel=1e-5)
            assert all(b[2] > 0 for b in c["bars"] if b[1] > 0.01)  # drawn with width
        elif f.kind == "roofline":
            assert [pt[0] for pt in c["points"]] == pytest.approx([r[1] for r in f.table.rows], rel=1e-5)
            assert c["lines"] == 2  # the peak and the achievable roofs
        elif f.kind == "chain":
            assert c["hops"] == len(f.table.rows)
        elif f.kind == "pareto":
            assert len(c["points"]) == len(f.table.rows) + 1  # the frontier and the best plan
        elif f.kind == "hitrate":
            assert [pt[1] for pt in c["points"]] == pytest.approx([r[2] for r in f.table.rows[:-1]], rel=1e-5)
        elif f.kind == "timeline":
            assert c["bands"] >= 2 and c["lines"] == 1
    # every chart's table is in the page too
    assert p.eval("document.querySelectorAll('figure table.data').length") == len(figures)
    shot = p.screenshot(artifacts / "report.png")
    assert shot.stat().st_size > 10_000
    assert p.errors() == []
