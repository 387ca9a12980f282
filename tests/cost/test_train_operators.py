"""The training step's operator model: what each plan choice adds, broadcasting, and the schedule."""

from types import SimpleNamespace

import numpy as np
import pytest

from aitrinity import catalog
from aitrinity.cost.kernels import roofline
from aitrinity.cost.train_operators import (
    FLASH_BACKWARD,
    MicroBatch,
    layer_times,
    schedule,
    slowest_stage,
    stage_times,
    step_times,
)


@pytest.fixture(scope="module")
def setup():
    return catalog.model("llama-3.1-8b"), roofline(catalog.device("h100-sxm"))


def _mb(rec=0, sp=False, flash=True, b=1, s=2048):
    return MicroBatch(b, s, rec, sp, flash, "bf16")


def test_full_recomputation_repeats_the_forward(setup):
    m, k = setup
    none, full = layer_times(m, k, 8, 1, _mb(0), False), layer_times(m, k, 8, 1, _mb(2), False)
    # forward + 2x backward GEMMs, plus one more forward under full recomputation: 4/3 of the GEMM time
    assert float(full.gemm) == pytest.approx(float(none.gemm) * 4 / 3)
    assert float(full.communication) == pytest.approx(float(none.communication) * 6 / 4)  # 2 more all-reduces


def test_selective_recomputation_repeats_only_the_attention_core(setup):
    m, k = setup
    none, sel = layer_times(m, k, 8, 1, _mb(0), False), layer_times(m, k, 8, 1, _mb(1), False)
    assert float(sel.gemm) == float(none.gemm) and float(sel.communication) == float(none.communication)
    fwd = float(none.attention) / (1 + FLASH_BACKWARD)
    assert float(sel.attention) == pytest.approx(float(none.attention) + fwd)


def test_sequence_parallel_splits_only_the_elementwise_passes(setup):
    m, k = setup
    a, b = layer_times(m, k, 8, 1, _mb(sp=False), False), layer_times(m, k, 8, 1, _mb(sp=True), False)
    assert float(b.elementwise) < float(a.elementwise)
    assert float(b.gemm) == float(a.gemm) and float(b.communication) == float(a.communication)


def test_materialized_scores_cost_more_than_flash_attention(setup):
    m, k = setup
    flash, unfused = layer_times(m, k, 8, 1, _mb(), False), layer_times(m, k, 8, 1, _mb(flash=False), False)
    assert float(unfused.attention) > float(flash.attention)


def test_rows_broadcast_to_the_same_numbers_as_one_plan_each(setup):
    m, k = setup
    b, rec, sp = np.array([1, 2, 4, 1]), np.array([0, 1, 2, 2]), np.array([False, True, False, True])
    batch = stage_times(m, k, 4, 1, MicroBatch(b, 1024, rec, sp, True, "bf16"), 8, 0, True, False)
    for i in range(len(b)):
        one = stage_times(m, k, 4, 1, _mb(int(rec[i]), bool(sp[i]), b=int(b[i]), s=1024), 8, 0, True, False)
        assert batch.total[i] == pytest.approx(float(one.total), rel=1e-12)


def test_the_last_stage_carries_the_lm_head_and_is_the_slowest_of_an_even_split(setup):
    m, k = setup
    mid = stage_times(m, k, 8, 1, _mb(), 8, 0, False, False)
    last = stage_times(m, k, 8, 1, _mb(), 8, 0, False, True)
    assert float(last.gemm) > float(mid.gemm)
    assert float(slowest_stage(m, k, 8, 4, 1, _mb()).total) == pytest.approx(float(last.total))


def test_schedule_bubble_is_p_minus_one_over_v_slots(setup):
    m, k = setup
    per = slowest_stage(m, k, 8, 4, 1, _mb())
    one = schedule(per, k, 4, 1, 16, 0.001, 0.0)
    inter = schedule(per, k, 4, 4, 16, 0.001, 0.0)
    slot = float(per.total) + 0.001
    assert float(one.bubble_s) == pytest.approx(3 * slot)
    assert float(inter.bubble_s) == pytest.approx(3 / 4 * slot)
    assert float(one.busy) == pytest.approx(16 * slot)
    st = step_times(m, k, (8, 4, 1, 1), _mb(), 16, 0.001, 1e9)
    assert float(st.total) == pytest.approx(float(one.total) + float(k.elementwise(1e9)))


class _Flops:
    """Kernels that return FLOPs instead of seconds (GEMMs 2mnk, flash attention QK^T + AV over the causal half) and
    nothing else: a layer's GEMM "time" is then its matmul FLOPs."""

    def gemm(self, m, n, k, dtype):
        return 2.0 * np.asarray(m, dtype=float) * n * k

    def grouped_gemm(self, groups, m, n, k, dtype):
        return np.asarray(groups, dtype=float) * self.gemm(m, n, k, dtype)

    def moe(self, tokens, shape, dtype):
        return np.full(np.shape(tokens), np.nan)

    def prefill_attention(self, batch, tokens, heads, kv_heads, head_dim, kv_dtype, mla=None):
        from aitrinity.cost.kernels import RooflineKernels

        return RooflineKernels.prefill_attention(_UNIT, batch, tokens, heads, kv_heads, head_dim, kv_dtype, mla)

    def __getattr__(self, name):  # collectives, element-wise passes: not FLOPs
        return lambda *a, **kw: np.zeros(np.shape(a[0]))


_UNIT = SimpleNamespace(  # the roofline's prefill attention at 1 FLOP/s and no launch: its FLOP count
    params=SimpleNamespace(attention=SimpleNamespace(launch_s=0.0, prefill_efficiency=1.0)), _peak=lambda dtype: 1.0
)


def test_an_mla_layer_is_priced_on_its_low_rank_projections_and_its_prefill_widths():
    """DeepSeek-V3 trains MLA as DeepSeek-V2 §2.1.2 computes it: down- and up-projections (187M weights a layer, not a
    projection of the 576-wide latent for every head), and attention of 128 heads at QK width 192 and V width 128
    (what the serving step prices too). The FLOPs come out as cost.flops counts them, from the parameter count."""
    from aitrinity.cost.flops import causal_score_flops, layer_dense_flops

    m, k, s = catalog.model("deepseek-v3"), _Flops(), 4096
    t = layer_times(m, k, 1, 1, MicroBatch(1, s, 0, False, True, "bf16"), False)  # a dense layer, no recomputation
    per_token = layer_dense_flops(m, moe_layer=False)
    assert float(t.gemm) == pytest.approx(3.0 * s * (per_token.attention_proj + per_token.mlp), rel=1e-3)
    forward = causal_score_flops(m, 0, s) / m.num_layers
    assert float(t.attention) == pytest.approx((1.0 + FLASH_BACKWARD) * forward, rel=1e-3)


@pytest.mark.parametrize("name", ["gpt-oss-120b", "gemma-3-27b", "llama-3.1-8b"])
def test_sliding_window_layers_train_on_the_share_of_the_scores_they_keep(name):
    """gpt-oss attends within 128 tokens on half its layers, Gemma 3 within 1,024 on five of six: at 16k tokens a
    flash-attention layer pays, on average, the score FLOPs cost.flops counts for those windows (and a model without
    windows the whole causal matrix); unfused attention computes the whole matrix whatever the window."""
    from aitrinity.cost.flops import causal_score_flops

    m, k, s = catalog.model(name), _Flops(), 16384
    t = layer_times(m, k, 1, 1, MicroBatch(1, s, 0, False, True, "bf16"), False)
    assert float(t.attention) == pytest.approx(
        (1.0 + FLASH_BACKWARD) * causal_score_flops(m, 0, s) / m.num_layers, rel=1e-3
    )
    if m.sliding_window:
        unfused = layer_times(m, k, 1, 1, MicroBatch(1, s, 0, False, False, "bf16"), False)
        whole = layer_times(m.model_copy(update={"sliding_window": None}), k, 1, 1, _mb(flash=False, s=s), False)
        assert float(unfused.attention) == float(whole.attention)
