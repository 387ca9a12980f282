"""Ledger of LLM serving (pure): prefill and one decode step of a static batch.

A replica is ``tp · pp`` devices; the system runs ``N / (tp · pp)`` replicas.
Latency (TTFT, TPOT) is that of one batch walking through all pipeline stages,
so PP adds capacity but not speed; ``pp`` batches are in flight for throughput.

Per step (Pope et al. 2022, "Efficiently Scaling Transformer Inference", §2;
LLM-Viewer, Yuan et al. 2024, §2 roofline analysis):

* prefill of ``B`` prompts of ``P`` tokens: ``B·P`` tokens of matmul FLOPs plus
  causal attention scores; reads every weight once per chunk and writes ``B·P``
  KV entries;
* decode at context ``c``: ``B`` tokens of matmul FLOPs plus scores over ``c``
  keys; reads every weight (MoE: the experts the batch touches) and the whole
  KV cache of the batch, writes ``B`` KV entries;
* TP: 2 all-reduces per layer of ``B·tokens·h`` activations (Shoeybi et al. 2019).

The decode step is priced at the mean context ``P + O/2`` of the generation.
Phase quantities (FLOPs, HBM bytes, link bytes) are counted along one batch's
path: one TP rank's work summed over the ``pp`` stages it passes, so that
pricing them on one device gives the batch's latency. Memory is per device.

Exchanges (``plan.exchanges``, see :mod:`aitrinity.cost.effects`):

* weight / KV quantization store fewer bytes; dequantization costs 2 FLOPs per
  weight per forward pass (fused into the GEMM by AWQ/GPTQ-style kernels);
* KV offload keeps a fraction ``f`` of the KV cache in a lower tier and streams
  it in every decode step (FlexGen, Sheng et al. 2023, §4); weight streaming
  does the same for weights, every forward pass;
* a prefix cache with hit rate ``h`` loads the KV of ``h·P`` prompt tokens
  instead of recomputing them (Mooncake, Qin et al. 2025, §5): prefill computes
  ``(1-h)·P`` tokens whose queries attend to the whole prompt;
* KV compression shrinks every KV byte that crosses a link or tier to
  ``bits/8`` of a byte per value, at two extra device-memory passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aitrinity.cost import collectives as coll
from aitrinity.cost.effects import find
from aitrinity.cost.flops import OPERATORS_PER_LAYER, causal_score_flops, score_flops_per_query, token_flops
from aitrinity.cost.ledger import Channel, Flops, Ledger, MemoryItem, Parallelism, PhaseLedger, ServingFacts, Traffic
from aitrinity.cost.memory import kv_bytes_per_token, kv_shard_factor, kv_tokens_held
from aitrinity.cost.params import count
from aitrinity.errors import SpecError
from aitrinity.spec.exchanges import (
    KVCompression,
    KVOffload,
    KVQuantization,
    PrefixCache,
    WeightQuantization,
    WeightStreaming,
)
from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, ServingJob, System, check_plan

CHANNEL_OF_TIER: dict[str, Channel] = {"host": "host", "ssd": "storage", "remote": "remote"}


@dataclass(frozen=True)
class Offload:
    """A fraction of something kept in a lower tier and streamed over that tier's channel."""

    tier: str
    fraction: float

    @property
    def channel(self) -> Channel:
        return CHANNEL_OF_TIER[self.tier]


@dataclass(frozen=True)
class ServingEffects:
    """The serving exchanges of a plan, as numbers (identity when there are none)."""

    kv_offload: Offload | None
    weight_stream: Offload | None
    prefix_hit: float
    prefix_tier: str
    kv_wire_ratio: float
    """Bytes on a link per KV byte of the cache's dtype (KV compression before transfer: bits / 8 / its bytes)."""
    dequant_flops_per_weight: float
    prefix_capacity_bytes: float = 0.0
    """A prefix cache given a capacity holds that many KV bytes in its tier (whole model)."""
    kv_wire_scale: float = 1.0
    """A further factor on the KV bytes that cross a link or tier, whatever the cache's dtype (registered
    techniques' effects set it; the built-in KV compression sets ``kv_wire_ratio``)."""

    @property
    def kv_wire(self) -> float:
        """Bytes on a link per KV byte, every factor applied."""
        return self.kv_wire_ratio * self.kv_wire_scale


ServingEffect = Callable[[Any, Plan, ServingEffects], tuple[Plan, ServingEffects]]
"""What one ``plan.exchanges`` entry does to the serving numbers: (entry, plan, effects so far) -> both after it."""

EXTRA_EFFECTS: dict[str, ServingEffect] = {}
"""The effects of exchanges registered besides the built-in ones, by kind (:func:`aitrinity.plan.registry.register`
fills it). Every pricing path -- the scalar ledger, ``diagnose``'s estimate and the planner's vectorized rows --
reads the exchanges through :func:`effects`, so an effect given here is written once for all of them."""


def effects(plan: Plan) -> tuple[Plan, ServingEffects]:
    """The plan with quantized dtypes applied, and the other serving exchanges as numbers (built-in techniques,
    then registered ones in the plan's order)."""
    eff_plan, fx = _builtin_effects(plan)
    for x in plan.exchanges:
        extra = EXTRA_EFFECTS.get(x.kind)
        if extra is not None:
            eff_plan, fx = extra(x, eff_plan, fx)
    return eff_plan, fx


def _builtin_effects(plan: Plan) -> tuple[Plan, ServingEffects]:
    wq, kq = find(plan, "weight-quantization"), find(plan, "kv-quantization")
    update: dict[str, str] = {}
    if isinstance(wq, WeightQuantization):  # the KV cache keeps its own dtype (it defaults to the weights')
        update["weight_dtype"], update["kv_dtype"] = wq.dtype, plan.cache_dtype
    if isinstance(kq, KVQuantization):
        update["kv_dtype"] = kq.dtype
    eff_plan = plan.model_copy(update=update) if update else plan
    kvo, ws, pc, kc = (find(plan, k) for k in ("kv-offload", "weight-streaming", "prefix-cache", "kv-compression"))
    ratio = 1.0
    if isinstance(kc, KVCompression):
        ratio = kc.bits / (8.0 * BYTES_PER_DTYPE[eff_plan.cache_dtype])
    return eff_plan, ServingEffects(
        kv_offload=Offload(kvo.tier, kvo.fraction) if isinstance(kvo, KVOffload) else None,
        weight_stream=Offload(ws.tier, ws.fraction) if isinstance(ws, WeightStreaming) else None,
        prefix_hit=_hit_rate(pc) if isinstance(pc, PrefixCache) else 0.0,
        prefix_tier=pc.tier if isinstance(pc, PrefixCache) else "hbm",
        kv_wire_ratio=ratio,
        dequant_flops_per_weight=2.0 if isinstance(wq, WeightQuantization) else 0.0,
        prefix_capacity_bytes=(pc.capacity or 0.0) if isinstance(pc, PrefixCache) else 0.0,
    )


def _hit_rate(pc: PrefixCache) -> float:
    if pc.hit_rate is None:  # the API replays the trace and fills it in before pricing
        raise SpecError("plan.exchanges.prefix-cache.hit_rate", None, "a hit rate (replay the trace first)")
    return pc.hit_rate


NO_EFFECTS = ServingEffects(None, None, 0.0, "hbm", 1.0, 0.0)


def weight_bytes_per_device(m: ModelSpec, plan: Plan) -> float:
    """Weights of one device's shard: the model split over ``tp · pp`` (experts also over ``ep``)."""
    pc = count(m)
    wb = BYTES_PER_DTYPE[plan.weights_dtype]
    return (pc.non_expert + pc.routed_experts / plan.ep) * wb / (plan.tp * plan.pp)


def _kv_per_token_per_device(m: ModelSpec, plan: Plan) -> float:
    return kv_bytes_per_token(m, plan.cache_dtype) * kv_shard_factor(m, plan.tp) / plan.pp


def kv_bytes_per_sequence_per_device(m: ModelSpec, plan: Plan, context: int) -> float:
    return kv_tokens_held(m, context) * _kv_per_token_per_device(m, plan)


def prefill_workspace_bytes(m: ModelSpec, plan: Plan, tokens: int) -> float:
    """Transient activations of one prefill chunk of ``tokens`` tokens on one device.

    With flash attention no s x s tensor exists; the widest live set of a layer
    is the residual stream and its normalised copy, Q/K/V and the attention
    output (~4h per token) and the MLP intermediates (3f gated, 2f standard),
    the last two split by TP. The chunk is capped by ``plan.prefill_chunk_tokens``.
    """
    act = BYTES_PER_DTYPE[plan.compute_dtype]
    ffn = m.moe.expert_intermediate_size * m.moe.experts_per_token if m.moe else m.intermediate_size
    width = 2 * m.hidden_size + (2 * m.hidden_size + (3 if m.mlp == "gated" else 2) * ffn) / plan.tp
    return min(tokens, plan.prefill_chunk_tokens) * width * act


def logits_bytes_per_sequence(m: ModelSpec) -> float:
    """fp32 logits of a sequence's newest token (sampling input)."""
    return 4.0 * m.vocab_size


def _on_device(off: Offload | None) -> float:
    return 1.0 - off.fraction if off else 1.0


def max_batch(m: ModelSpec, plan: Plan, system: System, job: ServingJob) -> int:
    """Largest batch whose weights + KV cache + prefill workspace fit in usable device memory
    (and whose offloaded KV and weights fit in their tiers)."""
    plan, fx = effects(plan)
    weights = weight_bytes_per_device(m, plan)
    kv_seq = kv_bytes_per_sequence_per_device(m, plan, job.prompt_tokens + job.output_tokens)
    free = system.usable_memory_bytes - weights * _on_device(fx.weight_stream)
    free -= prefill_workspace_bytes(m, plan, plan.prefill_chunk_tokens)
    fit = max(int(free // (kv_seq * _on_device(fx.kv_offload) + logits_bytes_per_sequence(m))), 0)
    if fx.kv_offload:
        cap = system.tier_capacity_per_device(fx.kv_offload.tier) or 0.0
        ws = fx.weight_stream
        if ws and ws.tier == fx.kv_offload.tier:
            cap -= weights * ws.fraction
        fit = min(fit, max(int(cap // (kv_seq * fx.kv_offload.fraction)), 0))
    return fit


def _experts_touched(m: ModelSpec, tokens: float) -> float:
    """Expected fraction of routed experts a batch of ``tokens`` activates per layer (uniform routing)."""
    if not m.moe:
        return 1.0
    k, n = m.moe.experts_per_token, m.moe.num_experts
    return 1.0 - float((1.0 - k / n) ** tokens)


def _weights_read(m: ModelSpec, plan: Plan, tokens: float) -> float:
    """Weight bytes one device streams for a step processing ``tokens`` tokens."""
    pc = count(m)
    wb = BYTES_PER_DTYPE[plan.weights_dtype]
    touched = pc.non_expert + pc.routed_experts * _experts_touched(m, tokens) / plan.ep
    return touched * wb / (plan.tp * plan.pp)


def _traffic(m: ModelSpec, plan: Plan, system: System, tokens: float) -> list[Traffic]:
    """TP all-reduces (2 per layer, every layer on the path) and PP hops (pp - 1 per batch)."""
    payload = tokens * m.hidden_size * BYTES_PER_DTYPE[plan.compute_dtype]
    found = [
        coll.traffic("TP activations (per layer)", "all-reduce", payload, plan.tp, 2 * m.num_layers, 1, system),
        coll.traffic("PP activations", "p2p", payload, plan.pp, plan.pp - 1, plan.tp, system) if plan.pp > 1 else None,
    ]
    return [t for t in found if t is not None]


def _weight_stream(m: ModelSpec, plan: Plan, fx: ServingEffects, read: float, passes: int) -> list[Traffic]:
    ws = fx.weight_stream
    if not ws:
        return []
    return [coll.transfer("weight streaming", ws.channel, passes * ws.fraction * read * plan.pp, passes * m.num_layers)]


def prefill_phase(
    m: ModelSpec, plan: Plan, system: System, batch: int, prompt: int, fx: ServingEffects = NO_EFFECTS
) -> PhaseLedger:
    """Prefill of ``batch`` prompts of ``prompt`` tokens, along one batch's path (see module doc).

    ``plan`` must already carry quantized dtypes (:func:`effects`).
    """
    cached = int(fx.prefix_hit * prompt)  # tokens whose KV is loaded, not recomputed
    new = prompt - cached
    total = batch * (new * token_flops(m).dense + causal_score_flops(m, cached, new))
    chunk = max(min(batch * new, plan.prefill_chunk_tokens), 1)
    passes = -(-batch * new // chunk)  # each chunk streams the weights again
    kv_tok = _kv_per_token_per_device(m, plan)
    kv_written = batch * (kv_tokens_held(m, prompt) - kv_tokens_held(m, cached)) * kv_tok
    kv_loaded = batch * kv_tokens_held(m, cached) * kv_tok
    read = _weights_read(m, plan, chunk)
    hbm = passes * read + kv_written + kv_loaded
    traffic = _traffic(m, plan, system, batch * new) + _weight_stream(m, plan, fx, read, passes)
    if fx.prefix_tier != "hbm" and kv_loaded:
        ch = CHANNEL_OF_TIER[fx.prefix_tier]
        traffic.append(coll.transfer("prefix KV load", ch, kv_loaded * fx.kv_wire * plan.pp, m.num_layers))
        hbm += 2 * kv_loaded * (fx.kv_wire_ratio < 1)  # decompress: read packed, write full
    if fx.kv_offload:
        off = fx.kv_offload
        traffic.append(
            coll.transfer(
                "KV offload (write)", off.channel, off.fraction * kv_written * fx.kv_wire * plan.pp, m.num_layers
            )
        )
    dequant = fx.dequant_flops_per_weight * passes * read / BYTES_PER_DTYPE[plan.weights_dtype]
    return PhaseLedger(
        phase="prefill",
        tokens=float(batch * prompt),
        flops=Flops(forward=total / plan.tp, exchange=dequant * plan.pp, model_total=total),
        gemm_rows=float(chunk),
        hbm_bytes=hbm * plan.pp,
        traffic=traffic,
        operators=passes * m.num_layers * OPERATORS_PER_LAYER,
    )


def decode_phase(
    m: ModelSpec, plan: Plan, system: System, batch: int, context: int, fx: ServingEffects = NO_EFFECTS
) -> PhaseLedger:
    """One decode step of ``batch`` sequences whose context is ``context`` tokens."""
    total = batch * (token_flops(m).dense + score_flops_per_query(m, context))
    kv = batch * (kv_tokens_held(m, context) + 1) * _kv_per_token_per_device(m, plan)  # read all, write one
    read = _weights_read(m, plan, batch)
    traffic = _traffic(m, plan, system, batch) + _weight_stream(m, plan, fx, read, 1)
    hbm = read + kv
    if fx.kv_offload:
        off = fx.kv_offload
        moved = off.fraction * kv
        traffic.append(coll.transfer("KV offload (stream in)", off.channel, moved * fx.kv_wire * plan.pp, m.num_layers))
        hbm += 2 * moved * (fx.kv_wire_ratio < 1)
    dequant = fx.dequant_flops_per_weight * read / BYTES_PER_DTYPE[plan.weights_dtype]
    return PhaseLedger(
        phase="decode_step",
        tokens=float(batch),
        flops=Flops(forward=total / plan.tp, exchange=dequant * plan.pp, model_total=total),
        gemm_rows=float(batch),
        hbm_bytes=hbm * plan.pp,
        traffic=traffic,
        operators=m.num_layers * OPERATORS_PER_LAYER,
    )


def _memory(m: ModelSpec, plan: Plan, fx: ServingEffects, bsz: int, prompt: int, ctx: int) -> list[MemoryItem]:
    weights = weight_bytes_per_device(m, plan)
    kv = bsz * kv_bytes_per_sequence_per_device(m, plan, ctx)
    items = [
        MemoryItem(category="weights", bytes=weights * _on_device(fx.weight_stream)),
        MemoryItem(category="kv_cache", bytes=kv * _on_device(fx.kv_offload)),
        MemoryItem(
            category="buffers",
            bytes=prefill_workspace_bytes(m, plan, bsz * prompt) + bsz * logits_bytes_per_sequence(m),
        ),
    ]
    if fx.weight_stream:
        items.append(
            MemoryItem(
                tier=fx.weight_stream.tier,
                category="weights",
                bytes=weights * fx.weight_stream.fraction,
            )
        )
    if fx.kv_offload:
        items.append(
            MemoryItem(
                tier=fx.kv_offload.tier,
                category="kv_cache",
                bytes=kv * fx.kv_offload.fraction,
            )
        )
    if fx.prefix_capacity_bytes:  # the replica's prefix cache, spread over its devices
        tier = "hbm" if fx.prefix_tier == "hbm" else fx.prefix_tier
        items.append(
            MemoryItem(
                tier=tier,
                category="kv_cache",
                bytes=fx.prefix_capacity_bytes / (plan.tp * plan.pp),
            )
        )
    return items


def serving_ledger(name: str, m: ModelSpec, job: ServingJob, plan: Plan, system: System) -> Ledger:
    dp = check_plan(plan, m, system, training=False)
    ctx = job.prompt_tokens + job.output_tokens
    if ctx > m.max_seq_len:
        raise SpecError(
            "workload.serving", ctx, f"prompt + output tokens at most {m.name}'s max_seq_len ({m.max_seq_len})"
        )
    fit = max_batch(m, plan, system, job)
    plan, fx = effects(plan)
    batch = fit if job.batch == "max" else job.batch
    bsz = max(batch, 1)  # price one request even when none fits; the memory check reports it
    prompt, out = job.prompt_tokens, job.output_tokens
    pc = count(m)
    return Ledger(
        scenario=name,
        model=m.name,
        params_total=pc.total,
        params_active=pc.active(m),
        num_devices=system.num_devices,
        compute_dtype=plan.compute_dtype,
        parallelism=Parallelism(
            tp=plan.tp,
            pp=plan.pp,
            dp=dp,
            ep=plan.ep,
            zero=0,
            recompute="none",
            sequence_parallel=plan.sequence_parallel,
        ),
        phases=[
            prefill_phase(m, plan, system, bsz, prompt, fx),
            decode_phase(m, plan, system, bsz, prompt + out // 2, fx),  # at the mean context
        ],
        memory=_memory(m, plan, fx, bsz, prompt, ctx),
        serving=ServingFacts(
            prompt_tokens=prompt,
            output_tokens=out,
            batch=batch,
            max_batch=fit,
            kv_bytes_per_token=kv_bytes_per_token(m, plan.cache_dtype),
            kv_bytes_per_token_per_device=_kv_per_token_per_device(m, plan),
            replicas=dp,
            pipeline_batches_in_flight=plan.pp,
        ),
    )
