"""`trinity plan --sweep`: the seconds per value of ``api.sweep`` against planning each value on its own (issue 20).

For each built-in scenario (training, serving) and a sweep of a hardware quantity (eight inter-node bandwidths;
four HBM capacities), three ways of getting the same reports, timed in alternating rounds on one core (numpy pinned
to one thread), each the best of ``--repeats`` runs a round:

- ``sweep``: ``api.sweep(scenario, key, values)``, what the CLI runs now: a training scenario's hardware sweep
  resolves once and its searches share each layout's ledger columns (``plan.search.Reuse``);
- ``value by value``: ``api.plan(scenario, objective, 1, [f"{key}={v}"])`` for each value, in this tree (what the
  CLI ran before, on today's pricing);
- ``--before DIR`` (a source tree of an earlier revision, e.g. ``git worktree add /tmp/before REV``): the same
  value-by-value loop on that tree's package, in a child process.

The reports of ``sweep`` and ``value by value`` are compared field by field in the same run (they must be equal).

    python benchmarks/bench_sweep.py [--repeats 3] [--rounds 3] [--before DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from aitrinity import api  # noqa: E402

LINKS = ["25Gbit/s", "50Gbit/s", "100Gbit/s", "200Gbit/s", "400Gbit/s", "800Gbit/s", "1.6Tbit/s", "3.2Tbit/s"]
SWEEPS = [
    ("llama-70b-training-h100", "link", LINKS),
    ("llama-70b-training-h100", "hbm_capacity", ["40GiB", "80GiB", "96GiB", "141GiB"]),
    ("trillion-param-training", "link", LINKS),
    ("trillion-param-training", "hbm_capacity", ["96GiB", "141GiB", "x3", "x4"]),
    ("llama-70b-serving-long-context", "link", LINKS),
]


def _label(scenario: str, key: str, values: list[str]) -> str:
    return f"{scenario}, {key} x {len(values)}"


def _best(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm caches and imports
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return min(runs)


def one_by_one(repeats: int) -> dict[str, float]:
    """Seconds per value of planning each value on its own (the only way an earlier tree has)."""
    out = {}
    for scenario, key, values in SWEEPS:

        def run(scenario: str = scenario, key: str = key, values: list[str] = values) -> list[Any]:
            return [api.plan(scenario, None, 1, [f"{key}={v}"]) for v in values]

        out[_label(scenario, key, values)] = _best(run, repeats) / len(values)
    return out


def swept(repeats: int) -> dict[str, float]:
    """Seconds per value of ``api.sweep``, after checking its reports against the value-by-value ones."""
    out = {}
    for scenario, key, values in SWEEPS:
        together = [r.model_dump(mode="json") for r in api.sweep(scenario, key, values)]
        alone = [api.plan(scenario, None, 1, [f"{key}={v}"]).model_dump(mode="json") for v in values]
        if together != alone:
            raise SystemExit(f"{scenario} --sweep {key}: the sweep's reports differ from the value-by-value ones")

        def run(scenario: str = scenario, key: str = key, values: list[str] = values) -> list[Any]:
            return api.sweep(scenario, key, values)

        out[_label(scenario, key, values)] = _best(run, repeats) / len(values)
    return out


def _tree(tree: str, repeats: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    cmd = [sys.executable, os.path.abspath(__file__), "--one-by-one-only", "--repeats", str(repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd=tree)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _keep_best(best: dict[str, float], new: dict[str, float]) -> None:
    for name, s in new.items():
        best[name] = min(s, best.get(name, s))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="runs of each sweep a round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every side, alternating; each keeps its best")
    ap.add_argument("--before", metavar="DIR", help="also time the value-by-value loop of this source tree")
    ap.add_argument("--one-by-one-only", action="store_true", help=argparse.SUPPRESS)  # the --before child
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if args.one_by_one_only:
        print(json.dumps(one_by_one(args.repeats)))
        return 0
    sides: dict[str, dict[str, float]] = {"sweep": {}, "value by value": {}, "before": {}}
    for _ in range(args.rounds):
        _keep_best(sides["sweep"], swept(args.repeats))
        _keep_best(sides["value by value"], one_by_one(args.repeats))
        if args.before:
            _keep_best(sides["before"], _tree(args.before, args.repeats))
    if args.json:
        print(json.dumps({k: v for k, v in sides.items() if v}, indent=2))
        return 0
    head = f"{'sweep (ms per value)':52s} {'sweep':>8s} {'by value':>9s} {'ratio':>6s}"
    print(head + (f" {'before':>8s} {'ratio':>6s}" if args.before else ""))
    for name, s in sides["sweep"].items():
        v = sides["value by value"][name]
        line = f"{name:52s} {s * 1e3:8.1f} {v * 1e3:9.1f} {v / s:5.2f}x"
        if args.before:
            b = sides["before"][name]
            line += f" {b * 1e3:8.1f} {b / s:5.2f}x"
        print(line)
    print("(the sweep's reports equal the value-by-value ones field by field, checked in this run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
