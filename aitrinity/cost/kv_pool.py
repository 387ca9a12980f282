"""How many requests an engine's KV cache holds at once: the cap on a fixed-concurrency server's running batch.

An engine sizes its KV pool at start-up from the memory left after the weights and its activation workspace, and
admits a request only while the pool has room for it. Past that many requests the other clients' requests wait
for a slot (:func:`aitrinity.cost.concurrency.steady_state` prices the wait, the simulator replays it). Each
engine's default sizing, as aiconfigurator-core 0.12 mirrors it (``sdk/memory.py``,
``sdk/backends/{trtllm,vllm,sglang}_backend.py``) -- defaults of the engines, not fitted:

- TensorRT-LLM: ``free_gpu_memory_fraction`` 0.9 of the memory *free* after weights and activations, and its
  default scheduler (``GUARANTEED_NO_EVICT``) admits a request only when its prompt and its whole output fit;
- vLLM: ``gpu_memory_utilization`` 0.9 of *total* memory (0.92 from 0.22 on) holds weights, activations and KV;
  a request is admitted for its prompt and grows a block at a time (preempted when the pool runs out), so a
  running request holds its prompt and half its output on average;
- SGLang: ``mem_fraction_static`` of total memory holds the weights and the KV pool; its default is tiered by
  the GPU's memory (``ServerArgs._handle_gpu_memory_settings``: 512 MB + 1.5 MB per token of the 8,192-token prefill
  chunk, ``tp/8`` GiB of parallel slack and 2 MB per CUDA-graph batch, at least 10 GiB on GPUs above 60 GB);
  requests hold what they have computed, as in vLLM.

The activation workspace is one step's tokens (8,192) at the widest live width of a layer
(:func:`aitrinity.cost.serving.prefill_workspace_bytes`' width).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from aitrinity.cost.kernels import Array
from aitrinity.cost.memory import kv_tokens_held
from aitrinity.cost.operators import Layout
from aitrinity.cost.serving import shard_kv_bytes_per_token, shard_weight_bytes, workspace_width
from aitrinity.spec.model import ModelSpec

MIB = float(1 << 20)


@dataclass(frozen=True)
class KVPool:
    """An engine's KV-pool sizing and admission (module doc)."""

    fraction: float | None
    """Of the GPU's memory: ``of_free`` -- of what the weights and activations leave; else of the total. None:
    SGLang's tiered ``mem_fraction_static`` (:func:`sglang_static_fraction`), which holds the weights and the pool."""
    of_free: bool = False
    reserve_output: bool = False
    """Admission holds the whole output's KV from the start (TensorRT-LLM's ``GUARANTEED_NO_EVICT``); else a running
    request holds what it has computed, its prompt and half its output on average."""
    step_tokens: int = 8192
    """Tokens of the activation workspace: the engine's tokens per step."""


KV_POOLS: dict[str, KVPool] = {
    "trtllm": KVPool(0.9, of_free=True, reserve_output=True),
    "vllm": KVPool(0.9),
    "sglang": KVPool(None),
    "generic": KVPool(0.9),
}


def kv_pool(engine: str) -> KVPool:
    return KV_POOLS.get(engine, KV_POOLS["generic"])


def sglang_static_fraction(capacity_bytes: float, tp: int = 1) -> float:
    """SGLang's default ``mem_fraction_static`` for a GPU of ``capacity_bytes`` (module doc)."""
    cap = capacity_bytes / MIB
    chunk, graph_bs = (
        (2048, 8)
        if cap < 20 * 1024
        else (2048, 24 if tp < 4 else 80)
        if cap < 35 * 1024
        else (4096, 32 if tp < 4 else 160)
        if cap < 60 * 1024
        else (8192, 256 if tp < 4 else 512)
        if cap < 160 * 1024
        else (16384, 512)
    )
    reserved = 512 + 1.5 * chunk + tp / 8 * 1024 + 2 * graph_bs
    if cap > 60 * 1024:
        reserved = max(reserved, 10 * 1024.0)
    return (cap - reserved) / cap


def kv_budget_bytes(m: ModelSpec, lay: Layout, capacity_bytes: float, pool: KVPool, pp: int = 1) -> float:
    """Bytes of one GPU's memory (``capacity_bytes``) the engine gives its KV pool (module doc); ``pp`` pipeline
    stages each hold their share of the layers."""
    tp = int(lay.tp)
    weights = shard_weight_bytes(m, lay.weight_dtype, tp, pp, int(lay.ep))
    act = float(pool.step_tokens * workspace_width(m, tp) * 2.0)  # bf16 activations
    if pool.fraction is None:
        return max(sglang_static_fraction(capacity_bytes, tp) * capacity_bytes - weights, 0.0)
    if pool.of_free:
        return max(pool.fraction * (capacity_bytes - weights - act), 0.0)
    return max(pool.fraction * capacity_bytes - weights - act, 0.0)


def kv_capacity_tokens(m: ModelSpec, lay: Layout, capacity_bytes: float, pool: KVPool, pp: int = 1) -> int:
    """Tokens of KV one replica of ``lay.tp x lay.cp x pp`` GPUs of ``capacity_bytes`` each holds (context
    parallelism shards each sequence's KV over its ``cp`` ranks)."""
    per_token = shard_kv_bytes_per_token(m, lay.kv_dtype, int(lay.tp), pp) / int(lay.cp)
    return int(kv_budget_bytes(m, lay, capacity_bytes, pool, pp) // per_token)


def kv_slots(
    m: ModelSpec, lay: Layout, capacity_bytes: float, isl: ArrayLike, osl: ArrayLike, pool: KVPool, pp: int = 1
) -> Array:
    """Requests of ``isl`` prompt and ``osl`` output tokens a replica runs at once (floored; 0: not even one)."""
    tokens = kv_capacity_tokens(m, lay, capacity_bytes, pool, pp)
    s_in, s_out = np.asarray(isl, dtype=np.float64), np.asarray(osl, dtype=np.float64)
    held = kv_tokens_held(m, s_in + (s_out if pool.reserve_output else s_out / 2.0))
    return np.floor(tokens / np.maximum(held, 1.0))
