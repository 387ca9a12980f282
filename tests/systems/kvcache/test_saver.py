"""The background writer: every block handed over is stored once, drain waits for them, failures are counted."""

import threading

import pytest

from aitrinity.systems.kvcache import Keyer, KVStore, MemoryTier, TierConfig
from aitrinity.systems.kvcache.saver import Block, Saver


def _blocks(n: int) -> list[Block]:
    keys = Keyer.of("t", block_tokens=4).keys(list(range(4 * n))).keys
    return [Block(key, key * 8, "tag") for key in keys]


def test_every_block_is_stored_once_and_drain_waits_for_it():
    store = KVStore([TierConfig(MemoryTier())])
    saver = Saver(store, limit=2)  # a small queue: submit waits for room, nothing is dropped
    blocks = _blocks(20)
    assert all(saver.submit(b) for b in blocks)
    assert not saver.submit(blocks[0])  # stored or on its way already: not handed over (nor written) twice
    saver.drain()
    assert saver.pending == 0 and saver.saved == 20 and saver.failed == 0 and store.stats.puts == 20
    got = store.fetch(Keyer.of("t", block_tokens=4).keys(list(range(80))))
    assert [bytes(p) for p in got.payloads] == [b.key * 8 for b in blocks]
    saver.close()
    saver.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        saver.submit(_blocks(21)[-1])


class _Gate(MemoryTier):
    """A memory tier whose puts wait for a gate (a slow disk) and fail for one key."""

    def __init__(self, bad: bytes) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.bad = bad

    def put(self, key, data):
        self.gate.wait()
        if key == self.bad:
            raise OSError("disk on fire")
        return super().put(key, data)


def test_the_caller_does_not_wait_for_the_write_and_a_failing_put_is_counted_not_raised():
    blocks = _blocks(3)
    tier = _Gate(bad=blocks[1].key)
    store = KVStore([TierConfig(tier)])
    saver = Saver(store)
    for b in blocks:
        saver.submit(b)  # returns while the tier is still blocked
    assert saver.pending == 3 and store.stats.puts == 0
    tier.gate.set()
    saver.close()  # drains first
    assert (saver.saved, saver.failed, saver.pending) == (2, 1, 0)
    assert store.has(blocks[0].key) and not store.has(blocks[1].key) and store.has(blocks[2].key)
