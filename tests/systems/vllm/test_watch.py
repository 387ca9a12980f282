"""`trinity watch` against a live vLLM server whose load the test changes.

One OpenAI server (CPU engine, a small local Llama, a KV cache of 16 blocks of 128 tokens). A few short
requests leave the cache nearly empty and spend the period on prompt FLOPs: compute binds. Then eight
requests of 700 prompt and 400 output tokens: two of them outgrow the 16 blocks together, the engine
preempts, and KV capacity binds. Each phase is one period, read from the server's counters before and after
it, so the verdict does not depend on how fast this machine runs them. The CLI then watches the idle server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
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
    model = tiny_model(tmp / "model")
    args = ["--max-model-len", "1200", "--enforce-eager", "--no-enable-prefix-caching"]
    args += ["--num-gpu-blocks-override", "16", "--max-num-seqs", "8"]
    with Server(model, tmp / "server.log", args, env={"VLLM_CPU_KVCACHE_SPACE": "1"}) as srv:
        yield srv, model, profile


def test_the_binding_resource_follows_the_load(live) -> None:
    from aitrinity import catalog
    from aitrinity.catalog.hf import from_hf_config
    from aitrinity.systems.vllm.watch import judge, parse_metrics

    srv, model, profile = live
    m = from_hf_config(json.loads((model / "config.json").read_text()), "tiny")
    dev = catalog.device(str(profile))

    def read():
        return parse_metrics(srv.get("/metrics")[1].decode(), time.monotonic())

    before = read()
    _load(srv, clients=2, rounds=3, isl=256, osl=2, seed=1)  # few, short
    light = read()
    _load(srv, clients=8, rounds=1, isl=700, osl=400, seed=2)  # many, long
    heavy = read()
    few, many = judge(before, light, m, dev), judge(light, heavy, m, dev)
    assert few.binds == "compute" and few.preemptions == 0, few
    assert many.binds == "KV capacity" and many.preemptions > 0, many
    assert many.relieve and "KV" in many.relieve[0]


def test_the_cli_reads_the_model_from_the_server_and_prints_a_json_period(live) -> None:
    srv, _, profile = live
    cmd = [sys.executable, "-m", "aitrinity.cli.main", "watch", srv.url, "--device", str(profile)]
    p = subprocess.run(
        [*cmd, "--period", "0.2", "--count", "2", "--json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    periods = [json.loads(x) for x in p.stdout.splitlines()]
    assert len(periods) == 2 and all(v["binds"] == "idle" and v["running"] == 0 for v in periods)


def test_a_url_that_is_not_a_server_is_one_line(tmp_path: Path) -> None:
    from aitrinity.systems.vllm.server import free_port

    p = subprocess.run(
        [sys.executable, "-m", "aitrinity.cli.main", "watch", f"http://127.0.0.1:{free_port()}", "--count", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "reachable vLLM server" in p.stderr and "Traceback" not in p.stderr
