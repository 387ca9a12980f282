"""Codecs for the tensor that crosses the uplink: exact sizes as :func:`aitrinity.cost.edge.payload_bytes` says.

``fp32`` / ``fp16``: the values little-endian. ``int8`` / ``int4``: per-tensor
affine quantization -- header ``min, scale`` (float32 LE), then ``round((x -
min) / scale)`` as uint8, or two 4-bit codes a byte (first in the low nibble).
``raw``: an uint8 frame as it is. ``zstd`` (level 1) / ``lz4`` (frame format)
compress the coded payload losslessly; they are optional packages.
"""

from __future__ import annotations

import struct

import numpy as np

CODECS = ("fp32", "fp16", "int8", "int4", "raw")
LOSSLESS = ("none", "zstd", "lz4")
_Q = struct.Struct("<ff")


def encode(x: np.ndarray, codec: str) -> bytes:
    if codec == "raw":
        if x.dtype != np.uint8:
            raise ValueError("the raw codec carries an uint8 frame")
        return x.tobytes()
    a = np.ascontiguousarray(x, dtype=np.float32)
    if codec == "fp32":
        return a.astype("<f4", copy=False).tobytes()
    if codec == "fp16":
        return a.astype("<f2").tobytes()
    if codec not in ("int8", "int4"):
        raise ValueError(f"unknown codec {codec!r}")
    levels = 255 if codec == "int8" else 15
    lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    scale = (hi - lo) / levels or 1.0
    q = np.clip(np.rint((a.ravel() - lo) / scale), 0, levels).astype(np.uint8)
    if codec == "int4":
        if q.size % 2:
            q = np.append(q, np.uint8(0))
        q = q[0::2] | (q[1::2] << 4)
    return _Q.pack(lo, scale) + q.tobytes()


def decode(data: bytes | memoryview, codec: str, shape: tuple[int, ...]) -> np.ndarray:
    """The tensor back (float32; uint8 for ``raw``); raises ValueError when ``data`` does not fit ``shape``."""
    n = int(np.prod(shape)) if shape else 1
    buf = memoryview(data)
    if codec == "raw":
        _expect(buf, n, codec)
        return np.frombuffer(buf, np.uint8).reshape(shape)
    if codec == "fp32":
        _expect(buf, 4 * n, codec)
        return np.frombuffer(buf, "<f4").astype(np.float32).reshape(shape)
    if codec == "fp16":
        _expect(buf, 2 * n, codec)
        return np.frombuffer(buf, "<f2").astype(np.float32).reshape(shape)
    if codec not in ("int8", "int4"):
        raise ValueError(f"unknown codec {codec!r}")
    _expect(buf, _Q.size + (n if codec == "int8" else (n + 1) // 2), codec)
    lo, scale = _Q.unpack(buf[: _Q.size])
    q = np.frombuffer(buf[_Q.size :], np.uint8)
    if codec == "int4":
        q = np.stack([q & 0x0F, q >> 4], axis=1).ravel()[:n]
    return (q.astype(np.float32) * np.float32(scale) + np.float32(lo)).reshape(shape)


def _expect(buf: memoryview, size: int, codec: str) -> None:
    if len(buf) != size:
        raise ValueError(f"{codec} payload of {len(buf)} bytes, expected {size} for the shape")


def compress(data: bytes, lossless: str) -> bytes:
    if lossless == "none":
        return data
    if lossless == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=1).compress(data)
    if lossless == "lz4":
        import lz4.frame

        return bytes(lz4.frame.compress(data))
    raise ValueError(f"unknown lossless coder {lossless!r}")


def decompress(data: bytes | memoryview, lossless: str, raw_len: int) -> bytes:
    """Decompress to exactly ``raw_len`` bytes (never more: a bomb is cut off and rejected)."""
    if lossless == "none":
        return bytes(data)
    if lossless == "zstd":
        import zstandard

        try:
            out = zstandard.ZstdDecompressor().decompress(bytes(data), max_output_size=raw_len)
        except zstandard.ZstdError as e:
            raise ValueError(f"zstd: {e}") from None
    elif lossless == "lz4":
        import lz4.frame

        d = lz4.frame.LZ4FrameDecompressor()
        try:
            out = d.decompress(bytes(data), max_length=raw_len + 1)
        except RuntimeError as e:
            raise ValueError(f"lz4: {e}") from None
    else:
        raise ValueError(f"unknown lossless coder {lossless!r}")
    if len(out) != raw_len:
        raise ValueError(f"{lossless} gave {len(out)} bytes, the header says {raw_len}")
    return out
