"""The worker's lookup service over a real Unix socket, and the measured rates it reports."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from aitrinity.systems.kvcache.keys import Keyer
from aitrinity.systems.kvcache.store import KVStore, TierConfig
from aitrinity.systems.kvcache.tiers import DiskTier, MemoryTier
from aitrinity.systems.vllm.lookup import LookupClient, LookupServer, Rates, answer, probe, socket_path

BLOCK = 4


@pytest.fixture
def store(tmp_path) -> KVStore:
    return KVStore([TierConfig(MemoryTier(), 1 << 20), TierConfig(DiskTier(tmp_path, "ns"))], write="through")


def test_lookup_over_the_socket_names_tiers_and_rates(store: KVStore) -> None:
    keyer = Keyer.of("s", BLOCK)
    tokens = list(range(3, 3 + 4 * BLOCK))
    bk = keyer.keys(tokens)
    for k, c in zip(bk.keys[:3], bk.content[:3], strict=True):
        store.put(k, bytes(64), "t", content=c)
    rates = Rates()
    for t in store.tiers:
        probe(t.tier, 64, rates)
    assert set(rates.s_per_block) == {"memory", "disk"} and all(v > 0 for v in rates.s_per_block.values())
    assert store.lookup(bk).blocks == 3  # the probe block left nothing behind

    def handle(msg: dict[str, Any]) -> dict[str, Any]:
        return {"extra": {"x": 1}} if "hello" in msg else answer(store, rates, 64, msg)

    path = socket_path(f"test-{uuid.uuid4()}")
    server = LookupServer(path, handle)
    try:
        client = LookupClient(path)
        got = client.ask(bk)
        assert got is not None
        assert got["sources"] == ["memory"] * 3 and got["miss"] == "no block" and got["block_bytes"] == 64
        assert got["s_per_block"] == rates.s_per_block and got["flops_per_s"] is None
        assert client.hello() == {"extra": {"x": 1}}
        assert client.call({"keys": ["zz"], "content": []}) is None and "bad keys" in client.last_error
        assert client.ask(bk) is not None  # the connection survives a bad request
        assert oct(path.stat().st_mode & 0o777) == "0o600"
    finally:
        server.close()
    assert not path.exists()
    assert LookupClient(path, timeout_s=0.2).ask(bk) is None  # no worker: nothing is claimed


def test_rates_are_moving_averages() -> None:
    r = Rates(alpha=0.5)
    r.read("disk", 2, 2e-3)
    r.read("disk", 1, 3e-3)
    assert r.s_per_block["disk"] == pytest.approx(2e-3)
    r.prefill(1e12, 10.0)
    r.prefill(3e12, 10.0)
    assert r.flops_per_s == pytest.approx(2e11)
    r.read("disk", 0, 1.0)  # nothing read: ignored
    assert r.s_per_block["disk"] == pytest.approx(2e-3)
