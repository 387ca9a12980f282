"""The Estimate of a disaggregated serving plan (``plan.disaggregation``): two pools priced as one loop.

:func:`estimate_disaggregated` prices the scenario's clients on a prefill pool and a decode pool with
:func:`aitrinity.cost.disaggregated.disaggregated_steady_state` and keeps the Estimate contract of
:func:`aitrinity.cost.estimate.price_concurrency`: the ``prefill`` phase is one request's TTFT on a prefill worker
(its roofline resources, the operator classes, and the wait -- the iteration in flight, batching with other
prompts, a queue past the pool's capacity -- as ``queueing and scheduling``), the ``decode_step`` phase is TPOT on
a decode replica (no prompt shares its steps), and :class:`PoolMetrics` says how the two pools match: each one's
capacity, the prefill pool's load, the KV's trip and which pool binds.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from aitrinity.cost.disaggregated import DisaggregatedState, KVLink, Pool, disaggregated_steady_state
from aitrinity.cost.estimate import (
    Estimate,
    PhaseEstimate,
    PoolMetrics,
    ResourceTime,
    concurrency_metrics,
    operator_phase,
    priced_resources,
    retimed,
)
from aitrinity.cost.ledger import Ledger
from aitrinity.cost.operators import OPERATOR_LABELS, Layout, ScaleOut
from aitrinity.cost.serving_pricing import PhaseTimes, concurrency_rates, decoding, phase_times, pool_times
from aitrinity.units import format_bytes

if TYPE_CHECKING:
    from aitrinity.cost.kernels import Kernels
    from aitrinity.spec.model import ModelSpec
    from aitrinity.spec.scenario import Disaggregation, Plan, ServingJob, System


PHASES = ("prefill", "decode_step")


def kv_link(d: Disaggregation, system: System) -> KVLink:
    """The link a prompt's KV crosses: ``kv_link`` if named, else NVLink within one node, the NIC beyond."""
    inter = d.kv_link == "inter_node" or (d.kv_link is None and system.num_devices > system.devices_per_node)
    spec = system.inter_node_link if inter and system.inter_node_link is not None else system.intra_node_link
    return KVLink.of(spec)


def _label(lay: Layout) -> str:
    return f"tp{lay.tp}" + (f" ep{lay.ep}" if lay.ep > 1 else "")


def estimate_disaggregated(
    ledger: Ledger, m: ModelSpec, plan: Plan, job: ServingJob, system: System, kernels: Kernels, notes: list[str]
) -> Estimate:
    """The serving ``ledger`` (a decode replica's) priced on ``plan``'s two pools: its prefill phase becomes one
    prompt on a prefill worker, then the steady state of the whole loop (module doc)."""
    from aitrinity.cost.concurrency import profile
    from aitrinity.cost.serving import effects, pool_columns, weight_bytes_per_device

    d = plan.disaggregation
    assert d is not None and ledger.serving is not None
    qplan, fx = effects(plan)
    pre_plan = qplan.model_copy(update={"tp": d.prefill_tp, "ep": d.prefill_ep, "pp": 1})
    notes = [*notes, *_pool_notes(weight_bytes_per_device(m, pre_plan), system.usable_memory_bytes, fx.prefix_hit)]
    f = ledger.serving
    assert f is not None
    engine = system.engine
    pre_lay, dec_lay = _pool_layouts(qplan, d, job, system)
    pre_workers = d.prefill_devices // d.prefill_tp // d.prefill_ep
    clients = max(f.batch, 1) * f.replicas
    link = kv_link(d, system)
    ds = disaggregated_steady_state(
        m,
        kernels,
        Pool(pre_workers, pre_lay),
        Pool(f.replicas // qplan.ep, dec_lay),
        link,
        clients,
        job.prompt_tokens,
        job.output_tokens,
        profile(engine),
        token_budget=plan.prefill_chunk_tokens,
        speculation=fx.speculation,
    )
    # one prompt on a prefill worker, and the decode step of the requests a decode replica runs in the settled loop
    cols = pool_columns(m, pre_plan, qplan, fx, job.prompt_tokens, job.output_tokens, decoding(ds))
    ledger = ledger.model_copy(update={"phases": [c.ledger(p, 0, system) for c, p in zip(cols, PHASES, strict=True)]})
    one, dec = (phase_times(c, system, ledger.compute_dtype) for c in cols)
    base = priced_resources(ledger, system)
    ttft, step = pool_times(system, one, dec, ds)
    osl = job.output_tokens
    tpot = step if osl > 1 else np.zeros_like(step)  # one output token: no TPOT
    r = concurrency_rates(system, clients, 1, osl, ttft, tpot, ds.transfer_s)
    phases = [_prefill(base.phases[0], one, ds, float(ttft[0])), _decode(base.phases[1], dec, ds, float(step[0]))]
    pools = PoolMetrics(
        prefill_devices=d.prefill_devices,
        prefill_workers=pre_workers * d.prefill_ep,
        prefill_layout=_label(pre_lay),
        decode_devices=system.num_devices - d.prefill_devices,
        decode_replicas=f.replicas,
        decode_layout=_label(dec_lay) + (f" pp{plan.pp}" if plan.pp > 1 else ""),
        clients=clients,
        kv_link=link.name,
        kv_transfer_s=float(ds.transfer_s),
        prefill_utilization=float(ds.prefill_utilization),
        prefill_capacity_rps=float(ds.prefill_capacity_rps),
        decode_capacity_rps=float(ds.decode_capacity_rps),
        requests_per_s=float(ds.requests_per_s),
        binding_pool=str(ds.binding_pool),
    )
    serving = concurrency_metrics(
        system, float(ttft[0]), float(tpot[0]), float(r.latency_s[0]), float(r.tokens_per_s[0]), pools
    )
    return base.model_copy(update={"phases": phases, "serving": serving, "kernels": kernels.source, "notes": notes})


def _pool_layouts(qplan: Plan, d: Disaggregation, job: ServingJob, system: System) -> tuple[Layout, Layout]:
    """The prefill and decode pools' layouts: the same dtypes, engine and placement, each pool its TP and EP."""
    dec_lay = Layout(
        qplan.tp,
        qplan.ep,
        qplan.weights_dtype,
        qplan.cache_dtype,
        system.engine,
        routing=job.moe_routing,
        scale_out=ScaleOut.of(system),
        compute_dtype=qplan.compute_dtype,
    )
    return dataclasses.replace(dec_lay, tp=d.prefill_tp, ep=d.prefill_ep), dec_lay


def _pool_notes(weights: float, usable: float, prefix_hit: float) -> list[str]:
    out = []
    if weights > usable:
        per_device = f"{format_bytes(weights)} per device, above its usable {format_bytes(usable)}"
        out.append(f"a prefill worker's weights take {per_device}")
    if prefix_hit:
        out.append("a prefix cache's hits are not applied to disaggregated pools: every prompt is prefilled")
    return out


def _prefill(ph: PhaseEstimate, one: PhaseTimes, ds: DisaggregatedState, ttft_s: float) -> PhaseEstimate:
    """One request's TTFT on a prefill worker (``ttft_s``, :func:`aitrinity.cost.serving_pricing.pool_times`)."""
    t1 = float(ds.prefill_s)
    parts = {"request": ("server work per request (HTTP, tokenization)", float(ds.request_s))}
    for op, t in ds.prefill_step.by_class().items():
        parts[op] = (OPERATOR_LABELS[op], float(t))
    wait = float(ds.queue_s + ds.wave_s)
    parts["wait"] = ("wait for a prefill iteration (in flight, batching, queue)", float(ds.queue_s))
    parts["wave"] = ("wait behind prompts arriving together", float(ds.wave_s))
    queue = ResourceTime(
        id="latency:queueing",
        resource="queueing and scheduling",
        kind="latency",
        time_s=float(ds.request_s) + wait,
        detail="server work per request, the prefill pool's iterations in flight and its queue (closed loop)",
    )
    ph = ph.model_copy(update={"resources": retimed(ph.resources, one.compute, one.hbm, one.links)})
    return operator_phase(ph, ttft_s, t1 - float(one.floor()[0]), [queue], parts)


def _decode(ph: PhaseEstimate, dec: PhaseTimes, ds: DisaggregatedState, step_s: float) -> PhaseEstimate:
    """The decode step on a decode replica (``step_s``, :func:`aitrinity.cost.serving_pricing.pool_times`)."""
    parts = {op: (OPERATOR_LABELS[op], float(t)) for op, t in ds.decode_step.by_class().items()}
    step = float(ds.decode_step.total)  # the phase is the step a decode takes (TPOT is 0 without one: osl = 1)
    ph = ph.model_copy(update={"resources": retimed(ph.resources, dec.compute, dec.hbm, dec.links)})
    return operator_phase(ph, step_s, step - float(dec.floor()[0]), [], parts)
