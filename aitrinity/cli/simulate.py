"""``trinity simulate SCENARIO``: discrete-event runs of a prefill cluster or a training job on a changing link."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from aitrinity.cli.args import count, number
from aitrinity.cli.jsonout import dump
from aitrinity.cli.progress import Progress
from aitrinity.errors import SpecError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aitrinity.cost.kernels import Kernels
    from aitrinity.sim.prefill import PrefillResult
    from aitrinity.sim.serving import ClosedLoop, OperatorStep, ServingConfig, ServingSimResult
    from aitrinity.spec.hardware import DeviceSpec
    from aitrinity.spec.model import ModelSpec

EXAMPLES = {
    "prefill-cluster": [
        "trinity simulate prefill-cluster --trace data/traces/mooncake_conversation_trace.jsonl --capacity 3.2M",
        "trinity simulate prefill-cluster --instances 10 --capacity 30M --rate-scale 6   Mooncake's Figure 10 setup",
    ],
    "serving": [
        "trinity simulate serving --model llama-3.1-8b --instances 8      (the built-in conversation trace)",
        "trinity simulate serving --concurrency 32 --isl 1024 --osl 512 --engine trtllm   a benchmark's closed loop",
    ],
    "diurnal-serving": [
        "trinity simulate diurnal-serving                       (llama-3.1-8b on up to 6 L4s; about 3 minutes)",
        "trinity simulate diurnal-serving --day 1200 --period-s 30 --policy static:5,adaptive,oracle",
    ],
    "training-link": [
        "trinity simulate training-link                         (the built-in degrading link)",
        "trinity simulate training-link --trace link.csv --policy static:none,adaptive,oracle --json",
    ],
    "edge-stream": [
        "trinity simulate edge-stream                           (camera-analytics-edge over its uplink trace)",
        "trinity simulate edge-stream --edge my-edge.yaml --trace uplink.csv --duration 600",
    ],
    "sweep": [
        "trinity simulate sweep --seeds 0-4 --workers 2      every policy of both, 5 seeds, mean per policy",
        "trinity simulate sweep --seeds 0-49 --ray           the same on a local Ray (or --ray ADDRESS: a cluster)",
    ],
}

SUMMARY = {
    "prefill-cluster": "a request trace over N prefill instances: per-instance prefix caches, Mooncake's global "
    "cache, one pool",
    "serving": "a request trace, or a fixed-concurrency benchmark, over N instances: continuous batching",
    "diurnal-serving": "a generated day of chat traffic: instances per period, static vs adaptive vs oracle",
    "training-link": "data-parallel training whose link degrades: static plans vs adaptive vs oracle",
    "edge-stream": "a camera stream whose uplink swings: static splits vs adaptive vs oracle",
    "sweep": "training-link and edge-stream x seeds x every policy on a pool of worker processes",
}


HELP = (
    "scenarios (each with its own options: trinity simulate SCENARIO --help):\n"
    + "\n".join(f"  {name:17s} {text}" for name, text in SUMMARY.items())
    + "\n\nexamples:\n"
    + "\n".join(f"  {x}" for xs in EXAMPLES.values() for x in xs)
    + "\n\nA link trace has 'time_s, Mbit/s' per line; the bandwidth holds until the next line.\n"
)


def add_parser(sub: Any) -> None:
    """``trinity simulate SCENARIO [options]``: each scenario has its own options (and its own --help).

    Longer than most: one ``add_argument`` per option, in the order ``--help`` lists them."""
    p = sub.add_parser(
        "simulate",
        help="discrete-event simulation: prefill cluster caches, serving, training on a changing link",
        description="Simulate a scenario event by event, every event priced by the cost model.",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    scen = p.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    s: dict[str, argparse.ArgumentParser] = {
        name: scen.add_parser(
            name,
            help=text,
            description=text,
            epilog="examples:\n" + "\n".join(f"  {x}" for x in EXAMPLES[name]),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        for name, text in SUMMARY.items()
    }
    for name in ("prefill-cluster", "serving", "diurnal-serving", "training-link", "edge-stream"):
        s[name].add_argument("--seed", type=count(0, 2**32 - 1), default=0)
    for name, default in (("training-link", "the built-in degrading link"), ("edge-stream", "the edge's uplink")):
        s[name].add_argument("--trace", help=f"link trace, 'time_s, Mbit/s' per line (default: {default})")
        s[name].add_argument("--policy", default="all", help="comma list of static:<choice>, adaptive, oracle")
    for name in ("prefill-cluster", "serving"):
        s[name].add_argument("--trace", help="request trace, Mooncake JSONL (default: the built-in conversation trace)")
        s[name].add_argument("--capacity", default="3.2M", help="total prefix-cache tokens (default 3.2M)")
    for name, dev in (("prefill-cluster", "--tp per instance, default h100-sxm"), ("serving", "default h100-sxm")):
        s[name].add_argument("--device", help=f"catalog device ({dev})")
    s["prefill-cluster"].add_argument("--model", help="catalog model (default llama-3.1-70b)")
    s["prefill-cluster"].add_argument("--instances", type=count(1, 10**5), default=16, help="instances (default 16)")
    pc = s["prefill-cluster"]
    pc.add_argument(
        "--cache",
        default="both",
        help="comma list of local (per-instance caches), global (Mooncake's: shared, with migration), pool (one "
        "store); both = local,global (default)",
    )
    pc.add_argument(
        "--rate-scale", type=number(0.0, 1e6), default=1.0, help="replay the trace this many times faster (default 1)"
    )
    pc.add_argument(
        "--router",
        default="algorithm1",
        choices=("algorithm1", "least-loaded"),
        help="Mooncake's Algorithm 1 (queue + prefill given each instance's match; default) or the instance that "
        "frees first, blind to the caches",
    )
    pc.add_argument("--ttft-slo", type=number(0.0, 1e7), help="reject a request estimated above this TTFT (seconds)")
    pc.add_argument("--tp", type=count(1, 64), default=8, help="GPUs per instance, tensor parallel (default 8)")
    pc.add_argument(
        "--engine",
        default="generic",
        choices=("generic", "trtllm", "vllm", "sglang"),
        help="kernels of the operator model that times each prefill (default generic: the catalog's parameters)",
    )
    _training_options(s["training-link"])
    _edge_options(s["edge-stream"])
    _serving_options(s["serving"])
    _diurnal_options(s["diurnal-serving"])
    sw = s["sweep"]
    sw.add_argument("--sweep", default="training-link,edge-stream", help="scenarios (comma list)")
    sw.add_argument("--seeds", default="0-2", help="seeds, as 0-4 or 0,3,7 (default 0-2)")
    sw.add_argument("--workers", type=count(1, 1024), help="worker processes (default: the CPUs available)")
    sw.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run on Ray: a local instance of --workers CPUs, or the cluster at ADDRESS ('auto': a running one); "
        "needs pip install 'aitrinity[ray]'",
    )
    sw.add_argument("--policy", default="all", help="comma list of static:<choice>, adaptive, oracle")
    _training_options(sw)
    _edge_options(sw)


def _training_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=count(1, 10**7), default=2000, help="training steps (default 2000)")
    p.add_argument("--period", type=count(1, 10**7), default=10, help="steps between re-plans (default 10)")


def _edge_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--edge", default="camera-analytics-edge", help="edge scenario (name or file)")
    p.add_argument(
        "--duration", type=number(1.0, 1e7, low_open=False), default=200.0, help="seconds of frames (default 200)"
    )


def _serving_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="catalog model (default llama-3.1-8b)")
    p.add_argument("--instances", type=count(1, 10**5), help="instances (default 16; with --concurrency: 1)")
    p.add_argument("--prefill-instances", type=count(0, 10**5), default=0, help="disaggregate: prefill-only instances")
    p.add_argument("--prefix-cache", default="none", choices=["none", "local", "global"], help="prefix cache")
    p.add_argument("--cache-load", default="25GB/s", help="prefix-cache load bandwidth (default 25GB/s)")
    p.add_argument("--kv-link", default="ethernet-400g", help="the prefill -> decode KV link (catalog link)")
    p.add_argument("--slo-ttft", default="2s", help="TTFT objective for goodput (default 2s)")
    p.add_argument("--slo-tpot", default="100ms", help="TPOT objective for goodput (default 100ms)")
    p.add_argument(
        "--concurrency", type=count(1, 10**5), help="replay a fixed-concurrency benchmark (closed loop), not a trace"
    )
    p.add_argument("--isl", type=count(1, 10**7), default=1024, help="with --concurrency: prompt tokens (1024)")
    p.add_argument("--osl", type=count(1, 10**7), default=256, help="with --concurrency: output tokens (256)")
    p.add_argument("--requests", type=count(1, 10**7), help="with --concurrency: requests (default 10 x concurrency)")
    p.add_argument("--tp", type=count(1, 64), default=1, help="GPUs per instance, tensor parallel (default 1)")
    p.add_argument(
        "--cp",
        type=count(1, 1024),
        default=1,
        help="with --engine or --concurrency: context-parallel groups of --tp GPUs per instance, each prompt split "
        "over them and each sequence's KV sharded (default 1)",
    )
    p.add_argument(
        "--cp-method",
        choices=("ring", "ulysses"),
        default="ring",
        help="with --cp: ring attention (pass-KV, hidden behind the attention) or Ulysses (all-to-alls to a split "
        "of the heads; the heads per TP rank must divide over the groups) (default ring)",
    )
    p.add_argument(
        "--engine",
        choices=("generic", "trtllm", "vllm", "sglang"),
        help="time iterations with the operator model and this engine's kernels, and schedule them as it does "
        "(token budget, mixed or separate prefill iterations, first-token lag; default with --concurrency: generic, "
        "the catalog's kernel parameters)",
    )
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp8", "fp4"), help="with --engine: weights dtype")
    p.add_argument(
        "--token-budget",
        type=count(1, 10**7),
        help="tokens per iteration at most (default: the engine's, 8192, with --engine or --concurrency; else 2048)",
    )


def _diurnal_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="catalog model (default llama-3.1-8b)")
    p.add_argument("--device", help="catalog device, one per instance (default l4)")
    p.add_argument(
        "--day", type=number(1.0, 1e7, low_open=False), default=9600.0, help="seconds of the day (default 9600)"
    )
    p.add_argument(
        "--period-s", type=number(1.0, 1e7, low_open=False), default=240.0, help="seconds a plan holds (default 240)"
    )
    p.add_argument("--rate", type=number(0.0, 1e6), default=3.0, help="peak requests/s (default 3)")
    p.add_argument("--max-instances", type=count(1, 10**4), default=6, help="instances at most (default 6)")
    p.add_argument("--policy", default="all", help="comma list of static:<n>, adaptive, oracle")


def run(args: argparse.Namespace) -> int:
    if args.scenario == "serving" and args.instances is None:
        args.instances = 1 if args.concurrency else 16
    if args.scenario == "prefill-cluster":
        return _prefill(args)
    if args.scenario == "serving":
        return _serving(args)
    if args.scenario == "edge-stream":
        return _edge(args)
    if args.scenario == "diurnal-serving":
        return _diurnal(args)
    if args.scenario == "sweep":
        return _sweep(args)
    return _training(args)


def _seeds(text: str) -> list[int]:
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            out = list(range(lo, hi + 1))
        else:
            out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError("--seeds", text, "a range such as 0-4 or a list such as 0,3,7") from None
    if not out or len(out) > 1000:
        raise SpecError("--seeds", text, "between 1 and 1000 seeds")
    return out


def _sweep(args: argparse.Namespace) -> int:
    from aitrinity import sweep

    scenarios = [s.strip() for s in args.sweep.split(",") if s.strip()]
    for s in scenarios:
        if s not in sweep.SCENARIOS:
            raise SpecError("--sweep", s, f"a comma list of {', '.join(sweep.SCENARIOS)}")
    if args.workers is not None and args.workers < 1:
        raise SpecError("--workers", args.workers, "at least 1")
    jobs = []
    for s in scenarios:
        extra = {"edge": args.edge, "duration": args.duration} if s == "edge-stream" else {"steps": args.steps}
        pols = sweep.policies(s, args.edge) if args.policy == "all" else args.policy.split(",")
        jobs += [
            {"scenario": s, "policy": p.strip(), "seed": seed, **extra} for p in pols for seed in _seeds(args.seeds)
        ]

    progress = Progress(args.quiet)

    def step(done: int, total: int) -> None:
        progress.step(done, total, "sweep jobs")

    if args.ray is not None:
        from aitrinity import ray_backend

        results = ray_backend.run_sweep(jobs, args.ray or None, args.workers, step)
    else:
        results = sweep.run_sweep(jobs, args.workers, step)
    if args.json:
        print(dump(results))
        return 0
    for s in scenarios:
        rows: dict[str, list[float]] = {}
        for r in results:
            if r["scenario"] == s:
                rows.setdefault(r["policy"], []).append(r["objective"])
        mean = {p: sum(v) / len(v) for p, v in rows.items()}
        statics = sorted((p for p in mean if p.startswith("static:")), key=lambda p: mean[p])
        unit = next(r["unit"] for r in results if r["scenario"] == s)
        print(f"{s}: {unit}, mean over seeds {args.seeds} ({len(statics)} static plans; the best 3 shown)")
        for p in [*(x for x in mean if not x.startswith("static:")), *statics[:3]]:
            lo, hi = min(rows[p]), max(rows[p])
            best = mean[statics[0]] if statics else None
            oracle = mean.get("oracle")
            print(f"  {p:36s} {mean[p]:10.4g}  [{lo:.4g}, {hi:.4g}]  " + _versus(p, mean[p], best, oracle))
    return 0


def _edge(args: argparse.Namespace) -> int:
    from aitrinity import api, units
    from aitrinity.catalog.traces import load_link_trace
    from aitrinity.edge import resolve
    from aitrinity.sim.edge import EdgeStream, compare_edge, simulate_edge
    from aitrinity.spec.edge import EdgeScenario
    from aitrinity.spec.traces import LinkTrace

    s, base = api.load(args.edge)
    if not isinstance(s, EdgeScenario):
        raise SpecError("--edge", args.edge, "an edge scenario (its workload has an 'edge' job)")
    inp = resolve(s, base)
    if args.trace:
        link = load_link_trace(args.trace)
    elif inp.trace:
        link = LinkTrace(tuple(t for t, _ in inp.trace), tuple(b for _, b in inp.trace))
    else:
        raise SpecError("--trace", None, f"an uplink trace ({s.name} names none in workload.edge.bandwidth_trace)")
    if args.duration <= 0:
        raise SpecError("--duration", args.duration, "a positive number of seconds")
    stream = EdgeStream(fps=s.workload.edge.frames_per_s, duration_s=args.duration)
    opts = inp.options()
    _say(args, f"simulating {int(stream.duration_s * stream.fps):,} frames of {s.name}")
    if args.policy == "all":
        results = compare_edge(opts, link, stream, seed=args.seed)
    else:
        results = [simulate_edge(opts, link, p.strip(), stream, seed=args.seed) for p in args.policy.split(",")]
    if args.json:
        print(dump([r.model_dump(mode="json") for r in results]))
        return 0
    oracle = next((r.mean_latency_s for r in results if r.policy == "oracle"), None)
    statics = [r for r in results if r.policy.startswith("static:")]
    best = min(statics, key=lambda r: r.mean_latency_s) if statics else None
    print(f"{s.name}: {results[0].frames:,} frames at {stream.fps:g}/s over {args.trace or 'its uplink trace'}")
    shown = sorted(results, key=lambda r: r.mean_latency_s)
    for r in shown[:12]:
        notes = _versus(r.policy, r.mean_latency_s, best.mean_latency_s if best else None, oracle)
        print(
            f"  {r.policy:34s} mean {units.format_time(r.mean_latency_s):>9s}  p99 "
            f"{units.format_time(r.latency_s.p99):>9s}  "
            f"energy {units.format_energy(r.mean_energy_J):>9s}  switches {r.switches:3d}  {notes}"
        )
    if len(shown) > 12:
        print(f"  ... {len(shown) - 12} more static choices in --json")
    return 0


def _trace(args: argparse.Namespace) -> tuple[str, str]:
    """(path, label) of the request trace: ``--trace``, else the built-in conversation trace."""
    from aitrinity.catalog.traces import conversation_trace

    if args.trace:
        return args.trace, args.trace
    found = conversation_trace()
    return str(found), f"{found.name} (built in)"


def _serving(args: argparse.Namespace) -> int:
    from aitrinity import catalog
    from aitrinity.catalog import traces
    from aitrinity.sim.serving import simulate_serving
    from aitrinity.spec.scenario import check_tp_heads, ulysses_serving_refusal

    trace, label = _trace(args)
    if args.instances < 1:
        raise SpecError("--instances", args.instances, "at least 1")
    args.model, args.device = args.model or "llama-3.1-8b", args.device or "h100-sxm"  # one device per instance
    m, d = catalog.model(args.model), catalog.device(args.device)
    if not 0 <= args.prefill_instances < args.instances:
        raise SpecError("--prefill-instances", args.prefill_instances, f"0..{args.instances - 1} (leave a decoder)")
    check_tp_heads(m, args.tp, "--tp")
    if args.cp > 1 and args.cp_method == "ulysses" and (why := ulysses_serving_refusal(m, args.tp, args.cp)):
        raise SpecError("--cp", args.cp, why)
    if args.cp > 1 and args.prefill_instances:  # as diagnose refuses plan.cp with disaggregated pools
        raise SpecError("--cp", args.cp, "1 with --prefill-instances (CP is priced for aggregated instances)")
    if args.tp > d.typical_devices_per_node:  # as diagnose and the planner place a TP group
        raise SpecError("--tp", args.tp, f"at most the {d.typical_devices_per_node} GPUs of one {args.device} node")
    closed = _closed_loop(args)
    if args.cp > 1 and not (args.engine or closed):
        raise SpecError("--cp", args.cp, "1 without --engine or --concurrency (the operator model prices CP)")
    step = _operator_step(args, m, d) if args.engine or closed else None
    cfg = _serving_config(args, m, d, step)
    reqs = traces.load(trace) if closed is None else []
    progress = Progress(args.quiet)
    n = len(reqs) if closed is None else closed.requests
    progress.say(f"simulating {n:,} requests on {args.instances} x {args.tp} x {args.device}")
    try:
        r = simulate_serving(
            reqs, m, cfg, seed=args.seed, progress=lambda k, total: progress.step(k, total, "requests"), closed=closed
        )
    except ValueError as e:
        raise SpecError("--model/--device", f"{args.model}/{args.device}", str(e)) from None
    steady = _steady(args, step, cfg) if closed is not None and step is not None else None
    if args.json:
        out = r.model_dump(mode="json")
        if step is not None:
            out["scheduling"] = {
                "engine": args.engine or "generic",
                "token_budget": cfg.token_budget,
                "mixed_batches": cfg.mixed_batches,
                "first_token_lag": cfg.first_token_lag,
                "output_spread_tokens": closed.output_spread_tokens if closed is not None else None,
            }
        if steady is not None:
            out["analytic_steady_state"] = steady
        print(dump(out))
        return 0
    if closed is not None:
        return _print_closed(args, r, steady or {})
    _print_trace_run(args, r, label)
    return 0


def _serving_config(args: argparse.Namespace, m: ModelSpec, d: DeviceSpec, step: OperatorStep | None) -> ServingConfig:
    """The instances ``trinity simulate serving`` runs: with the operator model (``step``), the engine's scheduling
    and KV pool (:mod:`aitrinity.cost.kv_pool`); without it, the roofline and a 2,048-token budget."""
    from aitrinity import catalog, units
    from aitrinity.cost.kv_pool import kv_capacity_tokens, kv_pool
    from aitrinity.sim.serving import EngineScheduling, for_device, scheduling

    link = catalog.link(args.kv_link)
    sched = scheduling(args.engine or "generic") if step is not None else EngineScheduling(token_budget=2048)
    engine_kv: dict[str, Any] = {}
    if step is not None:  # the engine sizes its KV pool and admits into it as it does (cost.kv_pool)
        pool = kv_pool(args.engine or "generic")
        room = kv_capacity_tokens(m, step.layout, d.memory_capacity_bytes, pool)
        engine_kv = {"kv_capacity_tokens": room, "reserve_output": pool.reserve_output}
    return for_device(
        d,
        args.instances,
        memory_capacity_bytes=d.memory_capacity_bytes * args.tp * args.cp,
        weights_dtype=args.dtype,
        token_budget=args.token_budget or sched.token_budget,
        mixed_batches=sched.mixed_batches,
        first_token_lag=sched.first_token_lag,
        max_batch=max(256, args.concurrency or 0),
        step_time=step,
        prefill_instances=args.prefill_instances,
        kv_link_Bps=link.bandwidth_Bps * link.efficiency,
        kv_link_latency_s=link.latency_s,
        prefix_cache=args.prefix_cache,
        cache_capacity_tokens=int(units.parse_count(args.capacity)) if args.prefix_cache != "none" else 0,
        cache_load_Bps=units.parse_bandwidth(args.cache_load),
        slo_ttft_s=units.parse_time(args.slo_ttft),
        slo_tpot_s=units.parse_time(args.slo_tpot),
        **engine_kv,
    )


def _print_trace_run(args: argparse.Namespace, r: ServingSimResult, label: str) -> None:
    from aitrinity import units

    t = units.format_time
    layout = (
        f"{args.prefill_instances} prefill + {args.instances - args.prefill_instances} decode instances, KV over "
        f"{args.kv_link}"
        if args.prefill_instances
        else f"{args.instances} instances"
    )
    print(
        f"{label}: {r.requests:,} requests on {layout} ({args.device}) serving {args.model}; "
        f"KV room {r.kv_capacity_tokens:,} tokens per instance"
    )
    why = "".join(f" ({k}: {v:,})" for k, v in r.rejected.items())
    print(f"  finished {r.finished:,}, rejected {sum(r.rejected.values()):,}{why}, preemptions {r.preemptions:,}")
    print(
        f"  TTFT p50 {t(r.ttft_s.p50)}, p90 {t(r.ttft_s.p90)}, p99 {t(r.ttft_s.p99)}; "
        f"TPOT p50 {t(r.tpot_s.p50)}, p90 {t(r.tpot_s.p90)}, p99 {t(r.tpot_s.p99)}"
    )
    print(
        f"  goodput {r.goodput_rps:.2f} req/s within TTFT {args.slo_ttft} and TPOT {args.slo_tpot}; "
        f"{r.output_tokens_per_s:,.0f} output tokens/s; utilization {min(r.utilization):.0%}-{max(r.utilization):.0%}"
    )
    if args.prefix_cache != "none":
        print(
            f"  prefix cache ({args.prefix_cache}, {args.capacity} tokens): token hit rate "
            f"{r.prefix_token_hit_rate:.1%}, {units.format_bytes(r.prefix_bytes_loaded)} loaded"
        )
    if r.kv_transfers:
        print(f"  {r.kv_transfers:,} KV transfers, {units.format_bytes(r.kv_transfer_bytes)} over {args.kv_link}")
    price = f"{units.format_money(r.cost_usd)} at the catalog price" if r.cost_usd is not None else "no catalog price"
    energy = f"{units.format_energy(r.energy_J)} at TDP while busy" if r.energy_J is not None else ""
    print(f"  run: {units.format_time(r.makespan_s)}; {price}; {energy}")


def _closed_loop(args: argparse.Namespace) -> ClosedLoop | None:
    from aitrinity.cost.concurrency import profile
    from aitrinity.sim.serving import ClosedLoop, scheduling

    if args.concurrency is None:
        return None
    engine = args.engine or "generic"
    total = args.requests or 10 * args.concurrency
    spread = scheduling(engine).output_spread_tokens
    return ClosedLoop(args.concurrency, args.isl, args.osl, total, profile(engine).request_overhead_s, spread)


def _kernels(args: argparse.Namespace, d: DeviceSpec, m: ModelSpec) -> Kernels:
    from aitrinity import silicon

    choice = silicon.kernels(d, args.engine or "generic", fp8_block=bool(m.fp8_weight_block))
    if choice.note and not args.quiet:
        print(f"trinity: {choice.note}", file=sys.stderr)
    return choice.kernels


def _operator_step(args: argparse.Namespace, m: ModelSpec, d: DeviceSpec) -> OperatorStep:
    from aitrinity import catalog
    from aitrinity.cost.concurrency import profile
    from aitrinity.cost.operators import Layout, ScaleOut
    from aitrinity.sim.serving import OperatorStep

    prof = profile(args.engine or "generic")
    cp = args.cp
    scale_out = None
    if args.tp * cp > d.typical_devices_per_node:  # the CP groups sit on several nodes
        scale_out = ScaleOut.over(d.typical_devices_per_node, catalog.link(d.typical_inter_node_link))
    engine = args.engine or "generic"
    lay = Layout(
        tp=args.tp, weight_dtype=args.dtype, engine=engine, scale_out=scale_out, cp=cp, cp_method=args.cp_method
    )
    return OperatorStep(m, _kernels(args, d, m), lay, prof.step_overhead_s)


def _steady(args: argparse.Namespace, step: OperatorStep, cfg: ServingConfig) -> dict[str, float]:
    """The analytic steady state of the same benchmark on the simulation's own model, kernels and layout, for
    comparison: :mod:`aitrinity.cost.concurrency` for aggregated instances, :mod:`aitrinity.cost.disaggregated`
    for prefill and decode pools."""
    from aitrinity.cost.concurrency import steady_state
    from aitrinity.cost.disaggregated import KVLink, Pool, disaggregated_steady_state
    from aitrinity.cost.kv_pool import kv_pool, kv_slots
    from aitrinity.cost.memory import kv_shard_factor

    p = args.prefill_instances
    if p:
        # the simulator moves an instance's whole KV over one link: per rank, its share of that bandwidth
        tp = step.layout.tp
        assert isinstance(tp, int), "a simulated instance has one TP degree"
        share = kv_shard_factor(step.model, tp)
        link = KVLink(cfg.kv_link_Bps * share, cfg.kv_link_latency_s, args.kv_link)
        pools = Pool(p, step.layout), Pool(args.instances - p, step.layout)
        ds = disaggregated_steady_state(
            step.model, step.kernels, *pools, link, args.concurrency, args.isl, args.osl, token_budget=cfg.token_budget
        )
        return {
            "ttft_s": float(ds.ttft_s),
            "tpot_s": float(ds.tpot_s),
            "output_tokens_per_s": float(ds.output_tokens_per_s),
        }
    per_instance = args.concurrency / args.instances  # the router spreads clients evenly
    lay = step.layout
    per_gpu = cfg.memory_capacity_bytes / int(lay.tp)
    slots = kv_slots(step.model, lay, per_gpu, args.isl, args.osl, kv_pool(lay.engine))
    ss = steady_state(step.model, step.kernels, lay, per_instance, args.isl, args.osl, kv_slots=slots)
    rate = float(ss.output_tokens_per_s) * args.instances
    return {"ttft_s": float(ss.ttft_s), "tpot_s": float(ss.tpot_s), "output_tokens_per_s": rate}


def _print_closed(args: argparse.Namespace, r: ServingSimResult, steady: dict[str, float]) -> int:
    from aitrinity import units
    from aitrinity.sim.serving import scheduling

    t = units.format_time
    engine = args.engine or "generic"
    s = scheduling(engine)
    batches = "mixed iterations" if s.mixed_batches else "separate prefill iterations"
    pools = (
        f"{args.prefill_instances} prefill + {args.instances - args.prefill_instances} decode instances "
        f"(KV over {args.kv_link})"
        if args.prefill_instances
        else f"{args.instances} instance(s)"
    )
    gpus = (
        f"{args.tp} x {args.device}"
        if args.cp == 1
        else f"{args.tp * args.cp} x {args.device} (tp {args.tp} x cp {args.cp})"
    )
    print(
        f"{args.concurrency} clients on {pools} of {gpus}, {args.model} "
        f"({args.dtype}, {engine} kernels): {r.requests:,} requests of {args.isl} -> {args.osl} tokens"
    )
    print(
        f"  {engine} scheduling: {args.token_budget or s.token_budget:,} tokens per iteration, {batches}, "
        f"first token {s.first_token_lag} iteration(s) late, output lengths +-{s.output_spread_tokens:g} tokens"
    )
    print(
        f"  simulated: TTFT mean {t(r.ttft_s.mean)} (p50 {t(r.ttft_s.p50)}, p90 {t(r.ttft_s.p90)}), "
        f"TPOT mean {t(r.tpot_s.mean)}, {r.output_tokens_per_s:,.0f} output tokens/s"
    )
    if steady:
        print(
            f"  analytic steady state: TTFT {t(steady['ttft_s'])}, TPOT {t(steady['tpot_s'])}, "
            f"{steady['output_tokens_per_s']:,.0f} output tokens/s"
        )
    return 0


def _diurnal(args: argparse.Namespace) -> int:
    from aitrinity import catalog
    from aitrinity.sim.autoscale import Autoscale, compare_autoscale, simulate_autoscale, table
    from aitrinity.sim.serving import for_device
    from aitrinity.sim.workload import diurnal_chat, generate

    model, device = args.model or "llama-3.1-8b", args.device or "l4"
    m, d = catalog.model(model), catalog.device(device)
    for name, value in (("--day", args.day), ("--period-s", args.period_s), ("--rate", args.rate)):
        if value <= 0:
            raise SpecError(name, value, "a positive number")
    if args.max_instances < 1:
        raise SpecError("--max-instances", args.max_instances, "at least 1")
    if args.period_s > args.day:
        raise SpecError("--period-s", args.period_s, f"at most the day ({args.day:g} s)")
    a = Autoscale(period_s=args.period_s, max_instances=args.max_instances)
    reqs = generate(diurnal_chat(args.day, args.rate), seed=args.seed)
    t = table(reqs, m, for_device(d), a)
    progress = Progress(args.quiet)
    progress.say(f"simulating {len(reqs):,} requests in {len(t.periods)} periods on 1-{a.max_instances} x {device}")
    if args.policy == "all":
        results = compare_autoscale(t, a, progress=lambda i, n: progress.step(i, n, "policies"))
    else:
        results = [simulate_autoscale(t, p.strip(), a) for p in args.policy.split(",")]
    if args.json:
        print(dump([r.model_dump(mode="json") for r in results]))
        return 0
    print(
        f"diurnal serving: {model} on 1-{a.max_instances} x {device}, a {args.day:g} s day (5-100% of "
        f"{args.rate:g} requests/s) in {args.period_s:g} s periods, {len(reqs):,} requests; objective: $1 an "
        f"instance-hour + ${a.penalty_usd:g} a request missing TTFT 2 s / TPOT 100 ms"
    )
    by = {r.policy: r.objective_usd for r in results}
    static = [v for k, v in by.items() if k.startswith("static:")]
    best, oracle = (min(static) if static else None), by.get("oracle")
    for r in sorted(results, key=lambda r: r.objective_usd):
        print(
            f"  {r.policy:10s} ${r.objective_usd:8.3f}  {r.instance_hours:6.2f} instance-h  missed {r.missed:5,}  "
            f"switches {r.switches:3}  {_versus(r.policy, r.objective_usd, best, oracle)}"
        )
    return 0


def _say(args: argparse.Namespace, msg: str) -> None:
    Progress(args.quiet).say(msg)


def _prefill(args: argparse.Namespace) -> int:
    from aitrinity import catalog, units
    from aitrinity.catalog import traces
    from aitrinity.cost.concurrency import profile
    from aitrinity.cost.operators import Layout
    from aitrinity.sim.prefill import CACHES, ClusterConfig, operator_prefill, simulate_prefill

    trace, label = _trace(args)
    if args.instances < 1:
        raise SpecError("--instances", args.instances, "at least 1")
    names = args.cache.replace("both", "local,global")
    caches = [c.strip() for c in names.split(",") if c.strip()]
    if not caches or any(c not in CACHES for c in caches):
        raise SpecError("--cache", args.cache, f"a comma list of {', '.join(CACHES)}, or both")
    args.model, args.device = args.model or "llama-3.1-70b", args.device or "h100-sxm"
    m, d = catalog.model(args.model), catalog.device(args.device)
    capacity = int(units.parse_count(args.capacity))
    reqs = traces.load(trace)
    layout = Layout(tp=args.tp, engine=args.engine)
    prefill = operator_prefill(m, _kernels(args, d, m), layout, profile(args.engine).step_overhead_s)
    results = []
    for c in caches:
        cfg = ClusterConfig(
            instances=args.instances,
            cache=c,
            capacity_tokens=capacity,
            load_bandwidth_Bps=50e9,
            rate_scale=args.rate_scale,
            router=args.router,
            ttft_slo_s=args.ttft_slo,
        )
        _say(args, f"simulating {len(reqs):,} requests on {args.instances} instances, {c} cache")
        results.append(
            simulate_prefill(
                reqs, m, cfg, prefill_time=prefill, seed=args.seed, progress=lambda n: _say(args, f"{n:,} events")
            )
        )
    if args.json:
        print(dump([r.model_dump(mode="json") for r in results]))
        return 0
    _print_prefill(args, label, len(reqs), capacity, results)
    return 0


def _print_prefill(
    args: argparse.Namespace, label: str, requests: int, capacity: int, results: Sequence[PrefillResult]
) -> None:
    """``simulate prefill-cluster``'s table: one row per cache setup, then each against the first."""
    from aitrinity import units

    print(
        f"{label}: {requests:,} requests at {args.rate_scale:g}x the trace's rate, {args.instances} prefill "
        f"instances ({args.model}, {args.tp} x {args.device} each, {args.engine} kernels), {capacity:,} cache tokens "
        f"in all, {args.router} routing"
    )
    print(
        f"  {'cache':7s} {'hit rate':>9s} {'prefill FLOPs':>14s} {'GPU time':>9s} {'TTFT p50':>10s} {'p90':>9s} "
        f"{'p99':>9s} {'mean util':>9s} {'rejected':>9s}"
    )
    for r in results:
        share = r.prefill_flops / max(r.prefill_flops_without_cache, 1e-30)
        print(
            f"  {r.cache:7s} {r.token_hit_rate:9.3f} {share:13.1%} "
            f"{units.format_time(r.busy_s * args.tp):>9s} {units.format_time(r.ttft_s.p50):>10s} "
            f"{units.format_time(r.ttft_s.p90):>9s} {units.format_time(r.ttft_s.p99):>9s} "
            f"{sum(r.utilization) / len(r.utilization):9.1%} {r.rejected:9,d}"
        )
    if len(results) > 1 and results[0].token_hit_rate > 0:
        first = results[0]
        for r in results[1:]:
            print(
                f"  {r.cache} / {first.cache}: hit rate {r.token_hit_rate / first.token_hit_rate:.2f}x, prefill GPU "
                f"time {r.busy_s / max(first.busy_s, 1e-30) - 1:+.0%}"
            )


def _training(args: argparse.Namespace) -> int:
    from aitrinity import units
    from aitrinity.catalog.traces import load_link_trace
    from aitrinity.sim.training import DEGRADING, TrainingJob, compare

    if args.steps < 1 or args.period < 1:
        raise SpecError("--steps/--period", f"{args.steps}/{args.period}", "positive numbers")
    link = load_link_trace(args.trace) if args.trace else DEGRADING
    job = TrainingJob(steps=args.steps)
    policies = None if args.policy == "all" else [p.strip() for p in args.policy.split(",") if p.strip()]
    _say(args, f"simulating {args.steps} steps under {len(policies) if policies else len(job.methods) + 2} policies")
    results = compare(job, link, policies, period=args.period, seed=args.seed)
    if args.json:
        print(dump([r.model_dump(mode="json") for r in results]))
        return 0
    best_static = min((r.total_s for r in results if r.policy.startswith("static:")), default=None)
    oracle = next((r.total_s for r in results if r.policy == "oracle"), None)
    print(
        f"{args.steps} steps, {job.bucket_numels[0]:,} gradient elements on {job.world} ranks; link "
        + ", ".join(
            f"{units.format_bandwidth(b)} from {t:g} s" for t, b in zip(link.times_s, link.bandwidth_Bps, strict=True)
        )
    )
    for r in results:
        print(
            f"  {r.policy:14s} {units.format_time(r.total_s):>9s}  switches {r.switches:3d}  "
            f"{', '.join(f'{m} {n}' for m, n in r.steps_by_method.items())}  "
            + _versus(r.policy, r.total_s, best_static, oracle)
        )
    return 0


def _versus(policy: str, value: float, best_static: float | None, oracle: float | None) -> str:
    """How a non-static policy compares with the best static plan, and any policy with the oracle (lower wins)."""
    notes = []
    if best_static and not policy.startswith("static:"):
        notes.append(f"{best_static / value:.2f}x the best static")
    if oracle and policy != "oracle":
        notes.append(f"{value / oracle - 1:+.1%} vs oracle")
    return "; ".join(notes)
