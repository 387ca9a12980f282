"""The what-if page's question -> answer, without HTTP: a form of choices and slider values becomes
``--set`` overrides on a built-in (or file) scenario, and the answer is the same library's diagnosis,
best plan and chain, with the report's charts.

Bad input raises the library's own errors (:class:`~aitrinity.errors.TrinityError`), so the page shows
exactly the message ``trinity diagnose SCENARIO --set ...`` prints.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aitrinity import api, catalog, units
from aitrinity.catalog.traces import conversation_trace
from aitrinity.cost.diagnosis import Diagnosis
from aitrinity.cost.ledger import Result
from aitrinity.errors import SpecError, UnitError, UnknownNameError
from aitrinity.plan.report import PlanReport
from aitrinity.plan.search_serving import ServingChoice
from aitrinity.plan.split import EdgePlanReport
from aitrinity.report import figures as rb
from aitrinity.units import format_time

CACHE_STOPS = ("none", "64GiB", "128GiB", "256GiB", "512GiB", "1TiB", "2TiB", "4TiB")
"""The cache-capacity slider's stops (a trace replay per stop, memoized)."""


class Form(BaseModel):
    """What the page sends. Empty / missing fields keep the scenario's own value.

    The page is a menu, not a file browser: :func:`check` admits built-in scenario names, catalog names
    and the cache slider's stops only, never a path (a path would make the server read a local file and
    echo its first line in the error).
    """

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field(max_length=100)
    model: str | None = Field(None, max_length=100)
    device: str | None = Field(None, max_length=100)
    link: str | None = Field(None, max_length=100)
    gpus: int | None = Field(None, ge=1, le=1_000_000)
    batch: int | None = Field(None, ge=1, le=1_000_000)
    context: int | None = Field(None, ge=1, le=100_000_000)
    bandwidth: str | None = Field(None, max_length=40)
    cache: str | None = Field(None, max_length=20)


_BANDWIDTH_TEXT = re.compile(r"[0-9.eE+-]+ ?[A-Za-z/]+")
"""A bandwidth as the slider writes it (``25Gbit/s``): a number and a unit, nothing an override could read
as another key or as YAML."""


def _one_of(field: str, value: str | None, known: list[str], kind: str) -> None:
    if value and value not in known:
        raise UnknownNameError(kind, value, known, field)


def check(form: Form) -> None:
    """Refuse anything the page's menus and sliders could not have sent (raises :class:`SpecError`)."""
    _one_of("scenario", form.scenario, api.builtin_scenarios(), "built-in scenario")
    _one_of("model", form.model, catalog.names("models"), "model")
    _one_of("device", form.device, catalog.names("devices"), "device")
    _one_of("link", form.link, catalog.names("links"), "link")
    if form.cache and form.cache not in CACHE_STOPS:
        raise SpecError("cache", form.cache, f"one of {', '.join(CACHE_STOPS)}")
    if form.bandwidth:
        try:
            bps = units.parse_bandwidth(form.bandwidth)
        except UnitError:
            bps = float("nan")
        if not (_BANDWIDTH_TEXT.fullmatch(form.bandwidth) and 0 < bps < float("inf")):
            raise SpecError("bandwidth", form.bandwidth, "a positive bandwidth such as 25Gbit/s")


class Answer(Result):
    scenario: str
    kind: str
    overrides: list[str]
    verdict: str
    binding: str
    metrics: list[tuple[str, str]]
    best: str | None
    best_metrics: list[tuple[str, str]]
    chain: list[str]
    charts: dict[str, str]
    """Chart id -> SVG."""
    elapsed_ms: float


def kind_of(scenario: str) -> str:
    from aitrinity.spec.edge import EdgeScenario

    loaded, _ = api.load(scenario)
    if isinstance(loaded, EdgeScenario):
        return "edge"
    return "training" if loaded.workload.training is not None else "serving"


def defaults(scenario: str) -> dict[str, Any]:
    """The scenario's own values for the page's controls (and which controls apply)."""
    from aitrinity.spec.edge import EdgeScenario

    loaded, _ = api.load(scenario)
    if isinstance(loaded, EdgeScenario):
        up = catalog.link(loaded.system.uplink)
        return {
            "kind": "edge",
            "model": loaded.workload.model,
            "device": loaded.system.device,
            "link": loaded.system.uplink,
            "bandwidth_Mbps": up.bandwidth_Bps * 8 / 1e6,
            "controls": ["device", "link", "bandwidth"],
        }
    r = api.resolve(loaded)
    s, w = r.system, loaded.workload
    if w.training is not None:
        link = s.inter_node_link
        return {
            "kind": "training",
            "model": w.model,
            "device": loaded.system.device,
            "link": link.name if link else None,
            "gpus": s.num_devices,
            "batch": w.training.global_batch,
            "context": w.training.seq_len,
            "bandwidth_Mbps": (link.bandwidth_Bps if link else s.intra_node_link.bandwidth_Bps) * 8 / 1e6,
            "controls": ["model", "device", "link", "gpus", "batch", "context", "bandwidth"],
        }
    assert w.serving is not None
    return {
        "kind": "serving",
        "model": w.model,
        "device": loaded.system.device,
        "link": None,
        "gpus": s.num_devices,
        "batch": w.serving.batch if isinstance(w.serving.batch, int) else 1,
        "context": w.serving.prompt_tokens,
        "bandwidth_Mbps": s.host_link.bandwidth_Bps * 8 / 1e6,
        "controls": ["model", "device", "gpus", "batch", "context", "bandwidth", "cache"],
    }


def overrides(form: Form, kind: str) -> list[str]:
    """The form as ``--set`` overrides, the same keys the CLI takes."""
    out = []
    if form.model and kind != "edge":
        out.append(f"workload.model={form.model}")
    if form.device:
        out.append(f"system.device={form.device}")
    if form.link:
        out.append(f"system.uplink={form.link}" if kind == "edge" else f"system.inter_node_link={form.link}")
    if form.gpus is not None and kind != "edge":
        out.append(f"gpus={form.gpus}")
    if kind == "training":
        if form.batch is not None:
            out.append(f"workload.training.global_batch={form.batch}")
        if form.context is not None:
            out.append(f"workload.training.seq_len={form.context}")
    elif kind == "serving":
        if form.batch is not None:
            out.append(f"workload.serving.batch={form.batch}")
        if form.context is not None:
            out.append(f"workload.serving.prompt_tokens={form.context}")
    if form.bandwidth:
        key = {"edge": "uplink", "training": "inter_node_bandwidth", "serving": "host_bandwidth"}[kind]
        out.append(f"{key}={form.bandwidth}")
    if form.cache and kind == "serving":
        trace = conversation_trace()
        if form.cache == "none":
            out.append("plan.exchanges=[]")
        else:
            out.append(f"plan.exchanges=[{{kind: prefix-cache, tier: host, trace: '{trace}', capacity: {form.cache}}}]")
    return out


def _edge_answer(form: Form, sets: list[str], start: float) -> Answer:
    sid = "whatif"
    d, inp = rb.edge_inputs(form.scenario, sets)
    rep = api.plan(form.scenario, None, 1, sets)
    assert isinstance(rep, EdgePlanReport)
    return Answer(
        scenario=d.scenario,
        kind="edge",
        overrides=sets,
        verdict=d.sentence,
        binding=d.binding,
        metrics=[
            ("latency per frame", format_time(d.chosen.latency_s)),
            ("device energy per frame", f"{d.chosen.device_energy_J:.3g} J"),
            ("uplink", d.uplink),
        ],
        best=rep.best.label,
        best_metrics=[("latency", format_time(rep.best.latency_s))],
        chain=[f"{s.choice}: {s.low_Bps * 8e-6:.3g}-{s.high_Bps * 8e-6:.3g} Mbit/s" for s in rep.latency_envelope],
        charts={f.kind: f.svg for f in rb.edge_figures(sid, d, inp)},
        elapsed_ms=(time.perf_counter() - start) * 1e3,
    )


def _metrics(diag: Diagnosis) -> list[tuple[str, str]]:
    """The diagnosis's headline figures: a training step's time, rate and MFU, or serving's TTFT, TPOT and rate; and
    the memory verdict."""
    est = diag.estimate
    metrics: list[tuple[str, str]] = []
    if est.training is not None:
        t = est.training
        metrics = [
            ("step", format_time(t.step_time_s)),
            ("tokens/s", f"{t.tokens_per_s:,.0f}"),
            ("MFU", f"{t.mfu:.1%}"),
        ]
    elif est.serving is not None:
        v = est.serving
        metrics = [
            ("TTFT", format_time(v.ttft_s)),
            ("TPOT", format_time(v.tpot_s)),
            ("output tokens/s", f"{v.output_tokens_per_s:,.0f}"),
        ]
    metrics.append(("memory", diag.capacity.sentence))
    return metrics


def answer(form: Form) -> Answer:
    start = time.perf_counter()
    check(form)
    kind = kind_of(form.scenario)
    sets = overrides(form, kind)
    sid = "whatif"
    if kind == "edge":
        return _edge_answer(form, sets, start)
    diag = api.diagnose(form.scenario, sets)
    plan = api.plan(form.scenario, None, 1, sets, pareto=False)
    assert isinstance(diag, Diagnosis) and isinstance(plan, PlanReport)
    r = api.resolve(form.scenario, overrides=sets)
    charts = {"utilization": rb.utilization_figure(sid, diag).svg, "roofline": rb.roofline_figure(sid, diag, r).svg}
    if plan.chain is not None:
        charts["chain"] = rb.chain_figure(sid, plan.chain).svg
    best = plan.search.best
    best_metrics: list[tuple[str, str]] = []
    if best is not None:
        if isinstance(best, ServingChoice):
            best_metrics = [("TPOT", format_time(best.tpot_s)), ("tokens/s", f"{best.throughput_tokens_per_s:,.0f}")]
        else:
            best_metrics = [("step", format_time(best.step_time_s)), ("tokens/s", f"{best.tokens_per_s:,.0f}")]
    return Answer(
        scenario=diag.scenario,
        kind=diag.kind,
        overrides=sets,
        verdict=diag.verdict,
        binding=diag.binding_label,
        metrics=_metrics(diag),
        best=best.label if best is not None else None,
        best_metrics=best_metrics,
        chain=[s.sentence for s in plan.chain.steps] if plan.chain else [],
        charts=charts,
        elapsed_ms=(time.perf_counter() - start) * 1e3,
    )


@lru_cache(maxsize=1)
def options() -> dict[str, Any]:
    """What the page's menus offer: scenarios (with their defaults) and catalog names."""
    scenarios = {s: defaults(s) for s in api.builtin_scenarios()}
    return {
        "scenarios": scenarios,
        "models": catalog.names("models"),
        "devices": catalog.names("devices"),
        "links": catalog.names("links"),
        "cache_stops": list(CACHE_STOPS),
    }


def warm(progress: Callable[[str], None] | None = None) -> None:
    """Replay the cache slider's stops once, so that moving it answers from the memoized replays."""
    for s, d in options()["scenarios"].items():
        if "cache" in d["controls"]:
            for c in CACHE_STOPS:
                if progress:
                    progress(f"warming {s} cache={c}")
                answer(Form(scenario=s, cache=c))
