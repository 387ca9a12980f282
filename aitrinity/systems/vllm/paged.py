"""Whole blocks of vLLM's paged KV cache in and out of one contiguous byte row per block.

vLLM hands a connector one tensor per attention layer (``register_kv_caches``).
Which dimension indexes the blocks depends on the attention backend: the CPU
backend lays a layer out as ``[blocks, kv_heads, block_size, 2 * head_dim]``,
FlashAttention as ``[2, blocks, block_size, kv_heads, head_dim]``. ``PagedKV``
finds that dimension (the one of size ``num_blocks``, or a multiple of it when
the kernel's block is smaller than the scheduler's) and moves whole blocks:
``read(ids)`` gives ``[len(ids), row_bytes]`` with every layer's slice of a
block side by side, ``write(ids, rows)`` puts such rows back. The ``layout``
string names every layer's block dimension, slice shape and dtype, so a block
saved under one layout is never loaded under another (it goes into the keys'
salt). Plain torch; nothing here imports vLLM.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class _Layer:
    name: str
    tensor: torch.Tensor
    dim: int
    """The dimension that indexes kernel blocks."""
    per: int
    """Kernel blocks per scheduler block."""
    nbytes: int
    """Bytes of one scheduler block of this layer."""


class PagedKV:
    """The registered KV tensors of one worker, read and written a scheduler block at a time."""

    def __init__(self, kv_caches: Mapping[str, torch.Tensor], num_blocks: int) -> None:
        if not kv_caches:
            raise ValueError("no KV cache tensors were registered")
        if num_blocks <= 0:
            raise ValueError("num_blocks must be positive")
        self.num_blocks = num_blocks
        self.layers = [_layer(name, t, num_blocks) for name, t in kv_caches.items()]
        self.row_bytes = sum(la.nbytes for la in self.layers)
        desc = ";".join(
            f"{la.name}:{la.dim}:{la.per}:{tuple(_slice_shape(la))}:{str(la.tensor.dtype).removeprefix('torch.')}"
            for la in self.layers
        )
        self.layout = hashlib.blake2b(desc.encode(), digest_size=8).hexdigest()

    def read(self, block_ids: Sequence[int]) -> np.ndarray:
        """``[len(block_ids), row_bytes]`` uint8: each block's KV of every layer (a copy)."""
        n = len(block_ids)
        out = np.empty((n, self.row_bytes), dtype=np.uint8)
        if n == 0:
            return out
        off = 0
        for la in self.layers:
            ids = _kernel_ids(block_ids, la.per)
            rows = la.tensor.index_select(la.dim, ids).movedim(la.dim, 0).contiguous()
            out[:, off : off + la.nbytes] = rows.view(torch.uint8).reshape(n, la.nbytes).numpy()
            off += la.nbytes
        return out

    def write(self, block_ids: Sequence[int], rows: np.ndarray) -> None:
        """Put ``rows`` (as ``read`` returns them) into the blocks ``block_ids``."""
        n = len(block_ids)
        if rows.shape != (n, self.row_bytes) or rows.dtype != np.uint8:
            raise ValueError(f"rows must be uint8 [{n}, {self.row_bytes}], got {rows.dtype} {list(rows.shape)}")
        if n == 0:
            return
        off = 0
        for la in self.layers:
            ids = _kernel_ids(block_ids, la.per)
            shape = _slice_shape(la)
            raw = torch.from_numpy(np.ascontiguousarray(rows[:, off : off + la.nbytes]))
            src = raw.view(la.tensor.dtype).reshape(n * la.per, *shape).movedim(0, la.dim)
            la.tensor.index_copy_(la.dim, ids, src.to(la.tensor.device))
            off += la.nbytes


def _layer(name: str, t: torch.Tensor, num_blocks: int) -> _Layer:
    for dim in (0, 1):  # CPU / FlashInfer-style [blocks, ...]; FlashAttention-style [2, blocks, ...]
        if t.dim() > dim and t.shape[dim] >= num_blocks and t.shape[dim] % num_blocks == 0:
            per = t.shape[dim] // num_blocks
            nbytes = per * t.element_size() * (t.numel() // t.shape[dim])
            return _Layer(name, t, dim, per, nbytes)
    raise ValueError(f"KV tensor {name} {list(t.shape)} has no dimension indexing the {num_blocks} blocks (dim 0 or 1)")


def _slice_shape(la: _Layer) -> list[int]:
    return [s for i, s in enumerate(la.tensor.shape) if i != la.dim]


def _kernel_ids(block_ids: Sequence[int], per: int) -> torch.Tensor:
    ids = torch.as_tensor(list(block_ids), dtype=torch.long)
    if per == 1:
        return ids
    return (ids[:, None] * per + torch.arange(per)[None, :]).reshape(-1)
