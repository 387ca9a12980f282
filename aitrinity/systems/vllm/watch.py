"""``trinity watch URL``: which resource binds a live vLLM server, period by period, and what would relieve it.

Each period reads the server's Prometheus ``/metrics`` (parsed with ``prometheus_client``'s parser) and
compares it with the previous read: requests running and waiting, KV-cache usage, preemptions, prompt and
generated tokens. The binding resource is decided in this order:

1. **KV capacity** -- the engine preempted requests in the period (it ran out of KV blocks and evicted a
   running sequence), or requests wait while the cache is at least ``KV_FULL`` full;
2. **queue** -- requests wait with room in the cache (``max-num-seqs`` or the token budget caps the batch);
3. **compute** or **memory bandwidth** -- the larger of the two busy times the pricer ``trinity diagnose`` uses
   gives for the period's work (:mod:`aitrinity.systems.vllm.priced`): the period's closed loop -- the requests
   that finished in it, their mean prompt and output lengths, the clients by Little's law, read from vLLM's
   histograms -- priced on ``device`` at fixed concurrency (the operator model's one-request prefill and
   decode step, attention and KV reads included), one prefill per prompt's worth of the period's prompt tokens
   and one decode step per running batch's worth of its generated tokens -- unless
   **a KV tier** of the connector (``--kv-engine-id``: its counters, read over the worker's lookup socket)
   took more of the period: the seconds the worker spent reading prefix blocks from that tier, against the
   pricer's compute and memory busy times (or, without a model and a device, half the period);
4. **idle** -- nothing ran.

Each verdict names the exchanges that relieve it (from the compute-bandwidth-memory vocabulary: KV
quantization or offload, a prefix-cache tier, weight quantization, batching, more replicas). Without a
model config and a device -- or before any request finished -- only the first two and idle can be told apart;
the rest reads ``busy``. With them, each period also gives the measured TTFT and TPOT beside the priced ones,
and the :class:`~aitrinity.systems.vllm.priced.Advisor`'s pick among the registry's exchanges (``advice``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from aitrinity.control.controller import Decision
from aitrinity.control.telemetry import Rates
from aitrinity.systems.vllm.priced import AS_SERVED, Expected, Load, Served, advice_json, estimate, expected

KV_FULL = 0.9
"""Cache usage at or above which waiting requests are taken to wait for KV blocks."""

RELIEF: dict[str, list[str]] = {
    "KV capacity": [
        "quantized KV cache (kv-quant fp8/int8: twice the sequences per GiB)",
        "KV offload to host memory or a prefix-cache tier (the KV connector's memory/disk/Redis tiers)",
        "more replicas, or tensor parallelism (each device holds a share of every sequence's KV)",
        "a lower max-num-seqs (fewer preemptions, each request recomputed less)",
    ],
    "queue": ["a higher max-num-seqs or token budget (the cache has room)", "more replicas"],
    "compute": [
        "prefix caching / KV reuse (load a shared prompt's KV instead of recomputing it)",
        "weight quantization to fp8 (faster GEMMs where the device has fp8 units)",
        "more replicas or a faster device",
    ],
    "memory bandwidth": [
        "a larger batch (more sequences share each weight read)",
        "weight quantization (int8/fp8/int4: fewer bytes per step)",
        "speculative decoding (several tokens per weight read)",
    ],
    "KV tier": [
        "a larger or faster first tier (memory before disk or Redis), so reused prefixes stay hot",
        "KV quantization of the stored blocks (fewer bytes per token to read)",
        "recomputing instead: the connector's per-request decision loads only where the tier beats the prefill",
    ],
    "idle": [],
    "busy": ["give --model-config and --device to tell compute from memory bandwidth"],
}


@dataclass(frozen=True)
class Sample:
    """One read of ``/metrics`` (counters summed over the engine's label sets)."""

    t: float
    running: float
    waiting: float
    kv_usage: float
    """0..1."""
    preemptions: float
    prompt_tokens: float
    generation_tokens: float
    prefix_hits: float = 0.0
    """Prompt tokens found in vLLM's prefix cache (``prefix_cache_hits``), of ``prefix_queries`` looked up."""
    prefix_queries: float = 0.0
    tier_tokens: dict[str, float] = field(default_factory=dict)
    """Prompt tokens the KV connector loaded from each tier (cumulative; empty without ``with_tiers``)."""
    tier_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds the connector's worker spent reading them, per tier (cumulative)."""
    block_bytes: float | None = None
    """Bytes of one stored block, and its tokens: a tier's read bandwidth in the period."""
    block_tokens: float | None = None
    finished: float = 0.0
    """Requests finished (cumulative; the count of ``e2e_request_latency_seconds``), and the sums of their latency,
    prompt and output lengths; of the requests' TTFT and mean TPOT, with their counts."""
    latency_sum: float = 0.0
    prompt_len_sum: float = 0.0
    output_len_sum: float = 0.0
    ttft_sum: float = 0.0
    ttft_count: float = 0.0
    tpot_sum: float = 0.0
    tpot_count: float = 0.0
    kv_pool_tokens: int | None = None
    """One engine's KV pool (``cache_config_info``: ``num_gpu_blocks`` x ``block_size``)."""
    engines: int = 1
    """Engines reporting (data parallelism behind one server)."""


def with_tiers(s: Sample, stats: dict[str, Any], hello: dict[str, Any]) -> Sample:
    """``s`` with the KV connector's tier counters: its worker's ``stats`` and ``hello`` replies
    (``LookupClient.stats`` / ``hello``; the latter gives a block's bytes and tokens)."""
    return replace(
        s,
        tier_tokens={k: float(v) for k, v in stats.get("loaded_by_tier", {}).items()},
        tier_seconds={k: float(v) for k, v in stats.get("load_s_by_tier", {}).items()},
        block_bytes=hello.get("block_bytes"),
        block_tokens=hello.get("block_tokens"),
    )


def parse_metrics(text: str, t: float) -> Sample:
    """A :class:`Sample` from vLLM's Prometheus text (``prometheus_client``'s parser)."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as e:  # pragma: no cover - the [vllm] extra brings it
        raise RuntimeError("trinity watch needs prometheus_client: pip install 'aitrinity[watch]'") from e
    got: dict[str, float] = {}
    pools: list[int] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            got[s.name] = got.get(s.name, 0.0) + float(s.value)
            if s.name == "vllm:cache_config_info":
                pools.append(_pool_tokens(s.labels))
    if "vllm:num_requests_running" not in got:
        raise ValueError("no vllm:num_requests_running in /metrics: is this a vLLM server?")
    return Sample(
        t=t,
        running=got["vllm:num_requests_running"],
        waiting=got.get("vllm:num_requests_waiting", 0.0),
        kv_usage=got.get("vllm:kv_cache_usage_perc", 0.0),
        preemptions=got.get("vllm:num_preemptions_total", 0.0),
        prompt_tokens=got.get("vllm:prompt_tokens_total", 0.0),
        generation_tokens=got.get("vllm:generation_tokens_total", 0.0),
        prefix_hits=got.get("vllm:prefix_cache_hits_total", 0.0),
        prefix_queries=got.get("vllm:prefix_cache_queries_total", 0.0),
        finished=got.get("vllm:e2e_request_latency_seconds_count", 0.0),
        latency_sum=got.get("vllm:e2e_request_latency_seconds_sum", 0.0),
        prompt_len_sum=got.get("vllm:request_prompt_tokens_sum", 0.0),
        output_len_sum=got.get("vllm:request_generation_tokens_sum", 0.0),
        ttft_sum=got.get("vllm:time_to_first_token_seconds_sum", 0.0),
        ttft_count=got.get("vllm:time_to_first_token_seconds_count", 0.0),
        tpot_sum=got.get("vllm:request_time_per_output_token_seconds_sum", 0.0),
        tpot_count=got.get("vllm:request_time_per_output_token_seconds_count", 0.0),
        kv_pool_tokens=max(pools) if pools and max(pools) > 0 else None,
        engines=max(len(pools), 1),
    )


def _pool_tokens(labels: dict[str, str]) -> int:
    try:
        return int(labels.get("num_gpu_blocks", "0")) * int(labels.get("block_size", "0"))
    except ValueError:  # "None" before the engine sized its pool
        return 0


def measured_load(prev: Sample, now: Sample) -> Load | None:
    """The closed loop of the requests that finished between two reads (None: none did)."""
    n = now.finished - prev.finished
    if n <= 0:
        return None
    dt = max(now.t - prev.t, 1e-9)
    latency = max(now.latency_sum - prev.latency_sum, 0.0)
    n_ttft, n_tpot = now.ttft_count - prev.ttft_count, now.tpot_count - prev.tpot_count
    return Load(
        requests=n,
        clients=latency / dt,
        prompt_tokens=max(now.prompt_len_sum - prev.prompt_len_sum, 0.0) / n,
        output_tokens=max(now.output_len_sum - prev.output_len_sum, 0.0) / n,
        latency_s=latency / n,
        ttft_s=(now.ttft_sum - prev.ttft_sum) / n_ttft if n_ttft > 0 else None,
        tpot_s=(now.tpot_sum - prev.tpot_sum) / n_tpot if n_tpot > 0 else None,
    )


@dataclass(frozen=True)
class TierPeriod:
    """What the KV connector loaded from one tier in a period."""

    tier: str
    tokens_per_s: float
    busy: float
    """Share of the period the worker spent reading from it."""
    read_Bps: float | None
    """Its read bandwidth in the period (None without the block size or with nothing read)."""


@dataclass(frozen=True)
class Verdict:
    """One period: what was measured, what binds, what the cost model expected, what would relieve it."""

    period_s: float
    running: float
    waiting: float
    kv_usage: float
    preemptions: float
    """In this period."""
    prompt_tokens_per_s: float
    generation_tokens_per_s: float
    binds: str
    why: str
    expected: Expected | None
    """The pricer's figures for the period (None without a model and a device, or before any request finished)."""
    relieve: list[str] = field(default_factory=list)
    tiers: list[TierPeriod] = field(default_factory=list)
    """The KV connector's tiers this period (empty when it is not watched)."""
    load: Load | None = None
    """The closed loop measured in the period (None: no request finished in it; ``expected`` is then priced at the
    last load the caller measured)."""
    advice: Decision | None = None
    """The Advisor's decision this period (the caller's; :class:`aitrinity.systems.vllm.priced.Advisor`)."""

    def rates(self) -> Rates:
        """What the server achieved in the period, as the Controller's telemetry: the pricer's FLOPs and bytes
        for the period's tokens over its length (nothing without a model and a device), and each connector tier's
        read bandwidth."""
        links = {t.tier: t.read_Bps for t in self.tiers if t.read_Bps}
        if self.expected is None:
            return Rates(links_Bps=links)
        return Rates(
            flops_per_s=self.expected.flops / self.period_s,
            memory_Bps=self.expected.bytes / self.period_s,
            links_Bps=links,
        )

    def to_json(self) -> dict[str, Any]:
        out = {**asdict(self), "rates": self.rates().to_json()}
        out["advice"] = advice_json(self.advice) if self.advice is not None else None
        return out


def tier_periods(prev: Sample, now: Sample) -> list[TierPeriod]:
    """The connector's tiers between two reads, busiest first."""
    dt = max(now.t - prev.t, 1e-9)
    out = []
    for tier in sorted(set(now.tier_tokens) | set(now.tier_seconds)):
        tokens = max(now.tier_tokens.get(tier, 0.0) - prev.tier_tokens.get(tier, 0.0), 0.0)
        seconds = max(now.tier_seconds.get(tier, 0.0) - prev.tier_seconds.get(tier, 0.0), 0.0)
        bw = None
        if now.block_bytes and now.block_tokens and seconds > 0:
            bw = tokens / now.block_tokens * now.block_bytes / seconds
        out.append(TierPeriod(tier, tokens / dt, seconds / dt, bw))
    return sorted(out, key=lambda t: -t.busy)


def judge(prev: Sample, now: Sample, served: Served | None = None, last: Load | None = None) -> Verdict:
    """What bound the server between two reads; ``served`` prices the period (module doc) at its measured load, or
    at ``last`` (the caller's latest) where no request finished in it."""
    dt = max(now.t - prev.t, 1e-9)
    tiers = tier_periods(prev, now)
    top = tiers[0] if tiers and tiers[0].busy > 0 else None
    pre = max(now.preemptions - prev.preemptions, 0.0)
    prompt = max(now.prompt_tokens - prev.prompt_tokens, 0.0)
    gen = max(now.generation_tokens - prev.generation_tokens, 0.0)
    load = measured_load(prev, now)
    at = load or last
    exp = expected(estimate(served, at), prompt, gen) if served is not None and at is not None else None
    if pre > 0:
        binds, why = "KV capacity", f"{pre:g} preemption(s): the engine evicted running sequences for KV blocks"
    elif now.waiting > 0 and now.kv_usage >= KV_FULL:
        binds, why = "KV capacity", f"{now.waiting:g} waiting with the KV cache {now.kv_usage:.0%} full"
    elif now.waiting > 0:
        binds, why = "queue", f"{now.waiting:g} waiting with the KV cache {now.kv_usage:.0%} full"
    elif prompt + gen == 0 and now.running == 0:
        binds, why = "idle", "no request ran"
    elif top is not None and top.busy * dt >= (max(exp.compute_s, exp.memory_s) if exp else 0.5 * dt):
        binds = "KV tier"
        bw = f" at {top.read_Bps / 1e9:.3g} GB/s" if top.read_Bps else ""
        why = f"reading prefix blocks from {top.tier}{bw} took {top.busy:.0%} of the period"
        if exp is not None:
            why += f", more than the model's {max(exp.compute_s, exp.memory_s):.3g} s of GPU work"
    elif exp is None:
        binds, why = "busy", f"{prompt + gen:g} tokens in the period"
        if served is not None:
            why += " (no request has finished yet: the pricer needs their prompt and output lengths)"
    elif exp.compute_s >= exp.memory_s:
        binds = "compute"
        why = f"{exp.flops / 1e9:.3g} GFLOP take {exp.compute_s:.3g} s, the weight and KV reads {exp.memory_s:.3g} s"
    else:
        binds = "memory bandwidth"
        why = f"{exp.bytes / 1e9:.3g} GB of weight and KV reads take {exp.memory_s:.3g} s, FLOPs {exp.compute_s:.3g} s"
    return Verdict(
        period_s=dt,
        running=now.running,
        waiting=now.waiting,
        kv_usage=now.kv_usage,
        preemptions=pre,
        prompt_tokens_per_s=prompt / dt,
        generation_tokens_per_s=gen / dt,
        binds=binds,
        why=why,
        expected=exp,
        relieve=RELIEF[binds],
        tiers=tiers,
        load=load,
    )


def line(v: Verdict) -> str:
    """One period as a console line."""
    head = (
        f"running {v.running:g} waiting {v.waiting:g} kv {v.kv_usage:.0%} preempted +{v.preemptions:g} | "
        f"prompt {v.prompt_tokens_per_s:,.0f} tok/s, generated {v.generation_tokens_per_s:,.0f} tok/s"
    )
    util = ""
    if v.expected is not None and v.binds in ("compute", "memory bandwidth"):
        busy = max(v.expected.compute_s, v.expected.memory_s)
        util = f"; the cost model expects {busy / v.period_s:.0%} of the period busy"
    relief = f" -> {v.relieve[0]}" if v.relieve else ""
    tiers = "".join(f" | {t.tier} {t.tokens_per_s:,.0f} tok/s loaded, {t.busy:.0%} busy" for t in v.tiers)
    out = f"{head}{tiers}{_latencies(v)} | binds: {v.binds} ({v.why}{util}){relief}"
    if v.advice is not None and (v.advice.choice != AS_SERVED or v.advice.switched):
        out += f" | advice: {v.advice.choice} ({v.advice.reason})"
    return out


def _latencies(v: Verdict) -> str:
    """The period's measured TTFT and TPOT beside the priced ones, and the clients they were priced at."""
    if v.load is None:
        return ""
    ld, e = v.load, v.expected
    ttft = f"TTFT {ld.ttft_s * 1e3:,.0f} ms" if ld.ttft_s is not None else ""
    tpot = f"TPOT {ld.tpot_s * 1e3:,.1f} ms" if ld.tpot_s is not None else ""
    if e is not None:
        ttft += f" (priced {e.ttft_s * 1e3:,.0f})" if ttft else ""
        tpot += f" (priced {e.tpot_s * 1e3:,.1f})" if tpot else ""
    parts = ", ".join(x for x in (ttft, tpot) if x)
    return f" | {ld.requests:g} done, {ld.clients:.1f} in flight{': ' + parts if parts else ''}"
