"""The measured kernel tables of aiconfigurator-core ([silicon] extra, installed by the dev extra)."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aitrinity import catalog, silicon
from aitrinity.catalog import kernel_tables as kt
from aitrinity.cost.kernels import Grid, MoEShape, kernel_notes
from aitrinity.errors import SpecError


def test_the_tables_are_installed_for_the_tests():
    assert kt.available(), "pip install -e '.[dev]' brings aiconfigurator-core; the silicon tests need it"


@pytest.fixture(scope="module")
def h100_vllm():
    return silicon.kernels(catalog.device("h100-sxm"), "vllm", "0.24.0")


def test_a_gemm_at_a_measured_shape_is_the_measured_latency(h100_vllm):
    path = kt.data_root() / "h100_sxm" / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet"
    t = pq.read_table(path).to_pydict()
    i = next(
        i
        for i in range(len(t["m"]))
        if t["gemm_dtype"][i] == "bfloat16" and t["m"][i] == 64 and t["n"][i] == 4096 and t["k"][i] == 4096
    )
    assert float(h100_vllm.kernels.gemm(64, 4096, 4096, "bf16")) == pytest.approx(t["latency"][i] * 1e-3)
    assert h100_vllm.source == "table h100_sxm/vllm/0.24.0" and h100_vllm.note is None


def test_measured_times_are_monotone_in_the_sizes_that_matter(h100_vllm):
    k = h100_vllm.kernels
    g = k.gemm(np.array([1.0, 64.0, 1024.0, 8192.0]), 8192, 8192, "bf16")
    assert g[0] == pytest.approx(g[1], rel=0.2)  # rows 1 to 64 stream the same weights: a plateau (noisy)
    assert g[3] > g[2] > 2 * g[1]
    d = k.decode_attention(32, np.array([1024.0, 16384.0]), 8, 1, 128, "bf16")
    assert d[1] > d[0]
    ar = k.all_reduce(np.array([1e4, 1e8]), 8)
    assert ar[1] > ar[0] > 0


def test_a_grouped_gemm_from_the_tables_pays_one_launch(h100_vllm):
    """Each group is the measured GEMM less one launch (the derived parameters' launch: the table's smallest
    latency), and the kernel adds one launch back."""
    k = h100_vllm.kernels
    one = float(k.gemm(4.0, 1024, 7168, "bf16"))
    launch = catalog.device("h100-sxm").kernels.gemm_for("bf16").launch_s
    assert float(k.grouped_gemm(1.0, 4.0, 1024, 7168, "bf16")) == pytest.approx(one)
    assert float(k.grouped_gemm(100.0, 4.0, 1024, 7168, "bf16")) == pytest.approx(launch + 100 * (one - launch))
    assert float(k.grouped_gemm(100.0, 4.0, 1024, 7168, "bf16")) < 100 * one


def test_an_engine_version_without_tables_says_which_it_used():
    choice = silicon.kernels(catalog.device("h100-sxm"), "vllm", "0.12.0")
    assert choice.note == "no vllm 0.12.0 tables for h100-sxm: using 0.24.0"


def test_a_dtype_without_a_table_falls_back_and_is_recorded():
    choice = silicon.kernels(catalog.device("h100-sxm"), "vllm", None)
    k = choice.kernels
    k.fallbacks.clear()
    t = k.decode_attention(8, 1024, 8, 1, 96, "bf16")  # no head_dim-96 table
    assert float(t) > 0 and "attention head_dim 96 kv bf16" in k.fallbacks


def test_devices_and_engines_without_tables_use_the_catalog_roofline():
    cpu = silicon.kernels(catalog.device("epyc-9654"), "vllm")
    assert cpu.source.startswith("roofline") and cpu.note is None
    generic = silicon.kernels(catalog.device("h100-sxm"), "generic")
    assert generic.source == "roofline (catalog h100-sxm)" and generic.note is None
    with pytest.raises(SpecError, match=r"system\.engine"):
        silicon.kernels(catalog.device("h100-sxm"), "tensorflow")


def test_a_corrupt_table_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    folder = tmp_path / "h100_sxm" / "gemm" / "vllm" / "9.9.9"
    folder.mkdir(parents=True)
    (folder / "gemm_perf.parquet").write_bytes(b"PAR1 this is not parquet")
    monkeypatch.setattr(kt, "data_root", lambda: tmp_path)
    kt.read.cache_clear()
    try:
        with pytest.raises(SpecError) as err:
            kt.read("h100-sxm", "vllm", "9.9.9")
        assert "not a readable kernel table" in str(err.value) and "\n" not in str(err.value)
    finally:
        kt.read.cache_clear()


def test_without_the_extra_the_roofline_is_used_and_said(monkeypatch):
    def missing():
        raise SpecError.at("system.engine", "measured kernel tables need: pip install 'aitrinity[silicon]'")

    monkeypatch.setattr(kt, "data_root", missing)
    choice = silicon.kernels(catalog.device("h100-sxm"), "vllm")
    assert choice.source == "roofline (catalog h100-sxm)"
    assert "aitrinity[silicon]" in choice.note


def test_the_all_to_all_is_nccls_measured_table_where_it_has_the_gpu_count(h100_vllm):
    """nccl_perf's alltoall rows (sizes in half elements: each GPU's send buffer); none for 16 GPUs."""
    nccl = kt.data_root() / "h100_sxm" / "comm" / "nccl"
    newest = max((p.name for p in nccl.iterdir() if (p / "nccl_perf.parquet").is_file()), key=kt._version_key)
    t = pq.read_table(nccl / newest / "nccl_perf.parquet").to_pydict()
    i = next(
        i
        for i in range(len(t["latency"]))
        if t["op_name"][i] == "alltoall"
        and t["num_gpus"][i] == 8
        and t["nccl_dtype"][i] == "half"
        and t["message_size"][i] == 1 << 20
    )
    k = h100_vllm.kernels
    k.fallbacks.clear()
    assert float(k.all_to_all(2.0 * (1 << 20), 8)) == pytest.approx(t["latency"][i] * 1e-3)
    assert float(k.all_to_all(1e6, 1)) == 0.0 and not k.fallbacks
    sizes = np.array([1e4, 1e6, 1e8])
    assert np.all(np.diff(k.all_to_all(sizes, 8)) > 0)
    assert float(k.all_to_all(1e6, 16)) == pytest.approx(float(k.fallback.all_to_all(1e6, 16)))
    assert "all-to-all over 16 GPUs" in k.fallbacks


def test_a_measured_moe_shape_times_the_routed_experts_from_its_table(h100_vllm):
    """DeepSeek-V3's MoE layer (7168 x 2048, top-8 of 256; vLLM measured it in block-scaled fp8) is measured:
    the operator model takes the fused kernel's time for the routed experts; a shape or dtype no table has
    keeps the experts' own GEMMs (NaN)."""
    from aitrinity.cost.kernels import MoEShape
    from aitrinity.cost.operators import Layout, mlp_time

    k = h100_vllm.kernels
    path = kt.data_root() / "h100_sxm" / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet"
    t = pq.read_table(path).to_pydict()

    def measured(routing):
        return min(
            t["latency"][i] * 1e-3
            for i in range(len(t["latency"]))
            if (t["moe_dtype"][i], t["hidden_size"][i], t["inter_size"][i], t["topk"][i], t["num_experts"][i])
            == ("fp8_block", 7168, 2048, 8, 256)
            and (t["moe_tp_size"][i], t["moe_ep_size"][i], t["num_tokens"][i], t["distribution"][i])
            == (8, 1, 64, routing)
        )

    want = measured("balanced")
    shape = MoEShape(7168, 2048, 8, 256, 8, 1)
    assert float(k.moe(64.0, shape, "fp8")) == pytest.approx(want)  # fp8 weights: the block-scaled kernel
    assert np.isnan(k.moe(64.0, shape, "bf16"))  # vLLM's table has this shape in fp8 only
    skewed = MoEShape(7168, 2048, 8, 256, 8, 1, "power_law_1.01")  # each distribution the table measured
    assert float(k.moe(64.0, skewed, "fp8")) == pytest.approx(measured("power_law_1.01"))
    m = catalog.model("deepseek-v3")
    lay = Layout(tp=8, weight_dtype="fp8", engine="vllm", routing="balanced")
    router = float(k.gemm(64.0, 256, 7168, "bf16"))
    shared = float(k.gemm(64.0, 2 * 2048 // 8, 7168, "fp8") + k.gemm(64.0, 7168, 2048 // 8, "fp8"))
    assert float(mlp_time(m, k, lay, np.array(64.0), moe_layer=True)) == pytest.approx(router + want + shared)


def test_a_version_that_reuses_an_older_table_reads_that_table():
    """TensorRT-LLM 1.3.0rc23 on B200 did not measure GEMMs again: its reuse.yaml names 1.3.0rc20's table, which is
    read (before, the newest version failed to load: `--engine trtllm` on B200, B300, GB200 and GB300 was an error)."""
    root = kt.data_root() / "b200_sxm"
    assert not (root / "gemm" / "trtllm" / "1.3.0rc23" / "gemm_perf.parquet").exists()
    path = kt.table_path(root, "gemm", "trtllm", "1.3.0rc23", "gemm_perf")
    assert path == root / "gemm" / "trtllm" / "1.3.0rc20" / "gemm_perf.parquet"
    choice = silicon.kernels(catalog.device("b200"), "trtllm")
    assert choice.source == "table b200_sxm/trtllm/1.3.0rc23" and choice.note is None
    t = pq.read_table(path).to_pydict()
    i = next(i for i in range(len(t["m"])) if t["gemm_dtype"][i] == "bfloat16" and t["m"][i] >= 64)
    got = float(choice.kernels.gemm(t["m"][i], t["n"][i], t["k"][i], "bf16"))
    assert got == pytest.approx(t["latency"][i] * 1e-3)


def test_reuse_declarations_are_followed_in_turn_and_a_cycle_stops(tmp_path):
    def version(v: str, reuse: str | None = None, table: bool = False) -> None:
        d = tmp_path / "gemm" / "trtllm" / v
        d.mkdir(parents=True)
        if table:
            (d / "gemm_perf.parquet").write_bytes(b"x")
        if reuse:
            (d / "reuse.yaml").write_text(f"schema_version: 1\nreuse:\n- table: gemm_perf\n  from_version: {reuse}\n")

    version("3", reuse="2")
    version("2", reuse="1")
    version("1", table=True)
    version("b", reuse="a")
    version("a", reuse="b")
    assert kt.table_path(tmp_path, "gemm", "trtllm", "3", "gemm_perf") == tmp_path / "gemm/trtllm/1/gemm_perf.parquet"
    assert kt.table_path(tmp_path, "gemm", "trtllm", "3", "moe_perf") == tmp_path / "gemm/trtllm/3/moe_perf.parquet"
    cycle = kt.table_path(tmp_path, "gemm", "trtllm", "b", "gemm_perf")
    assert not cycle.exists()  # read as a missing table: one line, never a loop


def test_a_version_that_measured_some_shapes_again_reads_the_rest_from_the_table_it_reuses():
    """TensorRT-LLM 1.3.0rc23's MoE table on B200 holds only DeepSeek-V4's shapes; its reuse.yaml says the remaining
    shapes are 1.3.0rc20's. Both are read, the version's own first: until 2026-12-05 only rc23's file was, so every
    other MoE (DeepSeek-V3, Qwen3-235B) fell back to grouped GEMMs and came out 1.3-3.7x slower than aiconfigurator
    prices the same step from the same tables (benchmarks/bench_aic_steps.py)."""
    root = kt.data_root() / "b200_sxm"
    paths = kt.table_paths(root, "moe", "trtllm", "1.3.0rc23", "moe_perf")
    assert paths == [root / f"moe/trtllm/{v}/moe_perf.parquet" for v in ("1.3.0rc23", "1.3.0rc20")]
    k = silicon.kernels(catalog.device("b200"), "trtllm").kernels
    assert k.source == "table b200_sxm/trtllm/1.3.0rc23"
    old = pq.read_table(paths[1]).to_pydict()
    i = next(
        i
        for i in range(len(old["latency"]))
        if old["moe_dtype"][i] == "fp8_block"
        and old["num_experts"][i] == 256
        and old["hidden_size"][i] == 7168
        and old["moe_ep_size"][i] == 8
        and old["distribution"][i] == "balanced"
        and old["num_tokens"][i] >= 16
    )
    key = ("moe_dtype", "num_experts", "hidden_size", "inter_size", "topk", "moe_tp_size", "moe_ep_size")
    same = [j for j in range(len(old["latency"])) if all(old[c][j] == old[c][i] for c in (*key, "num_tokens"))]
    fastest = min(old["latency"][j] for j in same if old["distribution"][j] == "balanced")  # the table's kernel
    shape = MoEShape(7168, old["inter_size"][i], old["topk"][i], 256, old["moe_tp_size"][i], 8, "balanced")
    assert float(silicon.block_scaled(k).moe(old["num_tokens"][i], shape, "fp8")) == pytest.approx(fastest * 1e-3)


def test_a_shape_comes_from_the_first_file_that_measured_it(tmp_path):
    def version(v: str, rows: list[tuple[str, int, float]], reuse: str | None = None) -> None:
        d = tmp_path / "gemm" / "trtllm" / v
        d.mkdir(parents=True)
        cols = {
            "gemm_dtype": [r[0] for r in rows],
            "m": [r[1] for r in rows],
            "n": [64] * len(rows),
            "k": [64] * len(rows),
            "latency": [r[2] for r in rows],
        }
        pq.write_table(pa.table(cols), d / "gemm_perf.parquet")
        if reuse:
            (d / "reuse.yaml").write_text(f"schema_version: 1\nreuse:\n- table: gemm_perf\n  from_version: {reuse}\n")

    version("1", [("bfloat16", 1, 1.0), ("bfloat16", 2, 2.0), ("fp8", 1, 5.0), ("fp8", 2, 6.0)])
    version("2", [("fp8", 1, 3.0), ("fp8", 2, 4.0)], reuse="1")
    c = kt.TableChoice("x", "trtllm", "2", None)
    gemm = kt._gemm(tmp_path, c)
    assert set(gemm) == {"bf16", "fp8"}
    assert gemm["fp8"][1][0, 0, 0] == pytest.approx(3e-3)  # version 2's own measurement (3 ms), not version 1's
    assert gemm["bf16"][1][0, 0, 0] == pytest.approx(1e-3)  # what version 2 did not measure again


def test_block_scaled_fp8_reads_the_block_scaled_tables_first():
    """A run whose fp8 weights carry 128 x 128 scales (DeepSeek-V3's checkpoints; a measured row's fp8_block) runs
    the block-scaled kernels: on TensorRT-LLM they are 2-3x faster than its per-tensor fp8 GEMM at one row."""
    k = silicon.kernels(catalog.device("h200"), "trtllm").kernels
    block = silicon.block_scaled(k)
    assert block is not k and block.fp8_block and not k.fp8_block
    for n, kk in ((512, 7168), (7168, 256)):
        assert float(block.gemm(1.0, n, kk, "fp8")) == pytest.approx(float(k.gemm(1.0, n, kk, "fp8_block")))
        assert float(block.gemm(1.0, n, kk, "fp8")) < float(k.gemm(1.0, n, kk, "fp8"))
    assert float(block.gemm(1.0, 512, 7168, "bf16")) == float(k.gemm(1.0, 512, 7168, "bf16"))
    roof = silicon.roofline(catalog.device("h200"))
    assert silicon.block_scaled(roof) is roof


@pytest.mark.parametrize("device", ["b200", "b300", "gb200", "gb300"])
def test_the_catalogs_fp4_gemm_is_fitted_at_the_peak_it_is_priced_at(device):
    """tools/derive_kernel_params.py fitted fp4's efficiency against the fp8 peak while the roofline prices fp4 at
    its own (twice as high), so without the tables a compute-bound fp4 GEMM came out 1.5x faster than measured
    (catalog / table 0.62-0.69 at these shapes on B200). Fitted and priced alike, it is no longer faster."""
    dev = catalog.device(device)
    roof, table = silicon.roofline(dev), silicon.kernels(dev, "vllm", "0.24.0").kernels
    m = np.array([1024.0, 4096.0, 8192.0])
    ratio = roof.gemm(m, 8192, 8192, "fp4") / table.gemm(m, 8192, 8192, "fp4")
    assert (ratio > 0.9).all() and (ratio < 1.5).all(), ratio


def test_mla_attention_is_read_from_the_engines_mla_tables():
    """DeepSeek's MLA attention (one latent KV head of 576 per rank) takes the engine's measured MLA kernels, prefill
    and decode; before 2026-12-05 it always fell back to the roofline."""
    root = kt.data_root() / "h200_sxm"
    k = silicon.kernels(catalog.device("h200"), "trtllm").kernels
    v = kt._attention_version(kt.choose("h200", "trtllm", None), "mla")
    t = pq.read_table(root / "mla" / "trtllm" / v / "generation_mla_perf.parquet").to_pydict()
    i = next(
        i
        for i in range(len(t["latency"]))
        if t["kv_cache_dtype"][i] == "bfloat16"
        and t["batch_size"][i] == 64
        and t["num_heads"][i] == 16
        and t["step"][i] == 2047
    )
    got = float(k.decode_attention(64.0, 2048.0, 16, 1, kt.MLA_HEAD_DIM, "bf16"))
    assert got == pytest.approx(t["latency"][i] * 1e-3)
    p = pq.read_table(root / "mla" / "trtllm" / v / "context_mla_perf.parquet").to_pydict()
    j = next(
        j
        for j in range(len(p["latency"]))
        if p["kv_cache_dtype"][j] == "bfloat16"
        and p["batch_size"][j] == 1
        and p["num_heads"][j] == 128
        and p["isl"][j] == 4096
    )
    assert float(k.prefill_attention(1.0, 4096.0, 128, 1, kt.MLA_HEAD_DIM, "bf16")) == pytest.approx(
        p["latency"][j] * 1e-3
    )
    assert not any("576" in f for f in k.fallbacks)


@pytest.mark.parametrize("device", ["b200", "b300", "gb200", "gb300"])
def test_an_implausibly_slow_block_scaled_table_is_set_aside_for_the_per_tensor_one(device):
    """vLLM 0.24's block-scaled fp8 GEMM tables on Blackwell take about 180-330 us for any decode GEMM (29-55x the time
    to stream its weights; every other table 1.2-5.5x): DeepSeek-R1 on a GB200 NVL72 under vLLM came out at a TPOT of
    141 ms, against 26 ms under the other engines' tables. Such a table is set aside, the per-tensor fp8 table answers,
    and the estimate says so."""
    dev = catalog.device(device)
    k = silicon.kernels(dev, "vllm", "0.24.0", fp8_block=True).kernels
    assert "fp8_block" in k.set_aside and "fp8_block" not in k.gemm_grids
    per_tensor = silicon.kernels(dev, "vllm", "0.24.0").kernels
    m = np.array([8.0, 64.0, 4096.0])
    assert (k.gemm(m, 7168, 2048, "fp8") == per_tensor.gemm(m, 7168, 2048, "fp8")).all()
    assert k.substituted == {"fp8_block"}
    assert any("fp8_block GEMM table set aside" in n for n in kernel_notes(k))
    # the check itself: the set-aside table is past the threshold, the other engines' block-scaled tables are not
    raw = silicon._grids(dev.name, "vllm", "0.24.0")[0]["fp8_block"]
    assert silicon.implausible_gemm(raw, 1.0, dev.memory_bandwidth_Bps) > 20
    for engine in ("trtllm", "sglang"):
        kept = silicon.kernels(dev, engine, fp8_block=True).kernels
        assert "fp8_block" in kept.gemm_grids and not kept.set_aside


def test_a_plausible_block_scaled_table_is_read_and_no_note_is_made():
    k = silicon.kernels(catalog.device("h100-sxm"), "vllm", "0.24.0", fp8_block=True).kernels
    assert "fp8_block" in k.gemm_grids and not k.set_aside
    k.gemm(64.0, 7168, 2048, "fp8")
    assert not k.substituted and not kernel_notes(k)


def test_the_plausibility_check_on_a_made_up_table():
    """A GEMM that streams 16 MiB of fp8 weights in 11 x the time the bandwidth allows is set aside; in 9 x, kept."""
    axes = (np.array([1.0, 64.0]), np.array([4096.0]), np.array([4096.0]))
    bw = 1e12
    stream = 4096 * 4096 / bw
    slow = Grid(axes, np.full((2, 1, 1), 11 * stream))
    assert silicon.implausible_gemm(slow, 1.0, bw) == pytest.approx(11)
    assert silicon.implausible_gemm(Grid(axes, np.full((2, 1, 1), 9 * stream)), 1.0, bw) is None
    assert silicon.implausible_gemm(slow, 1.0, bw / 2) is None  # 5.5x of a memory half as fast


@pytest.mark.parametrize("device", ["h100-sxm", "h200", "b200", "a100-80gb-sxm"])
def test_the_catalogs_all_reduce_follows_the_table_over_the_sizes_a_step_sends(device):
    """tools/derive_kernel_params.py took the bus bandwidth from the table's largest message (1 GiB, NVLink's
    asymptote), so from 64 KiB to 256 MiB -- a decode step's few tokens to an 8k-token prefill -- the catalog's
    all-reduce came out up to 2x faster than measured (mean |log ratio| 0.38 on 8 H100s); it is now fitted over those
    sizes."""
    dev = catalog.device(device)
    version = "0.14.0" if device.startswith("a100") else "0.24.0"
    table, roof = silicon.kernels(dev, "vllm", version).kernels, silicon.roofline(dev)
    sizes = np.geomspace(64 * 2**10, 256 * 2**20, 13)
    for n in (2, 4, 8):
        err = np.abs(np.log(roof.all_reduce(sizes, n) / table.all_reduce(sizes, n)))
        assert err.mean() < 0.33, (n, err.round(2))


def test_the_all_reduce_fit_recovers_an_alpha_beta_curve():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tools.derive_kernel_params import all_reduce_params

    sizes = np.geomspace(256.0, 2.0**30, 23)
    lat, bw, n = 5e-6, 3e11, 8
    g = Grid((sizes,), lat + 2 * (n - 1) / n * sizes / bw)
    got = all_reduce_params(g, n)
    assert got["latency_s"] == pytest.approx(lat, rel=1e-3)
    assert got["bus_bandwidth_Bps"] == pytest.approx(bw, rel=0.005)


def test_a_gemm_cell_slower_than_a_larger_shape_is_read_as_that_shape():
    """A GEMM of m rows can run as one of more rows, padded: a cell more than NOISE above a larger shape's time is read
    as that time, scatter within NOISE stays as measured (no downward bias from the flat, latency-bound region)."""
    seconds = np.array([[10.0], [10.4], [9.9], [21.0], [16.0], [24.0]])  # m = 1, 2, 4, 513, 768, 1024 say
    got = silicon.monotone_rows(seconds[:, :, None])[:, :, 0]
    assert got[:, 0].tolist() == [10.0, 10.4, 9.9, 16.0, 16.0, 24.0]
    # on the real tables: vLLM's per-tensor fp8 on H100 at m = 513 is read as m = 768, TensorRT-LLM's as measured
    dev = catalog.device("h100-sxm")
    for engine, lowered in (("vllm", True), ("trtllm", False)):
        axes, raw = kt.read(dev.name, engine, None).gemm["fp8"]
        grid = silicon._grids(dev.name, engine, None)[0]["fp8"]
        i, j, k = (int(np.flatnonzero(a == v)[0]) for a, v in zip(axes, (513.0, 10240.0, 8192.0), strict=True))
        assert (grid.values[i, j, k] < raw[i, j, k]) == lowered
        assert grid.values[i, j, k] <= raw[i, j, k] and (grid.values <= raw).all()
