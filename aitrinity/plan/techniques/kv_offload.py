"""KV-cache offload (bandwidth -> memory): a share of the KV cache lives in a lower tier and streams in.

Effect on the ledger: :mod:`aitrinity.cost.serving`. Searched by the planner (host tier, shares 0-0.75)
when the system has host memory. No quality cost: the KV comes back bit for bit.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, entry_move, register
from aitrinity.spec.exchanges import KVOffload

EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "kv-offload",
            "KV-cache offload",
            "bandwidth->memory",
            "tier-link bytes",
            "KV-cache bytes on the device",
            "tier",
            "above",
            "hidden",
            "Sheng et al. 2023 (FlexGen)",
        ),
        ("serving",),
        KVOffload,
        searched=True,
        move=entry_move(
            "kv-offload",
            "KV offload",
            12,
            lambda x: x.fraction,
            lambda v: KVOffload(kind="kv-offload", tier="host", fraction=v),
            0.0,
        ),
        dimension=Dimension(
            "kv_offload", (0.0, 0.25, 0.5, 0.75), lambda v: f"kv-offload {v:g}" if v else "", 0.0, host=True
        ),
    )
)
