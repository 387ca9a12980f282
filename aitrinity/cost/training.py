"""Ledger of one training step (pure): FLOPs, memory per stage, bytes per link.

Parallel layout (Megatron-LM, Narayanan et al. 2021): ``N = tp · pp · dp``
devices; experts are split over ``ep`` ranks inside the data-parallel group.
The step runs ``m = global_batch / (dp · micro_batch)`` micro-batches through a
1F1B pipeline.

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
"""

from __future__ import annotations

from dataclasses import dataclass

from aitrinity.cost import collectives as coll
from aitrinity.cost.effects import GradSync, find, grad_sync
from aitrinity.cost.flops import OPERATORS_PER_LAYER, layer_dense_flops, score_flops_per_query, token_flops
from aitrinity.cost.ledger import (
    Flops,
    Ledger,
    MemoryItem,
    Parallelism,
    PhaseLedger,
    Traffic,
    TrainingFacts,
)
from aitrinity.cost.memory import ModelStates, layer_activation_bytes, layer_activations, model_states
from aitrinity.cost.params import attention_params, count, mlp_params, norm_params
from aitrinity.errors import SpecError
from aitrinity.spec.exchanges import ActivationOffload
from aitrinity.spec.hardware import BYTES_PER_DTYPE
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, System, TrainingJob, check_plan

TP_TRAFFIC = "TP activations (per layer)"
PP_TRAFFIC = "PP activations and gradients"
"""The purposes of the traffic the training operator model times itself (the rest is priced on links)."""


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    ep: int
    micro_batch: int
    num_microbatches: int


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
    return Layout(plan.tp, plan.pp, dp, plan.ep, plan.micro_batch, job.global_batch // per_step)


def stage_bounds(num_layers: int, pp: int, stage: int) -> tuple[int, int]:
    """Layers ``[lo, hi)`` of pipeline stage ``stage``. An even split when ``pp`` divides the layers;
    otherwise the extra layers go to the middle stages first, so the first stage (embedding) and the last
    (LM head, loss) hold fewer: Llama 3's balance (Dubey et al. 2024, §3.3.2: 126 layers on 16 stages)."""
    per, extra = divmod(num_layers, pp)
    order = [*range(1, pp - 1), pp - 1, 0][:extra]  # which stages get one more layer
    lo = sum(per + (s in order) for s in range(stage))
    return lo, lo + per + (stage in order)


def stage_layers(m: ModelSpec, pp: int, stage: int) -> tuple[int, int]:
    """(dense layers, MoE layers) of pipeline stage ``stage``; MoE models put dense layers first."""
    lo, hi = stage_bounds(m.num_layers, pp, stage)
    per = hi - lo
    first_moe = m.num_layers - m.num_moe_layers
    moe = max(0, hi - max(lo, first_moe))
    return per - moe, moe


def stage_params(m: ModelSpec, lay: Layout, stage: int) -> tuple[float, float]:
    """(replicated, expert) parameters one device of ``stage`` holds after TP/EP splitting.

    Megatron keeps word embeddings on the first stage and the LM head on the
    last; tied embeddings keep a copy on both (Narayanan et al. 2021, §2.2).
    """
    h = m.hidden_size
    dense, moe = stage_layers(m, lay.pp, stage)
    norms = 2 * norm_params(m, h)
    rep = (dense + moe) * (attention_params(m) + norms) + dense * mlp_params(m, m.intermediate_size)
    expert = 0.0
    if m.moe:
        e = m.moe
        per_expert = mlp_params(m, e.expert_intermediate_size)
        rep += moe * (e.num_shared_experts * per_expert + h * e.num_experts + e.num_experts * e.router_bias)
        expert = moe * e.num_experts * per_expert / lay.ep
    if stage == 0:
        rep += m.vocab_size * h + m.learned_positions * h
    if stage == lay.pp - 1:
        rep += norm_params(m, h) + (m.vocab_size * h if (not m.tie_embeddings or lay.pp > 1) else 0)
    return rep / lay.tp, expert / lay.tp


def _states(m: ModelSpec, plan: Plan, lay: Layout, stage: int) -> ModelStates:
    rep, expert = stage_params(m, lay, stage)
    a = model_states(rep, plan, lay.dp)
    b = model_states(expert, plan, max(lay.dp // lay.ep, 1))
    return ModelStates(a.weights + b.weights, a.gradients + b.gradients, a.optimizer + b.optimizer)


def _activations(m: ModelSpec, job: TrainingJob, plan: Plan, lay: Layout, stage: int) -> float:
    """Saved activations on ``stage`` at the 1F1B peak (Korthikanti §4.2.3)."""
    s, b, t, p, v = job.seq_len, lay.micro_batch, lay.tp, lay.pp, plan.virtual_stages
    act_bytes = BYTES_PER_DTYPE[plan.compute_dtype]
    dense, moe = stage_layers(m, p, stage)
    per_mb = dense * layer_activation_bytes(layer_activations(m, s, b, False, act_bytes), plan)
    if moe:
        per_mb += moe * layer_activation_bytes(layer_activations(m, s, b, True, act_bytes), plan)
    in_flight = min(p - stage, lay.num_microbatches)
    interleave = 1.0 + (p - 1) / (p * v) if v > 1 else 1.0
    total = per_mb * in_flight * interleave
    if plan.recompute == "full":  # one layer's full activations live while it is recomputed
        full = plan.model_copy(update={"recompute": "none"})
        total += layer_activation_bytes(layer_activations(m, s, b, moe > 0, act_bytes), full)
    sp = t if plan.sequence_parallel else 1
    if stage == 0 and m.dropout:  # embedding dropout mask, sbhp/t (Korthikanti §4.3)
        total += s * b * m.hidden_size * in_flight / sp
    if stage == p - 1:  # final norm, output layer input and fp32 logits: 4sbh(1 + v/h)/t (§4.3)
        total += 4.0 * s * b * (m.hidden_size + m.vocab_size) / t
    return total


def peak_memory(m: ModelSpec, job: TrainingJob, plan: Plan, lay: Layout) -> tuple[float, int, ModelStates, float]:
    """(bytes, stage, model states, activations) of the pipeline stage with the largest footprint."""
    best: tuple[float, int, ModelStates, float] | None = None
    for st in range(lay.pp):
        states = _states(m, plan, lay, st)
        acts = _activations(m, job, plan, lay, st)
        if best is None or states.total + acts > best[0]:
            best = (states.total + acts, st, states, acts)
    assert best is not None
    return best


def _stage_flops(m: ModelSpec, job: TrainingJob, lay: Layout, stage: int) -> tuple[float, float]:
    """(dense, score) forward FLOPs of one device of ``stage`` per step."""
    tokens = job.global_batch * job.seq_len / lay.dp  # tokens through one pipeline per step
    dense_l, moe_l = stage_layers(m, lay.pp, stage)
    per_tok = dense_l * layer_dense_flops(m, False).dense
    if moe_l:
        per_tok += moe_l * layer_dense_flops(m, True).dense
    if stage == lay.pp - 1:
        per_tok += 2.0 * m.vocab_size * m.hidden_size
    score = (dense_l + moe_l) / m.num_layers * score_flops_per_query(m, job.seq_len)
    return tokens * per_tok / lay.tp, tokens * score / lay.tp


def _grad_traffic(
    sync: GradSync, rep: float, expert: float, plan: Plan, lay: Layout, system: System
) -> list[Traffic | None]:
    """Data-parallel gradient (and ZeRO-3 parameter) traffic under the plan's compression and local SGD."""
    d, t, e, mb = lay.dp, lay.tp, lay.ep, lay.num_microbatches
    groups = [("", rep, d, t), (" (experts)", expert, d // e, t * e)]
    out: list[Traffic | None] = []
    for tag, params, n, stride in groups:
        if params == 0:
            continue
        payload = params * sync.bytes_per_element
        if plan.zero < 3:
            kind: coll.Collective = "all-reduce" if sync.collective == "all-reduce" else "all-gather"
            total = payload if kind == "all-reduce" else payload * n  # a gather collects every rank's message
            label = f"DP gradient {kind}{tag}" + (f", {sync.method}" if sync.method != "none" else "")
            out.append(coll.traffic(label, kind, total, n, 1.0 / sync.period, stride, system))
        else:
            w_bytes = params * BYTES_PER_DTYPE[plan.weights_dtype]
            out.append(
                coll.traffic(f"ZeRO-3 gradient reduce-scatter{tag}", "reduce-scatter", payload, n, mb, stride, system)
            )
            out.append(
                coll.traffic(
                    f"ZeRO-3 parameter all-gather (fwd+bwd){tag}", "all-gather", w_bytes, n, 2 * mb, stride, system
                )
            )
    return out


def _with_offloads(plan: Plan, memory: list[MemoryItem], params: float, sync: GradSync) -> list[MemoryItem]:
    """The memory items after the plan's offloads move categories to host memory, plus error-feedback buffers."""
    act_off = find(plan, "activation-offload")
    opt_off = find(plan, "optimizer-offload") is not None
    out: list[MemoryItem] = []
    for item in memory:
        if item.category == "optimizer" and opt_off:
            out.append(item.model_copy(update={"tier": "host"}))
        elif item.category == "activations" and isinstance(act_off, ActivationOffload):
            out.append(item.model_copy(update={"bytes": item.bytes * (1 - act_off.fraction)}))
            out.append(MemoryItem(tier="host", category="activations", bytes=item.bytes * act_off.fraction))
        else:
            out.append(item)
    if sync.error_feedback_bytes_per_param:
        out.append(MemoryItem(category="buffers", bytes=params * sync.error_feedback_bytes_per_param))
    return out


def training_ledger(name: str, m: ModelSpec, job: TrainingJob, plan: Plan, system: System) -> Ledger:
    lay = layout(m, job, plan, system)
    t, p, d, e, mb = lay.tp, lay.pp, lay.dp, lay.ep, lay.num_microbatches
    s, b = job.seq_len, lay.micro_batch
    act = BYTES_PER_DTYPE[plan.compute_dtype]

    # --- memory: the stage with the largest footprint is the busiest device
    _, peak_stage, states, acts = peak_memory(m, job, plan, lay)
    memory = [
        MemoryItem(category="weights", bytes=states.weights),
        MemoryItem(category="gradients", bytes=states.gradients),
        MemoryItem(category="optimizer", bytes=states.optimizer),
        MemoryItem(category="activations", bytes=acts),
    ]

    # --- FLOPs: the slowest stage sets the pace of the pipeline
    per_stage = [_stage_flops(m, job, lay, st) for st in range(p)]
    dense_f, score_f = max(per_stage, key=lambda x: x[0] + x[1])
    fwd = dense_f + score_f
    recompute = {"none": 0.0, "selective": score_f, "full": fwd}[plan.recompute]
    if plan.flash_attention:  # FA backward recomputes QK^T: 2.5x forward instead of 2x (Dao 2023, §3.1)
        recompute += 0.5 * score_f * (1.0 if plan.recompute != "full" else 0.0)
    tf = token_flops(m)
    tokens = float(job.global_batch * s)
    model_total = 3.0 * tokens * (tf.dense + score_flops_per_query(m, s))

    # --- HBM traffic on the busiest device (lower bound: each operand moved once per use)
    rep, expert = stage_params(m, lay, peak_stage)
    w_dev = (rep + expert) * BYTES_PER_DTYPE[plan.weights_dtype]
    g_dev = (rep + expert) * BYTES_PER_DTYPE[plan.grads_dtype]
    per_mb_acts = _activations(m, job, plan, lay, peak_stage) / max(min(p - peak_stage, mb), 1)
    hbm = mb * (3.0 * w_dev + 2.0 * g_dev + 2.0 * per_mb_acts)
    offload_opt = find(plan, "optimizer-offload") is not None
    if not offload_opt:
        hbm += 2.0 * states.optimizer + g_dev + w_dev  # optimizer step: read+write states, read grads, write weights

    # --- communication
    dense_l, moe_l = stage_layers(m, p, peak_stage)
    layers = dense_l + moe_l
    a_bytes = b * s * m.hidden_size * act
    per_layer = 4 + (2 if plan.recompute == "full" else 0)
    traffic = [
        coll.traffic(TP_TRAFFIC, "all-reduce", a_bytes, t, layers * mb * per_layer, 1, system),
        coll.traffic(PP_TRAFFIC, "p2p", a_bytes / t, p, 2 * mb, t * d, system) if p > 1 else None,
    ]
    sync = grad_sync(m, plan)
    traffic += _grad_traffic(sync, rep, expert, plan, lay, system)
    if m.moe and e > 1 and moe_l:
        k = m.moe.experts_per_token
        a2a = 4 + (2 if plan.recompute == "full" else 0)
        traffic.append(
            coll.traffic(
                "EP token all-to-all", "all-to-all", b * s * k * m.hidden_size * act / t, e, moe_l * mb * a2a, t, system
            )
        )

    # --- exchanges: gradient compression / local SGD work, offloads to host memory
    hbm += (rep + expert) * sync.hbm_bytes_per_element / sync.period
    overhead = (rep + expert) * sync.flops_per_param / sync.period
    memory = _with_offloads(plan, memory, rep + expert, sync)
    act_off = find(plan, "activation-offload")
    if offload_opt:  # ZeRO-Offload (Ren et al. 2021, §4): gradients to the host, updated weights back,
        # and the CPU's Adam step streams the states through host DRAM (overlapped by the one-step delay, §4.2)
        traffic.append(coll.transfer("optimizer offload: gradients down, weights up", "host", g_dev + w_dev, 2.0))
        cpu = 2.0 * states.optimizer + g_dev + w_dev
        traffic.append(coll.transfer("optimizer offload: CPU update", "host_dram", cpu, 1.0))
    if isinstance(act_off, ActivationOffload):  # saved activations out in forward, back in backward
        traffic.append(
            coll.transfer("activation offload", "host", 2.0 * act_off.fraction * per_mb_acts * mb, 2.0 * mb * layers)
        )

    v = plan.virtual_stages
    phase = PhaseLedger(
        phase="train_step",
        tokens=tokens,
        flops=Flops(forward=fwd, backward=2.0 * fwd, recompute=recompute, exchange=overhead, model_total=model_total),
        gemm_rows=float(b * s),
        hbm_bytes=hbm,
        traffic=[x for x in traffic if x is not None],
        pipeline_bubble_fraction=(p - 1) / (mb * v),
        operators=mb * layers * OPERATORS_PER_LAYER * (3.0 + (plan.recompute == "full")),
    )
    pc = count(m)
    return Ledger(
        scenario=name,
        model=m.name,
        params_total=pc.total,
        params_active=pc.active(m),
        num_devices=system.num_devices,
        compute_dtype=plan.compute_dtype,
        parallelism=Parallelism(
            tp=t, pp=p, dp=d, ep=e, zero=plan.zero, recompute=plan.recompute, sequence_parallel=plan.sequence_parallel
        ),
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
