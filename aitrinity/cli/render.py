"""Plain-text rendering of diagnoses and catalog entries (the CLI's table output)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aitrinity.cost.diagnosis import Diagnosis
from aitrinity.cost.estimate import PoolMetrics

if TYPE_CHECKING:
    from aitrinity.plan.search_disaggregated import SplitSearchResult
from aitrinity.units import (
    format_bandwidth,
    format_bytes,
    format_count,
    format_energy,
    format_flop_rate,
    format_flops,
    format_money,
    format_time,
)


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        last = len(r) - 1
        cells = [c.ljust(w) if i in (0, last) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        out.append(indent + "  ".join(cells).rstrip())
    return out


def _layout(d: Diagnosis) -> str:
    p = d.estimate.ledger.parallelism
    parts = [f"tp {p.tp}", *([f"cp {p.cp}"] if p.cp > 1 else []), f"pp {p.pp}", f"dp {p.dp}"]
    if p.ep > 1:
        parts.append(f"ep {p.ep}")
    if d.kind == "training":
        parts += [f"ZeRO-{p.zero}", f"recompute {p.recompute}"]
        if p.sequence_parallel:
            parts.append("SP")
    return ", ".join(parts)


def diagnosis(d: Diagnosis) -> str:
    est = d.estimate
    lines = [
        f"== {d.scenario}: {d.kind} {d.model} on {d.num_devices} x {d.device} ({_layout(d)})",
        f"verdict: {d.verdict}",
    ]
    for ph in d.phases:
        pe = est.phase(ph.phase)
        lines.append(f"{ph.phase}: {format_time(ph.time_s)}, bound by {ph.binding_label}")
        rows = [["resource", "time", "util", "detail"]]
        for u, r in zip(ph.uses, pe.resources, strict=True):
            rows.append([u.resource, format_time(u.time_s), f"{u.utilization:.0%}", r.detail])
        if pe.bubble_s > 0:
            rows.append(["pipeline bubble", format_time(pe.bubble_s), f"{ph.bubble_fraction:.0%}", "fill + drain"])
        lines += _table(rows)
        if pe.operators:
            ops = [["operator class", "time", "share", ""]]
            ops += [[o.label, format_time(o.time_s), f"{o.share:.0%}", ""] for o in pe.operators]
            lines += _table(ops, indent="    ")
    cap = d.capacity
    lines.append(
        f"memory per device: {format_bytes(cap.used_bytes)} of {format_bytes(cap.usable_bytes)} usable"
        f" -> {'fits' if cap.fits else 'DOES NOT FIT'}"
        + (f" (needs {cap.min_devices} devices)" if cap.min_devices else "")
    )
    lines += _table([[i.category, format_bytes(i.bytes), "", ""] for i in est.memory.items])
    for t in est.lower_tiers:
        lines.append(
            f"{t.tier} memory per device: {format_bytes(t.used_bytes)} of {format_bytes(t.usable_bytes)}"
            f" -> {'fits' if t.fits else 'DOES NOT FIT'}"
        )
        lines += _table([[i.category, format_bytes(i.bytes), "", ""] for i in t.items])
    if est.kernels:
        lines.append(f"kernels: {est.kernels}")
    lines += [f"note: {n}" for n in est.notes]
    if d.exchanges:
        lines.append("exchanges:")
        lines += [f"  [{x.pathway}] {x.sentence}" for x in d.exchanges]
    if est.serving and est.serving.pools:
        lines.append(pools_line(est.serving.pools))
    lines.append("metrics: " + metrics(d))
    return "\n".join(lines)


def pools_line(p: PoolMetrics) -> str:
    """A disaggregated plan's two pools: sizes, the KV's trip, each pool's capacity and which binds."""
    return (
        f"pools: prefill {p.prefill_workers} x {p.prefill_layout} ({p.prefill_devices} devices, "
        f"{p.prefill_utilization:.0%} of its {p.prefill_capacity_rps:,.1f} req/s) -> KV over {p.kv_link} "
        f"({format_time(p.kv_transfer_s)} per request) -> decode {p.decode_replicas} x {p.decode_layout} "
        f"({p.decode_devices} devices, {p.clients:,} clients, up to {p.decode_capacity_rps:,.1f} req/s); "
        f"{p.requests_per_s:,.1f} req/s, the {p.binding_pool} pool binds"
    )


def metrics(d: Diagnosis) -> str:
    est = d.estimate
    parts: list[str] = []
    if est.training:
        t = est.training
        parts += [
            f"step {format_time(t.step_time_s)}",
            f"{t.tokens_per_s:,.0f} tokens/s",
            f"MFU {t.mfu:.1%}",
            f"HFU {t.hfu:.1%}",
        ]
        if t.joules_per_token is not None:  # none without a device power, as $ without a price
            parts.append(f"{format_energy(t.joules_per_token)}/token")
        if t.usd_per_million_tokens is not None:
            parts.append(f"{format_money(t.usd_per_million_tokens)}/M tokens")
        if t.total_time_s is not None:
            parts.append(f"run {format_time(t.total_time_s)}")
        if t.total_usd is not None:
            parts.append(f"{format_money(t.total_usd)} total")
        if t.total_flops_6nd is not None and t.total_flops_with_attention is not None:
            parts.append(
                f"compute {format_flops(t.total_flops_6nd)} (6·N·D), "
                f"{format_flops(t.total_flops_with_attention)} with attention scores"
            )
    if est.serving:
        s = est.serving
        led = est.ledger.serving
        assert led is not None
        clients = "concurrency" if s.mode == "concurrency" else "batch"
        parts += [
            f"{clients} {led.batch} (max {led.max_batch}"
            + (f"; {led.running} at once, the others wait for a KV slot)" if 0 < led.running < led.batch else ")"),
            f"TTFT {format_time(s.ttft_s)}",
            f"TPOT {format_time(s.tpot_s)}",
            f"{s.output_tokens_per_s:,.0f} output tokens/s",
        ]
        if s.joules_per_output_token is not None:
            parts.append(f"{format_energy(s.joules_per_output_token)}/token")
        if s.usd_per_million_output_tokens is not None:
            parts.append(f"{format_money(s.usd_per_million_output_tokens)}/M output tokens")
    return ", ".join(parts)


def _human(key: str, value: Any) -> str:
    """A catalog field in human units, by the unit its name carries (DESIGN.md conventions)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if key.endswith("_bytes"):
            return format_bytes(value)
        if key.endswith("_Bps"):
            return format_bandwidth(value)
        if key.endswith("_s"):
            return format_time(value)
        if key.endswith("_W"):
            return f"{value:g} W"
        if key.endswith("_usd"):
            return f"{format_money(value)}/h"
        if key == "reference_params":
            return format_count(value)
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def catalog_entry(kind: str, data: dict[str, Any], derived: dict[str, str]) -> str:
    lines = [f"{data.get('name', '?')} ({kind[:-1]})"]
    for k, v in data.items():
        if k == "name" or v in (None, [], {}):
            continue
        if isinstance(v, dict):
            lines.append(f"  {k}:")
            flops = k == "peak_flops"
            lines += [
                f"    {kk}: {format_flop_rate(vv) if flops else _human(kk, vv)}"
                for kk, vv in v.items()
                if vv is not None
            ]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):  # e.g. a suite's workloads
            lines.append(f"  {k}:")
            lines += [
                "    - " + ", ".join(f"{kk}: {_human(kk, vv)}" for kk, vv in x.items() if vv not in (None, []))
                for x in v
            ]
        else:
            lines.append(f"  {k}: {_human(k, v)}")
    if derived:
        lines.append("  derived:")
        lines += [f"    {k}: {v}" for k, v in derived.items()]
    return "\n".join(lines)


_TRAINING_HEAD = ["layout", "techniques", "step", "tokens/s", "memory", "bytes moved", "$/M tok", "binds"]
_SERVING_HEAD = ["layout", "techniques", "TTFT", "TPOT", "tokens/s", "memory", "$/M tok", "acc. loss", "decode binds"]


def _choice_row(c: Any) -> list[str]:
    usd = format_money(c.usd_per_million_tokens) if c.usd_per_million_tokens is not None else "-"
    return [
        c.layout,
        c.techniques,
        format_time(c.step_time_s),
        f"{c.tokens_per_s:,.0f}",
        format_bytes(c.hbm_bytes),
        format_bytes(c.link_bytes),
        usd,
        c.binding,
    ]


def _serving_row(c: Any) -> list[str]:
    usd = format_money(c.usd_per_million_tokens) if c.usd_per_million_tokens is not None else "-"
    return [
        c.layout,
        c.techniques,
        format_time(c.ttft_s),
        format_time(c.tpot_s),
        f"{c.throughput_tokens_per_s:,.0f}",
        format_bytes(c.hbm_bytes),
        usd,
        f"{c.accuracy_drop:.0%}" if c.accuracy_drop else "-",
        c.binding,
    ]


def _row(c: Any) -> list[str]:
    return _serving_row(c) if hasattr(c, "batch") else _choice_row(c)


def _choices(title: str, choices: list[Any]) -> list[str]:
    if not choices:
        return []
    head = _SERVING_HEAD if hasattr(choices[0], "batch") else _TRAINING_HEAD
    return [title, *_table([head, *(_row(c) for c in choices)])]


def chain(ch: Any) -> str:
    lines = [f"chain from the {ch.baseline} plan ({' -> '.join(ch.pathways) or 'no change'}):"]
    for i, s in enumerate(ch.steps, 1):
        lines.append(f"  {i}. {s.sentence}")
    if not ch.steps:
        lines.append(f"  {ch.sentence}")
    return "\n".join(lines)


def _reason(reason: str, search: Any) -> str:
    budget = getattr(search, "max_accuracy_drop", None)
    if budget is not None and reason.startswith("accuracy drop"):
        return f"{reason} ({budget:.0%}, workload.serving.max_accuracy_drop)"
    return reason


def plan(rep: Any) -> str:
    s = rep.search
    lines = [f"== {rep.scenario}: {s.evaluated:,} plans evaluated, {s.feasible:,} feasible; objective: {s.objective}"]
    if s.infeasible:
        lines.append("infeasible: " + ", ".join(f"{r.count:,} {_reason(r.reason, s)}" for r in s.infeasible))
    if s.best is None:
        more = ""
        if getattr(rep, "min_devices", None):
            more = f"; with the scenario's own plan it fits from {rep.min_devices} devices (trinity diagnose says why)"
        lines.append(f"no feasible plan{more}")
        return "\n".join(lines)
    lines += _choices("best plans:", s.top)
    # ($ and J: the system's price and power over the throughput, or times the step time: they rank as those do)
    axes = "time, memory, bytes moved" + (", throughput, accuracy" if rep.kind == "serving" else "")
    lines += _choices(f"Pareto frontier over ({axes}):", s.pareto[:12])
    if len(s.pareto) > 12:
        lines.append(f"  ... {len(s.pareto) - 12} more in --json")
    if rep.chain is not None:
        lines.append(chain(rep.chain))
    if getattr(rep, "splits", None) is not None:
        lines += splits(rep.splits, s.best)
    return "\n".join(lines)


def splits(r: SplitSearchResult, aggregated: Any) -> list[str]:
    """The disaggregated splits searched beside the aggregated plans, and the best of each side by side."""
    lines = [f"disaggregated splits: {r.evaluated:,} evaluated, {r.feasible:,} feasible; objective: {r.objective}"]
    if r.infeasible:
        lines.append("infeasible: " + ", ".join(f"{c.count:,} {c.reason}" for c in r.infeasible))
    if r.best is None:
        return [*lines, "no feasible split"]
    rows = [["split", "TTFT", "TPOT", "tokens/s", "prefill busy", "binds"]]
    rows += [
        [
            c.label,
            format_time(c.ttft_s),
            format_time(c.tpot_s),
            f"{c.tokens_per_s:,.0f}",
            f"{c.prefill_utilization:.0%}",
            f"{c.binding_pool} pool",
        ]
        for c in r.top
    ]
    lines += _table(rows)
    if aggregated is not None:
        b = r.best
        lines.append(
            f"best split {b.tokens_per_s:,.0f} tokens/s (TTFT {format_time(b.ttft_s)}, TPOT {format_time(b.tpot_s)}) "
            f"against the best aggregated plan's {aggregated.throughput_tokens_per_s:,.0f} "
            f"(TTFT {format_time(aggregated.ttft_s)}, TPOT {format_time(aggregated.tpot_s)}): "
            f"{b.tokens_per_s / aggregated.throughput_tokens_per_s:.2f}x"
        )
    return lines


def sweep(key: str, points: list[tuple[str, Any]]) -> str:
    if any(rep.kind == "edge" for _, rep in points):
        return _edge_sweep(key, points)
    serving = any(rep.kind == "serving" for _, rep in points)
    head = _SERVING_HEAD if serving else _TRAINING_HEAD
    rows = [[key, *head, ""]]
    previous = None
    for value, rep in points:
        best = rep.search.best
        if best is None:
            rows.append([value, "no feasible plan", *[""] * (len(head) - 1)])
            previous = None
            continue
        row = _row(best)
        changed = previous is not None and row[:2] != previous
        rows.append([value, *row, "<- plan changes" if changed else ""])
        previous = row[:2]
    return "\n".join([f"best plan for each {key}:", *_table(rows)])


def best_per_scenario(points: list[tuple[str, Any]]) -> str:
    """``trinity plan --scenarios``: the best plan of each scenario, one table per kind (training, serving, edge)."""
    out = []
    for kind, head in (("training", _TRAINING_HEAD), ("serving", _SERVING_HEAD), ("edge", _SPLIT_HEAD)):
        rows = [["scenario", *head]]
        for name, rep in points:
            if rep.kind != kind:
                continue
            best = rep.best if kind == "edge" else rep.search.best
            if best is None:
                rows.append([name, "no feasible plan", *[""] * (len(head) - 1)])
            else:
                rows.append([name, *(_split_row(best) if kind == "edge" else _row(best))])
        if len(rows) > 1:
            out += [f"best {kind} plans:", *_table(rows), ""]
    return "\n".join(out).rstrip()


def _edge_sweep(key: str, points: list[tuple[str, Any]]) -> str:
    """An edge plan's best split x codec for each value."""
    rows = [[key, *_SPLIT_HEAD, ""]]
    previous = None
    for value, rep in points:
        row = _split_row(rep.best)
        rows.append([value, *row, "<- plan changes" if previous is not None and row[0] != previous else ""])
        previous = row[0]
    return "\n".join([f"best plan for each {key}:", *_table(rows)])


_SHORT = {
    "flops": "FLOP/s",
    "hbm_bandwidth": "HBM bw",
    "hbm_capacity": "HBM cap",
    "intra_node_bandwidth": "intra bw",
    "inter_node_bandwidth": "inter bw",
    "host_bandwidth": "host bw",
    "host_capacity": "host cap",
}


def _value(v: float, unit: str) -> str:
    return "does not fit" if v == 0 else f"{v:,.4g} {unit}"


def _elasticities(r: Any, step: float) -> str:
    """The resources that move the objective, largest first: '+10% HBM bw -> +7.9%'."""
    moving = sorted((e for e in r.elasticities if abs(e.change) >= 5e-4), key=lambda e: -abs(e.change))
    if not moving:
        return "none moves it"
    return ", ".join(f"{_SHORT.get(e.resource, e.resource)} {e.change:+.1%}" for e in moving[:3])


def _constrained(r: Any, constraint: float) -> str:
    worst = min(r.constrained, key=lambda e: e.value, default=None)
    if worst is None or r.nominal.value == 0:
        return "-"
    kept = worst.value / r.nominal.value
    text = f"{_SHORT.get(worst.resource, worst.resource)} x{constraint:g}: keeps {kept:.0%}"
    switches = [e for e in r.constrained if e.switch_between]
    if switches:
        e = switches[0]
        lo, hi = e.switch_between
        text += f"; plan switches at {_SHORT.get(e.resource, e.resource)} x{lo:.2f}-{hi:.2f}"
    return text


def hardware(c: Any) -> str:
    """``trinity hardware compare``: per-workload results, elasticities, scores and the design frontier."""
    lines = [
        f"Suite {c.suite}, objective {c.objective} ({c.unit}); elasticities at +{c.step:.0%} of each resource, "
        f"retention at x{c.constraint:g}; every number a full re-plan ({c.replans} re-plans).",
        "",
    ]
    base = c.designs[0]
    by = {(r.design, r.workload): r for r in c.results}
    workloads = list(dict.fromkeys(r.workload for r in c.results))
    for w in workloads:
        lines.append(f"{w}")
        rows = [["design", "best", f"vs {base}", "plan", f"+{c.step:.0%} of a resource buys", "worst constraint"]]
        ref = by[base, w].nominal.value
        for d in c.designs:
            r = by[d, w]
            rel = f"{r.nominal.value / ref - 1:+.1%}" if ref > 0 and d != base else "-"
            rows.append(
                [
                    d,
                    _value(r.nominal.value, c.unit),
                    rel,
                    r.nominal.plan,
                    _elasticities(r, c.step),
                    _constrained(r, c.constraint),
                ]
            )
        lines += _table(rows)
        lines.append("")
    lines.append("Designs (docs/hardware.md defines each column)")
    rows = [
        [
            "design",
            "performance",
            "mix kept",
            "constraint kept",
            "flexibility",
            "pathways",
            "$/Mtok",
            "J/token",
            "Pareto",
        ]
    ]
    for s in c.scores:
        rows.append(
            [
                s.design,
                f"{s.performance:.2f}",
                f"{s.mix_retention:.2f}",
                f"{s.constraint_retention:.2f}",
                f"{s.flexibility:.2f}",
                str(len(s.pathways)),
                format_money(s.usd_per_million_tokens) if s.usd_per_million_tokens is not None else "no price",
                f"{s.joules_per_token:.3g}" if s.joules_per_token is not None else "-",
                "yes" if s.pareto else "",
            ]
        )
    lines += _table(rows)
    return "\n".join(lines)


def _mbit(Bps: float) -> str:
    return f"{Bps * 8 / 1e6:.3g} Mbit/s"


def _envelope(title: str, segs: list[Any]) -> list[str]:
    if not segs:
        return [title, "    no allowed choice"]
    if len(segs) == 1:
        return [title, f"    {segs[0].choice} at every bandwidth"]
    rows = []
    for i, s in enumerate(segs):
        if i == 0:
            span = f"below {_mbit(s.high_Bps)}"
        elif i == len(segs) - 1:
            span = f"{_mbit(s.low_Bps)} and above"
        else:
            span = f"{_mbit(s.low_Bps)} - {_mbit(s.high_Bps)}"
        rows.append([span, s.choice])
    return [title, *_table(rows, "    ")]


def _split_row(o: Any) -> list[str]:
    return [
        o.label,
        format_time(o.latency_s),
        format_energy(o.device_energy_J),
        format_bytes(o.uplink_bytes, binary=False) if o.uplink_bytes else "-",
        format_time(o.device_s + o.coding_s),
        format_time(o.link_s) if o.uplink_bytes else "-",
        format_time(o.server_s),
        "-" if o.accuracy_drop is None else f"{o.accuracy_drop:.1%}",
    ]


_SPLIT_HEAD = ["choice", "latency", "energy", "uplink", "device", "link", "server", "acc. drop"]


def _unique(options: list[Any]) -> list[Any]:
    out: list[Any] = []
    for o in options:
        if all(o.label != x.label for x in out):
            out.append(o)
    return out


def edge_diagnosis(d: Any) -> str:
    lines = [
        f"== {d.scenario}: {d.model} on {d.device} -> {d.uplink} ({_mbit(d.uplink_Bps)}) -> {d.server}, "
        f"{d.frames_per_s:g} frames/s",
        f"  {d.sentence}",
        f"  chosen by the {d.chosen_by}:",
        *_table([_SPLIT_HEAD, *(_split_row(o) for o in _unique([d.chosen, d.all_local, d.all_offload]))], "    "),
        "  utilization: " + ", ".join(f"{k} {v:.0%}" for k, v in d.utilization.items()),
        *_envelope("  best choice by uplink bandwidth (latency):", d.latency_envelope),
        *_envelope("  best choice by uplink bandwidth (device energy):", d.energy_envelope),
    ]
    if d.trace_shares:
        lines.append(
            "  over the bandwidth trace the best choice is "
            + "; ".join(f"{s.choice} {s.fraction_of_time:.0%} of the time" for s in d.trace_shares)
        )
    if d.excluded:
        lines.append("  not planned: " + "; ".join(f"{n} options: {why}" for why, n in d.excluded.items()))
    return "\n".join(lines)


def edge_plan(rep: Any) -> str:
    lines = [
        f"== {rep.scenario}: {rep.options} split x codec options, {rep.allowed} allowed; objective: {rep.objective}",
        f"best: {rep.best.label}",
        *_table([_SPLIT_HEAD, *(_split_row(o) for o in rep.top)]),
        *_envelope("break-even bandwidths (latency):", rep.latency_envelope),
        *_envelope("break-even bandwidths (device energy):", rep.energy_envelope),
    ]
    return "\n".join(lines)
