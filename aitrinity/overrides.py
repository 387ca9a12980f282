"""What-if overrides: ``--set KEY=VALUE`` applied to a scenario before it is diagnosed.

Keys are either

* scenario fields as dotted paths, validated exactly like the file itself:
  ``system.num_devices=512``, ``plan.tp=4``, ``workload.serving.batch=32``,
  ``system.inter_node_link=ethernet-100g``;
* quantities of the resolved hardware: ``inter_node_bandwidth``,
  ``intra_node_bandwidth``, ``host_bandwidth``, ``hbm_bandwidth`` (e.g.
  ``100Gbit/s``), ``hbm_capacity`` (``141GiB``) and ``flops_scale`` (a factor on
  every peak FLOP/s figure);
* shorthands: ``gpus`` for ``system.num_devices``; ``link`` for
  ``inter_node_bandwidth`` when the value is a bandwidth, else for
  ``system.inter_node_link``.

Values are read as YAML scalars (``4`` is a number, ``true`` a boolean).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from aitrinity import units
from aitrinity.errors import SpecError, UnitError
from aitrinity.spec.scenario import System

SECTIONS = ("name", "description", "system", "workload", "plan")


@dataclass(frozen=True)
class Override:
    key: str
    value: str


def parse(text: str) -> Override:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise SpecError("--set", text, "KEY=VALUE, e.g. gpus=512 or link=100Gbit/s")
    return Override(key.strip(), value.strip())


def _scalar(value: str) -> Any:
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _is_bandwidth(value: str) -> bool:
    try:
        units.parse_bandwidth(value)
    except UnitError:
        return False
    return not value.replace(".", "", 1).isdigit()  # a bare number is not a bandwidth here


def _expand(o: Override) -> Override:
    if o.key == "gpus":
        return Override("system.num_devices", o.value)
    if o.key == "link":
        return Override("inter_node_bandwidth" if _is_bandwidth(o.value) else "system.inter_node_link", o.value)
    return o


def _link_bw(field: str) -> Callable[[System, str], System]:
    def apply(system: System, value: str) -> System:
        link = getattr(system, field)
        if link is None:
            raise SpecError(f"system.{field}", None, "a link to override (this system has none)")
        new = link.model_copy(update={"bandwidth_Bps": units.parse_bandwidth(value)})
        return system.model_copy(update={field: new})

    return apply


def _device(field: str, parse: Callable[[str], float]) -> Callable[[System, str], System]:
    def apply(system: System, value: str) -> System:
        return system.model_copy(update={"device": system.device.model_copy(update={field: parse(value)})})

    return apply


def _flops_scale(system: System, value: str) -> System:
    k = float(value)
    if k <= 0:
        raise SpecError("flops_scale", value, "a positive factor")
    flops = {dt: f * k for dt, f in system.device.peak_flops.items()}
    return system.model_copy(update={"device": system.device.model_copy(update={"peak_flops": flops})})


HARDWARE: dict[str, Callable[[System, str], System]] = {
    "inter_node_bandwidth": _link_bw("inter_node_link"),
    "intra_node_bandwidth": _link_bw("intra_node_link"),
    "host_bandwidth": _link_bw("host_link"),
    "hbm_bandwidth": _device("memory_bandwidth_Bps", units.parse_bandwidth),
    "hbm_capacity": _device("memory_capacity_bytes", units.parse_bytes),
    "flops_scale": _flops_scale,
}


def split(overrides: Sequence[Override]) -> tuple[list[Override], list[Override]]:
    """(scenario-field overrides, hardware overrides), shorthands expanded, unknown keys rejected."""
    fields, hardware = [], []
    for o in map(_expand, overrides):
        if o.key in HARDWARE:
            hardware.append(o)
        elif o.key.split(".")[0] in SECTIONS:
            fields.append(o)
        else:
            raise SpecError(
                "--set",
                o.key,
                f"a scenario field (system.num_devices, plan.tp, ...) or one of gpus, link, {', '.join(HARDWARE)}",
            )
    return fields, hardware


def apply_fields(data: dict[str, Any], overrides: Sequence[Override]) -> dict[str, Any]:
    """A copy of the scenario data with dotted fields set (validated later, with the rest)."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(data))  # deep copy of plain data
    for o in overrides:
        node = out
        *path, last = o.key.split(".")
        for part in path:
            nxt = node.get(part) if isinstance(node, dict) else None
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise SpecError(o.key, o.value, f"a path into the scenario ({part} is not a section)")
            node = nxt
        node[last] = _scalar(o.value)
    return out


def apply_hardware(system: System, overrides: Sequence[Override]) -> System:
    for o in overrides:
        try:
            system = HARDWARE[o.key](system, o.value)
        except SpecError:
            raise
        except (UnitError, ValueError) as e:
            raise SpecError.at(o.key, str(e)) from None
    return system
