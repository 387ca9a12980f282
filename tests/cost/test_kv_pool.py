"""An engine's KV pool: its size from the engine's memory defaults, and how many requests it holds."""

import numpy as np
import pytest
from aiconfigurator_core.sdk.backends.sglang_backend import derive_sglang_mem_fraction_static

from aitrinity import catalog
from aitrinity.cost.kv_pool import (
    KVPool,
    kv_budget_bytes,
    kv_capacity_tokens,
    kv_pool,
    kv_slots,
    sglang_static_fraction,
)
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.cost.operators import Layout
from aitrinity.cost.params import count
from aitrinity.cost.serving import workspace_width

GIB = float(1 << 30)


@pytest.mark.parametrize("gib", [16, 24, 48, 80, 141, 192])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_sglang_fraction_is_the_rule_aiconfigurator_mirrors(gib, tp):
    assert sglang_static_fraction(gib * GIB, tp) == pytest.approx(
        derive_sglang_mem_fraction_static(int(gib * GIB), tp),
        abs=5e-4,  # theirs is rounded to 3 decimals
    )


def test_each_engine_sizes_its_pool_from_its_own_default():
    m, cap = catalog.model("llama-3.1-8b"), catalog.device("h100-sxm").memory_capacity_bytes
    lay = Layout(tp=1, weight_dtype="bf16")
    weights = count(m).total * 2.0
    act = 8192 * workspace_width(m, 1) * 2.0
    assert kv_budget_bytes(m, lay, cap, kv_pool("trtllm")) == pytest.approx(0.9 * (cap - weights - act))  # of free
    assert kv_budget_bytes(m, lay, cap, kv_pool("vllm")) == pytest.approx(0.9 * cap - weights - act)  # of total
    assert kv_budget_bytes(m, lay, cap, kv_pool("sglang")) == pytest.approx(
        sglang_static_fraction(cap, 1) * cap - weights  # the static pool holds weights and KV
    )
    assert kv_pool("some-engine") == kv_pool("generic")


def test_tp_splits_weights_and_kv_heads():
    m, cap = catalog.model("llama-3.1-70b"), catalog.device("h100-sxm").memory_capacity_bytes
    pool = KVPool(0.9)
    one_gpu = kv_capacity_tokens(m, Layout(tp=1, weight_dtype="fp8"), cap, pool)
    four = kv_capacity_tokens(m, Layout(tp=4, weight_dtype="fp8"), cap, pool)
    budget = kv_budget_bytes(m, Layout(tp=1, weight_dtype="fp8"), cap, pool)
    assert one_gpu == int(budget // kv_bytes_per_token(m, "bf16"))
    assert four > 4 * one_gpu  # each rank holds a quarter of the weights and of the KV heads
    assert kv_capacity_tokens(m, Layout(tp=4, weight_dtype="fp8", kv_dtype="fp8"), cap, pool) == pytest.approx(
        2 * four, abs=1
    )


def test_slots_count_the_whole_output_only_where_admission_reserves_it():
    m, cap = catalog.model("qwen3-32b"), catalog.device("h100-sxm").memory_capacity_bytes
    lay = Layout(tp=2, weight_dtype="bf16")
    isl, osl = np.array([1024, 4096]), np.array([1024, 512])
    for engine in ("trtllm", "vllm"):
        pool = kv_pool(engine)
        tokens = kv_capacity_tokens(m, lay, cap, pool)
        held = isl + (osl if pool.reserve_output else osl / 2)
        assert (kv_slots(m, lay, cap, isl, osl, pool) == np.floor(tokens / held)).all()
    assert kv_slots(m, Layout(tp=1), 16 * GIB, 1024, 1024, kv_pool("vllm")) == 0  # 32B of bf16 weights do not fit


def test_pipeline_stages_hold_their_share_of_weights_and_kv():
    m, cap, pool = catalog.model("llama-3.1-70b"), catalog.device("h100-sxm").memory_capacity_bytes, KVPool(0.9)
    lay = Layout(tp=2, weight_dtype="bf16")
    assert kv_capacity_tokens(m, lay, cap, pool, pp=2) > 2 * kv_capacity_tokens(m, lay, cap, pool)
    weights, act = count(m).total * 2.0 / 4, 8192 * workspace_width(m, 2) * 2.0  # a stage runs its tokens at tp 2
    assert kv_budget_bytes(m, lay, cap, pool, pp=2) == pytest.approx(0.9 * cap - weights - act)
