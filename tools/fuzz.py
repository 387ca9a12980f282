"""Fuzz the CLI through its real entry point with bad and odd input, and tally the outcomes per command.

Each case is an argv for ``aitrinity.cli.main.main`` built from a seeded generator: mutated scenario files
(fields replaced by NaN, infinities, negatives, zero, huge numbers, wrong types, unknown keys, deleted
keys), ``--set`` with odd values, unknown or hostile catalog names (paths, NUL bytes, 5,000 characters),
malformed traces and link traces, and odd numeric flags for plan, simulate, kv and validate. A case passes when

* it exits 2 with at most a few lines on stderr (a user error, said), or
* it exits 0 and its ``--json`` output holds only finite numbers, with no negative time, token count or capacity --

and fails when it raises, prints ``internal error`` (a bug caught by main()), exits otherwise, or runs
past ``--timeout`` seconds (a hang; SIGALRM). Slow commands (simulations, calibration, demos) get small
sizes so that a case takes well under a second.

    python tools/fuzz.py [--cases 10000] [--seed 0] [--timeout 20] [--json]

Prints one row per command: cases, exit 2, exit 0, failures by kind, and the first failing argv of each.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aitrinity import api  # noqa: E402
from aitrinity.cli.main import main  # noqa: E402

ODD_NUMBERS: list[Any] = [
    0,
    -1,
    -1e9,
    1e300,
    float("nan"),
    float("inf"),
    -0.0,
    1e-12,
    3.5,
    2**63,
    "",
    "many",
    None,
    True,
    [],
    {},
    "1e999",
    ".nan",
    "-5",
]
ODD_QUANTITIES = [
    "0Gbit/s",
    "-5Gbit/s",
    "nanGB/s",
    "infTB/s",
    "1e999GB/s",
    "x0",
    "x-1",
    "xnan",
    "+-100%",
    "-100%",
    "0GiB",
    "-80GiB",
    "$-3/h",
    "0W",
    "abc",
    "1 2 3",
    "x1e300",
    "+1e300%",
    "1Gbit/s",
    "80GiB",
]
HOSTILE_NAMES = [
    "/etc/passwd",
    "../../../../etc/passwd",
    "a\x00b",
    "x" * 5000,
    "a/" + "x" * 5000 + ".yaml",
    "",
    " ",
    "h100",
    "H100-SXM",
    "llama-3.1-70b",
    "no-such-thing",
    "\u00e9\u00e8",
    "CON",
    "-x",
]
HW_KEYS = [
    "link",
    "uplink",
    "gpus",
    "inter_node_bandwidth",
    "intra_node_bandwidth",
    "host_bandwidth",
    "hbm_bandwidth",
    "hbm_capacity",
    "host_capacity",
    "price",
    "power",
    "flops",
    "flops_scale",
]
FIELD_KEYS = [
    "plan.tp",
    "plan.pp",
    "plan.zero",
    "plan.ep",
    "plan.micro_batch",
    "workload.training.seq_len",
    "workload.training.global_batch",
    "workload.training.total_tokens",
    "workload.serving.batch",
    "workload.serving.prompt_tokens",
    "workload.serving.output_tokens",
    "workload.serving.mode",
    "system.num_devices",
    "system.devices_per_node",
    "system.device",
    "system.engine",
    "system.engine_version",
    "system.overlap_fraction",
    "plan.exchanges",
    "workload.model",
    "plan.split",
    "workload.edge.frames_per_s",
    "nonsense.key",
    "plan",
]


@dataclass
class Tally:
    cases: int = 0
    exit2: int = 0
    exit0: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    first: dict[str, list[str]] = field(default_factory=dict)


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _bad_numbers(x: Any, path: str = "") -> Iterator[str]:
    """Paths of non-finite numbers, and of negative times, token counts and capacities (keys ending in ``_s``,
    ``_tokens`` or ``capacity_bytes``), in a JSON document."""
    if isinstance(x, dict):
        for k, v in x.items():
            sub = f"{path}.{k}"
            never_negative = str(k).endswith(("_s", "_tokens", "capacity_bytes"))
            if isinstance(v, int | float) and not isinstance(v, bool) and never_negative and v < 0:
                yield f"{sub}={v}"
            yield from _bad_numbers(v, sub)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _bad_numbers(v, f"{path}[{i}]")
    elif isinstance(x, float) and not math.isfinite(x):
        yield f"{path}={x}"


def _parse_json(text: str) -> Any:
    def bad_constant(name: str) -> float:
        return float("nan")  # NaN / Infinity in the output: counted below

    return json.loads(text, parse_constant=bad_constant)


def run_case(argv: list[str], timeout_s: float) -> tuple[str, int | None]:
    """Run one case in this process: ('' when it passes, else the kind of failure; the exit status)."""
    out, err = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
    except Hang:
        return "hang", None
    except Exception as e:  # escaped main() entirely
        return f"raised {type(e).__name__}", None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    text_err = err.getvalue()
    if "Traceback" in text_err or "internal error" in text_err:
        return "internal error", rc
    if rc == 2:
        return ("" if len(text_err.strip().splitlines()) <= 3 else "exit 2 with a long message"), rc
    if rc != 0:
        return f"exit {rc}", rc
    if "--json" in argv and out.getvalue().strip():
        try:
            doc = _parse_json(out.getvalue())
        except ValueError:
            return "exit 0 with invalid JSON", rc
        if next(_bad_numbers(doc), None) is not None:
            return "exit 0 with non-finite or negative output", rc
    elif any(w in out.getvalue() for w in ("nan", "inf ", "-inf")):
        return "exit 0 with non-finite output", rc
    return "", rc


class Cases:
    """Seeded case generators, one per command family."""

    def __init__(self, rng: random.Random, tmp: Path) -> None:
        self.rng = rng
        self.tmp = tmp
        self.n = 0
        self.scenarios = {
            s: api.load(s)[0].model_dump(mode="json", exclude_unset=True) for s in api.builtin_scenarios()
        }

    def _file(self, text: str | bytes, suffix: str) -> str:
        self.n += 1
        p = self.tmp / f"case{self.n}{suffix}"
        p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        return str(p)

    def _mutate(self, doc: Any) -> Any:
        if isinstance(doc, dict) and doc:
            k = self.rng.choice(list(doc))
            roll = self.rng.random()
            if roll < 0.5:
                doc[k] = self._mutate(doc[k])
            elif roll < 0.65:
                del doc[k]
            elif roll < 0.75:
                doc["unknown_" + str(k)] = 1
            else:
                doc[k] = self.rng.choice(ODD_NUMBERS + ODD_QUANTITIES + HOSTILE_NAMES[:3])
            return doc
        if isinstance(doc, list) and doc:
            i = self.rng.randrange(len(doc))
            doc[i] = self._mutate(doc[i])
            return doc
        return self.rng.choice(ODD_NUMBERS + ODD_QUANTITIES)

    def scenario_file(self) -> str:
        doc = json.loads(json.dumps(self.scenarios[self.rng.choice(list(self.scenarios))]))
        for _ in range(self.rng.randint(1, 3)):
            doc = self._mutate(doc)
        roll = self.rng.random()
        if roll < 0.05:
            return self._file(b"\xff\xfe\x00 not utf-8", ".yaml")
        if roll < 0.1:
            return self._file("a: [unclosed\n", ".yaml")
        return self._file(yaml.safe_dump(doc, allow_unicode=True), ".yaml")

    def set_value(self) -> str:
        key = self.rng.choice(HW_KEYS + FIELD_KEYS)
        value = self.rng.choice([*map(str, ODD_NUMBERS), *ODD_QUANTITIES, *HOSTILE_NAMES[:4], "[]", "{}", "static"])
        return f"{key}={value}" if self.rng.random() > 0.05 else self.rng.choice(["=", "x", "=1", "a==b"])

    def scenario_ref(self) -> str:
        roll = self.rng.random()
        if roll < 0.5:
            return self.rng.choice(list(self.scenarios))
        if roll < 0.8:
            return self.scenario_file()
        return self.rng.choice(HOSTILE_NAMES)

    def diagnose(self) -> list[str]:
        argv = ["diagnose", self.scenario_ref()]
        for _ in range(self.rng.randint(0, 3)):
            argv += ["--set", self.set_value()]
        return [*argv, "--json"]

    def plan(self) -> list[str]:
        argv = [self.rng.choice(["plan", "explain"]), self.scenario_ref(), "--json"]
        if self.rng.random() < 0.5:
            argv += ["--set", self.set_value()]
        if self.rng.random() < 0.3:
            argv += ["--top", self.rng.choice(["0", "-1", "3", "1e9", "x"])]
        if self.rng.random() < 0.3:
            key = self.rng.choice(["link", "uplink", "gpus", "hbm_bandwidth"])
            argv += ["--sweep", f"{key}={','.join(self.rng.sample(ODD_QUANTITIES, 2))}"]
        return argv

    def catalog(self) -> list[str]:
        kind = self.rng.choice(["devices", "models", "links", "tiers", "scenarios", "dnns", "nope", ""])
        if self.rng.random() < 0.3:
            return ["catalog", "list", kind, "--json"]
        return ["catalog", "show", self.rng.choice(HOSTILE_NAMES), "--json"]

    def trace(self) -> str:
        rows = [
            '{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}',
            '{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": []}',
            '{"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 2, "input_length": 10, "output_length": 1, "hash_ids": [true]}',
            "[1, 2, 3]",
            "not json",
            '{"timestamp": 3, "input_length": 512, "output_length": 3, "hash_ids": [1]}',
        ]
        picked = [self.rng.choice(rows) for _ in range(self.rng.randint(0, 5))]
        if self.rng.random() < 0.1:
            return self._file(b"\xff\xfe", ".jsonl")
        return self._file("\n".join(picked) + "\n", ".jsonl")

    def kv(self) -> list[str]:
        argv = ["kv", "replay", self.trace(), "--json", "--quiet"]
        if self.rng.random() < 0.4:
            argv += ["--kv-dtype", self.rng.choice(["int1", "bf16", "fp8", ""])]
        if self.rng.random() < 0.4:
            argv += ["--capacity", self.rng.choice(["0", "-1", "1M", "nan", "lots", "1e999", "unbounded"])]
        if self.rng.random() < 0.3:
            argv += ["--block", self.rng.choice(["0", "-5", "512", "x"])]
        if self.rng.random() < 0.3:
            argv += ["--model", self.rng.choice(HOSTILE_NAMES)]
        return argv

    def serving(self) -> list[str]:
        """``simulate serving`` as a fixed-concurrency benchmark (a few requests, so that a case stays short)."""
        pick = self.rng.choice
        argv = ["simulate", "serving", "--json", "--quiet", "--requests", pick(["1", "3", "0", "-2"])]
        argv += ["--concurrency", pick(["1", "4", "0", "x", "1e9"]), "--isl", pick(["1", "512", "0", "-5", "nan"])]
        argv += ["--osl", pick(["1", "16", "0", "1e99"])]
        if self.rng.random() < 0.5:
            argv += ["--tp", pick(["1", "2", "3", "16", "0", "-1"]), "--model", pick(["llama-3.1-70b", *HOSTILE_NAMES])]
        if self.rng.random() < 0.3:
            argv += ["--cp", pick(["1", "2", "3", "0"]), "--engine", pick(["vllm", "trtllm", "sglang", "x"])]
        if self.rng.random() < 0.3:
            argv += ["--dtype", pick(["fp8", "fp4", "int1"]), "--token-budget", pick(["1", "8192", "0", "-1"])]
        if self.rng.random() < 0.2:
            argv += ["--prefix-cache", pick(["local", "global", "x"]), "--capacity", pick(["1M", "-1", "nan", "0"])]
        return argv

    def kv_plan(self) -> list[str]:
        argv = ["kv", "plan", self.trace(), "--json", "--quiet", "--target", self.rng.choice(["0.2", "0", "2", "nan"])]
        if self.rng.random() < 0.6:
            tiers = self.rng.choice(["host-dram=-1GiB", "host-dram=1TiB,nvme-gen4=nan", "nope=1GiB", "host-dram", ""])
            argv += ["--tiers", tiers]
        return argv

    def watch(self) -> list[str]:
        """Only URLs that cannot reach a server (malformed, another scheme, a closed loopback port): refused in one
        line, never an internal error."""
        url = self.rng.choice(
            ["http://[::1", "http://h:99999", "ftp://x", "http://", "", "http://127.0.0.1:1", "http://a b", "\x00"]
        )
        return ["watch", url, "--count", "1", "--period", self.rng.choice(["0.1", "0", "-1", "nan"])]

    def simulate(self) -> list[str]:
        which = self.rng.choice(["edge-stream", "training-link", "diurnal-serving", "serving"])
        if which == "serving":
            return self.serving()
        argv = ["simulate", which, "--json", "--quiet"]
        if which == "edge-stream":
            argv += ["--duration", self.rng.choice(["inf", "nan", "1e-9", "0", "-3", "2", "x"])]
        elif which == "training-link":
            argv += ["--steps", self.rng.choice(["0", "-1", "20", "x"]), "--seed", self.rng.choice(["-1", "0", "x"])]
            if self.rng.random() < 0.5:
                lines = self.rng.choice(["0 100\nnan 50\n", "0 0\n", "5 10\n1 10\n", "x y\n", "", "0 100\n10 1\n"])
                argv += ["--trace", self._file(lines, ".txt")]
        else:
            argv += [
                "--day",
                self.rng.choice(["nan", "1", "-5", "inf", "600"]),
                "--period-s",
                self.rng.choice(["1e-9", "0", "240", "nan", "300"]),
                "--rate",
                self.rng.choice(["0", "-1", "nan", "0.5"]),
            ]
        return argv

    def misc(self) -> list[str]:
        return self.rng.choice(
            [
                ["validate", "--serving", self.trace()],
                ["validate", "--serving", self._file("a,b\n1,2\n", ".csv")],
                ["report", "--json", "--no-simulate", "-o", self.rng.choice(["/nonexistent/x.html", str(self.tmp)])],
                ["calibrate", "--quick", "--tdp", self.rng.choice(["0W", "-1W", "nanW", "x"]), "-o", "/nonexistent/c"],
                ["hardware", "compare", self.rng.choice(HOSTILE_NAMES), "--json"],
                ["completion", self.rng.choice(["bash", "tcsh", ""])],
                self.kv_plan(),
                self.watch(),
                [self.rng.choice(["frobnicate", "--frob", ""])],
            ]
        )

    def families(self) -> dict[str, Callable[[], list[str]]]:
        return {
            "diagnose": self.diagnose,
            "plan": self.plan,
            "catalog": self.catalog,
            "kv": self.kv,
            "simulate": self.simulate,
            "misc": self.misc,
        }


def fuzz(cases: int, seed: int, timeout_s: float, progress: Callable[[int], None] | None = None) -> dict[str, Tally]:
    rng = random.Random(seed)
    tallies: dict[str, Tally] = defaultdict(Tally)
    weights = {"diagnose": 4, "plan": 2, "catalog": 1, "kv": 1, "simulate": 1, "misc": 1}
    with tempfile.TemporaryDirectory() as tmp:
        gen = Cases(rng, Path(tmp))
        fam = gen.families()
        names = list(weights)
        for i in range(cases):
            name = rng.choices(names, [weights[n] for n in names])[0]
            argv = fam[name]()
            verdict, rc = run_case(argv, timeout_s)
            t = tallies[argv[0] if argv and argv[0] else name]
            t.cases += 1
            if verdict:
                t.failures[verdict] += 1
                t.first.setdefault(verdict, argv)
            elif rc == 0:
                t.exit0 += 1
            else:
                t.exit2 += 1
            if progress and (i + 1) % 500 == 0:
                progress(i + 1)
    return tallies


def main_cli() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    tallies = fuzz(args.cases, args.seed, args.timeout, lambda n: print(f"fuzz: {n:,} cases", file=sys.stderr))
    seconds = time.perf_counter() - t0
    failed = sum(sum(t.failures.values()) for t in tallies.values())
    if args.json:
        print(
            json.dumps(
                {
                    k: {
                        "cases": t.cases,
                        "exit2": t.exit2,
                        "exit0": t.exit0,
                        "failures": dict(t.failures),
                        "first": t.first,
                    }
                    for k, t in tallies.items()
                }
                | {"seconds": seconds},
                indent=2,
            )
        )
    else:
        print(f"{'command':12s} {'cases':>7s} {'exit 2':>7s} {'exit 0':>7s} {'failed':>7s}  failures")
        for k, t in sorted(tallies.items()):
            kinds = ", ".join(f"{n} {v}" for v, n in t.failures.most_common()) or "-"
            print(f"{k:12s} {t.cases:7d} {t.exit2:7d} {t.exit0:7d} {sum(t.failures.values()):7d}  {kinds}")
        total = sum(t.cases for t in tallies.values())
        exit2, exit0 = (sum(getattr(t, f) for t in tallies.values()) for f in ("exit2", "exit0"))
        print(f"{'total':12s} {total:7d} {exit2:7d} {exit0:7d} {failed:7d}  in {seconds:.0f} s (seed {args.seed})")
        for k, t in sorted(tallies.items()):
            for verdict, argv in t.first.items():
                print(f"  first {verdict!r} of {k}: {[a[:80] for a in argv]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main_cli())
