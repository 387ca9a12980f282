"""Activation recomputation (compute -> memory): drop saved activations, run the forward pass again.

A plan field (``plan.recompute``: none, selective, full), searched by the planner. No quality cost.
"""

from aitrinity.cost.training import RECOMPUTE
from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, field_move, register

EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "recompute",
            "activation recomputation",
            "compute->memory",
            "forward FLOPs again",
            "activation bytes",
            None,
            "above",
            "hidden",
            "Chen et al. 2016; Korthikanti et al. 2022",
        ),
        ("training",),
        searched=True,
        used=lambda p: p.recompute != "none",
        move=field_move("recompute", "recomputation", 6, "none", RECOMPUTE),
        dimension=Dimension("recompute", RECOMPUTE, lambda v: f"rc:{v}", plain="none", choices=RECOMPUTE),
    )
)
