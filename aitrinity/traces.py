"""Request traces (Mooncake JSONL) as validated, typed data.

One JSON object per line: ``timestamp`` (ms), ``input_length`` and
``output_length`` (tokens), ``hash_ids`` (prefix-chained ids of fixed-size
token blocks: equal ids mean reusable KV). The Mooncake conversation trace
(FAST'25, Apache-2.0) ships in ``data/traces/`` with its notice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aitrinity.errors import SpecError


@dataclass(frozen=True)
class TraceRequest:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


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
        and isinstance(ids, list)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    )
    if not ok:
        raise SpecError.at(
            where,
            "expected timestamp (number), input_length and output_length (whole numbers "
            ">= 0) and hash_ids (a list of whole numbers)",
        )
    return TraceRequest(float(raw["timestamp"]), raw["input_length"], raw["output_length"], tuple(ids))


def load(path: str | Path) -> list[TraceRequest]:
    """Every request of a JSONL trace; a bad line is a one-line error naming the file and line."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise SpecError.at(path, f"cannot read the trace ({e.strerror})") from None
    out = [parse_line(line, f"{path}:{i}") for i, line in enumerate(lines, 1) if line.strip()]
    if not out:
        raise SpecError.at(path, "no requests in the trace")
    return out
