"""Measure the machine this runs on and write a device profile the catalog accepts.

Every figure is a best-of-N wall-clock measurement on this process's CPU (GEMMs: best of N loops
of 0.1 s each, the rate sustained over a workload-like window):

* matmul FLOP/s per dtype (with torch when installed -- the framework the
  workloads run on -- else numpy for fp64/fp32) for
  GEMMs of ``m`` rows x 1024 x 1024, an efficiency curve over ``m`` fitted as
  ``eff(m) = m / (m + half_rows)`` (the catalog's ``compute_half_rows``);
* memory bandwidth, STREAM-style copy (2 bytes moved per byte) and triad
  ``a = b + s c`` (3 per byte) on arrays far larger than the caches;
* disk sequential write (with fsync) and read (after dropping the file's pages
  with ``posix_fadvise``), on a temporary file;
* weight streaming: the weight bytes/s of a matrix-vector product over a matrix
  far larger than the caches (what a decode step sees);
* loopback TCP throughput between two sockets of this process;
* the fixed cost per operator (a tiny transformer layer's forward / its operators);
* codec throughput: int8 quantization, top-1% selection, zstd and lz4 (when installed).

The profile's peak FLOP/s are the best measured rates, its compute efficiency
1.0 with the fitted ``compute_half_rows`` (fp32's), its memory bandwidth the
better of copy and triad. Its memory efficiency is what a matrix-vector product
streaming a weight matrix larger than the caches achieves relative to that
(``weight_streaming``): the memory traffic the cost model prices is mostly
weights and KV read by matmuls, and on CPUs those reach a fraction of STREAM's
rate.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import platform
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from aitrinity.spec.hardware import DeviceSpec, Efficiency, Measurement

ROWS = (1, 4, 16, 64, 256, 1024)
GEMM_K = 1024


@dataclass(frozen=True)
class Settings:
    repeats: int
    memory_bytes: int
    disk_bytes: int
    tcp_bytes: int
    codec_bytes: int
    window_s: float
    """Length of each GEMM sample loop (``sustained_time``)."""


QUICK = Settings(3, 64 << 20, 64 << 20, 64 << 20, 16 << 20, window_s=0.02)
FULL = Settings(7, 512 << 20, 512 << 20, 512 << 20, 64 << 20, window_s=0.1)


def best_time(fn: Callable[[], Any], repeats: int) -> float:
    """Best wall time of ``repeats`` calls, after one warm-up."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def sustained_time(fn: Callable[[], Any], repeats: int, window_s: float) -> float:
    """Per-call time: best of ``repeats`` loops of ``n`` calls, ``n`` chosen so that a loop lasts ``window_s``.

    The rate sustained over a window like a workload's, not one lucky call: a shared machine's
    GEMM rate swings by tens of percent in bursts.
    """
    fn()
    t0 = time.perf_counter()
    fn()
    n = max(1, round(window_s / max(time.perf_counter() - t0, 1e-9)))

    def loop() -> None:
        for _ in range(n):
            fn()

    return best_time(loop, repeats) / n


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def matmul_curve(dtype: str, repeats: int, window_s: float = 0.1, backend: str = "auto") -> dict[int, float] | None:
    """FLOP/s of (m x K) @ (K x K) for each m in ROWS; None when the dtype is unavailable.

    ``backend``: ``torch`` (the framework the workloads run on; its CPU GEMMs can differ from
    numpy's BLAS by 2x), ``numpy``, or ``auto`` (torch when installed).
    """
    use_torch = backend == "torch" or (backend == "auto" and _has_torch())
    out: dict[int, float] = {}
    if use_torch:
        import torch

        tdt = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        bt = torch.randn(GEMM_K, GEMM_K).to(tdt)
        for m in ROWS:
            at = torch.randn(m, GEMM_K).to(tdt)
            t = sustained_time(functools.partial(torch.matmul, at, bt), repeats, window_s)
            out[m] = 2.0 * m * GEMM_K * GEMM_K / t
        return out
    if dtype not in ("fp64", "fp32"):
        return None
    np_dtype = np.float64 if dtype == "fp64" else np.float32
    b = np.random.default_rng(0).standard_normal((GEMM_K, GEMM_K)).astype(np_dtype)
    for m in ROWS:
        a = np.random.default_rng(1).standard_normal((m, GEMM_K)).astype(np_dtype)
        out[m] = 2.0 * m * GEMM_K * GEMM_K / sustained_time(functools.partial(np.matmul, a, b), repeats, window_s)
    return out


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def fit_half_rows(curve: dict[int, float], min_rows: int = 16) -> tuple[float, float]:
    """(peak, half_rows) for ``rate(m) = peak * m / (m + half_rows)``.

    Least squares on ``1/rate = 1/peak + (half_rows/peak) (1/m)`` over GEMMs of at least
    ``min_rows`` rows (thinner ones are matrix-vector products, bound by memory, not by the curve).
    Degenerate data fall back to the best rate and a flat curve.
    """
    pts = sorted((m, r) for m, r in curve.items() if m >= min_rows)
    if len(pts) >= 2:
        x = np.array([1.0 / m for m, _ in pts])
        y = np.array([1.0 / r for _, r in pts])
        slope, intercept = np.polyfit(x, y, 1)
        if intercept > 0 and slope >= 0:
            return float(1.0 / intercept), float(slope / intercept)
    return max(curve.values()), 0.0


def operator_overhead(repeats: int) -> float:
    """Seconds of fixed cost per operator: a forward of a tiny transformer layer (the reference
    decoder's block, hidden size 32, one token) divided by the operators it launches
    (``OPERATORS_PER_LAYER``). It captures eager dispatch, module calls and the thread-pool
    start of every small GEMM; without torch, a numpy add of 1-element arrays."""
    n = 200
    if _has_torch():
        import torch

        from aitrinity.cost.flops import OPERATORS_PER_LAYER
        from aitrinity.spec.model import ModelSpec
        from aitrinity.systems.torch_models import Block

        tiny = ModelSpec(
            name="tiny",
            source="calibration",
            num_layers=1,
            hidden_size=32,
            num_attention_heads=4,
            num_kv_heads=2,
            intermediate_size=64,
            vocab_size=16,
            max_seq_len=16,
        )
        block, x = Block(tiny), torch.randn(1, 1, 32)

        def run() -> None:
            with torch.no_grad():
                for _ in range(n):
                    block(x)

        return best_time(run, repeats) / (n * OPERATORS_PER_LAYER)
    a, b = np.ones(1), np.ones(1)

    def run_numpy() -> None:
        for _ in range(n):
            np.add(a, b)

    return best_time(run_numpy, repeats) / n


def memory_bandwidth(nbytes: int, repeats: int) -> tuple[float, float]:
    """(copy, triad) bytes/s, STREAM counting (copy moves 2 bytes per byte, triad 3)."""
    n = nbytes // 8
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)
    t_copy = best_time(lambda: np.copyto(a, b), repeats)

    def triad() -> None:
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)

    t_triad = best_time(triad, repeats)
    # numpy's triad makes two passes (a = s c, then a += b): 5 x 8 bytes per element actually move
    return 2.0 * n * 8 / t_copy, 5.0 * n * 8 / t_triad


def weight_streaming(nbytes: int, repeats: int, window_s: float = 0.1, dtype: str = "fp32") -> float:
    """Weight bytes/s a matrix-vector product achieves: (4 x k) @ W^T with W of ``nbytes`` in ``dtype``
    (``fp32``, or ``bf16`` with torch), far beyond the caches.

    A decode step is a chain of such products, so this -- not STREAM's copy -- is the memory bandwidth
    it sees. With torch (``F.linear``, as ``nn.Linear`` calls it) when installed, else numpy (fp32 only).
    CPU GEMM paths differ by dtype (on the project's VM, one thread: fp32 6 GB/s, bf16 11 GB/s), so a
    served bf16 model's decode is priced with the bf16 figure (``benchmarks/bench_vllm.py``).
    """
    k = 2048
    width = {"fp32": 4, "bf16": 2}[dtype]
    n = max(nbytes // (width * k), 1)
    if _has_torch():
        import torch
        import torch.nn.functional as F

        tdt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        w, x = torch.randn(n, k).to(tdt), torch.randn(4, k).to(tdt)
        return n * k * width / sustained_time(functools.partial(F.linear, x, w), repeats, window_s)
    if dtype != "fp32":
        raise ValueError("weight streaming in bf16 needs torch")
    wn = np.random.default_rng(0).standard_normal((n, k)).astype(np.float32)
    xn = np.random.default_rng(1).standard_normal((4, k)).astype(np.float32)
    return n * k * 4 / sustained_time(lambda: xn @ wn.T, repeats, window_s)


def disk_throughput(nbytes: int, repeats: int, directory: str | None = None) -> tuple[float, float]:
    """(sequential write with fsync, sequential read of evicted pages) bytes/s."""
    block = os.urandom(1 << 20)
    writes, reads = [], []
    with tempfile.TemporaryDirectory(dir=directory) as d:
        path = os.path.join(d, "calibrate.bin")
        for _ in range(max(repeats // 2, 1)):
            t0 = time.perf_counter()
            with open(path, "wb") as f:
                for _ in range(nbytes >> 20):
                    f.write(block)
                f.flush()
                os.fsync(f.fileno())
            writes.append(time.perf_counter() - t0)
            fd = os.open(path, os.O_RDONLY)
            try:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                t0 = time.perf_counter()
                while os.read(fd, 8 << 20):
                    pass
                reads.append(time.perf_counter() - t0)
            finally:
                os.close(fd)
    return nbytes / min(writes), nbytes / min(reads)


def loopback_tcp(nbytes: int, repeats: int) -> float:
    """Bytes/s through a TCP connection on 127.0.0.1 between two threads of this process."""
    chunk = b"\0" * (1 << 20)
    best = float("inf")
    for _ in range(max(repeats // 2, 1)):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        received = [0]

        def sink(server: socket.socket = server, received: list[int] = received) -> None:
            conn, _ = server.accept()
            with conn:
                while data := conn.recv(1 << 20):
                    received[0] += len(data)

        thread = threading.Thread(target=sink)
        thread.start()
        client = socket.create_connection(("127.0.0.1", port))
        t0 = time.perf_counter()
        for _ in range(nbytes >> 20):
            client.sendall(chunk)
        client.shutdown(socket.SHUT_WR)
        thread.join()
        best = min(best, time.perf_counter() - t0)
        client.close()
        server.close()
        if received[0] != (nbytes >> 20) << 20:
            raise RuntimeError("loopback transfer lost bytes")
    return nbytes / best


def codecs(nbytes: int, repeats: int) -> dict[str, float]:
    """Input bytes/s of each codec on fp32 gradient-like data."""
    x = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
    out: dict[str, float] = {}

    def int8() -> None:
        scale = float(np.abs(x).max()) / 127.0
        np.round(x / scale).astype(np.int8)

    out["int8 quantize"] = nbytes / best_time(int8, repeats)
    k = max(len(x) // 100, 1)
    out["top-1% select"] = nbytes / best_time(lambda: np.argpartition(np.abs(x), -k)[-k:], repeats)
    raw = x.astype(np.float16).tobytes()
    try:
        import zstandard

        cctx = zstandard.ZstdCompressor(level=1)
        out["zstd-1 compress"] = len(raw) / best_time(lambda: cctx.compress(raw), repeats)
    except ImportError:
        pass
    try:
        import lz4.frame

        out["lz4 compress"] = len(raw) / best_time(lambda: lz4.frame.compress(raw), repeats)
    except ImportError:
        pass
    return out


def calibrate(
    quick: bool = False,
    name: str | None = None,
    tdp_W: float = 100.0,
    progress: Callable[[str], None] | None = None,
    threads: int | None = None,
) -> DeviceSpec:
    """Run every measurement and return the device profile.

    ``threads``: torch's intra-op threads while measuring (default: torch's own choice), to profile the
    machine as an engine that pins its workers to fewer cores sees it (vLLM's CPU worker binds one OpenMP
    thread per core it is given); needs torch. Restored afterwards."""
    if threads is None:
        return _calibrate(quick, name, tdp_W, progress, None)
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    if not _has_torch():
        raise ValueError("calibrating with a thread count needs torch (pip install torch)")
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _calibrate(quick, name, tdp_W, progress, threads)
    finally:
        torch.set_num_threads(before)


Record = Callable[[str, float, str, str], None]
"""Keeps one measurement: quantity, value, unit, method."""


def as_served(dev: DeviceSpec, dtype: str) -> DeviceSpec:
    """A profile as a model whose weights are in ``dtype`` sees it: the memory efficiency from the weight-streaming
    measurement in that dtype where the profile has one (the profile's own is fp32's, and CPU GEMM paths differ by
    dtype: bf16 streamed at about twice fp32's rate on this project's machine); else ``dev`` as it is."""
    quantity = "weight streaming" if dtype == "fp32" else f"weight streaming {dtype}"
    got = [x.value for x in dev.measured if x.quantity == quantity]
    if not got:
        return dev
    eff = dev.efficiency.model_copy(update={"memory": min(got[0] / dev.memory_bandwidth_Bps, 1.0)})
    return dev.model_copy(update={"efficiency": eff})


def _matmuls(s: Settings, say: Callable[[str], None], record: Record) -> tuple[dict[str, float], float]:
    """Each dtype's matmul curve over the row count: the peaks, and fp32's half-rate rows."""
    peaks: dict[str, float] = {}
    half_rows = 0.0
    for dtype in ("fp32", "fp64", "bf16"):
        say(f"matmul {dtype}")
        curve = matmul_curve(dtype, s.repeats, s.window_s)
        if curve is None:
            continue
        lib = "torch" if _has_torch() else "numpy"
        for m, rate in curve.items():
            record(
                f"matmul {dtype} m={m}",
                rate,
                "FLOP/s",
                f"{lib}, best of {s.repeats} loops of {s.window_s:g} s: ({m} x {GEMM_K}) @ ({GEMM_K} x {GEMM_K})",
            )
        peak, half = fit_half_rows(curve)
        peaks[dtype] = peak
        if dtype == "fp32":
            half_rows = half
    return peaks, half_rows


def _memory(s: Settings, record: Record) -> tuple[float, float, float]:
    """Copy and triad bandwidth, and the rate a matmul streams fp32 weights at."""
    mib = s.memory_bytes >> 20
    copy, triad = memory_bandwidth(s.memory_bytes, s.repeats)
    record("memory copy", copy, "B/s", f"numpy copyto of {mib} MiB, 2 bytes per byte")
    record("memory triad", triad, "B/s", f"a = 3 c; a += b on {mib} MiB arrays")
    stream = weight_streaming(s.memory_bytes, s.repeats, s.window_s)
    lib = "torch F.linear" if _has_torch() else "numpy"
    record("weight streaming", stream, "B/s", f"{lib}: (4 x 2048) @ W^T, W fp32 of {mib} MiB")
    if _has_torch():
        record(
            "weight streaming bf16",
            weight_streaming(s.memory_bytes, s.repeats, s.window_s, "bf16"),
            "B/s",
            f"torch F.linear: (4 x 2048) @ W^T, W bf16 of {mib} MiB (not in the profile's memory "
            "efficiency, which is fp32's)",
        )
    return copy, triad, stream


def _io(s: Settings, say: Callable[[str], None], record: Record) -> None:
    """Disk, loopback TCP and the codecs (kept in the profile's measurements)."""
    say("disk")
    write, read = disk_throughput(s.disk_bytes, s.repeats)
    record("disk sequential write", write, "B/s", f"{s.disk_bytes >> 20} MiB in 1 MiB writes + fsync, temp dir")
    record("disk sequential read", read, "B/s", "after posix_fadvise(DONTNEED), 8 MiB reads")
    say("loopback TCP")
    tcp = loopback_tcp(s.tcp_bytes, s.repeats)
    record("loopback TCP", tcp, "B/s", f"{s.tcp_bytes >> 20} MiB over 127.0.0.1 between two threads")
    say("codecs")
    for codec, rate in codecs(s.codec_bytes, s.repeats).items():
        record(f"codec {codec}", rate, "B/s", f"{s.codec_bytes >> 20} MiB of fp32 normal values (input bytes)")


def _calibrate(
    quick: bool, name: str | None, tdp_W: float, progress: Callable[[str], None] | None, threads: int | None
) -> DeviceSpec:
    s = QUICK if quick else FULL
    say = progress or (lambda _msg: None)
    measured: list[Measurement] = []

    def record(quantity: str, value: float, unit: str, method: str) -> None:
        measured.append(Measurement(quantity=quantity, value=value, unit=unit, method=method, measured_at=_now()))

    peaks, half_rows = _matmuls(s, say, record)
    say("operator overhead")
    overhead = operator_overhead(s.repeats)
    record(
        "operator overhead",
        overhead,
        "s",
        f"{'torch' if _has_torch() else 'numpy'} add of 1-element tensors, per call, best of 1000-call loops",
    )
    say("memory bandwidth")
    copy, triad, stream = _memory(s, record)
    _io(s, say, record)
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    host = name or f"calibrated-{platform.node().lower() or 'host'}".replace("_", "-")
    return DeviceSpec(
        name=host,
        kind="cpu",
        vendor=platform.processor() or platform.machine() or "unknown",
        source=f"trinity calibrate {'--quick ' if quick else ''}on {platform.node()} ({platform.machine()}, "
        f"{os.cpu_count()} logical CPUs{f', torch on {threads} thread(s)' if threads else ''}), {_now()}; "
        f"TDP not measured (given: {tdp_W:g} W)",
        peak_flops=peaks,
        memory_kind="host DRAM",
        memory_capacity_bytes=float(mem_total),
        memory_bandwidth_Bps=max(copy, triad),
        tdp_W=tdp_W,
        efficiency=Efficiency(
            compute=1.0,
            compute_half_rows=half_rows,
            memory=min(stream / max(copy, triad), 1.0),
            op_overhead_s=overhead,
        ),
        measured=measured,
    )
