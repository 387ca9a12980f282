"""The only place that parses and formats quantities.

Everything inside aitrinity is SI in base units: bytes, seconds, FLOP, bytes/s,
FLOP/s, watts, joules, US dollars. Inputs may be human strings:

=============  ==========================================================
dimension      accepted examples
=============  ==========================================================
bytes          ``80 GiB``, ``80GB``, ``1.5 TB``, ``512 KiB``, ``4096``
bandwidth      ``3.35 TB/s``, ``900 GB/s``, ``400 Gbit/s``, ``25 Gbps``,
               ``100mbit``, ``12 GiB/s``
flop rate      ``989 TFLOPS``, ``989 TFLOP/s``, ``1.5 PFLOPS``, ``624 TOPS``
power          ``700 W``, ``1.2 kW``
price          ``$2.50/h``, ``2.5 $/h``, ``$2.50/hr``, ``$1.2/hour``
time           ``5 us``, ``2 µs``, ``1.5 ms``, ``3 s``, ``2 h``
=============  ==========================================================

Decimal prefixes (k, M, G, T, P) are powers of 1000, binary prefixes (Ki, Mi,
Gi, Ti, Pi) powers of 1024 -- always, never guessed from context. In
bandwidth a lower-case ``b``/``bit`` is a bit and an upper-case ``B`` a byte.
Formatting functions say which convention they use in the unit they print.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from aitrinity.errors import UnitError

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}

_NUM = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_QTY = re.compile(rf"^\s*{_NUM}\s*(?P<unit>.*?)\s*$")

Quantity = object  # a str, int or float; anything else raises UnitError


def _split(text: str, what: str) -> tuple[float, str]:
    m = _QTY.match(text.replace(",", "").replace("_", ""))
    if not m:
        raise UnitError(f"cannot read {text!r} as {what}")
    return float(m.group("num")), m.group("unit")


def _scale(prefix: str) -> float:
    """Multiplier of a prefix: ``Gi`` -> 2**30 (binary), ``G``/``g`` -> 1e9 (decimal).

    Lower-case single letters are read as decimal prefixes ("mbit", "gbps" are
    common in tooling); milli is never meant for a size or a rate.
    """
    if prefix.endswith("i"):
        return _BIN[prefix[0].upper() + "i"]
    return _DEC[prefix if prefix in ("", "k") else prefix.upper()]


def _number_or_text(value: object, what: str) -> float | str:
    """A plain number as float, a string as-is; anything else (None, bool, list) is an error."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UnitError(f"{value!r} is not {what}")
    return float(value) if isinstance(value, int | float) else value


def _finite(x: float, text: object, what: str) -> float:
    if not math.isfinite(x):
        raise UnitError(f"{text!r} is not a finite {what}")
    return x


UnitScale = Callable[[str, str], float | None]
"""(unit, original text) -> multiplier to SI, or None if the unit is not of this dimension."""


def _parse(value: Quantity, what: str, scale: UnitScale, hint: str) -> float:
    """Shared grammar: a plain number is already SI; else ``<number> <unit>`` with ``scale(unit)``. Every quantity
    read this way (a size, a bandwidth, a time, a rate, a price, a power) is 0 or within :data:`SI_RANGE`."""
    v = _number_or_text(value, what)
    if isinstance(v, float):
        return _in_range(_finite(v, value, what), value, what)
    num, unit = _split(v, what)
    factor = 1.0 if unit == "" else scale(unit, v)
    if factor is None:
        raise UnitError(f"cannot read {value!r} as {what}: {hint}")
    return _in_range(_finite(num * factor, value, what), value, what)


SI_RANGE = (1e-30, 1e30)
"""The magnitudes a quantity may take in SI units, 0 aside: far beyond anything physical at either end (a yottabyte is
1e24 B, a zettaflop 1e21 FLOP/s, a megawatt 1e6 W), so that the products a cost model forms -- power x devices x
seconds x steps -- stay finite (a power of 1e300 W made the energy of a run infinite, and the JSON unwritable)."""


def _in_range(x: float, text: object, what: str) -> float:
    if x < 0:
        raise UnitError(f"{text!r} is negative: expected {what} of at least 0")
    lo, hi = SI_RANGE
    if x and not lo <= x <= hi:
        raise UnitError(f"{text!r} is out of range: expected {what} of 0 or between {lo:g} and {hi:g} in SI units")
    return x


_BYTES = re.compile(r"^(?P<p>[kKMGTPE]i?|)(?:B|byte|bytes)$")


def _bytes_unit(unit: str, text: str) -> float | None:
    m = _BYTES.match(unit)
    return _scale(m.group("p")) if m else None


def parse_bytes(value: Quantity) -> float:
    """Bytes from ``"80 GiB"`` (binary), ``"80 GB"`` (decimal) or a plain number."""
    return _parse(value, "a size in bytes", _bytes_unit, "use B, kB, MB, GB, TB or KiB, MiB, GiB, TiB")


_RATE = re.compile(r"^(?P<p>[kKmMgGtTpP]i?|)(?P<base>B|b|bit|bits|byte|bytes)(?P<per>/s|ps|/sec)?$")


def _rate_unit(unit: str, text: str) -> float | None:
    m = _RATE.match(unit)
    if not m:
        return None
    bits = m.group("base") in ("b", "bit", "bits")
    if not bits and not m.group("per"):
        raise UnitError(f"{text!r} is a size, not a bandwidth: add '/s' (e.g. '{text}/s')")
    return _scale(m.group("p")) / (8.0 if bits else 1.0)


def parse_bandwidth(value: Quantity) -> float:
    """Bytes per second from ``"3.35 TB/s"``, ``"400 Gbit/s"``, ``"25 Gbps"``, ``"100mbit"``.

    ``B`` is a byte, ``b``/``bit`` a bit; a plain number is bytes/s. Byte units need
    ``/s`` (``"10 GB"`` is a size); bit units may omit it, as tc does (``100mbit``).
    """
    return _parse(value, "a bandwidth", _rate_unit, "use e.g. '900 GB/s', '400 Gbit/s', '25 Gbps'")


_FLOPS = re.compile(r"^(?P<p>[kKMGTPE]?)(?:FLOPS|FLOP/s|flops|flop/s|OPS|OP/s|ops|FLOP/S)$")


def _flops_unit(unit: str, text: str) -> float | None:
    m = _FLOPS.match(unit)
    return _DEC[m.group("p")] if m else None


def parse_flops(value: Quantity) -> float:
    """FLOP/s (or integer OP/s) from ``"989 TFLOPS"``, ``"1.5 PFLOP/s"``, ``"624 TOPS"``."""
    return _parse(value, "a FLOP rate", _flops_unit, "use e.g. '989 TFLOPS' or '624 TOPS'")


_POWER = re.compile(r"^(?P<p>[kMG]?)W$")


def _power_unit(unit: str, text: str) -> float | None:
    m = _POWER.match(unit)
    return _DEC[m.group("p")] if m else None


def parse_power(value: Quantity) -> float:
    """Watts from ``"700 W"`` or ``"1.2 kW"``."""
    return _parse(value, "a power", _power_unit, "use e.g. '700 W' or '1.2 kW'")


_TIME = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0,
    "min": 60.0, "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0,
}  # fmt: skip


def parse_time(value: Quantity) -> float:
    """Seconds from ``"5 us"``, ``"1.5 ms"``, ``"2 h"`` or a plain number of seconds."""
    return _parse(value, "a time", lambda unit, _: _TIME.get(unit), "use ns, us, ms, s, min, h")


def parse_count(value: Quantity) -> float:
    """A plain count with an optional decimal suffix: ``3M`` = 3e6, ``500k``, ``1.5G``, ``4096``."""
    return _parse(
        value,
        "a count",
        lambda unit, _: _DEC.get(unit) if unit in ("k", "K", "M", "G", "T") else None,
        "use a number with an optional k, M, G or T",
    )


_PRICE = re.compile(r"^\s*(?P<pre>\$?)\s*" + _NUM + r"\s*(?P<post>\$|USD)?\s*/\s*(?P<per>h|hr|hour)\s*$")


def parse_price_per_hour(value: Quantity) -> float:
    """US dollars per hour from ``"$2.50/h"``, ``"2.5 $/h"`` or a plain number."""
    v = _number_or_text(value, "a price per hour")
    if isinstance(v, float):
        return _in_range(_finite(v, value, "price"), value, "a price per hour")
    m = _PRICE.match(v)
    if not m or not (m.group("pre") or m.group("post")):
        raise UnitError(f"cannot read {value!r} as a price: use e.g. '$2.50/h'")
    return _in_range(_finite(float(m.group("num")), value, "price"), value, "a price per hour")


# ----------------------------------------------------------------------------- formatting

_DEC_STEPS = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
_BIN_STEPS = [(2.0**50, "Pi"), (2.0**40, "Ti"), (2.0**30, "Gi"), (2.0**20, "Mi"), (2.0**10, "Ki"), (1.0, "")]


def _scaled(x: float, steps: list[tuple[float, str]], unit: str, digits: int) -> str:
    if x == 0 or not math.isfinite(x):
        return f"{x:g} {unit}"
    for scale, prefix in steps:
        if abs(x) >= scale:
            return f"{x / scale:.{digits}g} {prefix}{unit}"
    scale, prefix = steps[-1]
    return f"{x / scale:.{digits}g} {prefix}{unit}"


def format_bytes(n: float, *, binary: bool = True, digits: int = 3) -> str:
    """``format_bytes(80 * 2**30) == '80 GiB'``; ``binary=False`` prints GB (10^9)."""
    return _scaled(n, _BIN_STEPS if binary else _DEC_STEPS, "B", digits)


def format_bandwidth(bps: float, *, digits: int = 3) -> str:
    """Decimal bytes per second: ``'3.35 TB/s'``."""
    return _scaled(bps, _DEC_STEPS, "B/s", digits)


def format_flops(flops: float, *, digits: int = 3) -> str:
    """A FLOP count with a decimal prefix: ``'3.14e+23 FLOP'`` for huge ones."""
    if abs(flops) >= 1e18:
        return f"{flops:.{digits}g} FLOP"
    return _scaled(flops, _DEC_STEPS, "FLOP", digits)


def format_flop_rate(rate: float, *, digits: int = 3) -> str:
    return _scaled(rate, _DEC_STEPS, "FLOP/s", digits)


def format_time(s: float, *, digits: int = 3) -> str:
    """Seconds with a readable unit: ns, µs, ms, s, min, h, d."""
    if not math.isfinite(s):
        return "inf"
    a = abs(s)
    if a == 0:
        return "0 s"
    for limit, scale, unit in (
        (1e-6, 1e-9, "ns"),
        (1e-3, 1e-6, "µs"),
        (1.0, 1e-3, "ms"),
        (120.0, 1.0, "s"),
        (7200.0, 60.0, "min"),
        (172800.0, 3600.0, "h"),
    ):
        if a < limit:
            return f"{s / scale:.{digits}g} {unit}"
    return f"{s / 86400.0:.{digits}g} d"


def format_money(usd: float) -> str:
    if abs(usd) >= 100:
        return f"${usd:,.0f}"
    if abs(usd) >= 0.01:
        return f"${usd:.2f}"
    return f"${usd:.3g}"


def format_energy(j: float, *, digits: int = 3) -> str:
    """Joules, switching to kWh above 3.6 MJ."""
    if abs(j) >= 3.6e6:
        return f"{j / 3.6e6:.{digits}g} kWh"
    return _scaled(j, _DEC_STEPS, "J", digits)


def format_count(n: float, *, digits: int = 3) -> str:
    """A count with a decimal suffix: 70.6B, 12.9M."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.{digits}g}{suffix}"
    return f"{n:.{digits}g}"
