"""The operator model's steps against aiconfigurator-core's own step model on the same measured tables
(``benchmarks/bench_aic_steps.py`` runs the full grid and reports it; docs/silicon.md, "Outside the development
file"). Two models of the same kernels must decompose a step alike: before 2026-12-05 a table read wrong
(TensorRT-LLM's MoE on Blackwell), a precision taken from the wrong table (block-scaled fp8), a missing table (MLA)
or a missing overlap (the shared expert) put MoE steps 1.2-3.7x apart, and these cases would have caught it. No
measured end-to-end run is read."""

import importlib.util
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "bench_aic_steps", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_aic_steps.py"
)
assert spec is not None and spec.loader is not None
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # (its dataclasses look their module up)
spec.loader.exec_module(bench)
Config = bench.Config

CASES = [
    Config("llama-3.1-70b", "h200", "trtllm", "fp8", 4),
    Config("deepseek-v3", "b200", "trtllm", "fp8", 8, 8, 1),  # attention TP + EP ("TEP")
    Config("deepseek-v3", "h200", "sglang", "fp8", 1, 8, 8),  # attention DP + EP ("DEP")
    Config("qwen3-235b-a22b", "b200", "trtllm", "fp8", 4, 4, 1),  # 3.6x apart while rc23's reuse was not read
    Config("gpt-oss-120b", "b200", "vllm", "fp4", 1),  # MXFP4 experts
]


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.label)
def test_a_step_agrees_with_aiconfigurators_within_15_percent(c):
    h = bench.aic_engine(c)
    prefill, decode = bench.ours(c, 16)
    assert prefill == pytest.approx(h.predict_prefill_latency(1, bench.ISL) / 1e3, rel=0.15)
    assert decode == pytest.approx(h.predict_decode_latency(16, bench.ISL, 2) / 1e3, rel=0.15)
