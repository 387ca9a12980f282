"""``trinity watch URL``: which resource binds a live vLLM server, period by period, and what would relieve it.

Each period reads the server's Prometheus ``/metrics`` (parsed with ``prometheus_client``'s parser) and
compares it with the previous read: requests running and waiting, KV-cache usage, preemptions, prompt and
generated tokens. The binding resource is decided in this order:

1. **KV capacity** -- the engine preempted requests in the period (it ran out of KV blocks and evicted a
   running sequence), or requests wait while the cache is at least ``KV_FULL`` full;
2. **queue** -- requests wait with room in the cache (``max-num-seqs`` or the token budget caps the batch);
3. **compute** or **memory bandwidth** -- the larger of the two busy times the cost model gives for the
   period's work on ``device``: the FLOPs of the prompt and generated tokens (``2 x parameters`` per token)
   over the device's achievable FLOP/s, against the bytes the decode steps read (the weights once per step,
   steps = generated tokens / running sequences) over its achievable memory bandwidth;
4. **idle** -- nothing ran.

Each verdict names the exchanges that relieve it (from the compute-bandwidth-memory vocabulary: KV
quantization or offload, a prefix-cache tier, weight quantization, batching, more replicas). Without a
model config and a device only the first two and idle can be told apart; the rest reads ``busy``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from aitrinity.control.telemetry import Rates
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.cost.params import count
from aitrinity.spec.hardware import DeviceSpec
from aitrinity.spec.model import ModelSpec

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


def parse_metrics(text: str, t: float) -> Sample:
    """A :class:`Sample` from vLLM's Prometheus text (``prometheus_client``'s parser)."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as e:  # pragma: no cover - the [vllm] extra brings it
        raise RuntimeError("trinity watch needs prometheus_client: pip install 'aitrinity[watch]'") from e
    got: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            got[s.name] = got.get(s.name, 0.0) + float(s.value)
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
    )


@dataclass(frozen=True)
class Expected:
    """The cost model's busy time for a period's work, per resource."""

    compute_s: float
    memory_s: float
    flops: float
    bytes: float


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
    relieve: list[str] = field(default_factory=list)

    def rates(self) -> Rates:
        """What the server achieved in the period, as the Controller's telemetry: the cost model's FLOPs and bytes
        for the period's tokens over its length (nothing without a model and a device)."""
        if self.expected is None:
            return Rates()
        return Rates(flops_per_s=self.expected.flops / self.period_s, memory_Bps=self.expected.bytes / self.period_s)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rates": self.rates().to_json()}


def expected_busy(m: ModelSpec, dev: DeviceSpec, prompt: float, generated: float, running: float) -> Expected:
    """Busy time of a period's work on ``dev`` by the roofline (see module doc). ``/metrics`` does not give
    the contexts, so attention FLOPs and the KV each step reads are left out: the dense FLOPs, the bf16
    weights once per decode step and each generated token's KV write."""
    params = float(count(m).total)
    flops = 2.0 * params * (prompt + generated)
    steps = generated / max(running, 1.0)
    nbytes = steps * 2.0 * params + generated * kv_bytes_per_token(m, "bf16")  # bf16 weights per step, new KV
    eff = dev.efficiency
    compute = flops / (dev.peak_flops_for("bf16") * eff.compute)
    memory = nbytes / (dev.memory_bandwidth_Bps * eff.memory)
    return Expected(compute, memory, flops, nbytes)


def judge(prev: Sample, now: Sample, m: ModelSpec | None = None, dev: DeviceSpec | None = None) -> Verdict:
    """What bound the server between two reads."""
    dt = max(now.t - prev.t, 1e-9)
    pre = max(now.preemptions - prev.preemptions, 0.0)
    prompt = max(now.prompt_tokens - prev.prompt_tokens, 0.0)
    gen = max(now.generation_tokens - prev.generation_tokens, 0.0)
    running = max(now.running, prev.running)
    exp = expected_busy(m, dev, prompt, gen, running) if m is not None and dev is not None else None
    if pre > 0:
        binds, why = "KV capacity", f"{pre:g} preemption(s): the engine evicted running sequences for KV blocks"
    elif now.waiting > 0 and now.kv_usage >= KV_FULL:
        binds, why = "KV capacity", f"{now.waiting:g} waiting with the KV cache {now.kv_usage:.0%} full"
    elif now.waiting > 0:
        binds, why = "queue", f"{now.waiting:g} waiting with the KV cache {now.kv_usage:.0%} full"
    elif prompt + gen == 0 and now.running == 0:
        binds, why = "idle", "no request ran"
    elif exp is None:
        binds, why = "busy", f"{prompt + gen:g} tokens in the period"
    elif exp.compute_s >= exp.memory_s:
        binds = "compute"
        why = f"{exp.flops / 1e9:.3g} GFLOP take {exp.compute_s:.3g} s, the weight and KV reads {exp.memory_s:.3g} s"
    else:
        binds = "memory bandwidth"
        why = f"{exp.bytes / 1e9:.3g} GB of weight reads take {exp.memory_s:.3g} s, the FLOPs {exp.compute_s:.3g} s"
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
    return f"{head} | binds: {v.binds} ({v.why}{util}){relief}"
