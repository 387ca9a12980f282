"""``trinity split-demo``: split inference for real -- device and server processes over a (shaped) link."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from aitrinity.cli.jsonout import dump
from aitrinity.cli.progress import Progress
from aitrinity.errors import SpecError

HELP = """examples:
  trinity split-demo                                 adaptive split on the built-in swinging uplink trace
  trinity split-demo --policy local,0:raw,4:int8,adaptive --frames 300
  trinity split-demo --rate 2 --policy all --fps 0   every allowed split x codec at 2 Mbit/s, back to back
  trinity split-demo --link 8mbit --policy all       the same inside a namespace shaped with tc tbf (root)
  trinity split-demo --policy 3:int8 --kill-server-at 50   the device finishes every frame itself

Policies: adaptive (the Controller), local, SPLIT:CODEC (0:raw ships the frame; 1..5 with fp32, fp16, int8,
int4), all (every choice the accuracy budget allows). The device is emulated --slowdown times slower than this
CPU; the server runs at this CPU's speed; one torch thread each.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "split-demo",
        help="split inference of a digits CNN between a device and a server process over a (shaped) link",
        description="Train a small CNN on scikit-learn's digits (64x64 frames), start a server process, and "
        "stream test frames from the device through a split point and codec -- fixed, or chosen by the "
        "adaptive Controller as the link changes -- with fallback to local inference when the server fails.",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--policy", default="adaptive", help="comma-separated policies (default adaptive)")
    p.add_argument("--frames", type=int, default=300, help="frames per policy (default 300)")
    p.add_argument("--fps", type=float, default=20.0, help="frame rate; 0: back to back (default 20)")
    p.add_argument("--rate", type=float, metavar="MBIT_S", help="pace the uplink at this rate")
    p.add_argument(
        "--trace",
        help="bandwidth trace (time_s, Mbit/s) the pacing follows "
        "(default: the built-in uplink-fast-slow.csv when neither --rate nor --link is given)",
    )
    p.add_argument("--trace-speedup", type=float, default=1.0, help="play the trace this much faster (default 1)")
    p.add_argument("--link", help="run inside a namespace shaped with tc tbf: 1mbit, 8mbit, ... (root only)")
    p.add_argument("--slowdown", type=float, default=20.0, help="device slower than this CPU by (default 20)")
    p.add_argument("--max-accuracy-drop", type=float, default=0.01, help="accuracy budget (default 0.01)")
    p.add_argument("--kill-server-at", type=int, metavar="FRAME", help="kill the server after this frame")
    p.add_argument("--weights", help="a trained digits CNN (safetensors) instead of training now")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true")


def _config(args: argparse.Namespace) -> dict[str, Any]:
    from aitrinity.systems.split.demo import DemoConfig

    if args.frames < 1:
        raise SpecError("--frames", args.frames, "at least 1")
    if args.fps < 0 or args.slowdown < 1:
        raise SpecError("--fps/--slowdown", (args.fps, args.slowdown), "fps >= 0 and slowdown >= 1")
    if args.rate is not None and args.rate <= 0:
        raise SpecError("--rate", args.rate, "a positive rate in Mbit/s")
    if args.rate and args.trace:
        raise SpecError("--rate", args.rate, "either --rate or --trace, not both")
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for pol in policies:
        k, sep, codec = pol.partition(":")
        if pol in ("adaptive", "local", "all"):
            continue
        if not (sep and k.isdigit() and codec in ("raw", "fp32", "fp16", "int8", "int4")):
            raise SpecError("--policy", pol, "adaptive, local, all or SPLIT:CODEC such as 3:int8 or 0:raw")
    trace = args.trace
    if trace is None and args.rate is None and args.link is None:
        from aitrinity.catalog.traces import TRACES

        trace = str(TRACES / "uplink-fast-slow.csv")
    if trace is not None:
        from aitrinity.catalog.traces import load_link_trace

        load_link_trace(trace)  # a bad file is a one-line error here, not in the child
    cfg = DemoConfig(
        policies=policies,
        frames=args.frames,
        fps=args.fps or None,
        rate_Mbps=args.rate,
        trace=trace,
        trace_speedup=args.trace_speedup,
        slowdown=args.slowdown,
        max_accuracy_drop=args.max_accuracy_drop,
        kill_server_at=args.kill_server_at,
        weights=args.weights,
        epochs=args.epochs,
        calibrate_link="all" in policies,
    )
    return asdict(cfg)


def run(args: argparse.Namespace) -> int:
    Progress(args.quiet).say("loading torch and the digits data (seconds)")
    try:
        import sklearn  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        raise SpecError("split-demo", e.name, "torch and scikit-learn installed (pip install -e '.[dev]')") from None
    cfg = _config(args)

    say = Progress(args.quiet).say

    if args.link:
        from aitrinity.systems import netns

        why = netns.unavailable()
        if why:
            raise SpecError("--link", args.link, f"a shaped namespace, which {why}")
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(cfg, f)
        try:
            with netns.shaped_namespace(args.link, burst="1600b", latency="500ms", mtu=1500) as ns:
                say(f"running in namespace {ns.name}, loopback shaped to {args.link}")
                out = subprocess.run(
                    ns.wrap([sys.executable, "-m", "aitrinity.systems.split.demo", f.name]),
                    stdout=subprocess.PIPE,
                    stderr=None if not args.quiet else subprocess.DEVNULL,
                    text=True,
                )
        finally:
            Path(f.name).unlink()
        if out.returncode:
            print("trinity: error: the split demo failed in the namespace", file=sys.stderr)
            return 1
        result = json.loads(out.stdout)
    else:
        from aitrinity.systems.split.demo import DemoConfig, run_demo

        result = run_demo(DemoConfig(**cfg), say)
    if args.json:
        print(dump(result))
    else:
        print(render(result))
    return 0


def render(r: dict[str, Any]) -> str:
    c = r["config"]
    where = (
        f"pacing at {c['rate_Mbps']:g} Mbit/s"
        if c["rate_Mbps"]
        else f"pacing along {c['trace']}"
        if c["trace"]
        else "the link as it is"
    )
    lines = [f"split demo: digits-cnn, {c['frames']} frames per policy, {where}; {r['emulation']}"]
    if "probes" in r["link"]:
        lk = r["link"]
        lines.append(
            f"  link fit: {lk['bandwidth_Bps'] * 8 / 1e6:.3g} Mbit/s, round trip {lk['latency_s'] * 2e3:.2f} ms, "
            f"burst {lk['burst_bytes']:.0f} B"
        )
    lines.append(f"  {'policy':10s}{'mean':>10s}{'p95':>10s}{'predicted':>11s}{'accuracy':>10s}{'fell back':>11s}")
    for x in sorted(r["runs"], key=lambda x: x["mean_latency_s"]):
        pred = x.get("predicted_latency_s")
        lines.append(
            f"  {x['policy']:10s}{x['mean_latency_s'] * 1e3:8.2f}ms{x['p95_latency_s'] * 1e3:8.2f}ms"
            f"{(f'{pred * 1e3:9.2f}ms' if pred else '          -')}{x['accuracy']:10.1%}{x['fell_back']:11d}"
        )
        if x["decisions"]:
            lines.append("    " + "; ".join(x["decisions"][:12]) + (" ..." if len(x["decisions"]) > 12 else ""))
        if x["link_errors"]:
            lines.append(f"    link: {x['link_errors'][0]}")
    return "\n".join(lines)
