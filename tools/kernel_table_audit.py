"""Audit the measured kernel tables against the hardware, and the catalog's compact parameters against the tables.

For every GPU with aiconfigurator-core tables (``pip install 'aitrinity[silicon]'``) and every engine's newest version:

* each GEMM table's decode streaming ratio (:func:`aitrinity.silicon.decode_streaming_ratio`: the median time of its
  decode-sized GEMMs over the time to stream their weights at the GPU's HBM bandwidth), ``SET ASIDE`` where the
  table is not read (:data:`aitrinity.silicon.IMPLAUSIBLE_STREAMING`);
* each GEMM table's cells measured more than 10% slower than a shape with more rows, which the model reads as that shape
  (:func:`aitrinity.silicon.monotone_rows`): their share and how far above it they sit;
* the catalog's all-reduce (``kernels.all_reduce`` of the device's YAML, derived from the vLLM tables by
  ``tools/derive_kernel_params.py``) against the table it was derived from: mean |log ratio| over the message sizes
  a step sends (64 KiB-256 MiB), per GPU count.

    python tools/kernel_table_audit.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aitrinity import catalog, silicon
from aitrinity.catalog import kernel_tables as kt
from aitrinity.spec.hardware import BYTES_PER_DTYPE

ENGINES = ("trtllm", "vllm", "sglang")
AR_SIZES = np.geomspace(64 * 2**10, 256 * 2**20, 13)


def _above(seconds: np.ndarray) -> dict[str, float]:
    """Cells measured more than :data:`aitrinity.silicon.NOISE` slower than a shape with more rows
    (:func:`aitrinity.silicon.monotone_rows` reads them as that shape): their share of the table and how far above
    it they sit (median and largest ratio)."""
    kept = silicon.monotone_rows(seconds)
    above = seconds > kept
    excess = seconds[above] / kept[above] if above.any() else np.ones(1)
    return {
        "share": round(float(above.mean()), 3),
        "median": round(float(np.median(excess)), 2),
        "max": round(float(excess.max()), 2),
    }


def audit() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for name in sorted(kt.SYSTEM_OF_DEVICE):
        dev = catalog.device(name)
        for engine in ENGINES:
            try:
                table = silicon.table_kernels(dev, engine)
            except Exception:  # no table of this engine for this GPU
                continue
            raw = silicon._grids(dev.name, engine, None)[0]
            ratios = {
                d: silicon.decode_streaming_ratio(
                    g, BYTES_PER_DTYPE["fp8" if d == "fp8_block" else d], dev.memory_bandwidth_Bps
                )
                for d, g in sorted(raw.items())
            }
            row: dict[str, object] = {"device": name, "engine": engine, "source": table.source}
            row["gemm_streaming"] = {d: round(r, 2) for d, r in ratios.items() if r is not None}
            row["gemm_above_larger_m"] = {d: _above(kt.read(name, engine, None).gemm[d][1]) for d in sorted(raw)}
            row["set_aside"] = sorted(table.set_aside)
            if engine == "vllm" and dev.kernels is not None:
                roof = silicon.roofline(dev)
                row["catalog_all_reduce_log_error"] = {
                    n: round(
                        float(np.mean(np.abs(np.log(roof.all_reduce(AR_SIZES, n) / table.all_reduce(AR_SIZES, n))))), 3
                    )
                    for n in sorted(table.all_reduce_grids)
                }
            rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not kt.available():
        print("the kernel tables are not installed: pip install 'aitrinity[silicon]'", file=sys.stderr)
        return 2
    rows = audit()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"decode GEMMs' time over their weights' streaming time (set aside above {silicon.IMPLAUSIBLE_STREAMING:g}x)")
    for r in rows:
        gemm = "  ".join(f"{d} {v:.1f}x" for d, v in r["gemm_streaming"].items())  # type: ignore[attr-defined]
        aside = f"  SET ASIDE: {', '.join(r['set_aside'])}" if r["set_aside"] else ""  # type: ignore[arg-type]
        print(f"  {r['device']:14s} {r['engine']:7s} {gemm}{aside}")
    print(
        f"GEMM cells more than {silicon.NOISE:.0%} slower than a shape with more rows (read as that shape): share, "
        "median and largest ratio"
    )
    for r in rows:
        cells = "  ".join(
            f"{d} {v['share']:.0%} x{v['median']:.2f}/x{v['max']:.2f}"
            for d, v in r["gemm_above_larger_m"].items()  # type: ignore[attr-defined]
        )
        print(f"  {r['device']:14s} {r['engine']:7s} {cells}")
    print("catalog all-reduce vs the vLLM table, mean |log ratio| over 64 KiB-256 MiB, by GPU count")
    for r in rows:
        if "catalog_all_reduce_log_error" in r:
            errs = "  ".join(f"{n}: {e:.2f}" for n, e in r["catalog_all_reduce_log_error"].items())  # type: ignore[attr-defined]
            print(f"  {r['device']:14s} {errs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
