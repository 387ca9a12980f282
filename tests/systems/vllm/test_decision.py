"""The scheduler half's per-request choice: load the cached prefix or recompute it, from measured rates."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm", reason="the vLLM engine is an extra: pip install -e '.[vllm]'")

from aitrinity.catalog.hf import from_hf_config
from aitrinity.systems.vllm.config import ConnectorConfig
from aitrinity.systems.vllm.connector import SchedulerSide
from aitrinity.systems.vllm.lookup import LookupClient

BLOCK = 128
LLAMA = {
    "model_type": "llama",
    "vocab_size": 2048,
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
}
ROW = 4 * 2 * 2 * 64 * 2 * BLOCK  # layers x K,V x kv_heads x head_dim x bf16 bytes x tokens


@pytest.fixture
def side(tmp_path) -> SchedulerSide:
    cfg = ConnectorConfig.parse({"tiers": [{"kind": "disk", "path": str(tmp_path)}]})
    return SchedulerSide(cfg, from_hf_config(LLAMA, "tiny"), BLOCK, LookupClient(tmp_path / "none.sock"))


def _answer(blocks: int, s_per_block: float, flops: float | None) -> dict[str, Any]:
    return {
        "sources": ["disk"] * blocks,
        "miss": None,
        "block_bytes": ROW,
        "s_per_block": {"disk": s_per_block},
        "flops_per_s": flops,
    }


def test_a_fast_tier_is_loaded(side: SchedulerSide) -> None:
    assert side.choose(_answer(7, 50e-6, 1.7e11), 7 * BLOCK + 50, 0, "r") == 7
    assert side.decisions["r"].startswith("load")


def test_a_slow_tier_is_recomputed(side: SchedulerSide) -> None:
    # 0.5 s per block against a prefill of ~1.5 ms per block at the measured rate
    assert side.choose(_answer(7, 0.5, 1.7e11), 7 * BLOCK + 50, 0, "r") == 0
    assert side.decisions["r"].startswith("recompute")


def test_vllms_own_cached_blocks_are_kept_when_the_store_is_slow(side: SchedulerSide) -> None:
    assert side.choose(_answer(7, 0.5, 1.7e11), 7 * BLOCK + 50, 3, "r") == 3


def test_before_any_prefill_is_measured_the_cached_prefix_is_loaded(side: SchedulerSide) -> None:
    assert side.choose(_answer(5, 0.5, None), 7 * BLOCK, 0, "r") == 5
    assert "not measured" in side.decisions["r"]
    assert (
        side.choose(
            {"sources": [], "miss": "evicted", "block_bytes": ROW, "s_per_block": {}, "flops_per_s": 1e11}, 900, 0, "q"
        )
        == 0
    )
    assert side.decisions["q"] == "evicted"
