"""A tiered prefix KV-cache store and its load-vs-recompute decision (memory -> compute, for real).

``Keyer`` names token blocks, ``KVStore`` keeps their frames in ``MemoryTier``,
``DiskTier`` and ``RedisTier`` under per-tier eviction policies
(``cost.block_index``), and ``cost.kv_reuse.decide`` says whether loading
beats recomputing. ``systems.kvcache.hf`` runs a transformers model on it.
"""

from aitrinity.systems.kvcache.keys import BlockKeys, Keyer
from aitrinity.systems.kvcache.store import Fetched, KVStore, Lookup, TierConfig
from aitrinity.systems.kvcache.tiers import DiskTier, MemoryTier, Miss, RedisTier

__all__ = [
    "BlockKeys",
    "DiskTier",
    "Fetched",
    "KVStore",
    "Keyer",
    "Lookup",
    "MemoryTier",
    "Miss",
    "RedisTier",
    "TierConfig",
]
