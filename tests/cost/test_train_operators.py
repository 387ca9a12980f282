"""The training step's operator model: what each plan choice adds, broadcasting, and the schedule."""

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
    st = schedule(slowest_stage(m, k, 8, 4, 1, _mb()), k, 4, 1, 16, 0.001, 1e9)  # with the optimizer's pass
    assert float(st.total) == pytest.approx(float(one.total) + float(k.elementwise(1e9)))


@pytest.mark.parametrize("flash", [True, False])
def test_attention_runs_in_the_runs_dtype_an_fp8_runs_in_bf16(flash):
    """Attention's matmuls run in the activations' dtype: an fp32 run's at the fp32 peak (it was priced at bf16's
    whatever the run), an fp8 run's in bf16 like a bf16 run's (its GEMMs alone are fp8). On a device whose bf16
    peak is 100x its fp32 one, the fp32 run's attention takes ~100x the bf16 run's."""
    m = catalog.model("llama-3.1-8b")
    dev = catalog.device("h100-sxm")
    cpu = dev.model_copy(update={"peak_flops": {"bf16": 1e13, "fp32": 1e11, "fp8": 2e13}, "kernels": None})
    k = roofline(cpu)

    def attention(dtype: str) -> float:
        return float(layer_times(m, k, 1, 1, MicroBatch(1, 2048, 0, False, flash, dtype), False).attention)

    bf16, fp32, fp8 = attention("bf16"), attention("fp32"), attention("fp8")
    assert fp8 == bf16
    assert fp32 > 20 * bf16
