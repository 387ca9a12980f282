"""KV compression before transfer (compute -> bandwidth): quantize KV before it crosses a link or tier.

Effect on the ledger: :mod:`aitrinity.cost.serving` (fewer bytes on the KV path, quantize / dequantize
passes). Kept as the scenario gives it.

Quality (share of the exact model's score lost, approximate): 8 bits 0 -- 8-bit KV is reported lossless
(Hooper et al. 2024, KVQuant; Liu et al. 2024, KIVI); 4 bits 0.01 -- KVQuant and KIVI keep 4-bit KV within
a fraction of a perplexity point with per-channel keys, and plain per-token 4-bit is worse; 2 bits 0.02 --
CacheGen's operating point (Liu et al. 2024, SIGCOMM: "< 2% accuracy drop"), which needs its
layer-wise bit allocation and entropy coding to get there.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Exchange, accuracy_table, given_move, register
from aitrinity.spec.exchanges import KVCompression

ACCURACY_DROP = {8: 0.0, 4: 0.01, 2: 0.02}
SOURCE = "KV compression: Hooper et al. 2024 (KVQuant); Liu et al. 2024 (KIVI; CacheGen)"


EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "kv-compression",
            "KV compression before transfer",
            "compute->bandwidth",
            "quantize/dequantize passes",
            "KV bytes on a link",
            "kv_link",
            "below",
            "faster",
            "Liu et al. 2024 (CacheGen)",
        ),
        ("serving",),
        KVCompression,
        accuracy_table(ACCURACY_DROP, "bits", SOURCE),
        move=given_move("kv-compression", "KV compression", 16),
    )
)
