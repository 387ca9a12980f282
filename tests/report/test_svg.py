import itertools
import re

from aitrinity.report import svg


def test_linear_axis_ticks_are_round_and_inside():
    ax = svg.Axis.fit([0.0, 7.3])
    ticks = ax.ticks()
    assert ticks[0] == 0.0 and all(ax.low <= t <= ax.high for t in ticks)
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1 and steps.pop() in (1.0, 2.0)


def test_log_axis_spans_whole_decades():
    ax = svg.Axis.fit([3.0, 4500.0], log=True)
    assert (ax.low, ax.high) == (1.0, 10000.0)
    assert ax.ticks() == [1.0, 10.0, 100.0, 1000.0, 10000.0]
    assert ax.frac(100.0) == 0.5


def test_bars_carry_their_values_and_the_binding_one_is_outlined():
    out = svg.bars("c", "t", [("g", [svg.Bar("compute", 0.84, "compute", strong=True), svg.Bar("hbm", 0.06)])], str)
    vals = re.findall(r'class="bar"[^>]*data-value="([^"]+)"', out)
    assert [float(v) for v in vals] == [0.84, 0.06]
    assert out.count('stroke="#000"') == 1
    assert 'data-chart="c"' in out


def test_xy_points_keep_the_data_and_labels_are_escaped():
    out = svg.xy(
        "c", "a<b", [svg.Series("s&t", [(1.0, 2.0), (3.0, 4.0)], labels=["<x>", ""])], svg.Axis(0, 4), svg.Axis(0, 5)
    )
    pts = re.findall(r'data-x="([^"]+)" data-y="([^"]+)"', out)
    assert [(float(a), float(b)) for a, b in pts] == [(1.0, 2.0), (3.0, 4.0)]
    assert "<x>" not in out and "&lt;x&gt;" in out and "a&lt;b" in out


def test_triangle_draws_one_arrow_per_hop_on_its_pathway():
    hops = [svg.Hop("compute", "bandwidth", "c->b", 1.5), svg.Hop("memory", "compute", "m->c", float("inf"))]
    out = svg.triangle("t", "t", hops)
    found = re.findall(r'data-step="(\d)" data-from="(\w+)" data-to="(\w+)"', out)
    assert found == [("1", "compute", "bandwidth"), ("2", "memory", "compute")]
    assert "×1.50" in out and "fits" in out
