"""A split-inference run end to end: the digits CNN, a server process, a device streaming frames over a link.

Steps: train the CNN here (or load its weights), measure test accuracy per
split x codec (a codec above the accuracy budget is never chosen), calibrate
node times, start the server as a child process, stream test frames at
``fps`` through a static split or the adaptive Controller, over the host
loopback paced by the token bucket (a constant rate or a bandwidth trace), or
over whatever link the process runs on (a shaped namespace). Optionally kill
the server mid-stream.

``python -m aitrinity.systems.split.demo CONFIG.json`` runs one configuration
and prints the result as JSON (the benchmark starts it inside shaped network
namespaces this way).
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from aitrinity.cost.edge import Choices
from aitrinity.systems.split import digits
from aitrinity.systems.split.device import (
    AdaptiveSplit,
    SplitDevice,
    calibrated_options,
    node_times,
    stream,
)
from aitrinity.systems.split.launch import server_process
from aitrinity.systems.split.shaper import TokenBucket, constant
from aitrinity.traces import LinkTrace


@dataclass(frozen=True)
class DemoConfig:
    policies: list[str] = field(default_factory=lambda: ["adaptive"])
    """``adaptive``, ``local`` or ``SPLIT:CODEC`` (``0:raw``: ship the frame); each runs in turn."""
    frames: int = 200
    fps: float | None = 20.0
    rate_Mbps: float | None = None
    """Pace the uplink at this rate (None: no pacing -- the link as it is, e.g. a shaped namespace)."""
    trace: str | None = None
    """A bandwidth trace (time_s, Mbit/s) the pacing follows, time divided by ``trace_speedup``."""
    trace_speedup: float = 10.0
    slowdown: float = 20.0
    codecs: list[str] = field(default_factory=lambda: ["fp32", "fp16", "int8", "int4"])
    max_accuracy_drop: float = 0.01
    kill_server_at: int | None = None
    weights: str | None = None
    epochs: int = 12
    seed: int = 0
    period: int = 1
    patience: int = 2
    link_latency_s: float = 5e-5
    initial_Mbps: float = 10.0


def _rate(cfg: DemoConfig) -> Callable[[float], float] | None:
    if cfg.trace:
        lt = LinkTrace.load(cfg.trace)
        return lambda t: lt.at(t * cfg.trace_speedup)
    if cfg.rate_Mbps:
        return constant(cfg.rate_Mbps * 1e6 / 8)
    return None


def run_demo(cfg: DemoConfig, progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    torch.set_num_threads(1)  # one core for the device, one for the server
    if cfg.weights:
        table, nodes = digits.load(cfg.weights)
    else:
        progress(f"training the digits CNN ({cfg.epochs} epochs)")
        table, nodes = digits.train(cfg.epochs, cfg.seed)
    _, _, xte, yte = digits.frames(cfg.seed)
    progress("accuracy per split x codec on the 450 test frames")
    acc = digits.accuracy_table(nodes, xte, yte, cfg.codecs)
    base = acc[f"{len(nodes)}:local"]
    choices = Choices(
        codecs=tuple(cfg.codecs),
        accuracy_drop={k: base - v for k, v in acc.items()},
        max_accuracy_drop=cfg.max_accuracy_drop,
    )
    progress("calibrating node times")
    server_s = node_times(nodes, table, gap_s=1 / cfg.fps if cfg.fps else 0.01)
    device_s = [t * cfg.slowdown for t in server_s]
    reps = -(-cfg.frames // len(xte))
    frames = (list(xte) * reps)[: cfg.frames]
    labels = (list(yte) * reps)[: cfg.frames]
    with tempfile.TemporaryDirectory() as tmp:
        weights = cfg.weights or str(Path(tmp) / "digits.safetensors")
        if not cfg.weights:
            digits.save(nodes, weights)
        runs = []
        for policy in cfg.policies:
            runs.append(
                _run_one(cfg, policy, table, nodes, weights, frames, labels, choices, device_s, server_s, progress)
            )
    init = cfg.rate_Mbps or cfg.initial_Mbps
    predicted = calibrated_options(table, device_s, server_s, init * 1e6 / 8, cfg.link_latency_s, choices)
    return {
        "config": asdict(cfg),
        "emulation": f"device {cfg.slowdown:g}x slower than this CPU (it waits {cfg.slowdown - 1:g}x the time its "
        "nodes took); server at this CPU's speed; one torch thread each",
        "accuracy": acc,
        "node_seconds": {"device": device_s, "server": server_s},
        "predicted_at_start": [
            {"choice": o.label, "latency_s": o.latency_s, "uplink_bytes": o.uplink_bytes, "allowed": o.allowed}
            for o in predicted
        ],
        "runs": runs,
    }


def _run_one(
    cfg: DemoConfig,
    policy: str,
    table: Any,
    nodes: Any,
    weights: str,
    frames: list[Any],
    labels: list[Any],
    choices: Choices,
    device_s: list[float],
    server_s: list[float],
    progress: Callable[[str], None],
) -> dict[str, Any]:
    progress(f"streaming {len(frames)} frames, policy {policy}")
    rate = _rate(cfg)
    with server_process(weights) as (proc, port):
        device = SplitDevice(table, nodes, ("127.0.0.1", port), TokenBucket(rate) if rate else None, cfg.slowdown)
        pol: str | AdaptiveSplit = policy
        if policy == "adaptive":
            pol = AdaptiveSplit(
                table,
                device_s,
                server_s,
                choices,
                (cfg.rate_Mbps or cfg.initial_Mbps) * 1e6 / 8,
                base_rtt_s=2 * cfg.link_latency_s,
                patience=cfg.patience,
            )

        def on_frame(i: int, _r: Any) -> None:
            if cfg.kill_server_at is not None and i + 1 == cfg.kill_server_at:
                proc.kill()
                progress(f"killed the server after frame {i}")

        res = stream(device, frames, labels, pol, cfg.fps, period=cfg.period, on_frame=on_frame)
        if device.sock is not None:
            device.sock.close()
        log = _drain(proc)
    return {
        "policy": policy,
        "frames": res.frames,
        "results": sum(1 for r in res.records),
        "mean_latency_s": res.mean_latency_s,
        "p95_latency_s": res.p95_latency_s,
        "accuracy": res.accuracy,
        "fell_back": res.fell_back,
        "choices": _counts(f"{r.split}:{r.codec}" for r in res.records),
        "decisions": res.decisions,
        "link_errors": res.errors[:20],
        "server_log": log[-20:],
        "latency_s": [r.latency_s for r in res.records],
    }


def _counts(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in items:
        out[k] = out.get(k, 0) + 1
    return out


def _drain(proc: Any) -> list[str]:
    """The server's stderr lines (its rejection log), after it has been killed."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    out: list[str] = []
    t = threading.Thread(target=lambda: out.extend(proc.stderr.read().splitlines()) if proc.stderr else None)
    t.start()
    t.join(5)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cfg = DemoConfig(**json.loads(Path(args[0]).read_text(encoding="utf-8")))
    print(json.dumps(run_demo(cfg, lambda m: print(f"split demo: {m}", file=sys.stderr, flush=True))))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
