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

from collections.abc import Callable, Sequence
from pathlib import Path

from aitrinity import catalog
from aitrinity.api import resolve
from aitrinity.catalog.loader import is_file, read_yaml
from aitrinity.errors import SpecError
from aitrinity.plan.whatif import HARDWARE_OBJECTIVES, Case, Comparison, compare
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
) -> Comparison:
    """Compare designs over a suite (built-in name or file): best plans, elasticities, flexibility."""
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
    return compare(cases(s, parsed, base), s.name, HARDWARE_OBJECTIVES[objective], step, constraint, refine, progress)
