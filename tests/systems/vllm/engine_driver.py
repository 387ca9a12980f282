"""Runs one vLLM engine through a list of phases and writes what happened as JSON (used by test_connector).

``python engine_driver.py PLAN.json OUT.json``. The engine is vLLM's offline
``LLM`` on the CPU; prompts are token-id lists. After each phase it records the
outputs, vLLM's per-request cached-token counts, the connector worker's
counters (asked over its lookup socket; its key salt once), and -- once the worker's writer has stored the
phase's blocks -- the disk tier's files and the Redis tier's keys, so the test can tamper with exactly one
phase's blocks.
The ``__main__`` guard matters: the engine spawns processes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def _listing(phase: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if phase.get("disk"):
        out["disk"] = sorted(str(p) for p in Path(phase["disk"]).rglob("*.kvb"))
    if phase.get("redis"):
        import redis

        r = redis.Redis.from_url(phase["redis"])
        out["redis"] = sorted(k.decode() for k in r.keys("aitrinity:kv:*"))
    return out


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig

    from aitrinity.systems.vllm.lookup import LookupClient, socket_path

    kw: dict[str, Any] = {}
    tc = plan.get("connector")
    if tc:
        kw["kv_transfer_config"] = KVTransferConfig(**tc)
    t0 = time.perf_counter()
    llm = LLM(
        model=plan["model"],
        max_model_len=4096,
        enforce_eager=True,
        enable_prefix_caching=plan.get("prefix_caching", False),
        # float32 unless the plan says: bf16 takes vLLM 0.32's AMX attention on a CPU with AMX, which decodes wrong
        # tokens with any KV connector loaded (the connector refuses it: connector.amx_hazard)
        dtype=plan.get("dtype", "float32"),
        seed=0,
        **kw,
    )
    block = llm.llm_engine.vllm_config.cache_config.block_size
    result: dict[str, Any] = {"start_s": time.perf_counter() - t0, "block_size": block, "phases": {}}
    client = LookupClient(socket_path(tc["engine_id"])) if tc else None
    if client is not None:
        hello = client.hello()
        result["key_extra"] = hello["extra"] if hello else None  # what the worker salts its block keys with
    for ph in plan["phases"]:
        if ph.get("kill_pid"):
            os.kill(ph["kill_pid"], signal.SIGKILL)
            time.sleep(0.5)
        sp = SamplingParams(**ph.get("sampling", {"temperature": 0.0, "max_tokens": 8}))
        t = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in ph["prompts"]], sp, use_tqdm=False)
        seconds = time.perf_counter() - t
        if client is not None:
            client.drain()  # saves are asynchronous: the phase's blocks are stored before the tiers are listed
        result["phases"][ph["name"]] = {
            "tokens": [list(o.outputs[0].token_ids) for o in outs],
            "cached": [o.num_cached_tokens for o in outs],
            "seconds": seconds,
            "stats": client.stats() if client else None,
            **_listing(ph),
        }
    Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
