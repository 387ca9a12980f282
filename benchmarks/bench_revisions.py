"""Start-up and planner rate of an earlier revision next to the working tree, alternating, in one run.

For a change's "no regression" check: a git worktree of ``REV`` is made in a temporary folder, then
``trinity diagnose`` (the built-in examples, interpreter start included) is timed ``--runs`` times in each
tree, alternating, and ``benchmarks/bench_planner.py --repeats 3`` (ours only, one thread) is run twice
in each. Medians for start-up; each tree's best planner rate per case.

    python benchmarks/bench_revisions.py REV [--runs 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Bytecode caches written and read, as a user's install has them (a shell that forbids writing them would time
compiling every module of a fresh tree on every start)."""


def _time(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _planner(tree: Path) -> dict[str, float]:
    env = dict(ENV, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "benchmarks/bench_planner.py", "--repeats", "3", "--json"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {case: r["configs_per_s"] for case, r in json.loads(out)["aitrinity"].items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev", help="the earlier revision (a commit, tag or branch)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(before), args.rev], cwd=ROOT, check=True)
        try:
            trees = {"before": before, "after": ROOT}
            start: dict[str, list[float]] = {k: [] for k in trees}
            plan: dict[str, dict[str, float]] = {k: {} for k in trees}
            for tree in trees.values():  # writes each tree's bytecode caches; not timed
                _time([sys.executable, "-m", "aitrinity.cli.main", "diagnose"], tree)
            for _ in range(args.runs):
                for k, tree in trees.items():
                    start[k].append(_time([sys.executable, "-m", "aitrinity.cli.main", "diagnose"], tree))
            for _ in range(2):
                for k, tree in trees.items():
                    for case, rate in _planner(tree).items():
                        plan[k][case] = max(rate, plan[k].get(case, 0.0))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)
    result = {
        "rev": args.rev,
        "diagnose_median_s": {k: statistics.median(v) for k, v in start.items()},
        "planner_configs_per_s": plan,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    d = result["diagnose_median_s"]
    print(f"trinity diagnose, median of {args.runs}: before {d['before']:.3f} s, after {d['after']:.3f} s")
    for case in plan["after"]:
        b, a = plan["before"].get(case), plan["after"][case]
        ratio = f"{a / b:.2f}x" if b else "-"
        print(f"planner {case:45s} before {b or 0:12,.0f}/s  after {a:12,.0f}/s  ({ratio})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
