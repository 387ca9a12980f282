"""A prefill cluster replaying a request trace, with per-instance prefix caches or one global pool (Mooncake).

Each request of a Mooncake-format trace arrives at its timestamp and is routed
to one of ``instances`` prefill instances, which serve one request at a time
(first come, first served). Its prefix blocks (the trace's hash ids, full
blocks only) are looked up in the cache it can reach:

- ``local``: each instance has its own ``BlockIndex`` of ``capacity / instances``;
  the router is cache-aware (Mooncake's Conductor, FAST'25 §6.2): it sends the
  request to the instance with the earliest estimated finish = queue wait +
  load time of the blocks that instance holds + prefill of the rest.
- ``global``: one ``BlockIndex`` of ``capacity`` every instance reaches over the
  pool link; the router sends the request to the instance that frees first.

Prefill time = blocks loaded × block bytes / link bandwidth (+ per-block
latency) + ``cost.kv_reuse.prefill_flops(m, hit, n - hit)`` / achievable FLOP/s;
when the prefill finishes every block of the request is touched or inserted in
that cache (the replay semantics of ``cost.prefix_reuse``; a request arriving
meanwhile does not see blocks still being computed). TTFT = finish − arrival
(the first token's decode is not modelled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from aitrinity.cost.block_index import BlockIndex
from aitrinity.cost.kv_reuse import prefill_flops
from aitrinity.cost.ledger import Result
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.sim.core import Simulator
from aitrinity.sim.metrics import Percentiles, percentiles
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.traces import TraceRequest


@dataclass(frozen=True)
class ClusterConfig:
    instances: int
    cache: Literal["local", "global"]
    capacity_tokens: int
    """Total over the cluster (split evenly among instances for ``local``)."""
    flops_per_s: float
    """Achievable FLOP/s of one prefill instance."""
    load_bandwidth_Bps: float
    """Where cached KV comes from: the instance's DRAM (``local``) or the pool link (``global``)."""
    load_latency_s: float = 0.0
    block_tokens: int = 512
    kv_dtype: str = "bf16"
    policy: str = "lru"


class PrefillResult(Result):
    cache: str
    instances: int
    capacity_tokens: int
    requests: int
    finished: int
    prompt_tokens: int
    hit_tokens: int
    token_hit_rate: float
    prefill_flops: float
    """Computed with the cache."""
    prefill_flops_without_cache: float
    bytes_loaded: float
    ttft_s: Percentiles
    utilization: list[float]
    """Busy fraction of each instance over the span from the first arrival to the last finish."""
    makespan_s: float
    events: int


def simulate_prefill(
    requests: Sequence[TraceRequest],
    m: ModelSpec,
    cfg: ClusterConfig,
    *,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> PrefillResult:
    if cfg.instances < 1 or cfg.block_tokens < 1 or cfg.flops_per_s <= 0 or cfg.load_bandwidth_Bps <= 0:
        raise ValueError("instances, block_tokens, flops_per_s and load_bandwidth_Bps must be positive")
    B = cfg.block_tokens
    block_bytes = int(kv_bytes_per_token(m, cfg.kv_dtype) * B)
    n_caches = cfg.instances if cfg.cache == "local" else 1
    cap_blocks = cfg.capacity_tokens // B // n_caches
    caches = [BlockIndex(cap_blocks * block_bytes, cfg.policy) for _ in range(n_caches)]
    free_at = [0.0] * cfg.instances
    busy = [0.0] * cfg.instances
    ttft: list[float] = []
    totals = {"hit": 0, "prompt": 0, "flops": 0.0, "flops0": 0.0, "loaded": 0.0}
    sim = Simulator(seed)
    flop_memo: dict[tuple[int, int], float] = {}

    def flops(start: int, new: int) -> float:
        key = (start, new)
        if key not in flop_memo:
            flop_memo[key] = prefill_flops(m, start, new)
        return flop_memo[key]

    def service(hit_blocks: int, n: int) -> float:
        hit = hit_blocks * B
        load = hit_blocks * (block_bytes / cfg.load_bandwidth_Bps + cfg.load_latency_s)
        return load + flops(hit, n - hit) / cfg.flops_per_s

    def arrive(r: TraceRequest) -> None:
        blocks = r.hash_ids[: r.input_length // B]
        now = sim.now
        if cfg.cache == "global":
            hit = caches[0].prefix(blocks)
            i = min(range(cfg.instances), key=lambda k: (max(free_at[k], now), k))
            cache = caches[0]
        else:
            best = None
            for k in range(cfg.instances):
                h = caches[k].prefix(blocks)
                done = max(free_at[k], now) + service(h, r.input_length)
                if best is None or done < best[0]:
                    best = (done, k, h)
            assert best is not None
            _, i, hit = best
            cache = caches[i]
        start = max(free_at[i], now)
        dur = service(hit, r.input_length)
        free_at[i] = start + dur
        busy[i] += dur
        totals["hit"] += hit * B
        totals["prompt"] += r.input_length
        totals["flops"] += flops(hit * B, r.input_length - hit * B)
        totals["flops0"] += flops(0, r.input_length)
        totals["loaded"] += hit * block_bytes
        sim.at(start + dur, finish, blocks, cache, now)

    def finish(blocks: Sequence[int], cache: BlockIndex, arrived: float) -> None:
        ttft.append(sim.now - arrived)
        for j, b in enumerate(blocks):  # the prompt's KV exists now: cache it
            if not cache.touch(b) and cache.fits(block_bytes):
                cache.insert(b, block_bytes, flops(j * B, B))

    for r in requests:
        sim.at(r.timestamp_ms / 1e3, arrive, r)
    events = sim.run(progress=progress)
    first = min((r.timestamp_ms for r in requests), default=0.0) / 1e3
    span = max(max(free_at, default=0.0) - first, 1e-12)
    return PrefillResult(
        cache=cfg.cache,
        instances=cfg.instances,
        capacity_tokens=cfg.capacity_tokens,
        requests=len(requests),
        finished=len(ttft),
        prompt_tokens=totals["prompt"],
        hit_tokens=totals["hit"],
        token_hit_rate=totals["hit"] / totals["prompt"] if totals["prompt"] else 0.0,
        prefill_flops=totals["flops"],
        prefill_flops_without_cache=totals["flops0"],
        bytes_loaded=totals["loaded"],
        ttft_s=percentiles(ttft),
        utilization=[b / span for b in busy],
        makespan_s=span,
        events=events,
    )
