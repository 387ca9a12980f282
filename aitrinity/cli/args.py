"""Argument types for the CLI's numeric flags: a value is checked where it enters, with the flag named by
argparse in a one-line error (exit 2): finite, and within the range the command can run."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def count(low: int = 1, high: int = 10**9) -> Callable[[str], int]:
    """A whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"{v} is outside {low}..{high}")
        return v

    return parse


def number(low: float = 0.0, high: float = 1e12, low_open: bool = True) -> Callable[[str], float]:
    """A finite number above ``low`` (or at least ``low`` when ``low_open`` is False) and at most ``high``."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        above = v > low if low_open else v >= low
        if not (math.isfinite(v) and above and v <= high):
            bound = f"above {low:g}" if low_open else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number {bound} and at most {high:g}")
        return v

    return parse


def output_file(flag: str, path: str | None) -> None:
    """Refuse, before any work, an output path whose folder does not exist or is not a folder."""
    if path is None:
        return
    from pathlib import Path

    from aitrinity.errors import SpecError

    folder = Path(path).expanduser().resolve().parent
    if not folder.is_dir():
        raise SpecError(flag, path, "a file in an existing folder")
    if Path(path).is_dir():
        raise SpecError(flag, path, "a file, not a folder")
