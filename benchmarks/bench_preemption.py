"""Past the KV slots on an engine that preempts: the simulator against the analytic steady state.

The analytic model (:mod:`aitrinity.cost.concurrency`) prices more clients than KV slots as a closed loop around
``kv_slots`` requests and puts the whole wait before the first token. vLLM admits a request as soon as its prompt
fits and preempts the newest when a decode finds no room (recompute preemption); the simulator replays that. This
script runs both on one development layout (vLLM, Llama-3.1-70B fp8, tp 2 on H100: the layout of the development
runs past their slots) over prompt / output lengths and client counts past the slots, and prints per case:
TTFT and TPOT of each, preemptions per request, and the simulated throughput against the analytic one (what the
recomputed prompts cost). Development data only: the layout and the engine's profile come from
``../shared/validation/serving_h100_dense.csv``'s rows; the lengths and client counts are this script's grid.

    python benchmarks/bench_preemption.py [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from aitrinity import catalog, silicon
from aitrinity.cost.concurrency import steady_state
from aitrinity.cost.kv_pool import kv_pool, kv_slots
from aitrinity.sim.serving import replay_benchmark
from aitrinity.validate_serving import read_rows, row_layout

ROOT = Path(__file__).resolve().parents[1]
ENGINE, MODEL, TP, DTYPE = "vllm", "llama-3.1-70b", 2, "fp8"
GRID = [
    (1024, 512),
    (1024, 1024),
    (1024, 4096),
    (1024, 8192),
    (2048, 1024),
    (2048, 2048),
    (4096, 1024),
    (4096, 2048),
    (4096, 4096),
    (8192, 1024),
]
"""(isl, osl) pairs."""
LOADS = (1.15, 1.5)
"""Clients over KV slots."""


def run(rounds: int) -> list[dict[str, Any]]:
    template = next(
        r
        for r in read_rows(ROOT.parent / "shared" / "validation" / "serving_h100_dense.csv")[0]
        if (r.engine, r.model, r.tp, r.dtype) == (ENGINE, MODEL, TP, DTYPE)
    )
    dev, m = catalog.device(template.device), catalog.model(MODEL)
    k = silicon.kernels(dev, ENGINE, template.version).kernels
    pool = kv_pool(ENGINE)
    out = []
    for isl, osl in GRID:
        lay = row_layout(dataclasses.replace(template, isl=isl, osl=osl))
        slots = float(kv_slots(m, lay, dev.memory_capacity_bytes, isl, osl, pool))
        for load in LOADS:
            c = round(slots * load)
            ss = steady_state(m, k, lay, c, isl, osl, kv_slots=slots)
            sim = replay_benchmark(m, k, lay, dev, c, isl, osl, rounds)
            out.append(
                {
                    "isl": isl,
                    "osl": osl,
                    "clients": c,
                    "kv_slots": slots,
                    "ttft_sim_s": sim.ttft_s.mean,
                    "ttft_analytic_s": float(ss.ttft_s),
                    "tpot_sim_s": sim.tpot_s.mean,
                    "tpot_analytic_s": float(ss.tpot_s),
                    "preemptions_per_request": sim.preemptions / (c * rounds),
                    "throughput_sim_over_analytic": sim.output_tokens_per_s / float(ss.output_tokens_per_s),
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="requests per client")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    start = time.perf_counter()
    rows = run(args.rounds)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{ENGINE}, {MODEL} {DTYPE}, tp {TP}; {args.rounds} requests per client; {time.perf_counter() - start:.0f} s")
    print(
        "| isl | osl | clients / KV slots | TTFT sim / analytic | TPOT sim / analytic | preemptions per request "
        "| throughput sim / analytic |"
    )
    print("|---|---|---|---|---|---|---|")
    for x in rows:
        print(
            f"| {x['isl']} | {x['osl']} | {x['clients']} / {x['kv_slots']:.0f} "
            f"| {x['ttft_sim_s']:.1f} / {x['ttft_analytic_s']:.1f} s "
            f"| {x['tpot_sim_s'] * 1e3:.1f} / {x['tpot_analytic_s'] * 1e3:.1f} ms "
            f"| {x['preemptions_per_request']:.2f} | {x['throughput_sim_over_analytic']:.2f} |"
        )


if __name__ == "__main__":
    main()
