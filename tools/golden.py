"""Golden comparison: every number the CLI prints as JSON for the built-in examples, at an earlier revision
and in the working tree, compared leaf by leaf.

For a refactor that must not move a number (the one-pricer redesign): a git worktree of ``REV`` is made
in a temporary folder; the same commands run in both trees (``--json``; results carry no wall-clock
fields, so equal inputs give equal output); numbers are compared to ``--rel`` (default 1e-9), strings
exactly. Prints each command's verdict and the first differing paths; exits 1 if any command differs.

    python tools/golden.py REV [--rel 1e-9] [--show 8] [--only diagnose,plan] [--added-ok]

Commands: ``diagnose`` / ``plan --top 3`` / ``explain`` of every built-in scenario and ``examples/*.yaml``, three
``plan --sweep`` (hardware quantities of the training examples, the edge example's uplink),
``hardware compare`` on the small test suite, ``report --json --no-simulate``. A key present on one side
only is a difference (a field added or removed shows up as such), unless ``--added-ok``: then a key only in
the working tree is not (a field a change adds on purpose), so what remains are the numbers that moved.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUILTINS = ("llama-70b-training-h100", "trillion-param-training", "llama-70b-serving-long-context")
EDGE = ("camera-analytics-edge",)


def commands() -> list[tuple[str, list[str]]]:
    examples = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.yaml"))
    out: list[tuple[str, list[str]]] = []
    for s in (*BUILTINS, *EDGE, *examples):
        out.append(("diagnose", ["diagnose", s]))
        out.append(("plan", ["plan", s, "--top", "3"]))
        if s not in EDGE:
            out.append(("explain", ["explain", s]))
    for s, key in (
        ("llama-70b-training-h100", "link=25Gbit/s,400Gbit/s"),
        ("trillion-param-training", "hbm_capacity=141GiB,x4"),
    ):
        out.append(("sweep", ["plan", s, "--sweep", key]))
    out.append(("sweep", ["plan", EDGE[0], "--sweep", "uplink=10Mbit/s,100Mbit/s"]))
    out.append(("hardware", ["hardware", "compare", "h100-sxm", "h200", "--suite", "tests/data/small-suite.yaml"]))
    out.append(("report", ["report", *BUILTINS, "--no-simulate"]))
    return out


def run(tree: Path, argv: list[str]) -> Any:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "aitrinity.cli.main", *argv, "--json", "--quiet"]
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"exit": p.returncode, "stderr": p.stderr.strip().splitlines()[-1:] if p.stderr else []}
    return json.loads(p.stdout)


def differences(a: Any, b: Any, rel: float, path: str = "", added_ok: bool = False) -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a and added_ok:
                continue
            if k not in a or k not in b:
                yield f"{path}.{k}: only {'after' if k in b else 'before'}"
            else:
                yield from differences(a[k], b[k], rel, f"{path}.{k}", added_ok)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}: {len(a)} items before, {len(b)} after"
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from differences(x, y, rel, f"{path}[{i}]", added_ok)
    elif isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        if not (a == b or (math.isfinite(a) and math.isfinite(b) and math.isclose(a, b, rel_tol=rel, abs_tol=1e-300))):
            yield f"{path}: {a!r} -> {b!r}"
    elif a != b:
        yield f"{path}: {str(a)[:80]!r} -> {str(b)[:80]!r}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev")
    ap.add_argument("--rel", type=float, default=1e-9)
    ap.add_argument("--show", type=int, default=8, help="differing paths shown per command")
    ap.add_argument("--only", help="comma list of command kinds (diagnose, plan, explain, hardware, report)")
    ap.add_argument("--added-ok", action="store_true", help="a field only in the working tree is not a difference")
    args = ap.parse_args()
    kinds = set(args.only.split(",")) if args.only else None
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old), args.rev], cwd=ROOT, check=True, capture_output=True
        )
        try:
            changed = 0
            for kind, argv in commands():
                if kinds and kind not in kinds:
                    continue
                before, after = run(old, argv), run(ROOT, argv)
                diffs = list(differences(before, after, args.rel, added_ok=args.added_ok))
                label = " ".join(argv)
                if not diffs:
                    print(f"same      {label}")
                    continue
                changed += 1
                print(f"DIFFERS   {label}: {len(diffs)} paths")
                for d in diffs[: args.show]:
                    print(f"            {d}")
            print(f"{changed} command(s) differ against {args.rev}")
            return 1 if changed else 0
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
