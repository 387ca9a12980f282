"""KV-cache quantization (compute -> memory): the KV cache stored in fewer bits.

Effect on the ledger: :mod:`aitrinity.cost.serving` (KV bytes, capacity and bandwidth). Searched by the
planner (fp8, int8).

Quality (share of the exact model's score lost, approximate): fp8 and int8 0 -- 8-bit KV caches are
reported lossless (Hooper et al. 2024, KVQuant; Liu et al. 2024, KIVI; vLLM and TensorRT-LLM ship fp8 KV
by default on Hopper); int4 0.01 -- 4-bit KV stays within a fraction of a perplexity point only with
per-channel key quantization (KVQuant, KIVI), plain per-token 4-bit loses more.
"""

from aitrinity.cost.serving import KV_DTYPES
from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, accuracy_table, entry_move, register
from aitrinity.spec.exchanges import KVQuantization

ACCURACY_DROP = {"fp8": 0.0, "int8": 0.0, "int4": 0.01}
SOURCE = "KV quantization: Hooper et al. 2024 (KVQuant); Liu et al. 2024 (KIVI)"


EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "kv-quantization",
            "KV-cache quantization",
            "compute->memory",
            "quantization work",
            "KV-cache bytes (capacity and bandwidth)",
            "hbm_bandwidth",
            "below",
            "faster",
            "Hooper et al. 2024 (KVQuant)",
        ),
        ("serving",),
        KVQuantization,
        accuracy_table(ACCURACY_DROP, "dtype", SOURCE),
        searched=True,
        move=entry_move(
            "kv-quantization",
            "KV quantization",
            14,
            lambda x: x.dtype,
            lambda v: KVQuantization(kind="kv-quantization", dtype=v),
            "none",
            KV_DTYPES,
        ),
        dimension=Dimension(
            "kv_dtype",
            KV_DTYPES,
            lambda v: f"kv:{v}" if v != "none" else "",
            "none",
            KV_DTYPES,
            field="kv_quantization",
        ),
    )
)
