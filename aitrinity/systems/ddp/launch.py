"""Start the ranks of a data-parallel run as processes (optionally in a shaped namespace) and collect their JSON.

Each rank is ``python -m aitrinity.systems.ddp.worker CONFIG.json``; with
``link`` (tc syntax: ``100mbit``, ``1gbit``) all ranks run in one private
network namespace whose loopback is rate-limited (``systems.netns``), so
their gloo traffic crosses a real constrained link.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from aitrinity.systems import netns

log = logging.getLogger(__name__)


class WorkerError(RuntimeError):
    pass


_RENDEZVOUS_FAILURES = (
    "Address already in use",
    "Connection refused",
    "Connection reset",
    "TCPStore",
    "terminate called",  # gloo aborting a rank whose peer vanished
)


def run_workers(
    runs: Sequence[dict[str, Any]],
    *,
    world: int = 2,
    task: str = "digits",
    link: str | None = None,
    timeout_s: float = 600,
    threads: int = 1,
    sharding: dict[str, Any] | None = None,
) -> list[list[dict[str, Any]]]:
    """Results per rank (a list of run results each); ``sharding``: measure shardings instead of training.

    A run whose ranks failed to meet (the rendezvous port taken meanwhile, a
    connection refused) is started once more on a new port; any other failure
    raises ``WorkerError`` with each rank's last stderr lines. A rank that wrote
    its results and then died in teardown counts as finished (with a warning).
    """
    if world < 1:
        raise ValueError("world must be >= 1")
    try:
        return _run_once(runs, world, task, link, timeout_s, threads, sharding)
    except WorkerError as e:
        if not any(s in str(e) for s in _RENDEZVOUS_FAILURES):
            raise
        log.warning("data-parallel ranks failed to meet; starting them once more: %s", str(e)[-300:])
        return _run_once(runs, world, task, link, timeout_s, threads, sharding)


def _run_once(
    runs: Sequence[dict[str, Any]],
    world: int,
    task: str,
    link: str | None,
    timeout_s: float,
    threads: int,
    sharding: dict[str, Any] | None,
) -> list[list[dict[str, Any]]]:
    with tempfile.TemporaryDirectory() as d, _place(link) as wrap:
        port = _free_port() if link is None else random.randint(20000, 60000)  # a new namespace has every port
        procs = []
        for rank in range(world):
            cfg = {
                "rank": rank,
                "world": world,
                "port": port,
                "task": task,
                "runs": list(runs),
                "out": str(Path(d) / f"out{rank}.json"),
                "threads": threads,
            }
            if sharding is not None:
                cfg["sharding"] = sharding
            path = Path(d) / f"cfg{rank}.json"
            path.write_text(json.dumps(cfg))
            argv = wrap([sys.executable, "-m", "aitrinity.systems.ddp.worker", str(path)])
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        errors = []
        for rank, p in enumerate(procs):
            try:
                _, err = p.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise WorkerError(f"rank {rank} did not finish in {timeout_s:.0f} s") from None
            if p.returncode != 0:
                if (Path(d) / f"out{rank}.json").exists():
                    # the rank finished and wrote its results (atomically, last thing before exit); gloo's
                    # threads sometimes abort the interpreter's teardown after that ("terminate called ...")
                    log.warning("rank %d exited %d after writing its results: %s", rank, p.returncode, err[-300:])
                    continue
                errors.append(f"rank {rank} exited {p.returncode}: {err.strip()[-2000:]}")
        if errors:
            raise WorkerError("; ".join(errors))
        return [json.loads((Path(d) / f"out{r}.json").read_text()) for r in range(world)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _place(link: str | None) -> Iterator[Any]:
    if link is None:
        yield lambda argv: argv
        return
    with netns.shaped_namespace(None if link == "unlimited" else link) as ns:
        yield ns.wrap
