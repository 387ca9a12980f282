"""Split inference for real (issue 6): accuracy per split x codec, latency per split under shaped links next to
the calibrated prediction, and adaptive vs static splitting on a swinging uplink.

The digits CNN (``digits-cnn``: 64x64 grey frames from scikit-learn's digits)
is trained once here; device and server are two processes over TCP, one torch
thread each; the device is emulated 20x slower than this CPU (it waits 19x the
time its nodes took), the server runs at this CPU's speed.

Part 1, accuracy: test accuracy (450 frames) for every split x codec, the
tensor at the split sent through the real codec.

Part 2, latency: inside a private network namespace whose loopback is shaped
with ``tc tbf`` (MTU 1500, burst one packet) at 1, 8 and 64 Mbit/s (root
only; without root the device's token-bucket pacer stands in), the link is
calibrated with probes (round trip, bandwidth, burst), then every allowed split
x codec streams 40 frames in 4 interleaved rounds of 10 (so a slow spell of the
machine hits every choice alike), each 20 ms after the previous result (the link idles
between frames, as at a frame rate, without queueing): measured mean latency next to the cost
model's prediction (``cost.edge.split_options`` on the calibrated node times
and link), and whether the predicted-best choice is the measured-fastest or
within 10% of it.

Part 3, adaptive: frames at 20 frames/s for 15 s while the device's pacer
follows ``data/traces/uplink-fast-slow.csv`` (20 Mbit/s with spells of 0.5-2
Mbit/s): mean and p95 frame latency of the adaptive Controller next to every
static choice.

    python benchmarks/bench_split.py [--part accuracy|latency|adaptive|all] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

try:  # a clear message instead of a ModuleNotFoundError (after minutes of work)
    import torch  # noqa: F401
except ImportError:
    sys.exit("bench_split.py runs real torch workloads: pip install -e '.[dev]' (or '.[torch]') first")


ROOT = Path(__file__).resolve().parents[1]
RATES = ["1mbit", "8mbit", "64mbit"]


def demo(cfg: dict[str, Any], rate: str | None = None) -> dict[str, Any]:
    """One demo configuration in a child process (inside a shaped namespace when ``rate`` is given)."""
    from aitrinity.systems import netns

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    argv = [sys.executable, "-m", "aitrinity.systems.split.demo", f.name]
    try:
        if rate is None:
            out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        else:
            with netns.shaped_namespace(rate, burst="1600b", latency="500ms", mtu=1500) as ns:
                out = subprocess.run(ns.wrap(argv), capture_output=True, text=True, cwd=ROOT)
    finally:
        Path(f.name).unlink()
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def part_accuracy(weights: str) -> dict[str, Any]:
    from aitrinity.systems.split import digits

    _, nodes = digits.load(weights)
    _, _, x, y = digits.frames()
    acc = digits.accuracy_table(nodes, x, y)
    n = len(nodes)
    base = acc[f"{n}:local"]
    print(f"\n== accuracy on 450 test frames (all local: {base:.2%})")
    names = ["input", "conv1", "conv2", "conv3", "conv4", "pool"]
    print(f"  {'split after':12s}" + "".join(f"{c:>8s}" for c in ("fp32", "fp16", "int8", "int4")))
    print(f"  {'input (raw)':12s}{acc['0:raw']:8.2%}")
    for k in range(1, n):
        print(f"  {names[k]:12s}" + "".join(f"{acc[f'{k}:{c}']:8.2%}" for c in ("fp32", "fp16", "int8", "int4")))
    return acc


def part_latency(weights: str) -> list[dict[str, Any]]:
    from aitrinity.systems import netns

    why = netns.unavailable()
    out = []
    for rate in RATES:
        mbit = float(rate.removesuffix("mbit"))
        cfg = {
            "policies": ["all"],
            "frames": 40,
            "rounds": 4,
            "fps": None,
            "gap_s": 0.02,
            "calibrate_link": True,
            "weights": weights,
        }
        if why:
            cfg["rate_Mbps"] = mbit
        r = demo(cfg, None if why else rate)
        link = r["link"]
        runs = sorted(r["runs"], key=lambda x: x["predicted_latency_s"])
        chosen = runs[0]
        fastest = min(runs, key=lambda x: x["mean_latency_s"])
        ok = chosen["mean_latency_s"] <= 1.1 * fastest["mean_latency_s"]
        where = f"tc tbf {rate} in a namespace" if not why else f"the device's pacer at {rate} ({why})"
        print(
            f"\n== {where}: link fit {link['bandwidth_Bps'] * 8 / 1e6:.3g} Mbit/s, "
            f"round trip {link['latency_s'] * 2e3:.2f} ms, burst {link['burst_bytes']:.0f} B"
        )
        print(f"  {'choice':10s}{'predicted':>11s}{'measured':>10s}{'error':>8s}")
        for x in sorted(r["runs"], key=lambda x: x["mean_latency_s"]):
            err = x["mean_latency_s"] / x["predicted_latency_s"] - 1
            mark = "  <- chosen" if x is chosen else ""
            print(
                f"  {x['policy']:10s}{x['predicted_latency_s'] * 1e3:9.2f}ms{x['mean_latency_s'] * 1e3:8.2f}ms"
                f"{err:+8.0%}{mark}"
            )
        print(
            f"  chosen {chosen['policy']} measured {chosen['mean_latency_s'] * 1e3:.2f} ms; fastest "
            f"{fastest['policy']} {fastest['mean_latency_s'] * 1e3:.2f} ms: {'within 10%' if ok else 'NOT within 10%'}"
        )
        out.append(
            {
                "rate": rate,
                "shaping": "tbf" if not why else "pacer",
                "link": link,
                "runs": [{k: v for k, v in x.items() if k != "latency_s"} for x in r["runs"]],
                "chosen": chosen["policy"],
                "fastest": fastest["policy"],
                "within_10pct": ok,
            }
        )
    return out


def part_adaptive(weights: str) -> dict[str, Any]:
    static = ["local", "0:raw", "3:int8", "4:int8", "4:int4", "5:int8"]
    cfg = {
        "policies": [*static, "adaptive"],
        "frames": 300,
        "fps": 20,
        "trace": str(ROOT / "data" / "traces" / "uplink-fast-slow.csv"),
        "trace_speedup": 1,
        "weights": weights,
    }
    r = demo(cfg)
    print("\n== adaptive vs static on data/traces/uplink-fast-slow.csv (300 frames at 20 frames/s)")
    print(f"  {'policy':10s}{'mean':>10s}{'p95':>10s}{'fell back':>11s}  choices")
    for x in sorted(r["runs"], key=lambda x: x["mean_latency_s"]):
        ch = ", ".join(f"{k} x{v}" for k, v in sorted(x["choices"].items(), key=lambda kv: -kv[1]))
        print(
            f"  {x['policy']:10s}{x['mean_latency_s'] * 1e3:8.2f}ms{x['p95_latency_s'] * 1e3:8.2f}ms"
            f"{x['fell_back']:11d}  {ch}"
        )
    ad = next(x for x in r["runs"] if x["policy"] == "adaptive")
    st = [x for x in r["runs"] if x["policy"] != "adaptive"]
    best_mean = min(st, key=lambda x: x["mean_latency_s"])
    best_p95 = min(st, key=lambda x: x["p95_latency_s"])
    print(
        f"  adaptive vs the best static: mean {ad['mean_latency_s'] * 1e3:.2f} ms vs {best_mean['policy']} "
        f"{best_mean['mean_latency_s'] * 1e3:.2f} ms; p95 {ad['p95_latency_s'] * 1e3:.2f} ms vs "
        f"{best_p95['policy']} {best_p95['p95_latency_s'] * 1e3:.2f} ms"
    )
    print("  switches: " + "; ".join(ad["decisions"]))
    return {"runs": [{k: v for k, v in x.items() if k != "latency_s"} for x in r["runs"]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="all", choices=["accuracy", "latency", "adaptive", "all"])
    ap.add_argument("--json", action="store_true", help="also print every number as JSON at the end")
    args = ap.parse_args()
    import torch

    from aitrinity.systems.split import digits
    from aitrinity.systems.split.demo import DemoConfig

    torch.set_num_threads(1)
    cfg = DemoConfig()
    print(f"training the digits CNN ({cfg.epochs} epochs, seed {cfg.seed}) ...", flush=True)
    _, nodes = digits.train(cfg.epochs, cfg.seed)
    out: dict[str, Any] = {"defaults": asdict(cfg)}
    with tempfile.TemporaryDirectory() as tmp:
        weights = str(Path(tmp) / "digits.safetensors")
        digits.save(nodes, weights)
        if args.part in ("accuracy", "all"):
            out["accuracy"] = part_accuracy(weights)
        if args.part in ("latency", "all"):
            out["latency"] = part_latency(weights)
        if args.part in ("adaptive", "all"):
            out["adaptive"] = part_adaptive(weights)
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
