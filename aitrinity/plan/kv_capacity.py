"""Prefix-cache capacity from a trace: hit rate, FLOPs saved and bytes each tier serves; the capacity for a target.

``kv_replay`` prices a replay (``cost.prefix_reuse.replay_tiers``) for a model:
a block holds ``block_tokens`` tokens of KV (``cost.memory.kv_bytes_per_token``),
recomputing block ``j`` costs ``cost.kv_reuse.prefill_flops(m, j·B, B)``. Per
tier it reports the bytes served, the mean read bandwidth that implies over
the trace's duration, and whether the tier is fast enough for loading to beat
recomputing (``cost.kv_reuse.breakeven_bandwidth`` for the mean reused prefix
on the given device).

``kv_plan`` finds the least total capacity (in blocks, by bisection to 1% of
the capacity or 0.001 of hit rate) whose replay reaches a target token hit rate, then fills the tiers fastest first up
to each one's capacity. LRU is a stack algorithm (Mattson et al. 1970), so
its hit rate never falls as capacity grows and the bisection is exact; for
LFU and cost-aware eviction the result is checked by a final replay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aitrinity.cost.kv_reuse import breakeven_bandwidth, prefill_flops
from aitrinity.cost.ledger import Result
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.cost.prefix_reuse import ReplayTier, TierResult, replay_tiers
from aitrinity.errors import SpecError
from aitrinity.spec.hardware import DeviceSpec, MemoryTierSpec
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.traces import TraceRequest


@dataclass(frozen=True)
class TierInput:
    name: str
    capacity_bytes: int | None
    """None: unbounded."""
    spec: MemoryTierSpec | None = None
    """Bandwidth and latency, when the tier is a catalog tier."""


class TierUse(Result):
    name: str
    capacity_bytes: int | None
    capacity_tokens: int | None
    hit_blocks: int
    bytes_served: float
    read_Bps: float | None
    """Mean read bandwidth over the trace's duration (None for a trace without duration)."""
    peak_bytes: int
    evictions: int
    tier_bandwidth_Bps: float | None
    breakeven_bandwidth_Bps: float | None
    """Loading the mean reused prefix from this tier beats recomputing it above this bandwidth."""
    worth_loading: bool | None


class KVReplayReport(Result):
    model: str
    kv_dtype: str
    device: str
    policy: str
    block_tokens: int
    block_bytes: int
    requests: int
    duration_s: float
    prompt_tokens: int
    hit_tokens: int
    token_hit_rate: float
    prefill_flops: float
    prefill_flops_saved: float
    capacity_tokens: int | None
    """Total over tiers; None: unbounded."""
    capacity_bytes: int | None
    bytes_served: dict[str, float]
    tiers: list[TierUse]


def block_bytes(m: ModelSpec, kv_dtype: str, block_tokens: int) -> int:
    return math.ceil(kv_bytes_per_token(m, kv_dtype) * block_tokens)


def _tier_use(t: TierInput, tr: TierResult, bb: int, block_tokens: int, duration: float, be: float | None) -> TierUse:
    """One tier's part of the replay, with its break-even bandwidth ``be`` (None: loading never pays, or no spec)."""
    return TierUse(
        name=t.name,
        capacity_bytes=t.capacity_bytes,
        capacity_tokens=None if t.capacity_bytes is None else t.capacity_bytes // bb * block_tokens,
        hit_blocks=tr.hit_blocks,
        bytes_served=tr.bytes_served,
        read_Bps=tr.bytes_served / duration if duration > 0 else None,
        peak_bytes=tr.peak_bytes,
        evictions=tr.evictions,
        tier_bandwidth_Bps=t.spec.bandwidth_Bps if t.spec else None,
        breakeven_bandwidth_Bps=be,
        worth_loading=None if t.spec is None else (be is not None and t.spec.bandwidth_Bps > be),
    )


def kv_replay(
    requests: Sequence[TraceRequest],
    m: ModelSpec,
    tiers: Sequence[TierInput],
    device: DeviceSpec,
    *,
    block_tokens: int = 512,
    policy: str = "lru",
    kv_dtype: str = "bf16",
) -> KVReplayReport:
    if block_tokens <= 0:
        raise SpecError("block", block_tokens, "a positive number of tokens")
    bb = block_bytes(m, kv_dtype, block_tokens)
    r = replay_tiers(
        requests,
        [ReplayTier(t.name, t.capacity_bytes) for t in tiers],
        block_tokens=block_tokens,
        block_bytes=bb,
        policy=policy,
        block_flops=lambda j: prefill_flops(m, j * block_tokens, block_tokens),
        request_flops=lambda n: prefill_flops(m, 0, n),
    )
    ts = [q.timestamp_ms for q in requests]
    duration = (max(ts) - min(ts)) / 1e3 if ts else 0.0
    flops_per_s = device.peak_flops_for(kv_dtype if kv_dtype in ("bf16", "fp16") else "bf16")
    flops_per_s *= device.efficiency.compute
    reusing = sum(1 for q in requests if q.prompt_tokens >= block_tokens) or 1
    mean_hit = max(block_tokens, round(r.hit_tokens / reusing))
    uses = []
    for t, tr in zip(tiers, r.tiers, strict=True):
        be = None
        if t.spec is not None:
            lat = t.spec.latency_s * mean_hit / block_tokens
            b = breakeven_bandwidth(m, mean_hit, flops_per_s=flops_per_s, kv_dtype=kv_dtype, latency_s=lat)
            be = None if math.isinf(b) else b
        uses.append(_tier_use(t, tr, bb, block_tokens, duration, be))
    caps = [t.capacity_bytes for t in tiers]
    cap_bytes = None if any(c is None for c in caps) else sum(c for c in caps if c is not None)
    return KVReplayReport(
        model=m.name,
        kv_dtype=kv_dtype,
        device=device.name,
        policy=policy,
        block_tokens=block_tokens,
        block_bytes=bb,
        requests=r.requests,
        duration_s=duration,
        prompt_tokens=r.prompt_tokens,
        hit_tokens=r.hit_tokens,
        token_hit_rate=r.token_hit_rate,
        prefill_flops=r.prefill_flops,
        prefill_flops_saved=r.prefill_flops_saved,
        capacity_tokens=None if cap_bytes is None else sum(u.capacity_tokens or 0 for u in uses),
        capacity_bytes=cap_bytes,
        bytes_served={u.name: u.bytes_served for u in uses},
        tiers=uses,
    )


class CurvePoint(Result):
    capacity_tokens: int
    token_hit_rate: float


class KVPlan(Result):
    target_hit_rate: float
    unbounded_hit_rate: float
    capacity_tokens: int
    capacity_bytes: int
    curve: list[CurvePoint]
    """Every capacity the search replayed, ascending."""
    allocation: KVReplayReport
    """The replay with the capacity split over the tiers, fastest first."""


def kv_plan(
    requests: Sequence[TraceRequest],
    m: ModelSpec,
    target: float,
    tiers: Sequence[TierInput],
    device: DeviceSpec,
    *,
    block_tokens: int = 512,
    policy: str = "lru",
    kv_dtype: str = "bf16",
) -> KVPlan:
    """The least capacity reaching ``target`` token hit rate, and how the tiers hold it."""
    if not 0 < target <= 1:
        raise SpecError("--target", target, "a token hit rate in (0, 1]")
    if not tiers:
        raise SpecError("--tiers", "", "at least one tier")
    bb = block_bytes(m, kv_dtype, block_tokens)

    def rate(blocks: int | None) -> float:
        tier = [TierInput("cache", None if blocks is None else blocks * bb)]
        return kv_replay(
            requests, m, tier, device, block_tokens=block_tokens, policy=policy, kv_dtype=kv_dtype
        ).token_hit_rate

    top = rate(None)
    if target > top:
        raise SpecError("--target", target, f"at most {top:.3f}, this trace's hit rate with unbounded capacity")
    distinct = len({b for q in requests for b in q.hash_ids[: q.prompt_tokens // block_tokens]})
    lo, hi = 0, max(distinct, 1)
    curve = {hi: top}  # room for every distinct block: nothing is ever evicted
    # bisect (geometrically while the range spans decades) to 1% of the capacity or 0.001 of hit rate
    while hi - lo > max(1, hi // 100) and curve[hi] - target > 0.001:
        mid = int(math.sqrt(max(lo, 1) * hi)) if hi > 4 * max(lo, 1) else (lo + hi) // 2
        mid = min(max(mid, lo + 1), hi - 1)
        curve[mid] = rate(mid)
        if curve[mid] >= target:
            hi = mid
        else:
            lo = mid
    need = hi * bb
    alloc = _fill(tiers, need, bb)
    report = kv_replay(requests, m, alloc, device, block_tokens=block_tokens, policy=policy, kv_dtype=kv_dtype)
    return KVPlan(
        target_hit_rate=target,
        unbounded_hit_rate=top,
        capacity_tokens=hi * block_tokens,
        capacity_bytes=need,
        curve=[CurvePoint(capacity_tokens=b * block_tokens, token_hit_rate=h) for b, h in sorted(curve.items())],
        allocation=report,
    )


def _fill(tiers: Sequence[TierInput], need: int, bb: int) -> list[TierInput]:
    """``need`` bytes of KV over the tiers, fastest first, each holding whole blocks of ``bb`` bytes up to its
    capacity; a one-line error when they cannot hold it."""
    left, alloc = need, []
    for t in tiers:
        take = left if t.capacity_bytes is None else min(t.capacity_bytes // bb * bb, left)
        alloc.append(TierInput(t.name, take, t.spec))
        left -= take
        if left <= 0:
            break
    if left > 0:
        have = sum(t.capacity_bytes or 0 for t in tiers)
        raise SpecError(
            "--tiers", ",".join(t.name for t in tiers), f"room for {need:,} bytes of KV (they hold {have:,})"
        )
    return alloc
