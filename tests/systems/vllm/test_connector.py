"""aitrinity's store as a vLLM KV connector, on the real CPU engine (one engine per process, three in all).

Engine 0 runs without the connector: its greedy (and seeded sampled) tokens
are the reference. Engine A runs with the connector over memory + disk +
Redis (write-through) and prefix caching off: cold prompts are computed and
saved, a repeated batch is loaded. Between A and B the test removes one
prompt's blocks from disk, another's from Redis, and corrupts a disk block of
a third. Engine B, a new process with prefix caching on, must load each from
the tier that still holds it, recompute the corrupt block, and keep
answering after Redis is killed. Every answer equals engine 0's.
All three run in float32 (``DTYPE``): on a CPU with AMX, bf16 takes an attention path that decodes wrong tokens
whenever any KV connector is loaded, and the connector refuses it (``connector.amx_hazard``, tested below).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aitrinity.systems.kvcache.keys import BlockKeys, Keyer
from tests.systems.kvcache.conftest import start_redis

DRIVER = Path(__file__).with_name("engine_driver.py")
GREEDY = {"temperature": 0.0, "max_tokens": 8}
DTYPE = "float32"  # bf16 takes vLLM 0.32's AMX attention where the CPU has it, which a connector breaks (amx_hazard)
SAMPLED = {"temperature": 1.0, "top_p": 0.9, "max_tokens": 8, "seed": 7}


def _prompt(seed: int, n: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(3, 2048, n)]


P1, P2, P3, P5 = (_prompt(s, 5 * 128 + 40) for s in (1, 2, 3, 5))
SHARED = _prompt(9, 6 * 128)
BATCH = [SHARED + _prompt(100 + i, 60) for i in range(4)]  # 90%+ shared prefix, batch of 4


def _run(tmp: Path, name: str, plan: dict[str, Any]) -> dict[str, Any]:
    src, out = tmp / f"{name}.plan.json", tmp / f"{name}.out.json"
    src.write_text(json.dumps(plan))
    p = subprocess.run([sys.executable, str(DRIVER), str(src), str(out)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("vllm", reason="the vLLM engine is an extra: pip install -e '.[vllm]'")
    from aitrinity.systems.vllm import transfer_config
    from aitrinity.systems.vllm.tiny import tiny_model

    tmp = tmp_path_factory.mktemp("vllm")
    model = str(tiny_model(tmp / "model"))
    redis = start_redis()
    disk = str(tmp / "disk")
    tiers = [
        {"kind": "memory", "capacity_bytes": 256 << 20},
        {"kind": "disk", "path": disk},
        {"kind": "redis", "url": redis.url},
    ]
    where = {"disk": disk, "redis": redis.url}
    try:
        ref = _run(
            tmp,
            "ref",
            {
                "model": model,
                "dtype": DTYPE,
                "phases": [
                    {"name": "each", "prompts": [P1, P2, P3, P5]},
                    {"name": "batch", "prompts": BATCH},
                    {"name": "sampled", "prompts": [P1], "sampling": SAMPLED},
                ],
            },
        )
        a = _run(
            tmp,
            "a",
            {
                "model": model,
                "dtype": DTYPE,
                "connector": transfer_config(tiers, write="through", engine_id=f"a-{uuid.uuid4()}"),
                "phases": [
                    {"name": p, "prompts": [x], **where} for p, x in (("p1", P1), ("p2", P2), ("p3", P3), ("p5", P5))
                ]
                + [
                    {"name": "batch-cold", "prompts": BATCH},
                    {"name": "batch-warm", "prompts": BATCH},
                    {"name": "sampled", "prompts": [P1], "sampling": SAMPLED},
                ],
            },
        )
        ph = a["phases"]

        def new(name: str, prev: str, tier: str) -> list[str]:
            return sorted(set(ph[name][tier]) - set(ph[prev][tier] if prev else []))

        import redis as redis_client

        r = redis_client.Redis.from_url(redis.url)
        for f in new("p2", "p1", "disk") + new("p5", "p3", "disk"):
            Path(f).unlink()  # P2 and P5 now only in Redis
        for k in new("p1", "", "redis") + new("p3", "p2", "redis"):
            r.delete(k)  # P1 and P3 now only on disk
        p3_disk = new("p3", "p2", "disk")
        corrupt = _corrupt_third_block(p3_disk, Keyer.of("", a["block_size"], **a["key_extra"]).keys(P3))
        b = _run(
            tmp,
            "b",
            {
                "model": model,
                "dtype": DTYPE,
                "prefix_caching": True,
                "connector": transfer_config(tiers, write="through", engine_id=f"b-{uuid.uuid4()}"),
                "phases": [
                    {"name": "p1", "prompts": [P1]},
                    {"name": "p2", "prompts": [P2]},
                    {"name": "p3", "prompts": [P3]},
                    {"name": "p5-redis-killed", "prompts": [P5], "kill_pid": redis.proc.pid},
                    {"name": "p1-again", "prompts": [P1]},
                ],
            },
        )
        return {"ref": ref, "a": a, "b": b, "corrupt": corrupt, "p3_disk": p3_disk}
    finally:
        if redis.proc.poll() is None:
            redis.kill()


def _corrupt_third_block(files: list[str], keys: BlockKeys) -> str:
    """Flip the last payload byte of P3's third block (the disk tier names a file by its block's key)."""
    (target,) = (Path(f) for f in files if Path(f).name == keys.keys[2].hex() + ".kvb")
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    return str(target)


def test_greedy_tokens_equal_without_the_connector(runs: dict[str, Any]) -> None:
    ref, a, b = runs["ref"]["phases"], runs["a"]["phases"], runs["b"]["phases"]
    each = ref["each"]["tokens"]
    assert [a[p]["tokens"][0] for p in ("p1", "p2", "p3", "p5")] == each
    assert a["batch-cold"]["tokens"] == ref["batch"]["tokens"]
    assert a["batch-warm"]["tokens"] == ref["batch"]["tokens"]
    assert [b[p]["tokens"][0] for p in ("p1", "p2", "p3", "p5-redis-killed", "p1-again")] == [
        each[0],
        each[1],
        each[2],
        each[3],
        each[0],
    ]


def test_seeded_sampling_equal_with_a_loaded_prefix(runs: dict[str, Any]) -> None:
    a = runs["a"]["phases"]
    assert a["sampled"]["cached"] == [5 * runs["a"]["block_size"]]  # P1's five full blocks came from the store
    assert a["sampled"]["tokens"] == runs["ref"]["phases"]["sampled"]["tokens"]


def test_a_batch_loads_its_shared_prefix_and_the_counts_agree(runs: dict[str, Any]) -> None:
    a = runs["a"]["phases"]
    block = runs["a"]["block_size"]
    # the first prompt computes the shared prefix; a prompt scheduled later loads the whole blocks the
    # background writer has saved by then -- any leading run of the 6 shared blocks, none past them
    cold = a["batch-cold"]["cached"]
    assert cold[0] == 0
    assert all(c % block == 0 and 0 <= c <= 6 * block for c in cold), cold
    assert a["batch-warm"]["cached"] == [6 * block] * 4  # the 6 shared blocks (each prompt's own tail is < 1 block)
    for prev, now in (("p5", "batch-cold"), ("batch-cold", "batch-warm")):
        loaded = a[now]["stats"]["loaded_tokens"] - a[prev]["stats"]["loaded_tokens"]
        assert loaded == sum(a[now]["cached"])  # vLLM's count and the store's agree


def test_a_second_engine_loads_from_disk_and_from_redis(runs: dict[str, Any]) -> None:
    b = runs["b"]["phases"]
    block = runs["b"]["block_size"]
    assert b["p1"]["cached"] == [5 * block]
    assert b["p1"]["stats"]["loaded_by_tier"] == {"disk": 5 * block}
    assert b["p2"]["cached"] == [5 * block]
    assert b["p2"]["stats"]["loaded_by_tier"] == {"disk": 5 * block, "redis": 5 * block}
    assert b["p2"]["stats"]["loaded_tokens"] == 10 * block


def test_a_corrupt_block_is_recomputed_never_served(runs: dict[str, Any]) -> None:
    b = runs["b"]["phases"]
    block = runs["b"]["block_size"]
    s2, s3 = b["p2"]["stats"], b["p3"]["stats"]
    assert s3["corrupt"] - s2["corrupt"] == 1
    assert s3["loaded_tokens"] - s2["loaded_tokens"] == 2 * block  # blocks 0 and 1; the third failed its checksum
    assert s3["failed_blocks"] - s2["failed_blocks"] == 3  # the corrupt block and the two after it
    assert not Path(runs["corrupt"]).exists()  # the disk tier removed the bad file


def test_redis_killed_mid_run_requests_still_answered(runs: dict[str, Any]) -> None:
    b = runs["b"]["phases"]
    s = b["p5-redis-killed"]["stats"]
    assert s["loaded_tokens"] == b["p3"]["stats"]["loaded_tokens"]  # nothing came from the dead tier
    assert b["p5-redis-killed"]["tokens"][0] == runs["ref"]["phases"]["each"]["tokens"][3]
    # vLLM's own prefix cache (on in engine B) serves the repeat; the connector loads nothing more
    assert b["p1-again"]["cached"] == [5 * runs["b"]["block_size"]]
    assert b["p1-again"]["stats"]["loaded_tokens"] == s["loaded_tokens"]


def test_write_back_blocks_reach_disk_when_the_engine_stops(tmp_path: Path) -> None:
    """Write-back keeps saved blocks in the worker's memory tier (the disk is empty while the engine runs, once the
    asynchronous writer has drained); when the engine shuts down, the connector copies every one of them down, so
    a server that stops loses nothing it cached."""
    pytest.importorskip("vllm", reason="the vLLM engine is an extra: pip install -e '.[vllm]'")
    from aitrinity.systems.vllm import transfer_config
    from aitrinity.systems.vllm.tiny import tiny_model

    disk = tmp_path / "disk"
    tiers = [{"kind": "memory", "capacity_bytes": 256 << 20}, {"kind": "disk", "path": str(disk)}]
    run = _run(
        tmp_path,
        "wb",
        {
            "model": str(tiny_model(tmp_path / "model")),
            "dtype": DTYPE,
            "connector": transfer_config(tiers, write="back", engine_id=f"wb-{uuid.uuid4()}"),
            "phases": [{"name": "p1", "prompts": [P1, P2], "disk": str(disk)}],
        },
    )
    p1 = run["phases"]["p1"]
    assert p1["stats"]["saved_blocks"] == 10 and p1["stats"]["pending_blocks"] == 0  # 5 full blocks each
    assert p1["disk"] == []  # only the memory tier held them while the engine ran
    keys = Keyer.of("", run["block_size"], **run["key_extra"])
    on_disk = {p.stem for p in disk.rglob("*.kvb")}
    assert on_disk == {k.hex() for prompt in (P1, P2) for k in keys.keys(prompt).keys}


def test_the_connector_refuses_the_bf16_amx_engine_that_decodes_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.32's AMX attention (bf16 KV, a block a multiple of 32, a CPU with AMX tiles) decodes wrong tokens with
    any connector loaded; the worker refuses to start there, and only there."""
    import torch

    from aitrinity.systems.vllm.connector import amx_hazard

    bf16 = {"layer.0": torch.zeros(4, 2, 128, 16, dtype=torch.bfloat16)}
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    why = amx_hazard(bf16, 128)
    assert why is not None and "--dtype float32" in why
    assert amx_hazard({"layer.0": torch.zeros(4, 2, 128, 16)}, 128) is None  # float32: the AVX-512 path
    assert amx_hazard(bf16, 16) is None  # a block AMX does not take
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert amx_hazard(bf16, 128) is None
