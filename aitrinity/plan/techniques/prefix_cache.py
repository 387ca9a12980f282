"""Prefix KV-cache reuse (memory -> compute): load cached KV of shared prompt prefixes instead of prefilling.

Effect on the ledger: :mod:`aitrinity.cost.serving` and :mod:`aitrinity.cost.prefix_reuse`. The planner
searches the cache's capacity when the entry gives a trace. No quality cost: the reused KV is exact.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Exchange, given_move, register
from aitrinity.spec.exchanges import PrefixCache

EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "prefix-cache",
            "prefix KV-cache reuse",
            "memory->compute",
            "cached KV bytes (and their load)",
            "prefill FLOPs",
            "tier",
            "above",
            "faster",
            "Qin et al. 2025 (Mooncake), eq. 2",
        ),
        ("serving",),
        PrefixCache,
        move=given_move("prefix-cache", "prefix cache", 15),
    )
)
