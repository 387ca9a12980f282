"""Sequence parallelism (bandwidth -> memory): norms and dropout split over the TP group.

A plan field (``plan.sequence_parallel``), searched by the planner where ``tp > 1``. No quality cost.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, field_move, register

EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "sequence-parallel",
            "sequence parallelism",
            "bandwidth->memory",
            "all-gather/reduce-scatter instead of all-reduce",
            "replicated activation bytes",
            None,
            "above",
            "hidden",
            "Korthikanti et al. 2022",
        ),
        ("training",),
        searched=True,
        used=lambda p: p.sequence_parallel,
        move=field_move("sequence_parallel", "sequence parallelism", 5, False),
        dimension=Dimension("sequence_parallel", (False, True), lambda v: "SP" if v else "", plain=False),
    )
)
