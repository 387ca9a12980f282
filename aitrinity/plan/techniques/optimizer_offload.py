"""Optimizer offload (bandwidth -> memory): optimizer states and the update on the host (ZeRO-Offload).

Effect on the ledger: :mod:`aitrinity.cost.training` (host-link traffic, host memory, the host's update).
Searched by the planner when the system has host memory. No quality cost: the update is exact.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, entry_move, register
from aitrinity.spec.exchanges import OptimizerOffload

EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "optimizer-offload",
            "optimizer offload (ZeRO-Offload)",
            "bandwidth->memory",
            "host-link bytes",
            "optimizer-state bytes on the device",
            "host",
            "above",
            "hidden",
            "Ren et al. 2021",
        ),
        ("training",),
        OptimizerOffload,
        searched=True,
        move=entry_move(
            "optimizer-offload",
            "optimizer offload",
            10,
            lambda _: True,
            lambda _: OptimizerOffload(kind="optimizer-offload"),
            False,
        ),
        dimension=Dimension("optimizer_offload", (False, True), lambda v: "opt-offload" if v else "", False, host=True),
    )
)
