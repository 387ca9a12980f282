"""The operator model's engine steps against aiconfigurator-core's own step model, on the same measured tables.

The development runs (``../shared/validation/serving_h100_dense.csv``) are dense models on H100; the independent
check is other GPUs and models, MoE among them. This benchmark asks, before that check does, whether the step
times this project builds from the kernel tables agree with those NVIDIA's aiconfigurator builds from the *same*
tables (``aiconfigurator_core.sdk.engine.EngineHandle``: its model layer walks each operator, its Rust core prices
it), for configurations outside the development file: H200, B200, GB200, MoE (DeepSeek-V3, Qwen3-235B-A22B) with
attention TP or attention DP and expert parallelism. It reads no measured end-to-end run (not
``systems/silicon_sample.csv``); it compares two models of the same kernels, so an agreement says the operator
decomposition is the same, not that either is right, and a disagreement says where to look.

Per configuration: one prompt's prefill (``isl`` tokens) and one decode step of ``batch`` sequences at context
``isl`` (GPU time only: neither side adds the engine's host time here), ours over aiconfigurator's.

    python benchmarks/bench_aic_steps.py [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from aitrinity import catalog, silicon
from aitrinity.cost.operators import Layout, ScaleOut, StepShape, step_times

AIC_MODEL = {
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "gpt-oss-120b": "openai/gpt-oss-120b",
}
AIC_SYSTEM = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "gb200": "gb200", "b300": "b300_sxm"}
AIC_QUANT = {"bf16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4"}


@dataclass(frozen=True)
class Config:
    model: str
    device: str
    engine: str
    dtype: str
    tp: int
    ep: int = 1
    attention_dp: int = 1

    @property
    def label(self) -> str:
        moe = f" ep{self.ep} dp{self.attention_dp}" if self.ep > 1 else ""
        return f"{self.model} {self.dtype} {self.device} {self.engine} tp{self.tp}{moe}"


CONFIGS = [
    # dense, the development file's models on other GPUs (and H100 as the anchor)
    *(
        Config(m, d, e, dt, tp)
        for d in ("h100-sxm", "h200", "b200")
        for e in ("trtllm", "vllm", "sglang")
        for m, dt, tp in (("llama-3.1-70b", "fp8", 4), ("qwen3-32b", "bf16", 2), ("llama-3.1-8b", "bf16", 1))
    ),
    # MoE: DeepSeek-V3 with attention TP + EP (TensorRT-LLM's "TEP") and attention DP + EP ("DEP"), Qwen3-235B
    *(
        Config("deepseek-v3", d, e, "fp8", tp, 8, dp)
        for d in ("h200", "b200")
        for e in ("trtllm", "sglang")
        for tp, dp in ((8, 1), (1, 8))
    ),
    *(Config("qwen3-235b-a22b", d, e, "fp8", 4, 4, 1) for d in ("h200", "b200") for e in ("trtllm", "sglang")),
    # Blackwell racks and fp4: wide expert parallelism over the NVLink domain, fp4 weights
    *(Config("deepseek-v3", d, "trtllm", "fp8", 1, 16, 16) for d in ("gb200", "b300")),
    *(Config("llama-3.1-70b", d, "trtllm", "fp4", 2) for d in ("b200", "gb200")),
    *(Config("gpt-oss-120b", d, e, "fp4", 1) for d in ("h200", "b200") for e in ("trtllm", "vllm")),
]
BATCHES = (1, 16, 128)
ISL = 2048


def block_fp8(c: Config) -> bool:
    """DeepSeek-V3's fp8 checkpoints are block-scaled (128 x 128): both sides price block-scaled kernels."""
    return c.model == "deepseek-v3" and c.dtype == "fp8"


def aic_engine(c: Config) -> Any:  # aiconfigurator's EngineHandle (an optional extra)
    from aiconfigurator_core.sdk.engine import EngineHandle

    quant = "fp8_block" if block_fp8(c) else AIC_QUANT[c.dtype]
    moe: dict[str, Any] = {}
    if c.ep > 1:
        moe = {"moe_tp_size": c.tp * c.attention_dp // c.ep, "moe_ep_size": c.ep, "moe_quant_mode": quant}
    if c.model == "gpt-oss-120b":  # its published checkpoint: MXFP4 experts, bf16 attention
        quant, moe = "bfloat16", {**moe, "moe_quant_mode": "w4a16_mxfp4"}
    with contextlib.redirect_stderr(io.StringIO()):  # its version notes
        return EngineHandle.compile(
            AIC_MODEL[c.model],
            AIC_SYSTEM[c.device],
            c.engine,
            tp_size=c.tp,
            attention_dp_size=c.attention_dp,
            gemm_quant_mode=quant,
            kvcache_quant_mode="bfloat16",  # a bf16 KV cache and attention, as ours prices (Layout's default)
            fmha_quant_mode="bfloat16",
            **moe,
        )


def ours(c: Config, batch: int) -> tuple[float, float]:
    """Prefill of one ``ISL``-token prompt and a decode step of ``batch`` at context ``ISL``, seconds."""
    m, dev = catalog.model(c.model), catalog.device(c.device)
    k = silicon.kernels(dev, c.engine).kernels
    if block_fp8(c):  # what aiconfigurator is told (its fp8_block)
        k = silicon.block_scaled(k)
    lay = Layout(
        tp=c.tp,
        ep=c.ep,
        attention_dp=c.attention_dp if c.ep > 1 else None,
        weight_dtype=c.dtype,
        engine=c.engine,
        scale_out=ScaleOut.over(dev.typical_devices_per_node, catalog.link(dev.typical_inter_node_link)),
    )
    pre = step_times(
        m, k, lay, StepShape(np.array(0.0), np.array(1.0), np.array(1.0), np.array(float(ISL)), np.array(0.0))
    ).total
    dec = step_times(
        m, k, lay, StepShape(np.array(float(batch)), np.array(float(ISL)), np.array(0.0), np.array(1.0), np.array(0.0))
    ).total
    return float(pre), float(dec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        print("bench_aic_steps: needs pip install 'aitrinity[silicon]'", file=sys.stderr)
        return 2
    start = time.perf_counter()
    rows = []
    for c in CONFIGS:
        try:
            h = aic_engine(c)
            aic_pre = h.predict_prefill_latency(1, ISL) / 1e3
            aic_decs = [h.predict_decode_latency(b, ISL, 2) / 1e3 for b in BATCHES]
        except Exception as e:  # a configuration aiconfigurator does not price here: said, not hidden
            print(f"skip {c.label}: aiconfigurator: {str(e).splitlines()[0][:140]}", file=sys.stderr)
            continue
        for b, aic_dec in zip(BATCHES, aic_decs, strict=True):
            pre, dec = ours(c, b)
            rows.append(
                {
                    **asdict(c),
                    "batch": b,
                    "prefill_s": pre,
                    "aic_prefill_s": aic_pre,
                    "decode_s": dec,
                    "aic_decode_s": aic_dec,
                }
            )
    took = time.perf_counter() - start
    groups: dict[str, list[dict]] = {}
    for r in rows:
        moe = catalog.model(r["model"]).moe is not None
        kind = "MoE" if moe else ("dense, H100" if r["device"] == "h100-sxm" else "dense, other GPUs")
        groups.setdefault(kind, []).append(r)
    summary = {
        k: {
            "configs": len(v),
            "decode_median_ratio": statistics.median(r["decode_s"] / r["aic_decode_s"] for r in v),
            "decode_mape": statistics.mean(abs(r["decode_s"] / r["aic_decode_s"] - 1) for r in v),
            "prefill_median_ratio": statistics.median(r["prefill_s"] / r["aic_prefill_s"] for r in v),
            "prefill_mape": statistics.mean(abs(r["prefill_s"] / r["aic_prefill_s"] - 1) for r in v),
        }
        for k, v in groups.items()
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return 0
    print(
        f"{len(rows)} steps, {took:.0f} s; ours / aiconfigurator (same tables), prefill of 1 x {ISL}, decode at {ISL}"
    )
    print("| configuration | batch | prefill ms (ours / aic) | decode ms (ours / aic) |")
    print("|---|---|---|---|")
    for r in rows:
        c = Config(*(r[f] for f in ("model", "device", "engine", "dtype", "tp", "ep", "attention_dp")))
        print(
            f"| {c.label} | {r['batch']} | {r['prefill_s'] * 1e3:.1f} / {r['aic_prefill_s'] * 1e3:.1f} "
            f"| {r['decode_s'] * 1e3:.2f} / {r['aic_decode_s'] * 1e3:.2f} |"
        )
    print()
    print("| group | steps | decode: median ratio, MAPE | prefill: median ratio, MAPE |")
    print("|---|---|---|---|")
    for k, s in summary.items():
        print(
            f"| {k} | {s['configs']} | {s['decode_median_ratio']:.2f}, {s['decode_mape']:.1%} "
            f"| {s['prefill_median_ratio']:.2f}, {s['prefill_mape']:.1%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
