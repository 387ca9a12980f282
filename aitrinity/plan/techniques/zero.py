"""ZeRO sharding (bandwidth -> memory): model states sharded over the data-parallel ranks (``plan.zero``).

A plan field, searched by the planner (stages 0-3). No quality cost: the arithmetic is unchanged.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, field_move, register

EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "zero",
            "ZeRO sharding",
            "bandwidth->memory",
            "data-parallel link bytes (stage 3: 1.5x)",
            "model-state bytes on the device",
            None,
            "above",
            "hidden",
            "Rajbhandari et al. 2020",
        ),
        ("training",),
        searched=True,
        used=lambda p: p.zero > 0,
        move=field_move("zero", "ZeRO stage", 0, 0),
        dimension=Dimension("zero", (0, 1, 2, 3), lambda v: f"ZeRO-{v}", plain=0),
    )
)
