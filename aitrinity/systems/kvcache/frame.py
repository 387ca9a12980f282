"""The bytes of one stored block: a fixed header, a short text tag and the payload, checksummed.

::

    offset  size  field
    0       4     magic b"ATKV"
    4       1     format version (1)
    5       1     reserved (0)
    6       2     tag length T (little-endian uint16)
    8       16    block key
    24      8     payload length P (uint64)
    32      8     XXH3-64 of key + tag + payload (uint64)
    40      T     tag: UTF-8 text naming the payload's layout (e.g. "float32 L4 H2 B256 D32")
    40+T    P     payload

The key is inside the checksum, so a block stored under the wrong name is
caught like a flipped bit. No pickle: the payload is raw bytes its writer
describes in the tag.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

MAGIC = b"ATKV"
VERSION = 1
HEADER = struct.Struct("<4sBBH16sQQ")
HEADER_BYTES = HEADER.size  # 40
MAX_TAG = 1024


class FrameError(Exception):
    """A stored block failed its checks (the reason says which)."""


def checksum(key: bytes, tag: bytes | bytearray | memoryview, payload: bytes | bytearray | memoryview) -> int:
    h = xxhash.xxh3_64()
    h.update(key)
    h.update(tag)
    h.update(payload)
    return h.intdigest()


def encode(key: bytes, payload: bytes | bytearray | memoryview, tag: str = "") -> bytes:
    """One contiguous frame (one copy of the payload)."""
    t = tag.encode("utf-8")
    if len(t) > MAX_TAG:
        raise ValueError(f"tag longer than {MAX_TAG} bytes")
    if len(key) != 16:
        raise ValueError("keys are 16 bytes")
    mv = memoryview(payload).cast("B")
    head = HEADER.pack(MAGIC, VERSION, 0, len(t), key, mv.nbytes, checksum(key, t, mv))
    return b"".join((head, t, mv))


@dataclass(frozen=True)
class Header:
    key: bytes
    tag: str
    payload_bytes: int
    checksum: int
    tag_bytes: int

    @property
    def frame_bytes(self) -> int:
        return HEADER_BYTES + self.tag_bytes + self.payload_bytes


def read_header(buf: bytes | bytearray | memoryview) -> Header:
    if len(buf) < HEADER_BYTES:
        raise FrameError("truncated header")
    magic, ver, _, tlen, key, plen, csum = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise FrameError("not a block (bad magic)")
    if ver != VERSION:
        raise FrameError(f"unsupported block format version {ver}")
    if tlen > MAX_TAG or len(buf) < HEADER_BYTES + tlen:
        raise FrameError("truncated or oversized tag")
    try:
        tag = bytes(buf[HEADER_BYTES : HEADER_BYTES + tlen]).decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError("tag is not UTF-8") from None
    return Header(key, tag, plen, csum, tlen)


def decode(buf: bytes | bytearray | memoryview, key: bytes | None = None) -> tuple[Header, memoryview]:
    """Check a frame and return its header and a zero-copy view of the payload."""
    h = read_header(buf)
    if len(buf) != h.frame_bytes:
        raise FrameError(f"length {len(buf)} != {h.frame_bytes} (truncated or padded)")
    if key is not None and h.key != key:
        raise FrameError("the frame holds another block's key")
    mv = memoryview(buf)[HEADER_BYTES + h.tag_bytes :]
    if checksum(h.key, buf[HEADER_BYTES : HEADER_BYTES + h.tag_bytes], mv) != h.checksum:
        raise FrameError("checksum mismatch")
    return h, mv
