"""A pacer on the sending side: a real socket whose bytes leave at a link's rate, which may follow a trace.

Used where a shaped network namespace is not available (no root) and to make
an uplink follow a bandwidth trace over time. It models the link's
serialization: the link is busy until ``free_at``; a chunk of ``b`` bytes
(at most ``chunk_bytes``, one MTU by default) starts when the link is free and
leaves ``b / rate(t)`` seconds later -- a token bucket whose burst is one
chunk, so an idle link does not bank credit for a later message.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, rate_Bps: Callable[[float], float], chunk_bytes: int = 1500) -> None:
        if chunk_bytes <= 0:
            raise ValueError("chunk_bytes must be positive")
        self.rate = rate_Bps
        self.chunk = chunk_bytes
        self.t0 = time.monotonic()
        self.free_at = self.t0

    def sendall(self, sock: socket.socket, data: bytes) -> None:
        view = memoryview(data)
        while view:
            chunk = view[: self.chunk]
            now = time.monotonic()
            start = max(now, self.free_at)
            self.free_at = start + len(chunk) / self.rate(start - self.t0)
            wait = self.free_at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            sock.sendall(chunk)
            view = view[len(chunk) :]


def constant(rate_Bps: float) -> Callable[[float], float]:
    if rate_Bps <= 0:
        raise ValueError("rate must be positive")
    return lambda _t: rate_Bps
