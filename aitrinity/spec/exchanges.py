"""Exchange parameters as they appear in a plan (``plan.exchanges``), with their valid ranges.

Each entry is one technique; ``kind`` selects it. A value outside its range is
a one-line error naming ``plan.exchanges.N.FIELD`` -- never a silent clamp.
What each one does to the ledger is in :mod:`aitrinity.cost.effects`; its
pathway and break-even rule in :mod:`aitrinity.plan.exchanges`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from aitrinity.spec._base import Bytes, Fraction, Spec

Tier = Literal["host", "ssd", "remote"]


class GradientCompression(Spec):
    """Compute -> bandwidth: compress data-parallel gradients before they cross the link."""

    kind: Literal["gradient-compression"]
    method: Literal["fp16", "bf16", "int8", "topk", "sign", "powersgd"]
    density: float = Field(default=0.01, gt=0, le=0.5)
    """top-k: fraction of gradient entries sent."""
    rank: int = Field(default=4, ge=1, le=256)
    """PowerSGD: rank of the P, Q factors."""
    steps_factor: float = Field(default=1.0, ge=1.0, le=100.0)
    """Optimizer steps to reach uncompressed SGD's loss, as a multiple (its statistical cost; 1 = none, as the
    error-feedback methods report)."""


class LocalSGD(Spec):
    """Compute -> bandwidth: average parameters every ``period`` steps instead of every step."""

    kind: Literal["local-sgd"]
    period: int = Field(ge=2, le=1024)
    steps_factor: float = Field(default=1.0, ge=1.0, le=100.0)
    """Optimizer steps to reach synchronous SGD's loss, as a multiple (its statistical cost; 1 = none assumed).
    The break-even report says the largest factor at which it still pays off."""


class OptimizerOffload(Spec):
    """Bandwidth -> memory: optimizer states and the update on the host (ZeRO-Offload)."""

    kind: Literal["optimizer-offload"]


class ActivationOffload(Spec):
    """Bandwidth -> memory: saved activations to host memory between forward and backward."""

    kind: Literal["activation-offload"]
    fraction: Fraction = 1.0


class KVOffload(Spec):
    """Bandwidth -> memory: a fraction of the KV cache lives in a lower tier and streams in each step."""

    kind: Literal["kv-offload"]
    tier: Tier = "host"
    fraction: Fraction = 0.5


class WeightStreaming(Spec):
    """Bandwidth -> memory: a fraction of the weights lives off-device and streams in each step (FlexGen)."""

    kind: Literal["weight-streaming"]
    tier: Literal["host", "ssd"] = "host"
    fraction: Fraction = 0.5


class PrefixCache(Spec):
    """Memory -> compute: reuse cached KV of shared prompt prefixes instead of recomputing prefill.

    Give the ``hit_rate`` directly, or a request ``trace`` (Mooncake JSONL) and the cache ``capacity``
    in that tier: the hit rate is then replayed from the trace (LRU over full ``block_tokens`` blocks).
    """

    kind: Literal["prefix-cache"]
    hit_rate: float | None = Field(default=None, ge=0, lt=1)
    """Fraction of prompt tokens whose KV is found in the cache."""
    tier: Literal["hbm", "host", "ssd", "remote"] = "host"
    trace: str | None = None
    capacity: Bytes | None = None
    """KV bytes (whole model) the cache holds in its tier: charged to that tier, and the replay's
    capacity when a trace is given. Omitted: not charged, and an unbounded replay."""
    block_tokens: int = Field(default=512, gt=0)

    @model_validator(mode="after")
    def _source(self) -> PrefixCache:
        if (self.hit_rate is None) == (self.trace is None):
            raise ValueError("give exactly one of hit_rate or trace")
        return self


class KVCompression(Spec):
    """Compute -> bandwidth: quantize KV before it crosses a link or tier (and dequantize after)."""

    kind: Literal["kv-compression"]
    bits: Literal[8, 4, 2] = 8


class WeightQuantization(Spec):
    """Compute -> memory: store weights in fewer bits, dequantize on the fly."""

    kind: Literal["weight-quantization"]
    dtype: Literal["fp8", "int8", "int4", "fp4"]


class KVQuantization(Spec):
    """Compute -> memory: store the KV cache in fewer bits."""

    kind: Literal["kv-quantization"]
    dtype: Literal["fp8", "int8", "int4"]


class SpeculativeDecoding(Spec):
    """Compute -> bandwidth: a draft proposes ``draft_tokens`` tokens, one step of the model verifies them all
    (lossless; Leviathan et al. 2023). ``acceptance``: the chance each draft token is kept (DeepSeek-V3's MTP module:
    85-90% for its one draft token, report §5.4.3). ``draft_layers``: transformer blocks of the model's shape the
    draft runs per token (MTP: 1)."""

    kind: Literal["speculative-decoding"]
    draft_tokens: int = Field(default=1, ge=1, le=16)
    acceptance: Fraction = 0.85
    draft_layers: int = Field(default=1, ge=1, le=64)


ExchangeSpec = Annotated[
    GradientCompression
    | LocalSGD
    | OptimizerOffload
    | ActivationOffload
    | KVOffload
    | WeightStreaming
    | PrefixCache
    | KVCompression
    | WeightQuantization
    | KVQuantization
    | SpeculativeDecoding,
    Field(discriminator="kind"),
]

TRAINING_ONLY = {"gradient-compression", "local-sgd", "optimizer-offload", "activation-offload"}
SERVING_ONLY = {
    "kv-offload",
    "weight-streaming",
    "prefix-cache",
    "kv-compression",
    "weight-quantization",
    "kv-quantization",
    "speculative-decoding",
}
