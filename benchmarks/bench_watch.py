"""``trinity watch``'s priced TTFT and TPOT against a live vLLM server's measured ones, period by period.

vLLM's OpenAI server (the CPU build) serves a small Llama built locally (4 layers x 512 wide, random weights, run in
float32 as the engine tests run it) with a KV pool of 16 blocks of 128 tokens and ``max-num-seqs`` 8. Two periods,
each read from ``/metrics`` before and after it, as the watch reads them (``systems.vllm.watch``): a light one
(2 clients x 12 requests of 256 -> 8 tokens) and a heavy one (8 clients x 1 request of 700 -> 300 tokens, which
outgrow the pool and are preempted). Each period's load is measured from vLLM's histograms and priced by
``systems.vllm.priced`` -- ``trinity diagnose``'s pricer on a ``trinity calibrate`` profile of this machine, with
the server's pool and dtype, the GPU-fitted ``vllm`` engine profile -- exactly what ``trinity watch --device
PROFILE --dtype fp32`` prints. Reported: measured and priced TTFT and TPOT per period, and their ratio. Nothing
is fitted. (``benchmarks/bench_vllm.py`` is the calibrated comparison on a grid: it probes the engine's host time.)

    python benchmarks/bench_watch.py [--profile me.yaml] [--json]     # about 3 minutes
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from aitrinity.catalog.hf import from_hf_config
from aitrinity.systems.vllm import priced
from aitrinity.systems.vllm.server import Server, closed_loop
from aitrinity.systems.vllm.tiny import tiny_model
from aitrinity.systems.vllm.watch import judge, parse_metrics

PERIODS = {"light": (2, 12, 256, 8), "heavy": (8, 1, 700, 300)}
"""Name -> clients, requests per client, prompt and output tokens."""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(profile: Path | None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    if profile is None:
        from aitrinity.systems.calibrate import calibrate

        say("calibrating this machine (quick) ...")
        profile = work / "me.yaml"
        profile.write_text(yaml.safe_dump(calibrate(quick=True, name="this-machine").model_dump(mode="json")))
    model = tiny_model(work / "model")
    m = from_hf_config(json.loads((model / "config.json").read_text()), "tiny")
    args = ["--max-model-len", "1200", "--enforce-eager", "--no-enable-prefix-caching", "--dtype", "float32"]
    args += ["--num-gpu-blocks-override", "16", "--max-num-seqs", "8"]
    rows = []
    with Server(model, work / "server.log", args, env={"VLLM_CPU_KVCACHE_SPACE": "1"}) as srv:
        say(f"server ready in {srv.start_s:.0f} s")

        def read() -> Any:
            return parse_metrics(srv.get("/metrics")[1].decode(), time.monotonic())

        prev = read()
        served = priced.served(m, str(profile), dtype="fp32", kv_pool_tokens=prev.kv_pool_tokens)
        rng = np.random.default_rng(3)
        for name, (clients, rounds, isl, osl) in PERIODS.items():
            prompts = [[[int(x) for x in rng.integers(3, 2048, isl)] for _ in range(rounds)] for _ in range(clients)]
            closed_loop(srv, prompts, osl)
            now = read()
            v = judge(prev, now, served)
            assert v.load is not None and v.expected is not None
            ld, e = v.load, v.expected
            row = {
                "period": name,
                "binds": v.binds,
                "preemptions": v.preemptions,
                "requests": ld.requests,
                "clients": ld.clients,
                "ttft_s": ld.ttft_s,
                "ttft_priced_s": e.ttft_s,
                "tpot_s": ld.tpot_s,
                "tpot_priced_s": e.tpot_s,
                "running_priced": e.running,
            }
            rows.append(row)
            say(
                f"  {name}: {v.binds}, TTFT {ld.ttft_s} s priced {e.ttft_s:.3g}; TPOT {ld.tpot_s} priced {e.tpot_s:.3g}"
            )
            prev = now
    return {"profile": str(profile), "pool_tokens": served.kv_pool_tokens, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", type=Path, help="a trinity calibrate profile (default: calibrate now, quick)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run(args.profile)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"KV pool {out['pool_tokens']:,} tokens; profile {out['profile']}")
    print("| period | binds | preempted | requests | in flight | TTFT | priced | ratio | TPOT | priced | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out["rows"]:
        ttft, tpot = r["ttft_s"], r["tpot_s"]
        print(
            f"| {r['period']} | {r['binds']} | {r['preemptions']:g} | {r['requests']:g} | {r['clients']:.1f} | "
            f"{ttft * 1e3:,.0f} ms | {r['ttft_priced_s'] * 1e3:,.0f} ms | {r['ttft_priced_s'] / ttft:.2f} | "
            f"{tpot * 1e3:.1f} ms | {r['tpot_priced_s'] * 1e3:.1f} ms | {r['tpot_priced_s'] / tpot:.2f} |"
        )


if __name__ == "__main__":
    main()
