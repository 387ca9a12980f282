"""Ledger of LLM serving (pure): prefill and one decode step of a static batch.

A replica is ``tp · pp`` devices; the system runs ``N / (tp · pp)`` replicas.
Latency (TTFT, TPOT) is that of one batch walking through all pipeline stages,
so PP adds capacity but not speed; ``pp`` batches are in flight for throughput.

Per step (Pope et al. 2022, "Efficiently Scaling Transformer Inference", §2;
LLM-Viewer, Yuan et al. 2024, §2 roofline analysis):

* prefill of ``B`` prompts of ``P`` tokens: ``B·P`` tokens of matmul FLOPs plus
  causal attention scores; reads every weight once and writes ``B·P`` KV entries;
* decode at context ``c``: ``B`` tokens of matmul FLOPs plus scores over ``c``
  keys; reads every weight (MoE: the experts the batch touches) and the whole
  KV cache of the batch, writes ``B`` KV entries;
* TP: 2 all-reduces per layer of ``B·tokens·h`` activations (Shoeybi et al. 2019).

The decode step is priced at the mean context ``P + O/2`` of the generation.
Phase quantities (FLOPs, HBM bytes, link bytes) are counted along one batch's
path: one TP rank's work summed over the ``pp`` stages it passes, so that
pricing them on one device gives the batch's latency. Memory is per device.
"""

from __future__ import annotations

from aitrinity.cost import collectives as coll
from aitrinity.cost.flops import causal_score_flops, score_flops_per_query, token_flops
from aitrinity.cost.ledger import Flops, Ledger, MemoryItem, Parallelism, PhaseLedger, ServingFacts, Traffic
from aitrinity.cost.memory import kv_bytes_per_token, kv_shard_factor, kv_tokens_held
from aitrinity.cost.params import count
from aitrinity.errors import SpecError
from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, ServingJob, System, check_plan


def weight_bytes_per_device(m: ModelSpec, plan: Plan) -> float:
    """Weights one device holds: the model split over ``tp · pp`` (experts also over ``ep``)."""
    pc = count(m)
    wb = BYTES_PER_DTYPE[plan.weights_dtype]
    return (pc.non_expert + pc.routed_experts / plan.ep) * wb / (plan.tp * plan.pp)


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


def max_batch(m: ModelSpec, plan: Plan, system: System, job: ServingJob) -> int:
    """Largest batch whose weights + KV cache + prefill workspace fit in usable device memory."""
    free = system.usable_memory_bytes - weight_bytes_per_device(m, plan)
    free -= prefill_workspace_bytes(m, plan, plan.prefill_chunk_tokens)
    per_seq = kv_bytes_per_sequence_per_device(m, plan, job.prompt_tokens + job.output_tokens)
    per_seq += logits_bytes_per_sequence(m)
    return max(int(free // per_seq), 0)


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


def _kv_per_token_per_device(m: ModelSpec, plan: Plan) -> float:
    return kv_bytes_per_token(m, plan.cache_dtype) * kv_shard_factor(m, plan.tp) / plan.pp


def prefill_phase(m: ModelSpec, plan: Plan, system: System, batch: int, prompt: int) -> PhaseLedger:
    """Prefill of ``batch`` prompts of ``prompt`` tokens, along one batch's path (see module doc)."""
    total = batch * (prompt * token_flops(m).dense + causal_score_flops(m, 0, prompt))
    chunk = min(batch * prompt, plan.prefill_chunk_tokens)
    passes = -(-batch * prompt // chunk)  # each chunk streams the weights again
    kv_written = batch * kv_tokens_held(m, prompt) * _kv_per_token_per_device(m, plan)
    return PhaseLedger(
        phase="prefill",
        tokens=float(batch * prompt),
        flops=Flops(forward=total / plan.tp, model_total=total),
        gemm_rows=float(chunk),
        hbm_bytes=(passes * _weights_read(m, plan, chunk) + kv_written) * plan.pp,
        traffic=_traffic(m, plan, system, batch * prompt),
    )


def decode_phase(m: ModelSpec, plan: Plan, system: System, batch: int, context: int) -> PhaseLedger:
    """One decode step of ``batch`` sequences whose context is ``context`` tokens."""
    total = batch * (token_flops(m).dense + score_flops_per_query(m, context))
    kv = batch * (kv_tokens_held(m, context) + 1) * _kv_per_token_per_device(m, plan)  # read all, write one
    return PhaseLedger(
        phase="decode_step",
        tokens=float(batch),
        flops=Flops(forward=total / plan.tp, model_total=total),
        gemm_rows=float(batch),
        hbm_bytes=(_weights_read(m, plan, batch) + kv) * plan.pp,
        traffic=_traffic(m, plan, system, batch),
    )


def serving_ledger(name: str, m: ModelSpec, job: ServingJob, plan: Plan, system: System) -> Ledger:
    dp = check_plan(plan, m, system, training=False)
    ctx = job.prompt_tokens + job.output_tokens
    if ctx > m.max_seq_len:
        raise SpecError(
            "workload.serving", ctx, f"prompt + output tokens at most {m.name}'s max_seq_len ({m.max_seq_len})"
        )
    fit = max_batch(m, plan, system, job)
    batch = fit if job.batch == "max" else job.batch
    bsz = max(batch, 1)  # price one request even when none fits; the memory check reports it
    prompt, out = job.prompt_tokens, job.output_tokens
    kvb = kv_bytes_per_token(m, plan.cache_dtype)

    # prefill
    prefill = prefill_phase(m, plan, system, bsz, prompt)
    decode = decode_phase(m, plan, system, bsz, prompt + out // 2)  # at the mean context
    memory = [
        MemoryItem(category="weights", bytes=weight_bytes_per_device(m, plan)),
        MemoryItem(category="kv_cache", bytes=bsz * kv_bytes_per_sequence_per_device(m, plan, ctx)),
        MemoryItem(
            category="buffers",
            bytes=prefill_workspace_bytes(m, plan, bsz * prompt) + bsz * logits_bytes_per_sequence(m),
        ),
    ]
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
        phases=[prefill, decode],
        memory=memory,
        serving=ServingFacts(
            prompt_tokens=prompt,
            output_tokens=out,
            batch=batch,
            max_batch=fit,
            kv_bytes_per_token=kvb,
            kv_bytes_per_token_per_device=_kv_per_token_per_device(m, plan),
            replicas=dp,
            pipeline_batches_in_flight=plan.pp,
        ),
    )
