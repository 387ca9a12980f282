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

from aitrinity.catalog.traces import load_link_trace
from aitrinity.cost.edge import Choices
from aitrinity.systems.split import digits
from aitrinity.systems.split.device import (
    AdaptiveSplit,
    SplitDevice,
    calibrate_link,
    calibrated_options,
    node_times,
    stream,
)
from aitrinity.systems.split.launch import server_process
from aitrinity.systems.split.shaper import TokenBucket, constant


@dataclass(frozen=True)
class DemoConfig:
    policies: list[str] = field(default_factory=lambda: ["adaptive"])
    """``adaptive``, ``local``, ``SPLIT:CODEC`` (``0:raw``: ship the frame) or ``all`` (every allowed static
    choice); each runs in turn."""
    frames: int = 200
    fps: float | None = 20.0
    gap_s: float = 0.0
    """Without ``fps``: the pause before each frame (the link idles, as between frames at a frame rate)."""
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
    probe_every: int = 5
    """While (nearly) local, probe the link every this many frames (so a recovered link is noticed)."""
    patience: int = 1
    """The Controller switches on the first frame that predicts a gain above its margin: frames are cheap to
    re-plan and a late switch on a collapsing link costs whole frames."""
    link_latency_s: float = 5e-5
    initial_Mbps: float = 10.0
    rounds: int = 1
    """Split each policy's frames into this many rounds, the policies interleaved round by round."""
    calibrate_link: bool = False
    """Fit the link (round trip, bandwidth, token-bucket burst) with probes before streaming."""


def _rate(cfg: DemoConfig) -> Callable[[float], float] | None:
    if cfg.trace:
        lt = load_link_trace(cfg.trace)
        return lambda t: lt.at(t * cfg.trace_speedup)
    if cfg.rate_Mbps:
        return constant(cfg.rate_Mbps * 1e6 / 8)
    return None


def _choices(
    cfg: DemoConfig, nodes: Any, xte: Any, yte: Any, progress: Callable[[str], None]
) -> tuple[dict[str, float], Choices]:
    """The accuracy of every split x codec on the test frames, and the choices it allows: each one's drop against
    running the whole network on the device, within ``cfg.max_accuracy_drop``."""
    progress("accuracy per split x codec on the 450 test frames")
    acc = digits.accuracy_table(nodes, xte, yte, cfg.codecs)
    base = acc[f"{len(nodes)}:local"]
    choices = Choices(
        codecs=tuple(cfg.codecs),
        accuracy_drop={k: base - v for k, v in acc.items()},
        max_accuracy_drop=cfg.max_accuracy_drop,
    )
    return acc, choices


def run_demo(cfg: DemoConfig, progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    torch.set_num_threads(1)  # one core for the device, one for the server
    if cfg.weights:
        table, nodes = digits.load(cfg.weights)
    else:
        progress(f"training the digits CNN ({cfg.epochs} epochs)")
        table, nodes = digits.train(cfg.epochs, cfg.seed)
    _, _, xte, yte = digits.frames(cfg.seed)
    acc, choices = _choices(cfg, nodes, xte, yte, progress)
    progress("calibrating node times")
    server_s = node_times(nodes, table, gap_s=1 / cfg.fps if cfg.fps else max(cfg.gap_s, 0.01))
    device_s = [t * cfg.slowdown for t in server_s]
    reps = -(-cfg.frames // len(xte))
    frames = (list(xte) * reps)[: cfg.frames]
    labels = (list(yte) * reps)[: cfg.frames]
    rate_Bps = (cfg.rate_Mbps or cfg.initial_Mbps) * 1e6 / 8
    link: dict[str, Any] = {"bandwidth_Bps": rate_Bps, "latency_s": cfg.link_latency_s, "burst_bytes": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        weights = cfg.weights or str(Path(tmp) / "digits.safetensors")
        if not cfg.weights:
            digits.save(nodes, weights)
        with server_process(weights) as (proc, port):
            if cfg.calibrate_link:
                progress("calibrating the link with probes")
                link = _probe_link(cfg, table, nodes, port)
            predicted = calibrated_options(
                table, device_s, server_s, link["bandwidth_Bps"], link["latency_s"], choices, link["burst_bytes"]
            )
            policies = [p for p in cfg.policies if p != "all"]
            if "all" in cfg.policies:
                policies += [_policy(o) for o in predicted if o.allowed]
            shared = None if cfg.kill_server_at is not None else (proc, port)
            run_ctx = _Run(cfg, table, nodes, weights, choices, device_s, server_s, link, progress)
            runs = _interleaved(run_ctx, policies, frames, labels, shared, predicted)
            log = _drain(proc)
    return {
        "config": asdict(cfg),
        "emulation": f"device {cfg.slowdown:g}x slower than this CPU (it waits {cfg.slowdown - 1:g}x the time its "
        "nodes took); server at this CPU's speed; one torch thread each",
        "accuracy": acc,
        "node_seconds": {"device": device_s, "server": server_s},
        "link": link,
        "predicted": [
            {
                "policy": _policy(o),
                "choice": o.label,
                "latency_s": o.latency_s,
                "uplink_bytes": o.uplink_bytes,
                "allowed": o.allowed,
                "why_not": o.why_not,
            }
            for o in predicted
        ],
        "runs": runs,
        "server_log": log[-50:],
    }


def _probe_link(cfg: DemoConfig, table: Any, nodes: Any, port: int) -> dict[str, Any]:
    """The link as probes of 1-32 KiB measure it (through the demo's pacer, if any)."""
    pacer = _rate(cfg)
    dev = SplitDevice(table, nodes, ("127.0.0.1", port), TokenBucket(pacer) if pacer else None)
    fit = calibrate_link(dev, [1024, 2048, 4096, 8192, 16384, 32768])
    if dev.sock is not None:
        dev.sock.close()
    return {
        "bandwidth_Bps": fit.bandwidth_Bps,
        "latency_s": fit.base_rtt_s / 2,
        "burst_bytes": fit.burst_bytes,
        "probes": fit.samples,
    }


def _interleaved(
    ctx: _Run, policies: list[str], frames: list[Any], labels: list[Any], shared: Any, predicted: list[Any]
) -> list[dict[str, Any]]:
    """Every policy's run over the frames, in ``cfg.rounds`` interleaved parts (so a slow spell of the machine hits
    every policy alike), merged, with the latency the cost model predicted for it."""
    rounds = max(1, min(ctx.cfg.rounds, len(frames)))
    parts: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    for r in range(rounds):
        lo, hi = r * len(frames) // rounds, (r + 1) * len(frames) // rounds
        for policy in policies:
            parts[policy].append(_run_one(ctx, policy, frames[lo:hi], labels[lo:hi], shared))
    runs = []
    for policy in policies:
        run = _merge(parts[policy])
        pred = next((o for o in predicted if _policy(o) == policy), None)
        run["predicted_latency_s"] = pred.latency_s if pred else None
        runs.append(run)
    return runs


def _policy(o: Any) -> str:
    """The static policy string that runs option ``o``."""
    return "local" if o.uplink_bytes == 0 else f"{o.split}:{o.codec}"


@dataclass(frozen=True)
class _Run:
    """What every policy's stream shares: the model, calibration, link estimate and the way to report."""

    cfg: DemoConfig
    table: Any
    nodes: Any
    weights: str
    choices: Choices
    device_s: list[float]
    server_s: list[float]
    link: dict[str, Any]
    progress: Callable[[str], None]


def _run_one(
    run: _Run, policy: str, frames: list[Any], labels: list[Any], shared: tuple[Any, int] | None
) -> dict[str, Any]:
    """One policy over ``frames``: on the shared server, or on a server of its own (when it will be killed)."""
    run.progress(f"streaming {len(frames)} frames, policy {policy}")
    if shared is None:
        with server_process(run.weights) as (proc, port):
            out = _stream(run, policy, frames, labels, proc, port)
            out["server_log"] = _drain(proc)[-20:]
            return out
    return _stream(run, policy, frames, labels, *shared)


def _stream(run: _Run, policy: str, frames: list[Any], labels: list[Any], proc: Any, port: int) -> dict[str, Any]:
    cfg = run.cfg
    rate = _rate(cfg)
    device = SplitDevice(run.table, run.nodes, ("127.0.0.1", port), TokenBucket(rate) if rate else None, cfg.slowdown)
    pol: str | AdaptiveSplit = policy
    if policy == "adaptive":
        pol = AdaptiveSplit(
            run.table,
            run.device_s,
            run.server_s,
            run.choices,
            run.link["bandwidth_Bps"],
            base_rtt_s=2 * run.link["latency_s"],
            patience=cfg.patience,
        )

    def on_frame(i: int, _r: Any) -> None:
        if cfg.kill_server_at is not None and i + 1 == cfg.kill_server_at:
            proc.kill()
            run.progress(f"killed the server after frame {i}")

    res = stream(
        device,
        frames,
        labels,
        pol,
        cfg.fps,
        period=cfg.period,
        probe_every=cfg.probe_every,
        on_frame=on_frame,
        gap_s=cfg.gap_s,
    )
    if device.sock is not None:
        device.sock.close()
    return {
        "policy": policy,
        "frames": res.frames,
        "mean_latency_s": res.mean_latency_s,
        "p95_latency_s": res.p95_latency_s,
        "accuracy": res.accuracy,
        "fell_back": res.fell_back,
        "bytes_sent": device.bytes_sent,
        "choices": _counts(f"{r.split}:{r.codec}" for r in res.records),
        "decisions": res.decisions,
        "link_errors": res.errors[:20],
        "latency_s": [r.latency_s for r in res.records],
    }


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One policy's rounds as one run."""
    if len(parts) == 1:
        return parts[0]
    lat = [x for p in parts for x in p["latency_s"]]
    order = sorted(lat)
    choices: dict[str, int] = {}
    for p in parts:
        for k, v in p["choices"].items():
            choices[k] = choices.get(k, 0) + v
    n = len(lat)
    return {
        "policy": parts[0]["policy"],
        "frames": n,
        "mean_latency_s": sum(lat) / n,
        "p95_latency_s": order[min(n - 1, int(0.95 * n))],
        "accuracy": sum(p["accuracy"] * p["frames"] for p in parts) / n,
        "fell_back": sum(p["fell_back"] for p in parts),
        "bytes_sent": sum(p["bytes_sent"] for p in parts),
        "choices": choices,
        "decisions": [d for p in parts for d in p["decisions"]],
        "link_errors": [e for p in parts for e in p["link_errors"]][:20],
        "latency_s": lat,
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
