"""What-if overrides: ``--set KEY=VALUE`` applied to a scenario before it is diagnosed.

Keys are either

* scenario fields as dotted paths, validated exactly like the file itself:
  ``system.num_devices=512``, ``plan.tp=4``, ``workload.serving.batch=32``,
  ``system.inter_node_link=ethernet-100g``;
* quantities of the resolved hardware (:data:`QUANTITIES`): ``inter_node_bandwidth``,
  ``intra_node_bandwidth``, ``host_bandwidth``, ``hbm_bandwidth`` (e.g.
  ``100Gbit/s``), ``hbm_capacity`` (``141GiB``), ``host_capacity``, ``price``
  (``$3.50/h`` per device), ``power`` (``700W``) and ``flops`` (relative only).
  Each takes an absolute value or a relative one: ``x0.5`` (also ``*0.5``,
  ``×0.5``) or ``+50%`` / ``-20%``. ``flops_scale=K`` means ``flops=xK``;
* shorthands: ``gpus`` for ``system.num_devices``; ``link`` for
  ``inter_node_bandwidth`` when the value is a bandwidth, else for
  ``system.inter_node_link``.

Values are read as YAML scalars (``4`` is a number, ``true`` a boolean).
"""

from __future__ import annotations

import math
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


@dataclass(frozen=True)
class HardwareQuantity:
    """One resolved-hardware quantity a what-if can set: how to read it, write it and parse a value."""

    key: str
    title: str
    get: Callable[[System], float | None]
    put: Callable[[System, float], System]
    parse: Callable[[str], float] | None
    """None: the quantity takes only relative values (``flops=x1.2``)."""
    resource: bool = True
    """A resource whose elasticity the hardware what-if measures (price and power are not)."""


def _link(field: str) -> tuple[Callable[[System], float | None], Callable[[System, float], System]]:
    def get(system: System) -> float | None:
        link = getattr(system, field)
        return None if link is None else float(link.bandwidth_Bps)

    def put(system: System, value: float) -> System:
        link = getattr(system, field)
        if link is None:
            raise SpecError(f"system.{field}", None, "a link to override (this system has none)")
        return system.model_copy(update={field: link.model_copy(update={"bandwidth_Bps": value})})

    return get, put


def _device(field: str) -> tuple[Callable[[System], float | None], Callable[[System, float], System]]:
    def get(system: System) -> float | None:
        return float(getattr(system.device, field))

    def put(system: System, value: float) -> System:
        return system.model_copy(update={"device": system.device.model_copy(update={field: value})})

    return get, put


def _host_capacity_get(system: System) -> float | None:
    return None if system.host_memory is None else float(system.host_memory.capacity_bytes)


def _host_capacity_put(system: System, value: float) -> System:
    if system.host_memory is None:
        raise SpecError("system.host_memory", None, "a host memory tier to override (this system has none)")
    return system.model_copy(update={"host_memory": system.host_memory.model_copy(update={"capacity_bytes": value})})


def _flops_get(system: System) -> float | None:
    return 1.0  # a factor on every dtype's peak: relative values only


def _flops_put(system: System, factor: float) -> System:
    flops = {dt: f * factor for dt, f in system.device.peak_flops.items()}
    return system.model_copy(update={"device": system.device.model_copy(update={"peak_flops": flops})})


def _price_get(system: System) -> float | None:
    return system.price_per_hour_usd


def _power_get(system: System) -> float | None:
    return system.power_W


def _price_put(system: System, value: float) -> System:
    return system.model_copy(update={"price_per_device_hour": value})


def _power_put(system: System, value: float) -> System:
    return system.model_copy(update={"power_per_device_W": value})


_Q = HardwareQuantity
_BW, _BYTES = units.parse_bandwidth, units.parse_bytes
QUANTITIES: dict[str, HardwareQuantity] = {
    q.key: q
    for q in [
        _Q("flops", "compute (peak FLOP/s)", _flops_get, _flops_put, None),
        _Q("hbm_bandwidth", "device memory bandwidth", *_device("memory_bandwidth_Bps"), _BW),
        _Q("hbm_capacity", "device memory capacity", *_device("memory_capacity_bytes"), _BYTES),
        _Q("intra_node_bandwidth", "intra-node link bandwidth", *_link("intra_node_link"), _BW),
        _Q("inter_node_bandwidth", "inter-node link bandwidth", *_link("inter_node_link"), _BW),
        _Q("host_bandwidth", "host link bandwidth", *_link("host_link"), _BW),
        _Q("host_capacity", "host memory capacity", _host_capacity_get, _host_capacity_put, _BYTES),
        _Q("price", "price per device-hour", _price_get, _price_put, units.parse_price_per_hour, False),
        _Q("power", "power per device", _power_get, _power_put, units.parse_power, False),
    ]
}
"""Hardware quantities ``--set`` and design edits accept; ``flops_scale=K`` is ``flops=xK``."""


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


def _checked(key: str, text: object, v: float) -> float:
    """A hardware quantity must stay finite and positive (a price may be zero): the one check for all of them."""
    ok = math.isfinite(v) and (v >= 0 if key == "price" else v > 0)
    if not ok:
        raise SpecError(key, text, "a finite, positive quantity" + (" (or zero)" if key == "price" else ""))
    return v


def scale(system: System, key: str, factor: float) -> System:
    """``system`` with one quantity multiplied by ``factor``."""
    q = QUANTITIES[key]
    current = q.get(system)
    if current is None:
        raise SpecError(key, None, f"a system with a {q.title} to change (this one has none)")
    return q.put(system, _checked(key, f"x{factor:g}", current * factor))


def set_quantity(system: System, key: str, value: str) -> System:
    """``system`` with one quantity set to an absolute or relative ``value``."""
    factor = relative(value, key)
    if factor is not None:
        return scale(system, key, factor)
    q = QUANTITIES[key]
    if q.parse is None:
        raise SpecError(key, value, "a relative value such as x1.5 or +20%")
    return q.put(system, _checked(key, value, q.parse(value)))


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
                f"a scenario field (system.num_devices, plan.tp, ...) or one of gpus, link, {', '.join(QUANTITIES)}",
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
            if o.key == "flops_scale":
                system = scale(system, "flops", relative(f"x{o.value}", o.key) or 1.0)
            else:
                system = set_quantity(system, o.key, o.value)
        except SpecError:
            raise
        except (UnitError, ValueError) as e:
            raise SpecError.at(o.key, str(e)) from None
    return system
