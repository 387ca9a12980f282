"""Workload suites and hardware designs: the inputs of ``trinity hardware compare``.

A **suite** is a weighted list of scenarios (built-in names or files), each
optionally rescaled with ``--set``-style edits. A **design** is a device (by
catalog name or file) plus edits of the resolved hardware in the same
language (``hbm_capacity=141GiB``, ``intra_node_bandwidth=x0.5``,
``inter_node_bandwidth=400Gbit/s``, ``price=+50%``).
"""

from __future__ import annotations

from pydantic import Field

from aitrinity.spec._base import Seconds, Spec


class SuiteWorkload(Spec):
    scenario: str
    """A built-in scenario name or a scenario file (relative to the suite file)."""
    label: str | None = None
    """Short name in tables (default: the scenario's name)."""
    weight: float = Field(default=1.0, gt=0)
    set: list[str] = []
    """``KEY=VALUE`` edits applied to the scenario (e.g. ``gpus=64``, ``workload.serving.prompt_tokens=8192``)."""
    ttft_slo: Seconds | None = None
    tpot_slo: Seconds | None = None


class Suite(Spec):
    name: str
    description: str = ""
    workloads: list[SuiteWorkload] = Field(min_length=1)


class Design(Spec):
    name: str
    device: str | None = None
    """Catalog device or device file; it also brings its platform's intra-node link. None: each scenario's own."""
    description: str = ""
    set: list[str] = []
    """Hardware edits (and scenario-field edits) applied to every workload of the suite."""
