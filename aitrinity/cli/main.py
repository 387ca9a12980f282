"""The ``trinity`` command: parse -> call the library -> render (text or --json).

User mistakes print one line ``trinity: error: ...`` and exit with status 2;
heavy modules are imported only by the command that needs them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from aitrinity import __version__
from aitrinity.cli.args import output_file
from aitrinity.cli.jsonout import dump
from aitrinity.cli.progress import Progress
from aitrinity.errors import SpecError, TrinityError
from aitrinity.units import format_time

EXIT_USAGE = 2

EPILOG = """examples:
  trinity diagnose                          diagnose the built-in example scenarios
  trinity diagnose my.yaml --json           one scenario file, as JSON
  trinity diagnose my.yaml --set gpus=512 --set link=100Gbit/s   what if
  trinity plan llama-70b-training-h100      the best plans, the Pareto frontier and the chain
  trinity explain SCENARIO --from scenario  the chain from your own plan to the best one
  trinity plan SCENARIO --sweep link=25Gbit/s,100Gbit/s,400Gbit/s   where the best plan changes
  trinity kv replay data/traces/mooncake_conversation_trace.jsonl --capacity 1M,3M,unbounded
  trinity kv plan data/traces/mooncake_conversation_trace.jsonl --target 0.3   prefix-cache capacity per tier
  trinity calibrate --quick -o me.yaml      measure this machine; use me.yaml as a device
  trinity watch http://127.0.0.1:8000 --device me.yaml   what binds a live vLLM server, each period
  trinity train-demo --workers 2 --link 100mbit --compressor auto   compressed DDP over a shaped link
  trinity diagnose camera-analytics-edge     where to split a CNN between a camera and an edge server
  trinity split-demo --policy local,0:raw,adaptive   split inference for real over a swinging uplink
  trinity simulate training-link            static plans vs the adaptive Controller on a degrading link
  trinity hardware compare h100-sxm h200 b200 mi300x   designs over the built-in workload suite
  trinity hardware compare h100 h100:hbm_capacity=141GiB,price=+50% --objective tokens_per_dollar
  trinity report -o report.html             charts of the built-in examples in one self-contained HTML file
  trinity ui                                a what-if page on http://127.0.0.1:8765
  trinity catalog list models               catalog names of one kind
  trinity catalog show llama-3.1-70b        an entry with its derived figures
"""


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: ``trinity simulate: error: ... (trinity simulate --help)``, not the whole
    usage block; subcommand parsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} ({self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="trinity",
        description="Compute-bandwidth-memory trade-offs of AI infrastructure.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"trinity {__version__}")
    p.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_diagnose,
        _add_plan,
        _add_explain,
        _add_other_modules,
        _add_calibrate,
        _add_validate,
        _add_hardware,
        _add_catalog,
    ):
        add(sub)
    from aitrinity.cli import completion

    completion.add_parser(sub)
    for leaf in leaves(p):  # every command takes --quiet and --json
        opts = {o for a in leaf._actions for o in a.option_strings}
        if "--quiet" not in opts:
            leaf.add_argument("--quiet", action="store_true", help="nothing on stderr but errors")
        if "--json" not in opts:
            leaf.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def _add_diagnose(sub: Any) -> None:
    """trinity diagnose."""
    d = sub.add_parser(
        "diagnose",
        help="which resource binds, by how much, at what price",
        description="Diagnose scenarios: the binding resource per phase, every resource's "
        "utilization, the headroom, memory feasibility, $ and joules.",
        epilog="""examples:
  trinity diagnose                                   every built-in example
  trinity diagnose llama-70b-training-h100 --json    one built-in scenario, as JSON
  trinity diagnose my.yaml --set gpus=512 --set link=25Gbit/s
  trinity diagnose camera-analytics-edge --set uplink=2Mbit/s
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help="scenario YAML files or built-in scenario names (default: all built-in examples)",
    )
    d.add_argument("--json", action="store_true", help="print the structured result as JSON")
    d.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="what-if change, repeatable: a scenario field (plan.tp=4, system.num_devices=512) or "
        "gpus=N, model=NAME, link=100Gbit/s, hbm_bandwidth=..., hbm_capacity=..., flops_scale=0.5",
    )


def _add_plan(sub: Any) -> None:
    """trinity plan.

    Longer than most: one ``add_argument`` per option, in the order ``--help`` lists them."""
    pl = sub.add_parser(
        "plan",
        help="search plans; the best, the top N, the Pareto frontier and the chain",
        description="Search parallel layouts x memory techniques x exchanges for a training "
        "scenario, keep the feasible plans, rank them by an objective, and explain "
        "the chain of exchanges from a naive baseline to the best plan.",
        epilog="""examples:
  trinity plan llama-70b-training-h100                       best plans by step time
  trinity plan llama-70b-training-h100 --objective cost --top 3
  trinity plan llama-70b-serving-long-context --slo-ttft 30s --slo-tpot 50ms
  trinity plan examples/deepseek-r1-gb200-nvl72.yaml --disaggregated   prefill / decode splits too
  trinity plan llama-70b-training-h100 --sweep link=25Gbit/s,100Gbit/s,400Gbit/s
  trinity plan camera-analytics-edge --objective energy
  trinity plan --scenarios examples/ --ray                    the best plan of every scenario file, on Ray
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pl.add_argument("scenario", metavar="SCENARIO", nargs="?", help="scenario file or built-in name")
    pl.add_argument(
        "--scenarios",
        metavar="DIR",
        help="instead of one SCENARIO: the best plan of every scenario file (*.yaml) in DIR, one table per kind",
    )
    pl.add_argument(
        "--objective",
        choices=["time", "throughput", "latency", "cost", "energy"],
        help="training: time (default), cost, energy; serving: throughput (default), latency, cost, energy; "
        "edge: latency or energy (default: the scenario's); cost needs a device-hour price, energy a device power "
        "(the catalog's, or system.price_per_device_hour / system.power_per_device)",
    )
    pl.add_argument("--slo-ttft", metavar="TIME", help="serving: time-to-first-token objective, e.g. 2s")
    pl.add_argument("--slo-tpot", metavar="TIME", help="serving: time-per-output-token objective, e.g. 50ms")
    pl.add_argument("--top", type=int, default=5, help="how many of the best plans to list (default 5)")
    pl.add_argument(
        "--disaggregated",
        action="store_true",
        help="serving: also search splits into a prefill and a decode pool (on when the scenario's plan has a "
        "disaggregation)",
    )
    pl.add_argument(
        "--from",
        dest="start",
        default="naive",
        choices=["naive", "scenario"],
        help="start the chain from a naive plan (default) or from the scenario's own plan",
    )
    pl.add_argument(
        "--sweep",
        metavar="KEY=V1,V2,...",
        help="re-plan for each value of one override (e.g. link=25Gbit/s,100Gbit/s,400Gbit/s) and "
        "show where the best plan changes",
    )
    pl.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="with --sweep or --scenarios: plan on Ray, a local instance or the cluster at ADDRESS (scenarios: "
        "catalog names or files every node can read); needs pip install 'aitrinity[ray]'",
    )
    pl.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="what-if change, as for diagnose",
    )
    pl.add_argument("--json", action="store_true")
    pl.add_argument("--timings", action="store_true", help="print the search's wall-clock time on stderr")


def _add_explain(sub: Any) -> None:
    """trinity explain."""
    ex = sub.add_parser(
        "explain",
        help="the chain of exchanges from a naive plan to the best one",
        description="The chain only: each step's pathway, the resource it relieved, what binds next and the gain.",
        epilog="""examples:
  trinity explain llama-70b-training-h100
  trinity explain llama-70b-training-h100 --from scenario   from the scenario's own plan
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ex.add_argument("scenario", metavar="SCENARIO")
    ex.add_argument("--objective", choices=["time", "throughput", "latency", "cost", "energy"])
    ex.add_argument("--slo-ttft", metavar="TIME")
    ex.add_argument("--slo-tpot", metavar="TIME")
    ex.add_argument("--from", dest="start", default="naive", choices=["naive", "scenario"])
    ex.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    ex.add_argument("--json", action="store_true")
    ex.add_argument("--timings", action="store_true", help="print the search's wall-clock time on stderr")


def _add_other_modules(sub: Any) -> None:
    """The commands whose parsers live with them (replay, kv, report, ui, train, split, simulate)."""
    from aitrinity.cli import kv

    rp = sub.add_parser(
        "replay",
        help="prefix-cache hit rate of a request trace (same as kv replay)",
        description="Replay a Mooncake-format JSONL trace through the prefix cache's block index (no KV "
        "is materialised): token hit rate, prefill FLOPs saved and bytes served per capacity. "
        "The same command as `trinity kv replay`.",
        epilog=kv.REPLAY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kv.add_replay_arguments(rp)
    kv.add_parsers(sub)
    from aitrinity.cli import report, simulate, split, train, ui, watch

    watch.add_parser(sub)
    report.add_parser(sub)
    ui.add_parser(sub)
    train.add_parser(sub)
    split.add_parser(sub)
    simulate.add_parser(sub)


def _add_calibrate(sub: Any) -> None:
    """trinity calibrate."""
    cal = sub.add_parser(
        "calibrate",
        help="measure this machine and write a device profile",
        description="Measure matmul FLOP/s per dtype across sizes, memory bandwidth, disk, "
        "loopback TCP and codec throughput on this machine, and write a device "
        "profile (YAML) the catalog accepts, with every measurement recorded.",
        epilog="""examples:
  trinity calibrate --quick -o me.yaml          seconds; noisier
  trinity diagnose my.yaml --set system.device=me.yaml   use the profile as a device
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cal.add_argument("--quick", action="store_true", help="small sizes and few repeats (seconds, noisier)")
    cal.add_argument("-o", "--output", metavar="FILE", help="write the profile here (default: print it)")
    cal.add_argument("--name", help="the profile's device name (default: calibrated-<hostname>)")
    cal.add_argument("--tdp", default="100 W", help="power to assume, not measured (default 100 W)")
    cal.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch threads while measuring (default: torch's choice); match an engine that pins fewer cores",
    )
    cal.add_argument("--json", action="store_true")


def _add_validate(sub: Any) -> None:
    """trinity validate."""
    va = sub.add_parser(
        "validate",
        help="measured vs predicted: real torch workloads on this CPU, or measured GPU serving runs (--serving)",
        description="Build small decoders from configs (random weights) and measure parameters, "
        "FLOPs, saved activations, KV-cache bytes and prefill / train-step / decode-step "
        "times against the cost model's predictions on a calibrated profile. With --serving FILE: price "
        "every measured GPU serving run of FILE (fixed concurrency, aiconfigurator's CSV format) and print "
        "TTFT and TPOT errors overall and per model / engine / dtype / TP.",
        epilog="""examples:
  trinity validate --quick                       calibrate quickly, then two small models
  trinity validate --profile me.yaml --markdown validation.md
  trinity validate --serving runs.csv            measured serving runs vs the operator model
  trinity validate --serving runs.csv --no-tables   the same with the catalog's compact kernel parameters
  trinity validate --training                    published Megatron-LM and Llama 3 runs vs the operator model
  trinity validate --training --engine vllm      the same with the measured kernel tables ([silicon])
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    va.add_argument(
        "--profile", metavar="FILE", help="device profile from trinity calibrate (default: calibrate now, quickly)"
    )
    va.add_argument("--quick", action="store_true", help="two small models only")
    va.add_argument("--serving", metavar="FILE", help="a CSV of measured GPU serving runs to price (no torch needed)")
    va.add_argument("--training", action="store_true", help="published large-scale training runs vs the operator model")
    va.add_argument(
        "--engine",
        choices=("generic", "trtllm", "vllm", "sglang"),
        default="generic",
        help="with --training: whose measured kernel tables time the GEMMs (default: the catalog's parameters)",
    )
    va.add_argument(
        "--no-tables",
        dest="tables",
        action="store_false",
        help="with --serving: price with the catalog's kernel parameters even when the [silicon] tables are installed",
    )
    va.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    va.add_argument("--json", action="store_true")


def _add_hardware(sub: Any) -> None:
    """trinity hardware compare."""
    hw = sub.add_parser("hardware", help="hardware what-if: compare designs over a workload suite")
    hsub = hw.add_subparsers(dest="hardware_command", required=True, metavar="ACTION")
    hc = hsub.add_parser(
        "compare",
        help="best plans, resource elasticities and flexibility of each design",
        description="For every design x workload of the suite: the planner's best plan, the elasticity of "
        "the objective to each resource (+step, re-planned) and the re-plan with each resource cut to "
        "--constraint; then each design's suite performance, flexibility score and ($, J, performance) "
        "Pareto status. Formulas: docs/hardware.md.",
        epilog="examples:\n  trinity hardware compare h100-sxm h200 b200 mi300x\n"
        "  trinity hardware compare h100 h100:hbm_capacity=141GiB,price=+50% --objective tokens_per_dollar\n\n"
        "designs: a catalog device (h200), a device file, DEVICE:EDIT,EDIT "
        "(h100-sxm:hbm_capacity=141GiB,price=+50%; edits: "
        "flops, hbm_bandwidth, hbm_capacity, intra_node_bandwidth, inter_node_bandwidth, host_bandwidth, "
        "host_capacity, price, power; absolute or x0.5 / +20%), :EDIT (each scenario's own device), "
        "or a design .yaml file",
    )
    hc.add_argument("designs", nargs="+", metavar="DESIGN")
    hc.add_argument("--suite", default="representative", help="built-in suite name or suite file")
    hc.add_argument(
        "--objective",
        default="performance",
        help="performance (tokens/s; default), tokens_per_dollar, tokens_per_joule or joules_per_token",
    )
    hc.add_argument("--step", type=float, default=0.1, help="resource increase for elasticities (default 0.1)")
    hc.add_argument("--constraint", type=float, default=0.5, help="resource factor for retention (default 0.5)")
    hc.add_argument("--refine", type=int, default=2, help="bisection steps locating plan switches (default 2)")
    hc.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="analyse the design x workload cases on Ray, a local instance or the cluster at ADDRESS; needs "
        "pip install 'aitrinity[ray]'",
    )
    hc.add_argument("--quiet", action="store_true", help="no progress on stderr")
    hc.add_argument("--json", action="store_true")
    hc.add_argument("--timings", action="store_true", help="print the search's wall-clock time on stderr")


def _add_catalog(sub: Any) -> None:
    """trinity catalog list / show."""
    c = sub.add_parser("catalog", help="list or show catalog entries")
    csub = c.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    cl = csub.add_parser(
        "list",
        help="names of one kind, or of every kind",
        epilog="examples:\n  trinity catalog list\n  trinity catalog list devices --json\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cl.add_argument("kind", nargs="?", choices=["devices", "links", "tiers", "models", "dnns", "scenarios", "suites"])
    cl.add_argument("--json", action="store_true")
    cs = csub.add_parser(
        "show",
        help="one entry (name, alias or Hugging Face id) with derived figures",
        epilog="examples:\n  trinity catalog show llama-3.1-70b\n"
        "  trinity catalog show meta-llama/Llama-3.1-8B --json\n  trinity catalog show h100 --json\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cs.add_argument("name")
    cs.add_argument("--json", action="store_true")


def leaves(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of every command (the ones without sub-commands)."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [p]
    return [leaf for child in dict.fromkeys(subs[0].choices.values()) for leaf in leaves(child)]


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from aitrinity import api
    from aitrinity.cli import render
    from aitrinity.cost.diagnosis import Diagnosis

    refs = args.scenarios or api.builtin_scenarios()
    results = [api.diagnose(r, args.overrides) for r in refs]
    for r in results:  # fallbacks of the kernel times: one line each on stderr (and in the output)
        for note in r.estimate.notes if isinstance(r, Diagnosis) else []:
            print(f"trinity: {r.scenario}: {note}", file=sys.stderr)
    if args.json:
        print(dump([r.model_dump(mode="json") for r in results]))
    else:
        print(
            "\n\n".join(render.diagnosis(r) if isinstance(r, Diagnosis) else render.edge_diagnosis(r) for r in results)
        )
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from aitrinity import api
    from aitrinity.cli import render
    from aitrinity.plan.split import EdgePlanReport

    top = getattr(args, "top", 1)
    if top < 1:
        raise SpecError("--top", top, "a positive number")
    if getattr(args, "scenarios", None):
        if args.scenario or getattr(args, "sweep", None):
            raise SpecError("--scenarios", args.scenarios, "no SCENARIO and no --sweep with it")
        return _plan_scenarios(args)
    if not args.scenario:
        raise SpecError("SCENARIO", None, "a scenario file or built-in name (or --scenarios DIR)", missing=True)
    if getattr(args, "sweep", None):
        return _plan_sweep(args)
    start = time.perf_counter()
    rep = api.plan(
        args.scenario,
        args.objective,
        top,
        args.overrides,
        args.start,
        args.slo_ttft,
        args.slo_tpot,
        disaggregated=getattr(args, "disaggregated", False),
    )
    took = time.perf_counter() - start
    if args.timings and not isinstance(rep, EdgePlanReport):  # on stderr: the result itself is deterministic
        n = rep.search.evaluated
        print(f"trinity: {n:,} plans in {format_time(took)} ({n / took:,.0f}/s)", file=sys.stderr)
    if args.json:
        print(dump(rep.model_dump(mode="json")))
    elif isinstance(rep, EdgePlanReport):
        print(render.edge_plan(rep))
    elif args.command == "explain":
        print(render.chain(rep.chain) if rep.chain else "no feasible plan: nothing to explain")
    else:
        print(render.plan(rep))
    return 0


def _plan_sweep(args: argparse.Namespace) -> int:
    """``trinity plan SCENARIO --sweep KEY=V1,V2,...``: the best plan at each value, here or on Ray."""
    from aitrinity import api
    from aitrinity.cli import render

    key, _, values = args.sweep.partition("=")
    if not key or not values:
        raise SpecError("--sweep", args.sweep, "KEY=V1,V2,... e.g. link=25Gbit/s,100Gbit/s")
    vals = [v.strip() for v in values.split(",")]
    if getattr(args, "ray", None) is not None:
        on_ray = _plan_on_ray(args, [(args.scenario, [*args.overrides, f"{key}={v}"]) for v in vals])
        points = list(zip(vals, on_ray, strict=True))
    else:
        progress = Progress(getattr(args, "quiet", False), after_s=1.0)  # (lines for a sweep longer than a second)
        reports = api.sweep(
            args.scenario,
            key,
            vals,
            args.objective,
            args.overrides,
            args.start,
            args.slo_ttft,
            args.slo_tpot,
            progress=lambda d, n: progress.step(d, n, "plans"),
        )
        points = list(zip(vals, reports, strict=True))
    if args.json:
        print(dump([{"value": v, **rep.model_dump(mode="json")} for v, rep in points]))
    else:
        print(render.sweep(key, points))
    return 0


def _plan_scenarios(args: argparse.Namespace) -> int:
    """``trinity plan --scenarios DIR``: the best plan of every scenario file in DIR, here or on Ray."""
    from aitrinity import api
    from aitrinity.cli import render

    folder = Path(args.scenarios)
    if not folder.is_dir():
        raise SpecError("--scenarios", args.scenarios, "a directory of scenario files (*.yaml)")
    files = sorted(str(p) for p in folder.glob("*.yaml") if p.is_file())
    if not files:
        raise SpecError("--scenarios", args.scenarios, "a directory with at least one scenario file (*.yaml)")
    if args.ray is not None:
        reps = _plan_on_ray(args, [(f, list(args.overrides)) for f in files])
    else:
        progress = Progress(getattr(args, "quiet", False))
        reps = []
        for i, f in enumerate(files):
            reps.append(api.plan(f, args.objective, 1, args.overrides, args.start, args.slo_ttft, args.slo_tpot))
            progress.step(i + 1, len(files), "scenarios")
    names = [Path(f).name for f in files]
    if args.json:
        print(dump([{"file": n, **r.model_dump(mode="json")} for n, r in zip(names, reps, strict=True)]))
    else:
        print(render.best_per_scenario(list(zip(names, reps, strict=True))))
    return 0


def _plan_on_ray(args: argparse.Namespace, points: list[tuple[str, list[str]]]) -> list[Any]:
    """Plans of (scenario, overrides) computed on Ray (aitrinity.ray_backend): each a job of plain JSON, each report
    back as JSON, rebuilt here into the same objects the local loop makes."""
    from aitrinity import ray_backend
    from aitrinity.plan.report import PlanReport
    from aitrinity.plan.split import EdgePlanReport

    jobs = [
        {
            "scenario": str(Path(ref).resolve()) if Path(ref).is_file() else ref,
            "objective": args.objective,
            "overrides": overrides,
            "start": args.start,
            "ttft_slo": args.slo_ttft,
            "tpot_slo": args.slo_tpot,
        }
        for ref, overrides in points
    ]
    progress = Progress(getattr(args, "quiet", False))
    out = ray_backend.run_sweep(
        jobs, getattr(args, "ray", None) or None, progress=lambda d, n: progress.step(d, n, "plans"), kind="plan"
    )
    classes: dict[str, type[PlanReport] | type[EdgePlanReport]] = {
        "PlanReport": PlanReport,
        "EdgePlanReport": EdgePlanReport,
    }
    return [classes[r["kind"]].model_validate(r["report"]) for r in out]


def _cmd_calibrate(args: argparse.Namespace) -> int:
    import yaml

    from aitrinity import units
    from aitrinity.systems.calibrate import calibrate

    output_file("-o", args.output)
    tdp = units.parse_power(args.tdp)
    if not tdp > 0:
        raise SpecError("--tdp", args.tdp, "a positive power such as 100 W")
    if args.threads is not None and args.threads < 1:
        raise SpecError("--threads", args.threads, "a positive number of threads")
    profile = calibrate(
        quick=args.quick,
        name=args.name,
        tdp_W=tdp,
        threads=args.threads,
        progress=lambda msg: Progress(args.quiet).say(f"measuring {msg}"),
    )
    data = profile.model_dump(mode="json")
    text = (
        dump(data)
        if args.json
        else (
            "# Device profile written by `trinity calibrate`; SI units (FLOP/s, bytes, B/s, W).\n"
            + yaml.safe_dump(data, sort_keys=False)
        )
    )
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        Progress(args.quiet).say(f"wrote {args.output}")
    else:
        print(text)
    return 0


def _cmd_validate_serving(args: argparse.Namespace) -> int:
    from aitrinity import validate_serving as vs

    output_file("--markdown", args.markdown)
    progress = Progress(args.quiet)
    progress.say(f"pricing the runs of {args.serving}")
    report = vs.validate(args.serving, tables=args.tables, progress=lambda d, t: progress.step(d, t, "groups"))
    for note in report.notes:
        print(f"trinity: {note}", file=sys.stderr)
    table = vs.markdown(report)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as out:
            out.write(table + "\n")
    print(dump(report.model_dump(mode="json")) if args.json else table)
    return 0


def _cmd_validate_training(args: argparse.Namespace) -> int:
    from aitrinity import validate_training as vt

    output_file("--markdown", args.markdown)
    progress = Progress(args.quiet)
    checks = []
    for i, run in enumerate(vt.RUNS):
        progress.step(i, len(vt.RUNS), "runs")
        checks.append(vt.check(run, args.engine))
    table = vt.markdown(checks)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as out:
            out.write(table + "\n")
    print(dump([c.model_dump(mode="json") for c in checks]) if args.json else table)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    if args.serving and args.training:
        raise SpecError("validate", "--serving and --training", "one of them")
    if args.serving:
        return _cmd_validate_serving(args)
    if args.training:
        return _cmd_validate_training(args)
    Progress(args.quiet).say("loading torch (seconds)")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SpecError("validate", "torch", "torch installed (pip install -e '.[torch]')") from None
    from aitrinity.catalog.loader import resolve_system
    from aitrinity.spec.scenario import SystemInput
    from aitrinity.systems import validate as v

    say = Progress(args.quiet).say
    device = args.profile
    tmp = None
    if device is None:
        import tempfile

        import yaml

        from aitrinity.systems.calibrate import calibrate

        say("no --profile: calibrating this machine (quick)")
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump(calibrate(quick=True).model_dump(mode="json"), f)
        device = tmp = f.name
    try:
        system = resolve_system(SystemInput(device=device, num_devices=1, devices_per_node=1))
    finally:
        if tmp:
            os.unlink(tmp)
    report = v.validate(system, quick=args.quick, progress=lambda m: say(f"validating {m}"))
    table = v.markdown(report)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as out:
            out.write(table + "\n")
    print(dump(report.model_dump(mode="json")) if args.json else table)
    return 0 if not report.failed else 1


def _cmd_hardware(args: argparse.Namespace) -> int:
    from aitrinity.cli import render
    from aitrinity.hardware import compare_hardware

    progress = Progress(args.quiet)

    def say(msg: str) -> None:
        progress.say(f"planning {msg}")

    start = time.perf_counter()
    result = compare_hardware(
        args.designs, args.suite, args.objective, args.step, args.constraint, args.refine, progress=say, ray=args.ray
    )
    if args.timings:
        print(f"trinity: {result.replans} re-plans in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    print(dump(result.model_dump(mode="json")) if args.json else render.hardware(result))
    return 0


def _cmd_catalog(args: argparse.Namespace) -> int:
    from aitrinity import catalog

    if args.catalog_command == "list":
        kinds = [args.kind] if args.kind else list(catalog.KINDS)
        listing = {k: catalog.names(k) for k in kinds}
        if args.json:
            print(dump(listing))
        else:
            for k, names in listing.items():
                print(f"{k}: {', '.join(names)}")
        return 0
    from aitrinity.cli import render
    from aitrinity.cli.derived import derived

    kind, spec = catalog.entry(args.name)
    facts = derived(kind, spec)
    if args.json:
        print(dump({"kind": kind, "entry": spec.model_dump(mode="json"), "derived": facts}))
    else:
        print(render.catalog_entry(kind, spec.model_dump(mode="json"), {k: v[1] for k, v in facts.items()}))
    return 0


_MODULES = {
    "simulate": "simulate",
    "report": "report",
    "ui": "ui",
    "split-demo": "split",
    "train-demo": "train",
    "replay": "kv",
    "kv": "kv",
    "watch": "watch",
}
"""Commands whose code lives in a module of its own under ``aitrinity.cli``, imported only when the command runs
(start-up: ``trinity diagnose`` loads none of them)."""


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "diagnose":
        return _cmd_diagnose(args)
    if args.command in ("plan", "explain"):
        return _cmd_plan(args)
    if args.command == "completion":
        from aitrinity.cli import completion

        return completion.run(args, _parser())
    module = _MODULES.get(args.command)
    if module is not None:
        return int(importlib.import_module(f"aitrinity.cli.{module}").run(args))
    handlers = {"calibrate": _cmd_calibrate, "validate": _cmd_validate, "hardware": _cmd_hardware}
    return handlers.get(args.command, _cmd_catalog)(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _dispatch(args)
    except TrinityError as e:
        print(f"trinity: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader left (trinity plan X --json | head -1): a quiet exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not raise again
        return 0
    except KeyboardInterrupt:
        print("trinity: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: one line, the traceback only with --debug
        if args.debug:
            raise
        first = str(e).splitlines()[0][:200] if str(e) else ""
        print(
            f"trinity: internal error: {type(e).__name__}: {first} (trinity --debug ... shows the traceback)",
            file=sys.stderr,
        )
        return 1


def run() -> NoReturn:
    """The ``trinity`` console script: :func:`main`, then :func:`leave`."""
    leave(main())


def leave(rc: int) -> NoReturn:
    """Exit with ``rc`` without tearing the interpreter down: flush the standard streams, run the exit handlers
    (``atexit``: logging's flush, ``weakref.finalize``'s clean-ups such as temporary directories, Ray's shutdown),
    then ``os._exit``. Clearing the modules and freeing every object one by one took 55-120 ms after a `trinity
    diagnose` on the project's 2-core VM (31-41 ms after importing numpy, pydantic and yaml alone) and serves a
    process that is ending. A plain ``sys.exit`` while another thread runs (it is joined first)."""
    import threading

    if threading.active_count() > 1:
        sys.exit(rc)
    import atexit
    import contextlib

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError):  # the reader left, or the stream is closed
            stream.flush()
    os._exit(rc)


if __name__ == "__main__":  # pragma: no cover
    run()
