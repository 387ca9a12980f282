"""The split runtime's wire format: versioned, length-prefixed binary messages with a checksum (no pickle).

::

    offset size  field (little-endian)
         0    4  magic b"TSPL"
         4    1  version (1)
         5    1  type: 1 frame, 2 result, 3 error, 4 probe, 5 probe ack
         6    1  codec: 0 fp32, 1 fp16, 2 int8, 3 int4, 4 raw (uint8)
         7    1  lossless: 0 none, 1 zstd, 2 lz4
         8    1  ndim (0..8)
         9    3  reserved, zero
        12    8  frame id
        20    2  split point (the first node the receiver runs)
        22    2  reserved, zero
        24    4  payload length (bytes on the wire after the shape)
        28    4  raw length (the payload before lossless compression)
        32    8  XXH3-64 of bytes 0..31, the shape and the payload
        40  4*n  shape (uint32 each)
         .       payload

40 + 4 x ndim + payload bytes in all: :func:`aitrinity.cost.edge.message_bytes`.
A reader checks, before it allocates anything, that the payload is within
its limit and consistent with the shape and codec; then the checksum; it
raises :class:`ProtocolError` with the reason, never anything else.
"""

from __future__ import annotations

import math
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

import xxhash

from aitrinity.cost.edge import MESSAGE_FIXED_BYTES, payload_bytes

MAGIC = b"TSPL"
VERSION = 1
FRAME, RESULT, ERROR, PROBE, PROBE_ACK = 1, 2, 3, 4, 5
TYPES = {FRAME: "frame", RESULT: "result", ERROR: "error", PROBE: "probe", PROBE_ACK: "probe ack"}
CODEC_IDS = {"fp32": 0, "fp16": 1, "int8": 2, "int4": 3, "raw": 4}
CODEC_NAMES = {v: k for k, v in CODEC_IDS.items()}
LOSSLESS_IDS = {"none": 0, "zstd": 1, "lz4": 2}
LOSSLESS_NAMES = {v: k for k, v in LOSSLESS_IDS.items()}
MAX_NDIM = 8
DEFAULT_MAX_PAYLOAD = 64 << 20
_HEAD = struct.Struct("<4sBBBBB3sQHHII")  # 32 bytes before the checksum
_SUM = struct.Struct("<Q")
assert _HEAD.size + _SUM.size == MESSAGE_FIXED_BYTES


class ProtocolError(ValueError):
    """A message that must be rejected; ``str()`` is the reason to log."""


@dataclass(frozen=True)
class Message:
    kind: int
    frame_id: int = 0
    split: int = 0
    codec: str = "fp32"
    lossless: str = "none"
    shape: tuple[int, ...] = ()
    payload: bytes = b""
    raw_length: int | None = None
    """Payload size before lossless compression (default: the payload's size)."""


def pack(m: Message) -> bytes:
    if len(m.shape) > MAX_NDIM:
        raise ValueError(f"at most {MAX_NDIM} dimensions")
    raw = len(m.payload) if m.raw_length is None else m.raw_length
    head = _HEAD.pack(
        MAGIC,
        VERSION,
        m.kind,
        CODEC_IDS[m.codec],
        LOSSLESS_IDS[m.lossless],
        len(m.shape),
        b"\0\0\0",
        m.frame_id,
        m.split,
        0,
        len(m.payload),
        raw,
    )
    shape = struct.pack(f"<{len(m.shape)}I", *m.shape)
    h = xxhash.xxh3_64()
    for part in (head, shape, m.payload):
        h.update(part)
    return head + _SUM.pack(h.intdigest()) + shape + m.payload


def _expected_raw(kind: int, codec: str, shape: tuple[int, ...]) -> int | None:
    """The raw payload size a tensor message must have (None: any, for error / probe)."""
    if kind in (FRAME, RESULT):
        return payload_bytes(math.prod(shape) if shape else 1, codec)
    return None


def read_message(read: Callable[[int], bytes], max_payload: int = DEFAULT_MAX_PAYLOAD) -> Message:
    """One message from ``read(n)`` (returns up to n bytes, b'' at end of stream)."""
    head = _read_exact(read, MESSAGE_FIXED_BYTES, "header")
    magic, version, kind, codec_id, ll_id, ndim, reserved, frame_id, split, reserved2, length, raw = _HEAD.unpack(
        head[: _HEAD.size]
    )
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r}")
    if version != VERSION:
        raise ProtocolError(f"unsupported protocol version {version} (this side speaks {VERSION})")
    if kind not in TYPES:
        raise ProtocolError(f"unknown message type {kind}")
    if codec_id not in CODEC_NAMES:
        raise ProtocolError(f"unknown codec id {codec_id}")
    if ll_id not in LOSSLESS_NAMES:
        raise ProtocolError(f"unknown lossless coder id {ll_id}")
    if reserved != b"\0\0\0" or reserved2:
        raise ProtocolError("reserved header bytes are not zero")
    if ndim > MAX_NDIM:
        raise ProtocolError(f"{ndim} dimensions, at most {MAX_NDIM}")
    if length > max_payload or raw > max_payload:
        raise ProtocolError(f"oversized: payload {length} / raw {raw} bytes, the limit is {max_payload}")
    codec, ll = CODEC_NAMES[codec_id], LOSSLESS_NAMES[ll_id]
    shape_bytes = _read_exact(read, 4 * ndim, "shape")
    shape = struct.unpack(f"<{ndim}I", shape_bytes)
    if any(d == 0 for d in shape):
        raise ProtocolError(f"empty dimension in shape {shape}")
    want = _expected_raw(kind, codec, shape)
    if want is not None and want != raw:
        raise ProtocolError(f"raw length {raw} does not match a {codec} tensor of shape {shape} ({want} bytes)")
    if ll == "none" and length != raw:
        raise ProtocolError(f"payload length {length} differs from raw length {raw} without compression")
    payload = _read_exact(read, length, "payload")
    h = xxhash.xxh3_64()
    for part in (head[: _HEAD.size], shape_bytes, payload):
        h.update(part)
    if _SUM.unpack(head[_HEAD.size :])[0] != h.intdigest():
        raise ProtocolError("checksum mismatch")
    return Message(kind, frame_id, split, codec, ll, tuple(shape), payload, raw)


def _read_exact(read: Callable[[int], bytes], n: int, what: str) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = read(min(n - got, 1 << 20))
        if not chunk:
            raise ProtocolError(f"truncated: the stream ended {got} of {n} bytes into the {what}")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def parse(data: bytes, max_payload: int = DEFAULT_MAX_PAYLOAD) -> Message:
    """One message from a buffer (the whole buffer must be that message)."""
    view = memoryview(data)
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        chunk = bytes(view[pos : pos + n])
        pos += len(chunk)
        return chunk

    m = read_message(read, max_payload)
    if pos != len(data):
        raise ProtocolError(f"{len(data) - pos} trailing bytes after the message")
    return m


def recv(sock: socket.socket, max_payload: int = DEFAULT_MAX_PAYLOAD) -> Message:
    """A message from a socket; a closed connection mid-message is a ProtocolError (truncated)."""
    return read_message(sock.recv, max_payload)


RESULT_FORMAT = struct.Struct("<Iff")
"""A result's payload: class (uint32), score (float32), the server's compute seconds (float32), sent as a
``raw`` message of shape (12,): 12 + 44 = 56 bytes on the wire."""
