"""Trace files: serving requests (Mooncake JSONL) and link bandwidth over time, read as bytes and
validated; the built-in traces ship as package data.

One JSON object per line: ``timestamp`` (ms), ``input_length`` and ``output_length`` (tokens),
``hash_ids`` (prefix-chained ids of fixed-size token blocks: equal ids mean reusable KV). The Mooncake
conversation trace (FAST'25, Apache-2.0) ships in ``aitrinity/catalog/data/traces/`` with its notice;
a checkout also links it from ``data/traces/``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from aitrinity.errors import SpecError
from aitrinity.spec.traces import LinkTrace, TraceRequest

TRACES = Path(__file__).resolve().parent / "data" / "traces"
CONVERSATION_TRACE = TRACES / "mooncake_conversation_trace.jsonl"
"""The Mooncake conversation trace, installed with the package (wherever the command runs)."""


def conversation_trace() -> Path:
    """The built-in conversation trace (the report's and the what-if page's default)."""
    return CONVERSATION_TRACE


def parse_line(text: str, where: str) -> TraceRequest:
    try:
        raw = json.loads(text)
    except ValueError:
        raise SpecError.at(where, "not a JSON object") from None
    if not isinstance(raw, dict):
        raise SpecError.at(where, "not a JSON object")
    missing = [k for k in ("timestamp", "input_length", "output_length", "hash_ids") if k not in raw]
    if missing:
        raise SpecError.at(where, f"missing {', '.join(missing)}")
    ids = raw["hash_ids"]
    ok = (
        isinstance(raw["input_length"], int)
        and raw["input_length"] >= 0
        and isinstance(raw["output_length"], int)
        and raw["output_length"] >= 0
        and isinstance(raw["timestamp"], int | float)
        and math.isfinite(raw["timestamp"])
        and isinstance(ids, list)
        and all(type(i) is int for i in ids)  # JSON gives int or bool: ``type`` tells them apart in one test
    )
    if not ok:
        raise SpecError.at(
            where,
            "expected timestamp (number), input_length and output_length (whole numbers "
            ">= 0) and hash_ids (a list of whole numbers)",
        )
    return TraceRequest(float(raw["timestamp"]), raw["input_length"], raw["output_length"], tuple(ids))


def read_lines(path: str | Path, what: str) -> list[str]:
    """A text file's lines, read as bytes and decoded: unreadable or non-UTF-8 files are one-line errors."""
    try:
        raw = Path(path).read_bytes()
    except (OSError, ValueError) as e:
        raise SpecError.at(path, f"cannot read the {what} ({getattr(e, 'strerror', None) or e})") from None
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise SpecError.at(path, f"the {what} is not UTF-8 text (byte {e.start})") from None


def load(path: str | Path) -> list[TraceRequest]:
    """Every request of a JSONL trace; a bad line is a one-line error naming the file and line."""
    lines = read_lines(path, "trace")
    out = [parse_line(line, f"{path}:{i}") for i, line in enumerate(lines, 1) if line.strip()]
    if not out:
        raise SpecError.at(path, "no requests in the trace")
    return out


def load_link_trace(path: str | Path) -> LinkTrace:
    """A link trace file: ``time_s, Mbit/s`` per line (comma or space separated; ``#`` comments)."""
    times, bws = [], []
    lines = read_lines(path, "link trace")
    for i, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").split()
        try:
            t, mbit = float(parts[0]), float(parts[1])
            if not (math.isfinite(t) and math.isfinite(mbit)):
                raise ValueError("not finite")
        except (IndexError, ValueError):
            raise SpecError.at(f"{path}:{i}", "expected 'time_s, Mbit/s' (finite numbers)") from None
        times.append(t)
        bws.append(mbit * 1e6 / 8)
    try:
        return LinkTrace(tuple(times), tuple(bws))
    except ValueError as e:
        raise SpecError.at(path, str(e)) from None
