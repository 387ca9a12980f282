"""Ledger of a training step (pure): FLOPs, memory per stage, bytes per link -- for one plan or, on arrays, many.

Parallel layout (Megatron-LM, Narayanan et al. 2021): ``N = tp · cp · pp · dp``
devices; experts are split over ``ep`` ranks inside the data-parallel group.
The step runs ``m = global_batch / (dp · micro_batch)`` micro-batches through a
1F1B pipeline.

Context parallelism (``cp``; Liu et al. 2023, ring attention; Dubey et al. 2024, §3.3.2 for Llama 3's
long-context training; Megatron-Core's ``context_parallel_size``) splits every sequence over ``cp`` ranks,
each holding two of ``2·cp`` equal chunks so that each does ``1/cp`` of the causal attention. A rank's
activations, FLOPs and TP / PP / EP messages are those of ``s/cp`` tokens; its weights are a data-parallel
replica's, so gradients are reduced (and ZeRO shards) over the ``dp · cp`` ranks.

Communication per step, per device (payload ``A = b·s·h`` activation bytes):

* TP: 2 all-reduces forward + 2 backward per layer per micro-batch (Megatron-LM,
  Shoeybi et al. 2019, Fig. 4); with sequence parallelism an all-gather +
  reduce-scatter pair of the same volume (Korthikanti §4.2.2); full
  recomputation repeats the forward ones.
* PP: one activation forward and one gradient backward per micro-batch, ``A/t``
  with Megatron's scatter/gather optimisation (Narayanan et al. 2021, §4.1).
* DP: ring all-reduce of the gradients, ``2(n-1)/n · Ψ``; ZeRO-1/2 use
  reduce-scatter + all-gather of the same volume; ZeRO-3 adds parameter
  all-gathers in forward and backward: ``3(n-1)/n · Ψ`` = 1.5x DP (Rajbhandari
  et al. 2020, §7.2), repeated for every micro-batch (the gathered weights are
  not kept between micro-batches).
* EP: 2 all-to-alls forward (dispatch, combine) + 2 backward per MoE layer per
  micro-batch (Lepikhin et al. 2020, GShard §2.2), of ``b·s·k·h`` bytes.
* CP, ``ring``: every rank needs every earlier chunk's K and V: per layer per micro-batch an all-gather
  of the sequence's K and V forward, and backward another and a reduce-scatter of their gradients (ring
  attention passes the same bytes in ``cp - 1`` steps, overlapped with the attention kernels); full
  recomputation repeats the forward one. ``allgather``: the same bytes, gathered before the attention and in
  series with the kernels (Llama 3, Dubey et al. 2024, §3.3.2), so the operator model times them in the step.
  ``ulysses`` (Jacobs et al. 2023, DeepSpeed-Ulysses §3.1): all-to-alls of Q, K, V before the attention and of
  its output after, forward and backward, each rank's ``s/cp`` tokens of those widths; a TP rank with fewer KV
  heads than the CP group sends each repeated up to it (:func:`aitrinity.spec.scenario.ulysses_kv_heads`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from aitrinity.cost import collectives as coll
from aitrinity.cost.effects import GradSync, find, grad_sync
from aitrinity.cost.flops import OPERATORS_PER_LAYER, layer_dense_flops, score_flops_per_query, token_flops
from aitrinity.cost.ledger import (
    Flops,
    Ledger,
    MemoryItem,
    Parallelism,
    PhaseLedger,
    TrainingFacts,
)
from aitrinity.cost.memory import kept_activation_bytes, layer_activations, optimizer_bytes_per_param
from aitrinity.cost.params import attention_params, count, mlp_params, norm_params
from aitrinity.cost.train_operators import RECOMPUTE_INDEX
from aitrinity.errors import SpecError
from aitrinity.spec.exchanges import ActivationOffload
from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, System, TrainingJob, check_plan, check_sequence_split, ulysses_kv_heads

F = NDArray[np.float64]
Ints = NDArray[np.int64]
B = NDArray[np.bool_]

TP_TRAFFIC = "TP activations (per layer)"
PP_TRAFFIC = "PP activations and gradients"
CP_GATHER = "CP K/V all-gather (in series, allgather)"
"""The purposes of the traffic the training operator model times itself, in series with the kernels (the rest is
priced on links, under the system's overlap model)."""


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    ep: int
    micro_batch: int
    num_microbatches: int
    cp: int = 1


def layout(m: ModelSpec, job: TrainingJob, plan: Plan, system: System) -> Layout:
    dp = check_plan(plan, m, system, training=True)
    per_step = dp * plan.micro_batch
    if job.global_batch % per_step:
        raise SpecError(
            "workload.training.global_batch",
            job.global_batch,
            f"a multiple of dp x micro_batch = {dp} x {plan.micro_batch} = {per_step}",
        )
    if job.seq_len > m.max_seq_len:
        raise SpecError("workload.training.seq_len", job.seq_len, f"at most {m.name}'s max_seq_len ({m.max_seq_len})")
    check_sequence_split(job.seq_len, plan.cp)
    return Layout(plan.tp, plan.pp, dp, plan.ep, plan.micro_batch, job.global_batch // per_step, plan.cp)


def stage_bounds(num_layers: int, pp: int, stage: int) -> tuple[int, int]:
    """Layers ``[lo, hi)`` of pipeline stage ``stage``. An even split when ``pp`` divides the layers;
    otherwise the extra layers go to the middle stages first, so the first stage (embedding) and the last
    (LM head, loss) hold fewer: Llama 3's balance (Dubey et al. 2024, §3.3.2: 126 layers on 16 stages)."""
    return _stage_bounds(num_layers, pp)[stage]


@functools.cache
def _stage_bounds(num_layers: int, pp: int) -> tuple[tuple[int, int], ...]:
    """Every stage's ``[lo, hi)`` at once (:func:`stage_bounds`)."""
    per, extra = divmod(num_layers, pp)
    more = set([*range(1, pp - 1), pp - 1, 0][:extra])  # which stages get one more layer
    out, lo = [], 0
    for s in range(pp):
        hi = lo + per + (s in more)
        out.append((lo, hi))
        lo = hi
    return tuple(out)


def stage_layers(m: ModelSpec, pp: int, stage: int) -> tuple[int, int]:
    """(dense layers, MoE layers) of pipeline stage ``stage``, by where the model's MoE layers sit
    (:meth:`ModelSpec.moe_layers_below`: dense layers first, then every ``layer_step``-th). The blocks of the
    multi-token-prediction modules (:attr:`ModelSpec.mtp_layers`), each like the model's deepest layer, come after
    it and are split with the layers (:func:`stage_bounds`), so the last stage trains them in place of as many of its
    own layers (Megatron-Core counts them in the last stage's layers the same way); the rest of each module, its
    projection and its pass through the output head, is on the last stage (:func:`mtp_extra_params`,
    :func:`mtp_extra_flops`)."""
    return stage_layer_table(m, pp)[stage]


def stage_layer_table(m: ModelSpec, pp: int) -> tuple[tuple[int, int], ...]:
    """:func:`stage_layers` of every stage at once (cached by the layer arrangement and ``pp``: a pp-80 layout is
    priced without 80 Python calls per use)."""
    moe = (m.moe.first_dense_layers, m.moe.layer_step) if m.moe else None
    return _stage_layer_table(m.num_layers, m.mtp_layers, moe, pp)


@functools.cache
def _stage_layer_table(n: int, mtp: int, moe: tuple[int, int] | None, pp: int) -> tuple[tuple[int, int], ...]:
    def moe_below(layer: int) -> int:  # ModelSpec.moe_layers_below
        return 0 if moe is None else max(layer - moe[0], 0) // moe[1]

    deepest_is_moe = moe_below(n) > moe_below(n - 1)  # _deepest_is_moe
    out = []
    for lo, hi in _stage_bounds(n + mtp, pp):  # the modules' blocks follow the deepest layer
        moe_l = moe_below(min(hi, n)) - moe_below(min(lo, n))
        dense = min(hi, n) - min(lo, n) - moe_l
        extra = hi - max(lo, n)
        if extra > 0:
            moe_l, dense = (moe_l + extra, dense) if deepest_is_moe else (moe_l, dense + extra)
        out.append((dense, moe_l))
    return tuple(out)


StageKind = tuple[int, int, bool, bool]
"""(dense layers, MoE layers, first stage, last stage): what a stage's parameters, FLOPs and times depend on."""


def stage_kinds(m: ModelSpec, pp: int) -> list[StageKind]:
    """Every stage's :data:`StageKind`, in stage order (the middle stages of a deep pipeline share a few)."""
    return [(d, e, st == 0, st == pp - 1) for st, (d, e) in enumerate(stage_layer_table(m, pp))]


def _deepest_is_moe(m: ModelSpec) -> bool:
    return m.moe_layers_below(m.num_layers) > m.moe_layers_below(m.num_layers - 1)


def mtp_extra_params(m: ModelSpec) -> int:
    """Parameters of the multi-token-prediction modules outside their transformer blocks: per module, the RMSNorms
    of the hidden state and of the next token's embedding and the ``2h x h`` projection of the two (DeepSeek-V3
    report, §2.2); the embedding and the output head are the model's own."""
    h = m.hidden_size
    return m.mtp_layers * (2 * norm_params(m, h) + 2 * h * h)


def mtp_extra_flops(m: ModelSpec) -> float:
    """Forward FLOPs per token of the multi-token-prediction modules outside their blocks: the projection and a
    second pass through the shared output head."""
    h = m.hidden_size
    return m.mtp_layers * (2.0 * 2 * h * h + 2.0 * m.vocab_size * h)


def training_token_flops(m: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs one training token costs: the model's (full ``s x s`` scores, Narayanan et al. 2021, eq. 3) and
    its multi-token-prediction modules' -- a block like the deepest layer, its projection and the head again."""
    f = token_flops(m).dense + score_flops_per_query(m, seq_len)
    if m.mtp_layers:
        deepest = layer_dense_flops(m, moe_layer=_deepest_is_moe(m))
        f += m.mtp_layers * (deepest.dense + score_flops_per_query(m, seq_len) / m.num_layers) + mtp_extra_flops(m)
    return f


def stage_params(m: ModelSpec, lay: Layout, stage: int) -> tuple[float, float]:
    """(replicated, expert) parameters one device of ``stage`` holds after TP/EP splitting.

    Megatron keeps word embeddings on the first stage and the LM head on the
    last; tied embeddings keep a copy on both (Narayanan et al. 2021, §2.2).
    """
    return _kind_params(m, lay, stage_kinds(m, lay.pp)[stage])


def _kind_params(m: ModelSpec, lay: Layout, kind: StageKind) -> tuple[float, float]:
    """:func:`stage_params` of a stage of this kind."""
    h = m.hidden_size
    dense, moe, first, last = kind
    norms = 2 * norm_params(m, h)
    rep = (dense + moe) * (attention_params(m) + norms) + dense * mlp_params(m, m.intermediate_size)
    expert = 0.0
    if m.moe:
        e = m.moe
        per_expert = mlp_params(m, e.expert_intermediate_size)
        rep += moe * (e.num_shared_experts * per_expert + h * e.num_experts + e.num_experts * e.router_bias)
        expert = moe * e.num_experts * per_expert / lay.ep
    if first:
        rep += m.vocab_size * h + m.learned_positions * h
    if last:
        rep += norm_params(m, h) + (m.vocab_size * h if (not m.tie_embeddings or lay.pp > 1) else 0)
        rep += mtp_extra_params(m)
    return rep / lay.tp, expert / lay.tp


# ---------------------------------------------------------------------------------------------- rows and columns
# The ledger is computed once, on arrays: one row per candidate plan of a parallel layout (tp, pp). The planner
# prices hundreds of thousands of rows (aitrinity.plan.vector_training); training_ledger is a batch of one.

RECOMPUTE = tuple(RECOMPUTE_INDEX)
"""``Rows.recompute`` indexes this."""


@dataclass(frozen=True)
class Rows:
    """One row per candidate plan (all arrays of the same length)."""

    micro_batch: Ints
    zero: Ints
    recompute: Ints  # index into RECOMPUTE
    sequence_parallel: B
    compression: Ints
    """Index into the gradient synchronisations the rows are priced with (``syncs`` of :func:`columns`)."""
    optimizer_offload: B
    virtual_stages: Ints
    activation_offload: F
    """Fraction of saved activations kept in host memory (0 = none)."""

    def __len__(self) -> int:
        return len(self.micro_batch)

    @classmethod
    def from_grid(cls, grid: list[tuple[int, int, int, bool, int, bool, int, float]]) -> Rows:
        """Rows from tuples (micro_batch, zero, recompute, sp, compression, optimizer offload, virtual stages,
        activation offload)."""
        cols = list(zip(*grid, strict=True))
        types = (np.int64, np.int64, np.int64, np.bool_, np.int64, np.bool_, np.int64, np.float64)
        return cls(*(np.array(c, dtype=t) for c, t in zip(cols, types, strict=True)))

    def distinct(self, fields: tuple[str, ...]) -> tuple[Rows, Ints]:
        """(the distinct combinations of ``fields``' values, as rows; each row's combination): what depends on those
        columns alone is computed on the combinations and spread back with ``[each]`` -- the same numbers, element
        for element. Cached on the rows (the planner prices one grid, never mutated, for every layout); rows taken
        from others answer with their source's combinations (:meth:`take`), some perhaps unused, without sorting."""
        source = self.__dict__.get("_taken_from")
        if source is not None:
            rows, idx = source
            combos, each = rows.distinct(fields)
            return combos, each[idx]
        if len(self) <= 1:  # one plan's row (the ledger of diagnose, the chain): itself
            return self, np.zeros(len(self), dtype=np.int64)
        cache: dict[tuple[str, ...], tuple[Rows, Ints]] = self.__dict__.setdefault("_distinct", {})
        if fields not in cache:
            keys = np.stack([getattr(self, f).astype(np.float64) for f in fields])
            _, first, inverse = np.unique(keys, axis=1, return_index=True, return_inverse=True)
            cache[fields] = (self.take(first), inverse.reshape(-1))
        return cache[fields]

    def take(self, idx: Ints) -> Rows:
        """The rows ``idx``, in that order."""
        out = Rows(*(getattr(self, f)[idx] for f in Rows.__dataclass_fields__))
        source = self.__dict__.get("_taken_from")
        out.__dict__["_taken_from"] = (self, idx) if source is None else (source[0], source[1][idx])
        return out

    @classmethod
    def of(cls, plan: Plan) -> Rows:
        """The row of one plan (its gradient synchronisation is ``syncs[0]``)."""
        act_off = find(plan, "activation-offload")
        fraction = act_off.fraction if isinstance(act_off, ActivationOffload) else 0.0
        offload = find(plan, "optimizer-offload") is not None
        row = (plan.micro_batch, plan.zero, RECOMPUTE.index(plan.recompute), plan.sequence_parallel, 0, offload)
        return cls.from_grid([(*row, plan.virtual_stages, fraction)])


@dataclass(frozen=True)
class LayoutConstants:
    """What depends on the layout ``(tp, pp)`` only: computed once per layout, in Python."""

    tp: int
    pp: int
    dp: int
    rep: list[float]
    expert: list[float]
    layers: list[tuple[int, int]]
    act_dense: dict[tuple[int, bool], float]  # (recompute index, sp) -> bytes per layer for b = 1
    act_moe: dict[tuple[int, bool], float]
    dense_f: float  # busiest stage's forward dense FLOPs per token through the pipeline, / tp
    score_f: float


def layout_constants(m: ModelSpec, job: TrainingJob, base: Plan, tp: int, pp: int, dp: int) -> LayoutConstants:
    lay = Layout(tp, pp, dp, base.ep, 1, 1)
    kinds = stage_kinds(m, pp)
    params = {k: _kind_params(m, lay, k) for k in dict.fromkeys(kinds)}  # each distinct stage once
    rep, expert = zip(*(params[k] for k in kinds), strict=True)
    act = BYTES_PER_DTYPE[base.compute_dtype]
    la_dense = layer_activations(m, job.seq_len, 1, False, act)
    la_moe = layer_activations(m, job.seq_len, 1, True, act)
    act_dense, act_moe = {}, {}
    for ri, rec in enumerate(RECOMPUTE):
        for sp in (False, True):
            act_dense[(ri, sp)] = kept_activation_bytes(la_dense, tp, sp, rec, base.flash_attention)
            act_moe[(ri, sp)] = kept_activation_bytes(la_moe, tp, sp, rec, base.flash_attention)
    # forward FLOPs per token through one pipeline, per stage; the busiest stage (the first of the most) sets the pace
    best = (-1.0, 0.0, 0.0)
    dense_f = layer_dense_flops(m, False).dense
    moe_f = layer_dense_flops(m, True).dense if any(ml for _, ml, _, _ in kinds) else 0.0
    score_q = score_flops_per_query(m, job.seq_len)
    for dl, ml, _, last in dict.fromkeys(kinds):
        per_tok = dl * dense_f + (ml * moe_f if ml else 0.0)
        if last:
            per_tok += 2.0 * m.vocab_size * m.hidden_size + mtp_extra_flops(m)
        score = (dl + ml) / m.num_layers * score_q
        if per_tok + score > best[0]:
            best = (per_tok + score, per_tok, score)
    layers = list(stage_layer_table(m, pp))
    return LayoutConstants(tp, pp, dp, list(rep), list(expert), layers, act_dense, act_moe, best[1] / tp, best[2] / tp)


@dataclass(frozen=True)
class Columns:
    """The ledger of every row, as columns (the busiest device: peak-memory stage for memory and traffic, the
    stage with the most FLOPs for compute)."""

    mb: F
    """Micro-batches per step."""
    divisible: B
    weights: F
    gradients: F
    optimizer: F
    activations: F
    """At the 1F1B peak, before any offload."""
    buffers: F
    """Error-feedback residuals of a gradient compressor."""
    hbm_resident: F
    host_resident: F
    layers_peak: F
    forward: float
    recompute: F
    exchange: F
    """The compressor's FLOPs."""
    model_total: float
    hbm_bytes: F
    streams: list[coll.Stream]
    period: F
    """Synchronise every ``period`` steps (local SGD)."""
    heavy: B
    """A compressor with error feedback (needs ZeRO <= 1)."""


def _peak_candidates(L: LayoutConstants) -> NDArray[np.int64]:
    """The pipeline stages that can hold the peak footprint, in order: the first, the last, and among the others
    the first stage of each distinct (layers, parameters). A later stage like an earlier one holds the same
    weights, gradients and optimizer states and no more micro-batches in flight (1F1B: ``p - k``), so it never
    exceeds it, and the first of equals is the one reported: the peak is the same as over every stage (the middle
    stages of a deep pipeline are alike, so a pp-80 layout prices a handful of stages, not 80)."""
    p = L.pp
    seen: set[tuple[int, int, float, float]] = set()
    out = [0]
    for k in range(1, p - 1):
        sig = (L.layers[k][0], L.layers[k][1], L.rep[k], L.expert[k])
        if sig not in seen:
            seen.add(sig)
            out.append(k)
    if p > 1:
        out.append(p - 1)
    return np.array(out, dtype=np.int64)


def _per_row(syncs: list[GradSync], choice: NDArray[np.int64], field: str) -> F:
    """One field of each row's gradient synchronisation (``syncs[choice]``), as a column."""
    out: F = np.array([getattr(x, field) for x in syncs], dtype=np.float64)[choice]
    return out


@dataclass(frozen=True)
class _Peak:
    """The busiest device by memory, per row: the first pipeline stage of the largest footprint and what it holds."""

    stage: NDArray[np.int64]
    weights: F
    gradients: F
    optimizer: F
    activations: F
    """At the 1F1B peak, before any offload."""
    total: F
    """Weights + gradients + optimizer states + activations."""
    replicated: F
    """Parameters held by every data-parallel rank."""
    experts: F
    """Expert parameters (sharded over the expert-parallel group)."""

    @property
    def params(self) -> F:
        out: F = self.replicated + self.experts
        return out

    def take(self, idx: Ints) -> _Peak:
        return _Peak(*(getattr(self, f)[idx] for f in _Peak.__dataclass_fields__))


PEAK_FIELDS = ("micro_batch", "zero", "recompute", "sequence_parallel", "virtual_stages")
"""The columns of :class:`Rows` the peak memory reads (:func:`_peak_memory`)."""


def _peak_memory(m: ModelSpec, job: TrainingJob, base: Plan, L: LayoutConstants, rows: Rows, b: F, mb: F) -> _Peak:
    """Memory per stage, every candidate stage at once (arrays of (stages, rows)); the peak stage is the busiest device.

    ZeRO stage k shards the optimizer (k >= 1), gradients (k >= 2) and weights (k >= 3) over the data-parallel group;
    stage k of a 1F1B pipeline holds ``p - k`` micro-batches' activations (Korthikanti et al. 2022, §4.2.3), the
    interleaved schedule ``1 + (p-1)/(p·v)`` times as many; a context-parallel rank keeps ``1/cp`` of every tensor."""
    t, p, cp, e = L.tp, L.pp, base.cp, base.ep
    s, h = job.seq_len, m.hidden_size
    s_rank, dz = s / cp, L.dp * cp
    rec, sp, zero = rows.recompute, rows.sequence_parallel, rows.zero
    v = rows.virtual_stages.astype(np.float64)
    interleave = np.where(v > 1, 1.0 + (p - 1) / (p * v), 1.0)
    wb, gb = BYTES_PER_DTYPE[base.weights_dtype], BYTES_PER_DTYPE[base.grads_dtype]
    k_opt = optimizer_bytes_per_param(base)
    key = rec * 2 + sp  # (recompute, sequence parallel) -> 0..5

    def per_layer(table: dict[tuple[int, bool], float]) -> F:
        out: F = np.array([table[(ri, spv)] for ri in range(3) for spv in (False, True)])[key]
        return out

    # one layer's full activations live while it is recomputed (full recomputation)
    # the tables are for a whole sequence; a CP rank keeps 1/cp of every tensor (its s/cp queries; the score
    # matrices without flash attention are (s/cp) x s)
    full_ws = per_layer({(ri, spv): L.act_dense[(0, spv)] for ri in range(3) for spv in (False, True)}) / cp
    full_ws_moe = per_layer({(ri, spv): L.act_moe[(0, spv)] for ri in range(3) for spv in (False, True)}) / cp
    pl_dense, pl_moe = per_layer(L.act_dense) * b / cp, per_layer(L.act_moe) * b / cp
    sp_div = np.where(sp, float(t), 1.0)
    exp_shard = max(dz // e, 1)
    cand = _peak_candidates(L)
    st = cand[:, None]
    dl = np.array([x for x, _ in L.layers], dtype=np.float64)[cand][:, None]
    ml = np.array([y for _, y in L.layers], dtype=np.float64)[cand][:, None]
    rep_s, ex_s = np.array(L.rep)[cand][:, None], np.array(L.expert)[cand][:, None]
    stage_w = rep_s * wb / np.where(zero >= 3, dz, 1) + ex_s * wb / np.where(zero >= 3, exp_shard, 1)
    stage_g = rep_s * gb / np.where(zero >= 2, dz, 1) + ex_s * gb / np.where(zero >= 2, exp_shard, 1)
    stage_o = rep_s * k_opt / np.where(zero >= 1, dz, 1) + ex_s * k_opt / np.where(zero >= 1, exp_shard, 1)
    in_flight = np.minimum(p - st, mb)
    stage_acts = (dl * pl_dense + ml * pl_moe) * in_flight * interleave
    stage_acts = stage_acts + np.where(rec == 2, np.where(ml > 0, full_ws_moe, full_ws) * b, 0.0)
    if m.dropout:  # embedding dropout mask, sbhp/t (Korthikanti §4.3)
        stage_acts[0] = stage_acts[0] + s_rank * b * h * in_flight[0] / sp_div
    # final norm, output layer input and fp32 logits: 4sbh(1 + v/h)/t (§4.3); again per multi-token-prediction module
    stage_acts[-1] = stage_acts[-1] + (1 + m.mtp_layers) * 4.0 * s_rank * b * (h + m.vocab_size) / t
    totals = stage_w + stage_g + stage_o + stage_acts
    at = np.argmax(totals, axis=0)  # the first stage of the largest footprint, among the candidates
    pick = np.arange(len(rows))
    peak = cand[at]
    return _Peak(
        stage=peak,
        weights=stage_w[at, pick],
        gradients=stage_g[at, pick],
        optimizer=stage_o[at, pick],
        activations=stage_acts[at, pick],
        total=totals[at, pick],
        replicated=np.array(L.rep)[peak],
        experts=np.array(L.expert)[peak],
    )


def _dp_streams(
    base: Plan, L: LayoutConstants, rows: Rows, syncs: list[GradSync], pk: _Peak, mb: F, period: F
) -> list[coll.Stream]:
    """The gradient synchronisation of every row: ZeRO 0-2, one all-reduce (or a gather of every rank's message) per
    synchronisation; ZeRO-3, per micro-batch a gradient reduce-scatter and parameter all-gathers in forward and
    backward -- for the replicated parameters over ``dp · cp`` ranks and the experts' over ``dp · cp / ep``."""
    t, e, dz = L.tp, base.ep, L.dp * base.cp
    wb = BYTES_PER_DTYPE[base.weights_dtype]
    comp, z3 = rows.compression, rows.zero >= 3
    gather = np.array([x.collective == "all-gather" for x in syncs])[comp]
    per_element = _per_row(syncs, comp, "bytes_per_element")
    streams: list[coll.Stream] = []
    for tag, params, group, stride in (("", pk.replicated, dz, t), (" (experts)", pk.experts, dz // e, t * e)):
        has = params > 0  # a group with no parameters on the device sends nothing
        if not np.any(has):
            continue
        payload = params * per_element
        ar, ag, rs = has & ~z3 & ~gather, has & ~z3 & gather, has & z3
        sync = 1.0 / period
        streams += [
            coll.Stream(
                f"DP gradient all-reduce{tag}",
                "all-reduce",
                payload,
                np.where(ar, sync, 0.0),
                ar,
                group,
                stride,
                method=True,
            ),
            coll.Stream(
                f"DP gradient all-gather{tag}",
                "all-gather",
                payload * group,
                np.where(ag, sync, 0.0),
                ag,
                group,
                stride,
                method=True,
            ),
            coll.Stream(
                f"ZeRO-3 gradient reduce-scatter{tag}",
                "reduce-scatter",
                payload,
                np.where(rs, mb, 0.0),
                rs,
                group,
                stride,
            ),
            coll.Stream(
                f"ZeRO-3 parameter all-gather (fwd+bwd){tag}",
                "all-gather",
                params * wb,
                np.where(rs, 2.0 * mb, 0.0),
                rs,
                group,
                stride,
            ),
        ]
    return streams


def _offload_streams(rows: Rows, pk: _Peak, w_dev: F, g_dev: F, per_mb_acts: F, mb: F, layers: F) -> list[coll.Stream]:
    """ZeRO-Offload (Ren et al. 2021, §4): gradients to the host, updated weights back, and the CPU's Adam step
    streaming the states through host DRAM (overlapped by the one-step delay, §4.2); activation offload: out in
    forward, back in backward."""
    off, a_off = rows.optimizer_offload, rows.activation_offload
    return [
        coll.Stream(
            "optimizer offload: gradients down, weights up",
            "p2p",
            np.where(off, g_dev + w_dev, 0.0),
            np.where(off, 2.0, 0.0),
            off,
            tier="host",
        ),
        coll.Stream(
            "optimizer offload: CPU update",
            "p2p",
            np.where(off, 2.0 * pk.optimizer + g_dev + w_dev, 0.0),
            np.where(off, 1.0, 0.0),
            off,
            tier="host_dram",
        ),
        coll.Stream(
            "activation offload",
            "p2p",
            2.0 * a_off * per_mb_acts * mb,
            np.where(a_off > 0, 2.0 * mb * layers, 0.0),
            a_off > 0,
            tier="host",
        ),
    ]


@dataclass(frozen=True)
class Memory:
    """Every row's micro-batching and the busiest device's memory: what the planner's feasibility checks read
    (:func:`memory_columns`), the first section of :func:`columns`."""

    mb: F
    """Micro-batches per step."""
    divisible: B
    peak: _Peak
    buffers: F
    """Error-feedback residuals of a gradient compressor."""
    hbm_resident: F
    host_resident: F
    period: F
    """Synchronise every ``period`` steps (local SGD)."""
    heavy: B
    """A compressor with error feedback (needs ZeRO <= 1)."""

    def take(self, idx: Ints) -> Memory:
        """The rows ``idx`` only."""
        rest = (getattr(self, f)[idx] for f in ("buffers", "hbm_resident", "host_resident", "period", "heavy"))
        return Memory(self.mb[idx], self.divisible[idx], self.peak.take(idx), *rest)


def memory_columns(
    m: ModelSpec, job: TrainingJob, base: Plan, L: LayoutConstants, rows: Rows, syncs: list[GradSync]
) -> Memory:
    """:func:`columns`' memory section: the rows of layout ``L``, ``syncs[rows.compression]`` each row's gradient
    synchronisation."""

    def microbatches(micro_batch: Ints) -> F:  # per step, at least one
        out: F = np.maximum(job.global_batch // (L.dp * micro_batch), 1).astype(np.float64)
        return out

    comp, off = rows.compression, rows.optimizer_offload
    combos, each = rows.distinct(PEAK_FIELDS)  # 6,480 rows of the planner's grid hold 360 distinct peaks
    b = combos.micro_batch.astype(np.float64)
    pk = _peak_memory(m, job, base, L, combos, b, microbatches(combos.micro_batch)).take(each)
    buffers = pk.params * _per_row(syncs, comp, "error_feedback_bytes_per_param")
    offloaded = np.where(off, pk.optimizer, 0.0) + rows.activation_offload * pk.activations
    return Memory(
        mb=microbatches(rows.micro_batch),
        divisible=(job.global_batch % (L.dp * rows.micro_batch)) == 0,
        peak=pk,
        buffers=buffers,
        hbm_resident=pk.total + buffers - offloaded,
        host_resident=offloaded,
        period=_per_row(syncs, comp, "period"),
        heavy=np.array([x.method in ("topk", "sign", "powersgd") for x in syncs])[comp],
    )


def columns(
    m: ModelSpec,
    job: TrainingJob,
    base: Plan,
    L: LayoutConstants,
    rows: Rows,
    syncs: list[GradSync],
    memory: Memory | None = None,
) -> Columns:
    """The ledger of every row of layout ``L``; ``base`` supplies dtypes, ep, flash attention and the optimizer,
    ``syncs[rows.compression]`` each row's gradient synchronisation; ``memory`` the rows' :func:`memory_columns`
    where they are at hand (the planner checks them first, then prices the rows that pass).

    Longer than most: four short sections in the ledger's order (memory, FLOPs, HBM traffic, communication) over
    the helpers above, which share the row's micro-batching, and the result's constructor."""
    n, t, p, d, e, cp = len(rows), L.tp, L.pp, L.dp, base.ep, base.cp
    s, h = job.seq_len, m.hidden_size
    s_rank = s / cp  # the tokens of a sequence one CP rank holds
    b = rows.micro_batch.astype(np.float64)
    rec, comp, off = rows.recompute, rows.compression, rows.optimizer_offload
    v = rows.virtual_stages.astype(np.float64)
    act = BYTES_PER_DTYPE[base.compute_dtype]
    wb, gb = BYTES_PER_DTYPE[base.weights_dtype], BYTES_PER_DTYPE[base.grads_dtype]

    # --- memory of the busiest device
    mem = memory if memory is not None else memory_columns(m, job, base, L, rows, syncs)
    pk, mb, period = mem.peak, mem.mb, mem.period
    params_peak = pk.params

    # --- FLOPs of the busiest stage by FLOPs (the same for every row)
    tokens_per_pipe = job.global_batch * s / (d * cp)  # through one pipeline, on one CP rank
    dense_f, score_f = tokens_per_pipe * L.dense_f, tokens_per_pipe * L.score_f
    fwd = dense_f + score_f
    recomp = np.select([rec == 0, rec == 1, rec == 2], [0.0, score_f, fwd])
    if base.flash_attention:  # FA backward recomputes QK^T: 2.5x forward instead of 2x (Dao 2023, §3.1)
        recomp = recomp + np.where(rec != 2, 0.5 * score_f, 0.0)
    exchange = params_peak * _per_row(syncs, comp, "flops_per_param") / period
    model_total = 3.0 * float(job.global_batch * s) * training_token_flops(m, s)

    # --- HBM traffic on the busiest device (lower bound: each operand moved once per use)
    w_dev, g_dev = params_peak * wb, params_peak * gb
    per_mb_acts = pk.activations / np.maximum(np.minimum(p - pk.stage, mb), 1)
    hbm = mb * (3.0 * w_dev + 2.0 * g_dev + 2.0 * per_mb_acts)
    # the optimizer step: read + write the states, read the gradients, write the weights
    hbm = hbm + np.where(off, 0.0, 2.0 * pk.optimizer + g_dev + w_dev)
    hbm = hbm + params_peak * _per_row(syncs, comp, "hbm_bytes_per_element") / period

    # --- communication
    yes = np.ones(n, dtype=np.bool_)
    layers_peak = np.array([x + y for x, y in L.layers], dtype=np.float64)[pk.stage]
    moe_peak = np.array([y for _, y in L.layers], dtype=np.float64)[pk.stage]
    a_bytes = b * s_rank * h * act
    extra = np.where(rec == 2, 2.0, 0.0)  # full recomputation repeats the forward collectives
    streams = [coll.Stream(TP_TRAFFIC, "all-reduce", a_bytes, layers_peak * mb * (4.0 + extra), yes, t, 1, timed=True)]
    if p > 1:
        # each micro-batch's activations forward and gradients back at every chunk boundary: v per stage with the
        # interleaved schedule ("the amount of communication also increases by v", Narayanan et al. 2021, §2.2.2)
        streams.append(coll.Stream(PP_TRAFFIC, "p2p", a_bytes / t, 2.0 * mb * v, yes, p, t * cp * d, timed=True))
    streams += _dp_streams(base, L, rows, syncs, pk, mb, period)
    if m.moe and e > 1:  # dispatch and combine, forward and backward, per MoE layer (GShard §2.2)
        k = m.moe.experts_per_token
        moe = moe_peak > 0
        a2a = np.where(moe, moe_peak * mb * (4.0 + extra), 0.0)
        payload = b * s_rank * k * h * act / t
        streams.append(coll.Stream("EP token all-to-all", "all-to-all", payload, a2a, moe, e, t * cp))
    if cp > 1:
        streams += _cp_streams(m, base, t, b, s, act, layers_peak * mb, extra)
    streams += _offload_streams(rows, pk, w_dev, g_dev, per_mb_acts, mb, layers_peak)
    return Columns(
        mb=mb,
        divisible=mem.divisible,
        weights=pk.weights,
        gradients=pk.gradients,
        optimizer=pk.optimizer,
        activations=pk.activations,
        buffers=mem.buffers,
        hbm_resident=mem.hbm_resident,
        host_resident=mem.host_resident,
        layers_peak=layers_peak,
        forward=fwd,
        recompute=recomp,
        exchange=exchange,
        model_total=model_total,
        hbm_bytes=hbm,
        streams=streams,
        period=period * np.ones(n),
        heavy=mem.heavy,
    )


def cp_widths(m: ModelSpec, tp: int) -> tuple[float, float]:
    """(K + V, Q + output) elements per token on one TP rank: what context parallelism moves (MLA's K and V are
    each head's, decompressed, as its attention kernel reads them)."""
    heads = max(m.num_attention_heads // tp, 1)
    if m.mla:
        c = m.mla
        qk = c.qk_nope_head_dim + c.qk_rope_head_dim
        return heads * (qk + c.v_head_dim), heads * (qk + c.v_head_dim)
    kv = max(m.kv_heads // tp, 1)
    return 2.0 * kv * m.dim_head, 2.0 * heads * m.dim_head


def _cp_streams(
    m: ModelSpec, base: Plan, t: int, b: F, s: int, act: float, layer_passes: F, extra: F
) -> list[coll.Stream]:
    """Context parallelism's messages over the ``cp`` ranks ``t`` apart, per layer per micro-batch (module doc);
    ``layer_passes`` = layers x micro-batches, ``extra`` = 2 where full recomputation repeats the forward."""
    cp, yes = base.cp, np.ones(len(b), dtype=np.bool_)
    kv, qo = cp_widths(m, t)
    if base.cp_method in ("ring", "allgather"):  # the K and V gathered forward (and backward), their grads scattered
        gathered, times = b * s * kv * act, layer_passes * (2.0 + extra / 2)
        if base.cp_method == "allgather":  # in series with the kernels: the operator model times it
            return [
                coll.Stream(CP_GATHER, "all-gather", gathered, times, yes, cp, t, timed=True),
                coll.Stream(CP_GATHER, "reduce-scatter", gathered, layer_passes, yes, cp, t, timed=True),
            ]
        return [
            coll.Stream("CP K/V all-gather (ring)", "all-gather", gathered, times, yes, cp, t),
            coll.Stream("CP K/V gradient reduce-scatter (ring)", "reduce-scatter", gathered, layer_passes, yes, cp, t),
        ]
    # Ulysses: Q, K, V in and the output back, forward and backward; each rank's s/cp tokens
    if not m.mla:  # of its KV heads, or of their copies where the group outnumbers them
        kv = 2.0 * ulysses_kv_heads(m, t, cp) * m.dim_head
    per_rank = b * (s / cp) * (kv + qo) * act
    return [
        coll.Stream(
            "CP Q/K/V/O all-to-all (Ulysses)", "all-to-all", per_rank, layer_passes * (2.0 + extra / 2), yes, cp, t
        )
    ]


def _memory_items(plan: Plan, row: Rows, c: Columns, sync: GradSync) -> list[MemoryItem]:
    """One plan's memory by category and tier (the optimizer's states in host memory with its offload, the offloaded
    share of the activations there too, a compressor's error-feedback buffers)."""
    offload = bool(row.optimizer_offload[0])
    memory = [
        MemoryItem(category="weights", bytes=float(c.weights[0])),
        MemoryItem(category="gradients", bytes=float(c.gradients[0])),
        MemoryItem(category="optimizer", bytes=float(c.optimizer[0]), tier="host" if offload else "hbm"),
    ]
    acts = float(c.activations[0])
    act_off = find(plan, "activation-offload")
    if isinstance(act_off, ActivationOffload):
        memory.append(MemoryItem(category="activations", bytes=acts * (1 - act_off.fraction)))
        memory.append(MemoryItem(tier="host", category="activations", bytes=acts * act_off.fraction))
    else:
        memory.append(MemoryItem(category="activations", bytes=acts))
    if sync.error_feedback_bytes_per_param:
        memory.append(MemoryItem(category="buffers", bytes=float(c.buffers[0])))
    return memory


def _parallelism(lay: Layout, plan: Plan) -> Parallelism:
    return Parallelism(
        tp=lay.tp,
        pp=lay.pp,
        dp=lay.dp,
        ep=lay.ep,
        cp=lay.cp,
        zero=plan.zero,
        recompute=plan.recompute,
        sequence_parallel=plan.sequence_parallel,
    )


@dataclass(frozen=True)
class PlanColumns:
    """One plan as a batch of one: its layout, its row, its ledger columns and its gradient synchronisation."""

    layout: Layout
    row: Rows
    columns: Columns
    sync: GradSync


def plan_columns(m: ModelSpec, job: TrainingJob, plan: Plan, system: System) -> PlanColumns:
    """The columns of a batch of one plan (:func:`columns`), after the plan's checks (:func:`layout`)."""
    lay = layout(m, job, plan, system)
    sync = grad_sync(m, plan)
    row = Rows.of(plan)
    L = layout_constants(m, job, plan, lay.tp, lay.pp, lay.dp)
    return PlanColumns(lay, row, columns(m, job, plan, L, row, [sync]), sync)


def training_ledger(
    name: str, m: ModelSpec, job: TrainingJob, plan: Plan, system: System, columns: PlanColumns | None = None
) -> Ledger:
    """The ledger of one training step: the columns of a batch of one plan (``columns``: this plan's
    :func:`plan_columns`, when the caller prices them too; computed here otherwise)."""
    pc = columns or plan_columns(m, job, plan, system)
    lay, row, c, sync = pc.layout, pc.row, pc.columns, pc.sync
    p, mb = lay.pp, lay.num_microbatches
    s, b = job.seq_len, lay.micro_batch
    memory = _memory_items(plan, row, c, sync)
    method = f", {sync.method}" if sync.method != "none" else ""
    traffic = [x.traffic(0, system, x.purpose + method if x.method else None) for x in c.streams]

    v = plan.virtual_stages
    tokens = float(job.global_batch * s)
    fwd = c.forward
    phase = PhaseLedger(
        phase="train_step",
        tokens=tokens,
        flops=Flops(
            forward=fwd,
            backward=2.0 * fwd,
            recompute=float(c.recompute[0]),
            exchange=float(c.exchange[0]),
            model_total=c.model_total,
        ),
        gemm_rows=float(b * s / lay.cp),
        hbm_bytes=float(c.hbm_bytes[0]),
        traffic=[x for x in traffic if x is not None],
        pipeline_bubble_fraction=(p - 1) / (mb * v),
        operators=mb * float(c.layers_peak[0]) * OPERATORS_PER_LAYER * (3.0 + (plan.recompute == "full")),
    )
    params = count(m)
    return Ledger(
        scenario=name,
        model=m.name,
        params_total=params.total,
        params_active=params.active(m),
        num_devices=system.num_devices,
        compute_dtype=plan.compute_dtype,
        parallelism=_parallelism(lay, plan),
        phases=[phase],
        memory=memory,
        training=TrainingFacts(
            seq_len=s,
            global_batch=job.global_batch,
            micro_batch=b,
            num_microbatches=mb,
            tokens_per_step=tokens,
            total_tokens=job.total_tokens,
        ),
    )
