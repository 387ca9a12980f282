"""Wall time of `trinity diagnose` on the built-in examples, interpreter start included.

Side by side in the same run with the references it cannot beat: a bare
`python -c pass` and `python -c "import pydantic, yaml"` (the light
dependencies the core needs). Goal (issue 2): under 1 s.

    python benchmarks/bench_startup.py [--runs 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

GOAL_S = 1.0


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Bytecode caches written and read, as a user's install has them (a shell that forbids writing them would time
compiling every changed module on every start)."""


def measure(cmd: list[str], runs: int) -> dict[str, float]:
    """The command ``runs`` times after one untimed run (which writes the bytecode caches)."""
    subprocess.run(cmd, env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return {"min_s": min(times), "median_s": statistics.median(times), "max_s": max(times)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    trinity = shutil.which("trinity")
    cases = {
        "python -c pass (reference)": [sys.executable, "-c", "pass"],
        "import pydantic, yaml (reference)": [sys.executable, "-c", "import pydantic, yaml"],
        "trinity diagnose (the built-in examples)": [trinity, "diagnose"]
        if trinity
        else [sys.executable, "-m", "aitrinity.cli.main", "diagnose"],
        "trinity diagnose --json": ([trinity] if trinity else [sys.executable, "-m", "aitrinity.cli.main"])
        + ["diagnose", "--json"],
    }
    results = {name: measure(cmd, args.runs) for name, cmd in cases.items()}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{'command':42s} {'min':>8s} {'median':>8s} {'max':>8s}   ({args.runs} runs)")
        for name, r in results.items():
            print(f"{name:42s} {r['min_s']:8.3f} {r['median_s']:8.3f} {r['max_s']:8.3f}")
        worst = max(v["median_s"] for k, v in results.items() if k.startswith("trinity"))
        print(f"goal: median under {GOAL_S:.1f} s -> {'met' if worst < GOAL_S else 'MISSED'} ({worst:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
