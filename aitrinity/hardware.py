"""Front door of the hardware what-if: suites and designs by name or file -> :mod:`aitrinity.plan.whatif`.

A design is written as

* a catalog device (``h200``) or a device file: every workload of the suite runs
  on it, with its platform's intra-node link (NVLink, Infinity Fabric) and the
  scenario's cluster network, host memory and scale;
* ``DEVICE:EDIT,EDIT`` -- the same with hardware edits, e.g.
  ``h100-sxm:hbm_capacity=141GiB,price=+50%`` or ``h100:intra_node_bandwidth=x0.5``;
* ``:EDIT,...`` -- each scenario's own device, edited;
* a design YAML file (``name``, ``device``, ``description``, ``set``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aitrinity import catalog
from aitrinity.api import resolve
from aitrinity.catalog.loader import is_file, read_yaml
from aitrinity.errors import SpecError
from aitrinity.plan.whatif import (
    HARDWARE_OBJECTIVES,
    Case,
    Comparison,
    WorkloadResult,
    analyse,
    compare,
    comparison,
)
from aitrinity.spec._base import validate
from aitrinity.spec.edge import EdgeScenario
from aitrinity.spec.suite import Design, Suite


def parse_design(ref: str) -> Design:
    """A design from its command-line spelling or a design file."""
    if ref.endswith((".yaml", ".yml")):
        path = Path(ref)
        if not is_file(path):
            raise SpecError.at(ref, "no such design file")
        return validate(Design, read_yaml(path), source=ref)
    device, _, edits = ref.partition(":")
    if not device and not edits:
        raise SpecError("design", ref, "a device name, DEVICE:EDIT,EDIT, or a design .yaml file")
    return Design(name=ref, device=device or None, set=[e.strip() for e in edits.split(",") if e.strip()])


def cases(suite: Suite, designs: Sequence[Design], base: Path | None = None) -> list[Case]:
    """Every (design, workload) of the suite, resolved; scenario files are relative to ``base``."""
    out = []
    for d in designs:
        for w in suite.workloads:
            ref = w.scenario
            if base is not None and not Path(ref).is_absolute() and is_file(base / ref):
                ref = str(base / ref)
            scenario = catalog.load_scenario(ref)
            if isinstance(scenario, EdgeScenario):
                raise SpecError.at(
                    f"workload {w.label or w.scenario}", "an edge scenario: suites compare training and serving"
                )
            if d.device is not None:  # the design's device brings its platform's intra-node fabric
                system = scenario.system.model_copy(update={"device": d.device, "intra_node_link": None})
                scenario = scenario.model_copy(update={"system": system})
            try:
                r = resolve(scenario, base, overrides=[*w.set, *d.set])
            except SpecError as e:
                raise SpecError.at(f"design {d.name}, workload {w.label or w.scenario}", str(e)) from None
            out.append(
                Case(
                    workload=w.label or scenario.name,
                    design=d.name,
                    weight=w.weight,
                    model=r.model,
                    scenario=r.scenario,
                    system=r.system,
                    ttft_slo_s=w.ttft_slo,
                    tpot_slo_s=w.tpot_slo,
                )
            )
    return out


def compare_hardware(
    designs: Sequence[str],
    suite: str = "representative",
    objective: str = "performance",
    step: float = 0.1,
    constraint: float = 0.5,
    refine: int = 2,
    progress: Callable[[str], None] | None = None,
    ray: str | None = None,
) -> Comparison:
    """Compare designs over a suite (built-in name or file): best plans, elasticities, flexibility.

    ``ray``: analyse the cases on Ray (:mod:`aitrinity.ray_backend`), a local instance ("") or the cluster at that
    address; each case travels as plain JSON (the suite, the designs, its index) and comes back as JSON."""
    s, parsed, base = _prepare(designs, suite, objective, step, constraint)
    goal = HARDWARE_OBJECTIVES[objective]
    if ray is None:
        return compare(cases(s, parsed, base), s.name, goal, step, constraint, refine, progress)
    from aitrinity import ray_backend

    n = len(parsed) * len(s.workloads)
    job = {
        "suite": _portable(suite),
        "designs": [_portable(d) for d in designs],
        "objective": objective,
        "step": step,
        "constraint": constraint,
        "refine": refine,
    }
    jobs = [{**job, "case": i} for i in range(n)]

    def tick(done: int, total: int) -> None:
        if progress:
            progress(f"{done} of {total} design x workload cases")

    out = ray_backend.run_sweep(jobs, ray or None, progress=tick, kind="hardware")
    results = [WorkloadResult.model_validate(o["result"]) for o in out]
    replans = sum(int(o["replans"]) for o in out)
    return comparison(s.name, goal, step, constraint, results, replans)


def _portable(ref: str) -> str:
    """A file argument as an absolute path (a Ray worker runs elsewhere); a name as it is."""
    return str(Path(ref).resolve()) if ref.endswith((".yaml", ".yml")) and is_file(Path(ref)) else ref


@functools.lru_cache(maxsize=4)
def _cases_of(suite: str, designs: tuple[str, ...]) -> list[Case]:
    s, parsed, base = _prepare(designs, suite, "performance", 0.1, 0.5)
    return cases(s, parsed, base)


def hardware_case(job: dict[str, Any]) -> dict[str, Any]:
    """One design x workload case of a comparison, run where a Ray task runs it: its result and re-plans as JSON
    (the cases of a suite and designs are resolved once per worker process)."""
    replans = [0]

    def tick() -> None:
        replans[0] += 1

    case = _cases_of(job["suite"], tuple(job["designs"]))[job["case"]]
    objective = HARDWARE_OBJECTIVES[job["objective"]]
    r = analyse(case, objective, job["step"], job["constraint"], job["refine"], tick)
    return {"result": r.model_dump(mode="json"), "replans": replans[0]}


def _prepare(
    designs: Sequence[str], suite: str, objective: str, step: float, constraint: float
) -> tuple[Suite, list[Design], Path | None]:
    if not designs:
        raise SpecError("designs", None, "at least one design (e.g. h100-sxm h200)")
    if objective not in HARDWARE_OBJECTIVES:
        raise SpecError("--objective", objective, f"one of {', '.join(HARDWARE_OBJECTIVES)}")
    if not 0 < step <= 1:
        raise SpecError("--step", step, "a fraction in (0, 1], e.g. 0.1 for +10%")
    if not 0 < constraint < 1:
        raise SpecError("--constraint", constraint, "a factor in (0, 1), e.g. 0.5 to halve each resource")
    s = catalog.suite(suite)
    base = Path(suite).resolve().parent if is_file(suite) else None
    parsed = [parse_design(d) for d in designs]
    names = [d.name for d in parsed]
    if len(set(names)) != len(names):
        raise SpecError("designs", ", ".join(names), "distinct design names")
    return s, parsed, base
