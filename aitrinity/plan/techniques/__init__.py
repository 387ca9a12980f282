"""The built-in exchanges, one module per technique; importing this package registers them all
(:mod:`aitrinity.plan.registry` does so on first use)."""

from aitrinity.plan.techniques import (  # noqa: F401
    activation_offload,
    edge_split,
    gradient_compression,
    kv_compression,
    kv_offload,
    kv_quantization,
    layout,
    local_sgd,
    optimizer_offload,
    prefix_cache,
    recompute,
    sequence_parallel,
    weight_quantization,
    weight_streaming,
    zero,
)
