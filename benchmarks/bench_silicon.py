"""The serving time model against measured GPU runs, before and after the operator model, in one run.

Prices every run of a measured serving CSV (default: ``../shared/validation/serving_h100_dense.csv``,
579 runs of Llama-3.1-8B/70B and Qwen3-32B on 8 x H100 under TensorRT-LLM, vLLM and SGLang) three ways:

* **before** -- the static-batch estimate (``api.estimate`` with ``batch = concurrency``, catalog
  efficiencies; what every command printed before the operator model);
* **roofline** -- the operator model and the fixed-concurrency steady state with the catalog's compact
  kernel parameters (the default install);
* **tables** -- the same with the measured kernel tables (``pip install 'aitrinity[silicon]'``).

and prints MAPE, median error and the share within 15% for TTFT and TPOT next to the issue's goals
(TPOT MAPE <= 15% and TTFT <= 25% with tables; TPOT <= 25% without).

``--rates`` adds, per engine and model, the closed loop's request and output-token rates (Little's law:
``c / (TTFT + (osl - 1) TPOT)`` requests per second, measured and as priced with the tables) of the runs whose rates
come highest, measured: where the measured runs stop rising while the priced ones go on, the server has a ceiling
the model does not (docs/silicon.md, "A ceiling on the host side").

``--fit`` re-fits the engine profiles (:data:`aitrinity.cost.concurrency.ENGINE_PROFILES`: the per-step
host overhead, the three scheduling weights and the per-request overhead, the only fitted constants) on
this file by Nelder-Mead on ``MAPE(TPOT) + MAPE(TTFT)`` per engine, and prints them; they are pasted into
the code by hand. Fit on the development file only.

    python benchmarks/bench_silicon.py [--csv FILE] [--fit] [--rates [N]] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from aitrinity import api, catalog, silicon
from aitrinity import validate_serving as vs
from aitrinity.cost.concurrency import ENGINE_PROFILES, EngineProfile, steady_state
from aitrinity.cost.kv_pool import kv_pool, kv_slots
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Scenario

FITTED = ("step_overhead_s", "prefill_interference", "prefill_steps", "batch_wait", "request_overhead_s")
"""An engine profile's fitted constants (a lock-step profile reads only the first and the last)."""

DEV = Path(__file__).resolve().parents[2] / "shared" / "validation" / "serving_h100_dense.csv"
GOALS = {"tables": (0.25, 0.15), "roofline": (None, 0.25)}


def before(rows: list[Any]) -> list[tuple[float, float]]:
    """The static-batch estimate of each run: (TTFT, TPOT) in seconds."""
    out = []
    for r in rows:
        data = {
            "name": r.id,
            "system": {"device": r.device, "num_devices": r.tp},
            "workload": {
                "model": r.model,
                "serving": {"prompt_tokens": r.isl, "output_tokens": r.osl, "batch": r.c, "mode": "static"},
            },
            "plan": {"tp": r.tp, "weight_dtype": r.dtype if r.dtype != "bf16" else None},
        }
        est = api.estimate(api.resolve(validate(Scenario, data)))
        assert est.serving is not None
        out.append((est.serving.ttft_s, est.serving.tpot_s))
    return out


def stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    e = (pred - meas) / meas
    return {
        "mape": float(np.mean(np.abs(e))),
        "median": float(np.median(e)),
        "within_15": float(np.mean(np.abs(e) <= 0.15)),
    }


def fit(rows: list[Any], tables: bool) -> dict[str, EngineProfile]:
    from scipy.optimize import minimize

    fitted = {}
    for engine in sorted({r.engine for r in rows}):
        mine = [r for r in rows if r.engine == engine]
        groups: dict[tuple[Any, ...], list[Any]] = {}
        for r in mine:
            groups.setdefault((r.model, r.device, r.version, r.dtype, r.tp), []).append(r)
        prepared = []
        for (model, device, version, _, _), rs in groups.items():
            dev, m, lay = catalog.device(device), catalog.model(model), vs.row_layout(rs[0])  # validate's layout
            k = silicon.kernels(dev, engine, version, tables).kernels
            isl, osl = [r.isl for r in rs], [r.osl for r in rs]
            slots = kv_slots(m, lay, dev.memory_capacity_bytes, isl, osl, kv_pool(engine))
            prepared.append((m, k, lay, rs, slots))

        base = ENGINE_PROFILES.get(engine, ENGINE_PROFILES["generic"])
        # the constants this engine's steady state reads: a lock-step engine replays its waves (no f_mix, n_prefill,
        # w_batch); sequence_overhead_s stays 0 on GPUs
        names = ("step_overhead_s", "request_overhead_s") if base.lockstep else FITTED

        def loss(
            x: np.ndarray, prepared: list[Any] = prepared, base: EngineProfile = base, names: tuple[str, ...] = names
        ) -> float:
            v: dict[str, Any] = dict(zip(names, x, strict=True))
            if (x < 0).any() or v["step_overhead_s"] > 0.02 or v["request_overhead_s"] > 0.5:
                return 1e9
            if v.get("prefill_steps", 1.0) < 1.0:  # its own step at least
                return 1e9
            prof = replace(base, **v)
            e_tpot, e_ttft = [], []
            for m, k, lay, rs, slots in prepared:
                c, isl, osl = [r.c for r in rs], [r.isl for r in rs], [r.osl for r in rs]
                ss = steady_state(m, k, lay, c, isl, osl, prof, kv_slots=slots)
                e_tpot.extend(ss.tpot_s / np.array([r.tpot_ms * 1e-3 for r in rs]) - 1)
                e_ttft.extend(ss.ttft_s / np.array([r.ttft_ms * 1e-3 for r in rs]) - 1)
            return float(np.mean(np.abs(e_tpot)) + np.mean(np.abs(e_ttft)))

        x0 = np.array([getattr(base, n) for n in names], dtype=float)
        res = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 600, "xatol": 1e-5, "fatol": 1e-4})
        best: dict[str, Any] = {n: float(v) for n, v in zip(names, res.x, strict=True)}
        fitted[engine] = replace(base, **best)
        print(f"fit {engine}: {fitted[engine]} loss {res.fun:.3f} ({len(mine)} runs)", file=sys.stderr)
    return fitted


def closed_loop_rates(c: float, osl: float, ttft_s: float, tpot_s: float) -> tuple[float, float]:
    """Requests and output tokens per second of ``c`` closed-loop clients (Little's law; no think time)."""
    per_s = c / (ttft_s + (osl - 1) * tpot_s)
    return per_s, per_s * osl


def rates(priced: list[Any], top: int) -> list[dict[str, Any]]:
    """Per engine and model, its ``top`` runs by measured output tokens per second: both rates measured and priced,
    and TTFT measured over priced."""
    out = []
    groups: dict[tuple[str, str], list[Any]] = {}
    for p in priced:
        groups.setdefault((p.engine, p.model), []).append(p)
    for (engine, model), ps in sorted(groups.items()):
        scored = []
        for p in ps:
            m_req, m_tok = closed_loop_rates(p.concurrency, p.osl, p.ttft_measured_s, p.tpot_measured_s)
            p_req, p_tok = closed_loop_rates(p.concurrency, p.osl, p.ttft_predicted_s, p.tpot_predicted_s)
            scored.append((m_tok, m_req, p_tok, p_req, p))
        scored.sort(key=lambda t: -t[0])
        for m_tok, m_req, p_tok, p_req, p in scored[:top]:
            out.append(
                {
                    "engine": engine,
                    "model": model,
                    "tp": p.tp,
                    "c": p.concurrency,
                    "isl": p.isl,
                    "osl": p.osl,
                    "requests_per_s": {"measured": m_req, "priced": p_req},
                    "output_tokens_per_s": {"measured": m_tok, "priced": p_tok},
                    "ttft_measured_over_priced": p.ttft_measured_s / p.ttft_predicted_s,
                    "tpot_measured_over_priced": p.tpot_measured_s / p.tpot_predicted_s,
                }
            )
    return out


def print_rates(table: list[dict[str, Any]]) -> None:
    print("\nclosed-loop rates, the runs with the highest measured output tokens/s per engine and model (tables):")
    print(
        f"{'engine':7s} {'model':24s} {'tp':>3s} {'c':>4s} {'isl':>5s} {'osl':>5s}   {'req/s meas':>10s} "
        f"{'priced':>7s}   {'tok/s meas':>10s} {'priced':>7s}   TTFT m/p  TPOT m/p"
    )
    for r in table:
        rq, tk = r["requests_per_s"], r["output_tokens_per_s"]
        print(
            f"{r['engine']:7s} {r['model']:24s} {r['tp']:3d} {r['c']:4d} {r['isl']:5d} {r['osl']:5d}   "
            f"{rq['measured']:10.1f} {rq['priced']:7.1f}   {tk['measured']:10,.0f} {tk['priced']:7,.0f}   "
            f"{r['ttft_measured_over_priced']:8.2f} {r['tpot_measured_over_priced']:9.2f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEV)
    ap.add_argument("--fit", action="store_true", help="re-fit the engine profiles on this file (development only)")
    ap.add_argument(
        "--rates",
        type=int,
        nargs="?",
        const=8,
        default=0,
        metavar="N",
        help="also the closed-loop rates of each engine and model's N fastest runs (default 8)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from aitrinity.catalog import kernel_tables

    if not kernel_tables.available():  # the "tables" row (and --fit) would silently be the roofline's
        print(
            "bench_silicon: the measured kernel tables are not installed (pip install -e '.[silicon]')", file=sys.stderr
        )
        return 2
    rows, skipped = vs.read_rows(args.csv)
    meas_ttft = np.array([r.ttft_ms * 1e-3 for r in rows])
    meas_tpot = np.array([r.tpot_ms * 1e-3 for r in rows])
    if args.fit:
        for k, v in fit(rows, tables=True).items():
            print(f"{k}: " + ", ".join(f"{n}={getattr(v, n):.6g}" for n in FITTED))
        return 0
    report: dict[str, dict[str, dict[str, float]]] = {}
    t0 = time.perf_counter()
    b = np.array(before(rows))
    report["before"] = {"ttft": stats(b[:, 0], meas_ttft), "tpot": stats(b[:, 1], meas_tpot)}
    seconds = {"before": time.perf_counter() - t0}
    rate_table: list[dict[str, Any]] = []
    for name, tables in (("roofline", False), ("tables", True)):
        t0 = time.perf_counter()
        priced, sources, _ = vs.price_rows(rows, tables)
        if tables and args.rates:
            rate_table = rates(priced, args.rates)
        seconds[name] = time.perf_counter() - t0
        order = {p.id: p for p in priced}
        pt = np.array([order[r.id].ttft_predicted_s for r in rows])
        pp = np.array([order[r.id].tpot_predicted_s for r in rows])
        report[name] = {"ttft": stats(pt, meas_ttft), "tpot": stats(pp, meas_tpot)}
        report[name]["sources"] = {"kernels": ", ".join(sources)}  # type: ignore[dict-item]
    if args.json:
        print(
            json.dumps(
                {
                    "file": str(args.csv),
                    "runs": len(rows),
                    "skipped": len(skipped),
                    "report": report,
                    "seconds": seconds,
                    "rates": rate_table,
                },
                indent=2,
            )
        )
        return 0
    print(f"{args.csv.name}: {len(rows)} runs priced, {len(skipped)} skipped")
    head = f"{'TTFT MAPE':>10s} {'median':>8s} {'<=15%':>6s}   {'TPOT MAPE':>10s} {'median':>8s} {'<=15%':>6s}"
    print(f"{'model':10s} {head}   goal (TTFT / TPOT MAPE)   seconds")
    for name in ("before", "roofline", "tables"):
        t, p = report[name]["ttft"], report[name]["tpot"]
        goal = GOALS.get(name)
        g = "" if goal is None else " / ".join("-" if x is None else f"<= {x:.0%}" for x in goal)
        print(
            f"{name:10s} {t['mape']:10.1%} {t['median']:+8.1%} {t['within_15']:6.0%}   {p['mape']:10.1%} "
            f"{p['median']:+8.1%} {p['within_15']:6.0%}   {g:24s}  {seconds[name]:.1f}"
        )
    if rate_table:
        print_rates(rate_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
