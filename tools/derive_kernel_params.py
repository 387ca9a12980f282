"""Derive a GPU's compact kernel parameters (the catalog's ``kernels:`` entry) from measured kernel tables.

Inputs: NVIDIA's ``aiconfigurator-core`` tables (``pip install 'aitrinity[silicon]'``) for one GPU and one
engine (default vLLM, the newest version measured), and the catalog device's peak FLOP/s and memory
bandwidth. Outputs, printed as YAML to paste into ``aitrinity/catalog/data/devices/<device>.yaml``:

* ``gemm.<dtype>``: ``efficiency`` and ``half_rows`` of ``e(m) = efficiency·m/(m + half_rows)`` and
  ``launch_s``, by least squares on log latency over the table's GEMMs with n, k in [1024, 16384]
  (the sizes of real projections); ``launch_s`` is the table's smallest latency;
* ``attention``: ``prefill_efficiency`` = causal FLOPs / (bf16 peak x latency), median over prefills of
  at least 64k tokens x heads; ``decode_memory_efficiency`` = KV bytes / (bandwidth x latency), median over
  decodes reading at least 64 MiB; ``launch_s`` the smallest latency;
* ``all_reduce.<n>``: ``latency_s`` the smallest latency; ``bus_bandwidth_Bps`` by least squares on log latency,
  with that latency, over the messages from 64 KiB to 256 MiB (:data:`ALL_REDUCE_BYTES`: the tensor-parallel
  all-reduces the cost model prices, a decode step of a few tokens to a prefill of 8,192 tokens of a 16k-wide
  model; until 2026-12-07 the largest message, 1 GiB, which no step sends: its bus bandwidth is NVLink's asymptote,
  and the middle of the curve came out 1.4-2x faster than measured);
* ``memory_efficiency``: weight bytes / (bandwidth x latency) of the m = 1 GEMMs over 64 MiB of weights.

    python tools/derive_kernel_params.py h100-sxm [--engine vllm] [--version V]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from aitrinity import catalog, silicon
from aitrinity.catalog import kernel_tables as kt
from aitrinity.cost.kernels import Grid
from aitrinity.spec.hardware import BYTES_PER_DTYPE


def _points(g: Grid) -> tuple[np.ndarray, ...]:
    mesh = np.meshgrid(*g.axes, indexing="ij")
    return (*(x.ravel() for x in mesh), g.values.ravel())


def gemm_params(g: Grid, peak: float, bw: float, dtype: str, mem_eff: float) -> dict[str, float]:
    m, n, k, t = _points(g)
    sel = (n >= 1024) & (n <= 16384) & (k >= 1024) & (k <= 16384)
    m, n, k, t = m[sel], n[sel], k[sel], t[sel]
    launch = float(g.values.min())
    best: tuple[float, float, float] = (np.inf, 0.7, 64.0)
    # 0.3-1.0 as always, and below it for fp4 against its own peak (B300's kernels reach about a quarter of it)
    for eff in np.concatenate([np.linspace(0.06, 0.28, 12), np.linspace(0.3, 1.0, 36)]):
        for half in np.geomspace(1, 4096, 49):
            e = eff * m / (m + half)
            mem = (n * k * BYTES_PER_DTYPE[dtype] + m * (n + k) * 2) / (bw * mem_eff)
            pred = launch + np.maximum(2 * m * n * k / (peak * e), mem)
            err = float(np.mean(np.abs(np.log(pred / t))))
            if err < best[0]:
                best = (err, float(eff), float(half))
    return {"efficiency": round(best[1], 3), "half_rows": round(best[2], 1), "launch_s": round(launch, 8)}


ALL_REDUCE_BYTES = (64 * 2**10, 256 * 2**20)
"""The message sizes the all-reduce's bus bandwidth is fitted over (module doc)."""


def all_reduce_params(g: Grid, n: int) -> dict[str, float]:
    """``latency_s`` and ``bus_bandwidth_Bps`` of ``latency + 2(n-1)/n · size / bus bandwidth`` for ``n`` GPUs'
    measured all-reduce (module doc)."""
    size, t = g.axes[0], g.values
    lat = float(t.min())
    sel = (size >= ALL_REDUCE_BYTES[0]) & (size <= ALL_REDUCE_BYTES[1])
    if not sel.any():  # a table without those sizes: its largest message, as before
        return {"latency_s": lat, "bus_bandwidth_Bps": 2 * (n - 1) / n * float(size[-1]) / (float(t[-1]) - lat)}
    moved = 2 * (n - 1) / n * size[sel]
    bws = np.geomspace(1e9, 4e12, 2001)  # 0.4% apart
    err = np.abs(np.log((lat + moved[None, :] / bws[:, None]) / t[sel][None, :])).mean(axis=1)
    return {"latency_s": lat, "bus_bandwidth_Bps": float(bws[int(np.argmin(err))])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("device")
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--version", default=None)
    args = ap.parse_args()
    dev = catalog.device(args.device)
    c = kt.read(dev.name, args.engine, args.version).choice
    k = silicon.table_kernels(dev, args.engine, args.version)
    gemm, attention, all_reduce = k.gemm_grids, k.attention, k.all_reduce_grids
    bw = dev.memory_bandwidth_Bps
    print(f"  # python tools/derive_kernel_params.py {dev.name} --engine {c.engine} --version {c.version}")
    print("kernels:")
    print(f'  source: "derived by tools/derive_kernel_params.py from aiconfigurator-core tables {c.label}"')
    m, n, k, t = _points(gemm["bf16"])
    sel = (m == 1) & (n * k * 2 >= 64 * 2**20)
    mem_eff = float(min(np.median(n[sel] * k[sel] * 2 / (bw * t[sel])), 1.0))
    print("  gemm:")
    for dtype, g in sorted(gemm.items()):
        if dtype not in ("bf16", "fp8", "fp4"):
            continue
        # fitted with the peak and the memory efficiency the roofline prices this dtype with
        p = gemm_params(g, dev.peak_flops_for(dtype), bw, dtype, round(mem_eff, 3))
        fields = f"efficiency: {p['efficiency']}, half_rows: {p['half_rows']}, launch_s: {p['launch_s']:.3g}"
        print(f"    {dtype}: {{{fields}}}")
    at = attention.get((128, "bf16"))
    if at is None:
        print("no bf16 head_dim-128 attention table", file=sys.stderr)
        return 1
    kvh, pre = sorted(at.prefill.items())[0]
    b, s, h, t = _points(pre)
    sel = b * s * h >= 65536
    pref = np.median(2 * b[sel] * s[sel] ** 2 * h[sel] * 128 / (dev.peak_flops_for("bf16") * t[sel]))
    kvh, dec = sorted(at.decode.items())[-1]
    b, ctx, h, t = _points(dec)
    kv = 2 * b * ctx * kvh * 128 * 2
    sel = kv >= 64 * 2**20
    dme = np.median(kv[sel] / (bw * t[sel]))
    launch = min(float(pre.values.min()), float(dec.values.min()))
    print(
        f"  attention: {{prefill_efficiency: {min(pref, 1):.3f}, decode_memory_efficiency: {min(dme, 1):.3f}, "
        f"launch_s: {launch:.3g}}}"
    )
    print("  all_reduce:")
    for n, g in sorted(all_reduce.items()):
        ar = all_reduce_params(g, n)
        print(f"    {n}: {{latency_s: {ar['latency_s']:.3g}, bus_bandwidth_Bps: {ar['bus_bandwidth_Bps']:.4g}}}")
    print(f"  memory_efficiency: {mem_eff:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
