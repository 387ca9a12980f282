"""Models that mix sliding-window (local) and full (global) attention layers: Gemma 2/3, gpt-oss."""

from dataclasses import replace

import numpy as np
import pytest

from aitrinity import catalog
from aitrinity.cost.flops import causal_score_flops, score_flops_per_query
from aitrinity.cost.kernels import roofline
from aitrinity.cost.memory import kv_tokens_held
from aitrinity.cost.operators import Layout, StepShape, step_times
from aitrinity.sim.serving import for_device, simulate_serving
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.traces import TraceRequest

GEMMA = catalog.model("gemma-3-27b")  # 52 local layers of 1024 tokens, 10 global


def _layers(m: ModelSpec) -> list[int | None]:
    """Each layer's window (None: global)."""
    return [m.sliding_window] * m.local_layers + [None] * (m.num_layers - m.local_layers)


def test_a_sequence_keeps_the_window_on_local_layers_and_everything_on_global_ones():
    ctx = 10_000
    per_layer = [min(ctx, w) if w else ctx for w in _layers(GEMMA)]
    assert kv_tokens_held(GEMMA, ctx) == pytest.approx(sum(per_layer) / GEMMA.num_layers)
    assert kv_tokens_held(GEMMA, 500) == 500


def test_score_flops_add_up_layer_by_layer():
    per_head = 2.0 * GEMMA.num_attention_heads * (GEMMA.dim_head + GEMMA.v_head_dim)
    for ctx in (100, 1024, 5000):
        want = sum(per_head * (min(ctx, w) if w else ctx) for w in _layers(GEMMA))
        assert score_flops_per_query(GEMMA, ctx) == pytest.approx(want, rel=1e-12)
    start, new = 700, 900  # positions 700..1599: each attends to min(i + 1, window) keys on local layers
    want = sum(per_head * sum(min(i + 1, w) if w else i + 1 for i in range(start, start + new)) for w in _layers(GEMMA))
    assert causal_score_flops(GEMMA, start, new) == pytest.approx(want, rel=1e-12)


def test_the_operator_model_times_local_layers_within_the_window():
    k = roofline(catalog.device("h100-sxm"))
    lay = Layout(tp=1)
    shape = StepShape(decode=np.array([8.0]), context=np.array([8000.0]), prefill_seqs=1.0, prefill_len=4000.0)
    mixed = step_times(GEMMA, k, lay, shape).attention
    local = step_times(GEMMA.model_copy(update={"sliding_window_layers": None}), k, lay, shape).attention
    full = step_times(GEMMA.model_copy(update={"sliding_window": None, "sliding_window_layers": None}), k, lay, shape)
    L, n = GEMMA.num_layers, GEMMA.local_layers
    assert mixed == pytest.approx((n * local + (L - n) * full.attention) / L)
    assert local < full.attention


def test_the_simulator_fast_forwards_a_mixed_window_model_exactly():
    from tests.sim.test_serving import M  # a tiny two-layer model

    m = M.model_copy(update={"sliding_window": 32, "sliding_window_layers": 1})  # one local layer, one global
    reqs = [TraceRequest(t * 20.0, 100 + 37 * t % 300, 40 + 13 * t % 90, ()) for t in range(60)]
    cfg = for_device(catalog.device("h100-sxm"), 2, token_budget=256, max_batch=16)
    fast, slow = simulate_serving(reqs, m, cfg), simulate_serving(reqs, m, replace(cfg, fast_forward=False))
    assert fast.model_dump(exclude={"events"}) == slow.model_dump(exclude={"events"})
    assert fast.events < slow.events


def test_local_layers_need_a_window_and_no_more_than_the_layers():
    from aitrinity.errors import SpecError
    from aitrinity.spec._base import validate

    base = GEMMA.model_dump()
    with pytest.raises(SpecError, match="sliding_window_layers needs sliding_window"):
        validate(ModelSpec, {**base, "sliding_window": None})
    with pytest.raises(SpecError, match="exceeds num_layers"):
        validate(ModelSpec, {**base, "sliding_window_layers": 63})
