"""Prefix-cache hit rate on a replayed multi-turn trace: vLLM's own count against ``trinity kv replay``'s
(issue 23, item 2).

The Mooncake conversation trace (``data/traces/``) names each 512-token block of a prompt by a hash id;
requests of one conversation share their leading ids. Scaled to vLLM's CPU block of 128 tokens (``/4``):
each hash id becomes 128 fixed random token ids (seeded by the id), a prompt is its ids' blocks cut to
``input_length / 4`` tokens, and the requests whose scaled prompt fits ``--max-prompt`` are kept, in trace
order. They go one at a time (one output token each) to vLLM's OpenAI server with prefix caching on and a
KV cache of ``--blocks`` blocks; the measured hit rate is vLLM's ``prefix_cache_hits`` over
``prefix_cache_queries`` (tokens, from ``/metrics``). The prediction is the project's replay
(``cost.prefix_reuse.replay``: LRU over full blocks) of the same scaled requests at the same capacity.

    python benchmarks/bench_vllm_prefix.py [--requests 1000] [--blocks 34,512] [--json]   # about 12 minutes
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

from aitrinity.catalog import traces
from aitrinity.cost.prefix_reuse import replay
from aitrinity.spec.traces import TraceRequest
from aitrinity.systems.vllm.server import Server
from aitrinity.systems.vllm.tiny import tiny_model
from aitrinity.systems.vllm.watch import parse_metrics

BLOCK = 128
SCALE = 4  # the trace's 512-token blocks -> vLLM's 128
VOCAB = 2048


def scaled(requests: list[TraceRequest], max_prompt: int, n: int) -> list[TraceRequest]:
    out = []
    for r in requests:
        tokens = -(-r.prompt_tokens // SCALE)
        if tokens <= max_prompt and tokens > 0:
            out.append(TraceRequest(r.timestamp_ms, tokens, 1, r.hash_ids))
        if len(out) == n:
            break
    return out


def prompt(r: TraceRequest) -> list[int]:
    ids: list[int] = []
    for h in r.hash_ids:
        ids += [int(x) for x in np.random.default_rng(h).integers(3, VOCAB, BLOCK)]
    return ids[: r.prompt_tokens]


def hits(srv: Server) -> tuple[float, float]:
    """vLLM's prefix-cache counters: (hit tokens, looked-up tokens)."""
    got = parse_metrics(srv.get("/metrics")[1].decode(), 0.0)
    return got.prefix_hits, got.prefix_queries


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-vllm-prefix-"))
    model = tiny_model(work / "model", max_positions=args.max_prompt + 64)
    reqs = scaled(traces.load(traces.conversation_trace()), args.max_prompt, args.requests)
    rows = []
    for blocks in args.blocks:
        flags = ["--max-model-len", str(args.max_prompt + 8), "--enforce-eager", "--enable-prefix-caching"]
        flags += ["--num-gpu-blocks-override", str(blocks), "--max-num-seqs", "1"]
        print(f"== {blocks} blocks: starting the vLLM server ...", file=sys.stderr, flush=True)
        with Server(model, work / f"{blocks}.log", flags, env={"VLLM_CPU_KVCACHE_SPACE": "1"}) as srv:
            h0, q0 = hits(srv)
            t0 = time.perf_counter()
            for i, r in enumerate(reqs, 1):
                srv.complete(prompt(r), 1)
                if i % 100 == 0:
                    print(f"   {i}/{len(reqs)} requests, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            h1, q1 = hits(srv)
        predicted = replay(reqs, blocks * BLOCK, block_tokens=BLOCK)
        rows.append(
            {
                "blocks": blocks,
                "capacity_tokens": blocks * BLOCK,
                "measured_hit_rate": (h1 - h0) / (q1 - q0),
                "predicted_hit_rate": predicted.hit_tokens / predicted.prompt_tokens,
                "queried_tokens": q1 - q0,
                "prompt_tokens": predicted.prompt_tokens,
            }
        )
        got = rows[-1]
        print(f"   measured {got['measured_hit_rate']:.3f}, replay {got['predicted_hit_rate']:.3f}", file=sys.stderr)
    errs = [abs(r["predicted_hit_rate"] - r["measured_hit_rate"]) / r["measured_hit_rate"] for r in rows]
    return {"requests": len(reqs), "block_tokens": BLOCK, "rows": rows, "mape": float(np.mean(errs))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--max-prompt", type=int, default=4000, help="longest scaled prompt kept (tokens)")
    ap.add_argument("--blocks", type=lambda s: [int(x) for x in s.split(",")], default=[34, 512])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run(args)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['requests']} requests of the conversation trace, scaled to {BLOCK}-token blocks")
    print("| KV cache (blocks) | tokens | vLLM hit rate | replay | error |")
    print("|---|---|---|---|---|")
    for r in out["rows"]:
        err = (r["predicted_hit_rate"] - r["measured_hit_rate"]) / r["measured_hit_rate"]
        print(
            f"| {r['blocks']} | {r['capacity_tokens']:,} | {r['measured_hit_rate']:.3f} "
            f"| {r['predicted_hit_rate']:.3f} | {err:+.1%} |"
        )
    print(f"MAPE {out['mape']:.1%}")


if __name__ == "__main__":
    main()
