"""Start the split server as a child process and wait until it listens (its first stdout line: the port)."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def server_process(
    weights: str | Path, timeout_s: float = 60.0, threads: int = 1
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """(process, port) of a running server; it is killed on exit. Its stderr (the rejection log) is kept
    in the process object's ``stderr`` pipe."""
    cmd = [sys.executable, "-m", "aitrinity.systems.split.server", "--weights", str(weights), "--threads", str(threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            raise RuntimeError(f"the split server did not start within {timeout_s:.0f} s")
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"the split server exited: {err.strip()[-500:]}")
        yield proc, int(json.loads(line)["port"])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
