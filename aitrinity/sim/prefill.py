"""A prefill cluster replaying a request trace: per-instance prefix caches, Mooncake's global cache, or one pool.

Each request of a Mooncake-format trace arrives at its timestamp (divided by
``rate_scale``: 2 replays the trace twice as fast) and is routed to one of
``instances`` prefill instances, which serve one request at a time (first come,
first served). Its prefix blocks (the trace's hash ids, full blocks only) are
looked up in the caches it can reach:

- ``local``: each instance has its own ``BlockIndex`` of ``capacity / instances``
  and can use only that one.
- ``global``: Mooncake's global cache (Qin et al., FAST'25, §4.1 and §5.3.2): each
  instance holds ``capacity / instances`` too, but an instance may fetch a longer
  prefix from the instance that holds it; the fetched blocks then stay in its own
  cache as well (migration, so hot prefixes are replicated).
- ``pool``: one ``BlockIndex`` of ``capacity`` that every instance reaches over the
  pool link (a disaggregated KV store).

Requests are routed by the paper's Algorithm 1: for every instance, estimated TTFT =
queue time (the work queued there) + prefill time given that instance's prefix
match; for ``global``, when the best match in the cluster is more than
``balancing_threshold`` times the instance's own, the instance uses the best match
and the estimate adds the transfer of the missing blocks over the transfer link.
The request goes to the smallest estimate (with ``pool`` every instance sees the
same cache, so that is the instance that frees first); above ``ttft_slo_s`` it is
rejected (HTTP 429), not served. ``router="least-loaded"`` sends each request to the
instance that frees first without looking at the caches: a router with no view of
them.

Prefill time = blocks reused × block bytes / load bandwidth (+ per-block latency)
[+ blocks fetched / transfer bandwidth] + the prefill of the rest given the cached
prefix, ``prefill_time(cached, new)``: the operator model of one instance (a TP
group, :func:`operator_prefill`) or the FLOPs at a fixed rate (:func:`flops_prefill`).
When the prefill finishes every block of the request is touched or inserted in the
instance's cache (the replay semantics of ``cost.prefix_reuse``; a request arriving
meanwhile does not see blocks still being computed). TTFT = finish − arrival (the
first token's decode is not modelled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from aitrinity.cost.block_index import BlockIndex
from aitrinity.cost.kernels import Kernels
from aitrinity.cost.kv_reuse import prefill_flops
from aitrinity.cost.ledger import Result
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.cost.operators import Layout, StepShape, step_times
from aitrinity.sim.core import Simulator
from aitrinity.sim.metrics import Percentiles, percentiles
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.traces import TraceRequest

PrefillTime = Callable[[int, int], float]
"""(tokens already cached, new tokens) -> seconds for one instance to prefill them."""

CACHES = ("local", "global", "pool")
ROUTERS = ("algorithm1", "least-loaded")


def flops_prefill(m: ModelSpec, flops_per_s: float) -> PrefillTime:
    """The prefill's FLOPs (``cost.kv_reuse.prefill_flops``) at a fixed achievable rate."""
    if flops_per_s <= 0:
        raise ValueError("flops_per_s must be positive")
    return lambda start, new: prefill_flops(m, start, new) / flops_per_s


def operator_prefill(m: ModelSpec, kernels: Kernels, layout: Layout, step_overhead_s: float = 0.0) -> PrefillTime:
    """One engine step of the operator model (``cost.operators.step_times``) on a TP group of ``layout.tp``
    GPUs that prefills ``new`` tokens attending to ``start`` cached ones."""

    def time(start: int, new: int) -> float:
        shape = StepShape(0, 1.0, 1, max(new, 1), start)
        return float(step_times(m, kernels, layout, shape, step_overhead_s).total)

    return time


@dataclass(frozen=True)
class ClusterConfig:
    instances: int
    cache: Literal["local", "global", "pool"]
    capacity_tokens: int
    """Total over the cluster (split evenly among instances for ``local`` and ``global``)."""
    load_bandwidth_Bps: float
    """Where cached KV comes from: the instance's DRAM (``local``, ``global``) or the pool link (``pool``)."""
    flops_per_s: float = 0.0
    """Achievable FLOP/s of one instance, when ``simulate_prefill`` is given no ``prefill_time``."""
    load_latency_s: float = 0.0
    block_tokens: int = 512
    kv_dtype: str = "bf16"
    policy: str = "lru"
    transfer_bandwidth_Bps: float = 50e9
    """``global``: the link a prefix fetched from another instance crosses (RDMA between nodes)."""
    balancing_threshold: float = 1.0
    """``global``: fetch the cluster's best match when it is more than this many times the instance's own."""
    ttft_slo_s: float | None = None
    """Reject a request whose estimated TTFT on the chosen instance is above this; None: never."""
    rate_scale: float = 1.0
    """Arrivals at ``timestamp / rate_scale``."""
    router: Literal["algorithm1", "least-loaded"] = "algorithm1"
    """``least-loaded``: the instance that frees first, without looking at the caches (a router with no view of
    them)."""


class PrefillResult(Result):
    cache: str
    instances: int
    capacity_tokens: int
    rate_scale: float
    requests: int
    finished: int
    rejected: int
    """Requests whose estimated TTFT was above the SLO; they count in nothing below."""
    prompt_tokens: int
    hit_tokens: int
    token_hit_rate: float
    transferred_tokens: int
    """``global``: hit tokens fetched from another instance's cache."""
    prefill_flops: float
    """Computed with the cache."""
    prefill_flops_without_cache: float
    bytes_loaded: float
    busy_s: float
    """Instance-seconds of prefill (loads, transfers and compute), the paper's "prefill GPU time" per instance."""
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
    prefill_time: PrefillTime | None = None,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> PrefillResult:
    if cfg.cache not in CACHES or cfg.router not in ROUTERS:
        raise ValueError(f"cache must be one of {', '.join(CACHES)} and router one of {', '.join(ROUTERS)}")
    if min(cfg.instances, cfg.block_tokens) < 1 or min(cfg.load_bandwidth_Bps, cfg.transfer_bandwidth_Bps) <= 0:
        raise ValueError("instances, block_tokens and the bandwidths must be positive")
    if cfg.rate_scale <= 0 or cfg.balancing_threshold < 1.0:
        raise ValueError("rate_scale must be positive and balancing_threshold at least 1")
    cluster = _Cluster(m, cfg, prefill_time or flops_prefill(m, cfg.flops_per_s), Simulator(seed))
    for r in requests:
        cluster.sim.at(r.timestamp_ms / 1e3 / cfg.rate_scale, cluster.arrive, r)
    events = cluster.sim.run(progress=progress)
    first = min((r.timestamp_ms for r in requests), default=0.0) / 1e3 / cfg.rate_scale
    return cluster.result(len(requests), first, events)


@dataclass
class _Totals:
    hit_blocks: int = 0
    moved_blocks: int = 0
    prompt_tokens: int = 0
    flops: float = 0.0
    flops_without_cache: float = 0.0
    rejected: int = 0


class _Cluster:
    """The instances' queues and caches, and the totals, as the events of one replay change them."""

    def __init__(self, m: ModelSpec, cfg: ClusterConfig, compute: PrefillTime, sim: Simulator) -> None:
        self.m, self.cfg, self.compute, self.sim = m, cfg, compute, sim
        B = cfg.block_tokens
        self.block_bytes = int(kv_bytes_per_token(m, cfg.kv_dtype) * B)
        self.n_caches = 1 if cfg.cache == "pool" else cfg.instances
        cap_blocks = cfg.capacity_tokens // B // self.n_caches
        self.caches = [BlockIndex(cap_blocks * self.block_bytes, cfg.policy) for _ in range(self.n_caches)]
        self.free_at = [0.0] * cfg.instances
        self.busy = [0.0] * cfg.instances
        self.ttft: list[float] = []
        self.totals = _Totals()
        self.load_s = self.block_bytes / cfg.load_bandwidth_Bps + cfg.load_latency_s
        self.move_s = self.block_bytes / cfg.transfer_bandwidth_Bps
        self._service: dict[tuple[int, int], float] = {}
        self._flops: dict[tuple[int, int], float] = {}

    def flops(self, start: int, new: int) -> float:
        key = (start, new)
        if key not in self._flops:
            self._flops[key] = prefill_flops(self.m, start, new)
        return self._flops[key]

    def service(self, hit_blocks: int, n: int) -> float:
        """Load ``hit_blocks`` cached blocks and prefill the rest of an ``n``-token prompt."""
        key = (hit_blocks, n)
        if key not in self._service:
            hit = hit_blocks * self.cfg.block_tokens
            self._service[key] = hit_blocks * self.load_s + self.compute(hit, n - hit)
        return self._service[key]

    def route(self, blocks: Sequence[int], n: int, now: float) -> tuple[float, float, int, int, int]:
        """Algorithm 1 (or the least-loaded instance when the router does not look at the caches): the chosen
        instance's estimated TTFT and service time, the instance, the blocks it reuses and how many of them it
        fetches from another instance."""
        cfg = self.cfg
        own = [c.prefix(blocks) for c in self.caches]  # one entry for the pool, one per instance otherwise
        best = max(own)
        choice = None
        for k in range(cfg.instances):
            hit = own[k % self.n_caches]
            moved = 0
            if cfg.cache == "global" and best > hit and (hit == 0 or best / hit > cfg.balancing_threshold):
                hit, moved = best, best - hit
            queue = max(self.free_at[k] - now, 0.0)
            dur = moved * self.move_s + self.service(hit, n)
            rank = queue + dur if cfg.router == "algorithm1" else queue
            if choice is None or rank < choice[0]:
                choice = (rank, queue + dur, dur, k, hit, moved)
        assert choice is not None
        return choice[1:]

    def arrive(self, r: TraceRequest) -> None:
        B, t = self.cfg.block_tokens, self.totals
        blocks = r.hash_ids[: r.prompt_tokens // B]
        now, n = self.sim.now, r.prompt_tokens
        est, dur, i, hit, moved = self.route(blocks, n, now)
        if self.cfg.ttft_slo_s is not None and est > self.cfg.ttft_slo_s:
            t.rejected += 1
            return
        start = max(self.free_at[i], now)
        self.free_at[i] = start + dur
        self.busy[i] += dur
        t.hit_blocks += hit
        t.moved_blocks += moved
        t.prompt_tokens += n
        t.flops += self.flops(hit * B, n - hit * B)
        t.flops_without_cache += self.flops(0, n)
        self.sim.at(start + dur, self.finish, blocks, self.caches[i % self.n_caches], now)

    def finish(self, blocks: Sequence[int], cache: BlockIndex, arrived: float) -> None:
        self.ttft.append(self.sim.now - arrived)
        B, size = self.cfg.block_tokens, self.block_bytes
        for j, b in enumerate(blocks):  # the prompt's KV exists now (computed or fetched): cache it
            if not cache.touch(b) and cache.fits(size):
                cache.insert(b, size, self.flops(j * B, B))

    def result(self, requests: int, first_arrival: float, events: int) -> PrefillResult:
        cfg, t, B = self.cfg, self.totals, self.cfg.block_tokens
        span = max(max(self.free_at, default=0.0) - first_arrival, 1e-12)
        return PrefillResult(
            cache=cfg.cache,
            instances=cfg.instances,
            capacity_tokens=cfg.capacity_tokens,
            rate_scale=cfg.rate_scale,
            requests=requests,
            finished=len(self.ttft),
            rejected=t.rejected,
            prompt_tokens=t.prompt_tokens,
            hit_tokens=t.hit_blocks * B,
            token_hit_rate=t.hit_blocks * B / t.prompt_tokens if t.prompt_tokens else 0.0,
            transferred_tokens=t.moved_blocks * B,
            prefill_flops=t.flops,
            prefill_flops_without_cache=t.flops_without_cache,
            bytes_loaded=float(t.hit_blocks * self.block_bytes),
            busy_s=sum(self.busy),
            ttft_s=percentiles(self.ttft),
            utilization=[b / span for b in self.busy],
            makespan_s=span,
            events=events,
        )
