"""Disaggregated serving at a fixed concurrency: a prefill pool and a decode pool, and the KV between them.

The layout DistServe (Zhong et al., OSDI'24), Mooncake (Qin et al., FAST'25) and NVIDIA Dynamo run: ``P``
prefill workers only compute prompts, ``D`` decode workers only generate; a prompt's KV cache crosses a link
from the one to the other. The protocol is the closed loop of :mod:`aitrinity.cost.concurrency` (``c`` clients,
``isl`` / ``osl``), and the steady state is solved for the whole loop at once:

- **Decode.** A request decodes on one of the ``D x dp`` decode replicas; with ``n`` requests on a replica a step
  takes ``t_d(n)`` (the operator model, no prompt in it: that is the point of disaggregation), so
  ``TPOT = t_d(n)``, where ``n`` is the replica's share of the requests decoding (Little's law:
  ``X · (osl - 1) · TPOT / (D · dp)``, at most the pool's ``batch``; clients beyond the decode pool's slots are not
  queued for one -- the loop is taken to fit, as in the measured runs' layouts).
- **Prefill.** A replica of the prefill pool runs iterations back to back while prompts wait, each taking every
  waiting prompt up to ``b`` (its token budget over ``isl``, at most the pool's ``batch``): gated batch service.
  An iteration of ``β`` prompts takes ``t(β) ≈ f + a·β`` (the operator model at ``β = 1`` and ``β = b``). At a
  throughput ``x`` per replica the iterations settle where each one collects the prompts that arrived during
  the one before, ``β = max(1, x·t(β))``, so ``β = x f / (1 - x a)`` (clipped to ``[1, b]``); a prompt waits
  for the iteration in flight (busy share ``u = x t(β) / β``, half an iteration on average) and is then
  prefilled in the next: ``F(x) = u t(β)/2 + t(β)``. The loop closes it: ``x = (c / (P·dp)) / (z + F(x))`` with
  ``z`` the rest of a request's cycle (overhead, KV transfer, decode); past the pool's capacity ``b / t(b)`` the
  prompts queue and ``TTFT`` is what the closed loop leaves: ``c / X - z``.
- **TTFT** = ``t_request`` + that prefill latency + the first round's wave (all ``c`` clients start at once:
  ``w_batch · (⌈c/(P·dp·b)⌉ - 1)/2 · t(b)``, the wave term of the aggregated model). The first token leaves
  the prefill worker; the KV then crosses the link (``bytes / bandwidth + latency``, each of the prefill
  replica's ``tp`` GPUs sending the KV it holds: its heads' share, or all of it for MLA's latent or fewer KV heads
  than GPUs), which delays the second token: it is in the request's latency, not
  in TTFT, as the simulator counts it (:mod:`aitrinity.sim.serving`).

**Rate matching.** Each pool's capacity in requests per second -- ``P · dp · b / t(b)`` for prefill, the decode pool's
``D · dp · batch`` slots over a request's decode time for decode -- and the one that binds are reported: a split
is balanced when neither pool idles while the other queues (DistServe §4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from aitrinity.cost.concurrency import EngineProfile, profile
from aitrinity.cost.kernels import Array, Kernels
from aitrinity.cost.memory import kv_bytes_per_token, kv_shard_factor
from aitrinity.cost.operators import OPERATOR_CLASSES, Layout, StepShape, StepTimes, step_times
from aitrinity.cost.speculation import Speculation, speculative_step
from aitrinity.spec.hardware import LinkSpec
from aitrinity.spec.model import ModelSpec

_OUTER = 12
"""Fixed-point rounds between the decode occupancy and the prefill loop at most (they stop when the occupancy
settles to 1e-6; TPOT moves little with the decode batch there)."""
_BISECT = 40
"""Halvings of the prefill throughput's bracket: 2^-40 of the replica's capacity."""


@dataclass(frozen=True)
class Pool:
    """One side of a disaggregated deployment: ``workers`` engine instances of one layout."""

    workers: ArrayLike
    """Engine instances (an array prices many pool sizes at once: it broadcasts with the clients)."""
    layout: Layout
    batch: float = np.inf
    """Sequences one replica runs at once at most (the engine's max batch; for prefill, prompts per step)."""

    def __post_init__(self) -> None:
        if np.min(self.workers) < 1:
            raise ValueError(f"a pool needs at least one worker, not {np.min(self.workers)}")

    @property
    def replicas(self) -> Array:
        """Attention replicas that each take their own requests (workers x attention DP)."""
        out: Array = np.asarray(self.workers, dtype=np.float64) * self.layout.dp
        return out


@dataclass(frozen=True)
class KVLink:
    """The link a prompt's KV crosses from a prefill GPU to a decode GPU (per GPU; the TP ranks send in parallel)."""

    bandwidth_Bps: float
    latency_s: float = 0.0
    name: str = ""

    @classmethod
    def of(cls, spec: LinkSpec) -> KVLink:
        """A catalog link at its achievable bandwidth (``bandwidth_Bps x efficiency``)."""
        return cls(spec.bandwidth_Bps * spec.efficiency, spec.latency_s, spec.name)


@dataclass(frozen=True)
class DisaggregatedState:
    """Per-request times of a disaggregated deployment at a fixed concurrency (arrays of the broadcast shape)."""

    ttft_s: Array
    tpot_s: Array
    request_latency_s: Array
    requests_per_s: Array
    output_tokens_per_s: Array
    prefill_s: Array
    """``t(1)``: one prompt's prefill alone on a prefill replica."""
    queue_s: Array
    """TTFT's prefill latency beyond ``t(1)``: the iteration in flight, batching with others, a queue past
    capacity."""
    wave_s: Array
    """The first round's wait behind prompts that arrive together."""
    request_s: Array
    """TTFT's part outside the GPU (the engine profile's ``t_request``)."""
    transfer_s: Array
    """The KV's trip from the prefill to the decode pool (after the first token)."""
    prefill_utilization: Array
    """A prefill replica's throughput over its capacity."""
    decode_batch: Array
    """Requests decoding on one decode replica."""
    prefill_capacity_rps: Array
    decode_capacity_rps: Array
    prefill_step: StepTimes
    """One prompt's prefill alone, by operator class."""
    decode_step: StepTimes
    """The decode step at the loop's occupancy, by operator class."""

    @property
    def binding_pool(self) -> Array:
        """'prefill' or 'decode': the pool whose capacity is nearer its load."""
        load_p = self.requests_per_s / self.prefill_capacity_rps
        load_d = self.requests_per_s / self.decode_capacity_rps
        return np.where(load_p >= load_d, "prefill", "decode")


def disaggregated_steady_state(
    m: ModelSpec,
    k: Kernels,
    prefill: Pool,
    decode: Pool,
    link: KVLink,
    concurrency: ArrayLike,
    isl: ArrayLike,
    osl: ArrayLike,
    engine: EngineProfile | None = None,
    token_budget: float = 8192.0,
    speculation: Speculation | None = None,
) -> DisaggregatedState:
    """TTFT, TPOT and throughput of ``prefill`` + ``decode`` pools serving ``concurrency`` clients (module doc).
    ``token_budget``: prompt tokens one prefill iteration takes at most (the engine's; 8,192 by default).
    ``speculation``: the decode pool verifies a speculative decoder's drafts (:mod:`aitrinity.cost.speculation`);
    its step is then priced per output token."""
    prof = engine or profile(decode.layout.engine)
    c = np.maximum(np.asarray(concurrency, dtype=np.float64), 1.0)
    s_in = np.maximum(np.asarray(isl, dtype=np.float64), 1.0)
    s_out = np.maximum(np.asarray(osl, dtype=np.float64), 1.0)
    c, s_in, s_out, rp, rd = np.broadcast_arrays(c, s_in, s_out, prefill.replicas, decode.replicas)
    pre = _PrefillIterations.of(m, k, prefill, s_in, token_budget, prof.step_overhead_s)
    transfer = _kv_transfer_s(m, prefill, link, s_in)
    ctx = s_in + s_out / 2.0
    steps = s_out - 1.0
    clients = c / rp

    def decode_at(n: Array) -> StepTimes:
        if speculation is None:
            return step_times(m, k, decode.layout, StepShape(np.maximum(n, 1.0), ctx), prof.step_overhead_s)
        return speculative_step(m, k, decode.layout, np.maximum(n, 1.0), ctx, speculation, prof.step_overhead_s)

    x, n_dec, dec = _settle(c, clients, rp, rd, decode.batch, steps, prof.request_overhead_s + transfer, pre, decode_at)
    tpot = np.where(s_out > 1.0, dec.total, 0.0)  # one output token: no TPOT (cost.concurrency's module doc)
    z = prof.request_overhead_s + transfer + steps * tpot
    prefill_s, wave = _prefill_wait(prof, pre, x, clients, z)
    ttft = prof.request_overhead_s + prefill_s + wave
    latency = ttft + transfer + steps * tpot
    rps = c / latency
    slots = np.minimum(np.maximum(c / rd, 1.0), decode.batch)
    full = decode_at(slots)
    return DisaggregatedState(
        ttft_s=ttft,
        tpot_s=tpot,
        request_latency_s=latency,
        requests_per_s=rps,
        output_tokens_per_s=rps * s_out,
        prefill_s=pre.t_one,
        queue_s=prefill_s - pre.t_one,
        wave_s=wave,
        request_s=np.full(c.shape, prof.request_overhead_s),
        transfer_s=transfer,
        prefill_utilization=x / pre.capacity,
        decode_batch=n_dec,
        prefill_capacity_rps=rp * pre.capacity,
        decode_capacity_rps=rd * slots / (steps * full.total + transfer),
        prefill_step=pre.one,
        decode_step=dec,
    )


def _kv_transfer_s(m: ModelSpec, prefill: Pool, link: KVLink, s_in: Array) -> Array:
    """One prompt's KV crossing from the prefill pool to the decode pool: each prefill rank sends the KV it holds
    (its heads' share; MLA's latent and too few KV heads are replicated)."""
    kv = kv_bytes_per_token(m, prefill.layout.kv_dtype) * kv_shard_factor(m, prefill.layout.tp) * s_in
    return link.latency_s + kv / link.bandwidth_Bps


def _prefill_wait(
    prof: EngineProfile, pre: _PrefillIterations, x: Array, clients: Array, z: Array
) -> tuple[Array, Array]:
    """A prompt's time in the prefill pool at ``x`` prompts per second per replica, and the wave term: below
    capacity its latency at that load, past it the queue the closed loop leaves (``clients / x`` less the rest of a
    cycle, ``z``), which holds the first round's wave too."""
    wave = prof.batch_wait * (np.ceil(clients / pre.batch) - 1.0) / 2.0 * pre.t_batch
    queued = clients / x - z
    wave = np.where(queued > pre.latency(x) + wave, 0.0, wave)
    return np.maximum(pre.latency(x), queued), wave


@dataclass(frozen=True)
class _PrefillIterations:
    """A prefill replica's gated batch service (module doc): iterations of 1 and of ``b`` prompts, and
    ``t(β) = f + a·β`` between them."""

    batch: Array
    """``b``: prompts one iteration takes at most (the token budget over ``isl``, at most the pool's batch)."""
    one: StepTimes
    """One prompt's iteration, by operator class."""
    t_one: Array
    t_batch: Array
    slope: Array
    """``a``."""
    fixed: Array
    """``f``."""

    @classmethod
    def of(
        cls, m: ModelSpec, k: Kernels, pool: Pool, s_in: Array, token_budget: float, overhead_s: float
    ) -> _PrefillIterations:
        zero, one = np.zeros(s_in.shape), np.ones(s_in.shape)
        b = np.maximum(np.minimum(np.floor(token_budget / s_in), pool.batch), 1.0)
        pre = step_times(m, k, pool.layout, StepShape(zero, one, np.stack([one, b]), s_in), overhead_s)
        t1, tb = pre.total[0], pre.total[1]
        a = np.where(b > 1.0, (tb - t1) / np.maximum(b - 1.0, 1.0), 0.0)
        return cls(b, StepTimes(*(getattr(pre, f)[0] for f in OPERATOR_CLASSES)), t1, tb, a, t1 - a)

    @property
    def capacity(self) -> Array:
        """Prompts per second of one replica."""
        out: Array = self.batch / self.t_batch
        return out

    def latency(self, x: Array) -> Array:
        """``F(x)``: a prompt's wait for the iteration in flight and its own iteration at throughput ``x``."""
        f, a = self.fixed, self.slope
        beta = np.minimum(np.maximum(x * f / np.maximum(1.0 - x * a, 1e-12), 1.0), self.batch)
        it = f + a * beta
        busy = np.minimum(x * it / beta, 1.0)
        out: Array = busy * it / 2.0 + it
        return out


def _settle(
    c: Array,
    clients: Array,
    rp: Array,
    rd: Array,
    batch: float,
    steps: Array,
    fixed_s: Array,
    pre: _PrefillIterations,
    decode_at: Callable[[Array], StepTimes],
) -> tuple[Array, Array, StepTimes]:
    """The fixed point between the decode occupancy and the prefill loop: a prefill replica's throughput, the
    requests decoding on a decode replica and its step (``fixed_s``: overhead and the KV's trip)."""
    n_dec = np.minimum(c / rd, batch)
    dec = decode_at(n_dec)
    x = np.zeros(c.shape)
    moving = np.ones(c.shape, dtype=bool)  # rows still iterating: a settled row keeps its values, so a row's result
    for _ in range(_OUTER):  # does not depend on the rows priced beside it (the planner's batch = diagnose's one)
        # the rest of a request's cycle beside the prefill replica: overhead, the KV's trip, decode
        x_new = _throughput(clients, fixed_s + steps * dec.total, pre.capacity, pre.latency)
        n_new = np.minimum(x_new * rp * steps * dec.total / rd, batch)
        settled = np.isclose(n_new, n_dec, rtol=1e-6, atol=0.0)
        x = np.where(moving, x_new, x)
        n_dec = np.where(moving, n_new, n_dec)
        dec = decode_at(n_dec)
        moving &= ~settled
        if not moving.any():
            break
    return x, n_dec, dec


def _throughput(clients: Array, z: Array, capacity: Array, latency: Callable[[Array], Array]) -> Array:
    """A prefill replica's throughput ``x`` in its closed loop: the root of ``x (z + F(x)) = clients`` below
    ``capacity`` (the left side rises with ``x``), or ``capacity`` where the loop would push past it."""
    lo, hi = np.zeros(z.shape), capacity.copy()
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        above = mid * (z + latency(mid)) > clients
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return 0.5 * (lo + hi)
