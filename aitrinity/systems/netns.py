"""A private network namespace whose loopback is rate-limited with ``tc tbf``: a real slow link on one machine.

    with shaped_namespace("100mbit") as ns:
        subprocess.run(ns.wrap(["python", "-m", "..."]))   # runs inside; 127.0.0.1 is the shaped link

Needs root and iproute2 (``ip``, ``tc``); ``unavailable()`` says why not when it
cannot work. Nothing leaves the namespace: it has only its own loopback. The
namespace is deleted on exit, also after an error.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


def unavailable() -> str | None:
    """None when shaped namespaces can be made here; otherwise the reason."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' not installed (iproute2)"
    return None


@dataclass(frozen=True)
class Namespace:
    name: str
    rate: str | None

    def wrap(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]


def _run(*argv: str) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {r.stderr.strip() or r.returncode}")


@contextmanager
def shaped_namespace(
    rate: str | None, burst: str = "256kb", latency: str = "100ms", mtu: int | None = None
) -> Iterator[Namespace]:
    """A fresh namespace with loopback up, shaped to ``rate`` (tc syntax: 100mbit, 1gbit; None: unshaped).

    ``mtu``: loopback's MTU (default 65536). Small messages on a slow link need an Ethernet-like MTU and a
    burst of a few packets, or a whole message passes in one burst unshaped."""
    why = unavailable()
    if why:
        raise OSError(f"cannot make a shaped namespace: {why}")
    name = f"trinity-{os.getpid()}-{secrets.token_hex(3)}"
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        if mtu:
            _run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "mtu", str(mtu))
        if rate:
            _run(
                "ip",
                "netns",
                "exec",
                name,
                "tc",
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                burst,
                "latency",
                latency,
            )
        yield Namespace(name, rate)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
