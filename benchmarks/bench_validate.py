"""How repeatable is the timing validation? Calibrate, then validate, several rounds in one run.

Each round runs ``trinity calibrate`` (full) and ``trinity validate`` on the
profile it just wrote, as a user would, and prints the timing median and worst
|error| of the round. The spread across rounds is this machine's run-to-run
noise (a shared VM's GEMM rate swings by tens of percent within minutes).
Goal (issue 9): median |error| within 25%.

    python benchmarks/bench_validate.py [--rounds 3] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from aitrinity.catalog.loader import resolve_system
from aitrinity.spec.scenario import SystemInput
from aitrinity.systems.calibrate import calibrate
from aitrinity.systems.validate import validate

try:  # a clear message instead of a ModuleNotFoundError (after minutes of work)
    import torch  # noqa: F401
except ImportError:
    sys.exit("bench_validate.py runs real torch workloads: pip install -e '.[dev]' (or '.[torch]') first")


GOAL = 0.25


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="quick calibration and the two-model sweep")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.rounds):
            print(f"round {i + 1}/{args.rounds}: calibrating", file=sys.stderr)
            device = calibrate(quick=args.quick)
            path = Path(d) / f"profile{i}.yaml"
            path.write_text(yaml.safe_dump(device.model_dump(mode="json")), encoding="utf-8")
            system = resolve_system(SystemInput(device=str(path), num_devices=1, devices_per_node=1))
            print(f"round {i + 1}/{args.rounds}: validating", file=sys.stderr)
            report = validate(system, quick=args.quick)
            by_quantity = {
                q: statistics.median(abs(r.relative_error) for r in report.rows if r.quantity == q)
                for q in ("prefill time", "train-step time", "decode-step time")
            }
            rounds.append(
                {
                    "fp32_peak_flops": device.peak_flops["fp32"],
                    "memory_efficiency": device.efficiency.memory,
                    "median_abs_error": report.timing_median_abs_error,
                    "worst_abs_error": report.timing_worst_abs_error,
                    "worst": report.timing_worst,
                    "median_abs_error_by_quantity": by_quantity,
                }
            )
    medians = [r["median_abs_error"] for r in rounds]
    if args.json:
        print(json.dumps({"goal": GOAL, "rounds": rounds}, indent=2))
        return 0
    head = ("round", "fp32 peak", "mem eff", "median", "prefill", "train", "decode")
    print("  ".join(f"{h:>{w}}" for h, w in zip(head, (5, 10, 7, 7, 7, 7, 7), strict=True)) + "  worst")
    for i, r in enumerate(rounds, 1):
        q = r["median_abs_error_by_quantity"]
        print(
            f"{i:>5}  {r['fp32_peak_flops']:10.3g}  {r['memory_efficiency']:7.2f}  {r['median_abs_error']:7.1%}  "
            f"{q['prefill time']:7.1%}  {q['train-step time']:7.1%}  {q['decode-step time']:7.1%}  "
            f"{r['worst_abs_error']:.1%} ({r['worst']})"
        )
    print(f"median |error| across rounds: {min(medians):.1%} .. {max(medians):.1%} (goal {GOAL:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
