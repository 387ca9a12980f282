"""Simulation benchmarks (issue 7).

Part ``prefill``: the Mooncake conversation trace over 16 prefill instances:
simulated requests per second of wall time on one core (the full 12,031-request
trace; goal: under 10 s), and a global KV pool against per-instance caches of
the same total capacity: token hit rate, prefill FLOPs and TTFT (Llama-3.1-70B,
one 8xH100 node per prefill instance at 75% of dense bf16 peak, cached KV
loaded at 50 GB/s).

Part ``adaptive``: in each representative system -- data-parallel training
whose link degrades (``sim.training``), the camera stream of
``camera-analytics-edge`` over its swinging uplink (``sim.edge``), serving a
generated diurnal load on up to 6 L4 instances of Llama-3.1-8B, re-planned
every 240 s over a 9,600 s day (``sim.autoscale``; about 3 minutes a seed) --
the adaptive Controller against every static plan and the hindsight oracle:
the objective (time to finish / mean frame latency / dollars), adaptive vs the
best static, adaptive vs the oracle.

Part ``serving``: ``trinity simulate serving``'s simulator on the full conversation trace (Llama-3.1-8B,
8 x H100, without and with a global prefix cache of 30M tokens), the fast-forwarding engine against the
previous one-event-per-iteration implementation (``fast_forward=False``) in the same run, alternating,
median of ``--repeats``; results must be identical (goal: under 2 s on one core).

Part ``ray`` (not in ``all``; needs ``pip install 'aitrinity[ray]'``): a sweep of ``--sweep-seeds`` seeds x every
policy of ``training-link`` and ``edge-stream`` (272 simulations by default, ``--sweep-scale`` x the default steps
and frames: 20,000 steps, 2,000 s) in one process (one CPU), on the local
pool of 1 and 2 worker processes, and on a local Ray of 1 and 2 CPUs (its start-up timed apart), each Ray run twice:
cold (the first sweep also starts Ray's worker processes and imports the project in them) and warm (the same sweep
again on those workers, as a second sweep of one driver runs); the results must be identical. Goal (issue 21): Ray
on 2 CPUs >= 1.7x one CPU. Also Ray's cost per task: 400 empty tasks.

    python benchmarks/bench_sim.py [--part prefill|adaptive|serving|ray|all] [--seeds 0,1,2] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from aitrinity import catalog
from aitrinity.catalog import traces
from aitrinity.sim.prefill import ClusterConfig, simulate_prefill

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "mooncake_conversation_trace.jsonl"


def adaptive(as_json: bool, seeds: list[int]) -> list[dict[str, object]]:
    from aitrinity import api
    from aitrinity.catalog.loader import DATA
    from aitrinity.catalog.traces import load_link_trace
    from aitrinity.edge import resolve
    from aitrinity.sim.autoscale import Autoscale, compare_autoscale, table
    from aitrinity.sim.edge import compare_edge
    from aitrinity.sim.serving import for_device
    from aitrinity.sim.training import DEGRADING, TrainingJob, compare
    from aitrinity.sim.workload import diurnal_chat, generate

    m, l4 = catalog.model("llama-3.1-8b"), catalog.device("l4")
    serving = for_device(l4)
    day, every = diurnal_chat(9600), Autoscale(period_s=240)
    scenario, base = api.load("camera-analytics-edge")
    options = resolve(scenario, base).options()  # type: ignore[arg-type]
    uplink = load_link_trace(DATA / "traces" / "uplink-swing.csv")
    rows: list[dict[str, object]] = []
    for seed in seeds:
        systems = {
            "training on a degrading link (time to finish)": [
                (r.policy, r.total_s) for r in compare(TrainingJob(), DEGRADING, seed=seed)
            ],
            "camera stream on a swinging uplink (mean frame latency)": [
                (r.policy, r.mean_latency_s) for r in compare_edge(options, uplink, seed=seed)
            ],
            "serving a diurnal load, up to 6 L4s ($ incl. missed SLOs)": [
                (r.policy, r.objective_usd)
                for r in compare_autoscale(table(generate(day, seed=seed), m, serving, every), every)
            ],
        }
        for system, res in systems.items():
            d = dict(res)
            static = {k: v for k, v in d.items() if k.startswith("static:")}
            best = min(static, key=lambda k: static[k])
            rows.append(
                {
                    "system": system,
                    "seed": seed,
                    "adaptive": d["adaptive"],
                    "oracle": d["oracle"],
                    "best_static": best,
                    "best_static_value": static[best],
                    "static_plans": len(static),
                }
            )
    if not as_json:
        head = f"{'adaptive':>10s} {'best static':>12s} {'oracle':>9s}  vs static  vs oracle"
        print(f"\n{'system':58s} {'seed':>4s} {head}")
        for r in rows:
            a, b, o = float(r["adaptive"]), float(r["best_static_value"]), float(r["oracle"])  # type: ignore[arg-type]
            print(
                f"{r['system']:58s} {r['seed']:>4} {a:10.3f} {b:12.3f} {o:9.3f}  {b / a:8.2f}x  {a / o - 1:+8.1%}"
                f"   (best static: {str(r['best_static']).removeprefix('static:')}, of {r['static_plans']})"
            )
    return rows


def serving(as_json: bool, repeats: int) -> list[dict[str, object]]:
    from dataclasses import replace
    from statistics import median

    from aitrinity.sim.serving import for_device, simulate_serving

    reqs = traces.load(TRACE)
    m, d = catalog.model("llama-3.1-8b"), catalog.device("h100-sxm")
    rows: list[dict[str, object]] = []
    for cache in ("none", "global"):
        cfg = replace(for_device(d, 8), prefix_cache=cache, cache_capacity_tokens=30_000_000)
        walls: dict[bool, list[float]] = {True: [], False: []}
        results = {}
        for _ in range(repeats):
            for ff in (True, False):
                t = time.perf_counter()
                results[ff] = simulate_serving(reqs, m, replace(cfg, fast_forward=ff))
                walls[ff].append(time.perf_counter() - t)
        same = results[True].model_dump(exclude={"events"}) == results[False].model_dump(exclude={"events"})
        rows.append(
            {
                "prefix_cache": cache,
                "requests": len(reqs),
                "fast_s": median(walls[True]),
                "per_iteration_s": median(walls[False]),
                "speedup": median(walls[False]) / median(walls[True]),
                "fast_events": results[True].events,
                "per_iteration_events": results[False].events,
                "identical": same,
            }
        )
    if not as_json:
        print(f"serving simulator, {len(reqs):,} requests, llama-3.1-8b on 8 x h100-sxm, one core, median of {repeats}")
        head = f"{'prefix cache':13s} {'fast-forward':>13s} {'per iteration':>14s} {'speedup':>8s} {'events':>19s}"
        print(head + " identical")
        for r in rows:
            print(
                f"{r['prefix_cache']:13s} {r['fast_s']:12.2f}s {r['per_iteration_s']:13.2f}s {r['speedup']:7.1f}x "
                f"{r['fast_events']:>8,} / {r['per_iteration_events']:>9,} {r['identical']}"
            )
        worst = max(float(r["fast_s"]) for r in rows)  # type: ignore[arg-type]
        print(f"goal: < 2 s on one core -> {'met' if worst < 2 else 'missed'} ({worst:.2f} s)")
    return rows


def ray_sweep(as_json: bool, seeds: int, scale: int) -> dict[str, object]:
    """Part ``ray`` (module doc)."""
    import ray

    from aitrinity import ray_backend, sweep

    jobs = [
        {"scenario": sc, "policy": p, "seed": seed, **extra}
        for sc, extra in (("training-link", {"steps": 2000 * scale}), ("edge-stream", {"duration": 200.0 * scale}))
        for p in sweep.policies(sc)
        for seed in range(seeds)
    ]
    out: dict[str, object] = {"simulations": len(jobs), "cpus": len(os.sched_getaffinity(0))}
    t = time.perf_counter()
    serial = [sweep.run_or_error(j) for j in jobs]
    out["one_process_s"] = time.perf_counter() - t
    for w in (1, 2):
        t = time.perf_counter()
        assert sweep.run_sweep(jobs, w) == serial
        out[f"pool_{w}_s"] = time.perf_counter() - t
    for cpus in (1, 2):
        t = time.perf_counter()
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="warning")
        out[f"ray_{cpus}_start_s"] = time.perf_counter() - t
        t = time.perf_counter()
        assert ray_backend.run_sweep(jobs) == serial
        out[f"ray_{cpus}_s"] = time.perf_counter() - t
        # the same sweep again on the workers the first one started (their process start and imports behind them)
        t = time.perf_counter()
        assert ray_backend.run_sweep(jobs) == serial
        out[f"ray_{cpus}_warm_s"] = time.perf_counter() - t
        if cpus == 2:
            empty = ray.remote(lambda: None)
            ray.get([empty.remote() for _ in range(50)])  # warm the workers
            t = time.perf_counter()
            ray.get([empty.remote() for _ in range(400)])
            out["ray_task_overhead_ms"] = (time.perf_counter() - t) / 400 * 1e3
        ray.shutdown()
    base = float(out["one_process_s"])  # type: ignore[arg-type]
    if not as_json:
        what = f"{2000 * scale:,} steps / {200 * scale:,} s of frames"
        print(f"{len(jobs)} simulations (training-link + edge-stream, every policy, {seeds} seeds, {what})")
        for key, label in (
            ("one_process_s", "one process, one CPU"),
            ("pool_1_s", "local pool, 1 worker"),
            ("pool_2_s", "local pool, 2 workers"),
            ("ray_1_s", "Ray, 1 CPU"),
            ("ray_2_s", "Ray, 2 CPUs"),
            ("ray_1_warm_s", "Ray, 1 CPU, warm"),
            ("ray_2_warm_s", "Ray, 2 CPUs, warm"),
        ):
            v = float(out[key])  # type: ignore[arg-type]
            print(f"  {label:24s} {v:7.2f} s   {base / v:5.2f}x one CPU")
        starts = f"{out['ray_1_start_s']:.1f} s / {out['ray_2_start_s']:.1f} s"
        print(f"  Ray start-up: {starts} (1 / 2 CPUs), not counted above; warm: the sweep again on the same workers")
        print(f"  Ray cost per task: {out['ray_task_overhead_ms']:.2f} ms (400 empty tasks on 2 CPUs)")
    return out


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # rows appear as they finish, redirected too
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="all", choices=["prefill", "adaptive", "serving", "ray", "all"])
    ap.add_argument("--sweep-seeds", type=int, default=4, help="ray part: seeds per policy (default 4)")
    ap.add_argument("--sweep-scale", type=int, default=10, help="ray part: x 2,000 steps and x 200 s of frames (10)")
    ap.add_argument("--repeats", type=int, default=3, help="serving part: runs of each engine (median)")
    ap.add_argument("--seeds", default="0,1,2", help="adaptive part: comma-separated seeds (default 0,1,2)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.part == "ray":  # uses the CPUs it is given: not pinned to one
        out = ray_sweep(a.json, a.sweep_seeds, a.sweep_scale)
        if a.json:
            print(json.dumps(out, indent=2))
        return
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if a.part in ("serving", "all"):
        out = serving(a.json, a.repeats)
        if a.json:
            print(json.dumps(out, indent=2))
        if a.part == "serving":
            return
    if a.part in ("adaptive", "all"):
        out = adaptive(a.json, [int(s) for s in a.seeds.split(",")])
        if a.json:
            print(json.dumps(out, indent=2))
        if a.part == "adaptive":
            return
    reqs = traces.load(TRACE)
    m, d = catalog.model("llama-3.1-70b"), catalog.device("h100-sxm")
    g = 8 * d.peak_flops_for("bf16") * d.efficiency.compute
    rows = []
    for per_instance in (50_000, 200_000, 800_000, 3_200_000):
        for cache in ("local", "pool"):
            cfg = ClusterConfig(
                instances=16, cache=cache, capacity_tokens=16 * per_instance, flops_per_s=g, load_bandwidth_Bps=50e9
            )
            t = time.perf_counter()
            r = simulate_prefill(reqs, m, cfg)
            wall = time.perf_counter() - t
            rows.append(
                {
                    "cache": cache,
                    "capacity_tokens": cfg.capacity_tokens,
                    "token_hit_rate": r.token_hit_rate,
                    "prefill_flops_share": r.prefill_flops / r.prefill_flops_without_cache,
                    "ttft_p50_s": r.ttft_s.p50,
                    "ttft_p99_s": r.ttft_s.p99,
                    "wall_s": wall,
                    "requests_per_s": r.requests / wall,
                }
            )
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{len(reqs):,} requests, 16 prefill instances, one core")
    print(
        f"{'cache':7s} {'capacity (tokens)':>18s} {'hit rate':>9s} {'prefill FLOPs':>14s} {'TTFT p50':>9s} "
        f"{'TTFT p99':>9s} {'wall':>7s} {'req/s':>9s}"
    )
    for r in rows:
        print(
            f"{r['cache']:7s} {r['capacity_tokens']:>18,} {r['token_hit_rate']:9.3f} {r['prefill_flops_share']:13.1%} "
            f"{r['ttft_p50_s']:8.3f}s {r['ttft_p99_s']:8.2f}s {r['wall_s']:6.2f}s {r['requests_per_s']:9,.0f}"
        )


if __name__ == "__main__":
    main()
