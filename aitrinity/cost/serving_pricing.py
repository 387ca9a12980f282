"""The time and rates of serving, priced once for one plan and for the planner's rows (pure, on arrays).

A serving phase's ledger is computed on arrays, one row per plan (:class:`aitrinity.cost.serving.ServingArrays`;
one plan is a batch of one). This module prices those columns: ``trinity diagnose`` renders its row of one as an
Estimate (:func:`aitrinity.cost.estimate.estimate_concurrency`, :func:`aitrinity.cost.estimate.estimate_static`),
``trinity plan`` reads it for every candidate (:mod:`aitrinity.plan.vector_serving`).

* Each phase's roofline resources (:func:`phase_times`): compute, device memory and each link, by
  :func:`aitrinity.cost.estimate.roofline_times`.
* At fixed concurrency (:func:`concurrency_times`), the operator model's steady state
  (:func:`aitrinity.cost.concurrency.steady_state`, which the caller runs) combined with the exchanges' streams
  on host, storage or remote links under the system's overlap model, never faster than the roofline's slowest
  resource -- one request's prefill for TTFT, the decode step of every running request for TPOT. Little's law
  gives the rate of the closed loop (:func:`concurrency_rates`).
* A static batch (:func:`static_times`): each phase on the roofline, the resources combined under the overlap
  model, plus the operators' dispatch; every pipeline stage holds a batch (:func:`static_rates`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from aitrinity.cost import collectives as coll
from aitrinity.cost.estimate import GPU_CHANNELS, combine_rows, roofline_times
from aitrinity.cost.serving import PhaseColumns
from aitrinity.spec.scenario import System

if TYPE_CHECKING:
    from aitrinity.cost.disaggregated import DisaggregatedState

F = NDArray[np.float64]


@dataclass(frozen=True)
class PhaseTimes:
    """A phase's roofline resources, row-wise: compute, device memory, each link channel; bytes moved and the
    host-side dispatch of its operators."""

    compute: F
    hbm: F
    links: dict[str, F]
    moved: F
    """Bytes one device sends on every link."""
    dispatch: F
    """Operators x ``op_overhead_s`` (what the static batch adds in series)."""

    def times(self) -> list[F]:
        return [self.compute, self.hbm, *self.links.values()]

    def link_max(self) -> F:
        out: F = np.max(np.stack([np.zeros_like(self.compute), *self.links.values()]), axis=0)
        return out

    def floor(self) -> F:
        """The slowest resource: what no phase can beat."""
        out: F = np.max(np.stack(self.times()), axis=0)
        return out

    def streams(self) -> list[F]:
        """Links the operator model does not time (host, storage, remote: exchanges' streams)."""
        return [t for ch, t in self.links.items() if ch not in GPU_CHANNELS]


def phase_times(ph: PhaseColumns, system: System, compute_dtype: str) -> PhaseTimes:
    """:func:`aitrinity.cost.estimate.roofline_times` of every row's phase, and the bytes they move on links."""
    n = len(ph.tokens)
    c_bytes, c_msgs = coll.channel_totals(ph.streams, system, n)
    r = roofline_times(system, compute_dtype, ph.forward + ph.exchange, ph.gemm_rows, ph.hbm_bytes, c_bytes, c_msgs)
    moved = np.zeros(n)
    for ch in c_bytes:
        moved = moved + c_bytes[ch]
    return PhaseTimes(r.compute_s, r.memory_s, r.links_s, moved, ph.operators * system.eff.op_overhead_s)


def with_streams(system: System, phase: PhaseTimes, operator_s: ArrayLike) -> F:
    """The operator model's time of a phase with the exchanges' streams combined under the overlap model, never
    below the phase's slowest roofline resource."""
    op, floor, *streams = np.broadcast_arrays(np.asarray(operator_s, dtype=np.float64), phase.floor(), *phase.streams())
    out: F = np.maximum(combine_rows([op, *streams], system.overlap, system.overlap_fraction), floor)
    return out


def concurrency_times(
    system: System, one: PhaseTimes, dec: PhaseTimes, ttft_op: ArrayLike, tpot_op: ArrayLike
) -> tuple[F, F]:
    """TTFT and TPOT at fixed concurrency: the steady state's (``ttft_op``, ``tpot_op``) with the streams of one
    request's prefill (``one``) and of the decode step (``dec``), each above its phase's floor."""
    return with_streams(system, one, ttft_op), with_streams(system, dec, tpot_op)


def decoding(ds: DisaggregatedState) -> F:
    """The requests a decode replica runs at once in the settled loop (at least one): the batch its decode step --
    and that step's roofline floor and streams -- is priced at, rather than every client a replica serves."""
    out: F = np.maximum(np.asarray(ds.decode_batch, dtype=np.float64).reshape(-1), 1.0)
    return out


def pool_times(system: System, one: PhaseTimes, dec: PhaseTimes, ds: DisaggregatedState) -> tuple[F, F]:
    """Disaggregated pools (:func:`aitrinity.cost.disaggregated.disaggregated_steady_state`, ``ds``): TTFT from one
    request's prefill on a prefill worker (``one``) and the decode step on a decode replica (``dec``, at
    :func:`decoding`'s batch), each with its streams and above its floor. The decode phase is the step a decode
    takes, which a one-token output never does: its TPOT is then 0 (the caller's)."""
    step = np.maximum(np.asarray(ds.tpot_s, dtype=np.float64), np.asarray(ds.decode_step.total, dtype=np.float64))
    return with_streams(system, one, ds.ttft_s), with_streams(system, dec, step)


def static_times(system: System, pre: PhaseTimes, dec: PhaseTimes) -> tuple[F, F]:
    """TTFT and TPOT of a static batch: each phase's resources combined under the overlap model, plus the dispatch
    of its operators."""

    def time(ph: PhaseTimes) -> F:
        out: F = combine_rows(ph.times(), system.overlap, system.overlap_fraction) + ph.dispatch
        return out

    return time(pre), time(dec)


@dataclass(frozen=True)
class ServingRates:
    """A serving system's latency, rates and prices per row."""

    latency_s: F
    tokens_per_s: F
    """Decode rate (a static batch: batch x batches in flight x replicas / TPOT; at fixed concurrency the rate)."""
    throughput_tokens_per_s: F
    """End to end, prefill included."""
    usd_per_million_tokens: F
    """NaN without a price."""
    joules_per_token: F
    """NaN without a device power."""


def usd_per_s(system: System) -> float:
    """Every device of the system paid for; NaN without a price."""
    price = system.price_per_hour_usd
    return price * system.num_devices / 3600.0 if price is not None else np.nan


def watts(system: System) -> float:
    """Every device of the system busy; NaN without a device power (as $ without a price)."""
    power = system.power_W
    return power * system.num_devices if power is not None else np.nan


def concurrency_rates(
    system: System, clients: ArrayLike, replicas: ArrayLike, n_out: int, ttft: F, tpot: F, transfer_s: ArrayLike = 0.0
) -> ServingRates:
    """A closed loop of ``clients`` per replica: a request's latency (TTFT, the KV's trip between disaggregated pools
    ``transfer_s``, then ``n_out - 1`` steps) and Little's law's output rate over every replica; every device of the
    system powered and paid for."""
    latency: F = ttft + np.asarray(transfer_s, dtype=np.float64) + (n_out - 1) * tpot
    rate: F = np.asarray(clients, dtype=np.float64) * n_out / latency * np.asarray(replicas, dtype=np.float64)
    usd = usd_per_s(system) / rate * 1e6
    joules = watts(system) / rate
    return ServingRates(latency, rate, rate, usd, joules)


def static_rates(
    system: System, batch: ArrayLike, in_flight: ArrayLike, replicas: ArrayLike, n_out: int, ttft: F, tpot: F
) -> ServingRates:
    """A static batch prefilled at once, then decoded ``n_out`` steps; ``in_flight`` batches (one per pipeline stage)
    on every replica."""
    b = np.asarray(batch, dtype=np.float64)
    stages, copies = np.asarray(in_flight, dtype=np.float64), np.asarray(replicas, dtype=np.float64)
    latency = ttft + n_out * tpot
    out_tokens: F = b * n_out * stages * copies
    power = watts(system)
    return ServingRates(
        latency,
        b * stages * copies / tpot,
        out_tokens / latency,
        usd_per_s(system) * latency / out_tokens * 1e6,
        power * latency / out_tokens,
    )
