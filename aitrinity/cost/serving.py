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

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from aitrinity.cost import collectives as coll
from aitrinity.cost.effects import find
from aitrinity.cost.flops import OPERATORS_PER_LAYER, causal_score_flops, score_flops_per_query, token_flops
from aitrinity.cost.ledger import Channel, Flops, Ledger, MemoryItem, Parallelism, PhaseLedger, ServingFacts
from aitrinity.cost.memory import kv_bytes_per_token, kv_shard_factor, kv_tokens_held
from aitrinity.cost.operators import cp_merge_bytes, cp_ring_bytes, ulysses_bytes
from aitrinity.cost.params import ParamCount, count
from aitrinity.cost.speculation import Speculation, draft_model
from aitrinity.errors import SpecError
from aitrinity.spec.exchanges import (
    KVCompression,
    KVOffload,
    KVQuantization,
    PrefixCache,
    SpeculativeDecoding,
    WeightQuantization,
    WeightStreaming,
)
from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, ServingJob, System, check_plan

F = NDArray[np.float64]
Ints = NDArray[np.int64]

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
    speculation: Speculation | None = None
    """A speculative decoder (:mod:`aitrinity.cost.speculation`): decode steps verify its drafts."""

    @property
    def kv_wire(self) -> float:
        """Bytes on a link per KV byte, every factor applied."""
        return self.kv_wire_ratio * self.kv_wire_scale


ServingEffect = Callable[[Any, Plan, ServingEffects], tuple[Plan, ServingEffects]]
"""What one ``plan.exchanges`` entry does to the serving numbers: (entry, plan, effects so far) -> both after it."""

EXTRA_EFFECTS: dict[str, ServingEffect] = {}
"""The effects of exchanges registered besides the built-in ones, by kind (:func:`aitrinity.plan.registry.register`
fills it). Every pricing path -- the one-plan ledger, ``diagnose``'s estimate and the planner's vectorized rows --
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
        speculation=_speculation(find(plan, "speculative-decoding")),
    )


def _speculation(x: object) -> Speculation | None:
    if not isinstance(x, SpeculativeDecoding):
        return None
    return Speculation(x.draft_tokens, x.acceptance, x.draft_layers)


def _hit_rate(pc: PrefixCache) -> float:
    if pc.hit_rate is None:  # the API replays the trace and fills it in before pricing
        raise SpecError("plan.exchanges.prefix-cache.hit_rate", None, "a hit rate (replay the trace first)")
    return pc.hit_rate


NO_EFFECTS = ServingEffects(None, None, 0.0, "hbm", 1.0, 0.0)


def shard_weight_bytes(m: ModelSpec, dtype: str, tp: int, pp: int = 1, ep: int = 1) -> float:
    """Weights of one device's shard: the model split over ``tp · pp`` (experts also over ``ep``)."""
    pc = count(m)
    return (pc.non_expert + pc.routed_experts / ep) * BYTES_PER_DTYPE[dtype] / (tp * pp)


def weight_bytes_per_device(m: ModelSpec, plan: Plan) -> float:
    return shard_weight_bytes(m, plan.weights_dtype, plan.tp, plan.pp, plan.ep)


def shard_kv_bytes_per_token(m: ModelSpec, dtype: str, tp: int, pp: int = 1) -> float:
    """KV bytes per token one device holds: its TP share of the KV heads, its stage's layers."""
    return kv_bytes_per_token(m, dtype) * kv_shard_factor(m, tp) / pp


def kv_bytes_per_token_per_device(m: ModelSpec, plan: Plan) -> float:
    """KV-cache bytes one device holds per token of a sequence (its share under tensor, pipeline and context
    parallelism), in the plan's cache dtype."""
    return shard_kv_bytes_per_token(m, plan.cache_dtype, plan.tp, plan.pp) / plan.cp


def kv_bytes_per_sequence_per_device(m: ModelSpec, plan: Plan, context: int) -> float:
    return kv_tokens_held(m, context) * kv_bytes_per_token_per_device(m, plan)


def workspace_width(m: ModelSpec, tp: Any) -> Any:
    """Activation width per token on one device (``tp``: a degree, or one per row)."""
    ffn = m.moe.expert_intermediate_size * m.moe.experts_per_token if m.moe else m.intermediate_size
    return 2 * m.hidden_size + (2 * m.hidden_size + (3 if m.mlp == "gated" else 2) * ffn) / tp


def prefill_workspace_bytes(m: ModelSpec, plan: Plan, tokens: int) -> float:
    """Transient activations of one prefill chunk of ``tokens`` tokens on one device.

    With flash attention no s x s tensor exists; the widest live set of a layer
    is the residual stream and its normalised copy, Q/K/V and the attention
    output (~4h per token) and the MLP intermediates (3f gated, 2f standard),
    the last two split by TP. The chunk is capped by ``plan.prefill_chunk_tokens``.
    """
    width: float = workspace_width(m, plan.tp)
    return min(tokens, plan.prefill_chunk_tokens) * width * BYTES_PER_DTYPE[plan.compute_dtype]


def logits_bytes_per_sequence(m: ModelSpec) -> float:
    """fp32 logits of a sequence's newest token (sampling input)."""
    return 4.0 * m.vocab_size


def _on_device(off: Offload | None) -> float:
    return 1.0 - off.fraction if off else 1.0


def max_batch(m: ModelSpec, plan: Plan, system: System, job: ServingJob) -> int:
    """Largest batch whose device memory -- weights, KV cache, prefill workspace, logits, a prefix cache in HBM, as
    the ledger counts it (:meth:`ServingArrays.device_bytes`) -- fits in usable device memory (and whose offloaded KV
    and weights fit in their tiers): the exact boundary of the ledger's memory check."""
    plan, fx = effects(plan)
    weights = weight_bytes_per_device(m, plan)
    prompt, ctx = job.prompt_tokens, job.output_tokens + job.prompt_tokens
    kv_seq = kv_bytes_per_sequence_per_device(m, plan, ctx)
    arrays, usable = plan_arrays(m, plan, fx), system.usable_memory_bytes

    def fits(b: int) -> bool:
        return bool(arrays.device_bytes(arrays.memory(np.array([float(b)]), prompt, ctx))[0] <= usable)

    # each sequence adds its KV and logits, the workspace at most a chunk: bisect between the bounds those give
    per_seq = kv_seq * _on_device(fx.kv_offload) + logits_bytes_per_sequence(m)
    free = usable - weights * _on_device(fx.weight_stream)
    lo = int(max(free - prefill_workspace_bytes(m, plan, plan.prefill_chunk_tokens), 0.0) // per_seq)
    hi = int(max(free, 0.0) // per_seq) + 1
    lo = lo if fits(lo) else 0  # fits(lo) (or 0: not even one), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    fit = lo
    if fx.kv_offload:
        cap = system.tier_capacity_per_device(fx.kv_offload.tier) or 0.0
        ws = fx.weight_stream
        if ws and ws.tier == fx.kv_offload.tier:
            cap -= weights * ws.fraction
        fit = min(fit, max(int(cap // (kv_seq * fx.kv_offload.fraction)), 0))
    return fit


# ---------------------------------------------------------------------------------------------- rows and columns
# The phases and memory are computed once, on arrays: one row per candidate (batch, KV offload fraction, weight and
# KV quantization) of a layout. The planner prices many rows (aitrinity.plan.vector_serving); the ledger of one plan
# is a batch of one.

WEIGHT_DTYPES = ("none", "fp8", "int8", "int4")
"""Weight quantization of a row (``ServingRows.weight_dtype`` indexes it; "none": the plan's own dtype)."""
KV_DTYPES = ("none", "fp8", "int8")
"""KV-cache quantization of a row ("none": the plan's own cache dtype)."""


@dataclass(frozen=True)
class ServingRows:
    """Candidates, one per row: the layout (TP, PP and EP degrees) and the searched values."""

    batch: Ints
    kv_offload: F
    """Fraction of the KV cache kept in a lower tier (``ServingArrays.kv_tier``)."""
    weight_dtype: Ints  # index into WEIGHT_DTYPES
    kv_dtype: Ints  # index into KV_DTYPES
    tp: Ints
    pp: Ints
    ep: Ints
    cp: Ints | None = None
    """Context parallelism (None: 1 on every row)."""

    def __len__(self) -> int:
        return len(self.batch)


@dataclass(frozen=True)
class PhaseColumns:
    """A phase of every row along one batch's path (see module doc)."""

    tokens: F
    forward: F
    """FLOPs on one TP rank: the model's total / tp."""
    exchange: F
    """Dequantization of quantized weights."""
    model_total: F
    gemm_rows: F
    hbm_bytes: F
    streams: list[coll.Stream]
    operators: F

    def ledger(self, phase: str, i: int, system: System) -> PhaseLedger:
        """Row ``i`` as the ledger's phase."""
        return PhaseLedger(
            phase=phase,
            tokens=float(self.tokens[i]),
            flops=Flops(
                forward=float(self.forward[i]),
                exchange=float(self.exchange[i]),
                model_total=float(self.model_total[i]),
            ),
            gemm_rows=float(self.gemm_rows[i]),
            hbm_bytes=float(self.hbm_bytes[i]),
            traffic=[t for t in (x.traffic(i, system) for x in self.streams) if t is not None],
            operators=float(self.operators[i]),
        )


@dataclass(frozen=True)
class MemoryColumns:
    """Resident bytes per device of every row, by item."""

    weights: F
    """Before weight streaming moves a share to its tier."""
    kv_cache: F
    """Before KV offload moves a share to its tier."""
    buffers: F
    prefix_cache: F
    """The replica's prefix cache, spread over its devices (in ``fx.prefix_tier``)."""


@dataclass(frozen=True)
class RowFactors:
    """Per row: bytes of a weight and of a KV value (its quantization), KV bytes per token on one device, bytes on a
    link per KV byte, and dequantization FLOPs per weight."""

    weight_bytes: F
    kv_bytes: F
    kv_per_token: F
    kv_wire: F
    dequant_flops: F


@dataclass(frozen=True)
class ServingArrays:
    """The phases and memory of every row: ``plan`` carries the scenario's dtypes and exchanges as
    :func:`effects` applied them, the rows their own layout (TP, PP, EP degrees; the plan's are not read), quantization
    and KV offload on top."""

    m: ModelSpec
    plan: Plan
    fx: ServingEffects
    rows: ServingRows
    kv_tier: str = "host"
    """Where a row's offloaded KV lives."""

    @cached_property
    def _degrees(self) -> tuple[F, F, F]:
        """The rows' TP, PP and EP degrees as floats."""
        r = self.rows
        return r.tp.astype(np.float64), r.pp.astype(np.float64), r.ep.astype(np.float64)

    @cached_property
    def _cp(self) -> F:
        """The rows' context-parallel degrees: each prompt's tokens and each sequence's KV split over ``cp`` groups of
        ``tp`` devices (pass-KV ring attention for a prompt, Yang et al. 2024; decodes run on every rank, each
        attending its shard of the context and merging the partial results)."""
        cp = self.rows.cp
        return np.ones(len(self.rows)) if cp is None else cp.astype(np.float64)

    @cached_property
    def per_row(self) -> RowFactors:
        """What each row's quantization and the plan's exchanges make of a weight and a KV value."""
        m, plan, fx, rows = self.m, self.plan, self.fx, self.rows
        base_w, base_kv = BYTES_PER_DTYPE[plan.weights_dtype], BYTES_PER_DTYPE[plan.cache_dtype]
        wq = np.array([base_w, *(BYTES_PER_DTYPE[d] for d in WEIGHT_DTYPES[1:])])[rows.weight_dtype]
        kq = np.array([base_kv, *(BYTES_PER_DTYPE[d] for d in KV_DTYPES[1:])])[rows.kv_dtype]
        # KVCompression's ratio is bits / (8 x KV bytes): it follows the KV dtype of the row; the scale does not
        ratio = fx.kv_wire_ratio * base_kv / kq if fx.kv_wire_ratio < 1 else np.ones(len(rows))
        ratio = ratio * fx.kv_wire_scale
        kv_tok = kv_bytes_per_token(m, "int8") * kv_shard_factor(m, rows.tp) / rows.pp * kq  # dtype bytes: powers of 2
        kv_tok = kv_tok / self._cp
        dequant = np.where(rows.weight_dtype > 0, 2.0, fx.dequant_flops_per_weight)
        return RowFactors(wq, kq, kv_tok, ratio, dequant)

    @cached_property
    def _rows_const(self) -> tuple[NDArray[np.bool_], F, F, F]:
        """Per row, the same in every phase: (all true, TP all-reduces, PP hops, KV offload messages)."""
        m, f, n = self.m, self.rows.kv_offload, len(self.rows)
        yes = np.ones(n, dtype=np.bool_)
        offload = np.where(f > 0, 1.0 * m.num_layers, 0.0)
        return yes, np.full(n, 2.0 * m.num_layers), self._degrees[1] - 1.0, offload

    @cached_property
    def _params(self) -> ParamCount:
        return count(self.m)

    def weights_read(self, tokens: F) -> F:
        """Weight bytes one device streams for a step processing ``tokens`` tokens (MoE: the experts they touch,
        uniform routing)."""
        m, pc, r = self.m, self._params, self.rows
        touched: F | float = 1.0
        if m.moe:
            k, e = m.moe.experts_per_token, m.moe.num_experts
            touched = 1.0 - (1.0 - k / e) ** tokens
        wq = self.per_row.weight_bytes
        out: F = (pc.non_expert + pc.routed_experts * touched / r.ep) * wq / (r.tp * r.pp)
        return out

    def _tp_pp(self, tokens: F, purpose: str) -> list[coll.Stream]:
        """TP all-reduces (2 per layer, every layer on the path) and PP hops (pp - 1 per batch, for the rows with
        ``pp > 1``)."""
        m, r = self.m, self.rows
        payload = tokens * m.hidden_size * BYTES_PER_DTYPE[self.plan.compute_dtype]
        yes, ar, hops, _ = self._rows_const
        out = [coll.Stream("TP activations (per layer)", "all-reduce", payload, ar, yes, r.tp, 1)]
        piped = r.pp > 1
        if piped.any():
            out.append(coll.Stream(purpose, "p2p", payload, hops, piped, r.pp, r.tp))
        return out

    def _weight_stream(self, read: F, passes: F) -> list[coll.Stream]:
        ws = self.fx.weight_stream
        if not ws:
            return []
        yes = self._rows_const[0]
        nbytes = passes * ws.fraction * read * self.rows.pp
        return [coll.Stream("weight streaming", "p2p", nbytes, passes * self.m.num_layers, yes, tier=ws.channel)]

    def _kv_offload(self, purpose: str, nbytes: F) -> coll.Stream:
        msgs = self._rows_const[3]
        return coll.Stream(purpose, "p2p", nbytes, msgs, msgs > 0, tier=CHANNEL_OF_TIER[self.kv_tier])

    def prefill(self, batch: F, prompt: int) -> PhaseColumns:
        """Prefill of ``batch`` prompts of ``prompt`` tokens per row."""
        m, plan, fx = self.m, self.plan, self.fx
        f = self.per_row
        tp, pp, _ = self._degrees
        wq, kv_tok, ratio, dequant_per = f.weight_bytes, f.kv_per_token, f.kv_wire, f.dequant_flops
        cached = int(fx.prefix_hit * prompt)  # tokens whose KV is loaded, not recomputed
        new = prompt - cached
        total = batch * (new * token_flops(m).dense + causal_score_flops(m, cached, new))
        chunk = np.maximum(np.minimum(batch * new, plan.prefill_chunk_tokens), 1.0)
        passes = np.ceil(batch * new / chunk)  # each chunk streams the weights again
        cp = self._cp
        read = self.weights_read(chunk / cp)
        kv_written = batch * (kv_tokens_held(m, prompt) - kv_tokens_held(m, cached)) * kv_tok
        kv_loaded = batch * kv_tokens_held(m, cached) * kv_tok
        hbm = passes * read + kv_written + kv_loaded
        streams = self._tp_pp(batch * new / cp, "PP activations") + self._weight_stream(read, passes)
        if np.any(cp > 1) and plan.cp_method == "ulysses":  # Q, K, V to the head split and the outputs back
            heads, kv_heads = m.num_attention_heads / tp, np.maximum(m.kv_heads / tp, 1.0)
            qkv, back = ulysses_bytes(m, heads, kv_heads, batch * new / cp)
            layers = np.full(len(batch), 2.0 * m.num_layers)  # two all-to-alls a layer, of (qkv + back) / 2 each
            group, stride = cp.astype(np.int64), self.rows.tp
            both, name = (qkv + back) / 2.0, "CP Ulysses all-to-all (per layer)"
            streams.append(coll.Stream(name, "all-to-all", both, layers, cp > 1, group, stride))
        elif np.any(cp > 1):  # ring attention, layer by layer: the K and V of prompt and prefix round, or the queries
            per_token = kv_tok * cp / m.num_layers  # one layer's K and V of a token on a TP rank
            heads = m.num_attention_heads / tp
            ring = cp_ring_bytes(m, heads, per_token, batch * new, batch * kv_tokens_held(m, prompt))
            layers = np.full(len(batch), float(m.num_layers))
            group, stride = cp.astype(np.int64), self.rows.tp
            streams.append(
                coll.Stream("CP ring attention (per layer)", "all-gather", ring, layers, cp > 1, group, stride)
            )
        if fx.prefix_tier != "hbm" and cached:
            ch = CHANNEL_OF_TIER[fx.prefix_tier]
            moved = kv_loaded * ratio * pp
            load = np.full(len(batch), float(m.num_layers))
            streams.append(coll.Stream("prefix KV load", "p2p", moved, load, kv_loaded > 0, tier=ch))
            hbm = hbm + 2 * kv_loaded * (fx.kv_wire_ratio < 1)  # decompress: read packed, write full
        streams.append(self._kv_offload("KV offload (write)", self.rows.kv_offload * kv_written * ratio * pp))
        dequant = dequant_per * passes * read / wq
        return PhaseColumns(
            tokens=batch * prompt,
            forward=total / (tp * cp),
            exchange=dequant * pp,
            model_total=total,
            gemm_rows=chunk / cp,
            hbm_bytes=hbm * pp,
            streams=streams,
            operators=passes * m.num_layers * OPERATORS_PER_LAYER,
        )

    def decode(self, batch: F, context: int) -> PhaseColumns:
        """One decode step of ``batch`` sequences per row whose context is ``context`` tokens."""
        m, fx = self.m, self.fx
        f = self.per_row
        tp, pp, _ = self._degrees
        wq, kv_tok, ratio, dequant_per = f.weight_bytes, f.kv_per_token, f.kv_wire, f.dequant_flops
        dense, scores = batch * token_flops(m).dense, batch * score_flops_per_query(m, context)
        total = dense + scores
        kv = batch * (kv_tokens_held(m, context) + 1) * kv_tok  # read all, write one
        read = self.weights_read(batch)
        moved = self.rows.kv_offload * kv
        hbm = read + kv + 2 * moved * (fx.kv_wire_ratio < 1)
        streams = self._tp_pp(batch, "PP activations") + self._weight_stream(read, np.ones(len(batch)))
        cp = self._cp
        if np.any(cp > 1):  # each rank's partial attention outputs (and log-sum-exps) of every decode, gathered
            heads = m.num_attention_heads / tp
            if self.plan.cp_method == "ulysses":  # each rank's heads' outputs, the whole gathered
                partial = batch * heads * m.v_head_dim * 2.0
            else:
                partial = cp_merge_bytes(m, heads, batch, cp)
            layers = np.full(len(batch), float(m.num_layers))
            group, stride = cp.astype(np.int64), self.rows.tp
            merge = coll.Stream("CP attention merge (per layer)", "all-gather", partial, layers, cp > 1, group, stride)
            streams.append(merge)
        streams.append(self._kv_offload("KV offload (stream in)", moved * ratio * pp))
        dequant = dequant_per * read / wq
        cols = PhaseColumns(
            tokens=batch.astype(np.float64),
            forward=(dense + scores / cp) / tp,
            exchange=dequant * pp,
            model_total=total,
            gemm_rows=batch.astype(np.float64),
            hbm_bytes=hbm * pp,
            streams=streams,
            operators=np.full(len(batch), float(m.num_layers * OPERATORS_PER_LAYER)),
        )
        return cols if fx.speculation is None else self._speculative(cols, batch, context, fx.speculation)

    def _speculative(self, one: PhaseColumns, batch: F, context: int, sp: Speculation) -> PhaseColumns:
        """The decode phase per output token of a speculative decoder (:mod:`aitrinity.cost.speculation`): a
        verification step of ``k + 1`` positions per sequence (their FLOPs, the experts they touch, their KV
        written; the KV read once) and ``k`` draft passes, over the ``E`` tokens it yields."""
        m, f, r = self.m, self.per_row, self.rows
        tp, pp, _ = self._degrees
        k, q = sp.draft_tokens, sp.draft_tokens + 1.0
        dm = draft_model(m, sp)
        share = sp.draft_layers / m.num_layers  # of the model's blocks (and of its KV) a draft pass runs
        per_token = token_flops(m).dense + score_flops_per_query(m, context)
        drafted = token_flops(dm).dense + score_flops_per_query(dm, context)
        total = batch * (q * per_token + k * drafted)
        pd = count(dm)
        # the draft's blocks and its output head (its embedding rows are gathered, not streamed)
        draft_read = (pd.non_expert - pd.embedding + pd.routed_experts / r.ep) * f.weight_bytes / (r.tp * r.pp)
        one_read = self.weights_read(batch)
        more_read = self.weights_read(batch * q) - one_read + k * draft_read
        more_kv = batch * f.kv_per_token * (q - 1.0 + k * share * (kv_tokens_held(m, context) + 1.0))
        per = 1.0 / sp.tokens_per_step
        rows = ("TP activations (per layer)", "PP activations")  # what scales with the positions verified
        streams = [
            dataclasses.replace(x, payload=x.payload * (q if x.purpose in rows else 1.0), times=x.times * per)
            for x in one.streams
        ]
        return PhaseColumns(
            tokens=one.tokens,
            forward=total / tp * per,
            exchange=one.exchange * (1.0 + more_read / one_read) * per,
            model_total=total * per,
            gemm_rows=batch * q,
            hbm_bytes=(one.hbm_bytes + (more_read + more_kv) * pp) * per,
            streams=streams,
            operators=one.operators * (1.0 + k * share) * per,
        )

    def memory(self, batch: F, prompt: int, context: int) -> MemoryColumns:
        m, plan, r = self.m, self.plan, self.rows
        wq, kv_tok = self.per_row.weight_bytes, self.per_row.kv_per_token
        pc = self._params
        weights = (pc.non_expert + pc.routed_experts / r.ep) * wq / (r.tp * r.pp)
        kv = batch * kv_tokens_held(m, context) * kv_tok
        sp = self.fx.speculation
        if sp is not None:  # the draft's own blocks and their KV; it shares the embedding and the output head
            pd = count(draft_model(m, sp))
            blocks = pd.non_expert - pd.embedding - pd.lm_head + pd.routed_experts / r.ep
            weights = weights + blocks * wq / (r.tp * r.pp)
            kv = kv * (1.0 + sp.draft_layers / m.num_layers)
        work = np.minimum(batch * prompt, plan.prefill_chunk_tokens) / self._cp * workspace_width(m, r.tp)
        buffers = work * BYTES_PER_DTYPE[plan.compute_dtype] + batch * logits_bytes_per_sequence(m)
        return MemoryColumns(weights, kv, buffers, self.fx.prefix_capacity_bytes / (r.tp * r.pp))

    def device_bytes(self, mem: MemoryColumns) -> F:
        """Each row's bytes in device memory: ``mem`` less what weight streaming and KV offload move to their tiers,
        with a prefix cache kept in HBM (what :meth:`memory_items` lists on the device)."""
        fx = self.fx
        out: F = mem.weights * _on_device(fx.weight_stream) + mem.kv_cache * (1.0 - self.rows.kv_offload) + mem.buffers
        return out + mem.prefix_cache if fx.prefix_tier == "hbm" else out

    def memory_items(self, mem: MemoryColumns, i: int) -> list[MemoryItem]:
        """Row ``i``'s memory as the ledger lists it: on the device, then what the exchanges moved elsewhere."""
        fx, f = self.fx, float(self.rows.kv_offload[i])
        weights, kv = float(mem.weights[i]), float(mem.kv_cache[i])
        items = [
            MemoryItem(category="weights", bytes=weights * _on_device(fx.weight_stream)),
            MemoryItem(category="kv_cache", bytes=kv * (1.0 - f)),
            MemoryItem(category="buffers", bytes=float(mem.buffers[i])),
        ]
        if fx.weight_stream:
            items.append(
                MemoryItem(tier=fx.weight_stream.tier, category="weights", bytes=weights * fx.weight_stream.fraction)
            )
        if f > 0:
            items.append(MemoryItem(tier=self.kv_tier, category="kv_cache", bytes=kv * f))
        prefix = float(mem.prefix_cache[i])
        if prefix:
            items.append(MemoryItem(tier=fx.prefix_tier, category="kv_cache", bytes=prefix))
        return items


def plan_arrays(m: ModelSpec, plan: Plan, fx: ServingEffects, n: int = 1) -> ServingArrays:
    """The arrays of one plan (its own dtypes, its KV offload): a batch of one row, or of ``n`` equal rows (whose
    phases then take ``n`` batches)."""
    off = fx.kv_offload
    rows = ServingRows(
        batch=np.zeros(n, dtype=np.int64),  # the phases take their batch as an argument
        kv_offload=np.full(n, off.fraction if off else 0.0),
        weight_dtype=np.zeros(n, dtype=np.int64),
        kv_dtype=np.zeros(n, dtype=np.int64),
        tp=np.full(n, plan.tp),
        pp=np.full(n, plan.pp),
        ep=np.full(n, plan.ep),
        cp=np.full(n, plan.cp),
    )
    return ServingArrays(m, plan, fx, rows, off.tier if off else "host")


def phase_columns(
    arrays: ServingArrays, prefill_batch: int, decode_batch: int, prompt: int, output: int
) -> tuple[PhaseColumns, PhaseColumns]:
    """One plan's prefill of ``prefill_batch`` prompts and its decode step of ``decode_batch`` sequences at the mean
    context (``prompt + output // 2``), as columns of its one row (:func:`plan_arrays`)."""
    pre = arrays.prefill(np.array([float(prefill_batch)]), prompt)
    return pre, arrays.decode(np.array([float(decode_batch)]), prompt + output // 2)


def pool_columns(
    m: ModelSpec, prefill: Plan, decode: Plan, fx: ServingEffects, prompt: int, output: int, batches: F
) -> tuple[PhaseColumns, PhaseColumns]:
    """Disaggregated pools: one request's prefill on a worker of the ``prefill`` plan, and the decode step of each of
    ``batches`` sequences on a replica of the ``decode`` plan (one row each), at the mean context. Both plans carry
    quantized dtypes (:func:`effects`)."""
    one = plan_arrays(m, prefill, fx).prefill(np.ones(1), prompt)
    return one, plan_arrays(m, decode, fx, len(batches)).decode(batches, prompt + output // 2)


def prefill_phase(
    m: ModelSpec, plan: Plan, system: System, batch: int, prompt: int, fx: ServingEffects = NO_EFFECTS
) -> PhaseLedger:
    """Prefill of ``batch`` prompts of ``prompt`` tokens, along one batch's path (see module doc).

    ``plan`` must already carry quantized dtypes (:func:`effects`).
    """
    return plan_arrays(m, plan, fx).prefill(np.array([float(batch)]), prompt).ledger("prefill", 0, system)


def decode_phase(
    m: ModelSpec, plan: Plan, system: System, batch: int, context: int, fx: ServingEffects = NO_EFFECTS
) -> PhaseLedger:
    """One decode step of ``batch`` sequences whose context is ``context`` tokens."""
    return plan_arrays(m, plan, fx).decode(np.array([float(batch)]), context).ledger("decode_step", 0, system)


def serving_ledger(name: str, m: ModelSpec, job: ServingJob, plan: Plan, system: System) -> Ledger:
    dp = check_plan(plan, m, system, training=False)
    if plan.disaggregation is not None and job.mode != "concurrency":
        raise SpecError("plan.disaggregation", "set", "workload.serving.mode: concurrency (pools serve clients)")
    ctx = job.prompt_tokens + job.output_tokens
    if ctx > m.max_seq_len:
        raise SpecError(
            "workload.serving", ctx, f"prompt + output tokens at most {m.name}'s max_seq_len ({m.max_seq_len})"
        )
    fit = max_batch(m, plan, system, job)
    plan, fx = effects(plan)
    batch = fit if job.batch == "max" else job.batch
    # at fixed concurrency a server holds what fits and the other clients wait for a slot (disaggregated pools: not
    # modelled, their decode pool holds every client); price one request even when none fits (the memory check
    # reports it)
    waits = job.mode == "concurrency" and plan.disaggregation is None
    running = min(batch, fit) if waits else batch
    bsz = max(running, 1)
    prompt, out = job.prompt_tokens, job.output_tokens
    arrays = plan_arrays(m, plan, fx)
    pre, dec = phase_columns(arrays, bsz, bsz, prompt, out)
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
            cp=plan.cp,
        ),
        phases=[pre.ledger("prefill", 0, system), dec.ledger("decode_step", 0, system)],
        memory=arrays.memory_items(arrays.memory(np.array([float(bsz)]), prompt, ctx), 0),
        serving=ServingFacts(
            prompt_tokens=prompt,
            output_tokens=out,
            batch=batch,
            max_batch=fit,
            running=running,
            kv_bytes_per_token=kv_bytes_per_token(m, plan.cache_dtype),
            kv_bytes_per_token_per_device=kv_bytes_per_token_per_device(m, plan),
            replicas=dp,
            pipeline_batches_in_flight=plan.pp,
        ),
    )
