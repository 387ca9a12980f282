"""Generation with a Hugging Face ``transformers`` model whose prompt KV comes from a ``KVStore``.

A request's full prompt blocks are keyed (``Keyer``), the longest cached
prefix is fetched (at most ``(n - 1) // B`` blocks: the last prompt token is
always computed, it yields the first output token), copied into a
``DynamicCache``, and only the rest of the prompt is run through the model.
The prompt blocks that were not cached are stored afterwards. Greedy decoding,
batch 1, CPU or GPU.

Block payload: the block's K and V of every layer as one C-contiguous array
``[layers, 2 (K, V), kv_heads, block, head_dim]`` in the model's dtype, raw
bytes; the frame's tag names dtype and shape and is checked on load. Keys are
salted with the model's architecture, dtype and this layout, so a block of
another model or layout can never be loaded. No pickle.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from aitrinity.spec.model import ModelSpec
from aitrinity.systems.kvcache.decision import ReuseCost, plan_request
from aitrinity.systems.kvcache.keys import DEFAULT_BLOCK_TOKENS, Keyer
from aitrinity.systems.kvcache.store import KVStore

LAYOUT = "L2HBD-v1"
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def tiny_llama(
    seed: int = 0,
    layers: int = 4,
    hidden: int = 256,
    heads: int = 8,
    kv_heads: int = 2,
    intermediate: int = 688,
    vocab: int = 2048,
    max_positions: int = 8192,
    dtype: torch.dtype = torch.float32,
) -> Any:
    """A small Llama-architecture causal LM from a config, random weights (seeded), eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)  # type: ignore[no-untyped-call]
    return model.to(dtype=dtype).eval()  # type: ignore[call-arg]


def keyer_for(model: Any, salt: str = "", block_tokens: int = DEFAULT_BLOCK_TOKENS, **extra: str) -> Keyer:
    """Keys salted by the architecture (config digest), the KV dtype and the payload layout."""
    cfg = model.config.to_dict()
    arch = {k: v for k, v in cfg.items() if not k.startswith("_") and k not in ("transformers_version",)}
    digest = hashlib.blake2b(json.dumps(arch, sort_keys=True, default=str).encode(), digest_size=8).hexdigest()
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return Keyer.of(salt, block_tokens, arch=digest, dtype=dtype, layout=LAYOUT, **extra)


def model_spec(model: Any, name: str = "hf-model") -> ModelSpec:
    """The cost model's view of a transformers model (its config)."""
    from aitrinity.catalog.hf import from_hf_config

    return from_hf_config(model.config.to_dict(), name, where="model.config")


@dataclass
class Generation:
    tokens: list[int]
    ttft_s: float
    total_s: float
    prompt_tokens: int
    reused_tokens: int
    stored_blocks: int
    sources: list[str] = field(default_factory=list)
    miss: str | None = None
    """Why the prompt's next block was not loaded (None: every usable block was)."""
    choice: str = "load"
    """load / partial / recompute (the cost decision; 'load' without one)."""


def _shape(model: Any) -> tuple[int, int, int]:
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return c.num_hidden_layers, c.num_key_value_heads, head_dim


class PrefixCachedLM:
    """``generate(prompt, n)``: greedy tokens, with the prompt's cached prefix KV loaded from ``store``.

    With ``cost`` each request loads what the load-vs-recompute decision says
    (``systems.kvcache.decision``: every cached block, some, or none); without,
    every cached block.
    """

    def __init__(self, model: Any, store: KVStore | None, keyer: Keyer, cost: ReuseCost | None = None) -> None:
        self.model, self.store, self.keyer, self.cost = model, store, keyer, cost
        self.layers, self.kv_heads, self.head_dim = _shape(model)
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        # only the last position's logits are needed (the cost model leaves the LM head out of prefill)
        self._last_logits = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        b = keyer.block_tokens
        self.tag = f"{str(self.dtype).removeprefix('torch.')} {self.layers}x2x{self.kv_heads}x{b}x{self.head_dim}"

    # -------------------------------------------------------------- KV <-> bytes

    def _to_cache(self, payloads: Sequence[memoryview]) -> Any:
        from transformers import DynamicCache

        n, b = len(payloads), self.keyer.block_tokens
        dst = torch.empty(self.layers, 2, self.kv_heads, n, b, self.head_dim, dtype=self.dtype)
        as_int = dst.view(_INT_OF_SIZE[dst.element_size()]).numpy()
        shape = (self.layers, 2, self.kv_heads, b, self.head_dim)
        for j, p in enumerate(payloads):
            np.copyto(as_int[:, :, :, j], np.frombuffer(p, dtype=as_int.dtype).reshape(shape))
        dst = dst.to(self.device)
        cache = DynamicCache()
        for layer in range(self.layers):
            k = dst[layer, 0].reshape(1, self.kv_heads, n * b, self.head_dim)
            v = dst[layer, 1].reshape(1, self.kv_heads, n * b, self.head_dim)
            cache.update(k, v, layer)
        return cache

    def _blocks(self, cache: Any, first: int, last: int) -> list[memoryview]:
        b = self.keyer.block_tokens
        ks = [(lay.keys, lay.values) for lay in cache.layers] if hasattr(cache, "layers") else list(cache)
        out = []
        for j in range(first, last):
            s = slice(j * b, (j + 1) * b)
            blk = torch.stack([torch.stack((k[0, :, s], v[0, :, s])) for k, v in ks]).contiguous().cpu()
            out.append(blk.view(_INT_OF_SIZE[blk.element_size()]).numpy().reshape(-1).data)
        return out

    # -------------------------------------------------------------- generation

    def _forward(self, ids: list[int], cache: Any) -> tuple[torch.Tensor, Any]:
        x = torch.tensor([ids], device=self.device)
        out = self.model(input_ids=x, use_cache=True, **{self._cache_kw: cache}, **self._last_logits)
        new_cache = getattr(out, "cache", None) or out.past_key_values
        return out.logits[0, -1], new_cache

    @torch.inference_mode()
    def generate(self, prompt: Sequence[int], max_new_tokens: int, reuse: bool = True) -> Generation:
        if not prompt:
            raise ValueError("an empty prompt")
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        t0 = time.perf_counter()
        n, b = len(prompt), self.keyer.block_tokens
        bk = self.keyer.keys(prompt)
        payloads: list[memoryview] = []
        sources: list[str] = []
        miss: str | None = None
        choice = "load"
        if reuse and self.store is not None:
            usable = (n - 1) // b
            if self.cost is not None:
                rp = plan_request(self.store, bk, n, self.cost)
                choice = rp.decision.choice
                if choice != "load":
                    usable, miss = rp.decision.load_tokens // b, rp.explanation
            got = self.store.fetch(bk, usable)
            payloads, sources, miss = got.payloads, got.sources, got.miss or miss
            if any(t != self.tag for t in got.tags):
                payloads, sources, miss = [], [], "layout mismatch"
        start = len(payloads) * b
        cache = self._to_cache(payloads) if payloads else None
        logits, cache = self._forward(list(prompt[start:]), cache)
        tok = int(logits.argmax())
        ttft = time.perf_counter() - t0
        stored = 0
        if reuse and self.store is not None and n // b > len(payloads):
            stored = self.store.put_blocks(bk, self._blocks(cache, len(payloads), n // b), len(payloads), self.tag)
        tokens = [tok]
        for _ in range(max_new_tokens - 1):
            logits, cache = self._forward([tok], cache)
            tok = int(logits.argmax())
            tokens.append(tok)
        return Generation(tokens, ttft, time.perf_counter() - t0, n, start, stored, sources, miss, choice)
