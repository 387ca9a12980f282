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

from aitrinity.cost.disaggregated import DisaggregatedState, KVLink, Pool, disaggregated_steady_state
from aitrinity.cost.estimate import (
    Estimate,
    PhaseEstimate,
    PoolMetrics,
    ResourceTime,
    concurrency_metrics,
    priced_resources,
    with_operators,
)
from aitrinity.cost.ledger import Ledger
from aitrinity.cost.operators import OPERATOR_LABELS, Layout, ScaleOut
from aitrinity.units import format_bytes

if TYPE_CHECKING:
    from aitrinity.cost.kernels import Kernels
    from aitrinity.spec.model import ModelSpec
    from aitrinity.spec.scenario import Disaggregation, Plan, ServingJob, System


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
    from aitrinity.cost.serving import effects, prefill_phase, weight_bytes_per_device

    d = plan.disaggregation
    assert d is not None and ledger.serving is not None
    qplan, fx = effects(plan)
    pre_plan = qplan.model_copy(update={"tp": d.prefill_tp, "ep": d.prefill_ep, "pp": 1})
    one = prefill_phase(m, pre_plan, system, 1, job.prompt_tokens, fx)
    ledger = ledger.model_copy(update={"phases": [one, ledger.phases[1]]})
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
    base = priced_resources(ledger, system)
    phases = [_prefill(base.phases[0], system, ds), _decode(base.phases[1], system, ds)]
    ttft, tpot = phases[0].time_s, phases[1].time_s if job.output_tokens > 1 else 0.0  # one output token: no TPOT
    latency = ttft + float(ds.transfer_s) + (job.output_tokens - 1) * tpot  # on the phases (a roofline floor holds)
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
    serving = concurrency_metrics(system, ttft, tpot, latency, clients * job.output_tokens / latency, pools)
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


def _prefill(ph: PhaseEstimate, system: System, ds: DisaggregatedState) -> PhaseEstimate:
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
    return with_operators(ph, system, float(ds.ttft_s), t1, [queue], parts)


def _decode(ph: PhaseEstimate, system: System, ds: DisaggregatedState) -> PhaseEstimate:
    parts = {op: (OPERATOR_LABELS[op], float(t)) for op, t in ds.decode_step.by_class().items()}
    step = float(ds.decode_step.total)  # the phase is the step a decode takes (TPOT is 0 without one: osl = 1)
    return with_operators(ph, system, max(float(ds.tpot_s), step), step, [], parts)
