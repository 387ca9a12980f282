"""`trinity watch` against a live vLLM server whose load the test changes.

One OpenAI server (CPU engine, a small local Llama, a KV cache of 16 blocks of 128 tokens). A few short
requests leave the cache nearly empty and spend the period on prompt FLOPs: compute binds. Then eight
requests of 700 prompt and 400 output tokens: two of them outgrow the 16 blocks together, the engine
preempts, and KV capacity binds. Each phase is one period, read from the server's counters before and after
it, so the verdict does not depend on how fast this machine runs them. The CLI then watches the idle server.
The server runs aitrinity's KV connector (a memory tier): a repeated prompt is loaded from it, and the watch
reports the tier's tokens and read time (``--kv-engine-id``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from aitrinity.systems.vllm.server import Server, closed_loop


def _load(srv: Server, clients: int, rounds: int, isl: int, osl: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    closed_loop(
        srv, [[[int(x) for x in rng.integers(3, 2048, isl)] for _ in range(rounds)] for _ in range(clients)], osl
    )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("vllm", reason="the vLLM engine is an extra: pip install -e '.[vllm]'")
    from aitrinity.systems.calibrate import calibrate
    from aitrinity.systems.vllm.tiny import tiny_model

    tmp = tmp_path_factory.mktemp("watch")
    profile = tmp / "me.yaml"
    import yaml

    profile.write_text(yaml.safe_dump(calibrate(quick=True, name="this-machine").model_dump(mode="json")))
    from aitrinity.systems.vllm import transfer_config

    model = tiny_model(tmp / "model")
    engine = f"watch-{uuid.uuid4()}"
    kv = transfer_config([{"kind": "memory", "capacity_bytes": 64 << 20}], engine_id=engine)
    args = ["--max-model-len", "1200", "--enforce-eager", "--no-enable-prefix-caching", "--dtype", "float32"]
    args += ["--num-gpu-blocks-override", "16", "--max-num-seqs", "8", "--kv-transfer-config", json.dumps(kv)]
    with Server(model, tmp / "server.log", args, env={"VLLM_CPU_KVCACHE_SPACE": "1"}) as srv:
        yield srv, model, profile, engine


def test_the_binding_resource_follows_the_load(live) -> None:
    """Also: each period's closed loop is measured from the finished requests and priced as `trinity diagnose` prices
    it, at the server's own KV pool (16 blocks of 128 tokens, from /metrics: one 1,100-token request whole); the
    Advisor predicts each of the registry's exchanges at the heavy period's load."""
    from aitrinity.catalog.hf import from_hf_config
    from aitrinity.systems.vllm import priced
    from aitrinity.systems.vllm.watch import judge, parse_metrics

    srv, model, profile, _ = live
    m = from_hf_config(json.loads((model / "config.json").read_text()), "tiny")

    def read():
        return parse_metrics(srv.get("/metrics")[1].decode(), time.monotonic())

    before = read()
    assert before.kv_pool_tokens == 16 * 128 and before.engines == 1
    served = priced.served(m, str(profile), dtype="fp32", kv_pool_tokens=before.kv_pool_tokens)  # --dtype float32
    _load(srv, clients=2, rounds=3, isl=256, osl=2, seed=1)  # few, short
    light = read()
    _load(srv, clients=8, rounds=1, isl=700, osl=400, seed=2)  # many, long
    heavy = read()
    few, many = judge(before, light, served), judge(light, heavy, served)
    assert few.binds == "compute" and few.preemptions == 0, few
    assert many.binds == "KV capacity" and many.preemptions > 0, many
    assert many.relieve and "KV" in many.relieve[0]
    assert few.load is not None and (few.load.requests, few.load.prompt_tokens, few.load.output_tokens) == (6, 256, 2)
    assert many.load is not None and (many.load.requests, many.load.prompt_tokens) == (8, 700)
    assert many.load.output_tokens == 400 and many.load.ttft_s is not None and many.load.tpot_s is not None
    assert many.expected is not None and many.expected.running == 1  # 2,048 tokens of pool, 1,100 a request
    advisor = priced.Advisor.of(served)
    d = advisor.advise(many.load)
    assert set(d.predicted_s) == set(advisor.plans) and all(0 < t < float("inf") for t in d.predicted_s.values())
    assert d.predicted_s["kv-quantization fp8"] < d.predicted_s["as served"]  # a quarter of the fp32 KV bytes read


def test_the_connectors_tier_is_watched(live) -> None:
    """A prompt sent twice: the second time its four full blocks come from the connector's memory tier, and the
    period between two reads says so (tokens loaded, the worker's read time, a bandwidth)."""
    from aitrinity.systems.vllm.lookup import LookupClient, socket_path
    from aitrinity.systems.vllm.watch import judge, parse_metrics, with_tiers

    srv, _, _, engine = live
    client = LookupClient(socket_path(engine))
    hello = client.hello()
    assert hello is not None and hello["block_tokens"] == 128

    def read():
        stats = client.stats()
        assert stats is not None
        return with_tiers(parse_metrics(srv.get("/metrics")[1].decode(), time.monotonic()), stats, hello)

    prompt = [int(x) for x in np.random.default_rng(7).integers(3, 2048, 4 * 128 + 20)]
    closed_loop(srv, [[prompt]], 2)
    client.drain()  # its blocks are stored before the repeat looks them up
    before = read()
    closed_loop(srv, [[prompt]], 2)
    v = judge(before, read())
    [mem] = [t for t in v.tiers if t.tier == "memory"]
    assert mem.tokens_per_s * v.period_s == pytest.approx(4 * 128)  # a rate times its period: not to the last bit
    assert mem.busy > 0 and mem.read_Bps and mem.read_Bps > 0


def test_the_cli_reads_the_model_from_the_server_and_prints_a_json_period(live) -> None:
    srv, _, profile, engine = live
    cmd = [sys.executable, "-m", "aitrinity.cli.main", "watch", srv.url, "--device", str(profile), "--dtype", "fp32"]
    p = subprocess.run(
        [*cmd, "--period", "0.2", "--count", "2", "--json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    periods = [json.loads(x) for x in p.stdout.splitlines()]
    assert len(periods) == 2 and all(v["binds"] == "idle" and v["running"] == 0 for v in periods)
    assert all(v["load"] is None and v["advice"] is None for v in periods)  # nothing finished: nothing to advise on
    p = subprocess.run(
        [*cmd, "--period", "0.2", "--count", "1", "--json", "--quiet", "--kv-engine-id", engine],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    [period] = [json.loads(x) for x in p.stdout.splitlines()]
    assert [t["tier"] for t in period["tiers"]] == ["memory"] and period["binds"] == "idle"
    bad = subprocess.run([*cmd, "--count", "1", "--kv-engine-id", "no-such-engine"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--kv-engine-id" in bad.stderr


def test_a_url_that_is_not_a_server_is_one_line(tmp_path: Path) -> None:
    from aitrinity.systems.vllm.server import free_port

    p = subprocess.run(
        [sys.executable, "-m", "aitrinity.cli.main", "watch", f"http://127.0.0.1:{free_port()}", "--count", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "reachable vLLM server" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://h:99999", "Port out of range"),
        ("http://a b", "control characters"),
    ],
)
def test_a_malformed_url_is_one_line(url: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    """urllib raises ValueError on a malformed host or port, http.client InvalidURL on a space in the host: each was an
    internal error (the last found by tools/fuzz.py once it fuzzed watch)."""
    from aitrinity.cli.main import main

    assert main(["watch", url, "--count", "1"]) == 2
    err = capsys.readouterr().err
    assert why in err and "internal error" not in err and err.count("\n") == 1


def test_pricing_flags_without_a_device_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """--tp and --dtype only shape what is priced: without --device they would be silently ignored."""
    from aitrinity.cli.main import main

    for flags in (["--tp", "4"], ["--dtype", "fp32"]):
        assert main(["watch", "http://127.0.0.1:9", *flags, "--count", "1"]) == 2
        err = capsys.readouterr().err
        assert flags[0] in err and "--device" in err and err.count("\n") == 1


def test_a_server_that_does_not_speak_http_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def answer() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"SSH-2.0-not-http\r\n\r\n")

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    from aitrinity.cli.main import main

    try:
        assert main(["watch", f"http://127.0.0.1:{port}", "--count", "1"]) == 2
    finally:
        t.join(10)
        srv.close()
    err = capsys.readouterr().err
    assert "BadStatusLine" in err and "internal error" not in err and err.count("\n") == 1
