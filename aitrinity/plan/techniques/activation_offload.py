"""Activation offload (bandwidth -> memory): saved activations wait in host memory for the backward pass.

Effect on the ledger: :mod:`aitrinity.cost.training`. Searched by the planner (fractions 0, 0.5, 1) when
the system has host memory. No quality cost: the activations come back bit for bit.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, entry_move, register
from aitrinity.spec.exchanges import ActivationOffload

EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "activation-offload",
            "activation offload",
            "bandwidth->memory",
            "host-link bytes",
            "activation bytes on the device",
            "host",
            "above",
            "hidden",
            "Rhu et al. 2016 (vDNN)",
        ),
        ("training",),
        ActivationOffload,
        searched=True,
        move=entry_move(
            "activation-offload",
            "activation offload",
            11,
            lambda x: x.fraction,
            lambda v: ActivationOffload(kind="activation-offload", fraction=v),
            0.0,
        ),
        dimension=Dimension(
            "activation_offload", (0.0, 0.5, 1.0), lambda v: f"act-offload {v:g}" if v else "", 0.0, host=True
        ),
    )
)
