import math

import pytest

from aitrinity import units
from aitrinity.errors import UnitError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80 GiB", 80 * 2**30),
        ("80GB", 80e9),
        ("1.5 TB", 1.5e12),
        ("512 KiB", 512 * 1024),
        ("4096", 4096),
        (4096, 4096),
        ("2 TiB", 2 * 2**40),
        ("1,024 MB", 1.024e9),
    ],
)
def test_bytes(text, expected):
    assert units.parse_bytes(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.35 TB/s", 3.35e12),
        ("900 GB/s", 900e9),
        ("400 Gbit/s", 50e9),  # bits -> bytes
        ("400 Gb/s", 50e9),
        ("25 Gbps", 25e9 / 8),
        ("100mbit", 100e6 / 8),
        ("12 GiB/s", 12 * 2**30),
        (1e9, 1e9),
    ],
)
def test_bandwidth(text, expected):
    assert units.parse_bandwidth(text) == pytest.approx(expected, rel=1e-15)


def test_flops_power_price_time():
    assert units.parse_flops("989 TFLOPS") == pytest.approx(989e12)
    assert units.parse_flops("1.5 PFLOP/s") == pytest.approx(1.5e15)
    assert units.parse_flops("624 TOPS") == pytest.approx(624e12)
    assert units.parse_power("700 W") == 700
    assert units.parse_power("1.2 kW") == pytest.approx(1200)
    assert units.parse_price_per_hour("$2.50/h") == 2.5
    assert units.parse_price_per_hour("2.5 $/h") == 2.5
    assert units.parse_price_per_hour("$1.2/hour") == 1.2
    assert units.parse_time("2 µs") == pytest.approx(2e-6)
    assert units.parse_time("1.5 ms") == pytest.approx(1.5e-3)
    assert units.parse_time("2 h") == 7200


@pytest.mark.parametrize(
    ("fn", "text"),
    [
        (units.parse_bytes, "80 parsecs"),
        (units.parse_bytes, "GB"),
        (units.parse_bytes, "1e999 GB"),
        (units.parse_bandwidth, "10 GB"),  # a size is not a rate... unless /s
        (units.parse_flops, "10 GB/s"),
        (units.parse_power, "3 J"),
        (units.parse_price_per_hour, "2.5/h"),  # no currency
        (units.parse_time, "3 years"),
        (units.parse_bytes, True),
    ],
)
def test_rejects(fn, text):
    with pytest.raises(UnitError):
        fn(text)


@pytest.mark.parametrize(
    ("fn", "text"),
    [
        (units.parse_bytes, "-1GiB"),
        (units.parse_bytes, -1),
        (units.parse_bandwidth, "-5 Gbit/s"),
        (units.parse_flops, "-1 TFLOPS"),
        (units.parse_power, "-700 W"),
        (units.parse_time, "-1s"),
        (units.parse_count, "-3M"),
        (units.parse_count, "-1"),
        (units.parse_price_per_hour, -5),  # was read, and priced every run at a negative cost
    ],
)
def test_a_negative_quantity_is_refused_with_what_it_should_be(fn, text):
    """``kv replay --capacity -1`` printed a replay of -512 tokens: no size, rate, time or count is below 0."""
    with pytest.raises(UnitError, match=r"is negative: expected .* of at least 0"):
        fn(text)
    assert fn(str(text).lstrip("-")) >= 0 if isinstance(text, str) else fn(-text) >= 0


@pytest.mark.parametrize(
    ("fn", "text"),
    [
        (units.parse_power, "1e300"),  # made a run's joules infinite, and the JSON unwritable
        (units.parse_power, "1e300 W"),
        (units.parse_price_per_hour, "$1e300/h"),
        (units.parse_bytes, "1e40 B"),
        (units.parse_bandwidth, "1e-40 B/s"),  # a transfer would take 1e40 s
        (units.parse_time, "1e-31 s"),
        (units.parse_flops, "1e31 FLOPS"),
    ],
)
def test_a_quantity_beyond_any_physical_magnitude_is_refused(fn, text):
    with pytest.raises(UnitError, match=r"is out of range: expected .* of 0 or between 1e-30 and 1e\+30 in SI units"):
        fn(text)


def test_a_negative_price_in_text_is_refused_too():
    with pytest.raises(UnitError, match="is negative"):
        units.parse_price_per_hour("$-2.5/h")


def test_zero_and_the_edges_of_the_range_are_read():
    assert units.parse_time("0 s") == 0.0
    assert units.parse_price_per_hour("$0/h") == 0.0
    assert units.parse_bytes("1e30 B") == 1e30
    assert units.parse_time("1e-30 s") == 1e-30


def test_bandwidth_without_per_second_is_rejected_for_sizes():
    # "10 GB" is a size, and parse_bandwidth accepts a bare prefix+unit only with /s, ps or a bit unit
    with pytest.raises(UnitError):
        units.parse_bandwidth("10 GiB")


def test_format_states_convention():
    assert units.format_bytes(80 * 2**30) == "80 GiB"
    assert units.format_bytes(120e9, binary=False) == "120 GB"
    assert units.format_bandwidth(3.35e12) == "3.35 TB/s"
    assert units.format_time(0.0123) == "12.3 ms"
    assert units.format_time(3 * 86400) == "3 d"
    assert units.format_time(math.inf) == "inf"
    assert units.format_money(1234.5) == "$1,234"
    assert units.format_energy(7.2e6) == "2 kWh"
    assert units.format_count(70.55e9) == "70.5B"


def test_resolved_quantities_carry_their_unit_in_their_name():
    """DESIGN's convention: a resolved figure is SI and says its unit (``power_per_device_W``, the device's
    ``price_per_hour_usd``); a scenario's input field takes a quantity with its unit in the value ("$2/h", "700W")."""
    from aitrinity.spec.hardware import DeviceSpec, LinkSpec, MemoryTierSpec
    from aitrinity.spec.scenario import System

    units_ = ("_usd", "_W", "_Bps", "_s", "_bytes")
    dimensionless = {"overlap_fraction", "comm_sm_share", "usable_memory_fraction", "efficiency"}
    for cls in (System, DeviceSpec, LinkSpec, MemoryTierSpec):
        for name, field in cls.model_fields.items():
            scalar = "float" in str(field.annotation) and not str(field.annotation).startswith("dict")
            if scalar and name not in dimensionless:
                assert name.endswith(units_), f"{cls.__name__}.{name}"
