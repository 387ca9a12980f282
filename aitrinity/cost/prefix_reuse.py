"""Prefix-cache hit rates from a request trace, without materialising any KV (pure).

Blocks are identified by the trace's prefix-chained hash ids, so a block hits
only if every block before it hit too (Mooncake, FAST'25, §3; vLLM automatic
prefix caching). Only full blocks are cached: a request of ``n`` tokens reuses
at most ``n // block`` blocks, and its last partial block is recomputed. The
cache holds ``capacity_tokens // block`` blocks and evicts the least recently
used one; every block a request touches becomes the most recent.

Token hit rate = tokens served from the cache / prompt tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from aitrinity.traces import TraceRequest


@dataclass(frozen=True)
class ReplayResult:
    capacity_tokens: int | None
    """None: unbounded."""
    block_tokens: int
    requests: int
    prompt_tokens: int
    hit_tokens: int
    evictions: int

    @property
    def token_hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def replay(requests: Sequence[TraceRequest], capacity_tokens: int | None, block_tokens: int = 512) -> ReplayResult:
    """LRU over full blocks of ``block_tokens`` tokens; ``capacity_tokens=None`` is unbounded."""
    if block_tokens <= 0:
        raise ValueError("block_tokens must be positive")
    cap = None if capacity_tokens is None else capacity_tokens // block_tokens
    cache: OrderedDict[int, None] = OrderedDict()
    hits = prompt = evictions = 0
    for r in requests:
        blocks = r.hash_ids[: r.input_length // block_tokens]
        prefix = 0
        for b in blocks:
            if b not in cache:
                break
            prefix += 1
        hits += prefix * block_tokens
        prompt += r.input_length
        if cap == 0:
            continue
        for b in blocks:
            if b in cache:
                cache.move_to_end(b)
            else:
                cache[b] = None
                if cap is not None and len(cache) > cap:
                    cache.popitem(last=False)
                    evictions += 1
    return ReplayResult(capacity_tokens, block_tokens, len(requests), prompt, hits, evictions)
