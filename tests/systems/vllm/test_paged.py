"""Whole blocks in and out of vLLM-shaped paged KV tensors (no engine needed)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aitrinity.systems.vllm.paged import PagedKV  # noqa: E402


def _caches(shape: tuple[int, ...], dtype: torch.dtype = torch.bfloat16, layers: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {f"model.layers.{i}.attn": torch.randn(shape, generator=g).to(dtype) for i in range(layers)}


@pytest.mark.parametrize(
    ("shape", "blocks"),
    [
        ((16, 2, 8, 2 * 4), 16),  # CPU backend: [blocks, kv_heads, block, 2 * head_dim]
        ((2, 16, 8, 2, 4), 16),  # FlashAttention: [2, blocks, block, kv_heads, head_dim]
        ((32, 2, 4, 8), 16),  # kernel blocks half the scheduler's: two per block
    ],
)
def test_blocks_round_trip_into_other_blocks(shape: tuple[int, ...], blocks: int) -> None:
    src = _caches(shape)
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    a, b = PagedKV(src, blocks), PagedKV(dst, blocks)
    assert a.layout == b.layout
    rows = a.read([3, 7, 1])
    assert rows.shape == (3, a.row_bytes) and rows.dtype == np.uint8
    assert a.row_bytes == sum(v.numel() * v.element_size() for v in src.values()) // blocks
    b.write([0, 5, 9], rows)
    assert np.array_equal(b.read([0, 5, 9]), rows)
    assert np.array_equal(b.read([2]), np.zeros((1, a.row_bytes), np.uint8))  # other blocks untouched
    for name, t in src.items():  # block 3 of the source is block 0 of the destination, layer by layer
        dim = 1 if shape[0] == 2 else 0
        per = shape[dim] // blocks
        assert torch.equal(t.narrow(dim, 3 * per, per), dst[name].narrow(dim, 0, per))


def test_layout_names_dtype_and_shape() -> None:
    base = PagedKV(_caches((16, 2, 8, 8)), 16).layout
    assert PagedKV(_caches((16, 2, 8, 8), torch.float32), 16).layout != base
    assert PagedKV(_caches((16, 4, 8, 8)), 16).layout != base
    assert PagedKV(_caches((16, 2, 8, 8)), 16).layout == base


def test_bad_shapes_and_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="no dimension indexing"):
        PagedKV(_caches((3, 5, 8, 8)), 16)
    with pytest.raises(ValueError, match="no KV cache"):
        PagedKV({}, 16)
    kv = PagedKV(_caches((16, 2, 8, 8)), 16)
    with pytest.raises(ValueError, match="uint8"):
        kv.write([0], np.zeros((1, kv.row_bytes - 1), np.uint8))
