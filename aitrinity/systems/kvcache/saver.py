"""Writing blocks into a :class:`KVStore` off the caller's thread.

An engine step that produced new full KV blocks copies them out of its tensors and hands the copies here; one
background thread puts them into the store, so a write-through disk fsync or a Redis round trip overlaps the
next steps instead of delaying this step's tokens. Nothing is dropped: the queue is bounded and a caller waits
while it is full (back-pressure); :meth:`Saver.drain` waits until every block handed over is stored, and
:meth:`Saver.close` drains and stops the thread. A block handed over twice before it is written (two requests
with the same prefix) is written once. A failing put is logged and counted, never raised into the caller.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass

from aitrinity.systems.kvcache.store import KVStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Block:
    """One block to store: its key, payload (a copy the caller no longer touches), frame tag and content id."""

    key: bytes
    payload: bytes | bytearray | memoryview
    tag: str = ""
    content: bytes | None = None


class Saver:
    """One background writer for one store (module doc)."""

    def __init__(self, store: KVStore, limit: int = 256) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.store = store
        self.saved = 0
        """Blocks a tier took."""
        self.failed = 0
        """Blocks no tier took, or whose put raised."""
        self._queue: queue.Queue[Block | None] = queue.Queue(maxsize=limit)
        self._pending: set[bytes] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="aitrinity-kv-saver", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Blocks handed over and not written yet."""
        with self._lock:
            return len(self._pending)

    def submit(self, block: Block) -> bool:
        """Hand one block over (waits while the queue is full); False if it is stored or on its way already."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the saver is closed")
            if block.key in self._pending or self.store.has(block.key):
                return False
            self._pending.add(block.key)
        self._queue.put(block)
        return True

    def drain(self) -> None:
        """Wait until every block handed over so far is stored (or has failed)."""
        self._queue.join()

    def close(self) -> None:
        """Drain, then stop the thread; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            block = self._queue.get()
            try:
                if block is None:
                    return
                ok = self.store.put(block.key, block.payload, block.tag, content=block.content)
                if ok:
                    self.saved += 1
                else:
                    self.failed += 1
            except Exception:  # a tier's bug must not kill the writer: log it, count it, keep writing
                log.exception("storing KV block %s failed", block.key.hex() if block else "")
                self.failed += 1
            finally:
                if block is not None:
                    with self._lock:
                        self._pending.discard(block.key)
                self._queue.task_done()
