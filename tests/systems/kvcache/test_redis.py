"""The Redis tier against a real server: namespacing, restart, corruption, server eviction, a dead server."""

import pytest

from aitrinity.systems.kvcache import BlockKeys, Keyer, KVStore, MemoryTier, RedisTier, TierConfig

from .conftest import start_redis

pytestmark = pytest.mark.redis


def payload(key: bytes, size: int = 4096) -> bytes:
    return (key * (size // len(key) + 1))[:size]


def put_prompt(s, k, toks, size=4096):
    bk = k.keys(toks)
    return s.put_blocks(bk, [payload(x, size) for x in bk.keys])


def test_namespaced_and_found_again_after_restart(redis_server):
    import redis

    k = Keyer.of("tenant-a", block_tokens=4)
    s = KVStore([TierConfig(RedisTier(redis_server.url, k.namespace), None)])
    toks = list(range(12))
    assert put_prompt(s, k, toks) == 3
    names = redis.Redis.from_url(redis_server.url).keys("*")
    assert len(names) == 3 and all(n.startswith(f"aitrinity:kv:{k.namespace}:".encode()) for n in names)
    again = KVStore([TierConfig(RedisTier(redis_server.url, k.namespace), None)])
    got = again.fetch(k.keys(toks))
    assert [bytes(p) for p in got.payloads] == [payload(x) for x in k.keys(toks).keys]
    other = Keyer.of("tenant-b", block_tokens=4)
    assert (
        KVStore([TierConfig(RedisTier(redis_server.url, other.namespace), None)]).lookup(other.keys(toks)).tokens == 0
    )


def test_corrupt_value_is_a_checksum_miss(redis_server):
    import redis

    k = Keyer.of("t", block_tokens=4)
    s = KVStore([TierConfig(RedisTier(redis_server.url, k.namespace), None)])
    toks = list(range(8))
    put_prompt(s, k, toks)
    r = redis.Redis.from_url(redis_server.url)
    name = f"aitrinity:kv:{k.namespace}:{k.keys(toks).keys[0].hex()}"
    r.setrange(name, 100, b"XX")
    got = s.fetch(k.keys(toks))
    assert got.blocks == 0 and got.miss.startswith("checksum failure")
    assert not r.exists(name)


def test_server_side_eviction_reads_as_evicted():
    srv = start_redis("--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
    try:
        k = Keyer.of("t", block_tokens=4)
        s = KVStore([TierConfig(RedisTier(srv.url, k.namespace), None)])
        prompts = [[p * 100 + i for i in range(4)] for p in range(40)]
        for p in prompts:
            put_prompt(s, k, p, size=256 * 1024)
        misses = [s.fetch(k.keys(p)).miss for p in prompts]
        assert any(m and "evicted by the redis tier" in m for m in misses)
        assert misses[-1] is None  # the newest survived
    finally:
        srv.kill()


def test_dead_server_is_a_miss_not_an_exception(redis_server):
    k = Keyer.of("t", block_tokens=4)
    tier = RedisTier(redis_server.url, k.namespace, timeout_s=0.5, retry_s=60)
    s = KVStore([TierConfig(MemoryTier(), 3 * 100), TierConfig(tier, None)])
    toks = list(range(16))
    put_prompt(s, k, toks, size=60)
    redis_server.kill()
    got = s.fetch(k.keys(toks))  # the demoted blocks lived on the dead server
    assert got.blocks == 0 and "tier unavailable" in got.miss
    assert put_prompt(s, k, list(range(100, 116)), size=60) == 4  # writes still land in memory
    assert not tier.available
    look = s.lookup(k.keys(toks))  # still indexed, but a lookup claims nothing a read would fail on
    assert look.blocks == 0 and look.per_tier["redis"] == 0 and "tier unavailable" in (look.miss or "")


def test_an_evicted_blocks_del_rides_with_the_next_set(redis_server):
    """One round trip per put at capacity: the evicted block's DEL goes out ahead of the next SET, in the same
    write -- so the server holds it until then, and a block evicted and put again is deleted, then set."""
    import redis

    r = redis.Redis.from_url(redis_server.url)
    k = Keyer.of("ride", block_tokens=4)
    tier = RedisTier(redis_server.url, k.namespace)
    s = KVStore([TierConfig(tier, 2 * (4096 + 40))])  # two frames of 4096 bytes
    b = k.keys(list(range(16))).keys

    def on_server() -> set[bytes]:
        return {bytes.fromhex(n.decode().rsplit(":", 1)[1]) for n in r.keys(f"aitrinity:kv:{k.namespace}:*")}

    for x in b[:3]:
        assert s.put(x, payload(x))
    assert on_server() == {b[0], b[1], b[2]}  # b0 is evicted; its DEL waits for the next SET
    assert s.put(b[3], payload(b[3]))
    assert on_server() == {b[1], b[2], b[3]}  # b0's DEL went with b3's SET; b1's waits
    assert s.put(b[1], payload(b[1]))  # b1 again: its pending DEL is sent before its SET
    assert on_server() == {b[1], b[2], b[3]}
    got = s.fetch(BlockKeys([b[3], b[1]], [b[3], b[1]], 4))
    assert [bytes(p) for p in got.payloads] == [payload(b[3]), payload(b[1])]
    assert s.flush() == 0 and on_server() == {b[1], b[3]}  # a store that stops sends what is pending


def test_blocks_larger_than_the_socket_buffer_round_trip(redis_server):
    """A put sends its DELs, the SET's header, the value and the trailer in one gathered write; a 24 MiB block does
    not fit a loopback socket buffer, so the rest follows the first write: every byte still arrives, in order."""
    k = Keyer.of("big", block_tokens=4)
    s = KVStore([TierConfig(RedisTier(redis_server.url, k.namespace), 2 * (24 * 2**20 + 64))])
    b = k.keys(list(range(12))).keys
    for x in b:  # the third put evicts the first: its DEL rides ahead of the SET
        assert s.put(x, payload(x, 24 * 2**20))
    got = s.fetch(BlockKeys(b[1:], b[1:], 4))
    assert got.blocks == 2 and [bytes(p) for p in got.payloads] == [payload(x, 24 * 2**20) for x in b[1:]]


def test_gathered_send_finishes_what_the_first_write_left():
    """``_send_gathered`` against a socket pair whose reader is slower than the writer: the first ``sendmsg`` takes
    what the buffer holds, the rest is sent after it, part by part, without loss or reordering."""
    import socket
    import threading

    from aitrinity.systems.kvcache.tiers import _send_gathered

    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    a.settimeout(30)  # as redis-py's sockets: a write sends what the buffer takes and returns
    parts = [b"head-", memoryview(bytearray(range(256)) * 40_000), b"-tail"]
    want = b"".join(bytes(p) for p in parts)
    got = bytearray()

    def read() -> None:
        while len(got) < len(want):
            chunk = b.recv(65536)
            if not chunk:  # the writer closed early
                return
            got.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _send_gathered(a, parts)
    reader.join(timeout=60)
    a.close()
    b.close()
    assert bytes(got) == want
