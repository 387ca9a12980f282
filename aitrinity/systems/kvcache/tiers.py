"""Where block frames live: process memory, a local directory, a Redis server.

A tier stores whole frames (``frame.encode``) by key and knows nothing of
capacity or eviction -- the store's ``BlockIndex`` per tier decides that. Every
read returns either the whole frame (checked, except in process memory) or a
``Miss`` with its reason; no tier raises on a lost, corrupt or unreachable
block.

Nominal ``bandwidth_Bps`` / ``latency_s`` describe the tier to the
load-vs-recompute decision (``cost.kv_reuse``); ``trinity calibrate`` or a
benchmark can replace them with measured figures.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aitrinity.systems.kvcache import frame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Miss:
    reason: str
    """'absent', 'checksum failure: ...', 'tier unavailable: ...'"""


class Tier(Protocol):
    name: str
    bandwidth_Bps: float
    latency_s: float
    sealed: bool
    """True: frames leave the process here, so they must carry their checksum (``frame.seal``)."""

    def buffer(self, size: int) -> bytearray: ...
    def put(self, key: bytes, data: bytes | bytearray | memoryview) -> bool: ...
    def get(self, key: bytes) -> memoryview | Miss: ...
    def delete(self, key: bytes) -> None: ...
    def scan(self) -> Iterator[tuple[bytes, int]]: ...
    def sync(self) -> None:
        """Send what the tier holds back (a deferred delete) now, for other processes to see."""
        ...


class MemoryTier:
    """Frames in a dict; reads are zero-copy views, not re-checked (nothing crossed a boundary).

    A deleted frame's buffer is kept for the next frame of the same size (up
    to ``spare`` per size) when nothing still views it, so a tier at capacity
    writes into warm memory instead of faulting in fresh pages.
    """

    sealed = False

    def __init__(
        self, name: str = "memory", bandwidth_Bps: float = 10e9, latency_s: float = 1e-6, spare: int = 4
    ) -> None:
        self.name, self.bandwidth_Bps, self.latency_s = name, bandwidth_Bps, latency_s
        self._d: dict[bytes, bytes | bytearray | memoryview] = {}
        self._spare: dict[int, list[bytearray]] = {}
        self._max_spare = spare

    def buffer(self, size: int) -> bytearray:
        free = self._spare.get(size)
        return free.pop() if free else bytearray(size)

    def put(self, key: bytes, data: bytes | bytearray | memoryview) -> bool:
        self._d[key] = data
        return True

    def get(self, key: bytes) -> memoryview | Miss:
        d = self._d.get(key)
        return Miss("absent") if d is None else memoryview(d)

    def delete(self, key: bytes) -> None:
        d = self._d.pop(key, None)
        # reuse only a buffer nobody else holds: a reader's view keeps a reference (CPython refcount)
        if isinstance(d, bytearray) and sys.getrefcount(d) == 2:
            free = self._spare.setdefault(len(d), [])
            if len(free) < self._max_spare:
                free.append(d)

    def scan(self) -> Iterator[tuple[bytes, int]]:
        return iter([])  # nothing survives the process

    def sync(self) -> None:
        pass  # nothing is deferred


class _Scratch:
    """Frame buffers for tiers that copy a frame out on ``put`` (a file, a socket) and keep nothing.

    One warm buffer per size and thread, reused for the next frame: the frame is
    dead once ``put`` returns, so a new block never faults in fresh pages.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def buffer(self, size: int) -> bytearray:
        bufs: dict[int, bytearray] = self._local.__dict__.setdefault("bufs", {})
        if size not in bufs:
            if len(bufs) >= 4:
                bufs.clear()
            bufs[size] = bytearray(size)
        return bufs[size]


class DiskTier(_Scratch):
    """One file per block under ``root/namespace/``: written to a temp file, fsynced, renamed.

    A reader sees either the whole old file or the whole new one, never a torn
    write (POSIX rename is atomic). Every read verifies the checksum; a bad
    file is deleted and reported. ``scan`` (on open) removes leftover temp files
    and files whose length disagrees with their header.
    """

    SUFFIX = ".kvb"
    sealed = True

    def __init__(
        self,
        root: str | Path,
        namespace: str,
        name: str = "disk",
        fsync: bool = True,
        bandwidth_Bps: float = 2e9,
        latency_s: float = 100e-6,
    ) -> None:
        super().__init__()
        self.name, self.bandwidth_Bps, self.latency_s, self.fsync = name, bandwidth_Bps, latency_s, fsync
        self.dir = Path(root) / namespace
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, key: bytes) -> Path:
        return self.dir / (key.hex() + self.SUFFIX)

    def put(self, key: bytes, data: bytes | bytearray | memoryview) -> bool:
        tmp = self.dir / f".tmp-{key.hex()}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self._path(key))
            if self.fsync:
                dfd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
            return True
        except OSError as e:
            log.warning("disk tier %s: cannot write block %s: %s", self.dir, key.hex(), e)
            tmp.unlink(missing_ok=True)
            return False

    def get(self, key: bytes) -> memoryview | Miss:
        p = self._path(key)
        try:
            with open(p, "rb", buffering=0) as f:
                size = os.fstat(f.fileno()).st_size
                buf = bytearray(size)
                got = f.readinto(buf)
        except FileNotFoundError:
            return Miss("absent")
        except OSError as e:
            return Miss(f"tier unavailable: {e.strerror}")
        try:
            if got != size:
                raise frame.FrameError("short read")
            frame.decode(buf, key)
        except frame.FrameError as e:
            log.warning("disk tier %s: block %s failed its check (%s); removed", self.dir, key.hex(), e)
            p.unlink(missing_ok=True)
            return Miss(f"checksum failure: {e}")
        return memoryview(buf)

    def delete(self, key: bytes) -> None:
        self._path(key).unlink(missing_ok=True)

    def sync(self) -> None:
        pass  # writes are fsynced and deletes done as they come

    def scan(self) -> Iterator[tuple[bytes, int]]:
        """(key, frame bytes) of every well-formed block file, oldest first; cleans up the rest."""
        found = []
        for p in self.dir.iterdir():
            if p.name.startswith(".tmp-"):
                p.unlink(missing_ok=True)  # an interrupted write
                continue
            if p.suffix != self.SUFFIX:
                continue
            try:
                key = bytes.fromhex(p.stem)
                st = p.stat()
                with open(p, "rb") as f:
                    h = frame.read_header(f.read(frame.HEADER_BYTES + frame.MAX_TAG))
                if h.key != key or h.frame_bytes != st.st_size:
                    raise frame.FrameError("header disagrees with the file")
            except (ValueError, OSError, frame.FrameError) as e:
                log.warning("disk tier %s: dropping %s on open (%s)", self.dir, p.name, e)
                p.unlink(missing_ok=True)
                continue
            found.append((st.st_mtime_ns, key, st.st_size))
        found.sort()
        return iter([(k, s) for _, k, s in found])


def _resp(*args: bytes) -> bytes:
    """One Redis command in RESP (an array of bulk strings)."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _send_gathered(sock: socket.socket, parts: list[bytes | memoryview]) -> None:
    """Send ``parts`` as one stream: one ``sendmsg`` of them all (one system call, and the server woken once for the
    whole command where the socket buffer holds it -- three ``sendall`` calls woke it for the header, the value and
    the trailer apart: on one core a 1 MiB put took 670-690 us against redis-benchmark's 376 us, 380-410 us
    gathered), then ``sendall`` of whatever the buffer did not take (a socket with a timeout sends what fits)."""
    views = [memoryview(p).cast("B") for p in parts]
    sent = sock.sendmsg(views)
    for v in views:
        if sent >= v.nbytes:
            sent -= v.nbytes
            continue
        sock.sendall(v[sent:])
        sent = 0


class RedisTier(_Scratch):
    """Frames as Redis string values under ``aitrinity:kv:<namespace>:<key hex>``.

    Connection errors and timeouts mark the tier down for ``retry_s``; while it
    is down every read is a miss ('tier unavailable') and writes are dropped. A
    key Redis evicted (``maxmemory``) reads as absent. Checksums are verified.

    One round trip per block: the DEL of a block the store evicted is not sent on
    its own but ahead of the next SET, in the same write (a tier at capacity
    evicts one block per put, which would otherwise double the round trips). The
    store no longer indexes such a block, so nothing reads it in between; another
    store on the same server may, and finds valid data. ``sync`` (and ``scan``)
    sends what is pending; a corrupt block is deleted at once.
    """

    sealed = True

    def __init__(
        self,
        url: str,
        namespace: str,
        name: str = "redis",
        timeout_s: float = 1.0,
        retry_s: float = 5.0,
        bandwidth_Bps: float = 1e9,
        latency_s: float = 200e-6,
        client: Any = None,
    ) -> None:
        import redis

        super().__init__()
        self.name, self.bandwidth_Bps, self.latency_s = name, bandwidth_Bps, latency_s
        self.prefix = f"aitrinity:kv:{namespace}:".encode()
        self.retry_s = retry_s
        self._errors = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
        self._r = client or redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry_on_timeout=False
        )
        self._down_until = 0.0
        self.last_error = ""
        self._doomed: list[bytes] = []  # names to DEL with the next SET
        self._writer: Any = None  # the connection SETs go out on, kept: the pool's get and release per put (its
        # observability hooks) cost a fifth of a 64 KiB put on one core
        self._writing = threading.Lock()

    def _name(self, key: bytes) -> bytes:
        return self.prefix + key.hex().encode()

    def _down(self, e: Exception) -> Miss:
        self._down_until = time.monotonic() + self.retry_s
        self.last_error = f"{type(e).__name__}: {e}"
        log.warning("redis tier unavailable (%s); retrying in %.1f s", self.last_error, self.retry_s)
        return Miss(f"tier unavailable: {self.last_error}")

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    def put(self, key: bytes, data: bytes | bytearray | memoryview) -> bool:
        if not self.available:
            return False
        try:
            self._set(self._name(key), memoryview(data))
            return True
        except self._errors as e:
            self._down(e)
            return False

    def _set(self, name: bytes, value: memoryview) -> None:
        """SET as one RESP command, the value never copied (redis-py's packer, with hiredis, copies a large value
        more slowly than the link carries it), sent with the pending DELs ahead of it in one gathered write
        (:func:`_send_gathered`); both replies come back on one round trip."""
        doomed, self._doomed = self._doomed, []
        parts: list[bytes | memoryview] = [_resp(b"DEL", *doomed)] if doomed else []
        parts += [b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(name), name, value.nbytes), value, b"\r\n"]
        with self._writing:
            if self._writer is None:
                self._writer = self._r.connection_pool.get_connection()
            conn = self._writer
            try:
                conn.send_packed_command([], check_health=False)  # connects if it is not
                sock = getattr(conn, "_sock", None)
                if sock is not None and sock.__class__ is socket.socket:  # (TLS cannot gather: redis-py's writes)
                    _send_gathered(sock, parts)
                else:
                    conn.send_packed_command(parts, check_health=False)
                if doomed:
                    conn.read_response()
                reply = conn.read_response()
            except BaseException:
                conn.disconnect()  # (the next write connects again)
                self._doomed[:0] = doomed  # not known to be gone: sent again with the next write
                raise
        if reply not in (b"OK", "OK"):
            raise OSError(f"unexpected SET reply {reply!r}")

    def get(self, key: bytes) -> memoryview | Miss:
        if not self.available:
            return Miss(f"tier unavailable: {self.last_error}")
        try:
            d = self._r.get(self._name(key))
        except self._errors as e:
            return self._down(e)
        if d is None:
            return Miss("absent")
        assert isinstance(d, bytes)
        try:
            frame.decode(d, key)
        except frame.FrameError as e:
            self._delete_now(self._name(key))
            return Miss(f"checksum failure: {e}")
        return memoryview(d)

    def delete(self, key: bytes) -> None:
        """Forget ``key``: its DEL rides with the next SET (class doc)."""
        self._doomed.append(self._name(key))

    def _delete_now(self, *names: bytes) -> None:
        if not self.available or not names:
            return
        try:
            self._r.delete(*names)
        except self._errors as e:
            self._down(e)

    def sync(self) -> None:
        """Send the pending DELs now (a probe's block, or a store that stops)."""
        doomed, self._doomed = self._doomed, []
        self._delete_now(*doomed)

    def scan(self) -> Iterator[tuple[bytes, int]]:
        """Blocks already on the server under this namespace (a restart finds them again)."""
        self.sync()
        if not self.available:
            return iter([])
        out = []
        try:
            for name in self._r.scan_iter(match=self.prefix + b"*", count=1000):
                size = self._r.strlen(name)
                if size:
                    out.append((bytes.fromhex(name[len(self.prefix) :].decode()), int(size)))
        except self._errors as e:
            self._down(e)
        except ValueError:
            pass
        return iter(out)
