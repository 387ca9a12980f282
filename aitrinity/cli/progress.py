"""Progress on stderr for long commands: a bar redrawn in place on a terminal, plain lines otherwise
(logs, CI), nothing with ``--quiet``. stdout stays the result, so ``--json`` output can be piped."""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30


class Progress:
    def __init__(
        self, quiet: bool = False, stream: TextIO | None = None, min_interval_s: float = 1.0, after_s: float = 0.0
    ) -> None:
        """``after_s``: off a terminal, no line for work that is done within that many seconds (a line once it runs
        longer, and the last step then)."""
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.min_interval_s = min_interval_s
        self._open = False  # a bar is drawn on the current line
        self._last = float("-inf")  # the first step always prints (monotonic time starts near 0 at boot)
        self._quiet_until = time.monotonic() + after_s if after_s > 0 else float("-inf")

    def say(self, msg: str) -> None:
        """One line: ``trinity: msg``."""
        if self.quiet:
            return
        self._end_bar()
        print(f"trinity: {msg}", file=self.stream, flush=True)

    def step(self, done: int, total: int, what: str = "") -> None:
        """``done`` of ``total``: the bar on a terminal; elsewhere a line at most every ``min_interval_s``."""
        if self.quiet or total <= 0:
            return
        now = time.monotonic()
        finished = done >= total
        text = f"{done:,}/{total:,}" + (f" {what}" if what else "")
        if self.tty:
            filled = WIDTH * min(done, total) // total
            print(f"\rtrinity: [{'#' * filled}{'.' * (WIDTH - filled)}] {text}\x1b[K", end="", file=self.stream)
            self.stream.flush()
            self._open = True
            if finished:
                self._end_bar()
        elif now < self._quiet_until:
            return
        elif finished or now - self._last >= self.min_interval_s:
            print(f"trinity: {text}", file=self.stream, flush=True)
            self._last = now

    def _end_bar(self) -> None:
        if self._open:
            print(file=self.stream, flush=True)
            self._open = False
