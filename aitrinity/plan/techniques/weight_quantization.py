"""Weight quantization (compute -> memory): weights stored in fewer bits, dequantized on the fly.

Effect on the ledger: :mod:`aitrinity.cost.serving` (weight bytes) and the operator model's GEMM dtype.
Searched by the planner (fp8, int8, int4).

Quality (share of the exact model's average benchmark score lost, approximate, post-training
quantization of Llama-3.1 8B-405B as reported by Kurtic et al. 2025, ACL, "Give me BF16 or give me
death?", 500,000 evaluations): fp8 (W8A8-FP) 0 -- "lossless across all model scales"; int8 (W8A8-INT)
0.02 -- "1-3% accuracy degradation" when well tuned, midpoint; int4 (W4A16-INT) 0.02 -- "competitive with
8-bit integer" quantization. fp4 (NVFP4) 0.01 -- NVIDIA's NVFP4 introduction (2025) reports under 1% below
FP8 on DeepSeek-R1 and Llama 3. Smaller models lose more; a user with a measured figure overrides the
budget rather than the table (``workload.serving.max_accuracy_drop``).
"""

from aitrinity.cost.serving import WEIGHT_DTYPES
from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, accuracy_table, entry_move, register
from aitrinity.spec.exchanges import WeightQuantization

ACCURACY_DROP = {"fp8": 0.0, "int8": 0.02, "int4": 0.02, "fp4": 0.01}
SOURCE = "weight quantization: Kurtic et al. 2025 (ACL), NVIDIA NVFP4 (2025)"


EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "weight-quantization",
            "weight quantization",
            "compute->memory",
            "dequantization work",
            "weight bytes (capacity and bandwidth)",
            "hbm_bandwidth",
            "below",
            "faster",
            "Frantar et al. 2023 (GPTQ); Lin et al. 2024 (AWQ)",
        ),
        ("serving",),
        WeightQuantization,
        accuracy_table(ACCURACY_DROP, "dtype", SOURCE),
        searched=True,
        move=entry_move(
            "weight-quantization",
            "weight quantization",
            13,
            lambda x: x.dtype,
            lambda v: WeightQuantization(kind="weight-quantization", dtype=v),
            "none",
            WEIGHT_DTYPES,
        ),
        dimension=Dimension(
            "weight_dtype",
            WEIGHT_DTYPES,
            lambda v: f"w:{v}" if v != "none" else "",
            "none",
            WEIGHT_DTYPES,
            field="weight_quantization",
        ),
    )
)
