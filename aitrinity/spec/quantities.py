"""Quantities of a resolved System that what-ifs change: how to read, write and parse each one.

The one table behind ``--set inter_node_bandwidth=...``, the hardware what-if's elasticities and design
edits; :func:`scale` is the pure transform the planner's what-if uses (no string parsing here).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from aitrinity import units
from aitrinity.errors import SpecError
from aitrinity.spec.scenario import System


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
    return system.model_copy(update={"price_per_device_hour_usd": value})


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


def checked(key: str, text: object, v: float) -> float:
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
    return q.put(system, checked(key, f"x{factor:g}", current * factor))
