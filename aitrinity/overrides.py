"""What-if overrides: ``--set KEY=VALUE`` applied to a scenario before it is diagnosed.

Keys are either

* scenario fields as dotted paths, validated exactly like the file itself:
  ``system.num_devices=512``, ``plan.tp=4``, ``workload.serving.batch=32``,
  ``system.inter_node_link=ethernet-100g``; a list entry by its index:
  ``plan.exchanges.1.steps_factor=1.5``;
* quantities of the resolved hardware (:data:`aitrinity.spec.quantities.QUANTITIES`): ``inter_node_bandwidth``,
  ``intra_node_bandwidth``, ``host_bandwidth``, ``hbm_bandwidth`` (e.g.
  ``100Gbit/s``), ``hbm_capacity`` (``141GiB``), ``host_capacity``, ``price``
  (``$3.50/h`` per device), ``power`` (``700W``) and ``flops`` (relative only).
  Each takes an absolute value or a relative one: ``x0.5`` (also ``*0.5``,
  ``×0.5``) or ``+50%`` / ``-20%``. ``flops_scale=K`` means ``flops=xK``;
* shorthands: ``gpus`` for ``system.num_devices``; ``model`` for ``workload.model`` (another model on the same
  system and plan: ``model=qwen3-30b-a3b``); ``link`` for ``inter_node_bandwidth`` when the value is a bandwidth,
  else for ``system.inter_node_link``. (Another device is ``trinity hardware compare``'s question: it changes the
  links and node size with it.)

Values are read as YAML scalars (``4`` is a number, ``true`` a boolean).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from aitrinity import units
from aitrinity.errors import SpecError, UnitError
from aitrinity.spec.quantities import QUANTITIES, checked, scale
from aitrinity.spec.scenario import System

__all__ = ["QUANTITIES", "Override", "apply_fields", "apply_hardware", "parse", "relative", "scale", "split"]

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
    """``value`` has a bandwidth's form (its sign aside: a negative one is refused as a bandwidth, not as a name)."""
    try:
        units.parse_bandwidth(value.strip().lstrip("-"))
    except UnitError:
        return False
    return not value.replace(".", "", 1).isdigit()  # a bare number is not a bandwidth here


def _expand(o: Override) -> Override:
    if o.key == "gpus":
        return Override("system.num_devices", o.value)
    if o.key == "model":
        return Override("workload.model", o.value)
    if o.key == "link":
        return Override("inter_node_bandwidth" if _is_bandwidth(o.value) else "system.inter_node_link", o.value)
    return o


def relative(value: str, key: str = "--set") -> float | None:
    """The factor a relative value means: ``x0.5`` / ``*0.5`` / ``×0.5`` -> 0.5, ``+50%`` -> 1.5; else None."""
    v = value.strip().replace(" ", "")
    try:
        if v[:1] in ("x", "*", "×"):
            k = float(v[1:])
        elif v.endswith("%") and v[:1] in ("+", "-"):
            k = 1.0 + float(v[:-1]) / 100.0
        else:
            return None
    except ValueError:
        raise SpecError(key, value, "a factor such as x0.5, or a change such as +50%") from None
    if not (k > 0 and math.isfinite(k)):
        raise SpecError(key, value, "a finite factor that leaves the quantity positive")
    return k


def set_quantity(system: System, key: str, value: str) -> System:
    """``system`` with one quantity set to an absolute or relative ``value``."""
    factor = relative(value, key)
    if factor is not None:
        return scale(system, key, factor)
    q = QUANTITIES[key]
    if q.parse is None:
        raise SpecError(key, value, "a relative value such as x1.5 or +20%")
    return q.put(system, checked(key, value, q.parse(value)))


def _hardware_key(key: str) -> str | None:
    if key == "flops_scale":
        return key
    return key if key in QUANTITIES else None


def split(overrides: Sequence[Override]) -> tuple[list[Override], list[Override]]:
    """(scenario-field overrides, hardware overrides), shorthands expanded, unknown keys rejected."""
    fields, hardware = [], []
    for o in map(_expand, overrides):
        if _hardware_key(o.key):
            hardware.append(o)
        elif o.key.split(".")[0] in SECTIONS:
            fields.append(o)
        else:
            raise SpecError(
                "--set",
                o.key,
                "a scenario field (system.num_devices, plan.tp, ...) or one of gpus, model, link, "
                + ", ".join(QUANTITIES),
            )
    return fields, hardware


def apply_fields(data: dict[str, Any], overrides: Sequence[Override]) -> dict[str, Any]:
    """A copy of the scenario data with dotted fields set (validated later, with the rest)."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(data))  # deep copy of plain data
    for o in overrides:
        node: Any = out
        *path, last = o.key.split(".")
        for part in path:
            if isinstance(node, list):  # an entry of a list, by its index: plan.exchanges.1.steps_factor
                node = _entry(node, part, o)
                continue
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict | list):
                raise SpecError(o.key, o.value, f"a path into the scenario ({part} is not a section)")
            node = nxt
        if isinstance(node, list):
            raise SpecError(o.key, o.value, f"a field of one entry ({'.'.join(path)}.N.FIELD), not a whole entry")
        node[last] = _scalar(o.value)
    return out


def _entry(items: list[Any], part: str, o: Override) -> dict[str, Any]:
    if not part.isdigit() or int(part) >= len(items):
        raise SpecError(o.key, o.value, f"an entry index 0-{len(items) - 1} ({len(items)} in the list)")
    entry = items[int(part)]
    if not isinstance(entry, dict):
        raise SpecError(o.key, o.value, "an entry with fields")
    return entry


def apply_hardware(system: System, overrides: Sequence[Override]) -> System:
    for o in overrides:
        try:
            if o.key == "flops_scale":
                system = scale(system, "flops", relative(f"x{o.value}", o.key) or 1.0)
            else:
                system = set_quantity(system, o.key, o.value)
        except SpecError:
            raise
        except (UnitError, ValueError) as e:
            raise SpecError.at(o.key, str(e)) from None
    return system
