"""The catalog: validated data files for devices, links, memory tiers, models, DNNs, scenarios and workload suites."""

from aitrinity.catalog.loader import (
    KINDS,
    canonical,
    device,
    dnn,
    entry,
    link,
    load_scenario,
    model,
    names,
    resolve_system,
    scenario,
    suite,
    tier,
)

__all__ = [
    "KINDS",
    "canonical",
    "device",
    "dnn",
    "entry",
    "link",
    "load_scenario",
    "model",
    "names",
    "resolve_system",
    "scenario",
    "suite",
    "tier",
]
