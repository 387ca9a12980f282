"""A tiered store of KV blocks: tiers fastest first, one ``BlockIndex`` each, one lock.

Writes (``write="back"``, the default): a block goes to the first tier (or
the next, where a tier is full of pinned blocks, too small or failing); a
block that tier evicts is demoted to the next (dropped from the last). A hit
in a lower tier is promoted (moved) to the first. ``write="through"``: a block
goes to every tier, each evicting on its own; a lower-tier hit is copied up.

Reads hand out blocks under a reader count, so no writer can evict a block
while it is read. A block that fails its checksum is removed from its tier
and the next tier's copy, if any, is used. Every miss carries a reason:
``no block``, ``salt mismatch`` (the same tokens are cached under another
salt), ``evicted``, ``checksum failure``, ``tier unavailable``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from aitrinity.cost.block_index import BlockIndex, Full
from aitrinity.systems.kvcache import frame
from aitrinity.systems.kvcache.keys import BlockKeys
from aitrinity.systems.kvcache.tiers import Miss, Tier

log = logging.getLogger(__name__)


@dataclass
class TierConfig:
    tier: Tier
    capacity_bytes: int | None = None
    policy: str = "lru"


@dataclass(frozen=True)
class Lookup:
    blocks: int
    """Leading blocks present in some tier."""
    tokens: int
    sources: list[str]
    """The first tier holding each leading block."""
    per_tier: dict[str, int]
    """Leading blocks each tier holds on its own."""
    miss: str | None
    """Why block ``blocks`` is not cached (None when every block is)."""


@dataclass
class Fetched:
    payloads: list[memoryview]
    tags: list[str]
    sources: list[str]
    miss: str | None
    seconds: list[float] = field(default_factory=list)
    """Wall time of each block's read (checksum included)."""

    @property
    def blocks(self) -> int:
        return len(self.payloads)


@dataclass
class Stats:
    puts: int = 0
    hits: int = 0
    misses: dict[str, int] = field(default_factory=dict)
    demotions: int = 0
    promotions: int = 0
    evictions: int = 0
    corrupt: int = 0
    refused: int = 0


class KVStore:
    def __init__(
        self,
        tiers: Sequence[TierConfig],
        write: Literal["back", "through"] = "back",
        remember: int = 100_000,
    ) -> None:
        if not tiers:
            raise ValueError("a store needs at least one tier")
        names = [t.tier.name for t in tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must differ: {names}")
        if write not in ("back", "through"):
            raise ValueError("write must be 'back' or 'through'")
        self.tiers = list(tiers)
        self.write = write
        # a put checksums its frame once, as it is built, when a tier it writes to keeps frames outside the process
        self._seal = any(t.tier.sealed for t in (self.tiers if write == "through" else self.tiers[:1]))
        self.index = [BlockIndex(t.capacity_bytes, t.policy) for t in tiers]
        self.stats = Stats()
        self._lock = threading.RLock()
        self._content: dict[bytes, bytes] = {}  # key -> content id
        self._by_content: dict[bytes, set[bytes]] = {}
        self._gone: OrderedDict[bytes, str] = OrderedDict()  # recently lost keys -> why
        self._remember = remember
        for i, t in enumerate(self.tiers):
            for key, size in t.tier.scan():
                self._insert(i, key, size, 0.0)

    # ------------------------------------------------------------------ bookkeeping

    def _forget(self, key: bytes, why: str) -> None:
        for ix in self.index:
            if ix.contains(key):
                return
        c = self._content.pop(key, None)
        if c is not None:
            s = self._by_content.get(c)
            if s is not None:
                s.discard(key)
                if not s:
                    del self._by_content[c]
        self._gone[key] = why
        self._gone.move_to_end(key)
        while len(self._gone) > self._remember:
            self._gone.popitem(last=False)

    def _insert(self, level: int, key: bytes, size: int, flops: float) -> bool:
        """Index ``key`` (already written) in tier ``level``; handle the evicted blocks."""
        try:
            victims = self.index[level].insert(key, size, flops)
        except Full:
            self.tiers[level].tier.delete(key)
            self.stats.refused += 1
            return False
        for vkey, meta in victims:
            self.stats.evictions += 1
            assert isinstance(vkey, bytes)
            self._evicted(level, vkey, meta.flops)
        return True

    def _evicted(self, level: int, key: bytes, flops: float) -> None:
        tier = self.tiers[level].tier
        nxt = level + 1
        if self.write == "back" and nxt < len(self.tiers) and key not in self.index[nxt]:
            self._demote(tier, nxt, key, flops)
        tier.delete(key)  # after _demote returned: no view of the frame is left here
        self._forget(key, "evicted")

    def _demote(self, tier: Tier, nxt: int, key: bytes, flops: float) -> None:
        got = tier.get(key)
        if (
            not isinstance(got, Miss)
            and _write(self.tiers[nxt].tier, key, got)
            and self._insert(nxt, key, got.nbytes, flops)
        ):
            self.stats.demotions += 1

    # ------------------------------------------------------------------ writes

    def put(
        self,
        key: bytes,
        payload: bytes | bytearray | memoryview,
        tag: str = "",
        flops: float = 0.0,
        content: bytes | None = None,
    ) -> bool:
        """Store one block; False if no tier took it (all full of pinned blocks, or unavailable)."""
        mv = memoryview(payload).cast("B")
        data = self.tiers[0].tier.buffer(frame.frame_bytes(mv.nbytes, tag))
        frame.encode_into(data, key, mv, tag, self._seal)
        stored = False
        with self._lock:
            if content is not None:
                self._content[key] = content
                self._by_content.setdefault(content, set()).add(key)
            for i, ix in enumerate(self.index):
                if ix.contains(key):
                    ix.touch(key)
                    stored = True
                else:
                    t = self.tiers[i].tier
                    # only the tier that lent the buffer may keep it; a lower memory tier gets its own copy
                    own = data if i == 0 or t.sealed else bytearray(data)
                    stored = _write(t, key, own) and self._insert(i, key, len(data), flops)
                if stored and self.write == "back":
                    break  # write-back: the fastest tier that takes it (a full or failing tier passes it down)
            if stored:
                self.stats.puts += 1
                self._gone.pop(key, None)
            else:
                self._forget(key, "refused: no tier had room")
        return stored

    def put_blocks(
        self,
        bk: BlockKeys,
        payloads: Sequence[bytes | memoryview],
        start: int = 0,
        tag: str = "",
        flops: Sequence[float] | None = None,
    ) -> int:
        """Store blocks ``start, start+1, ...`` of ``bk``; returns how many were stored."""
        n = 0
        for j, p in enumerate(payloads, start):
            n += self.put(bk.keys[j], p, tag, flops[j - start] if flops else 0.0, bk.content[j])
        return n

    def flush(self) -> int:
        """Copy every block that only the first tier holds down to the next tier that takes it, and return how many.

        With write-back a block lives in the fastest tier with room and reaches a lower one only when evicted; a
        memory tier belongs to its process, so a server that stops calls this first and what it cached outlives it
        on disk or in Redis. The block stays in the first tier too. Nothing to do with one tier or write-through
        (every tier was written). Each tier then sends what it deferred (a Redis tier's pending deletes)."""
        try:
            return self._flush()
        finally:
            with self._lock:  # deferred deletes are queued under it, by puts and evictions
                for t in self.tiers:
                    t.tier.sync()

    def _flush(self) -> int:
        if len(self.tiers) < 2 or self.write == "through":
            return 0
        copied = 0
        with self._lock:
            first = self.tiers[0].tier
            only = [k for k in self.index[0] if not any(k in ix for ix in self.index[1:])]
            for key in only:
                assert isinstance(key, bytes)
                meta = self.index[0].meta(key)
                for nxt in range(1, len(self.tiers)):
                    got = first.get(key)
                    if isinstance(got, Miss):
                        break
                    # a copy: a sealed tier seals the frame in place, and the first tier keeps its own
                    if _write(self.tiers[nxt].tier, key, bytearray(got)) and self._insert(
                        nxt, key, got.nbytes, meta.flops if meta else 0.0
                    ):
                        copied += 1
                        break
        return copied

    # ------------------------------------------------------------------ reads

    def has(self, key: bytes) -> bool:
        """Whether some tier indexes ``key`` (no data read, no policy update)."""
        with self._lock:
            return self._level_of(key) >= 0

    def _level_of(self, key: bytes) -> int:
        return next((i for i, ix in enumerate(self.index) if ix.contains(key)), -1)

    def _why(self, bk: BlockKeys, j: int) -> str:
        key = bk.keys[j]
        if key in self._gone:
            return self._gone[key]
        others = self._by_content.get(bk.content[j], set()) - {key}
        if others:
            return "salt mismatch: these tokens are cached under another salt"
        down = [t.tier.name for t in self.tiers if not getattr(t.tier, "available", True)]
        if down:
            return f"no block (tier unavailable: {', '.join(down)})"
        return "no block"

    def lookup(self, bk: BlockKeys) -> Lookup:
        """How much of the prefix is cached, and where (no data read, no policy update)."""
        names = [t.tier.name for t in self.tiers]
        up = [getattr(t.tier, "available", True) for t in self.tiers]  # a down tier's blocks cannot be read now
        with self._lock:
            per = {name: ix.prefix(bk.keys) if ok else 0 for name, ix, ok in zip(names, self.index, up, strict=True)}
            if len(self.index) == 1:
                sources = [names[0]] * per[names[0]]
            else:
                sources = []
                tests = [(ix.contains, name) for ix, name, ok in zip(self.index, names, up, strict=True) if ok]
                for k in bk.keys:
                    name = next((n for has, n in tests if has(k)), None)
                    if name is None:
                        break
                    sources.append(name)
            miss = self._why(bk, len(sources)) if len(sources) < len(bk.keys) else None
        return Lookup(len(sources), len(sources) * bk.block_tokens, sources, per, miss)

    def fetch(self, bk: BlockKeys, max_blocks: int | None = None) -> Fetched:
        """Read the longest cached prefix (at most ``max_blocks`` blocks), checking each block.

        Hits are touched and promoted to the first tier; the first block that
        cannot be read ends the prefix, and ``miss`` says why.
        """
        keys = bk.keys[: len(bk.keys) if max_blocks is None else max_blocks]
        out = Fetched([], [], [], None)
        for j, key in enumerate(keys):
            t0 = time.perf_counter()
            got = self._read(key)
            if isinstance(got, str) or got is None:
                out.miss = got or self._why(bk, j)
                kind = out.miss.split(":")[0]
                self.stats.misses[kind] = self.stats.misses.get(kind, 0) + 1
                break
            payload, tag, lv = got
            out.payloads.append(payload)
            out.tags.append(tag)
            out.sources.append(self.tiers[lv].tier.name)
            out.seconds.append(time.perf_counter() - t0)
            self.stats.hits += 1
        return out

    def _read(self, key: bytes) -> tuple[memoryview, str, int] | str | None:
        """(payload, tag, level) from the fastest tier with a good copy; else why not (None: never there)."""
        reason: str | None = None
        while True:
            with self._lock:
                lv = self._level_of(key)
                if lv < 0:
                    return reason
                ix = self.index[lv]
                ix.touch(key)
                tier = self.tiers[lv].tier
                if not tier.sealed:  # process memory: a dict lookup, read under the lock (no reader to register)
                    got = tier.get(key)
                else:
                    ix.acquire(key)
            if tier.sealed:  # a file or a socket: read outside the lock, the block held against eviction
                try:
                    got = tier.get(key)
                finally:
                    with self._lock:
                        if key in ix:
                            ix.release(key)
            if isinstance(got, Miss) and got.reason.startswith("tier unavailable"):
                return f"{got.reason} ({tier.name})"  # still indexed: it may come back
            if isinstance(got, Miss):
                with self._lock:
                    ix.remove(key)
                    if got.reason.startswith("checksum"):
                        self.stats.corrupt += 1
                        reason = f"checksum failure in {tier.name}"
                    elif got.reason == "absent":
                        reason = f"evicted by the {tier.name} tier itself"
                    else:
                        reason = f"{got.reason} ({tier.name})"
                    self._forget(key, reason)
                continue
            h = frame.read_header(got)
            if lv > 0:
                self._promote(lv, key, got)
            return got[frame.HEADER_BYTES + h.tag_bytes :], h.tag, lv

    def _promote(self, level: int, key: bytes, data: memoryview) -> None:
        with self._lock:
            if key in self.index[0]:
                return
            meta = self.index[level].meta(key)
            t0 = self.tiers[0].tier
            if _write(t0, key, data) and self._insert(0, key, data.nbytes, meta.flops if meta else 0.0):
                self.stats.promotions += 1
                if self.write == "back" and key in self.index[level] and self.index[level].meta(key).readers == 0:  # type: ignore[union-attr]
                    self.index[level].remove(key)
                    self.tiers[level].tier.delete(key)

    # ------------------------------------------------------------------ pins

    def pin(self, key: bytes, soft: bool = False) -> None:
        with self._lock:
            for ix in self.index:
                if key in ix:
                    ix.pin(key, soft)

    def unpin(self, key: bytes) -> None:
        with self._lock:
            for ix in self.index:
                if key in ix:
                    ix.unpin(key)

    def used_bytes(self) -> dict[str, int]:
        with self._lock:
            return {t.tier.name: ix.used_bytes for t, ix in zip(self.tiers, self.index, strict=True)}


def _write(tier: Tier, key: bytes, data: bytearray | memoryview) -> bool:
    """Put a frame, sealing it first where it leaves the process."""
    if tier.sealed:
        frame.seal(data)
    return tier.put(key, data)
