"""Wall time of `trinity diagnose` on the built-in examples, interpreter start included.

Side by side in the same run, the runs of every command interleaved (one of each, then again), with the
references it cannot beat: a bare `python -c pass`; the import floor, `import numpy, pydantic, yaml` (the light
dependencies the core needs); and that floor plus pydantic's first model class, which makes pydantic scan every
installed distribution's entry points for plugins (about 50 ms on a machine with 240 distributions; any
pydantic user pays it). With ``--before DIR`` (a source tree of an earlier revision, e.g. ``git worktree add
/tmp/before REV``) its `diagnose` runs in the same rounds. Goals (issues 2 and 20): under 1 s; the project's
own share -- wall time minus the floor, over wall time -- at most 30%.

    python benchmarks/bench_startup.py [--runs 15] [--before DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_S = 1.0
GOAL_SHARE = 0.30
ROOT = Path(__file__).resolve().parents[1]

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Bytecode caches written and read, as a user's install has them (a shell that forbids writing them would time
compiling every changed module on every start)."""

FLOOR = "import numpy, pydantic, yaml"
FIRST_MODEL = FLOOR + "\nclass M(pydantic.BaseModel):\n    x: int\nM(x=1)"


Case = tuple[list[str], Path]
"""A command and the folder it runs in: ``python -m`` puts that folder first on the path, so a source tree runs its
own code whatever is installed."""


def _cases(before: str | None) -> dict[str, Case]:
    py, diagnose = sys.executable, [sys.executable, "-m", "aitrinity.cli.main", "diagnose"]
    cases = {
        "python -c pass (reference)": ([py, "-c", "pass"], ROOT),
        "import numpy, pydantic, yaml (floor)": ([py, "-c", FLOOR], ROOT),
        "floor + pydantic's first model (floor)": ([py, "-c", FIRST_MODEL], ROOT),
        "trinity diagnose (the built-in examples)": (diagnose, ROOT),
        "trinity diagnose --json": ([*diagnose, "--json"], ROOT),
    }
    if before:
        cases["trinity diagnose, --before tree"] = (diagnose, Path(before).resolve())
    return cases


def _run(case: Case) -> None:
    cmd, cwd = case
    subprocess.run(cmd, env=ENV, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(cases: dict[str, Case], runs: int) -> dict[str, dict[str, float]]:
    """Each command ``runs`` times, interleaved, after one untimed run each (which writes the bytecode caches)."""
    for case in cases.values():
        _run(case)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, case in cases.items():
            t0 = time.perf_counter()
            _run(case)
            times[name].append(time.perf_counter() - t0)
    return {n: {"min_s": min(t), "median_s": statistics.median(t), "max_s": max(t)} for n, t in times.items()}


def shares(results: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per `diagnose` row: the project's own share of its median wall time over each floor."""
    out = {}
    for name, r in results.items():
        if name.startswith("trinity"):
            out[name] = {
                floor: (r["median_s"] - f["median_s"]) / r["median_s"]
                for floor, f in results.items()
                if floor.endswith("(floor)")
            }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--before", metavar="DIR", help="a source tree of an earlier revision, run in the same rounds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = measure(_cases(args.before), args.runs)
    share = shares(results)
    worst = max(v["median_s"] for k, v in results.items() if k.startswith("trinity diagnose") and "before" not in k)
    if args.json:
        print(json.dumps({"results": results, "project_share": share, "worst_median_s": worst}, indent=2))
        return 0
    print(f"{'command':42s} {'min':>8s} {'median':>8s} {'max':>8s}   project share over the two floors")
    for name, r in results.items():
        sh = "   ".join(f"{v:5.1%}" for v in share.get(name, {}).values())
        print(f"{name:42s} {r['min_s']:8.3f} {r['median_s']:8.3f} {r['max_s']:8.3f}   {sh}")
    print(f"({args.runs} interleaved runs)")
    print(f"goal: median under {GOAL_S:.1f} s -> {'met' if worst < GOAL_S else 'MISSED'} ({worst:.3f} s)")
    own = max(v for k, d in share.items() if "before" not in k for v in d.values())
    print(f"goal: project share at most {GOAL_SHARE:.0%} -> {'met' if own <= GOAL_SHARE else 'MISSED'} ({own:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
