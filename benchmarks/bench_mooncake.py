"""Mooncake's global-vs-local KV cache (Qin et al., FAST'25, §5.3.2, Figure 10) side by side with our simulator.

The paper's setup: 10 prefill instances, each with a 3M-token KV cache; ``local``: each instance can use only
its own cache; ``global``: the caches are shared across instances, a longer prefix held elsewhere is fetched
(and stays: migration). Requests are routed by the paper's Algorithm 1 (queue + prefill given the match, with
the transfer for ``global``). Reported there: global/local cache hit rate 2.22x on the conversation trace,
1.38x on tool & agent, 2.36x on the synthetic trace; prefill GPU time up to 48% lower.

Here: the conversation trace in the repository (``data/traces/mooncake_conversation_trace.jsonl``, the
paper's public trace), llama-3.1-70b on 8 x H100 per instance timed by the operator model (catalog kernels),
replayed at ``--rate-scale`` times its rate. Two routers: Algorithm 1, and a least-loaded router blind to the
caches (a cluster whose scheduler has no view of the local caches). Two sweeps: load at 3M tokens per
instance, and per-instance capacity at two loads. Each row: mean utilization, local and global hit rates,
their ratio, and the prefill GPU time of global against local.

    python benchmarks/bench_mooncake.py [--workers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from aitrinity import catalog, silicon
from aitrinity.catalog import traces
from aitrinity.cost.operators import Layout
from aitrinity.sim.prefill import ClusterConfig, PrefillResult, operator_prefill, simulate_prefill

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
PAPER = {"conversation": 2.22, "tool & agent": 1.38, "synthetic": 2.36, "prefill GPU time saved, up to": 0.48}
INSTANCES = 10
LOADS = (1.0, 2.0, 4.0, 6.0, 7.0, 8.0, 10.0)
CAPACITIES = (100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)
ROUTERS = ("algorithm1", "least-loaded")


def run(router: str, rate_scale: float, per_instance: int) -> dict[str, Any]:
    """One (router, load, capacity) point: local and global on the conversation trace."""
    m, d = catalog.model("llama-3.1-70b"), catalog.device("h100-sxm")
    prefill = operator_prefill(m, silicon.kernels(d, "generic").kernels, Layout(tp=8))
    reqs = traces.load(TRACE)
    out: dict[str, PrefillResult] = {}
    for cache in ("local", "global"):
        cfg = ClusterConfig(
            instances=INSTANCES,
            cache=cache,
            capacity_tokens=INSTANCES * per_instance,
            load_bandwidth_Bps=50e9,
            rate_scale=rate_scale,
            router=router,  # type: ignore[arg-type]
        )
        out[cache] = simulate_prefill(reqs, m, cfg, prefill_time=prefill)
    local, glob = out["local"], out["global"]
    return {
        "router": router,
        "rate_scale": rate_scale,
        "per_instance_tokens": per_instance,
        "utilization_local": sum(local.utilization) / INSTANCES,
        "hit_local": local.token_hit_rate,
        "hit_global": glob.token_hit_rate,
        "ratio": glob.token_hit_rate / local.token_hit_rate if local.token_hit_rate else float("inf"),
        "gpu_time_saved": 1.0 - glob.busy_s / local.busy_s,
        "ttft_p50_local_s": local.ttft_s.p50,
        "ttft_p50_global_s": glob.ttft_s.p50,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    points = [(r, s, 3_000_000) for r in ROUTERS for s in LOADS]
    points += [(r, s, c) for r in ROUTERS for s in (1.0, 6.0) for c in CAPACITIES if c != 3_000_000]
    t = time.perf_counter()
    with ProcessPoolExecutor(a.workers) as pool:
        rows = list(pool.map(run, *zip(*points, strict=True)))
    wall = time.perf_counter() - t
    if a.json:
        print(json.dumps({"paper": PAPER, "rows": rows, "wall_s": wall}, indent=2))
        return
    print(f"conversation trace, {INSTANCES} prefill instances (llama-3.1-70b, 8 x h100-sxm, operator model)")
    print(
        "paper (Figure 10): global/local hit rate 2.22x conversation, 1.38x tool & agent, 2.36x synthetic; "
        "prefill GPU time up to 48% lower"
    )
    load = sorted(
        (r for r in rows if r["per_instance_tokens"] == 3_000_000), key=lambda r: (r["router"], r["rate_scale"])
    )
    size = sorted(
        (r for r in rows if r["rate_scale"] in (1.0, 6.0)),
        key=lambda r: (r["router"], r["rate_scale"], r["per_instance_tokens"]),
    )
    for title, sub in (("load, 3M tokens per instance", load), ("per-instance capacity, at 1x and 6x the rate", size)):
        print(f"\n{title}")
        print(
            f"  {'router':12s} {'rate x':>6s} {'tokens':>7s} {'util':>5s} {'local':>6s} {'global':>6s} "
            f"{'ratio':>6s} {'GPU time':>9s}   TTFT p50 local / global"
        )
        for r in sub:
            print(
                f"  {r['router']:12s} {r['rate_scale']:6g} {r['per_instance_tokens'] / 1e6:6.1f}M "
                f"{r['utilization_local']:5.0%} {r['hit_local']:6.3f} {r['hit_global']:6.3f} {r['ratio']:5.2f}x "
                f"{-r['gpu_time_saved']:+9.0%}   {r['ttft_p50_local_s']:.2f} s / {r['ttft_p50_global_s']:.2f} s"
            )
    print(f"\n{len(points)} points x 2 simulations in {wall:.0f} s on {a.workers} workers")


if __name__ == "__main__":
    main()
