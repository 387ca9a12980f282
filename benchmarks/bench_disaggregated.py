"""The disaggregated steady state against the simulator's disaggregated closed loop, on a grid of pools and loads.

Both price the same steps with the same operator model (the catalog roofline of the GPU, vLLM's engine profile and
scheduling); the simulator (``aitrinity.sim.serving``, ``prefill_instances`` > 0) replays ``--rounds`` requests per
client, the analytic model (``aitrinity.cost.disaggregated``) solves the loop's steady state. Prints, per
configuration, TTFT and TPOT from both, the analytic binding pool and the time each took, then the MAPE between them.

    python benchmarks/bench_disaggregated.py [--rounds 10] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Any

import numpy as np

from aitrinity import catalog, silicon
from aitrinity.cost.concurrency import profile
from aitrinity.cost.disaggregated import KVLink, Pool, disaggregated_steady_state
from aitrinity.cost.operators import Layout
from aitrinity.sim.serving import ClosedLoop, OperatorStep, for_device, scheduling, simulate_closed_loop

MODELS = (("llama-3.1-8b", 1), ("qwen3-32b", 2), ("llama-3.1-70b", 4))
POOLS = ((1, 1), (1, 3), (2, 2), (3, 1))
LOADS = ((16, 1024, 256), (64, 2048, 256), (128, 4096, 512), (256, 512, 128))
LINK = KVLink(50e9, 1e-5, "50 GB/s per GPU")


def run(rounds: int) -> list[dict[str, Any]]:
    dev = catalog.device("h100-sxm")
    k = silicon.roofline(dev)
    prof, sched = profile("vllm"), scheduling("vllm")
    out = []
    for (model, tp), (p, d), (c, isl, osl) in itertools.product(MODELS, POOLS, LOADS):
        m, lay = catalog.model(model), Layout(tp=tp, engine="vllm")
        t0 = time.perf_counter()
        est = disaggregated_steady_state(m, k, Pool(p, lay), Pool(d, lay), LINK, c, isl, osl)
        t1 = time.perf_counter()
        cfg = for_device(
            dev,
            p + d,
            memory_capacity_bytes=dev.memory_capacity_bytes * tp,
            prefill_instances=p,
            kv_link_Bps=LINK.bandwidth_Bps * tp,
            kv_link_latency_s=LINK.latency_s,
            token_budget=sched.token_budget,
            max_batch=c,
            step_time=OperatorStep(m, k, lay, prof.step_overhead_s),
        )
        loop = ClosedLoop(c, isl, osl, rounds * c, prof.request_overhead_s, sched.output_spread_tokens)
        sim = simulate_closed_loop(m, cfg, loop)
        t2 = time.perf_counter()
        out.append(
            {
                "config": f"{model} tp{tp} P{p} D{d} c{c} {isl}/{osl}",
                "ttft_sim_s": sim.ttft_s.mean,
                "ttft_analytic_s": float(est.ttft_s),
                "tpot_sim_s": sim.tpot_s.mean,
                "tpot_analytic_s": float(est.tpot_s),
                "binding_pool": str(est.binding_pool),
                "analytic_s": t1 - t0,
                "sim_s": t2 - t1,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10, help="requests per client")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = run(args.rounds)

    def err(q: str) -> np.ndarray:
        return np.array([abs(r[f"{q}_analytic_s"] / r[f"{q}_sim_s"] - 1.0) for r in rows])

    summary = {
        "rows": len(rows),
        "ttft_mape": float(err("ttft").mean()),
        "ttft_within_10": float((err("ttft") <= 0.10).mean()),
        "ttft_worst": float(err("ttft").max()),
        "tpot_mape": float(err("tpot").mean()),
        "tpot_worst": float(err("tpot").max()),
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return
    print("| configuration | TTFT sim | analytic | TPOT sim | analytic | binds | analytic ms | sim s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['config']} | {r['ttft_sim_s'] * 1e3:,.0f} ms | {r['ttft_analytic_s'] * 1e3:,.0f} ms "
            f"| {r['tpot_sim_s'] * 1e3:.2f} ms | {r['tpot_analytic_s'] * 1e3:.2f} ms | {r['binding_pool']} "
            f"| {r['analytic_s'] * 1e3:.1f} | {r['sim_s']:.2f} |"
        )
    s = summary
    print(
        f"\n{s['rows']} configurations: TTFT MAPE {s['ttft_mape']:.1%} (within 10%: {s['ttft_within_10']:.0%}, "
        f"worst {s['ttft_worst']:.1%}); TPOT MAPE {s['tpot_mape']:.1%} (worst {s['tpot_worst']:.1%})"
    )


if __name__ == "__main__":
    main()
