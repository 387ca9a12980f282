"""``trinity kv replay`` and ``trinity kv plan``: prefix-cache capacity from a request trace."""

from __future__ import annotations

import argparse
from typing import Any

from aitrinity.cli.args import count
from aitrinity.cli.jsonout import dump
from aitrinity.cli.progress import Progress
from aitrinity.errors import SpecError
from aitrinity.spec.hardware import BYTES_PER_DTYPE

REPLAY_HELP = """examples:
  trinity kv replay data/traces/mooncake_conversation_trace.jsonl --capacity 3000000
  trinity kv replay TRACE --model llama-3.1-8b --capacity 100GiB,1TiB,unbounded --policy cost
  trinity kv replay TRACE --tiers host-dram=200GiB,nvme-gen4=2TiB --json

CAPACITY is a token count (3000000, 3M) or bytes with a unit (900GiB, 2TB); 'unbounded' for no limit.
"""

PLAN_HELP = """examples:
  trinity kv plan data/traces/mooncake_conversation_trace.jsonl --target 0.3
  trinity kv plan TRACE --target 0.35 --model llama-3.1-8b --tiers host-dram=512GiB,nvme-gen5
"""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", metavar="TRACE", help="JSONL trace: timestamp, input_length, output_length, hash_ids")
    p.add_argument("--model", default="llama-3.1-70b", help="catalog model whose KV is cached (default llama-3.1-70b)")
    p.add_argument("--kv-dtype", default="bf16", choices=sorted(BYTES_PER_DTYPE), help="KV-cache dtype (default bf16)")
    p.add_argument(
        "--device", default="h100-sxm", help="device that would recompute, for break-even (default h100-sxm)"
    )
    p.add_argument("--block", type=count(1, 10**6), default=512, help="tokens per block (default 512, the trace's)")
    p.add_argument("--policy", default="lru", choices=["lru", "lfu", "cost"], help="eviction policy (default lru)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print the structured result as JSON")


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument(
        "--capacity",
        default="unbounded",
        help="one capacity or a comma-separated curve: tokens (3M) or bytes (900GiB); default unbounded",
    )
    p.add_argument("--tiers", metavar="TIER=CAP,...", help="replay through catalog tiers, fastest first")


def add_parsers(sub: Any) -> None:
    kv = sub.add_parser("kv", help="prefix KV cache: trace replay and capacity planning")
    ksub = kv.add_subparsers(dest="kv_command", required=True, metavar="ACTION")
    r = ksub.add_parser(
        "replay",
        help="hit rate, prefill FLOPs saved and bytes each tier serves",
        description="Replay a Mooncake-format trace through the store's block index and eviction policy "
        "(no KV is materialised): token hit rate, prefill FLOPs saved and bytes served per tier.",
        epilog=REPLAY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_replay_arguments(r)
    pl = ksub.add_parser(
        "plan",
        help="the capacity (and its split over tiers) for a target hit rate",
        description="Find the least cache capacity whose replay reaches --target token hit rate, then "
        "fill --tiers fastest first; each tier's read bandwidth is checked against the "
        "load-vs-recompute break-even.",
        epilog=PLAN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(pl)
    pl.add_argument("--target", type=float, required=True, help="token hit rate to reach, e.g. 0.3")
    pl.add_argument(
        "--tiers",
        default="host-dram,nvme-gen4",
        metavar="TIER[=CAP],...",
        help="catalog tiers fastest first, capacity from the catalog unless given (default host-dram,nvme-gen4)",
    )


def _capacity(text: str, block: int, block_bytes: int) -> int | None:
    """Bytes for a capacity given in tokens or bytes (rounded down to whole blocks); None: unbounded."""
    from aitrinity import units

    t = text.strip()
    if t.lower() in ("unbounded", "inf", "none", ""):
        return None
    if t.rstrip().endswith("B"):
        return int(units.parse_bytes(t)) // block_bytes * block_bytes
    return int(units.parse_count(t)) // block * block_bytes


def _tiers(text: str, block: int, block_bytes: int) -> list[Any]:
    from aitrinity import catalog
    from aitrinity.plan.kv_capacity import TierInput

    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, cap = part.partition("=")
        spec = catalog.tier(name.strip())
        size = _capacity(cap, block, block_bytes) if cap else int(spec.capacity_bytes) // block_bytes * block_bytes
        out.append(TierInput(spec.name, size, spec))
    if not out:
        raise SpecError("--tiers", text, "catalog tiers such as host-dram=200GiB,nvme-gen4")
    return out


def run(args: argparse.Namespace) -> int:
    from aitrinity import catalog
    from aitrinity.catalog import traces
    from aitrinity.plan.kv_capacity import TierInput, block_bytes, kv_plan, kv_replay

    if args.block <= 0:
        raise SpecError("--block", args.block, "a positive number of tokens")
    model, device = catalog.model(args.model), catalog.device(args.device)
    bb = block_bytes(model, args.kv_dtype, args.block)

    progress = Progress(args.quiet)
    say = progress.say
    say(f"reading {args.trace}")
    reqs = traces.load(args.trace)
    kw = {"block_tokens": args.block, "policy": args.policy, "kv_dtype": args.kv_dtype}
    if getattr(args, "kv_command", "replay") == "plan":
        say(f"searching the capacity for a {args.target:g} token hit rate")
        plan = kv_plan(reqs, model, args.target, _tiers(args.tiers, args.block, bb), device, **kw)
        print(dump(plan.model_dump(mode="json")) if args.json else render_plan(args.trace, plan))
        return 0
    if args.tiers:
        if args.capacity != "unbounded":
            raise SpecError("--capacity", args.capacity, "no --capacity with --tiers (each tier has its own)")
        configs = [_tiers(args.tiers, args.block, bb)]
    else:
        configs = [[TierInput("cache", _capacity(c, args.block, bb))] for c in args.capacity.split(",")]
    reports = []
    for i, tiers in enumerate(configs):
        progress.step(i, len(configs), f"replays of {len(reqs):,} requests")
        reports.append(kv_replay(reqs, model, tiers, device, **kw))
    progress.step(len(configs), len(configs), f"replays of {len(reqs):,} requests")
    if args.json:
        data = [r.model_dump(mode="json") for r in reports]
        print(dump(data[0] if len(data) == 1 else data))
    else:
        print(render_replay(args.trace, reports))
    return 0


def _header(trace: str, r: Any) -> str:
    from aitrinity import units

    return (
        f"{trace}: {r.requests:,} requests over {units.format_time(r.duration_s)}, {r.prompt_tokens:,} prompt tokens\n"
        f"{r.model} KV ({r.kv_dtype}): {units.format_bytes(r.block_bytes)} per {r.block_tokens}-token block; "
        f"eviction {r.policy.upper() if r.policy != 'cost' else 'cost-aware (GDSF)'}"
    )


def _cap(r: Any) -> str:
    from aitrinity import units

    if r.capacity_bytes is None:
        return "unbounded"
    return f"{r.capacity_tokens:,} tok / {units.format_bytes(r.capacity_bytes)}"


def _tier_rows(r: Any) -> list[str]:
    from aitrinity import units
    from aitrinity.cli.render import _table

    rows = [["tier", "capacity", "hits (blocks)", "bytes served", "mean read", "tier bandwidth", "break-even", "load?"]]
    for t in r.tiers:
        rows.append(
            [
                t.name,
                "unbounded" if t.capacity_bytes is None else units.format_bytes(t.capacity_bytes),
                f"{t.hit_blocks:,}",
                units.format_bytes(t.bytes_served),
                "-" if t.read_Bps is None else units.format_bandwidth(t.read_Bps),
                "-" if t.tier_bandwidth_Bps is None else units.format_bandwidth(t.tier_bandwidth_Bps),
                "-" if t.breakeven_bandwidth_Bps is None else units.format_bandwidth(t.breakeven_bandwidth_Bps),
                "-" if t.worth_loading is None else ("yes" if t.worth_loading else "no: recompute"),
            ]
        )
    return _table(rows)


def render_replay(trace: str, reports: list[Any]) -> str:
    from aitrinity.cli.render import _table

    lines = [_header(trace, reports[0])]
    if len(reports) == 1 and len(reports[0].tiers) > 1:
        r = reports[0]
        lines.append(f"token hit rate {r.token_hit_rate:.3f}; prefill FLOPs saved {_saved(r)}")
        return "\n".join([*lines, *_tier_rows(r)])
    rows = [["capacity", "token hit rate", "prefill FLOPs saved", "evictions"]]
    for r in reports:
        rows.append([_cap(r), f"{r.token_hit_rate:.3f}", _saved(r), f"{r.tiers[0].evictions:,}"])
    return "\n".join([*lines, *_table(rows)])


def _saved(r: Any) -> str:
    from aitrinity import units

    share = r.prefill_flops_saved / r.prefill_flops if r.prefill_flops else 0.0
    return f"{units.format_flops(r.prefill_flops_saved)} ({share:.1%})"


def render_plan(trace: str, p: Any) -> str:
    from aitrinity import units

    a = p.allocation
    lines = [
        _header(trace, a),
        f"target token hit rate {p.target_hit_rate:g} (unbounded capacity reaches {p.unbounded_hit_rate:.3f})",
        f"needs {p.capacity_tokens:,} tokens of KV = {units.format_bytes(p.capacity_bytes)}; "
        f"replayed over the tiers: hit rate {a.token_hit_rate:.3f}, prefill FLOPs saved {_saved(a)}",
        *_tier_rows(a),
        "hit rate vs capacity (the search's replays):",
    ]
    lines += [f"  {c.capacity_tokens:>14,} tokens  {c.token_hit_rate:.3f}" for c in p.curve]
    return "\n".join(lines)
