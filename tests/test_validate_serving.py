"""trinity validate --serving: every run priced or skipped with its reason; bad files are one-line errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aitrinity import validate_serving as vs
from aitrinity.errors import SpecError

SAMPLE = Path(__file__).parent / "data" / "serving_runs_sample.csv"


@pytest.fixture(scope="module")
def report():
    return vs.validate(SAMPLE)


def test_every_row_is_priced_or_skipped_with_a_reason(report):
    assert len(report.runs) == 29 and len(report.skipped) == 2
    reasons = {s.id: s.reason for s in report.skipped}
    assert "disaggregated run without its prefill_/decode_ pool sizes" in reasons["disagg-example"]
    assert "no catalog model" in reasons["unknown-model-example"]
    assert all(r.ttft_predicted_s > 0 and r.tpot_predicted_s > 0 for r in report.runs)


def test_groups_cover_the_runs_and_the_overall_comes_first(report):
    assert report.groups[0].group == "all" and report.overall.tpot.runs == 29
    engines = [g for g in report.groups if g.group.startswith("engine=")]
    assert sum(g.tpot.runs for g in engines) == 29
    o = report.overall.tpot
    assert 0 <= o.within_15 <= 1 and o.mape >= abs(o.median_error) * 0  # finite, non-negative
    # the operator model is far closer than the static-batch estimate it replaces (61% TPOT MAPE)
    assert o.mape < 0.3


def test_tables_and_roofline_are_both_available_and_named():
    rows, _ = vs.read_rows(SAMPLE)
    _, with_tables, _ = vs.price_rows(rows, tables=True)
    _, without, _ = vs.price_rows(rows, tables=False)
    assert all(s.startswith("table h100_sxm/") for s in with_tables)
    assert without == ["roofline (catalog h100-sxm)"]


@pytest.mark.parametrize(
    "content, words",
    [
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"a,b,c\n1,2,3\n", "missing column"),
        (SAMPLE.read_bytes().split(b"\n")[0] + b"\n", "no run the model can express"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, content, words):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content)
    with pytest.raises(SpecError) as err:
        vs.validate(bad)
    assert words in str(err.value) and "\n" not in str(err.value)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "aitrinity.cli.main", *args], capture_output=True, text=True)


def test_the_cli_prints_the_table_and_the_same_data_as_json(tmp_path):
    p = _cli("validate", "--serving", str(SAMPLE), "--quiet")
    assert p.returncode == 0, p.stderr
    assert "| all | 29 |" in p.stdout and "skipped 1: a disaggregated run without" in p.stdout
    j = _cli("validate", "--serving", str(SAMPLE), "--json", "--quiet", "--no-tables")
    data = json.loads(j.stdout)
    assert data["kernels"] == ["roofline (catalog h100-sxm)"] and len(data["runs"]) == 29
    missing = _cli("validate", "--serving", str(tmp_path / "nope.csv"), "--quiet")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


HEADER = SAMPLE.read_text().splitlines()[0].split(",")


def _row(rid, model, mode="agg", **sizes):
    """A run in the measured-run format (made-up times: this checks the layout is priced, not how well)."""
    row = dict.fromkeys(HEADER, "")
    row.update(id=rid, backend="trtllm", backend_version="1.0.0", model_path=model, system="h100_sxm", mode=mode)
    row.update(isl="1024", osl="128", batch_size="64", silicon_ttft_ms="500", silicon_tpot_ms="20")
    row.update({k: str(v) for k, v in sizes.items()})
    return ",".join(row[h] for h in HEADER)


LAYOUTS = {  # id: (row, the layout label the report gives it)
    "dep": (
        _row(
            "dep",
            "deepseek-ai/DeepSeek-V3",
            tp_size=1,
            attention_dp_size=8,
            moe_tp_size=1,
            moe_ep_size=8,
            gemm_quant_mode="fp8",
        ),
        "tp1 dp8 ep8",
    ),
    "tep": (
        _row(
            "tep",
            "deepseek-ai/DeepSeek-V3",
            tp_size=8,
            attention_dp_size=1,
            moe_tp_size=1,
            moe_ep_size=8,
            gemm_quant_mode="fp8",
        ),
        "tp8 ep8",
    ),
    "moe-tp": (_row("moe-tp", "Qwen/Qwen3-235B-A22B", tp_size=8, moe_tp_size=8, moe_ep_size=1), ""),
    "dense-dp": (_row("dense-dp", "Qwen/Qwen3-32B", tp_size=2, attention_dp_size=4), "tp2 dp4"),
    "pp": (_row("pp", "meta-llama/Llama-3.1-70B", tp_size=4, pp_size=2), "tp4 pp2"),
    "disagg-dense": (
        _row(
            "disagg-dense",
            "meta-llama/Llama-3.1-8B-Instruct",
            "disagg",
            prefill_num_workers=2,
            prefill_tp_size=1,
            prefill_batch_size=1,
            decode_num_workers=1,
            decode_tp_size=2,
            decode_batch_size=128,
        ),
        "prefill 2 x tp1 + decode 1 x tp2",
    ),
    "disagg-moe": (
        _row(
            "disagg-moe",
            "deepseek-ai/DeepSeek-V3",
            "disagg",
            gemm_quant_mode="fp8",
            prefill_num_workers=2,
            prefill_tp_size=8,
            prefill_moe_tp_size=1,
            prefill_moe_ep_size=8,
            decode_num_workers=1,
            decode_tp_size=1,
            decode_attention_dp_size=16,
            decode_moe_tp_size=1,
            decode_moe_ep_size=16,
            decode_batch_size=64,
        ),
        "prefill 2 x tp8 ep8 + decode 1 x tp1 dp16 ep16",
    ),
}
BAD = {  # id: (row, the reason it is skipped)
    "ep-not-dividing": (
        _row(
            "ep-not-dividing",
            "mistralai/Mixtral-8x7B-v0.1",
            tp_size=1,
            attention_dp_size=3,
            moe_tp_size=1,
            moe_ep_size=3,
        ),
        "moe_ep 3 does not divide the 8 experts",
    ),
    "ep-not-gpus": (
        _row("ep-not-gpus", "deepseek-ai/DeepSeek-V3", tp_size=8, moe_tp_size=2, moe_ep_size=8),
        "moe_tp x moe_ep (2 x 8) is not the 8 GPUs",
    ),
    "tp-not-dividing-heads": (  # an engine refuses it: vLLM asks tp to divide the attention heads
        _row("tp-not-dividing-heads", "Qwen/Qwen3-32B", tp_size=3),
        "tp_size: got 3, expected a divisor of num_attention_heads (64) of qwen3-32b",
    ),
}


def test_attention_dp_expert_parallel_pipeline_and_disaggregated_runs_are_priced(tmp_path):
    """Every layout the format describes is priced: DP attention + EP MoE, attention TP + EP MoE, MoE TP, dense
    attention DP, PP, and disaggregated pools of dense and MoE models; a MoE split that cannot exist is skipped
    with its reason, and so is a TP degree that does not split the attention heads."""
    f = tmp_path / "runs.csv"
    f.write_text("\n".join([",".join(HEADER), *(r for r, _ in LAYOUTS.values()), *(r for r, _ in BAD.values())]))
    report = vs.validate(f, tables=False)
    runs = {r.id: r for r in report.runs}
    assert set(runs) == set(LAYOUTS)
    for rid, (_, label) in LAYOUTS.items():
        r = runs[rid]
        assert r.layout == label
        assert 0 < r.ttft_predicted_s < 1e3 and 0 < r.tpot_predicted_s < 10, rid
    assert {s.id: s.reason for s in report.skipped}.keys() == BAD.keys()
    for s in report.skipped:
        assert BAD[s.id][1] in s.reason
    assert any(g.group == "layout=tp1 dp8 ep8" for g in report.groups)


def test_a_model_the_catalog_lacks_is_read_from_the_config_aiconfigurator_ships(tmp_path):
    """The measured runs cover models the catalog does not name; where aiconfigurator-core ships the model's
    Hugging Face config.json (and the importer reads its architecture) the run is priced from it and the report says
    so. A new architecture is skipped naming its model_type; an id that is not org/name never becomes a path."""
    from aitrinity import catalog
    from aitrinity.catalog import kernel_tables

    f = tmp_path / "runs.csv"
    runs = [
        _row("minimax", "MiniMaxAI/MiniMax-M2.5", tp_size=8, moe_tp_size=8),
        _row("qwen3.5", "Qwen/Qwen3.5-27B", tp_size=8),
        _row("traversal", "../../../model_configs/Qwen--Qwen3-8B", tp_size=8),
        _row("unknown", "acme/NoSuchModel-7B", tp_size=8),
    ]
    f.write_text("\n".join([",".join(HEADER), *runs]))
    report = vs.validate(f, tables=False)
    assert [(r.id, r.model) for r in report.runs] == [("minimax", "MiniMaxAI/MiniMax-M2.5")]
    assert 0 < report.runs[0].tpot_predicted_s < 1
    assert any("MiniMaxAI/MiniMax-M2.5: not in the catalog" in n for n in report.notes)
    assert catalog.model("MiniMaxAI/MiniMax-M2.5").moe.num_experts == 256
    reasons = {s.id: s.reason for s in report.skipped}
    assert "model_type 'qwen3_5'" in reasons["qwen3.5"]
    assert "nor a config.json" in reasons["traversal"] and "nor a config.json" in reasons["unknown"]
    assert kernel_tables.shipped_model_config("../../../model_configs/Qwen--Qwen3-8B") is None
    assert kernel_tables.shipped_model_config("Qwen/Qwen3-8B") is not None


def test_a_block_scaled_fp8_run_is_priced_with_the_block_scaled_kernels(tmp_path):
    """DeepSeek-V3's runs name their precision fp8_block (128 x 128 weight scales): they run the block-scaled kernels,
    which on TensorRT-LLM are faster than its per-tensor fp8 GEMM at decode's few rows; the same run named fp8 keeps
    the per-tensor tables."""
    from aitrinity import catalog, silicon
    from aitrinity.cost.concurrency import steady_state
    from aitrinity.cost.kv_pool import kv_pool, kv_slots

    sizes = {"tp_size": 8, "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 8, "batch_size": 4}
    rows = [
        _row("block", "deepseek-ai/DeepSeek-V3", gemm_quant_mode="fp8_block", moe_quant_mode="fp8_block", **sizes),
        _row("tensor", "deepseek-ai/DeepSeek-V3", gemm_quant_mode="fp8", **sizes),
    ]
    f = tmp_path / "runs.csv"
    f.write_text("\n".join([",".join(HEADER), *rows]))
    runs = {r.id: r for r in vs.validate(f, tables=True).runs}
    assert runs["block"].tpot_predicted_s < runs["tensor"].tpot_predicted_s
    [row] = [r for r in vs.read_rows(f)[0] if r.id == "block"]
    assert row.fp8_block and row.dtype == "fp8"
    m, dev = catalog.model("deepseek-v3"), catalog.device("h100-sxm")
    k = silicon.block_scaled(silicon.kernels(dev, "trtllm", row.version).kernels)
    lay = vs.row_layout(row)
    slots = kv_slots(m, lay, dev.memory_capacity_bytes, 1024, 128, kv_pool("trtllm"))
    want = steady_state(m, k, lay, 4, 1024, 128, kv_slots=slots)
    assert runs["block"].tpot_predicted_s == pytest.approx(float(want.tpot_s), rel=1e-12)


def test_a_scenario_of_a_block_scaled_model_runs_the_block_scaled_kernels():
    """DeepSeek-R1's published fp8 checkpoint is block-scaled (its catalog entry says so, from config.json): a
    scenario naming an engine prices its fp8 weights with that engine's block-scaled tables, as a measured run
    named fp8_block is; a per-tensor model keeps the per-tensor ones."""
    from aitrinity import api
    from aitrinity.spec._base import validate
    from aitrinity.spec.scenario import Scenario

    def resolved(model: str):
        doc = {
            "name": "s",
            "system": {"device": "h200", "num_devices": 8, "engine": "trtllm"},
            "workload": {"model": model, "serving": {"prompt_tokens": 1024, "output_tokens": 128, "batch": 8}},
            "plan": {"tp": 8, "weight_dtype": "fp8"},
        }
        return api.resolve(validate(Scenario, doc))

    assert api._kernels(resolved("deepseek-r1")).kernels.fp8_block
    assert not api._kernels(resolved("llama-3.1-70b")).kernels.fp8_block
