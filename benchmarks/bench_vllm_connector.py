"""TTFT through vLLM's OpenAI-compatible server with and without aitrinity's KV connector (issue 23, item 1).

A local Llama (random weights, ``--layers`` x ``--hidden``, word-level tokenizer; nothing downloaded) is
served by the CPU build of vLLM (its OpenAI server, ``python -m vllm.entrypoints.openai.api_server``), one
server at a time on a free loopback port. Prompts are ``--prompt`` tokens, the first ``--shared`` of them
(90% by default) the same for every request, the rest unique; each request streams ``--max-tokens``
tokens and TTFT is the time to the first streamed chunk, seen
by the client. Servers, in order:

- ``no connector``: vLLM with prefix caching off -- every prompt is computed;
- ``vLLM prefix cache``: vLLM's own prefix caching on, no connector (the in-engine reference);
- ``connector (memory)``: the connector over a memory + disk tier (write-through: every saved block goes to
  both), prefix caching off; one cold request first (it computes and saves the shared blocks), then the
  measured ones load them;
- ``connector (disk, new server)``: a new server over the same disk folder, memory empty: its first request
  loads the shared blocks the previous server saved from disk (what vLLM's own cache cannot do across
  restarts), the later ones from memory.

Each server gets its own prompts (the same shared prefix, other unique tails), so no server finds another's
whole prompt saved; the no-connector server also answers every other server's prompts (untimed) and each
server's greedy tokens must equal its answers.

    python benchmarks/bench_vllm_connector.py [--requests 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from aitrinity.systems.vllm import transfer_config
from aitrinity.systems.vllm.lookup import LookupClient, socket_path
from aitrinity.systems.vllm.server import Server
from aitrinity.systems.vllm.tiny import tiny_model


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    model = tiny_model(
        work / "model",
        layers=args.layers,
        hidden=args.hidden,
        heads=args.hidden // 64,
        kv_heads=args.hidden // 256,
        intermediate=int(args.hidden * 2.75),
    )
    rng = np.random.default_rng(0)
    shared = [int(x) for x in rng.integers(3, 2048, args.shared)]
    configs: list[tuple[str, bool, bool, bool]] = [  # name, prefix caching, connector, warm-up request first
        ("no connector", False, False, False),
        ("vLLM prefix cache", True, False, True),
        ("connector (memory)", False, True, True),
        ("connector (disk, new server)", False, True, False),
    ]
    # each server its own prompts (the shared prefix, then unique tails), so that no server finds the blocks
    # of another's whole prompts; the first server answers them all, untimed after its own, for the reference
    sets = [
        [shared + [int(x) for x in rng.integers(3, 2048, args.prompt - args.shared)] for _ in range(args.requests + 1)]
        for _ in configs
    ]
    tiers: list[dict[str, Any]] = [
        {"kind": "memory", "capacity_bytes": 1 << 30},
        {"kind": "disk", "path": str(work / "disk")},
    ]
    rows: list[dict[str, Any]] = []
    reference: list[list[str]] = []
    for i, (name, pc, conn, warm) in enumerate(configs):
        engine = f"bench-{uuid.uuid4()}"
        tc = transfer_config(tiers, write="through", engine_id=engine) if conn else None
        print(f"== {name}: starting the vLLM server ...", file=sys.stderr, flush=True)
        flags = ["--max-model-len", "4096", "--enforce-eager", "--seed", "0", "--dtype", args.dtype]
        flags += ["--enable-prefix-caching" if pc else "--no-enable-prefix-caching"]
        flags += ["--kv-transfer-config", json.dumps(tc)] if tc else []
        srv = Server(model, work / f"{i}.log", flags, env={"VLLM_CPU_KVCACHE_SPACE": "2"})
        try:
            if warm:
                srv.complete(sets[i][0], args.max_tokens)
            ttfts, texts = [], []
            for p in sets[i][1:]:
                got = srv.complete(p, args.max_tokens)
                ttfts.append(got.ttft_s)
                texts.append(got.text)
                print(f"   TTFT {got.ttft_s * 1e3:8.1f} ms", file=sys.stderr, flush=True)
            stats = LookupClient(socket_path(engine)).stats() if conn else None
            if i == 0:
                print("   answering the other servers' prompts for the reference ...", file=sys.stderr, flush=True)
                reference = [texts] + [[srv.complete(p, args.max_tokens).text for p in later[1:]] for later in sets[1:]]
        finally:
            srv.stop()
        rows.append(
            {
                "config": name,
                "start_s": round(srv.start_s, 1),
                "ttft_ms": [round(t * 1e3, 1) for t in ttfts],
                "ttft_median_ms": round(statistics.median(ttfts) * 1e3, 1),
                "same_tokens": texts == reference[i],
                "loaded_by_tier": stats["loaded_by_tier"] if stats else None,
                "prefill_flops_per_s": stats["flops_per_s"] if stats else None,
            }
        )
    base = rows[0]["ttft_median_ms"]
    for r in rows:
        r["speedup"] = round(base / r["ttft_median_ms"], 2)
    return {
        "model": {"layers": args.layers, "hidden": args.hidden},
        "prompt_tokens": args.prompt,
        "shared_tokens": args.shared,
        "requests": args.requests,
        "dtype": args.dtype,
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--shared", type=int, default=1843, help="shared leading tokens (default: 90%% of 2,048)")
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument(
        "--dtype",
        default="bfloat16",
        help="every server's dtype (bfloat16; on a CPU with AMX the connector refuses it: use float32)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not 0 < args.shared < args.prompt:
        ap.error("--shared must be between 0 and --prompt")
    out = run(args)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"prompt {out['prompt_tokens']} tokens, {out['shared_tokens']} shared; {out['requests']} requests each")
    print(f"{'server':30} {'start':>7} {'TTFT median':>12} {'vs none':>8} {'same tokens':>12}  loaded from")
    for r in out["rows"]:
        print(
            f"{r['config']:30} {r['start_s']:6.0f}s {r['ttft_median_ms']:10.1f}ms {r['speedup']:7.2f}x"
            f" {r['same_tokens']!s:>12}  {r['loaded_by_tier'] or '-'}"
        )


if __name__ == "__main__":
    main()
