"""Measured vs predicted on a real vLLM: TTFT and TPOT at fixed concurrency, the estimate and the simulator
against vLLM's OpenAI server on this machine (issue 23, item 2).

The protocol is that of the measured GPU runs (``trinity validate --serving``) and of ``vllm bench serve``
at a fixed concurrency: ``c`` clients start together, each sends a request of ``isl`` random prompt tokens
for exactly ``osl`` output tokens (``ignore_eos``) and sends its next one when it completes, ``--rounds``
requests per client; TTFT is the first streamed chunk after sending, TPOT the rest of the request over its
other tokens, both averaged over the requests. Prefix caching is off (random prompts would not hit).

What is measured, and in what order:

1. **The machine** (``trinity calibrate --threads T``, or ``--profile FILE``): GEMM FLOP/s per dtype and
   size, memory and weight-streaming bandwidth, per-operator overhead -- with ``T`` the OpenMP threads
   vLLM's CPU worker runs on (it binds one per core it is given and reserves the others for its own
   processes), so the profile is the machine as the engine sees it.
2. **The engine's host time** on a probe model (1 layer, hidden 64: its kernels take microseconds), not on
   the model that is predicted: the time per step outside the kernels (scheduler, sampling, the hand-off
   between vLLM's processes) at 1 and at ``max(c)`` sequences -- a fixed part and a part per sequence --
   and the time per request before its first step (HTTP, tokenization). These replace the host-time
   constants of the GPU-fitted ``vllm`` engine profile; its scheduling weights (``prefill_interference``,
   ``prefill_steps``, ``batch_wait``, fitted on GPU runs whose clients drift apart) give way to lock-step waves
   (``EngineProfile.lockstep``): equal lengths on an engine without jitter keep the clients together.
3. **The grid** on the predicted model (``--layers`` x ``--hidden``, random bf16 weights), every
   ``c`` x ``isl`` x ``osl``.

Predictions: ``cost.concurrency.steady_state`` (what ``trinity diagnose`` and the serving planner price)
and ``sim.serving.simulate_closed_loop`` (the same operator model, iteration by iteration, with the
server's token budget), both on the calibrated profile's roofline kernels. Nothing is fitted on the grid.
Beside them, what ``trinity watch --device PROFILE`` would price for each point (``watch`` in ``--json``): the
same pricer with what ``watch`` knows -- the profile as calibrated and the GPU-fitted ``vllm`` engine profile,
neither the probed host time nor the bf16 weight-streaming figure.

    python benchmarks/bench_vllm.py                 # calibrate, probe, grid; 5-8 minutes
    python benchmarks/bench_vllm.py --quick         # a 2 x 2 x 1 grid, quick calibration
    python benchmarks/bench_vllm.py --profile me.yaml --json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from aitrinity import catalog
from aitrinity.catalog.hf import from_hf_config
from aitrinity.cost.concurrency import EngineProfile, profile, steady_state
from aitrinity.cost.kernels import Kernels, roofline
from aitrinity.cost.operators import Layout, StepShape, step_times
from aitrinity.cost.params import count
from aitrinity.sim.serving import ClosedLoop, OperatorStep, for_device, scheduling, simulate_closed_loop
from aitrinity.spec.hardware import DeviceSpec
from aitrinity.spec.model import ModelSpec
from aitrinity.systems.vllm.server import Completion, Server, closed_loop
from aitrinity.systems.vllm.tiny import tiny_model

VOCAB = 2048
TOKEN_BUDGET = 2048
"""``--max-num-batched-tokens`` of every server (the simulator's token budget)."""
KV_SPACE_GIB = 4


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def serve(model: Path, log: Path, max_seqs: int) -> Server:
    args = ["--max-model-len", "4096", "--enforce-eager", "--seed", "0", "--no-enable-prefix-caching"]
    args += ["--max-num-batched-tokens", str(TOKEN_BUDGET), "--max-num-seqs", str(max_seqs)]
    args += ["--disable-log-stats"]
    return Server(model, log, args, env={"VLLM_CPU_KVCACHE_SPACE": str(KV_SPACE_GIB)})


@contextlib.contextmanager
def off_the_worker(srv: Server) -> Iterator[list[int]]:
    """Run this process's client threads on the cores vLLM reserves for its other processes, never on the core its
    model worker's OpenMP thread is bound to (the worker logs ``core ids=[...]``): a client left to float takes
    turns on the worker's core while it streams and parses ``c`` responses, and the engine then runs slower than
    the machine that was calibrated. Yields the client's cores (all of them when the log names none)."""
    found = re.search(r"local_rank=0, core ids=\[([\d, ]+)\]", srv.log.read_text())
    allowed = os.sched_getaffinity(0)
    free = allowed - ({int(x) for x in found.group(1).split(",")} if found else set())
    if not free:
        yield sorted(allowed)
        return
    os.sched_setaffinity(0, free)
    try:
        yield sorted(free)
    finally:
        os.sched_setaffinity(0, allowed)


def run_point(srv: Server, c: int, isl: int, osl: int, rounds: int, seed: int) -> list[Completion]:
    """``c`` closed-loop clients, ``rounds`` requests of ``isl`` random tokens each, all starting together."""
    rng = np.random.default_rng(seed)
    return closed_loop(
        srv, [[[int(x) for x in rng.integers(3, VOCAB, isl)] for _ in range(rounds)] for _ in range(c)], osl
    )


def worker_threads() -> int:
    """The OpenMP threads vLLM's CPU worker gets by default: one per core, one core reserved when it has
    more than one (``VLLM_CPU_OMP_THREADS_BIND=auto``)."""
    n = len(os.sched_getaffinity(0))
    return max(n - 1, 1)


# ------------------------------------------------------------------ the engine's host time


@dataclasses.dataclass(frozen=True)
class HostTimes:
    step_s: float
    """Per step, whatever the batch."""
    per_sequence_s: float
    """Per sequence in the step."""
    request_s: float
    """Per request, before its first step."""
    probe: dict[str, float]
    """What was measured on the probe model (seconds)."""


def kernel_step(m: ModelSpec, k: Kernels, lay: Layout, decode: float, ctx: float, plen: float = 0.0) -> float:
    """The kernels of one step (no host time): ``decode`` sequences, plus one prompt of ``plen`` tokens."""
    shape = StepShape(decode, ctx, 1.0 if plen else 0.0, max(plen, 1.0), 0.0)
    return float(step_times(m, k, lay, shape, 0.0).total)


def probe_host_times(work: Path, k: Kernels, c_max: int, requests: int = 6) -> HostTimes:
    """Host time per step (fixed and per sequence) and per request, on a model whose kernels are negligible:
    the median over ``requests`` requests at one sequence and at ``c_max``."""
    path = tiny_model(work / "probe", layers=1, hidden=64, heads=1, kv_heads=1, intermediate=128, vocab=VOCAB)
    m = from_hf_config(json.loads((path / "config.json").read_text()), "probe")
    lay = Layout(engine="vllm")
    isl, osl = 32, 128
    with serve(path, work / "probe.log", max(c_max, 1)) as srv, off_the_worker(srv):
        run_point(srv, 1, isl, 8, 1, seed=99)  # warm-up
        one = run_point(srv, 1, isl, osl, requests, seed=100)
        many = run_point(srv, c_max, isl, osl, max(requests // c_max, 1), seed=101) if c_max > 1 else one
    ctx = isl + osl / 2
    tpot1 = statistics.median(x.tpot_s for x in one)
    tpotn = statistics.median(x.tpot_s for x in many)
    ttft1 = statistics.median(x.ttft_s for x in one)
    host1 = tpot1 - kernel_step(m, k, lay, 1, ctx)
    hostn = tpotn - kernel_step(m, k, lay, c_max, ctx)
    per_seq = max((hostn - host1) / (c_max - 1), 0.0) if c_max > 1 else 0.0
    step = max(host1 - per_seq, 0.0)
    first = kernel_step(m, k, lay, 0, isl, isl) + step + per_seq
    return HostTimes(
        step,
        per_seq,
        max(ttft1 - first, 0.0),
        {"tpot_c1": tpot1, f"tpot_c{c_max}": tpotn, "ttft_c1": ttft1},
    )


def host_line(h: HostTimes) -> str:
    return (
        f"{h.step_s * 1e3:.2f} ms per step + {h.per_sequence_s * 1e3:.3f} ms per sequence, "
        f"{h.request_s * 1e3:.1f} ms per request"
    )


# ------------------------------------------------------------------ predictions


def engine_profile(host: HostTimes) -> EngineProfile:
    """vLLM with the host times measured here, in lock-step waves: the protocol's requests have exactly equal
    lengths (``ignore_eos``) and the CPU engine adds no jitter of its own, so the clients that start together
    stay together -- what the simulator does with no output spread (``cost.concurrency``'s module doc; the
    GPU-fitted scheduling weights describe clients that drift apart and are not read)."""
    return dataclasses.replace(
        profile("vllm"),
        step_overhead_s=host.step_s,
        sequence_overhead_s=host.per_sequence_s,
        request_overhead_s=host.request_s,
        lockstep=True,
        token_budget=float(TOKEN_BUDGET),
    )


def served_bf16(dev: DeviceSpec) -> DeviceSpec:
    """The profile as a bf16 model's decode sees it (:func:`aitrinity.systems.calibrate.as_served`)."""
    from aitrinity.systems.calibrate import as_served

    if not any(x.quantity == "weight streaming bf16" for x in dev.measured):
        raise SystemExit("the profile has no 'weight streaming bf16' measurement: calibrate again (with torch)")
    return as_served(dev, "bf16")


def predict(
    m: ModelSpec, dev: DeviceSpec, eng: EngineProfile, c: int, isl: int, osl: int, rounds: int
) -> dict[str, float]:
    """TTFT and TPOT of one grid point on ``dev``'s roofline: the analytic steady state, and the simulator with
    the output spread this protocol has (none: every request yields exactly ``osl`` tokens, checked) and with
    the one fitted on the GPU runs (which stands in for whatever desynchronised those clients)."""
    k = roofline(dev)
    lay = Layout(engine="vllm")
    ss = steady_state(m, k, lay, c, isl, osl, engine=eng)
    s = scheduling("vllm")
    cfg = for_device(
        dev,
        1,
        memory_capacity_bytes=KV_SPACE_GIB * 2**30 + 2 * count(m).total,
        token_budget=TOKEN_BUDGET,
        mixed_batches=s.mixed_batches,
        first_token_lag=s.first_token_lag,
        max_batch=c,
        step_time=OperatorStep(m, k, lay, eng.step_overhead_s, eng.sequence_overhead_s),
    )
    out = {"ttft_analytic_s": float(ss.ttft_s), "tpot_analytic_s": float(ss.tpot_s)}
    for name, spread in (("sim", 0.0), ("sim_gpu_spread", s.output_spread_tokens)):
        sim = simulate_closed_loop(m, cfg, ClosedLoop(c, isl, osl, c * rounds, eng.request_overhead_s, spread))
        out[f"ttft_{name}_s"], out[f"tpot_{name}_s"] = sim.ttft_s.mean, sim.tpot_s.mean
    return out


def watch_prices(m: ModelSpec, record: dict[str, Any]) -> list[dict[str, float]]:
    """What ``trinity watch --device PROFILE`` prices for each grid point (:mod:`aitrinity.systems.vllm.priced`:
    ``diagnose``'s pricer, the GPU-fitted ``vllm`` engine profile, the profile as calibrated -- no host-time probe,
    no bf16 weight-streaming figure): the point's measured load -- ``c`` clients, ``isl`` -> ``osl`` -- priced."""
    import yaml

    from aitrinity.systems.vllm.priced import Load, estimate, served

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(record["device"], f)
    try:
        s = served(m, f.name, dtype="bf16")
        out = []
        for r in record["rows"]:
            load = Load(r["requests"], r["c"], r["isl"], r["osl"], 0.0, r["ttft_s"], r["tpot_s"])
            sv = estimate(s, load).serving
            assert sv is not None
            out.append({"ttft_watch_s": sv.ttft_s, "tpot_watch_s": sv.tpot_s})
        return out
    finally:
        os.unlink(f.name)


def mape(pred: list[float], meas: list[float]) -> float:
    return float(np.mean([abs(p - x) / x for p, x in zip(pred, meas, strict=True)]))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Calibrate (or load the profile), probe the engine's host time, run the grid: measurements only."""
    work = Path(tempfile.mkdtemp(prefix="bench-vllm-grid-"))
    threads = args.threads or worker_threads()
    if args.profile:
        dev = catalog.device(args.profile)
        say(f"profile: {args.profile}")
    else:
        from aitrinity.systems.calibrate import calibrate

        say(f"calibrating this machine on {threads} thread(s) ...")
        dev = calibrate(quick=args.quick, threads=threads, progress=lambda s: say(f"  measuring {s}"))
    cs, isls, osls = args.c, args.isl, args.osl
    say("probing the engine's host time (1-layer, 64-wide model) ...")
    host = probe_host_times(work, roofline(dev), max(cs))
    say(f"  {host_line(host)}")
    path = tiny_model(
        work / "model",
        layers=args.layers,
        hidden=args.hidden,
        heads=args.hidden // 64,
        kv_heads=max(args.hidden // 256, 1),
        intermediate=int(args.hidden * 2.75),
        vocab=VOCAB,
    )
    rows: list[dict[str, Any]] = []
    grid = [(c, i, o) for i in isls for o in osls for c in cs]
    with serve(path, work / "server.log", max(cs)) as srv, off_the_worker(srv) as client_cores:
        say(f"server ready in {srv.start_s:.0f} s; {len(grid)} points; the clients on cores {client_cores}")
        run_point(srv, 1, min(isls), 8, 1, seed=1)  # warm-up
        for n, (c, isl, osl) in enumerate(grid, 1):
            t0 = time.perf_counter()
            got = run_point(srv, c, isl, osl, args.rounds, seed=1000 + n)
            rows.append(
                {
                    "c": c,
                    "isl": isl,
                    "osl": osl,
                    "requests": len(got),
                    "ttft_s": statistics.mean(x.ttft_s for x in got),
                    "tpot_s": statistics.mean(x.tpot_s for x in got),
                }
            )
            say(
                f"  [{n}/{len(grid)}] c={c} isl={isl} osl={osl}: TTFT {rows[-1]['ttft_s'] * 1e3:.0f} ms, "
                f"TPOT {rows[-1]['tpot_s'] * 1e3:.1f} ms [{time.perf_counter() - t0:.0f} s]"
            )
    return {
        "model_config": json.loads((path / "config.json").read_text()),
        "device": dev.model_dump(mode="json"),
        "threads": threads,
        "client_cores": client_cores,
        "host": dataclasses.asdict(host),
        "grid": {"c": cs, "isl": isls, "osl": osls, "rounds": args.rounds, "token_budget": TOKEN_BUDGET},
        "rows": rows,
    }


def price(record: dict[str, Any]) -> dict[str, Any]:
    """Add the estimate's and the simulator's TTFT and TPOT to every measured row, and the MAPEs."""
    cfg = record["model_config"]
    m = from_hf_config(cfg, f"llama-{cfg['num_hidden_layers']}x{cfg['hidden_size']}")
    dev = served_bf16(DeviceSpec.model_validate(record["device"]))
    eng = engine_profile(HostTimes(**record["host"]))
    rounds = record["grid"]["rounds"]
    rows = [{**r, **predict(m, dev, eng, r["c"], r["isl"], r["osl"], rounds)} for r in record["rows"]]
    rows = [{**r, **w} for r, w in zip(rows, watch_prices(m, record), strict=True)]
    meas_ttft, meas_tpot = [r["ttft_s"] for r in rows], [r["tpot_s"] for r in rows]
    return {
        **record,
        "params": count(m).total,
        "engine_profile": dataclasses.asdict(eng),
        "rows": rows,
        "mape": {
            "ttft_analytic": mape([r["ttft_analytic_s"] for r in rows], meas_ttft),
            "tpot_analytic": mape([r["tpot_analytic_s"] for r in rows], meas_tpot),
            "ttft_sim": mape([r["ttft_sim_s"] for r in rows], meas_ttft),
            "tpot_sim": mape([r["tpot_sim_s"] for r in rows], meas_tpot),
            "ttft_sim_gpu_spread": mape([r["ttft_sim_gpu_spread_s"] for r in rows], meas_ttft),
            "tpot_sim_gpu_spread": mape([r["tpot_sim_gpu_spread_s"] for r in rows], meas_tpot),
            "ttft_watch": mape([r["ttft_watch_s"] for r in rows], meas_ttft),
            "tpot_watch": mape([r["tpot_watch_s"] for r in rows], meas_tpot),
        },
    }


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", help="a device profile from trinity calibrate (default: calibrate now)")
    ap.add_argument("--threads", type=int, help="threads to calibrate on (default: what vLLM's worker gets)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--c", type=_ints, default=[1, 4, 8], help="concurrencies (default 1,4,8)")
    ap.add_argument("--isl", type=_ints, default=[128, 512], help="prompt lengths (default 128,512)")
    ap.add_argument("--osl", type=_ints, default=[32, 128], help="output lengths (default 32,128)")
    ap.add_argument("--rounds", type=int, default=2, help="requests per client per point (default 2)")
    ap.add_argument("--quick", action="store_true", help="quick calibration, c 1,4, isl 128,512, osl 32")
    ap.add_argument("--measured", metavar="FILE", help="re-price an earlier run's --json output (no engine)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.c, args.osl = [1, 4], [32]
    out = price(json.loads(Path(args.measured).read_text()) if args.measured else measure(args))
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"profile: {out['device']['source']}")
    print(f"engine host time (probe model): {host_line(HostTimes(**out['host']))}")
    cols = ("", "analytic", "sim", "sim_gpu_spread")
    head = ("measured", "estimate", "sim", "sim, GPU spread")
    print(f"| c | isl | osl | {' | '.join('TTFT ' + h for h in head)} | {' | '.join('TPOT ' + h for h in head)} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out["rows"]:
        ttft = " | ".join(f"{r['ttft_' + c + '_s' if c else 'ttft_s'] * 1e3:.0f} ms" for c in cols)
        tpot = " | ".join(f"{r['tpot_' + c + '_s' if c else 'tpot_s'] * 1e3:.1f} ms" for c in cols)
        print(f"| {r['c']} | {r['isl']} | {r['osl']} | {ttft} | {tpot} |")
    mp = out["mape"]
    print(
        f"MAPE: TTFT estimate {mp['ttft_analytic']:.1%}, sim {mp['ttft_sim']:.1%} (GPU spread "
        f"{mp['ttft_sim_gpu_spread']:.1%}); TPOT estimate {mp['tpot_analytic']:.1%}, sim {mp['tpot_sim']:.1%} "
        f"(GPU spread {mp['tpot_sim_gpu_spread']:.1%})"
    )
    print(
        f"trinity watch's pricer (the GPU-fitted vllm engine profile, no probe): TTFT {mp['ttft_watch']:.1%}, "
        f"TPOT {mp['tpot_watch']:.1%}"
    )


if __name__ == "__main__":
    main()
