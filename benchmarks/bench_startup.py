"""Wall time of `trinity diagnose` on the built-in examples, interpreter start included.

Side by side in the same run, the runs of every command interleaved (one of each, then again), with the
references it cannot beat: a bare `python -c pass`; the import floor, `import numpy, pydantic, yaml` (the light
dependencies the core needs); and that floor plus pydantic's first model class, which makes pydantic scan every
installed distribution's entry points for plugins (about 50 ms on a machine with 240 distributions; any
pydantic user pays it). With ``--before DIR`` (a source tree of an earlier revision, e.g. ``git worktree add
/tmp/before REV``) its `diagnose` runs in the same rounds. Goals (issues 2 and 20): under 1 s; the project's
own share -- wall time minus the floor, over wall time -- at most 30%.

    python benchmarks/bench_startup.py [--runs 15] [--before DIR] [--phases] [--json]
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


PHASES = """
import time
t0 = time.perf_counter()
import numpy, pydantic, yaml
class M(pydantic.BaseModel):
    x: int
M(x=1)
t1 = time.perf_counter()
from aitrinity import api
t2 = time.perf_counter()
from aitrinity.cli.main import _parser
_parser().parse_args(["diagnose"])
t3 = time.perf_counter()
results = [api.diagnose(r, []) for r in api.builtin_scenarios()]
t4 = time.perf_counter()
from aitrinity.cli import render
from aitrinity.cost.diagnosis import Diagnosis
text = [render.diagnosis(r) if isinstance(r, Diagnosis) else render.edge_diagnosis(r) for r in results]
t5 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
"""
PHASE_NAMES = ("floor + first model", "import aitrinity.api", "argument parser", "the four diagnoses", "rendering")


def phases(runs: int) -> dict[str, float]:
    """Where `diagnose`'s time goes, one process per run, medians: the floor, importing the API, the parser, the
    diagnoses (pydantic building its validators on first use is in them) and the rendering."""
    per: list[list[float]] = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", PHASES], env=ENV, cwd=ROOT, check=True, capture_output=True)
        per.append([float(x) for x in out.stdout.split()])
    return {name: statistics.median(col) for name, col in zip(PHASE_NAMES, zip(*per, strict=True), strict=True)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--before", metavar="DIR", help="a source tree of an earlier revision, run in the same rounds")
    ap.add_argument("--phases", action="store_true", help="also time diagnose's phases in one process each run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = measure(_cases(args.before), args.runs)
    parts = phases(args.runs) if args.phases else {}
    share = shares(results)
    worst = max(v["median_s"] for k, v in results.items() if k.startswith("trinity diagnose") and "before" not in k)
    if args.json:
        report = {"results": results, "project_share": share, "worst_median_s": worst, "phases_s": parts}
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'command':42s} {'min':>8s} {'median':>8s} {'max':>8s}   project share over the two floors")
    for name, r in results.items():
        sh = "   ".join(f"{v:5.1%}" for v in share.get(name, {}).values())
        print(f"{name:42s} {r['min_s']:8.3f} {r['median_s']:8.3f} {r['max_s']:8.3f}   {sh}")
    print(f"({args.runs} interleaved runs)")
    print(f"goal: median under {GOAL_S:.1f} s -> {'met' if worst < GOAL_S else 'MISSED'} ({worst:.3f} s)")
    for name, t in parts.items():
        print(f"  phase: {name:32s} {t * 1e3:7.1f} ms (median)")
    own = max(v for k, d in share.items() if "before" not in k for v in d.values())
    print(f"goal: project share at most {GOAL_SHARE:.0%} -> {'met' if own <= GOAL_SHARE else 'MISSED'} ({own:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
