"""Derive the operator model's routing skew (``aitrinity.cost.operators.ROUTING_SKEW``) from measured MoE kernels.

Input: the fused-MoE tables of NVIDIA's ``aiconfigurator-core`` (``pip install 'aitrinity[silicon]'``) for one GPU
and engine: ``systems/data/<gpu>/moe/<engine>/<version>/moe_perf.parquet``, which time each MoE shape three times,
with tokens routed uniformly (``balanced``) and with power-law expert popularity (``power_law_1.01``,
``power_law_1.2``). Output: for each power law, ``gamma(ep) = a + s·log2(ep)``, the least-squares fit of the median
latency ratio (power law / balanced) per MoE EP size over the steps of at least ``--min-tokens`` tokens -- where the
hottest experts' rank, not the weights every rank streams, sets the layer's time. The operator model uses it as the
hottest EP rank's share of the routed work over the mean.

    python tools/derive_routing_skew.py [--gpu h100_sxm] [--engine trtllm] [--version V] [--min-tokens 1024]
"""

from __future__ import annotations

import argparse

import numpy as np

from aitrinity.catalog import kernel_tables as kt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", default="h100_sxm", help="the tables' system folder")
    ap.add_argument("--engine", default="trtllm")
    ap.add_argument("--version", default=None, help="default: the newest measured")
    ap.add_argument("--min-tokens", type=int, default=1024)
    args = ap.parse_args()
    version = args.version or kt.versions(args.gpu, "moe", args.engine)[-1]
    path = kt.table_path(kt.data_root() / args.gpu, "moe", args.engine, version, "moe_perf")
    cols = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    rows = kt._read(path, [*cols, "distribution", "latency"])
    shape = np.stack([rows[c].astype(str) for c in cols], axis=1)
    keys = np.array(["|".join(r) for r in shape])
    base = {k: t for k, t, d in zip(keys, rows["latency"], rows["distribution"], strict=True) if d == "balanced"}
    print(f"{path.relative_to(kt.data_root())}: {len(keys):,} rows")
    for dist in ("power_law_1.01", "power_law_1.2"):
        ratio: dict[int, list[float]] = {}
        for k, t, d, ep, n in zip(
            keys, rows["latency"], rows["distribution"], rows["moe_ep_size"], rows["num_tokens"], strict=True
        ):
            if d == dist and k in base and n >= args.min_tokens:
                ratio.setdefault(int(ep), []).append(float(t) / float(base[k]))
        eps = np.array(sorted(ratio), dtype=np.float64)
        med = np.array([np.median(ratio[int(e)]) for e in eps])
        s, a = np.polyfit(np.log2(eps), med, 1)
        pairs = ", ".join(f"ep{int(e)} {m:.2f}" for e, m in zip(eps, med, strict=True))
        print(f"{dist}: median ratio {pairs}")
        print(f"  gamma(ep) = {a:.3f} + {s:.3f}·log2(ep)")


if __name__ == "__main__":
    main()
