"""The OpenAI-server helper: the client's timing arithmetic, and a server that cannot start says so."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import pytest

from aitrinity.systems.vllm.server import Completion, Server, free_port


def test_ttft_and_tpot_as_vllm_bench_serve_defines_them() -> None:
    c = Completion(sent_s=10.0, chunk_s=[10.5, 10.6, 10.8, 11.1], text="w3 w4 w5 w6", tokens=4)
    assert c.ttft_s == pytest.approx(0.5)
    assert c.tpot_s == pytest.approx(0.2)  # (11.1 - 10.5) / 3 tokens after the first
    assert c.latency_s == pytest.approx(1.1)
    assert math.isnan(Completion(0.0, [1.0], "w3", 1).tpot_s)


def test_a_chunk_carrying_several_tokens_still_divides_by_tokens() -> None:
    c = Completion(sent_s=0.0, chunk_s=[1.0, 2.0], text="", tokens=5)
    assert c.tpot_s == pytest.approx(0.25)


def test_free_port_is_bindable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))


def test_a_server_that_exits_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    pytest.importorskip("vllm", reason="the vLLM engine is an extra: pip install -e '.[vllm]'")
    log = tmp_path / "server.log"
    with pytest.raises(RuntimeError, match="exited") as err:
        Server(tmp_path / "no-such-model", log, ["--max-model-len", "256"])
    assert str(log) in str(err.value) and log.stat().st_size > 0
