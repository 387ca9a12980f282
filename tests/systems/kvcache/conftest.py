"""A real Redis server on a free loopback port (skipped, with the reason, where redis-server is missing)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass
class RedisServer:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(*extra: str) -> RedisServer:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server not installed (apt-get install redis-server; .ci/run installs it)")
    pytest.importorskip("redis", reason="the redis client is an extra: pip install -e '.[redis]'")
    port = _free_port()
    cmd = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return RedisServer(port, proc)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    srv = start_redis()
    yield srv
    if srv.proc.poll() is None:
        srv.kill()
