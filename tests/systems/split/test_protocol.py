"""The wire format: round trips, and any malformed, truncated, oversized or inconsistent input is a
ProtocolError with a reason -- never another exception (fuzzed)."""

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitrinity.cost.edge import message_bytes, payload_bytes
from aitrinity.systems.split import protocol as p

FRAME = p.Message(p.FRAME, 7, 3, "int8", "none", (1, 4, 2, 2), bytes(payload_bytes(16, "int8")))
GOOD = p.pack(FRAME)


def test_round_trip_and_size():
    m = p.parse(GOOD)
    assert m == p.Message(p.FRAME, 7, 3, "int8", "none", (1, 4, 2, 2), FRAME.payload, len(FRAME.payload))
    assert len(GOOD) == message_bytes(len(FRAME.payload), 4)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda b: b"XXXX" + b[4:], "bad magic"),
        (lambda b: b[:4] + bytes([9]) + b[5:], "unsupported protocol version"),
        (lambda b: b[:5] + bytes([77]) + b[6:], "unknown message type"),
        (lambda b: b[:6] + bytes([99]) + b[7:], "unknown codec"),
        (lambda b: b[:9] + b"\1" + b[10:], "reserved"),
        (lambda b: b[:-1], "truncated"),
        (lambda b: b[:20], "truncated"),
        (lambda b: b + b"\0", "trailing"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "checksum"),
        (lambda b: b[:24] + struct.pack("<I", 10**9) + b[28:], "oversized"),
        (lambda b: b[:28] + struct.pack("<I", 5) + b[32:], "raw length"),
    ],
)
def test_malformed_messages_are_rejected_with_the_reason(mutate, reason):
    with pytest.raises(p.ProtocolError, match=reason):
        p.parse(mutate(GOOD))


def test_an_oversized_message_is_refused_before_its_payload_is_read():
    big = p.pack(p.Message(p.PROBE, payload=bytes(5000)))
    read = []

    def reader(n):
        read.append(n)
        return big[sum(read[:-1]) : sum(read)]

    with pytest.raises(p.ProtocolError, match="oversized"):
        p.read_message(reader, max_payload=4096)
    assert sum(read) == p.MESSAGE_FIXED_BYTES


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.booleans())
def test_random_bytes_never_crash_the_parser(data, with_magic):
    with contextlib.suppress(p.ProtocolError):  # a valid-looking start gets the fuzz past the magic check
        p.parse((p.MAGIC + bytes([p.VERSION]) if with_magic else b"") + data)


@settings(max_examples=400, deadline=None)
@given(pos=st.integers(0, len(GOOD) - 1), value=st.integers(0, 255), cut=st.integers(0, len(GOOD)))
def test_mutated_and_cut_messages_never_crash_the_parser(pos, value, cut):
    data = bytearray(GOOD)
    data[pos] = value
    for candidate in (bytes(data), bytes(data[:cut])):
        try:
            m = p.parse(candidate)
        except p.ProtocolError:
            continue
        assert m == p.parse(GOOD)  # only an unchanged message parses
