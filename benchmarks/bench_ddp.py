"""Compressed data-parallel training on real gloo ranks (issue 5): accuracy and step time vs the cost model.

Part 1, accuracy: 2 workers, each compressor (error feedback on for top-k and
sign; top-k and PowerSGD also inside an fp16 cast wrapper), 3 seeds, on
scikit-learn's digits and on the generated 20-class task;
mean test accuracy next to uncompressed training, and two broken variants
(top-k and sign without error feedback) to show the task separates them.

Part 2, step time: the MLP at width 1024 (~1.1M parameters) on links shaped
with tc tbf in a private namespace (100 Mbit/s, 1 Gbit/s, unlimited; root
only), every compressor and the adaptive hook: measured median step time (steps
5+), next to the cost model's prediction (``cost.grad_compression.step_time``
with the link's alpha and beta, compute and codec cost the adaptive run
measured at its first decision, right after probing every option), which side
of break-even against no compression each falls on, and the adaptive hook's
final choice (the Controller itself predicts from each option's probed transfer
time, scaled to the link as observed).

Part 3, sharding: DDP, ZeroRedundancyOptimizer and FSDP2 on the reference
decoder (2 layers, hidden 128), per-rank model-state bytes next to
``cost.sharding``'s prediction, and the bytes both ranks put on the loopback of
a private namespace in one step next to the predicted bytes (root only).

    python benchmarks/bench_ddp.py [--part accuracy|links|sharding|all] [--seeds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from typing import Any

from aitrinity.systems import netns
from aitrinity.systems.ddp.launch import run_workers

try:  # a clear message instead of a ModuleNotFoundError (after minutes of work)
    import torch
except ImportError:
    sys.exit("bench_ddp.py runs real torch workloads: pip install -e '.[dev]' (or '.[torch]') first")


ACCURACY = [
    ("none", {}),
    ("fp16", {}),
    ("bf16", {}),
    ("int8", {}),
    ("topk", {"density": 0.01}),
    ("topk", {"density": 0.05}),
    ("sign", {}),
    ("powersgd", {}),
    ("topk", {"density": 0.01, "cast": "fp16"}),
    ("powersgd", {"cast": "fp16"}),
    ("topk", {"density": 0.01, "error_feedback": False}),
    ("sign", {"error_feedback": False}),
]
LINK_METHODS = ["none", "fp16", "int8", "topk", "sign", "powersgd", "auto"]


def label(method: str, extra: dict[str, Any]) -> str:
    out = method
    if "density" in extra:
        out += f" {extra['density']:g}"
    if extra.get("cast"):
        out += f" in {extra['cast']} cast"
    if extra.get("error_feedback") is False:
        out += " (no EF)"
    return out


def accuracy(seeds: int) -> list[dict[str, Any]]:
    rows = []
    for task, epochs in (("digits", 30), ("generated", 15)):
        runs = [
            {"method": m, "seed": s, "epochs": epochs, "record_steps": False, **x}
            for s in range(seeds)
            for m, x in ACCURACY
        ]
        print(f"bench: accuracy on {task} ({len(runs)} runs)", file=sys.stderr)
        res = run_workers(runs, world=2, task=task, timeout_s=3600)[0]
        acc: dict[str, list[float]] = defaultdict(list)
        for cfg, r in zip(runs, res, strict=True):
            extra = {k: v for k, v in cfg.items() if k in ("density", "error_feedback", "cast")}
            acc[label(cfg["method"], extra)].append(r["test_accuracy"])
        base = statistics.mean(acc["none"])
        for name, v in acc.items():
            mean = statistics.mean(v)
            rows.append(
                {
                    "task": task,
                    "compressor": name,
                    "seeds": len(v),
                    "accuracy": mean,
                    "delta_pp": 100 * (mean - base),
                    "within_1pp": abs(mean - base) <= 0.01,
                }
            )
    return rows


def links(steps: int) -> list[dict[str, Any]] | str:
    why = netns.unavailable()
    if why:
        return f"skipped: shaped links {why}"
    rows = []
    for link in ("100mbit", "1gbit", "unlimited"):
        runs = [{"method": m, "steps": steps, "hidden": 1024} for m in LINK_METHODS]
        print(f"bench: step time over {link}", file=sys.stderr)
        res = run_workers(runs, world=2, task="digits", link=link, timeout_s=3600)[0]
        measured = {r["method"]: statistics.median(x["step_s"] for x in r["records"][5:]) for r in res}
        auto = res[-1]
        decisions = [x["decision"] for x in auto["records"] if "decision" in x]
        predicted = decisions[0]["model_s"]  # the cost model right after the probe of every option
        for m in LINK_METHODS:
            p = predicted.get(m)
            rows.append(
                {
                    "link": link,
                    "compressor": m,
                    "measured_step_s": measured[m],
                    "predicted_step_s": p,
                    "measured_vs_none": measured[m] / measured["none"],
                    "predicted_side": None
                    if p is None or m in ("none", "auto")
                    else ("faster" if p < predicted["none"] else "slower"),
                    "measured_side": None
                    if m in ("none", "auto")
                    else ("faster" if measured[m] < measured["none"] else "slower"),
                    "adaptive_choice": auto["records"][-1]["method"] if m == "auto" else None,
                    "link_bandwidth_Bps": auto["bandwidth_Bps"],
                    "link_alpha_s": auto["alpha_s"],
                }
            )
    return rows


SHARDING_MODEL = {
    "name": "tiny",
    "source": "bench",
    "num_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 320,
    "vocab_size": 1000,
    "max_seq_len": 512,
}


def sharding() -> list[dict[str, Any]] | str:
    from aitrinity.cost import sharding as cs

    why = netns.unavailable()
    if why:
        return f"skipped: bytes on the wire need a private namespace, which {why}"
    print("bench: sharding", file=sys.stderr)
    res = run_workers([], world=2, link="unlimited", sharding={"model": SHARDING_MODEL, "batch": 2, "seq": 32})
    rows = []
    for i, kind in enumerate(("ddp", "zero1", "fsdp2")):
        shapes, root = res[0][i]["shapes"], res[0][i]["root_shapes"]
        wire = sum(cs.wire_bytes(kind, shapes, 2, r, root_shapes=root) for r in (0, 1))
        for rank in (0, 1):
            r, p = res[rank][i], cs.rank_states(kind, shapes, 2, rank)
            rows.append(
                {
                    "sharding": kind,
                    "rank": rank,
                    "weights": r["weights"],
                    "gradients": r["gradients"],
                    "optimizer": r["optimizer"],
                    "predicted": [p.weights, p.gradients, p.optimizer],
                    "exact": [r["weights"], r["gradients"], r["optimizer"]] == [p.weights, p.gradients, p.optimizer],
                    "wire_both_ranks": r["lo_tx_step"],
                    "wire_predicted": wire,
                }
            )
    return rows


def recompute() -> list[dict[str, Any]]:
    """Saved activations of one bf16 block (hidden 256, GQA 8/2, b=2, s=256) vs cost.memory, per recomputation."""
    import torch
    from torch.utils.checkpoint import checkpoint

    from aitrinity.cost.memory import layer_activation_bytes, layer_activations
    from aitrinity.spec.scenario import Plan
    from aitrinity.systems.torch_models import Block
    from aitrinity.systems.validate import _llama, saved_activation_bytes

    m = _llama("t", 256, 2, 8, 2)
    b, s = 2, 256
    blk = Block(m).to(torch.bfloat16)

    class Checkpointed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blk = blk

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(self.blk, x, use_reentrant=False)  # type: ignore[no-any-return]

    rows = []
    for mode in ("none", "selective", "full"):
        blk.attn.recompute_core = mode == "selective"
        wrapped = Checkpointed() if mode == "full" else blk
        got = saved_activation_bytes(wrapped, b, s, m.hidden_size)
        want = layer_activation_bytes(
            layer_activations(m, s, b, False, 2.0), Plan(recompute=mode, flash_attention=False)
        )
        rows.append({"recompute": mode, "measured_bytes": got, "predicted_bytes": want, "ratio": got / want})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="all", choices=["accuracy", "links", "sharding", "all"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out: dict[str, Any] = {}
    if a.part in ("accuracy", "all"):
        out["accuracy"] = accuracy(a.seeds)
    if a.part in ("links", "all"):
        out["links"] = links(a.steps)
    if a.part in ("sharding", "all"):
        out["sharding"] = sharding()
        out["recompute"] = recompute()
    if a.json:
        print(json.dumps(out, indent=2))
        return
    for r in out.get("accuracy", []):
        print(
            f"{r['task']:10s} {r['compressor']:18s} acc {r['accuracy']:.4f}  {r['delta_pp']:+.2f} pp  "
            f"{'within 1 pp' if r['within_1pp'] else 'OUTSIDE 1 pp'}"
        )
    sh = out.get("sharding", [])
    if isinstance(sh, str):
        print(sh)
    for r in sh:
        print(
            f"{r['sharding']:6s} rank {r['rank']}  weights {r['weights']:,}  gradients {r['gradients']:,}  "
            f"Adam moments {r['optimizer']:,}  {'= predicted' if r['exact'] else 'predicted ' + str(r['predicted'])}  "
            f"wire (both ranks) {r['wire_both_ranks']:,} vs {r['wire_predicted']:,.0f} "
            f"({r['wire_both_ranks'] / r['wire_predicted']:.4f})"
        )
    for r in out.get("recompute", []):
        print(
            f"recompute {r['recompute']:9s} saved {r['measured_bytes']:,} B vs predicted {r['predicted_bytes']:,.0f} B "
            f"({r['ratio'] - 1:+.1%})"
        )
    lk = out.get("links", [])
    if isinstance(lk, str):
        print(lk)
    for r in lk:
        pred = "-" if r["predicted_step_s"] is None else f"{r['predicted_step_s'] * 1e3:8.1f}"
        side = "" if r["predicted_side"] is None else f"predicted {r['predicted_side']}, measured {r['measured_side']}"
        pick = f"adaptive chose {r['adaptive_choice']}" if r["adaptive_choice"] else ""
        print(
            f"{r['link']:10s} {r['compressor']:9s} measured {r['measured_step_s'] * 1e3:8.1f} ms  predicted {pred} ms  "
            f"{side}{pick}"
        )


if __name__ == "__main__":
    main()
