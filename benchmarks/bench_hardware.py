"""Wall time of the built-in hardware comparison on one core (goal, issue 10: under 10 s).

Runs ``compare_hardware(["h100-sxm", "h200", "b200", "mi300x"], "representative")``
in a child process pinned to one CPU with one BLAS thread, and, side by side in
the same run, the reference it replaces: the same number of re-plans through the
public ``trinity plan`` path (``api.plan``, which also builds the Pareto
frontier and the chain), timed on a sample and scaled.

    python benchmarks/bench_hardware.py [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

GOAL_S = 10.0
DESIGNS = ["h100-sxm", "h200", "b200", "mi300x"]

CHILD = r"""
import json, os, sys, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from aitrinity import api, catalog
from aitrinity.hardware import compare_hardware
t0 = time.perf_counter()
c = compare_hardware(DESIGNS, "representative")
whatif = time.perf_counter() - t0
suite = catalog.suite("representative")
t0 = time.perf_counter()
for w in suite.workloads:
    api.plan(w.scenario, overrides=w.set)
per_plan = (time.perf_counter() - t0) / len(suite.workloads)
print(json.dumps({"whatif_s": whatif, "replans": c.replans, "reference_per_plan_s": per_plan}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    runs = []
    for _ in range(args.runs):
        out = subprocess.run(
            [sys.executable, "-c", f"DESIGNS = {DESIGNS!r}\n" + CHILD],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    whatif = [r["whatif_s"] for r in runs]
    replans = runs[0]["replans"]
    reference = [r["reference_per_plan_s"] * replans for r in runs]
    result = {
        "designs": DESIGNS,
        "suite": "representative",
        "replans": replans,
        "whatif_s": {"min": min(whatif), "median": statistics.median(whatif), "max": max(whatif)},
        "reference_s": {"min": min(reference), "median": statistics.median(reference), "max": max(reference)},
        "goal_s": GOAL_S,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"built-in comparison ({' '.join(DESIGNS)} x representative suite), one core, {args.runs} runs")
    print(f"  re-plans:                                 {replans}")
    print(
        f"  trinity hardware compare                  {result['whatif_s']['median']:.2f} s (median; "
        f"min {min(whatif):.2f}, max {max(whatif):.2f}); goal < {GOAL_S:g} s"
    )
    print(f"  same re-plans via trinity plan (reference) {result['reference_s']['median']:.2f} s (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
