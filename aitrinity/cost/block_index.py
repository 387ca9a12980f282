"""Which KV blocks a cache tier holds, and which one it gives up next (pure, no I/O).

One ``BlockIndex`` per tier: block key -> size in bytes, recompute FLOPs, pin
state and readers, under a byte capacity. Used by the real store
(``aitrinity.systems.kvcache``), by trace replay (``cost.prefix_reuse``) and by
the simulator, so all three evict in exactly the same order.

Eviction order (the victim is the first block in this order that may go):

- ``lru`` (default): least recently inserted-or-hit first (vLLM automatic prefix
  caching; Mooncake FAST'25 §3 evicts LRU too).
- ``lfu``: fewest hits while resident first; ties broken least-recently-used
  first. Counts start at 1 on insert and are forgotten on eviction.
- ``cost``: GreedyDual-Size-Frequency (Cherkasova 1998): a block's priority is
  ``H = L + hits · flops / bytes`` -- recompute FLOPs saved per byte held,
  times how often it was used -- and the lowest ``H`` goes first (ties LRU).
  ``L`` (the inflation value) becomes the evicted block's ``H``, so blocks that
  stop being used age out. A block with unknown FLOPs counts as 1 FLOP.
  Measured on the Mooncake conversation trace it keeps fewer useful blocks
  than LRU (docs/kvcache.md): there reuse follows recency (multi-turn
  sessions), while the FLOPs term favours the deep blocks of long sessions
  that have ended. It suits long-lived shared prefixes of unequal cost.

Who may go: a hard-pinned block never; a block with readers never (it is being
read); a soft-pinned block only when no unpinned block may go. If nothing may
go, ``insert`` refuses the block (``Full``) and changes nothing.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Key = Hashable
PolicyName = Literal["lru", "lfu", "cost"]
POLICIES: tuple[PolicyName, ...] = ("lru", "lfu", "cost")


class Full(Exception):
    """No block may be evicted to make room (every resident block is pinned or being read)."""


@dataclass(slots=True)
class BlockMeta:
    size_bytes: int
    flops: float
    hits: int = 1
    tick: int = 0
    pin: Literal["none", "soft", "hard"] = "none"
    readers: int = 0

    @property
    def guarded(self) -> bool:
        """Pinned (hard or soft) or being read: not an ordinary eviction candidate."""
        return self.pin != "none" or self.readers > 0


class Policy(Protocol):
    name: str

    def add(self, key: Key, meta: BlockMeta) -> None: ...
    def hit(self, key: Key, meta: BlockMeta) -> None: ...
    def discard(self, key: Key) -> None: ...
    def evict(self, key: Key) -> None: ...
    def victim(self, may_go: Callable[[Key], bool] | None) -> Key | None: ...
    def first(self, need: int, metas: dict[Key, BlockMeta]) -> list[tuple[Key, BlockMeta]]: ...
    def order(self, metas: dict[Key, BlockMeta]) -> list[Key]: ...


class LRU:
    name = "lru"

    def __init__(self) -> None:
        self._od: OrderedDict[Key, None] = OrderedDict()

    def add(self, key: Key, meta: BlockMeta) -> None:
        self._od[key] = None

    def hit(self, key: Key, meta: BlockMeta) -> None:
        self._od.move_to_end(key)

    def discard(self, key: Key) -> None:
        self._od.pop(key, None)

    def evict(self, key: Key) -> None:
        self._od.pop(key, None)

    def victim(self, may_go: Callable[[Key], bool] | None) -> Key | None:
        if may_go is None:
            return next(iter(self._od), None)
        return next((k for k in self._od if may_go(k)), None)

    def first(self, need: int, metas: dict[Key, BlockMeta]) -> list[tuple[Key, BlockMeta]]:
        """The least recent blocks that free ``need`` bytes, pins and readers ignored (one pass, no call per block:
        a cache at capacity evicts on every insert)."""
        out, freed = [], 0
        for k in self._od:
            m = metas[k]
            out.append((k, m))
            freed += m.size_bytes
            if freed >= need:
                break
        return out

    def order(self, metas: dict[Key, BlockMeta]) -> list[Key]:
        return list(self._od)


class _HeapPolicy:
    """Lowest ``priority`` first, ties by tick (least recent first); a lazy heap with stale entries skipped."""

    name = ""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Key]] = []
        self._live: dict[Key, tuple[float, int]] = {}

    def priority(self, meta: BlockMeta) -> float:
        raise NotImplementedError

    def _push(self, key: Key, meta: BlockMeta) -> None:
        entry = (self.priority(meta), meta.tick)
        self._live[key] = entry
        heapq.heappush(self._heap, (*entry, key))
        if len(self._heap) > 4 * len(self._live) + 64:  # drop stale entries now and then
            self._heap = [(p, t, k) for k, (p, t) in self._live.items()]
            heapq.heapify(self._heap)

    def add(self, key: Key, meta: BlockMeta) -> None:
        self._push(key, meta)

    def hit(self, key: Key, meta: BlockMeta) -> None:
        self._push(key, meta)

    def discard(self, key: Key) -> None:
        self._live.pop(key, None)

    def victim(self, may_go: Callable[[Key], bool] | None) -> Key | None:
        skipped: list[tuple[float, int, Key]] = []
        found = None
        while self._heap:
            p, t, k = self._heap[0]
            if self._live.get(k) != (p, t):
                heapq.heappop(self._heap)
            elif may_go is None or may_go(k):
                found = k
                break
            else:
                skipped.append(heapq.heappop(self._heap))
        for e in skipped:
            heapq.heappush(self._heap, e)
        return found

    def first(self, need: int, metas: dict[Key, BlockMeta]) -> list[tuple[Key, BlockMeta]]:
        chosen: dict[Key, BlockMeta] = {}
        freed = 0
        while freed < need:
            k = self.victim(None if not chosen else lambda k: k not in chosen)
            if k is None:
                break
            chosen[k] = metas[k]
            freed += chosen[k].size_bytes
        return list(chosen.items())

    def evict(self, key: Key) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            self.evicted(entry[0])

    def evicted(self, priority: float) -> None:
        pass

    def order(self, metas: dict[Key, BlockMeta]) -> list[Key]:
        return sorted(self._live, key=lambda k: self._live[k])


class LFU(_HeapPolicy):
    name = "lfu"

    def priority(self, meta: BlockMeta) -> float:
        return float(meta.hits)


class CostAware(_HeapPolicy):
    """GreedyDual-Size-Frequency with recompute FLOPs as the cost (Cherkasova 1998, HP Labs TR HPL-98-69)."""

    name = "cost"

    def __init__(self) -> None:
        super().__init__()
        self.inflation = 0.0

    def priority(self, meta: BlockMeta) -> float:
        return self.inflation + meta.hits * max(meta.flops, 1.0) / max(meta.size_bytes, 1)

    def evicted(self, priority: float) -> None:
        self.inflation = priority


def make_policy(name: str) -> Policy:
    if name == "lru":
        return LRU()
    if name == "lfu":
        return LFU()
    if name == "cost":
        return CostAware()
    raise ValueError(f"unknown eviction policy {name!r}: expected one of {', '.join(POLICIES)}")


class BlockIndex:
    """The blocks one tier holds under ``capacity_bytes`` (None: unbounded), evicting by ``policy``."""

    def __init__(self, capacity_bytes: int | None, policy: str = "lru") -> None:
        if capacity_bytes is not None and capacity_bytes < 0:
            raise ValueError("capacity_bytes must be >= 0 or None")
        self.capacity_bytes = capacity_bytes
        self.policy = make_policy(policy)
        self.used_bytes = 0
        self.evictions = 0
        self._guarded = 0  # blocks pinned or being read
        self._meta: dict[Key, BlockMeta] = {}
        self._clock = itertools.count(1)
        self.contains: Callable[[Key], bool] = self._meta.__contains__
        """``key in index`` without a Python-level call (hot loops)."""

    def __len__(self) -> int:
        return len(self._meta)

    def __contains__(self, key: Key) -> bool:
        return key in self._meta

    def meta(self, key: Key) -> BlockMeta | None:
        return self._meta.get(key)

    def __iter__(self) -> Iterator[Key]:
        """The resident keys (a snapshot)."""
        return iter(list(self._meta))

    def prefix(self, keys: Sequence[Key]) -> int:
        """How many leading ``keys`` are resident (no policy update)."""
        meta = self._meta
        n = 0
        for k in keys:
            if k not in meta:
                break
            n += 1
        return n

    def touch(self, key: Key) -> bool:
        """Record a use of ``key``: True if resident (a hit), False otherwise."""
        m = self._meta.get(key)
        if m is None:
            return False
        m.hits += 1
        m.tick = next(self._clock)
        self.policy.hit(key, m)
        return True

    def fits(self, size_bytes: int) -> bool:
        return self.capacity_bytes is None or size_bytes <= self.capacity_bytes

    def insert(self, key: Key, size_bytes: int, flops: float = 0.0) -> list[tuple[Key, BlockMeta]]:
        """Add ``key`` (a resident key is touched instead); returns the evicted blocks, oldest first.

        Raises ``Full`` when the block cannot fit even after every allowed eviction;
        then nothing is evicted.
        """
        if key in self._meta:
            self.touch(key)
            return []
        if size_bytes < 0:
            raise ValueError("size_bytes must be >= 0")
        cap = self.capacity_bytes
        if cap is not None and size_bytes > cap:
            raise Full(f"a {size_bytes}-byte block is larger than the tier ({cap} bytes)")
        victims: list[tuple[Key, BlockMeta]] = []
        if cap is not None and self.used_bytes + size_bytes > cap:
            victims = self._choose_victims(self.used_bytes + size_bytes - cap)
            metas, evict = self._meta, self.policy.evict
            for k, v in victims:
                del metas[k]
                self.used_bytes -= v.size_bytes
                self._guarded -= v.guarded  # (a soft-pinned victim)
                evict(k)
            self.evictions += len(victims)
        m = BlockMeta(size_bytes, flops, 1, next(self._clock))
        self._meta[key] = m
        self.used_bytes += size_bytes
        self.policy.add(key, m)
        return victims

    def _choose_victims(self, need: int) -> list[tuple[Key, BlockMeta]]:
        if not self._guarded and need <= self.used_bytes:  # nothing pinned or read: plain policy order
            return self.policy.first(need, self._meta)
        chosen: dict[Key, BlockMeta] = {}
        freed = 0
        for soft_ok in (False, True):

            def may_go(k: Key, soft_ok: bool = soft_ok) -> bool:
                m = self._meta[k]
                return k not in chosen and m.readers == 0 and (m.pin == "none" or (soft_ok and m.pin == "soft"))

            while freed < need:
                k = self.policy.victim(may_go)
                if k is None:
                    break
                chosen[k] = self._meta[k]
                freed += self._meta[k].size_bytes
            if freed >= need:
                return list(chosen.items())
        raise Full("every resident block is pinned or being read")

    def remove(self, key: Key) -> BlockMeta | None:
        """Drop ``key`` whatever its pins (a corrupt or deleted block); None if absent."""
        if key not in self._meta:
            return None
        m = self._meta[key]
        self._drop(key)
        self.policy.discard(key)
        return m

    def _drop(self, key: Key) -> None:
        m = self._meta.pop(key)
        self.used_bytes -= m.size_bytes
        self._guarded -= m.guarded

    def _guard(self, key: Key, change: Callable[[BlockMeta], None]) -> None:
        m = self._require(key)
        before = m.guarded
        change(m)
        self._guarded += m.guarded - before

    def pin(self, key: Key, soft: bool = False) -> None:
        self._guard(key, lambda m: setattr(m, "pin", "soft" if soft else "hard"))

    def unpin(self, key: Key) -> None:
        self._guard(key, lambda m: setattr(m, "pin", "none"))

    def acquire(self, key: Key) -> None:
        """A reader starts: the block cannot be evicted until ``release``."""
        self._guard(key, lambda m: setattr(m, "readers", m.readers + 1))

    def release(self, key: Key) -> None:
        if self._require(key).readers <= 0:
            raise ValueError(f"release without acquire for {key!r}")
        self._guard(key, lambda m: setattr(m, "readers", m.readers - 1))

    def _require(self, key: Key) -> BlockMeta:
        m = self._meta.get(key)
        if m is None:
            raise KeyError(key)
        return m

    def eviction_order(self) -> list[Key]:
        """Every resident block in the order the policy would evict it (pins and readers ignored)."""
        return self.policy.order(self._meta)
