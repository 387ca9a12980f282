"""The exchange catalog: each technique's pathway, what it spends and relieves, and its source.

Techniques written in ``plan.exchanges`` change the ledger through
:mod:`aitrinity.cost.effects` and the ledger builders; the parallel-layout
techniques (ZeRO, TP/PP/SP/EP degrees, recomputation) are plan fields with
the same metadata, so a chain of plans can name the pathway of every step.

===================  =======================  ==========================================
pathway              spends                   relieves
===================  =======================  ==========================================
compute->bandwidth   FLOPs / memory passes    bytes on a link
bandwidth->memory    bytes on a link          resident bytes on the device
memory->compute      resident bytes           FLOPs
compute->memory      FLOPs                    resident bytes (recomputation, quantization)
===================  =======================  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Pathway = Literal["compute->bandwidth", "bandwidth->memory", "memory->compute", "compute->memory"]
Swept = Literal["dp_link", "host", "tier", "kv_link", "hbm_bandwidth"]


@dataclass(frozen=True)
class ExchangeInfo:
    kind: str
    title: str
    pathway: Pathway
    spends: str
    relieves: str
    swept: Swept | None
    """The resource whose bandwidth decides whether it pays off (for the break-even rule)."""
    pays_when: Literal["below", "above"]
    """It pays off while that bandwidth is below / above the break-even point."""
    rule: Literal["faster", "hidden"]
    """'faster': it pays when the plan gets faster; 'hidden': it buys memory and pays when it costs no time."""
    source: str


CATALOG: dict[str, ExchangeInfo] = {
    x.kind: x
    for x in [
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
        ExchangeInfo(
            "local-sgd",
            "local SGD",
            "compute->bandwidth",
            "statistical efficiency (more steps)",
            "data-parallel link bytes",
            "dp_link",
            "below",
            "faster",
            "Lin et al. 2020, 'Don't use large mini-batches'",
        ),
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
        ExchangeInfo(
            "kv-offload",
            "KV-cache offload",
            "bandwidth->memory",
            "tier-link bytes",
            "KV-cache bytes on the device",
            "tier",
            "above",
            "hidden",
            "Sheng et al. 2023 (FlexGen)",
        ),
        ExchangeInfo(
            "weight-streaming",
            "weight streaming",
            "bandwidth->memory",
            "tier-link bytes",
            "weight bytes on the device",
            "tier",
            "above",
            "hidden",
            "Sheng et al. 2023 (FlexGen)",
        ),
        ExchangeInfo(
            "prefix-cache",
            "prefix KV-cache reuse",
            "memory->compute",
            "cached KV bytes (and their load)",
            "prefill FLOPs",
            "tier",
            "above",
            "faster",
            "Qin et al. 2025 (Mooncake), eq. 2",
        ),
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
        # parallel layout and recomputation: plan fields with the same metadata
        ExchangeInfo(
            "zero",
            "ZeRO sharding",
            "bandwidth->memory",
            "data-parallel link bytes (stage 3: 1.5x)",
            "model-state bytes on the device",
            None,
            "above",
            "hidden",
            "Rajbhandari et al. 2020",
        ),
        ExchangeInfo(
            "tp",
            "tensor parallelism",
            "bandwidth->memory",
            "per-layer activation all-reduces",
            "weight and activation bytes per device",
            None,
            "above",
            "hidden",
            "Shoeybi et al. 2019",
        ),
        ExchangeInfo(
            "pp",
            "pipeline parallelism",
            "bandwidth->memory",
            "point-to-point bytes and a bubble",
            "weight bytes per device",
            None,
            "above",
            "hidden",
            "Narayanan et al. 2021",
        ),
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
        ExchangeInfo(
            "ep",
            "expert parallelism",
            "bandwidth->memory",
            "token all-to-alls",
            "expert weight bytes per device",
            None,
            "above",
            "hidden",
            "Lepikhin et al. 2020 (GShard)",
        ),
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
        ExchangeInfo(
            "micro-batch",
            "larger micro-batches",
            "memory->compute",
            "activation bytes",
            "idle compute (pipeline bubble, small GEMMs)",
            None,
            "above",
            "hidden",
            "Narayanan et al. 2021, eq. 1",
        ),
        ExchangeInfo(
            "virtual-stages",
            "interleaved pipeline stages",
            "memory->compute",
            "activation bytes (1 + (p-1)/(p v)) and point-to-point messages",
            "idle compute (pipeline bubble)",
            None,
            "above",
            "hidden",
            "Narayanan et al. 2021, section 2.2; Korthikanti et al. 2022, section 4.2.3",
        ),
        ExchangeInfo(
            "batch",
            "larger batches",
            "memory->compute",
            "KV-cache bytes",
            "weight reads per token (idle compute in decode)",
            None,
            "above",
            "hidden",
            "Pope et al. 2022, section 2 (decode arithmetic intensity grows with the batch)",
        ),
    ]
}


def info(kind: str) -> ExchangeInfo:
    return CATALOG[kind]
