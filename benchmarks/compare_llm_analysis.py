"""aitrinity vs llm-analysis on the same training and inference configurations, side by side.

llm-analysis (PyPI, Apache-2.0) is run in its own environment, in a child
process of this one, on its bundled model and GPU configs (no network). Both
tools get the same efficiencies (70% of peak FLOP/s, 85% of peak HBM
bandwidth) and the same dtypes; gradients are fp32 in both, llm-analysis's
convention. Every figure is printed with the relative difference
(aitrinity / llm-analysis - 1); docs/validation.md explains the
disagreements over 5% with the published source that settles each.

    python -m venv /tmp/la && /tmp/la/bin/pip install llm-analysis
    python benchmarks/compare_llm_analysis.py --llm-analysis-python /tmp/la/bin/python [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from aitrinity import api
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Scenario

EFF = {"compute": 0.7, "memory": 0.85}


@dataclass
class Case:
    name: str
    kind: str  # "train" | "infer"
    la_args: dict[str, Any]
    scenario: dict[str, Any]
    rows: list[tuple[str, str, str]] = field(default_factory=list)  # (label, llm-analysis key, our path)


CASES = [
    Case(
        "OPT-13B inference, 1 x A100-80GB, batch 8, 512 + 32 tokens",
        "infer",
        dict(
            model_name="facebook_opt-13b",
            gpu_name="a100-sxm-80gb",
            batch_size_per_gpu=8,
            seq_len=512,
            num_tokens_to_generate=32,
        ),
        {
            "system": {"device": "a100-80gb-sxm", "num_devices": 1, "efficiency": EFF},
            "workload": {"model": "opt-13b", "serving": {"prompt_tokens": 512, "output_tokens": 32, "batch": 8}},
            "plan": {"compute_dtype": "fp16"},
        },
    ),
    Case(
        "Llama-2-70B inference, 8 x H100 (tp 8), batch 16, 2048 + 256 tokens",
        "infer",
        dict(
            model_name="upstage_Llama-2-70b-instruct-v2",
            gpu_name="h100-sxm-80gb",
            batch_size_per_gpu=16,
            seq_len=2048,
            num_tokens_to_generate=256,
            tp_size=8,
        ),
        {
            "system": {"device": "h100-sxm", "num_devices": 8, "efficiency": EFF},
            "workload": {"model": "llama-2-70b", "serving": {"prompt_tokens": 2048, "output_tokens": 256, "batch": 16}},
            "plan": {"tp": 8, "compute_dtype": "fp16"},
        },
    ),
    Case(
        "OPT-13B training, 8 x A100-80GB, ZeRO-1, micro-batch 4, 2048 tokens, global batch 64",
        "train",
        dict(
            model_name="facebook_opt-13b",
            gpu_name="a100-sxm-80gb",
            batch_size_per_gpu=4,
            global_batch_size=64,
            seq_len=2048,
            ds_zero=1,
            total_num_gpus=8,
            activation_recomputation=0,
            flash_attn=True,
        ),
        {
            "system": {"device": "a100-80gb-sxm", "num_devices": 8, "efficiency": EFF},
            "workload": {"model": "opt-13b", "training": {"seq_len": 2048, "global_batch": 64}},
            "plan": {"micro_batch": 4, "zero": 1, "compute_dtype": "fp16", "grad_dtype": "fp32"},
        },
    ),
    Case(
        "GPT-3 175B training, 1024 x A100-80GB, tp 8 x pp 8 x dp 16, ZeRO-1, selective recompute, 2048 tokens",
        "train",
        dict(
            model_name="megatron-lm-175b",
            gpu_name="a100-sxm-80gb",
            batch_size_per_gpu=1,
            global_batch_size=1536,
            seq_len=2048,
            ds_zero=1,
            tp_size=8,
            pp_size=8,
            total_num_gpus=1024,
            activation_recomputation=1,
            flash_attn=False,
        ),
        {
            "system": {"device": "a100-80gb-sxm", "num_devices": 1024, "efficiency": EFF},
            "workload": {"model": "gpt-3-175b", "training": {"seq_len": 2048, "global_batch": 1536}},
            "plan": {
                "tp": 8,
                "pp": 8,
                "zero": 1,
                "recompute": "selective",
                "sequence_parallel": True,
                "flash_attention": False,
                "compute_dtype": "fp16",
                "grad_dtype": "fp32",
            },
        },
    ),
]

LA_CHILD = r"""
import json, logging, sys
logging.disable(logging.CRITICAL)
from llm_analysis.analysis import train, infer
spec = json.loads(sys.argv[1])
fn = train if spec.pop("_kind") == "train" else infer
out = fn(dtype_name="w16a16e16", log_level="ERROR", flops_efficiency=0.7, hbm_memory_efficiency=0.85,
         layernorm_dtype_bytes=2, **spec)
print(json.dumps({k: v for k, v in out.items() if isinstance(v, (int, float))}))
"""


def run_llm_analysis(python: str, case: Case) -> dict[str, float]:
    arg = json.dumps({**case.la_args, "_kind": case.kind})
    done = subprocess.run([python, "-c", LA_CHILD, arg], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def ours(case: Case) -> dict[str, float]:
    sc = validate(Scenario, {"name": case.name, **case.scenario})
    d = api.diagnose(sc)
    est = d.estimate
    mem: dict[str, float] = {}
    for item in est.memory.items:
        mem[item.category] = mem.get(item.category, 0.0) + item.bytes
    if case.kind == "infer":
        assert est.serving is not None
        return {
            "weights": mem["weights"],
            "kv_cache": mem["kv_cache"],
            "prefill_s": est.serving.ttft_s,
            "decode_s": est.serving.tpot_s,
        }
    assert est.training is not None
    return {
        "weights": mem["weights"],
        "gradients": mem["gradients"],
        "optimizer": mem["optimizer"],
        "activations": mem["activations"],
        "step_s": est.training.step_time_s,
        "params": est.ledger.params_total,
    }


ROWS = {
    "infer": [
        ("weight memory per GPU (B)", "weight_memory_per_gpu", "weights"),
        ("KV cache per GPU (B)", "kv_cache_memory_per_gpu", "kv_cache"),
        ("prefill latency (s)", "prefill_latency", "prefill_s"),
        ("decode latency per token (s)", "decode_latency", "decode_s"),
    ],
    "train": [
        ("parameters", "num_params_total", "params"),
        ("weight memory per GPU (B)", "weight_memory_per_gpu", "weights"),
        ("gradient memory per GPU (B)", "gradient_memory_per_gpu", "gradients"),
        ("optimizer states per GPU (B)", "optimizer_state_memory_per_gpu", "optimizer"),
        ("activation memory per GPU (B)", "activation_memory_per_gpu", "activations"),
        ("step latency (s)", "latency_per_iter", "step_s"),
    ],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--llm-analysis-python", default=sys.executable, help="a Python with llm-analysis installed (default: this one)"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = []
    for case in CASES:
        la, us = run_llm_analysis(args.llm_analysis_python, case), ours(case)
        rows = [
            {
                "quantity": label,
                "llm_analysis": la[la_key],
                "aitrinity": us[key],
                "relative_difference": us[key] / la[la_key] - 1 if la[la_key] else None,
            }
            for label, la_key, key in ROWS[case.kind]
        ]
        report.append({"case": case.name, "rows": rows})
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for r in report:
        print(f"\n{r['case']}")
        print(f"  {'quantity':32s} {'llm-analysis':>14s} {'aitrinity':>14s} {'diff':>8s}")
        for row in r["rows"]:
            diff = row["relative_difference"]
            flag = "  <- >5%" if diff is not None and abs(diff) > 0.05 else ""
            print(f"  {row['quantity']:32s} {row['llm_analysis']:14.4g} {row['aitrinity']:14.4g} {diff:+8.1%}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
