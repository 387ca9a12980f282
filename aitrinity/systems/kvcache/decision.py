"""Per request: where the cached prefix sits, and whether to load it, part of it, or recompute.

Joins the store's ``lookup`` (which tier holds each leading block, why the
next one is missing) with ``cost.kv_reuse.decide`` (each tier's bandwidth and
per-block latency against the model's prefill FLOPs on the device).
"""

from __future__ import annotations

from dataclasses import dataclass

from aitrinity.cost.kv_reuse import ReuseDecision, Source, decide
from aitrinity.spec.model import ModelSpec
from aitrinity.systems.kvcache.keys import BlockKeys
from aitrinity.systems.kvcache.store import KVStore, Lookup


@dataclass(frozen=True)
class ReuseCost:
    """What the decision needs besides the store: the model, the achievable FLOP/s, the KV dtype."""

    model: ModelSpec
    flops_per_s: float
    kv_dtype: str = "bf16"
    compression: float = 1.0
    masked_past: bool = False
    """The attention kernel computes every score once a prefix is loaded (``cost.kv_reuse.prefill_flops``):
    True for transformers' SDPA path on CPU."""


@dataclass(frozen=True)
class RequestPlan:
    lookup: Lookup
    decision: ReuseDecision

    @property
    def explanation(self) -> str:
        """Why the request recomputes what it recomputes."""
        if self.decision.choice == "recompute" and self.lookup.blocks:
            return self.decision.reason
        return self.lookup.miss or self.decision.reason


def plan_request(store: KVStore, bk: BlockKeys, prompt_tokens: int, cost: ReuseCost) -> RequestPlan:
    look = store.lookup(bk)
    tiers = {t.tier.name: t.tier for t in store.tiers}
    sources: list[Source | None] = [Source(n, tiers[n].bandwidth_Bps, tiers[n].latency_s) for n in look.sources]
    d = decide(
        cost.model,
        prompt_tokens,
        sources,
        block_tokens=bk.block_tokens,
        flops_per_s=cost.flops_per_s,
        kv_dtype=cost.kv_dtype,
        compression=cost.compression,
        masked_past=cost.masked_past,
    )
    return RequestPlan(look, d)
