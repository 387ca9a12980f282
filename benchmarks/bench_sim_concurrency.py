"""The event simulator against the analytic steady state, on fixed-concurrency benchmark runs.

Both price the same steps with the same operator model and engine profile (kernel tables with
``[silicon]``); the simulator replays the closed loop request by request (``trinity simulate serving
--concurrency``), the analytic model (``aitrinity.cost.concurrency``) prices its steady state. Rows:
every ``--every``-th run of the development CSV (``../shared/validation/serving_h100_dense.csv``) that the
model expresses. For each engine token budget given (``--budgets``; ``isl`` means one prompt per
iteration), prints the MAPE between the two and against the measured TTFT and TPOT, and the share of
rows where simulation and analytic agree within 10%.

    python benchmarks/bench_sim_concurrency.py [--csv FILE] [--every 10] [--rounds 10] [--budgets 8192,isl]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from aitrinity import catalog, silicon
from aitrinity.cost.concurrency import profile, steady_state
from aitrinity.cost.operators import Layout
from aitrinity.sim.serving import ClosedLoop, OperatorStep, for_device, simulate_closed_loop
from aitrinity.validate_serving import read_rows

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default=str(ROOT.parent / "shared" / "validation" / "serving_h100_dense.csv"))
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=10, help="requests per client")
    ap.add_argument("--budgets", default="8192,isl")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = read_rows(Path(args.csv))[0][:: args.every]  # the runs the model expresses (validate --serving's rule)
    kernels = {}
    out: dict[str, dict[str, float]] = {}
    start = time.perf_counter()
    for budget in args.budgets.split(","):
        pairs = []
        for r in rows:
            dev = catalog.device(r.device)
            key = (r.device, r.engine, r.version)
            if key not in kernels:
                kernels[key] = silicon.kernels(dev, r.engine, r.version).kernels
            m, k, prof = catalog.model(r.model), kernels[key], profile(r.engine)
            lay = Layout(tp=r.tp, weight_dtype=r.dtype, engine=r.engine)
            ss = steady_state(m, k, lay, r.c, r.isl, r.osl)
            cfg = for_device(
                dev,
                1,
                memory_capacity_bytes=dev.memory_capacity_bytes * r.tp,
                weights_dtype=r.dtype,
                token_budget=r.isl if budget == "isl" else int(budget),
                max_batch=max(r.c, 1),
                step_time=OperatorStep(m, k, lay, prof.step_overhead_s),
            )
            loop = ClosedLoop(r.c, r.isl, r.osl, r.c * args.rounds, prof.request_overhead_s)
            sim = simulate_closed_loop(m, cfg, loop)
            measured = (r.ttft_ms / 1e3, r.tpot_ms / 1e3)
            pairs.append(
                (sim.ttft_s.mean, float(ss.ttft_s), measured[0], sim.tpot_s.mean, float(ss.tpot_s), measured[1])
            )
        a = np.array(pairs)

        def mape(x: np.ndarray, y: np.ndarray) -> float:
            return float(np.mean(np.abs(x - y) / y))

        out[budget] = {
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
    if args.json:
        print(json.dumps(out, indent=2))
        return
    took = time.perf_counter() - start
    print(f"{len(rows)} runs (every {args.every}th), {args.rounds} requests per client, {took:.0f} s")
    print(
        "| token budget | rows | TTFT sim vs analytic | within 10% | TPOT sim vs analytic | within 10% "
        "| TTFT sim / analytic vs measured | TPOT sim / analytic vs measured |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for b, o in out.items():
        print(
            f"| {b} | {o['rows']} | {o['ttft_sim_vs_analytic']:.1%} | {o['ttft_within_10']:.0%} "
            f"| {o['tpot_sim_vs_analytic']:.1%} | {o['tpot_within_10']:.0%} "
            f"| {o['ttft_sim_vs_measured']:.1%} / {o['ttft_analytic_vs_measured']:.1%} "
            f"| {o['tpot_sim_vs_measured']:.1%} / {o['tpot_analytic_vs_measured']:.1%} |"
        )


if __name__ == "__main__":
    main()
