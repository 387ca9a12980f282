"""Gradient compression (compute -> bandwidth): data-parallel gradients cross the link compressed.

Effect on the ledger: :func:`aitrinity.cost.effects.grad_sync` (bytes per element, collective, encode
work). Planner: ``none``, ``int8`` and PowerSGD rank 4 (:data:`aitrinity.plan.vector_training.COMPRESSION`).

Quality: the step factor given in the entry (``steps_factor``, default 1). The default follows the
methods' own reports: with error feedback, top-k (Lin et al. 2018, DGC), sign (Karimireddy et al. 2019,
EF-signSGD) and PowerSGD (Vogels et al. 2019, Table 3: rank 2-4 reach SGD's accuracy in the same epochs)
match uncompressed SGD, and fp16 / bf16 / int8 all-reduces are rounding, not approximation. A user who
measured a slower convergence says so with ``steps_factor``; the break-even report says how large a
factor the technique can afford.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, entry_move, given_steps_factor, register
from aitrinity.plan.vector_training import COMPRESSION, POWERSGD_RANK
from aitrinity.spec.exchanges import GradientCompression

SOURCE = "steps_factor as given (default 1: Lin et al. 2018; Karimireddy et al. 2019; Vogels et al. 2019, Table 3)"


EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "gradient-compression",
            "gradient compression",
            "compute->bandwidth",
            "encode/decode work",
            "data-parallel link bytes",
            "dp_link",
            "below",
            "faster",
            "Lin et al. 2018 (DGC); Vogels et al. 2019 (PowerSGD); Wang et al. 2023 (ZeRO++)",
        ),
        ("training",),
        GradientCompression,
        given_steps_factor(SOURCE),
        searched=True,
        move=entry_move(
            "gradient-compression",
            "gradient compression",
            9,
            lambda x: x.method,
            lambda v: GradientCompression(kind="gradient-compression", method=v, rank=POWERSGD_RANK),
            "none",
            ("none", "int8", "powersgd", "topk", "sign", "fp16", "bf16"),
        ),
        dimension=Dimension(
            "compression", COMPRESSION, lambda v: v if v != "none" else "", plain="none", choices=COMPRESSION
        ),
    )
)
