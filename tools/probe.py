"""Cross-command consistency probe: what ``trinity plan`` reports, ``trinity diagnose`` must confirm.

Each case is a random valid scenario (a seeded generator: catalog models and GPUs, 1-64 devices, the catalog's
kernel parameters or an engine's measured tables, serving at a fixed concurrency or as a static batch, training, the
exchanges a search keeps as given, objectives and SLOs).
The planner's result is then checked against the one-plan path and against itself:

* every top row, written back as a scenario of its own (``row.plan(...)``, its batch), is diagnosed to the
  planner's TTFT, TPOT and throughput (serving) or step time (training) within ``--rel``, fits in memory, and
  meets the TTFT objective the search was given;
* the chain from the naive plan ends at the best row's score (``trinity explain``'s last step);
* the best row's objective is not beaten by any row of the Pareto frontier, and the top rows come in the
  objective's order;
* ``--family split``: every disaggregated split (``trinity plan --disaggregated``), diagnosed, gives its TTFT,
  TPOT and throughput.

A case the scenario checks refuse (a model that does not fit any layout, say) is counted as refused, not failed.

    python tools/probe.py [--cases 60] [--seed 0] [--family serving|training|split] [--rel 1e-6] [--json]

Prints the mismatches as they are found, then a tally per family; exits 1 when any case failed. As a session script
it found disagreements between ``plan``, ``explain`` and ``diagnose`` that are mended (docs/planner.md).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aitrinity import api  # noqa: E402
from aitrinity.cost.diagnosis import Diagnosis  # noqa: E402
from aitrinity.cost.estimate import Estimate  # noqa: E402
from aitrinity.errors import SpecError  # noqa: E402
from aitrinity.plan.report import PlanReport  # noqa: E402
from aitrinity.plan.search import SearchResult  # noqa: E402
from aitrinity.plan.search_serving import ServingSearchResult  # noqa: E402
from aitrinity.spec._base import validate  # noqa: E402
from aitrinity.spec.scenario import Scenario  # noqa: E402
from aitrinity.units import parse_time  # noqa: E402

SERVING_MODELS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "qwen3-32b",
    "mixtral-8x7b",
    "deepseek-v3",
    "gpt-oss-120b",
    "qwen3-235b-a22b",
    "gemma-3-27b",
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "mixtral-8x22b",
]
TRAINING_MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen3-32b", "gpt-oss-120b", "qwen3-30b-a3b"]
GPUS = ["h100-sxm", "h200", "a100-80gb-sxm", "b200", "b300", "mi300x", "mi355x", "l40s", "h20", "gb200"]
ACCELERATORS = [*GPUS, "tpu-v6e", "tpu-v5p"]
"""The GPUs and Google's TPUs (no power, no price: a search ranked by cost or energy is refused)."""
SERVING_EXCHANGES: list[list[dict[str, Any]]] = [
    [],
    [{"kind": "prefix-cache", "hit_rate": 0.5, "tier": "host", "capacity": "200 GiB"}],
    [{"kind": "prefix-cache", "hit_rate": 0.3, "tier": "hbm"}],
    [{"kind": "kv-compression", "bits": 4}],
    [{"kind": "weight-streaming", "tier": "host", "fraction": 0.25}],
    [{"kind": "kv-offload", "tier": "host", "fraction": 0.5}],
    [{"kind": "speculative-decoding", "draft_tokens": 2, "acceptance": 0.7}],
]
TRAINING_EXCHANGES: list[list[dict[str, Any]]] = [
    [],
    [{"kind": "local-sgd", "period": 4}],
    [{"kind": "optimizer-offload"}],
    [{"kind": "gradient-compression", "method": "int8"}],
]
FAMILIES = ("serving", "training", "split")
ENGINES = ("generic", "generic", "trtllm", "vllm", "sglang")
"""Half the scenarios on the catalog's kernel parameters, half on an engine's measured tables ([silicon])."""


@dataclass(frozen=True)
class Case:
    """One scenario and how it is planned."""

    family: str
    scenario: dict[str, Any]
    objective: str | None = None
    ttft_slo: str | None = None

    def describe(self) -> str:
        w = self.scenario["workload"]
        job = w.get("serving") or w.get("training")
        extra = f" objective {self.objective}" if self.objective else ""
        extra += f" ttft<={self.ttft_slo}" if self.ttft_slo else ""
        return (
            f"{self.family}: {json.dumps(self.scenario['system'])} {w['model']} {json.dumps(job)} "
            + json.dumps(self.scenario["plan"])
            + extra
        )


class Cases:
    """Seeded scenario generators, one per family."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def _system(self, sizes: list[int], host: float) -> dict[str, Any]:
        system: dict[str, Any] = {"device": self.rng.choice(ACCELERATORS), "num_devices": self.rng.choice(sizes)}
        if self.rng.random() < host:
            system["host_memory"] = "host-dram"
        engine = self.rng.choice(ENGINES)  # the catalog's kernel parameters, or an engine's measured tables
        if engine != "generic":
            system["engine"] = engine
        return system

    def _serving_job(self) -> dict[str, Any]:
        r = self.rng
        return {
            "prompt_tokens": r.choice([128, 1024, 2048, 8192]),
            "output_tokens": r.choice([1, 16, 256, 1024]),
            "batch": r.choice([1, 4, 8, 32, 64]),
            "mode": r.choice(["concurrency", "static"]),
        }

    def _exchanges(self, options: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """None, one, or two of different kinds."""
        first, second = self.rng.choice(options), self.rng.choice(options)
        kinds = {e["kind"] for e in first}
        return first + [e for e in second if e["kind"] not in kinds] if self.rng.random() < 0.3 else first

    def serving(self) -> Case:
        r = self.rng
        plan: dict[str, Any] = {"exchanges": self._exchanges(SERVING_EXCHANGES)}
        if r.random() < 0.3:
            plan["cp_method"] = r.choice(["ring", "ulysses"])
        wl = {"model": r.choice(SERVING_MODELS), "serving": self._serving_job()}
        scenario = {"name": "probe", "system": self._system([1, 2, 4, 8, 16], 0.6), "workload": wl, "plan": plan}
        slo = None if r.random() < 0.5 else r.choice(["20 ms", "200 ms", "2 s"])
        return Case("serving", scenario, r.choice([None, "latency", "cost", "energy"]), slo)

    def training(self) -> Case:
        r = self.rng
        job = {"seq_len": r.choice([2048, 4096, 8192]), "global_batch": r.choice([64, 128, 256, 512])}
        wl = {"model": r.choice(TRAINING_MODELS), "training": job}
        scenario = {
            "name": "probe",
            "system": self._system([8, 16, 32, 64], 0.6),
            "workload": wl,
            "plan": {"exchanges": self._exchanges(TRAINING_EXCHANGES)},
        }
        return Case("training", scenario, r.choice([None, "cost", "energy"]))

    def split(self) -> Case:
        r = self.rng
        job = {
            "prompt_tokens": r.choice([128, 1024, 4096]),
            "output_tokens": r.choice([1, 64, 512]),
            "batch": r.choice([1, 8, 32, 128]),
        }
        wl = {"model": r.choice(SERVING_MODELS), "serving": job}
        system = self._system([2, 4, 8, 16, 32], 1.0)
        plan = {"exchanges": self._exchanges(SERVING_EXCHANGES)}
        return Case("split", {"name": "probe", "system": system, "workload": wl, "plan": plan})

    def draw(self, family: str | None) -> Case:
        make: dict[str, Callable[[], Case]] = {"serving": self.serving, "training": self.training, "split": self.split}
        return make[family or self.rng.choice(FAMILIES)]()


def close(a: float | None, b: float | None, rel: float) -> bool:
    if a is None or b is None or math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def _diagnosed(s: Scenario, plan: Any, batch: int | None = None) -> Estimate:
    """The estimate of ``s`` with ``plan`` (and the serving ``batch``), as ``trinity diagnose`` prices it."""
    update: dict[str, Any] = {"plan": plan}
    if batch is not None:
        assert s.workload.serving is not None
        serving = s.workload.serving.model_copy(update={"batch": batch})
        update["workload"] = s.workload.model_copy(update={"serving": serving})
    d = api.diagnose(s.model_copy(update=update))
    assert isinstance(d, Diagnosis)
    return d.estimate


SERVING_SCORES: dict[str, Callable[[Any], float | None]] = {
    "throughput": lambda c: -c.throughput_tokens_per_s,
    "latency": lambda c: c.latency_s,
    "cost": lambda c: c.usd_per_million_tokens,
    "energy": lambda c: c.joules_per_token,
}
TRAINING_SCORES: dict[str, Callable[[Any], float | None]] = {
    "time": lambda c: c.step_time_s,
    "cost": lambda c: c.usd_per_million_tokens,
    "energy": lambda c: c.joules_per_token,
}


def _order_problems(rep: PlanReport, score: Callable[[Any], float | None], rel: float) -> Iterator[str]:
    """The top rows in the objective's order; no frontier row beats the best."""
    best = rep.search.best
    if best is None:
        return
    tops = [score(c) for c in rep.search.top]
    if all(v is not None for v in tops):
        for k in range(1, len(tops)):
            a, b = tops[k - 1], tops[k]
            assert a is not None and b is not None
            if b < a and not close(a, b, rel):
                yield f"top row {k} scores {b} before row {k - 1}'s {a}"
    mine = score(best)
    for c in rep.search.pareto:
        v = score(c)
        if mine is not None and v is not None and v < mine and not close(v, mine, rel):
            yield f"frontier row {c.label} scores {v}, better than the best's {mine}"


def _serving_differs(got: Any, planned: tuple[float, float, float], rel: float) -> str | None:
    """How a diagnosed serving estimate differs from a planned row's (TTFT, TPOT, throughput), or None."""
    diagnosed = (got.ttft_s, got.tpot_s, got.throughput_tokens_per_s)
    if all(close(a, b, rel) for a, b in zip(diagnosed, planned, strict=True)):
        return None
    return "diagnose TTFT {} TPOT {} throughput {}; plan {} / {} / {}".format(*diagnosed, *planned)


def _serving_problems(case: Case, s: Scenario, rep: PlanReport, rel: float) -> Iterator[str]:
    slo = parse_time(case.ttft_slo) if case.ttft_slo else None
    search = rep.search
    assert isinstance(search, ServingSearchResult)
    for k, row in enumerate(search.top):
        e = _diagnosed(s, row.plan(s.plan), row.batch)
        got = e.serving
        assert got is not None
        differs = _serving_differs(got, (row.ttft_s, row.tpot_s, row.throughput_tokens_per_s), rel)
        if differs:
            yield f"row {k} {row.label}: {differs}"
        if not e.memory.fits:
            yield f"row {k} {row.label}: diagnose says it does not fit"
        if slo is not None and got.ttft_s > slo * (1 + 1e-9):
            yield f"row {k} {row.label}: TTFT {got.ttft_s} s over the objective {case.ttft_slo}"
    best = search.best
    if rep.chain is not None and best is not None and rep.chain.steps:
        end = 1.0 / rep.chain.steps[-1].score_after
        if not close(end, best.throughput_tokens_per_s, rel):
            yield f"chain ends at {end} tokens/s, the best plan gives {best.throughput_tokens_per_s}"
    yield from _order_problems(rep, SERVING_SCORES[case.objective or "throughput"], rel)


def _training_problems(case: Case, s: Scenario, rep: PlanReport, rel: float) -> Iterator[str]:
    search = rep.search
    assert isinstance(search, SearchResult)
    for k, row in enumerate(search.top):
        e = _diagnosed(s, row.plan(s.plan))
        assert e.training is not None
        if not close(e.training.step_time_s, row.step_time_s, rel):
            yield f"row {k} {row.label}: diagnose step {e.training.step_time_s} s, plan {row.step_time_s} s"
        if not e.memory.fits:
            yield f"row {k} {row.label}: diagnose says it does not fit"
    best = search.best
    if rep.chain is not None and best is not None and rep.chain.steps and (case.objective or "time") == "time":
        end = rep.chain.steps[-1].score_after
        if not close(end, best.step_time_s, rel):
            yield f"chain ends at {end} s a step, the best plan takes {best.step_time_s} s"
    yield from _order_problems(rep, TRAINING_SCORES[case.objective or "time"], rel)


def _split_problems(case: Case, s: Scenario, rep: PlanReport, rel: float) -> Iterator[str]:
    for k, row in enumerate(rep.splits.top if rep.splits is not None else []):
        got = _diagnosed(s, row.plan(s.plan), row.batch).serving
        assert got is not None
        differs = _serving_differs(got, (row.ttft_s, row.tpot_s, row.tokens_per_s), rel)
        if differs:
            yield f"split {k} {row.label}: {differs}"


@dataclass
class Outcome:
    verdict: str
    """``ok``, ``refused`` (the scenario or the planner said why), ``mismatch`` or ``crash``."""
    rows: int = 0
    problems: list[str] = field(default_factory=list)


def run_case(case: Case, rel: float = 1e-6) -> Outcome:
    """Plan ``case`` and check what it reports (module doc)."""
    try:
        s = validate(Scenario, case.scenario)
        rep = api.plan(s, objective=case.objective, top=5, ttft_slo=case.ttft_slo, disaggregated=case.family == "split")
    except SpecError:
        return Outcome("refused")
    except Exception:
        return Outcome("crash", problems=[f"plan raised: {traceback.format_exc(limit=4)}"])
    assert isinstance(rep, PlanReport)
    check = {"serving": _serving_problems, "training": _training_problems, "split": _split_problems}[case.family]
    rows = len(rep.splits.top) if case.family == "split" and rep.splits is not None else len(rep.search.top)
    try:
        problems = list(check(case, s, rep, rel))
    except SpecError as err:
        problems = [f"diagnose refused a row the planner proposed: {err}"]
    except Exception:
        return Outcome("crash", rows, [f"a check raised: {traceback.format_exc(limit=4)}"])
    return Outcome("mismatch" if problems else "ok", rows, problems)


@dataclass
class Tally:
    cases: int = 0
    ok: int = 0
    refused: int = 0
    failed: int = 0
    rows: int = 0
    first: list[str] = field(default_factory=list)


def probe(
    cases: int, seed: int, family: str | None, rel: float, report: Callable[[int, Case, Outcome], None]
) -> dict[str, Tally]:
    gen = Cases(random.Random(seed))
    tallies: dict[str, Tally] = {f: Tally() for f in ([family] if family else FAMILIES)}
    for n in range(cases):
        case = gen.draw(family)
        out = run_case(case, rel)
        t = tallies[case.family]
        t.cases += 1
        t.rows += out.rows
        if out.verdict in ("ok", "refused"):
            setattr(t, out.verdict, getattr(t, out.verdict) + 1)
        else:
            t.failed += 1
            t.first = t.first or [case.describe(), *out.problems]
        report(n, case, out)
    return tallies


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", choices=FAMILIES)
    ap.add_argument("--rel", type=float, default=1e-6, help="relative tolerance of every comparison")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.cases < 1 or not (0 < args.rel < 1):
        ap.error("--cases at least 1, --rel in (0, 1)")
    t0 = time.perf_counter()

    def report(n: int, case: Case, out: Outcome) -> None:
        if out.problems:
            print(f"case {n} ({out.verdict}) {case.describe()}", file=sys.stderr)
            for p in out.problems:
                print(f"  {p}", file=sys.stderr)
        print(f"probe: {n + 1}/{args.cases} cases", file=sys.stderr)

    tallies = probe(args.cases, args.seed, args.family, args.rel, report)
    seconds = time.perf_counter() - t0
    failed = sum(t.failed for t in tallies.values())
    if args.json:
        doc = {k: vars(t) for k, t in tallies.items()} | {"seed": args.seed, "seconds": seconds}
        print(json.dumps(doc, indent=2))
    else:
        print(f"{'family':10s} {'cases':>6s} {'ok':>6s} {'refused':>8s} {'failed':>7s} {'rows':>6s}")
        for k, t in tallies.items():
            print(f"{k:10s} {t.cases:6d} {t.ok:6d} {t.refused:8d} {t.failed:7d} {t.rows:6d}")
        print(f"seed {args.seed}, {seconds:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
