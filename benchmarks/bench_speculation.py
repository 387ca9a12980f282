"""Speculative decoding's TPOT gain by batch, as ``trinity diagnose`` prices it (docs/silicon.md).

Each scenario is priced twice through :func:`aitrinity.api.diagnose`, without and with a ``speculative-decoding``
exchange (one draft token, 85% accepted, one draft block: DeepSeek-V3's MTP), fp8 weights, compute and KV, at a
fixed concurrency of 1 024 prompt and 1 024 output tokens. Prints TPOT both ways, the gain and the resource that
binds decode. Reference: DeepSeek reports 1.8x decoding speed for its MTP (DeepSeek-V3 report, §5.4.3).

    python benchmarks/bench_speculation.py [--json]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from aitrinity import api
from aitrinity.cost.diagnosis import Diagnosis
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Scenario

CASES = (("llama-3.1-70b", "h100-sxm", (1, 8, 64, 512)), ("deepseek-v3", "h200", (1, 4, 32, 128, 512)))


def scenario(model: str, device: str, batch: int, speculative: bool) -> Scenario:
    ex = [{"kind": "speculative-decoding", "draft_tokens": 1, "acceptance": 0.85}] if speculative else []
    return validate(
        Scenario,
        {
            "name": f"{model}-{batch}",
            "system": {"device": device, "num_devices": 8},
            "workload": {"model": model, "serving": {"prompt_tokens": 1024, "output_tokens": 1024, "batch": batch}},
            "plan": {"tp": 8, "weight_dtype": "fp8", "compute_dtype": "fp8", "kv_dtype": "fp8", "exchanges": ex},
        },
    )


def price(model: str, device: str, batch: int, speculative: bool) -> tuple[float, str]:
    """TPOT and the resource binding decode."""
    d = api.diagnose(scenario(model, device, batch, speculative))
    assert isinstance(d, Diagnosis) and d.estimate.serving is not None
    return d.estimate.serving.tpot_s, d.phases[1].binding_label


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for model, device, batches in CASES:
        for b in batches:
            (t0, _), (t1, binds) = price(model, device, b, False), price(model, device, b, True)
            rows.append(
                {
                    "model": model,
                    "device": device,
                    "clients": b,
                    "tpot_s": t0,
                    "tpot_speculative_s": t1,
                    "gain": t0 / t1,
                    "binds": binds,
                }
            )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| model | 8 x | clients | TPOT | with MTP | gain | decode binds (with MTP) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['device']} | {r['clients']} | {r['tpot_s'] * 1e3:.2f} ms "
            f"| {r['tpot_speculative_s'] * 1e3:.2f} ms | {r['gain']:.2f}x | {r['binds']} |"
        )


if __name__ == "__main__":
    main()
