"""Keep the tutorials' outputs real: run every command of their console blocks and write what it printed.

    python tools/tutorials.py                 # rewrite the outputs of docs/tutorials/*.md (deterministic blocks)
    python tools/tutorials.py --measured      # also re-run the measured blocks (real processes, timings)
    python tools/tutorials.py --check         # exit 1 if a deterministic block's output differs (the test does this)

A block opens with ```console (its output is deterministic and checked by tests/test_tutorials.py)
or ```console-measured (timings or real processes: re-run with --measured, not compared). Each line
starting with ``$ `` is a command run by bash from the repository root, stdout and stderr together;
the lines up to the next ``$ `` are its output.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
BLOCK = re.compile(r"^```(console|console-measured)\n(.*?)^```\n", re.S | re.M)


@dataclass(frozen=True)
class Step:
    command: str
    output: str


def steps(body: str) -> list[Step]:
    out: list[Step] = []
    for line in body.splitlines(keepends=True):
        if line.startswith("$ "):
            out.append(Step(line[2:].rstrip("\n"), ""))
        elif out:
            out[-1] = Step(out[-1].command, out[-1].output + line)
        elif line.strip():
            raise ValueError(f"output before any command: {line!r}")
    return out


def run(command: str, timeout_s: float = 600) -> str:
    p = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout_s,
        # this tree's code, whichever checkout is pip-installed (a CI clone installs itself editable)
        env={
            **os.environ,
            "COLUMNS": "120",
            "TERM": "dumb",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        },
    )
    if p.returncode != 0:
        raise RuntimeError(f"$ {command}\nexited with status {p.returncode}:\n{p.stdout}")
    return p.stdout


def blocks(text: str) -> list[tuple[str, re.Match[str]]]:
    return [(m.group(1), m) for m in BLOCK.finditer(text)]


def update(path: Path, measured: bool) -> str:
    text = path.read_text(encoding="utf-8")
    out, last = [], 0
    for kind, m in blocks(text):
        out.append(text[last : m.start()])
        body = m.group(2)
        if kind == "console" or measured:
            body = "".join(f"$ {s.command}\n{run(s.command)}" for s in steps(body))
        out.append(f"```{kind}\n{body}```\n")
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def check(path: Path) -> list[str]:
    """One unified diff per deterministic step whose output changed."""
    problems = []
    for kind, m in blocks(path.read_text(encoding="utf-8")):
        if kind != "console":
            continue
        for s in steps(m.group(2)):
            got, want = run(s.command), s.output
            if got != want:
                diff = difflib.unified_diff(want.splitlines(), got.splitlines(), "documented", "now", lineterm="", n=1)
                problems.append(f"{path.name}: $ {s.command}\n" + "\n".join(diff))
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--measured", action="store_true")
    args = ap.parse_args()
    files = args.files or sorted(TUTORIALS.glob("*.md"))
    if args.check:
        problems = [p for f in files for p in check(f)]
        print("\n\n".join(problems) or "tutorials: every output is current")
        return 1 if problems else 0
    for f in files:
        f.write_text(update(f, args.measured), encoding="utf-8")
        print(f"updated {f.resolve().relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
