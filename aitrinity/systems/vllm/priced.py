"""A live vLLM server's period priced by the pricer ``trinity diagnose`` uses, and the Controller's advice on it.

``trinity watch`` measures a period's closed loop from the server's histograms (:class:`Load`: the requests that
finished, their mean prompt and output lengths, and by Little's law the clients in the loop -- the sum of their
latencies over the period). :func:`estimate` prices that load as ``trinity diagnose`` prices a serving scenario at
fixed concurrency: the ledger of :func:`aitrinity.cost.serving.serving_ledger`, priced by
:func:`aitrinity.cost.estimate.price_serving_ledger` (the operator model's steady state on ``kernels``: the measured
tables of the device where the caller has them, else its roofline). :class:`Served` is what the server runs: the
model, the device, the tensor-parallel degree, and -- where ``/metrics`` reports it -- the engine's own KV pool, so
that KV slots are the server's and not those the device's memory would give (vLLM's CPU engine sizes its pool by
``VLLM_CPU_KVCACHE_SPACE``, a GPU engine by ``--gpu-memory-utilization``).

:class:`Advisor` is the :class:`~aitrinity.control.controller.Controller` of that loop: its options are the plan as
served and each one-step move of the exchange registry's serving techniques (KV quantization, weight
quantization, KV offload where the system has host memory; those whose quality cost exceeds the job's
``max_accuracy_drop`` left out), each predicted by :func:`estimate` at the period's measured load -- a request's
latency in the closed loop, infinite where the plan does not fit. The Controller's margin and patience keep the
advice from flipping between periods. vLLM cannot change its KV dtype or weights while it runs, so the choice is
advice, not an action on the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aitrinity.catalog.loader import resolve_system
from aitrinity.control.controller import Controller, Decision
from aitrinity.cost.estimate import Estimate, price_serving_ledger
from aitrinity.cost.kernels import Kernels
from aitrinity.cost.memory import kv_tokens_held
from aitrinity.cost.serving import (
    effects,
    kv_bytes_per_token_per_device,
    plan_arrays,
    serving_ledger,
)
from aitrinity.plan import registry
from aitrinity.spec.hardware import Dtype
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, ServingJob, System, SystemInput
from aitrinity.systems.calibrate import as_served

AS_SERVED = "as served"
"""The Advisor's option for the plan the server runs."""


@dataclass(frozen=True)
class Load:
    """A period's closed loop, measured from the requests that finished in it."""

    requests: float
    """Requests that finished in the period."""
    clients: float
    """Requests in the server on average (Little's law: the finished requests' latencies summed over the period)."""
    prompt_tokens: float
    """Their mean prompt length."""
    output_tokens: float
    """Their mean output length."""
    latency_s: float
    """Their mean end-to-end latency."""
    ttft_s: float | None
    tpot_s: float | None
    """Their mean time per output token (None: no request produced two tokens)."""


@dataclass(frozen=True)
class Served:
    """What the server runs, as the pricer needs it."""

    model: ModelSpec
    system: System
    plan: Plan
    """The plan as served: its tensor parallelism and dtype, no exchange."""
    kernels: Kernels | None = None
    """The kernel times (None: the device's catalog roofline)."""
    kv_pool_tokens: int | None = None
    """One engine's KV pool in tokens (None: what the device's memory gives, as the ledger counts it)."""
    engines: int = 1
    """Data-parallel engines behind the server: the clients spread over them."""


def served(
    model: ModelSpec,
    device: str,
    tp: int = 1,
    dtype: Dtype = "bf16",
    kv_pool_tokens: int | None = None,
    kernels: Kernels | None = None,
    engines: int = 1,
) -> Served:
    """The server: ``model`` in ``dtype`` on ``tp`` devices named ``device`` (catalog name or a ``trinity calibrate``
    profile: its memory efficiency then from its weight streaming in ``dtype``, :func:`as_served`) under vLLM, with
    the engine's own KV pool of ``kv_pool_tokens`` tokens where known."""
    system = resolve_system(SystemInput(device=device, num_devices=tp, engine="vllm"))
    system = system.model_copy(update={"device": as_served(system.device, dtype)})
    return Served(model, system, Plan(tp=tp, compute_dtype=dtype), kernels, kv_pool_tokens, max(engines, 1))


def job(s: Served, load: Load) -> ServingJob:
    """The load as a serving job at fixed concurrency on one engine (lengths rounded, within the model's context)."""
    prompt = min(max(1, round(load.prompt_tokens)), s.model.max_seq_len - 1)
    output = max(1, min(round(load.output_tokens), s.model.max_seq_len - prompt))
    return ServingJob(prompt_tokens=prompt, output_tokens=output, batch=max(1, round(load.clients / s.engines)))


def system_at(s: Served, w: ServingJob) -> System:
    """The system the job is priced on. With the server's KV pool: a device memory whose usable part holds what the
    ledger counts for the ``n`` requests whole in the pool (weights, prefill workspace, their KV and logits) and the
    rest of the pool's KV -- so the ledger's memory check admits ``n`` requests under the plan as served, as the
    engine's pool does. Another plan (quantized KV or weights) fits what the same memory holds under it, as a GPU
    engine sizing its pool from free memory would."""
    if not s.kv_pool_tokens:
        return s.system
    q, fx = effects(s.plan)
    ctx = w.prompt_tokens + w.output_tokens
    per_token = kv_bytes_per_token_per_device(s.model, q)
    held = kv_tokens_held(s.model, ctx)
    n = max(s.kv_pool_tokens // held, 1)
    arrays = plan_arrays(s.model, q, fx)
    need = float(arrays.device_bytes(arrays.memory(np.array([float(n)]), w.prompt_tokens, ctx))[0])
    need += (s.kv_pool_tokens - n * held) * per_token
    dev = s.system.device.model_copy(update={"memory_capacity_bytes": need / s.system.usable_memory_fraction})
    return s.system.model_copy(update={"device": dev})


def overcommitted(s: Served) -> str | None:
    """Why the server's KV pool and weights cannot be on one of its devices as ``s`` describes it (a ``tp`` smaller
    than the server's, or a pipeline the watch does not know of), or None when they can."""
    if not s.kv_pool_tokens:
        return None
    need = system_at(s, ServingJob(prompt_tokens=1, output_tokens=1)).device.memory_capacity_bytes
    have = s.system.device.memory_capacity_bytes
    if need <= have:
        return None
    return (
        f"the weights of {s.model.name} at tp {s.plan.tp} and the server's KV pool of {s.kv_pool_tokens:,} tokens "
        f"need {need / 2**30:,.1f} GiB a device, more than {s.system.device.name}'s {have / 2**30:,.1f} GiB: is the "
        "server's tensor-parallel size (--tp) larger, or does it run a pipeline? (priced as given)"
    )


def estimate(s: Served, load: Load, plan: Plan | None = None) -> Estimate:
    """``load`` priced as ``trinity diagnose`` prices a serving scenario, under ``plan`` (default the server's)."""
    p = plan if plan is not None else s.plan
    w = job(s, load)
    system = system_at(s, w)
    led = serving_ledger("watch", s.model, w, p, system)
    return price_serving_ledger(led, s.model, p, w, system, s.kernels)


@dataclass(frozen=True)
class Expected:
    """What the pricer gives for a period: its busy time per resource for the period's tokens, and the closed loop's
    latencies at the period's load."""

    compute_s: float
    memory_s: float
    flops: float
    """Per device."""
    bytes: float
    """Device-memory traffic per device."""
    ttft_s: float
    tpot_s: float
    latency_s: float
    output_tokens_per_s: float
    running: int
    """Requests the engine's KV pool holds at once at this load (the rest wait for a slot)."""


def _resource_s(est: Estimate, phase: int, rid: str) -> float:
    return sum(r.time_s for r in est.phases[phase].resources if r.id == rid)


def expected(est: Estimate, prompt_tokens: float, generated_tokens: float) -> Expected:
    """The period's busy time on the estimate's resources: one request's prefill per ``prompt`` tokens of its length,
    one decode step (of the requests the engine runs at once) per that many generated tokens."""
    f = est.ledger.serving
    assert f is not None and est.serving is not None
    prefills = prompt_tokens / f.prompt_tokens
    steps = generated_tokens / max(f.running, 1)
    pre, dec = est.ledger.phases[0], est.ledger.phases[1]
    return Expected(
        compute_s=prefills * _resource_s(est, 0, "compute") + steps * _resource_s(est, 1, "compute"),
        memory_s=prefills * _resource_s(est, 0, "memory_bandwidth") + steps * _resource_s(est, 1, "memory_bandwidth"),
        flops=prefills * pre.flops.forward + steps * dec.flops.forward,
        bytes=prefills * pre.hbm_bytes + steps * dec.hbm_bytes,
        ttft_s=est.serving.ttft_s,
        tpot_s=est.serving.tpot_s,
        latency_s=est.serving.request_latency_s,
        output_tokens_per_s=est.serving.output_tokens_per_s,
        running=f.running,
    )


def options(s: Served, max_accuracy_drop: float = 0.01) -> dict[str, Plan]:
    """The plan as served and each one-step move of the registry's serving techniques from it, by label."""
    out = {AS_SERVED: s.plan}
    for x in registry.registered("serving"):
        d, mv = x.dimension, x.move
        if d is None or mv is None or (d.host and s.system.host_memory is None):
            continue
        for v in d.values:
            if v == d.plain or v == mv.get(s.plan):
                continue
            p = mv.put(s.plan, v, s.plan)
            if registry.quality_of(p.exchanges).accuracy_drop <= max_accuracy_drop:
                out[f"{x.kind} {v}"] = p
    return out


@dataclass
class Advisor:
    """The Controller of a watched server (module doc): each period with a measured load, the option predicted to
    serve a request fastest, with hysteresis."""

    served: Served
    plans: dict[str, Plan]
    controller: Controller
    last: dict[str, Expected] = field(default_factory=dict)
    """The latest period's prediction per option (an option that does not fit is absent)."""

    @classmethod
    def of(cls, s: Served, margin: float = 0.1, patience: int = 2, keep: int = 1000) -> Advisor:
        plans = options(s)
        return cls(s, plans, Controller(list(plans), AS_SERVED, margin=margin, patience=patience, keep=keep))

    def advise(self, load: Load) -> Decision:
        self.last = {}

        def predict(label: str) -> float:
            est = estimate(self.served, load, self.plans[label])
            if not est.memory.fits:
                return math.inf
            self.last[label] = expected(est, 0.0, 0.0)
            return self.last[label].latency_s

        return self.controller.decide(predict)


def advice_json(d: Decision) -> dict[str, Any]:
    return {
        "choice": d.choice,
        "switched": d.switched,
        "reason": d.reason,
        "predicted_latency_s": {k: (v if math.isfinite(v) else None) for k, v in d.predicted_s.items()},
    }
