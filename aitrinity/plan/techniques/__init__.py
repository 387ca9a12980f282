"""The built-in exchanges, one module per technique; importing this package registers them all
(:mod:`aitrinity.plan.registry` does so on first use). Listings follow registration: the parallel layout
first, then the techniques by name."""

from aitrinity.plan.techniques import layout  # noqa: F401

# isort: split
from aitrinity.plan.techniques import (  # noqa: F401
    activation_offload,
    edge_split,
    gradient_compression,
    kv_compression,
    kv_offload,
    kv_quantization,
    local_sgd,
    optimizer_offload,
    prefix_cache,
    recompute,
    sequence_parallel,
    speculative_decoding,
    weight_quantization,
    weight_streaming,
    zero,
)
