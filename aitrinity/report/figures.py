"""What a report shows, as typed data: per scenario the diagnosis, utilization, roofline, chain and
Pareto frontier (or, for edge split inference, the options and the break-even envelope), plus trace
replays and simulation timelines. Every figure carries its numbers as a table and its chart as SVG.

This module calls the library's front door (:mod:`aitrinity.api`) and the simulator; the
drawing is :mod:`aitrinity.report.svg`, the page :mod:`aitrinity.report.html`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from aitrinity import __version__, api
from aitrinity.cost.diagnosis import Diagnosis
from aitrinity.cost.ledger import Result
from aitrinity.plan.chain import Chain
from aitrinity.plan.report import PlanReport
from aitrinity.plan.search import PlanChoice
from aitrinity.plan.search_serving import ServingChoice
from aitrinity.plan.split import EdgeDiagnosis
from aitrinity.report import svg
from aitrinity.spec.model import ModelSpec
from aitrinity.units import format_bandwidth, format_bytes, format_flop_rate, format_time

if TYPE_CHECKING:
    from aitrinity.edge import EdgeInputs
    from aitrinity.sim.training import TrainingJob, TrainingSimResult

Cell = str | float | int | None


class Table(Result):
    columns: list[str]
    rows: list[list[Cell]]


class Figure(Result):
    id: str
    """Unique in the page; also the SVG's ``data-chart`` (``<section id>-<kind>``)."""
    kind: str
    title: str
    caption: str
    table: Table
    svg: str = Field(default="", exclude=True)


class Section(Result):
    id: str
    scenario: str
    kind: str
    summary: str
    facts: list[tuple[str, str]] = []
    figures: list[Figure] = []


class Report(Result):
    title: str
    version: str = __version__
    sections: list[Section]
    notes: list[str] = []


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


# -- LLM training / serving --------------------------------------------------------------------------


def utilization_figure(sid: str, d: Diagnosis) -> Figure:
    groups = []
    rows: list[list[Cell]] = []
    for ph in d.phases:
        items = [
            svg.Bar(u.resource, u.utilization, u.kind, strong=u.id == ph.binding, note=format_time(u.time_s))
            for u in ph.uses
        ]
        if ph.bubble_fraction > 0:
            items.append(svg.Bar("pipeline bubble", ph.bubble_fraction, "bubble"))
        groups.append((f"{ph.phase} ({format_time(ph.time_s)}, bound by {ph.binding_label})", items))
        rows += [[ph.phase, b.label, b.value, b.note, "yes" if b.strong else ""] for b in items]
    title = "Utilization of each resource per phase"
    return Figure(
        id=f"{sid}-utilization",
        kind="utilization",
        title=title,
        caption="The share of each phase's time each resource is busy; the outlined bar binds.",
        table=Table(columns=["phase", "resource", "utilization", "time", "binds"], rows=rows),
        svg=svg.bars(f"{sid}-utilization", title, groups, _pct),
    )


def roofline_figure(sid: str, d: Diagnosis, r: api.Resolved) -> Figure:
    """Williams, Waterman & Patterson (CACM 2009): attainable FLOP/s = min(peak, intensity x bandwidth)."""
    dev, eff = r.system.device, r.system.eff
    dtype = r.scenario.plan.compute_dtype
    peak = dev.peak_flops_for(dtype)
    bw = dev.memory_bandwidth_Bps
    points, labels, rows = [], [], []
    for ph_led, ph_est in zip(d.estimate.ledger.phases, d.estimate.phases, strict=True):
        flops = ph_led.flops.hardware
        if ph_led.hbm_bytes <= 0 or ph_est.time_s <= 0 or flops <= 0:
            continue
        intensity, achieved = flops / ph_led.hbm_bytes, flops / ph_est.time_s
        points.append((intensity, achieved))
        labels.append(ph_led.phase)
        rows.append([ph_led.phase, intensity, achieved, achieved / peak, flops, ph_led.hbm_bytes])
    ridge = peak / bw
    xs = [p[0] for p in points] + [ridge]
    x = svg.Axis.fit([min(xs) / 4, max(xs) * 4], log=True, label="arithmetic intensity (FLOP per HBM byte)")
    y = svg.Axis.fit(
        [min([p[1] for p in points] + [peak]) / 4, peak * 2],
        log=True,
        label=f"FLOP/s per device ({dtype})",
        fmt=format_flop_rate,
    )

    def roof(p: float, b: float) -> list[tuple[float, float]]:
        knee = p / b
        return [(x.low, x.low * b), (knee, p), (x.high, p)] if knee > x.low else [(x.low, p), (x.high, p)]

    series = [
        svg.Series("phases", points, line=False, labels=labels),
        svg.Series(f"peak ({format_flop_rate(peak)}, {format_bandwidth(bw)})", roof(peak, bw), marks=False),
        svg.Series(
            f"achievable (x{eff.compute:g} compute, x{eff.memory:g} memory)",
            roof(peak * eff.compute, bw * eff.memory),
            marks=False,
        ),
    ]
    title = f"Roofline of {dev.name}"
    return Figure(
        id=f"{sid}-roofline",
        kind="roofline",
        title=title,
        caption=f"Each phase at its arithmetic intensity and achieved rate; the ridge point is {ridge:.0f} FLOP/byte. "
        "Left of the ridge, HBM bandwidth caps a phase; right of it, compute.",
        table=Table(
            columns=["phase", "FLOP/byte", "achieved FLOP/s", "fraction of peak", "FLOPs", "HBM bytes"], rows=rows
        ),
        svg=svg.xy(f"{sid}-roofline", title, series, x, y),
    )


PATHWAY_CORNERS = {
    "compute->bandwidth": ("compute", "bandwidth"),
    "bandwidth->memory": ("bandwidth", "memory"),
    "memory->compute": ("memory", "compute"),
    "compute->memory": ("compute", "memory"),
    "memory->bandwidth": ("memory", "bandwidth"),
    "bandwidth->compute": ("bandwidth", "compute"),
}


def _corners(pathway: str) -> tuple[str, str] | None:
    key = pathway.replace(" ", "").replace("→", "->")
    return PATHWAY_CORNERS.get(key)


def chain_figure(sid: str, chain: Chain) -> Figure:
    hops, rows = [], []
    for k, st in enumerate(chain.steps, start=1):
        gain = st.score_before / st.score_after if st.fits_before and st.score_after > 0 else math.inf
        corners = _corners(st.pathway)
        if corners:
            hops.append(svg.Hop(corners[0], corners[1], f"{k}. {st.change}: {st.sentence}", gain))
        rows.append(
            [k, st.change, st.pathway, st.relieved, st.binds_after, None if math.isinf(gain) else round(gain, 4)]
        )
    title = "The exchange chain around the compute / bandwidth / memory triangle"
    return Figure(
        id=f"{sid}-chain",
        kind="chain",
        title=title,
        caption=f"From {chain.baseline}: each arrow spends one resource to relieve the next; the label is the "
        "step's gain in the objective ('fits': the step made the plan fit in memory). " + chain.sentence,
        table=Table(columns=["step", "change", "pathway", "relieved", "binds after", "gain"], rows=rows),
        svg=svg.triangle(f"{sid}-chain", title, hops),
    )


def _time(c: PlanChoice | ServingChoice) -> float:
    """The time a plan is ranked on: the step, or for serving the time per output token."""
    return c.tpot_s if isinstance(c, ServingChoice) else c.step_time_s


_COST = {"usd": "usd_per_million_tokens", "joules": "joules_per_token"}


def pareto_figure(sid: str, rep: PlanReport) -> Figure | None:
    front = rep.search.pareto
    if not front:
        return None
    serving = rep.kind == "serving"
    pts: list[tuple[float, float]] = []
    rows: list[list[Cell]] = []
    # $ where every plan has a price, else J (for one system the two are proportional: same devices, same time)
    axis = next((a for a in ("usd", "joules") if all(getattr(c, _COST[a]) is not None for c in front)), None)

    def cost(c: PlanChoice | ServingChoice) -> float:
        """$ or J per token, or device memory where the system prices neither."""
        value: float = getattr(c, _COST[axis]) if axis is not None else c.hbm_bytes
        return value

    for c in front:
        t = _time(c)
        pts.append((t, cost(c)))
        rows.append([c.label, t, cost(c), c.hbm_bytes, c.binding])
    best = rep.search.best
    assert best is not None
    bt, bc = _time(best), cost(best)
    xl = "time per output token" if serving else "step time"
    yl = {"usd": "$ per million tokens", "joules": "joules per token", None: "device memory"}[axis]
    x = svg.Axis.fit([p[0] for p in pts], label=xl, fmt=format_time)
    y = svg.Axis.fit([p[1] for p in pts], label=yl)
    series = [
        svg.Series("Pareto frontier (time, memory, bytes, cost)", sorted(pts), line=False),
        svg.Series("best plan", [(bt, bc)], line=False, labels=["best"]),
    ]
    title = f"Pareto frontier: {len(front)} plans"
    return Figure(
        id=f"{sid}-pareto",
        kind="pareto",
        title=title,
        caption="Plans no other plan beats on time, device memory, bytes moved"
        + (", accuracy" if serving else "")
        + (f" and {yl}" if axis is not None else "")
        + f" at once, of {rep.search.feasible:,} feasible ({rep.search.evaluated:,} evaluated)"
        + (f", within an accuracy drop of {_budget(rep):.0%}." if serving else "."),
        table=Table(columns=["plan", xl + " (s)", yl, "HBM bytes", "binds"], rows=rows),
        svg=svg.xy(f"{sid}-pareto", title, series, x, y),
    )


def _budget(rep: PlanReport) -> float:
    from aitrinity.plan.search_serving import ServingSearchResult

    assert isinstance(rep.search, ServingSearchResult)
    return rep.search.max_accuracy_drop


def llm_section(
    ref: str, overrides: Sequence[str] = (), objective: str | None = None, sid: str | None = None
) -> Section:
    """``sid``: the section's id in the page (default: from the scenario's name)."""
    d = api.diagnose(ref, overrides)
    assert isinstance(d, Diagnosis)
    r = api.resolve(ref, overrides=overrides)
    rep = api.plan(ref, objective, 5, overrides)
    assert isinstance(rep, PlanReport)
    sid = sid or _slug(d.scenario)
    facts = [("model", d.model), ("system", f"{d.num_devices} x {d.device}"), ("binding", d.binding_label)]
    facts.append((d.capacity.tier, d.capacity.sentence))
    figures = [utilization_figure(sid, d), roofline_figure(sid, d, r)]
    if rep.chain is not None:
        figures.append(chain_figure(sid, rep.chain))
    pf = pareto_figure(sid, rep)
    if pf is not None:
        figures.append(pf)
    best = rep.search.best
    if best is not None:
        facts.append(("best plan", best.label))
    return Section(id=sid, scenario=d.scenario, kind=d.kind, summary=d.verdict, facts=facts, figures=figures)


# -- edge split inference ------------------------------------------------------------------------------


def edge_section(ref: str, overrides: Sequence[str] = (), sid: str | None = None) -> Section:
    d, inp = edge_inputs(ref, overrides)
    fastest = sorted((o for o in inp.options() if o.allowed), key=lambda o: o.latency_s)[:3]
    facts = [
        ("model", d.model),
        ("device -> uplink -> server", f"{d.device} -> {d.uplink} -> {d.server}"),
        ("binding", d.binding),
        ("fastest options", "; ".join(f"{o.label} {format_time(o.latency_s)}" for o in fastest)),
    ]
    sid = sid or _slug(d.scenario)
    figures = edge_figures(sid, d, inp)
    return Section(id=sid, scenario=d.scenario, kind="edge", summary=d.sentence, facts=facts, figures=figures)


def edge_inputs(ref: str, overrides: Sequence[str] = ()) -> tuple[EdgeDiagnosis, EdgeInputs]:
    from aitrinity import edge
    from aitrinity.spec.edge import EdgeScenario

    loaded, base = api.load(ref)
    assert isinstance(loaded, EdgeScenario)
    d = edge.diagnose(loaded, base, overrides)
    return d, edge.resolve(loaded, base, overrides)


def edge_figures(sid: str, d: EdgeDiagnosis, inp: EdgeInputs) -> list[Figure]:
    """Utilization, latency vs uplink bandwidth (the break-even envelope) and the best choice over the trace."""
    options = [o for o in inp.options() if o.allowed]
    # the options that are ever best, plus the two extremes
    names = list(dict.fromkeys([s.choice for s in d.latency_envelope] + [d.all_local.label, d.all_offload.label]))
    shown = [o for o in options if o.label in names]
    lo = min([s.high_Bps for s in d.latency_envelope if s.high_Bps < math.inf] + [inp.uplink.bandwidth_Bps]) / 20
    hi = max([s.low_Bps for s in d.latency_envelope] + [inp.uplink.bandwidth_Bps]) * 20
    grid = [lo * (hi / lo) ** (k / 60) for k in range(61)]
    series = [
        svg.Series(o.label, [(b * 8 / 1e6, o.latency_fixed_s + o.paced_bytes / b) for b in grid], marks=False)
        for o in shown
    ]
    notes = [(s.high_Bps * 8 / 1e6, 0.0, "") for s in d.latency_envelope if s.high_Bps < math.inf]
    ys = [p[1] for s in series for p in s.points]
    x = svg.Axis.fit([lo * 8 / 1e6, hi * 8 / 1e6], log=True, label="uplink bandwidth (Mbit/s)")
    y = svg.Axis.fit([min(ys), max(ys)], log=True, label="latency per frame", fmt=format_time)
    rows: list[list[Cell]] = [
        [s.choice, s.low_Bps * 8 / 1e6, None if math.isinf(s.high_Bps) else s.high_Bps * 8 / 1e6]
        for s in d.latency_envelope
    ]
    title = "Latency per frame vs uplink bandwidth"
    env = Figure(
        id=f"{sid}-envelope",
        kind="envelope",
        title=title,
        caption="Each choice's latency is a + b/B in the uplink bandwidth B; the lowest line is the best choice, and "
        "it changes at the break-even bandwidths in the table.",
        table=Table(columns=["best choice", "from Mbit/s", "to Mbit/s"], rows=rows),
        svg=svg.xy(f"{sid}-envelope", title, series, x, y, notes=[n for n in notes if n[2]]),
    )
    util = Figure(
        id=f"{sid}-utilization",
        kind="utilization",
        title="Utilization at the scenario's frame rate",
        caption=f"With {d.chosen.label} at {d.frames_per_s:g} frames/s; the outlined bar binds.",
        table=Table(columns=["resource", "utilization"], rows=[[k, v] for k, v in d.utilization.items()]),
        svg=svg.bars(
            f"{sid}-utilization",
            "Utilization",
            [("per frame", [svg.Bar(k, v, _edge_kind(k), strong=k == d.binding) for k, v in d.utilization.items()])],
            _pct,
        ),
    )
    figures = [util, env]
    if inp.trace:
        figures.append(_edge_trace_figure(sid, d, inp.trace))
    return figures


def _edge_kind(resource: str) -> str:
    return "link" if "link" in resource else "compute"


def _edge_trace_figure(sid: str, d: EdgeDiagnosis, trace: Sequence[tuple[float, float]]) -> Figure:
    """What is best (and so what binds) over the scenario's uplink trace, from the envelope."""
    env = d.latency_envelope
    times = [t for t, _ in trace]
    end = times[-1] + (times[-1] - times[0]) / max(len(times) - 1, 1)
    bands: list[svg.Band] = []
    rows: list[list[Cell]] = []
    for k, (t, b) in enumerate(trace):
        best = next((s for s in env if s.low_Bps <= b < s.high_Bps), env[-1])
        t1 = times[k + 1] if k + 1 < len(times) else end
        if bands and bands[-1].label == best.choice:
            bands[-1] = svg.Band(bands[-1].start, t1, best.choice)
        else:
            bands.append(svg.Band(t, t1, best.choice))
        rows.append([t, b * 8 / 1e6, best.choice])
    line = svg.Series("uplink Mbit/s", [(t, b * 8 / 1e6) for t, b in trace])
    x = svg.Axis.fit([times[0], end], label="time (s)", pad=0)
    y = svg.Axis.fit([b * 8 / 1e6 for _, b in trace] + [0.0], label="uplink (Mbit/s)")
    title = "Best choice over the uplink trace"
    return Figure(
        id=f"{sid}-trace",
        kind="timeline",
        title=title,
        caption="Bands: the latency-best choice while the uplink holds (local: the device's compute binds; "
        "an offload: the uplink binds). Line: the uplink bandwidth.",
        table=Table(columns=["time (s)", "uplink Mbit/s", "best choice"], rows=rows),
        svg=svg.timeline(f"{sid}-trace", title, bands, line, x, y, band_title="best:"),
    )


# -- trace replay and simulation -----------------------------------------------------------------------

DEFAULT_CAPACITIES = (250_000, 500_000, 1_000_000, 2_000_000, 3_000_000, 5_000_000, 8_000_000)


def replay_section(trace: Path, m: ModelSpec, capacities: Sequence[int] = DEFAULT_CAPACITIES) -> Section:
    """Hit rate vs capacity of a request trace through the prefix cache's index (LRU, full blocks)."""
    from aitrinity.catalog import traces
    from aitrinity.cost.memory import kv_bytes_per_token
    from aitrinity.cost.prefix_reuse import replay

    reqs = traces.load(trace)
    model = m.name
    per_token = kv_bytes_per_token(m, "bf16")
    results = [replay(reqs, c, 512) for c in capacities]
    unbounded = replay(reqs, None, 512)
    pts = [(c / 1e6, r.token_hit_rate) for c, r in zip(capacities, results, strict=True)]
    rows: list[list[Cell]] = [
        [c, format_bytes(c * per_token), r.token_hit_rate, r.hit_tokens, r.evictions]
        for c, r in zip(capacities, results, strict=True)
    ]
    rows.append(["unbounded", "", unbounded.token_hit_rate, unbounded.hit_tokens, 0])
    x = svg.Axis.fit([0.0, capacities[-1] / 1e6], label="cache capacity (million tokens)")
    y = svg.Axis.fit([0.0, unbounded.token_hit_rate * 1.1], label="token hit rate", fmt=lambda v: f"{v * 100:.0f}%")
    series = [
        svg.Series("LRU, 512-token blocks", pts),
        svg.Series(
            "unbounded",
            [(0.0, unbounded.token_hit_rate), (capacities[-1] / 1e6, unbounded.token_hit_rate)],
            marks=False,
        ),
    ]
    sid = "replay-" + _slug(trace.stem)
    title = f"Prefix-cache hit rate vs capacity: {trace.name}"
    fig = Figure(
        id=f"{sid}-hitrate",
        kind="hitrate",
        title=title,
        caption=f"{len(reqs):,} requests replayed through the block index without materialising KV; "
        f"capacity in tokens ({model}: {format_bytes(per_token)} of KV per token).",
        table=Table(
            columns=["capacity (tokens)", f"KV bytes ({model})", "token hit rate", "hit tokens", "evictions"], rows=rows
        ),
        svg=svg.xy(f"{sid}-hitrate", title, series, x, y),
    )
    return Section(
        id=sid,
        scenario=trace.name,
        kind="replay",
        summary=f"Unbounded, {unbounded.token_hit_rate:.1%} of prompt tokens hit; "
        f"{capacities[-1]:,} tokens of cache give {results[-1].token_hit_rate:.1%}.",
        figures=[fig],
    )


def _controller_bands(job: TrainingJob, adaptive: TrainingSimResult) -> tuple[list[svg.Band], list[list[Cell]]]:
    """The adaptive run's timeline as bands of time with one compressor and one binding resource (adjacent periods
    that agree merged), and one table row per period."""
    bands: list[svg.Band] = []
    rows: list[list[Cell]] = []
    tl = adaptive.timeline
    for k, (t, method, bw) in enumerate(tl):
        t1 = tl[k + 1][0] if k + 1 < len(tl) else adaptive.total_s
        link_s = job.step_s(method, bw) - job.step_s(method, math.inf)
        binds = "link" if link_s > job.compute_s else "compute"
        label = f"{method}, {binds} binds"
        if bands and bands[-1].label == label:
            bands[-1] = svg.Band(bands[-1].start, t1, label)
        else:
            bands.append(svg.Band(t, t1, label))
        rows.append([t, bw * 8 / 1e6, method, binds])
    return bands, rows


def training_link_section(seed: int = 0) -> Section:
    """The simulator's data-parallel job on its built-in degrading link: what the adaptive Controller chose
    and what bound, period by period, next to every static plan and the oracle."""
    from aitrinity.sim.training import DEGRADING, TrainingJob, compare

    job = TrainingJob()
    results = compare(job, DEGRADING, seed=seed)
    adaptive = next(r for r in results if r.policy == "adaptive")
    bands, rows = _controller_bands(job, adaptive)
    line = svg.Series(
        "link Mbit/s", [(t, b * 8 / 1e6) for t, b in zip(DEGRADING.times_s, DEGRADING.bandwidth_Bps, strict=True)]
    )
    x = svg.Axis.fit([0.0, adaptive.total_s], label="simulated time (s)", pad=0)
    y = svg.Axis.fit([b * 8 / 1e6 for b in DEGRADING.bandwidth_Bps] + [0.0], label="link (Mbit/s)")
    title = "Training on a degrading link: what the adaptive Controller chose, and what bound"
    timeline = Figure(
        id="sim-training-link-timeline",
        kind="timeline",
        title=title,
        caption=f"{job.steps} steps of data-parallel training, re-planned every 10 steps with hysteresis and a "
        "switch cost. Bands: the gradient compressor in use and whether the link or compute bound the step.",
        table=Table(columns=["time (s)", "link Mbit/s", "compressor", "binds"], rows=rows),
        svg=svg.timeline("sim-training-link-timeline", title, bands, line, x, y),
    )
    table = Table(
        columns=["policy", "total time (s)", "switches"], rows=[[r.policy, r.total_s, r.switches] for r in results]
    )
    best_static = min(r.total_s for r in results if r.policy.startswith("static:"))
    oracle = next(r.total_s for r in results if r.policy == "oracle")
    pts = [(float(i), r.total_s) for i, r in enumerate(results)]
    policies = svg.xy(
        "sim-training-link-policies",
        "Total time per policy",
        [svg.Series("total time", pts, line=False, labels=[r.policy for r in results])],
        svg.Axis.fit([-0.5, len(results) - 0.5], label="policy (see table)", fmt=lambda v: ""),
        svg.Axis.fit([0.0] + [p[1] for p in pts], label="total time", fmt=format_time),
    )
    fig2 = Figure(
        id="sim-training-link-policies",
        kind="policies",
        title="Total time per policy",
        caption="Every static plan, the adaptive Controller and the per-period oracle on the same link.",
        table=table,
        svg=policies,
    )
    return Section(
        id="sim-training-link",
        scenario="simulate training-link",
        kind="simulation",
        summary=f"Adaptive {adaptive.total_s:.1f} s vs best static {best_static:.1f} s and oracle {oracle:.1f} s "
        f"({adaptive.switches} switches).",
        figures=[timeline, fig2],
    )


# -- the whole report ------------------------------------------------------------------------------------


def build(
    scenarios: Sequence[str],
    overrides: Sequence[str] = (),
    trace: Path | None = None,
    simulate: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> Report:
    """Sections for each scenario (file or built-in name), then the trace replay and the simulation."""
    from aitrinity import catalog
    from aitrinity.spec.edge import EdgeScenario

    sections: list[Section] = []
    notes: list[str] = []
    serving_model: ModelSpec | None = None
    for ref in scenarios:
        progress(f"scenario {ref}")
        loaded, _ = api.load(ref)
        sid = name = _slug(loaded.name)
        for k in itertools.count(2):  # the same scenario twice (or two files of one name): unique ids
            if sid not in {s.id for s in sections}:
                break
            sid = f"{name}-{k}"
        if isinstance(loaded, EdgeScenario):
            sections.append(edge_section(ref, overrides, sid))
        else:
            sections.append(llm_section(ref, overrides, sid=sid))
            if loaded.workload.serving is not None and serving_model is None:
                serving_model = api.resolve(ref, overrides=overrides).model
    if trace is not None:
        progress(f"replaying {trace}")
        sections.append(replay_section(trace, serving_model or catalog.model("llama-3.1-70b")))
    else:
        notes.append("No request trace given (--trace FILE): no hit-rate-vs-capacity curve.")
    if simulate:
        progress("simulating training on a degrading link")
        sections.append(training_link_section())
    title = "aitrinity report: " + ", ".join(s.scenario for s in sections if s.kind not in ("replay", "simulation"))
    return Report(title=title, sections=sections, notes=notes)
