"""Vectorized pricing of many serving plans at once (numpy), for the planner.

The same formulas as :func:`aitrinity.cost.serving.serving_ledger` followed by
:func:`aitrinity.cost.estimate.price`, for rows that share a model, a job, a
system and a layout ``(tp, pp)`` and differ in batch size, the fraction of
the KV cache offloaded to host memory, weight quantization and KV
quantization. A prefix cache, KV compression or weight streaming written in
the scenario's plan applies to every row. ``tests/plan/test_vector_serving.py``
checks every row of small spaces against the scalar ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from aitrinity.cost import collectives as coll
from aitrinity.cost.flops import OPERATORS_PER_LAYER, causal_score_flops, score_flops_per_query, token_flops
from aitrinity.cost.memory import kv_bytes_per_token, kv_shard_factor, kv_tokens_held
from aitrinity.cost.params import count
from aitrinity.cost.serving import CHANNEL_OF_TIER, effects, logits_bytes_per_sequence, prefill_workspace_bytes
from aitrinity.plan.rows import combine, first_failed
from aitrinity.spec.exchanges import KVOffload, KVQuantization, WeightQuantization
from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, ServingJob, System

F = NDArray[np.float64]
Ints = NDArray[np.int64]

WEIGHT_DTYPES = ("none", "fp8", "int8", "int4")
KV_DTYPES = ("none", "fp8", "int8")
REASONS = (
    "feasible",
    "device memory",
    "host (or lower-tier) memory",
    "TTFT above the SLO",
    "TPOT above the SLO",
    "quantization to no fewer bytes",
    "offload needs host memory",
)
RESOURCES = ("compute", "device-memory bandwidth", "link")
SEARCHED = ("kv-offload", "weight-quantization", "kv-quantization")


@dataclass(frozen=True)
class ServingRows:
    batch: Ints
    kv_offload: F
    """Fraction of the KV cache kept in host memory."""
    weight_dtype: Ints  # index into WEIGHT_DTYPES
    kv_dtype: Ints  # index into KV_DTYPES

    def __len__(self) -> int:
        return len(self.batch)


@dataclass(frozen=True)
class ServingPriced:
    feasible: NDArray[np.bool_]
    reason: Ints
    ttft_s: F
    tpot_s: F
    latency_s: F
    tokens_per_s: F
    """Decode rate: batch x in-flight batches x replicas / TPOT."""
    throughput_tokens_per_s: F
    """End to end, prefill included: output tokens in flight / request latency."""
    hbm_bytes: F
    link_bytes: F
    usd_per_million_tokens: F
    joules_per_token: F
    binding: Ints


def row_plan(base: Plan, tp: int, pp: int, f: float, wq: str, kq: str) -> Plan:
    """The scalar plan of one row: the scenario's plan, its searched exchanges replaced by the row's."""
    kept = [x for x in base.exchanges if x.kind not in SEARCHED]
    ex: list[object] = list(kept)
    if f > 0:
        ex.append(KVOffload(kind="kv-offload", tier="host", fraction=f))
    if wq != "none":
        ex.append(WeightQuantization(kind="weight-quantization", dtype=wq))
    if kq != "none":
        ex.append(KVQuantization(kind="kv-quantization", dtype=kq))
    return base.model_copy(update={"tp": tp, "pp": pp, "dp": None, "exchanges": ex})


def price_rows(
    m: ModelSpec,
    job: ServingJob,
    base: Plan,
    system: System,
    tp: int,
    pp: int,
    rows: ServingRows,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
) -> ServingPriced:
    n = len(rows)
    # the scenario's fixed exchanges (prefix cache, KV compression, streaming) as the scalar code sees them
    fixed = base.model_copy(
        update={"tp": tp, "pp": pp, "exchanges": [x for x in base.exchanges if x.kind not in SEARCHED]}
    )
    fplan, fx = effects(fixed)
    B = rows.batch.astype(np.float64)
    P, n_out = job.prompt_tokens, job.output_tokens
    L, h = m.num_layers, m.hidden_size
    act = BYTES_PER_DTYPE[base.compute_dtype]
    base_w = BYTES_PER_DTYPE[fplan.weights_dtype]
    base_kv = BYTES_PER_DTYPE[fplan.cache_dtype]
    wq_bytes = np.array([base_w, *(BYTES_PER_DTYPE[d] for d in WEIGHT_DTYPES[1:])])[rows.weight_dtype]
    kq_bytes = np.array([base_kv, *(BYTES_PER_DTYPE[d] for d in KV_DTYPES[1:])])[rows.kv_dtype]
    quantized = rows.weight_dtype > 0
    pc = count(m)
    f = rows.kv_offload
    ratio = fx.kv_wire_ratio * base_kv / kq_bytes if fx.kv_wire_ratio < 1 else np.ones(n)
    # KVCompression's ratio is bits / (8 x KV bytes): it follows the KV dtype of the row
    kv_tok_unit = kv_bytes_per_token(m, "int8") * kv_shard_factor(m, tp) / pp  # per KV byte per value
    kv_tok = kv_tok_unit * kq_bytes
    weights_unit = (pc.non_expert + pc.routed_experts / base.ep) / (tp * pp)  # parameters per device
    ws_frac = fx.weight_stream.fraction if fx.weight_stream else 0.0
    tf = token_flops(m)

    def add(c_bytes: dict[str, F], c_msgs: dict[str, F], ch: str, nbytes: F, msgs: F) -> None:
        c_bytes[ch] = c_bytes.get(ch, np.zeros(n)) + nbytes
        c_msgs[ch] = c_msgs.get(ch, np.zeros(n)) + msgs

    def weights_read(tokens: F) -> F:
        touched = np.ones_like(tokens)
        if m.moe:
            k, e = m.moe.experts_per_token, m.moe.num_experts
            touched = 1.0 - (1.0 - k / e) ** tokens
        out: F = (pc.non_expert + pc.routed_experts * touched / base.ep) * wq_bytes / (tp * pp)
        return out

    def tp_pp(tokens: F, c_bytes: dict[str, F], c_msgs: dict[str, F]) -> None:
        payload = tokens * h * act
        crosses = coll.crosses_nodes(1, tp, system.devices_per_node) and system.inter_node_link
        if tp > 1:
            ch = "inter_node" if crosses else "intra_node"
            add(
                c_bytes,
                c_msgs,
                ch,
                2 * L * coll.bytes_sent("all-reduce", 1.0, tp) * payload,
                np.full(n, 2.0 * L * coll.steps("all-reduce", tp)),
            )
        if pp > 1:
            cross_pp = coll.crosses_nodes(tp, 2, system.devices_per_node) and system.inter_node_link
            ch = "inter_node" if cross_pp else "intra_node"
            add(c_bytes, c_msgs, ch, (pp - 1) * payload, np.full(n, float(pp - 1)))

    def phase_time(
        flops: F, rows_per_gemm: F, hbm: F, c_bytes: dict[str, F], c_msgs: dict[str, F], operators: F | float
    ) -> tuple[F, F, Ints]:
        eff = system.eff
        curve = (
            eff.compute
            if eff.compute_half_rows <= 0
            else eff.compute * rows_per_gemm / (rows_per_gemm + eff.compute_half_rows)
        )
        compute = flops / (system.device.peak_flops_for(base.compute_dtype) * curve)
        times = [compute, hbm / (system.device.memory_bandwidth_Bps * eff.memory)]
        moved = np.zeros(n)
        links = np.zeros(n)
        for ch in c_bytes:
            spec = system.channel(ch)
            t = c_msgs[ch] * spec.latency_s + c_bytes[ch] / spec.bandwidth_Bps
            times.append(t)
            links = np.maximum(links, t)
            moved = moved + c_bytes[ch]
        binding: Ints = np.argmax(np.stack([compute, times[1], links]), axis=0)
        return combine(times, system) + operators * system.eff.op_overhead_s, moved, binding

    # --- prefill
    cached = int(fx.prefix_hit * P)
    new = P - cached
    pre_flops = B * (new * tf.dense + causal_score_flops(m, cached, new))
    chunk = np.maximum(np.minimum(B * new, fplan.prefill_chunk_tokens), 1.0)
    passes = np.ceil(B * new / chunk)
    read = weights_read(chunk)
    kv_written = B * (kv_tokens_held(m, P) - kv_tokens_held(m, cached)) * kv_tok
    kv_loaded = B * kv_tokens_held(m, cached) * kv_tok
    hbm = passes * read + kv_written + kv_loaded
    pb: dict[str, F] = {}
    pm: dict[str, F] = {}
    tp_pp(B * new, pb, pm)
    if fx.weight_stream:
        add(pb, pm, fx.weight_stream.channel, passes * ws_frac * read * pp, passes * L)
    if fx.prefix_tier != "hbm" and cached:
        add(pb, pm, CHANNEL_OF_TIER[fx.prefix_tier], kv_loaded * ratio * pp, np.full(n, float(L)))
        hbm = hbm + 2 * kv_loaded * (fx.kv_wire_ratio < 1)
    add(pb, pm, "host", f * kv_written * ratio * pp, np.where(f > 0, float(L), 0.0))
    dequant = np.where(quantized, 2.0, 0.0) * passes * read / wq_bytes
    ttft, moved_pre, _ = phase_time(
        pre_flops / tp + dequant * pp, chunk, hbm * pp, pb, pm, passes * L * OPERATORS_PER_LAYER
    )

    # --- decode at the mean context
    c = P + n_out // 2
    dec_flops = B * (tf.dense + score_flops_per_query(m, c))
    kv = B * (kv_tokens_held(m, c) + 1) * kv_tok
    read_d = weights_read(B)
    hbm_d = read_d + kv + 2 * f * kv * (fx.kv_wire_ratio < 1)
    db: dict[str, F] = {}
    dm: dict[str, F] = {}
    tp_pp(B, db, dm)
    if fx.weight_stream:
        add(db, dm, fx.weight_stream.channel, ws_frac * read_d * pp, np.full(n, float(L)))
    add(db, dm, "host", f * kv * ratio * pp, np.where(f > 0, float(L), 0.0))
    dequant_d = np.where(quantized, 2.0, 0.0) * read_d / wq_bytes
    tpot, moved_dec, binding = phase_time(
        dec_flops / tp + dequant_d * pp, B, hbm_d * pp, db, dm, float(L * OPERATORS_PER_LAYER)
    )

    # --- memory
    ctx = P + n_out
    weights = weights_unit * wq_bytes
    kv_mem = B * kv_tokens_held(m, ctx) * kv_tok
    # prefill_workspace_bytes is linear in the chunk's tokens: its value for one token, times min(B·P, chunk)
    buffers = np.minimum(B * P, fplan.prefill_chunk_tokens) * prefill_workspace_bytes(m, fplan, 1)
    buffers = buffers + B * logits_bytes_per_sequence(m)
    cache_share = fx.prefix_capacity_bytes / (tp * pp)
    hbm_mem = weights * (1 - ws_frac) + kv_mem * (1 - f) + buffers + (cache_share if fx.prefix_tier == "hbm" else 0.0)
    host_mem = kv_mem * f + (weights * ws_frac if fx.weight_stream and fx.weight_stream.tier == "host" else 0.0)
    host_mem = host_mem + (cache_share if fx.prefix_tier == "host" else 0.0)

    # --- metrics
    replicas = system.num_devices // (tp * pp)
    latency = ttft + n_out * tpot
    out_tokens = B * n_out * pp * replicas
    price = system.price_per_hour_usd
    usd = price * system.num_devices * latency / 3600.0 / out_tokens * 1e6 if price is not None else np.full(n, np.nan)
    joules = system.power_W * system.num_devices * latency / out_tokens

    host_cap = system.tier_capacity_per_device("host")
    checks = [
        hbm_mem > system.usable_memory_bytes,
        (host_mem > (host_cap or 0.0)) | _lower_tier_over(system, fx.prefix_tier, cache_share, n),
        ttft > ttft_slo_s if ttft_slo_s is not None else np.zeros(n, dtype=bool),
        tpot > tpot_slo_s if tpot_slo_s is not None else np.zeros(n, dtype=bool),
        (quantized & (wq_bytes >= base_w)) | ((rows.kv_dtype > 0) & (kq_bytes >= base_kv)),
        (f > 0) & (host_cap is None),
    ]
    reason = first_failed(checks, n)
    return ServingPriced(
        feasible=reason == 0,
        reason=reason,
        ttft_s=ttft,
        tpot_s=tpot,
        latency_s=latency,
        tokens_per_s=B * pp * replicas / tpot,
        throughput_tokens_per_s=out_tokens / latency,
        hbm_bytes=hbm_mem,
        link_bytes=moved_pre + n_out * moved_dec,
        usd_per_million_tokens=usd,
        joules_per_token=joules,
        binding=binding,
    )


def _lower_tier_over(system: System, tier: str, share: float, n: int) -> NDArray[np.bool_]:
    """A prefix cache in SSD or a remote pool that exceeds the device's share of that tier."""
    if tier not in ("ssd", "remote") or not share:
        return np.zeros(n, dtype=bool)
    return np.full(n, share > (system.tier_capacity_per_device(tier) or 0.0))
