"""A transformers Llama whose prompt KV comes from the store: identical tokens, only the suffix computed."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="transformers is an extra: pip install -e '.[hf]'")

from aitrinity.systems.kvcache import DiskTier, KVStore, MemoryTier, RedisTier, TierConfig  # noqa: E402
from aitrinity.systems.kvcache.decision import ReuseCost  # noqa: E402
from aitrinity.systems.kvcache.hf import PrefixCachedLM, keyer_for, model_spec, tiny_llama  # noqa: E402

from .conftest import start_redis  # noqa: E402

BLOCK = 64


@pytest.fixture(scope="module")
def model():
    return tiny_llama(layers=2, hidden=128, heads=4, kv_heads=2, intermediate=256, vocab=512)


def tokens(n, seed):
    return torch.randint(0, 512, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


class TokenCounter:
    """Counts the prompt positions the model actually ran (its embedding's input sizes)."""

    def __init__(self, model):
        self.seen: list[int] = []
        model.model.embed_tokens.register_forward_hook(lambda m, i, o: self.seen.append(i[0].shape[-1]))


def test_identical_tokens_and_only_the_suffix_is_computed(model, tmp_path):
    store = KVStore([TierConfig(MemoryTier(), 4 * 2**20), TierConfig(DiskTier(tmp_path, "ns"), None)])
    lm = PrefixCachedLM(model, store, keyer_for(model, block_tokens=BLOCK))
    counter = TokenCounter(model)
    shared = tokens(600, 0)
    first = lm.generate(shared + tokens(40, 1), 6)
    assert first.reused_tokens == 0 and first.stored_blocks == 640 // BLOCK
    for suffix_len, seed in ((40, 2), (300, 3), (1, 4)):
        prompt = shared + tokens(suffix_len, seed)
        counter.seen.clear()
        plain = lm.generate(prompt, 6, reuse=False)
        counter.seen.clear()
        cached = lm.generate(prompt, 6)
        assert cached.tokens == plain.tokens
        assert cached.reused_tokens == (600 // BLOCK) * BLOCK
        assert counter.seen[0] == len(prompt) - cached.reused_tokens  # the prefill ran only the rest


def test_another_salt_or_model_never_loads(model):
    store = KVStore([TierConfig(MemoryTier())])
    p = tokens(300, 5)
    PrefixCachedLM(model, store, keyer_for(model, salt="a", block_tokens=BLOCK)).generate(p, 2)
    b = PrefixCachedLM(model, store, keyer_for(model, salt="b", block_tokens=BLOCK)).generate(p, 2)
    assert b.reused_tokens == 0 and b.miss.startswith("salt mismatch")
    other = tiny_llama(
        layers=2, hidden=128, heads=4, kv_heads=2, intermediate=256, vocab=512, seed=0, max_positions=4096
    )
    c = PrefixCachedLM(other, store, keyer_for(other, salt="a", block_tokens=BLOCK)).generate(p, 2)
    assert c.reused_tokens == 0


def test_the_cost_decision_loads_from_fast_tiers_and_recomputes_past_slow_ones(model, tmp_path):
    spec = model_spec(model)
    cost = ReuseCost(spec, flops_per_s=50e9, kv_dtype="fp32")
    # the same blocks behind a fast tier and behind a 1 MB/s one with 50 ms per block
    fast = KVStore([TierConfig(MemoryTier(bandwidth_Bps=20e9, latency_s=1e-6))])
    slow = KVStore([TierConfig(DiskTier(tmp_path, "ns", fsync=False, bandwidth_Bps=1e6, latency_s=0.05))])
    p = tokens(400, 6)
    for store in (fast, slow):
        lm = PrefixCachedLM(model, store, keyer_for(model, block_tokens=BLOCK), cost=cost)
        lm.generate(p, 1)
        again = lm.generate(p, 3)
        assert again.tokens == lm.generate(p, 3, reuse=False).tokens
        if store is fast:
            assert again.choice == "load" and again.reused_tokens == 6 * BLOCK
        else:
            assert again.choice == "recompute" and again.reused_tokens == 0
            assert again.miss.startswith("not worth loading")


@pytest.mark.redis
def test_redis_killed_mid_run_falls_back_to_recompute(model):
    srv = start_redis()
    try:
        keyer = keyer_for(model, block_tokens=BLOCK)
        tier = RedisTier(srv.url, keyer.namespace, timeout_s=0.5, retry_s=60)
        store = KVStore([TierConfig(MemoryTier(), 3 * 65_700), TierConfig(tier, None)])  # three 64 KiB blocks
        lm = PrefixCachedLM(model, store, keyer)
        prompts = [tokens(400, 10 + i) for i in range(4)]
        expected = [lm.generate(p, 4, reuse=False).tokens for p in prompts]
        for p in prompts:
            lm.generate(p, 4)  # fills memory, demotes the older blocks to Redis
        assert store.stats.demotions > 0
        srv.kill()
        out = [lm.generate(p, 4) for p in prompts]
        assert [g.tokens for g in out] == expected
        assert any(g.miss and "tier unavailable" in g.miss for g in out)
    finally:
        if srv.proc.poll() is None:
            srv.kill()
