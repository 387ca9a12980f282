"""Weight streaming (bandwidth -> memory): a share of the weights lives off-device and streams in each step.

Effect on the ledger: :mod:`aitrinity.cost.serving`. Kept as the scenario gives it. No quality cost.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Exchange, given_move, register
from aitrinity.spec.exchanges import WeightStreaming

EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "weight-streaming",
            "weight streaming",
            "bandwidth->memory",
            "tier-link bytes",
            "weight bytes on the device",
            "tier",
            "above",
            "hidden",
            "Sheng et al. 2023 (FlexGen)",
        ),
        ("serving",),
        WeightStreaming,
        move=given_move("weight-streaming", "weight streaming", 17),
    )
)
