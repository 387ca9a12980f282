"""``trinity train-demo``: real data-parallel training with compressed gradients over a (shaped) link."""

from __future__ import annotations

import argparse
from typing import Any

from aitrinity.cli.jsonout import dump
from aitrinity.cli.progress import Progress
from aitrinity.errors import SpecError

HELP = """examples:
  trinity train-demo --workers 2 --link 100mbit --compressor auto
  trinity train-demo --compressor topk --density 0.05 --task generated --epochs 5
  trinity train-demo --link 1gbit --compressor int8 --steps 50 --json
  trinity train-demo --compressor powersgd --cast fp16 --steps 20

--link runs the workers in a private network namespace whose loopback is rate-limited with tc tbf
(root only); 'unlimited' is a namespace without a limit; without --link the host's loopback is used.
Compressors: none, fp16, bf16, int8, topk, sign, powersgd, auto (the Controller picks each step).
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "train-demo",
        help="train an MLP on real data with 2+ gloo workers and compressed gradients",
        description="Train a small MLP with PyTorch DDP (gloo) on scikit-learn's digits or a generated task, "
        "with a gradient compressor or the adaptive Controller, and print per-step bytes, time, loss and "
        "the controller's decisions.",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workers", type=int, default=2, help="data-parallel ranks (default 2)")
    p.add_argument("--link", help="shaped link: 100mbit, 1gbit, ... or unlimited (needs root)")
    p.add_argument("--compressor", default="auto", help="method or auto (default auto)")
    p.add_argument("--task", default="digits", choices=["digits", "generated"])
    p.add_argument("--steps", type=int, help="stop after this many steps")
    p.add_argument("--epochs", type=int, default=5, help="epochs when --steps is not given (default 5)")
    p.add_argument("--hidden", type=int, default=1024, help="MLP width (default 1024: ~1.1M parameters)")
    p.add_argument("--density", type=float, default=0.01, help="top-k density (default 0.01)")
    p.add_argument(
        "--cast",
        choices=["fp16", "bf16"],
        help="run the compressor inside a cast wrapper (PyTorch's fp16_compress_wrapper or its bf16 twin)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    Progress(args.quiet).say("loading torch and starting the workers (seconds)")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SpecError("train-demo", "torch", "torch installed (pip install -e '.[torch]')") from None
    from aitrinity.cost.grad_compression import METHODS
    from aitrinity.systems import netns
    from aitrinity.systems.ddp.launch import run_workers

    if args.compressor not in (*METHODS, "powersgd", "auto"):
        raise SpecError("--compressor", args.compressor, f"one of {', '.join((*METHODS, 'powersgd', 'auto'))}")
    if args.workers < 1:
        raise SpecError("--workers", args.workers, "at least 1")
    if args.link and netns.unavailable():
        raise SpecError("--link", args.link, f"a shaped namespace, which {netns.unavailable()}")
    if args.steps is not None and args.steps < 1:
        raise SpecError("--steps", args.steps, "at least 1")
    run_cfg = {
        "method": args.compressor,
        "seed": args.seed,
        "epochs": args.epochs,
        "steps": args.steps,
        "hidden": args.hidden,
        "density": args.density,
        "cast": args.cast,
    }
    where = f"a {args.link} link" if args.link else "the host loopback"
    comp = args.compressor + (f" inside the {args.cast} cast wrapper" if args.cast else "")
    Progress(args.quiet).say(f"training with {args.workers} workers over {where}, compressor {comp}")
    res = run_workers([run_cfg], world=args.workers, task=args.task, link=args.link)
    r = res[0][0]
    if args.json:
        print(dump({"link": args.link, "workers": args.workers, "task": args.task, **r}))
    else:
        print(render(r, args))
    return 0


def render(r: dict[str, Any], args: argparse.Namespace) -> str:
    from aitrinity import units
    from aitrinity.cli.render import _table

    rows = [["step", "loss", "method", "step", "compute", "comm", "codec", "sent", "controller"]]
    recs = r["records"]
    shown = recs if len(recs) <= 40 else recs[:20] + recs[-10:]
    for x in shown:
        d = x.get("decision")
        note = d["reason"] if d and (d["switched"] or x["step"] in (0, 1)) else ""
        rows.append(
            [
                str(x["step"]),
                f"{x['loss']:.4f}",
                x["method"],
                units.format_time(x["step_s"]),
                units.format_time(x["compute_s"]),
                units.format_time(x["comm_s"]),
                units.format_time(x["codec_s"]),
                units.format_bytes(x["sent_bytes"]),
                note,
            ]
        )
    s = r["stats"]
    lines = [
        f"{args.task}: {r['steps']} steps, {args.workers} workers, link {args.link or 'host loopback'}"
        + (f", gradients cast to {args.cast} around the compressor" if args.cast else ""),
        *_table(rows),
    ]
    if len(recs) > len(shown):
        lines.insert(-10, f"  ... {len(recs) - len(shown)} steps not shown (--json has all)")
    lines.append(
        f"test accuracy {r['test_accuracy']:.4f}; sent {units.format_bytes(s['sent_bytes'])} per rank in all; "
        f"buckets by method {s['by_method']}; skipped steps {r['skipped_steps']}"
    )
    return "\n".join(lines)
