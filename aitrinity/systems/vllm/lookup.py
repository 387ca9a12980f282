"""The worker's store, asked from the scheduler's process: a lookup service over a Unix socket.

vLLM runs a connector twice: the scheduler half (which decides how many
prompt tokens to load) and the worker half (which owns the KV tensors and the
store) -- in two processes on the CPU engine and with tensor parallelism. The
worker answers lookups on a Unix socket named after the engine; the scheduler
asks with a request's block keys and gets back where each leading block sits,
why the next is missing, and the measured rates (``Rates``) the
load-vs-recompute decision needs. Messages are length-prefixed JSON (no
pickle); the socket file is created mode 0600 in a private directory.

``Rates`` holds what the worker measured: seconds to read one block from each
tier (a probe at start-up, then every load) and the engine's prefill FLOP/s
(every step that ran prompt tokens). Exponential moving averages, weight
``alpha`` on the newest sample.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aitrinity.control import telemetry
from aitrinity.systems.kvcache import frame
from aitrinity.systems.kvcache.keys import BlockKeys
from aitrinity.systems.kvcache.store import KVStore
from aitrinity.systems.kvcache.tiers import Miss, Tier

log = logging.getLogger(__name__)
_LEN = struct.Struct(">I")
MAX_MESSAGE = 64 << 20


@dataclass
class Rates:
    """Measured block read times per tier and the engine's prefill FLOP/s (moving averages)."""

    alpha: float = 0.3
    s_per_block: dict[str, float] = field(default_factory=dict)
    flops_per_s: float | None = None
    block_bytes: int | None = None
    """Bytes of one block as stored (set once the KV layout is known): turns read times into bandwidths."""

    def rates(self) -> telemetry.Rates:
        """Each tier's read bandwidth and the engine's prefill FLOP/s, as the Controller's telemetry."""
        links = {t: self.block_bytes / s for t, s in self.s_per_block.items() if self.block_bytes and s > 0}
        return telemetry.Rates(links_Bps=links, flops_per_s=self.flops_per_s)

    def _ewma(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.alpha) * old + self.alpha * new

    def read(self, tier: str, blocks: int, seconds: float) -> None:
        if blocks > 0 and seconds > 0:
            self.s_per_block[tier] = self._ewma(self.s_per_block.get(tier), seconds / blocks)

    def prefill(self, flops: float, seconds: float) -> None:
        if flops > 0 and seconds > 0:
            self.flops_per_s = self._ewma(self.flops_per_s, flops / seconds)

    def to_json(self) -> dict[str, Any]:
        return {"s_per_block": dict(self.s_per_block), "flops_per_s": self.flops_per_s}


def probe(tier: Tier, block_bytes: int, rates: Rates, reps: int = 3) -> None:
    """Time reading one block-sized frame from ``tier`` (written, read ``reps`` times, deleted)."""
    key = b"aitrinity-probe\x00"
    buf = frame.encode(key, bytes(block_bytes), "probe")
    if tier.sealed:
        frame.seal(buf)
    if not tier.put(key, buf):
        log.warning("tier %s refused the probe block; its read time is measured on first use", tier.name)
        return
    try:
        for _ in range(reps):
            t0 = time.perf_counter()
            got = tier.get(key)
            dt = time.perf_counter() - t0
            if isinstance(got, Miss):
                log.warning("tier %s probe read failed: %s", tier.name, got.reason)
                return
            rates.read(tier.name, 1, dt)
    finally:
        tier.delete(key)
        tier.sync()  # the probe block leaves a shared tier now, not with the next save


def socket_path(engine_id: str) -> Path:
    """Where the worker of engine ``engine_id`` listens (both halves derive it from vLLM's config)."""
    safe = "".join(c for c in engine_id if c.isalnum() or c in "-_")[:40] or "engine"
    d = Path(tempfile.gettempdir()) / f"aitrinity-kv-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d / f"{safe}.sock"


def _send(sock: socket.socket, obj: Any) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv(sock: socket.socket) -> Any:
    head = _exact(sock, _LEN.size)
    (n,) = _LEN.unpack(head)
    if n > MAX_MESSAGE:
        raise ValueError(f"lookup message of {n} bytes exceeds {MAX_MESSAGE}")
    return json.loads(_exact(sock, n))


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("lookup peer closed the connection")
        buf += chunk
    return bytes(buf)


def answer(store: KVStore, rates: Rates, block_bytes: int, msg: dict[str, Any]) -> dict[str, Any]:
    """One lookup: ``{"keys": [hex], "content": [hex], "block_tokens": B}`` -> where the prefix is."""
    if not isinstance(msg.get("keys"), list) or not isinstance(msg.get("content"), list):
        return {"error": "expected {'keys': [...], 'content': [...], 'block_tokens': n}"}
    try:
        bk = BlockKeys(
            [bytes.fromhex(k) for k in msg["keys"]],
            [bytes.fromhex(c) for c in msg["content"]],
            int(msg.get("block_tokens", 1)),
        )
    except (TypeError, ValueError) as e:
        return {"error": f"bad keys: {e}"}
    look = store.lookup(bk)
    return {"sources": look.sources, "miss": look.miss, "block_bytes": block_bytes, **rates.to_json()}


Handler = Callable[[dict[str, Any]], dict[str, Any]]


class LookupServer:
    """Answers requests on ``path`` from daemon threads until ``close``: ``handler(message) -> reply``."""

    def __init__(self, path: Path, handler: Handler) -> None:
        self.path = path
        if path.exists():
            path.unlink()  # left by a dead engine with the same id
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        os.chmod(path, 0o600)
        self._sock.listen(8)
        self._handler = handler
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="aitrinity-kv-lookup", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        with conn:
            while not self._closed:
                try:
                    msg = _recv(conn)
                except (ConnectionError, OSError, ValueError):
                    return
                try:
                    reply = self._handler(msg) if isinstance(msg, dict) else {"error": "expected a JSON object"}
                except Exception as e:  # a bad request must not kill the service
                    log.exception("lookup handler failed")
                    reply = {"error": f"{type(e).__name__}: {e}"}
                _send(conn, reply)

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        self.path.unlink(missing_ok=True)


class LookupClient:
    """The scheduler's side: ``ask(bk)`` -> the worker's answer, or None while the worker cannot be reached."""

    def __init__(self, path: Path, timeout_s: float = 5.0) -> None:
        self.path, self.timeout_s = path, timeout_s
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self.last_error = ""

    def ask(self, bk: BlockKeys) -> dict[str, Any] | None:
        """Where the worker's store holds ``bk``'s leading blocks, with the measured rates."""
        return self.call(
            {
                "keys": [k.hex() for k in bk.keys],
                "content": [c.hex() for c in bk.content],
                "block_tokens": bk.block_tokens,
            }
        )

    def hello(self) -> dict[str, Any] | None:
        """The worker's key salt (model identity and KV layout): ``{"extra": {...}}``."""
        return self.call({"hello": 1})

    def drain(self) -> dict[str, Any] | None:
        """Wait until the worker has stored every block its writer holds (its saves are asynchronous)."""
        return self.call({"drain": True})

    def stats(self) -> dict[str, Any] | None:
        """The worker's counters: the store's hits, misses and puts, tokens loaded, blocks saved, rates."""
        return self.call({"stats": 1})

    def call(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            for _ in range(2):  # one reconnect: the worker may have restarted its listener
                try:
                    if self._sock is None:
                        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        s.settimeout(self.timeout_s)
                        s.connect(str(self.path))
                        self._sock = s
                    _send(self._sock, msg)
                    got = _recv(self._sock)
                except (OSError, ConnectionError, ValueError) as e:
                    self.last_error = f"{type(e).__name__}: {e}"
                    self.close()
                    continue
                if isinstance(got, dict) and "error" not in got:
                    return got
                self.last_error = str(got.get("error") if isinstance(got, dict) else got)
                return None
        log.warning("aitrinity KV lookup unreachable (%s): the request recomputes its prompt", self.last_error)
        return None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
