"""Kernel times: the grid interpolation and the roofline, on arrays."""

import numpy as np
import pytest

from aitrinity import catalog, silicon
from aitrinity.cost.kernels import Grid


def _grid():
    m = np.array([1.0, 4.0, 16.0])
    n = np.array([8.0, 32.0])
    values = np.outer(m, n) * 1e-6 + 1e-6  # affine in m and n, like a GEMM past its launch
    return Grid((m, n), values)


def test_grid_returns_the_measured_cells_exactly():
    g = _grid()
    for i, m in enumerate(g.axes[0]):
        for j, n in enumerate(g.axes[1]):
            assert g(m, n) == pytest.approx(g.values[i, j])


def test_grid_interpolates_in_log_axes_between_cells():
    g = _grid()
    # halfway in log2 between m=1 and m=4 is m=2: the mean of the two cells
    assert g(2.0, 8.0) == pytest.approx((g.values[0, 0] + g.values[1, 0]) / 2)
    lo, hi = g(4.0, 8.0), g(16.0, 8.0)
    assert lo < g(8.0, 8.0) < hi


def test_grid_scales_past_its_first_axis_and_clamps_the_others():
    g = _grid()
    assert g(64.0, 32.0) == pytest.approx(4 * g.values[2, 1])  # 4x the largest m: 4x the time
    assert g(16.0, 1e6) == pytest.approx(g.values[2, 1])  # n beyond the table: the edge value
    assert g(16.0, 1.0) == pytest.approx(g.values[2, 0])


def test_grid_grows_past_each_axis_by_its_exponent():
    """Beyond the largest point the edge's rate holds over the larger work: a causal attention's time grows with
    the square of its length, a GEMM's linearly in each dimension."""
    m, n = np.array([1.0, 4.0, 16.0]), np.array([8.0, 32.0])
    g = Grid((m, n), np.outer(m, n) * 1e-6 + 1e-6, growth=(1.0, 2.0))
    assert g(16.0, 128.0) == pytest.approx(16 * g.values[2, 1])  # 4x the largest n, squared
    assert g(32.0, 64.0) == pytest.approx(2 * 4 * g.values[2, 1])
    assert g(16.0, 1.0) == pytest.approx(g.values[2, 0])  # below the smallest: the edge (a latency floor)
    with pytest.raises(ValueError, match="growth"):
        Grid((m, n), np.ones((3, 2)), growth=(1.0,))


def test_measured_attention_past_the_tables_longest_prompt_keeps_growing():
    """The tables stop at 16k-token prompts; a 128k one is 64x the 16k one's time at its rate, not the same time
    (before, every longer prompt cost what 16k did: a 131k-token training row came out at 76% MFU)."""
    k = silicon.kernels(catalog.device("h100-sxm"), "vllm", None).kernels
    t16, t32, t128 = (float(k.prefill_attention(1, s, 16, 1, 128, "bf16")) for s in (16384, 32768, 131072))
    assert t32 == pytest.approx(4 * t16) and t128 == pytest.approx(64 * t16)
    gemm = [float(k.gemm(4096, n, 16384, "bf16")) for n in (65536, 131072)]  # an LM head wider than the table
    assert gemm[1] == pytest.approx(2 * gemm[0])


def test_grid_broadcasts_one_call_for_many_points():
    g = _grid()
    ms = np.array([1.0, 2.0, 5.0, 16.0, 40.0])
    batch = g(ms, 8.0)
    assert batch.shape == (5,)
    assert batch == pytest.approx([float(g(m, 8.0)) for m in ms])


def test_grid_rejects_a_shape_that_does_not_match_its_axes():
    with pytest.raises(ValueError):
        Grid((np.array([1.0, 2.0]),), np.ones(3))


@pytest.fixture
def h100():
    return silicon.roofline(catalog.device("h100-sxm"))


def test_roofline_gemm_is_memory_bound_at_one_row_and_compute_bound_when_wide(h100):
    dev = catalog.device("h100-sxm")
    p = dev.kernels
    n = k = 8192
    weights = n * k * 2
    t1 = float(h100.gemm(1, n, k, "bf16"))
    floor = weights / (dev.memory_bandwidth_Bps * p.memory_efficiency)
    assert t1 == pytest.approx(p.gemm["bf16"].launch_s + floor, rel=0.01)
    m = 16384
    t = float(h100.gemm(m, n, k, "bf16"))
    assert 2 * m * n * k / t < dev.peak_flops["bf16"] * p.gemm["bf16"].efficiency  # below the curve's ceiling
    assert 2 * m * n * k / t > 0.5 * dev.peak_flops["bf16"] * p.gemm["bf16"].efficiency
    assert float(h100.gemm(m, n, k, "fp8")) < t  # fp8 tensor cores are faster on wide GEMMs


def test_roofline_collectives_and_attention_grow_with_their_sizes(h100):
    assert float(h100.all_reduce(1e6, 1)) == 0.0
    small, big = h100.all_reduce(np.array([1e3, 1e8]), 8)
    assert small == pytest.approx(catalog.device("h100-sxm").kernels.all_reduce[8].latency_s, rel=0.01)
    assert big > 10 * small
    d = h100.decode_attention(8, np.array([1024.0, 8192.0]), 8, 1, 128, "bf16")
    assert d[1] > d[0]
    assert float(h100.decode_attention(8, 8192, 8, 1, 128, "fp8")) < d[1]  # fp8 KV reads half the bytes
    p = h100.prefill_attention(1, np.array([1024.0, 4096.0]), 8, 1, 128, "bf16")
    assert p[1] > 8 * (p[0] - 2e-5)  # quadratic in the prompt once past the launch


def test_a_device_without_derived_parameters_gets_generic_ones_that_say_so():
    dev = catalog.device("rtx-4090")
    assert dev.kernels is None
    k = silicon.roofline(dev)
    assert "generic" in k.params.source
    assert float(k.gemm(1, 4096, 4096, "bf16")) > 0


def test_a_calibrated_device_launches_at_its_measured_operator_overhead():
    from aitrinity.cost.kernels import generic_params

    dev = catalog.device("h100-sxm")
    cpu = dev.model_copy(
        update={"kernels": None, "efficiency": dev.efficiency.model_copy(update={"op_overhead_s": 9e-6})}
    )
    p = generic_params(cpu)
    assert p.gemm["bf16"].launch_s == 9e-6 and p.attention.launch_s == 9e-6 and "measured" in p.source
    plain = dev.model_copy(update={"kernels": None})
    assert generic_params(plain).gemm["bf16"].launch_s == 5e-6  # nothing measured: the 5 µs assumption


def test_attention_runs_in_the_kv_dtype_unless_it_is_quantized():
    """Prefill attention was priced at the bf16 peak whatever the model: on a CPU profile whose bf16 matmuls run at
    1 GFLOP/s and fp32 at 100 (this project's 2-core VM measured 1.0 and 124), an fp32 model's 256-token prefill
    took 111 ms of attention instead of ~1. It runs in the K and V's dtype, or for a quantized cache in the plan's
    compute dtype (bf16 where that is quantized too)."""
    from aitrinity.cost.kernels import roofline, unquantized

    dev = catalog.device("h100-sxm")
    cpu = dev.model_copy(update={"peak_flops": {"bf16": 1e9, "fp32": 1e11}, "kernels": None})
    k = roofline(cpu)

    def t(dtype: str) -> float:
        return float(k.prefill_attention(np.array([1.0]), np.array([256.0]), 8, 2, 64, dtype)[0])

    launch = k.params.attention.launch_s
    assert (t("bf16") - launch) == pytest.approx(100 * (t("fp32") - launch))
    assert t("fp8") == t("int8") == t("bf16")  # a bf16 model's quantized cache is read into bf16
    fp8_in_fp32 = k.prefill_attention(np.array([1.0]), np.array([256.0]), 8, 2, 64, "fp8", None, "fp32")
    assert float(fp8_in_fp32[0]) == t("fp32")  # an fp32 model's into fp32
    assert [unquantized(d) for d in ("fp32", "fp16", "bf16", "fp8", "int4", "fp4")] == [
        "fp32",
        "fp16",
        "bf16",
        "bf16",
        "bf16",
        "bf16",
    ]
