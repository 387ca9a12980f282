"""Context-parallel prefill of one long prompt against Meta's published times (docs/silicon.md).

Llama-3.1-405B with fp8 weights (bf16 ones do not fit 8 x 80 GB) on HGX H100 nodes, tp 8 inside each node and
context parallelism over the nodes, one client sending a 128k-token prompt (``mode: concurrency`` at one client,
the default, and ``mode: static``, the phase roofline), priced by :func:`aitrinity.api.diagnose` with the catalog's
kernel parameters (or ``--engine`` tables with ``[silicon]``). Reference, in the same table: Yang et al. 2024,
"Context Parallelism for Scalable Million-Token Inference" (arXiv 2411.01783): about 60 s for 128k tokens on one
8-GPU host (§1) and 3.8 s on 16 hosts (abstract). Nothing is fitted to them.

    python benchmarks/bench_context_parallel.py [--engine trtllm] [--json]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from aitrinity import api
from aitrinity.cost.diagnosis import Diagnosis
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Scenario

PROMPT = 131008  # 128k, with room for the output in the model's 131,072-token context
PUBLISHED_S = {1: 60.0, 16: 3.8}
"""Seconds for one 128k-token prefill by CP degree (nodes of 8 x H100, tp 8): Yang et al. 2024, §1 and abstract."""


def scenario(nodes: int, mode: str, engine: str) -> Scenario:
    return validate(
        Scenario,
        {
            "name": f"llama-405b-128k-cp{nodes}",
            "system": {"device": "h100-sxm", "num_devices": 8 * nodes, "engine": engine},
            "workload": {
                "model": "llama-3.1-405b",
                "serving": {"mode": mode, "prompt_tokens": PROMPT, "output_tokens": 64, "batch": 1},
            },
            "plan": {"tp": 8, "cp": nodes, "weight_dtype": "fp8"},
        },
    )


def ttft(nodes: int, mode: str, engine: str) -> float:
    d = api.diagnose(scenario(nodes, mode, engine))
    assert isinstance(d, Diagnosis) and d.estimate.serving is not None
    return d.estimate.serving.ttft_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="generic", choices=("generic", "trtllm", "vllm", "sglang"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for nodes in (1, 2, 4, 8, 16):
        row: dict[str, Any] = {"nodes": nodes, "gpus": 8 * nodes, "published_s": PUBLISHED_S.get(nodes)}
        for mode in ("concurrency", "static"):
            row[f"{mode}_s"] = ttft(nodes, mode, args.engine)
        rows.append(row)
    base = rows[0]
    for r in rows:
        r["speedup"] = base["concurrency_s"] / r["concurrency_s"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"Llama-3.1-405B (fp8 weights), one {PROMPT:,}-token prompt, tp 8 x cp = nodes ({args.engine} kernels)")
    print("| nodes | GPUs | published | model, 1 client | speed-up | model, static batch |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        pub = f"{r['published_s']:.1f} s" if r["published_s"] else "-"
        err = f" ({r['concurrency_s'] / r['published_s'] - 1:+.0%})" if r["published_s"] else ""
        print(
            f"| {r['nodes']} | {r['gpus']} | {pub} | {r['concurrency_s']:.2f} s{err} | {r['speedup']:.1f}x "
            f"| {r['static_s']:.2f} s |"
        )
    print(f"published speed-up at 16 nodes: {PUBLISHED_S[1] / PUBLISHED_S[16]:.1f}x")


if __name__ == "__main__":
    main()
