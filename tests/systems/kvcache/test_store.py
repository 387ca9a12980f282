"""The store's exact prefix semantics, tiering, pins, miss reasons and concurrency (memory and disk)."""

import os
import threading

import pytest

from aitrinity.systems.kvcache import DiskTier, Keyer, KVStore, MemoryTier, TierConfig
from aitrinity.systems.kvcache.frame import HEADER_BYTES


def payload(key: bytes, size: int = 64) -> bytes:
    return (key * (size // len(key) + 1))[:size]


def store_prompt(store: KVStore, keyer: Keyer, tokens) -> int:
    bk = keyer.keys(tokens)
    return store.put_blocks(bk, [payload(k) for k in bk.keys])


def mem_store(capacity=None, policy="lru"):
    return KVStore([TierConfig(MemoryTier(), capacity, policy)])


def test_issue_semantics_block_256():
    """Storing 1,000 tokens: 768 for the same prompt, 768 with 500 more, 512 for its first 600,
    256 if token #300 changes, 0 for an unrelated prompt, 0 under another salt."""
    k = Keyer.of("tenant-a", block_tokens=256, model="tiny")
    s = mem_store()
    prompt = list(range(1000))
    assert store_prompt(s, k, prompt) == 3
    assert s.lookup(k.keys(prompt)).tokens == 768
    assert s.lookup(k.keys(prompt + list(range(5000, 5500)))).tokens == 768
    assert s.lookup(k.keys(prompt[:600])).tokens == 512
    changed = list(prompt)
    changed[300] = 99_999
    assert s.lookup(k.keys(changed)).tokens == 256
    unrelated = list(range(10_000, 11_000))
    assert s.lookup(k.keys(unrelated)).tokens == 0
    other = Keyer.of("tenant-b", block_tokens=256, model="tiny")
    look = s.lookup(other.keys(prompt))
    assert look.tokens == 0 and look.miss is not None and look.miss.startswith("salt mismatch")
    assert s.lookup(k.keys(unrelated)).miss == "no block"
    got = s.fetch(k.keys(prompt))
    assert got.blocks == 3 and [bytes(p) for p in got.payloads] == [payload(x) for x in k.keys(prompt).keys]


def test_eviction_is_explained_and_capacity_is_bytes():
    k = Keyer.of("t", block_tokens=4)
    frame_bytes = HEADER_BYTES + 64
    s = mem_store(capacity=2 * frame_bytes)
    store_prompt(s, k, list(range(12)))  # three blocks into room for two: block 0 goes
    assert s.used_bytes() == {"memory": 2 * frame_bytes}
    look = s.lookup(k.keys(list(range(12))))
    assert look.tokens == 0 and look.miss == "evicted"


def test_write_back_demotes_and_promotes(tmp_path):
    k = Keyer.of("t", block_tokens=4)
    fb = HEADER_BYTES + 64
    mem, disk = MemoryTier(), DiskTier(tmp_path, k.namespace, fsync=False)
    s = KVStore([TierConfig(mem, fb), TierConfig(disk, None)])
    a, b = k.keys([1, 2, 3, 4]), k.keys([5, 6, 7, 8])
    s.put_blocks(a, [payload(a.keys[0])])
    s.put_blocks(b, [payload(b.keys[0])])  # a demoted to disk
    assert s.lookup(a).sources == ["disk"] and s.lookup(b).sources == ["memory"]
    assert s.has(a.keys[0]) and not s.has(k.keys([9, 9, 9, 9]).keys[0])
    got = s.fetch(a)
    assert got.sources == ["disk"] and bytes(got.payloads[0]) == payload(a.keys[0])
    assert len(got.seconds) == 1 and got.seconds[0] > 0  # each block's read is timed (the connector's rates)
    # promoted (moved) to memory, which demoted b
    assert s.lookup(a).sources == ["memory"] and s.lookup(b).sources == ["disk"]
    assert s.stats.promotions == 1 and s.stats.demotions == 2


def test_write_through_keeps_lower_copy(tmp_path):
    k = Keyer.of("t", block_tokens=4)
    s = KVStore(
        [TierConfig(MemoryTier(), HEADER_BYTES + 64), TierConfig(DiskTier(tmp_path, "ns", fsync=False))],
        write="through",
    )
    a, b = k.keys([1, 2, 3, 4]), k.keys([5, 6, 7, 8])
    s.put_blocks(a, [payload(a.keys[0])])
    s.put_blocks(b, [payload(b.keys[0])])
    assert s.lookup(a).per_tier == {"memory": 0, "disk": 1}
    assert s.lookup(b).per_tier == {"memory": 1, "disk": 1}


def test_flush_copies_memory_only_blocks_down_so_they_outlive_the_process(tmp_path):
    """Write-back keeps a block in the memory tier only; flush (a server stopping) copies each such block to the
    disk tier -- keeping the memory copy -- and a new store on the same disk reads them back intact."""
    k = Keyer.of("t", block_tokens=4)
    toks = list(range(12))
    s = KVStore([TierConfig(MemoryTier()), TierConfig(DiskTier(tmp_path, k.namespace))])
    assert store_prompt(s, k, toks) == 3
    assert s.lookup(k.keys(toks)).per_tier == {"memory": 3, "disk": 0}
    assert s.flush() == 3
    assert s.lookup(k.keys(toks)).per_tier == {"memory": 3, "disk": 3}
    assert s.flush() == 0  # nothing left that only memory holds
    again = KVStore([TierConfig(DiskTier(tmp_path, k.namespace))])
    assert [bytes(p) for p in again.fetch(k.keys(toks)).payloads] == [payload(x) for x in k.keys(toks).keys]
    assert bytes(s.fetch(k.keys(toks)).payloads[0]) == payload(k.keys(toks).keys[0])  # memory's copy untouched
    through = KVStore([TierConfig(MemoryTier()), TierConfig(DiskTier(tmp_path / "t", "ns"))], write="through")
    store_prompt(through, k, toks)
    assert through.flush() == 0 and mem_store().flush() == 0


def test_disk_tier_survives_restart_and_reindexes(tmp_path):
    k = Keyer.of("t", block_tokens=4)
    toks = list(range(16))
    s = KVStore([TierConfig(DiskTier(tmp_path, k.namespace))])
    store_prompt(s, k, toks)
    (tmp_path / k.namespace / ".tmp-deadbeef-1-00").write_bytes(b"half a write")
    again = KVStore([TierConfig(DiskTier(tmp_path, k.namespace))])
    assert again.lookup(k.keys(toks)).tokens == 16
    assert not list((tmp_path / k.namespace).glob(".tmp-*"))
    assert [bytes(p) for p in again.fetch(k.keys(toks)).payloads] == [payload(x) for x in k.keys(toks).keys]
    # re-indexed under a smaller capacity: the oldest blocks (by modification time) are dropped from disk
    for i, key in enumerate(k.keys(toks).keys):
        os.utime(tmp_path / k.namespace / (key.hex() + ".kvb"), ns=(10**18 + i, 10**18 + i))
    small = KVStore([TierConfig(DiskTier(tmp_path, k.namespace), 2 * (HEADER_BYTES + 64))])
    assert small.lookup(k.keys(toks)).tokens == 0
    assert sorted(p.stem for p in (tmp_path / k.namespace).glob("*.kvb")) == sorted(
        key.hex() for key in k.keys(toks).keys[2:]
    )


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap"])
def test_corrupt_disk_block_is_a_miss_and_removed(tmp_path, damage):
    k = Keyer.of("t", block_tokens=4)
    toks = list(range(12))
    bk = k.keys(toks)
    s = KVStore([TierConfig(DiskTier(tmp_path, k.namespace))])
    store_prompt(s, k, toks)
    files = {key: tmp_path / k.namespace / (key.hex() + ".kvb") for key in bk.keys}
    victim = files[bk.keys[1]]
    data = bytearray(victim.read_bytes())
    if damage == "flip":
        data[-3] ^= 0x40
        victim.write_bytes(bytes(data))
    elif damage == "truncate":
        victim.write_bytes(bytes(data[:-10]))
    else:  # another block's (valid) frame under this name
        victim.write_bytes(files[bk.keys[2]].read_bytes())
    got = s.fetch(bk)
    assert got.blocks == 1 and got.miss is not None and got.miss.startswith("checksum failure")
    assert not victim.exists() and s.stats.corrupt == 1
    assert s.lookup(bk).tokens == 4


def test_pinned_blocks_stay_and_full_store_refuses():
    k = Keyer.of("t", block_tokens=4)
    fb = HEADER_BYTES + 64
    s = mem_store(capacity=2 * fb)
    a, b, c = (k.keys([i] * 4) for i in (1, 2, 3))
    s.put_blocks(a, [payload(a.keys[0])])
    s.put_blocks(b, [payload(b.keys[0])])
    s.pin(a.keys[0])
    s.put_blocks(c, [payload(c.keys[0])])
    assert s.lookup(a).tokens == 4 and s.lookup(b).tokens == 0
    s.pin(c.keys[0])
    d = k.keys([4] * 4)
    assert s.put_blocks(d, [payload(d.keys[0])]) == 0 and s.stats.refused == 1
    assert s.lookup(d).miss.startswith("refused")


def test_concurrent_readers_and_writers_never_lose_or_mix_blocks(tmp_path):
    k = Keyer.of("t", block_tokens=8)
    fb = HEADER_BYTES + 256
    s = KVStore([TierConfig(MemoryTier(), 6 * fb), TierConfig(DiskTier(tmp_path, k.namespace, fsync=False), 40 * fb)])
    prompts = [[w * 1000 + i for i in range(8 * 4)] for w in range(8)]
    errors: list[str] = []

    def worker(w: int) -> None:
        for it in range(40):
            p = prompts[(w + it) % 8]
            bk = k.keys(p)
            got = s.fetch(bk)
            for key, data in zip(bk.keys, got.payloads, strict=False):
                if bytes(data) != payload(key, 256):
                    errors.append(f"worker {w}: wrong bytes for a block")
            s.put_blocks(bk, [payload(x, 256) for x in bk.keys])

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    used = s.used_bytes()
    assert used["memory"] <= 6 * fb and used["disk"] <= 40 * fb
    assert all(ix.meta(key).readers == 0 for ix in s.index for key in ix)
    # every block the index holds is readable and right
    for p in prompts:
        bk = k.keys(p)
        got = s.fetch(bk)
        assert [bytes(x) for x in got.payloads] == [payload(key, 256) for key in bk.keys[: got.blocks]]


def test_request_plan_partial_load_across_tiers(tmp_path):
    from aitrinity import catalog
    from aitrinity.systems.kvcache.decision import ReuseCost, plan_request

    k = Keyer.of("t", block_tokens=512)
    fb = HEADER_BYTES + 64
    fast = MemoryTier(bandwidth_Bps=100e9, latency_s=1e-6)
    slow = DiskTier(tmp_path, k.namespace, fsync=False, bandwidth_Bps=10e6, latency_s=0.02)
    s = KVStore([TierConfig(fast, 2 * fb), TierConfig(slow)])
    toks = list(range(512 * 6 + 1))
    bk = k.keys(toks)
    s.put_blocks(bk, [payload(x) for x in bk.keys])  # write-back: the first four demoted to the slow tier
    rp = plan_request(s, bk, len(toks), ReuseCost(catalog.model("llama-3.1-8b"), 400e12))
    assert rp.lookup.sources == ["disk"] * 4 + ["memory"] * 2
    # the slow tier holds the leading blocks, so nothing after them can be loaded without them: recompute
    assert rp.decision.choice == "recompute" and rp.explanation.startswith("not worth loading")
    s.fetch(bk, 2)  # promote the first two into memory (which demotes the last two)
    rp = plan_request(s, bk, len(toks), ReuseCost(catalog.model("llama-3.1-8b"), 400e12))
    assert rp.lookup.sources[:2] == ["memory", "memory"]
    assert rp.decision.choice == "partial" and rp.decision.tokens_by_tier == {"memory": 1024}
    masked = plan_request(s, bk, len(toks), ReuseCost(catalog.model("llama-3.1-8b"), 400e12, masked_past=True))
    assert masked.decision.compute_time_s > rp.decision.compute_time_s  # the flag reaches the cost model


def test_a_memory_tier_below_a_disk_tier_keeps_its_own_copy(tmp_path):
    """The disk tier lends a reusable scratch buffer for each frame; a memory tier after it must not keep it."""
    k = Keyer.of("t", block_tokens=4)
    s = KVStore([TierConfig(DiskTier(tmp_path, k.namespace, fsync=False)), TierConfig(MemoryTier())], write="through")
    a, b = k.keys([1, 2, 3, 4]), k.keys([5, 6, 7, 8])
    s.put_blocks(a, [payload(a.keys[0])])
    s.put_blocks(b, [payload(b.keys[0])])  # same size: the same scratch buffer
    (tmp_path / k.namespace / (a.keys[0].hex() + ".kvb")).unlink()
    s.index[0].remove(a.keys[0])
    got = s.fetch(a)
    assert got.sources == ["memory"] and bytes(got.payloads[0]) == payload(a.keys[0])
