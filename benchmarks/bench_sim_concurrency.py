"""The event simulator against the analytic steady state, on fixed-concurrency benchmark runs.

Both price the same steps with the same operator model and engine profile (kernel tables with
``[silicon]``); the simulator replays the closed loop request by request (``trinity simulate serving
--concurrency``) with each engine's scheduling (:data:`aitrinity.sim.serving.ENGINE_SCHEDULING`: token budget,
mixed or separate prefill iterations, first-token lag, output spread), the analytic model
(``aitrinity.cost.concurrency``) prices its steady state. Rows: every ``--every``-th run of the development CSV
(``../shared/validation/serving_h100_dense.csv``) that the model expresses. Prints, per engine and overall, the
MAPE between the two and against the measured TTFT and TPOT, and the share of rows where simulation and analytic
agree within 10%.

``--fit`` chooses each engine's ``output_spread_tokens`` from ``--spreads`` (in tokens) by the simulation's MAPE
against the measured TTFT + TPOT of those rows (development data only).

``--rows`` prints every run instead (its layout and the three TTFT and TPOT figures), ``--engine`` keeps one engine's.
``--by c|isl|osl|tp`` prints, per engine and value of that field, the median TTFT ratios simulated / analytic,
measured / analytic and measured / simulated: where the two models part, and which the measured runs follow.

    python benchmarks/bench_sim_concurrency.py [--csv FILE] [--every 10] [--rounds 10] [--engine E] [--rows]
        [--by FIELD] [--fit] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from aitrinity import catalog, silicon
from aitrinity.cost.concurrency import steady_state
from aitrinity.cost.kernels import Kernels
from aitrinity.cost.kv_pool import kv_pool, kv_slots
from aitrinity.sim.serving import (
    EngineScheduling,
    replay_benchmark,
    scheduling,
)
from aitrinity.validate_serving import read_rows, row_layout

ROOT = Path(__file__).resolve().parents[1]
Tables = dict[tuple[str, str, str], Kernels]
"""Kernels by (device, engine, version), read once per run."""
COLUMNS = ("sim TTFT", "analytic TTFT", "measured TTFT", "sim TPOT", "analytic TPOT", "measured TPOT")


def price(
    rows: list[Any],
    rounds: int,
    sched: dict[str, EngineScheduling],
    kernels: Tables,
    runs: list[dict[str, Any]] | None = None,
) -> dict[str, np.ndarray]:
    """Per engine, one row per run: the COLUMNS in seconds (``runs``, if given, collects each run's line for
    ``--rows``)."""
    out: dict[str, list[tuple[float, ...]]] = {}
    for r in rows:
        dev = catalog.device(r.device)
        key = (r.device, r.engine, r.version)
        if key not in kernels:
            kernels[key] = silicon.kernels(dev, r.engine, r.version).kernels
        m, k, pool = catalog.model(r.model), kernels[key], kv_pool(r.engine)
        lay = row_layout(r)
        slots = kv_slots(m, lay, dev.memory_capacity_bytes, r.isl, r.osl, pool)
        ss = steady_state(m, k, lay, r.c, r.isl, r.osl, kv_slots=slots)
        sim = replay_benchmark(m, k, lay, dev, r.c, r.isl, r.osl, rounds, sched[r.engine])
        figures = (
            sim.ttft_s.mean,
            float(ss.ttft_s),
            r.ttft_ms / 1e3,
            sim.tpot_s.mean,
            float(ss.tpot_s),
            r.tpot_ms / 1e3,
        )
        out.setdefault(r.engine, []).append(figures)
        if runs is not None:
            layout = {"engine": r.engine, "model": r.model, "tp": r.tp, "dtype": r.dtype, "c": r.c, "isl": r.isl}
            runs.append({**layout, "osl": r.osl, "kv_slots": float(slots), "preemptions": sim.preemptions})
            runs[-1].update(zip(COLUMNS, figures, strict=True))
    return {e: np.array(v) for e, v in out.items()}


def mape(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(x - y) / y))


def summary(a: np.ndarray) -> dict[str, float]:
    return {
        "rows": len(a),
        "ttft_sim_vs_analytic": mape(a[:, 0], a[:, 1]),
        "tpot_sim_vs_analytic": mape(a[:, 3], a[:, 4]),
        "ttft_within_10": float(np.mean(np.abs(a[:, 0] / a[:, 1] - 1) <= 0.10)),
        "tpot_within_10": float(np.mean(np.abs(a[:, 3] / a[:, 4] - 1) <= 0.10)),
        "ttft_sim_vs_measured": mape(a[:, 0], a[:, 2]),
        "tpot_sim_vs_measured": mape(a[:, 3], a[:, 5]),
        "ttft_analytic_vs_measured": mape(a[:, 1], a[:, 2]),
        "tpot_analytic_vs_measured": mape(a[:, 4], a[:, 5]),
    }


def fit(rows: list[Any], rounds: int, spreads: list[float], kernels: Tables) -> dict[str, float]:
    """Each engine's output spread in tokens: the grid value with the smallest sim-vs-measured MAPE(TTFT) +
    MAPE(TPOT)."""
    best: dict[str, tuple[float, float]] = {}
    for spread in spreads:
        sched = {e: dataclasses.replace(scheduling(e), output_spread_tokens=spread) for e in {r.engine for r in rows}}
        for engine, a in price(rows, rounds, sched, kernels).items():
            loss = mape(a[:, 0], a[:, 2]) + mape(a[:, 3], a[:, 5])
            print(f"fit {engine}: output_spread_tokens {spread:g} -> loss {loss:.3f}", file=sys.stderr)
            if engine not in best or loss < best[engine][1]:
                best[engine] = (spread, loss)
    return {e: s for e, (s, _) in sorted(best.items())}


def _print_runs(runs: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(runs, indent=2))
        return
    print("| engine | model | tp | dtype | c | isl | osl | KV slots | preemptions | " + " | ".join(COLUMNS) + " |")
    print("|---" * (9 + len(COLUMNS)) + "|")
    for x in runs:
        ttft = " | ".join(f"{x[k] * 1e3:,.1f} ms" for k in COLUMNS[:3])
        tpot = " | ".join(f"{x[k] * 1e3:.2f} ms" for k in COLUMNS[3:])
        print(
            f"| {x['engine']} | {x['model']} | {x['tp']} | {x['dtype']} | {x['c']} | {x['isl']} | {x['osl']} "
            f"| {x['kv_slots']:.0f} | {x['preemptions']:,} | {ttft} | {tpot} |"
        )


RATIOS = ("sim / analytic", "measured / analytic", "measured / sim")
"""The TTFT ratios ``--by`` prints."""


def _print_by(runs: list[dict[str, Any]], field: str, as_json: bool) -> None:
    groups: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for x in runs:
        sim, ana, meas = (x[k] for k in COLUMNS[:3])
        groups.setdefault((x["engine"], x[field]), []).append((sim / ana, meas / ana, meas / sim))
    out = [
        {
            "engine": e,
            field: v,
            "runs": len(g),
            **dict(zip(RATIOS, np.median(np.array(g), axis=0).tolist(), strict=True)),
        }
        for (e, v), g in sorted(groups.items())
    ]
    if as_json:
        print(json.dumps(out, indent=2))
        return
    print(f"| engine | {field} | runs | " + " | ".join(f"TTFT {r} (median)" for r in RATIOS) + " |")
    print("|---" * (3 + len(RATIOS)) + "|")
    for o in out:
        print(f"| {o['engine']} | {o[field]} | {o['runs']} | " + " | ".join(f"{o[r]:.3f}" for r in RATIOS) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default=str(ROOT.parent / "shared" / "validation" / "serving_h100_dense.csv"))
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=10, help="requests per client")
    ap.add_argument("--fit", action="store_true", help="choose each engine's output spread (development data only)")
    ap.add_argument("--spreads", default="0,4,8,16,32,64", help="with --fit: the grid, in tokens")
    ap.add_argument("--engine", help="only this engine's runs (trtllm, vllm, sglang)")
    ap.add_argument("--rows", action="store_true", help="print every run, not the summary")
    ap.add_argument("--by", choices=("c", "isl", "osl", "tp"), help="median TTFT ratios by this field, per engine")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = read_rows(Path(args.csv))[0][:: args.every]  # the runs the model expresses (validate --serving's rule)
    rows = [r for r in rows if args.engine in (None, r.engine)]
    kernels: Tables = {}
    start = time.perf_counter()
    if args.fit:
        for engine, spread in fit(rows, args.rounds, [float(x) for x in args.spreads.split(",")], kernels).items():
            print(f"{engine}: output_spread_tokens={spread:g}")
        return
    runs: list[dict[str, Any]] | None = [] if args.rows or args.by else None
    by_engine = price(rows, args.rounds, {e: scheduling(e) for e in {r.engine for r in rows}}, kernels, runs)
    if runs is not None:
        if args.by:
            _print_by(runs, args.by, args.json)
        else:
            _print_runs(runs, args.json)
        return
    out = {e: summary(a) for e, a in sorted(by_engine.items())}
    out["all"] = summary(np.concatenate(list(by_engine.values())))
    if args.json:
        print(json.dumps(out, indent=2))
        return
    took = time.perf_counter() - start
    print(f"{len(rows)} runs (every {args.every}th), {args.rounds} requests per client, {took:.0f} s")
    print(
        "| engine | rows | TTFT sim vs analytic | within 10% | TPOT sim vs analytic | within 10% "
        "| TTFT sim / analytic vs measured | TPOT sim / analytic vs measured |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for e, o in out.items():
        print(
            f"| {e} | {o['rows']} | {o['ttft_sim_vs_analytic']:.1%} | {o['ttft_within_10']:.0%} "
            f"| {o['tpot_sim_vs_analytic']:.1%} | {o['tpot_within_10']:.0%} "
            f"| {o['ttft_sim_vs_measured']:.1%} / {o['ttft_analytic_vs_measured']:.1%} "
            f"| {o['tpot_sim_vs_measured']:.1%} / {o['tpot_analytic_vs_measured']:.1%} |"
        )


if __name__ == "__main__":
    main()
