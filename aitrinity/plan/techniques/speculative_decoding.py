"""Speculative decoding (compute -> bandwidth): draft tokens cheaply, verify them in one step of the model.

Effect on the ledger: :mod:`aitrinity.cost.speculation` -- the decode phase per output token becomes a verification
step of ``draft_tokens + 1`` positions per sequence plus the draft passes, over the tokens a step yields on average
(Leviathan et al. 2023, eq. 1), in the ledger (:mod:`aitrinity.cost.serving`) and in the operator model's steady
state (:mod:`aitrinity.cost.concurrency`) alike. Kept as the scenario gives it: its acceptance rate is a property of
the draft, the model and the traffic, which the planner cannot choose.

Quality: none -- rejection sampling keeps the target model's output distribution (Leviathan et al. 2023, §2.3;
Chen et al. 2023), so it is lossless.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Exchange, given_move, register
from aitrinity.spec.exchanges import SpeculativeDecoding

EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "speculative-decoding",
            "speculative decoding",
            "compute->bandwidth",
            "draft passes and the FLOPs of rejected positions",
            "weight and KV reads per output token",
            "hbm_bandwidth",
            "below",
            "faster",
            "Leviathan et al. 2023; DeepSeek-AI 2024 (DeepSeek-V3 MTP, §5.4.3)",
        ),
        ("serving",),
        SpeculativeDecoding,
        move=given_move("speculative-decoding", "speculative decoding", 18),
    )
)
