"""Serving at a fixed concurrency: the steady state that serving benchmarks measure.

The protocol (``workload.serving.mode: concurrency``): ``c`` clients each send a request of ``isl``
prompt tokens for ``osl`` output tokens and send the next one when it completes (a closed loop); the
engine batches continuously (Orca, Yu et al. 2022), mixing prefills into decode steps (Sarathi-Serve,
Agrawal et al. 2024). A request's life is its TTFT and then ``osl - 1`` decode steps, so its latency is
``T = TTFT + (osl - 1)·TPOT`` and the system completes ``c / T`` requests per second (Little's law).

TPOT -- the mean step a decoding request sits in. With ``c`` requests alive, each step decodes ``c``
tokens; every other request also brings ``isl`` prompt tokens once per ``osl`` steps, so on average a
step of a decoding request carries ``(c-1)/osl`` prompts' prefill work on top (the amortised share that
the measured TPOT includes; a request's own prompt is in its TTFT, so a lone client's TPOT has none):

    TPOT = t_step(decode c) + f_mix · ((c-1) / osl) · [t_step(decode c-1, prefill 1) - t_step(decode c)]

TTFT -- the prefill and the waits before it:

    TTFT = t_request + t_step(decode c-1, prefill 1) + (c-1)/c · (n_prefill - 1) · t_step(decode c-1, prefill 1)
           + 1/c · L · t_step(decode c)
           + f_mix · (c-1)/osl · n_prefill/2 · [t_step(decode c-1, prefill 1) - t_step(decode c)]
           + w_batch · (c-1)/2 · t_prefill(1)

(for a prompt longer than the engine's token budget ``B``, the ``n_prefill - 1`` steps past the prompt's own are
steps of ``B`` prompt tokens: a 128k-token prompt's work is not repeated by the step in flight or the lag)

``t_request`` the server's fixed work per request outside the GPU (HTTP, tokenization, hand-off);
``n_prefill`` mixed steps (the prompt's own step, the step in flight when it arrives, scheduler lag and
the chunks of a long prompt), fitted where other clients keep the engine busy (the development runs have 4 to
224); a lone client's prompt meets an idle engine, so it takes its own step and the ``L`` decode steps of a
first-token lag (:attr:`EngineProfile.first_token_lag`), as the simulator replays it, and the fitted steps past its
own are weighed by ``(c-1)/c`` between the two (an interpolation: no development run has fewer than 4 clients; with
8 or more it is within 12.5% of the fit); ``(c-1)/osl · n_prefill/2`` the other clients' prompts already waiting
when it arrives and prefilled in the same steps (Little's law: they arrive ``(c-1)/osl`` a step, and it waits about the
half of its ``n_prefill`` steps before its own -- the residual of the step in flight, and with an overlap scheduler the
step scheduled ahead of it), each adding the share ``f_mix`` of its prefill that TPOT's steps carry too (nothing
fitted: the term the simulator's queue of prompts holds and the fitted one-prompt steps did not, 2026-12-06);
``(c-1)/2 · t_prefill(1)`` the mean wait behind the other prompts of a
wave that arrives together -- all ``c`` clients start at once, so the first round is one such wave, and
an engine whose clients stay synchronised (equal request lengths) keeps meeting them; ``w_batch`` is the
share of requests that wait so (about 1/rounds when only the first round does). Engines differ in which
term dominates, so the weights are an :class:`EngineProfile`. (A wait of one inter-completion time
``T/c`` for admission was tried too and fitted to zero on every engine.)

Lock-step waves (``EngineProfile.lockstep``): when every request has exactly the same lengths and the engine
adds no timing jitter of its own, clients that start together finish together and send their next
prompts together, round after round (the simulator does the same with no output spread). The engine is
idle when a round's prompts arrive, so the first to reach it starts a step alone (``t_1``); the other
``c' = c - 1`` arrive during that step (their host time, HTTP and tokenization, is shorter than a prefill: on
vLLM's CPU engine 4-7 ms against 130 ms and more) and make one wave that the engine prefills in
``n' = ceil(c'·isl / B)`` steps of its token budget ``B``, ``c'/n'`` prompts a step, the decodes of the prompts
already done riding along. A request's first token comes with its own step, and its decodes carry the wave
steps after it -- all ``n'`` of them for the first request:

    TTFT = t_request + t_1 + (c'/c)·(n' + 1)/2 · t_wave
    TPOT = t_step(decode c) + [n' + c'(n' - 1)/2] / c · (t_wave - t_step(decode c)) / (osl - 1)

with nothing fitted: the closed form of what the simulator replays when a wave takes one step (``c'·isl <= B``,
``tests/cost/test_concurrency.py`` compares them round after round). A wave of several steps splits the round:
its prompts finish prefill steps apart, so their clients return apart and later rounds arrive as smaller groups
that the simulator prefills beside the others' decodes; the formulas price every round like the first (the
first round alone: within 6-18% of the simulator; over three rounds the simulator's TTFT is up to a third lower).
``benchmarks/bench_vllm.py`` prices vLLM's CPU engine this way; its grid's waves take one or two steps.

An engine that runs prompt steps apart from decode steps (``mixed_batches=False``, SGLang) stalls the decodes
through the waves instead of carrying them: the same count of wave steps, each whole (``t_w`` in place of
``t_w - t_dec``), and every request of a round decodes together after the last wave, so they finish together and the
round repeats exactly, however many steps its wave takes. A first-token lag of ``L`` steps (an overlap scheduler)
adds the ``L`` steps after a prompt's own. SGLang's profile is of this kind (:data:`ENGINE_PROFILES`).

A request of one output token (``osl = 1``: a prefill-only workload, scoring, a router) has no step after its first
token, so no TPOT: it is 0, as the simulator and the serving benchmarks count it (vLLM's ``bench serve`` keeps no
TPOT sample for such a request), and a TPOT objective cannot refuse it.

More clients than KV slots (``kv_slots``, :mod:`aitrinity.cost.kv_pool`: the requests the engine's KV pool holds
at once): ``n`` of the ``c`` requests run and the others wait for one to finish. The running ones are priced as
above with ``n`` clients, each holding its slot for ``S = TTFT_n - t_request + (osl - 1)·TPOT_n``; the slots never
idle, so the engine completes ``n / S`` requests per second and each client's cycle is ``c·S / n`` (Little's law);
what the request's own ``t_request`` does not fill of the difference is its wait for a slot:

    wait = max((c/n - 1)·S - t_request, 0)          TTFT = TTFT_n + wait

(the simulator queues for real slots; ``tests/sim/test_serving.py`` compares the two).

The profile's constants cannot come from kernel tables (they are scheduling behaviour), so they are
**fitted** on the development runs only (``benchmarks/bench_silicon.py --fit``) and named in
:data:`ENGINE_PROFILES`; docs/silicon.md gives the values and the held-out check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from aitrinity.cost.kernels import Array, Kernels
from aitrinity.cost.operators import OPERATOR_CLASSES, Layout, StepShape, StepTimes, step_times
from aitrinity.cost.speculation import Speculation, speculative_step
from aitrinity.spec.model import ModelSpec


@dataclass(frozen=True)
class EngineProfile:
    """An engine's scheduling behaviour and host time (see module doc)."""

    step_overhead_s: float
    """Host-side time per step (scheduler, sampling, input preparation) on top of the kernels."""
    prefill_interference: float
    """``f_mix``: the share of the amortised prefill work a decoding request's steps carry."""
    prefill_steps: float
    """``n_prefill``: mixed steps until the first token (chunks, scheduling lag)."""
    batch_wait: float
    """``w_batch``: weight of the wait behind the other prompts of a synchronised wave."""
    request_overhead_s: float = 0.0
    """``t_request``: per-request time outside the GPU before the first token (HTTP, tokenization)."""
    sequence_overhead_s: float = 0.0
    """Host time per sequence in a step (sampling, input preparation that grows with the batch); 0 for the
    GPU-fitted profiles, whose ``step_overhead_s`` absorbs it. ``benchmarks/bench_vllm.py`` measures it for
    vLLM's CPU engine."""
    lockstep: bool = False
    """Clients stay in lock-step waves (module doc): TTFT and TPOT from the waves, not from the fitted
    ``prefill_interference`` / ``prefill_steps`` / ``batch_wait``, which describe clients that drift apart."""
    token_budget: float = 8192.0
    """Tokens the engine processes per step (``--max-num-batched-tokens``); read by the lock-step waves."""
    mixed_batches: bool = True
    """Prompt work and decodes share a step (chunked prefill); False: a step with a prompt to run runs no decodes
    (SGLang's default). Read by the lock-step waves and by the simulator
    (:data:`aitrinity.sim.serving.ENGINE_SCHEDULING`)."""
    first_token_lag: int = 0
    """Steps a first token is held back (an overlap scheduler returns step n's output while n + 1 runs). Read by the
    lock-step waves and by the simulator."""


ENGINE_PROFILES: dict[str, EngineProfile] = {
    "trtllm": EngineProfile(0.264e-3, 0.910, 2.860, 0.102, 0.0517, first_token_lag=1),
    "vllm": EngineProfile(1.274e-3, 1.017, 1.0, 0.145, 0.0430),
    "sglang": EngineProfile(
        1.318e-3, 0.503, 3.475, 0.905, 5.5e-6, lockstep=True, mixed_batches=False, first_token_lag=1
    ),
    "generic": EngineProfile(0.878e-3, 0.810, 2.445, 0.384, 0.0424),
}
"""Fitted on ``serving_h100_dense.csv`` (579 runs, H100; re-fitted 2026-12-04 when TPOT's interference became the
other ``c - 1`` clients' prompts, which lowered each engine's loss) by ``benchmarks/bench_silicon.py --fit``
with the measured kernel tables, ``prefill_steps >= 1`` (a prompt takes at least its own step); ``generic`` (an
engine not named) is the mean of the three as fitted on 2026-12-04.

SGLang's runs keep their lock-step waves (its drifting fit put ``w_batch`` at 0.9: every round waits; the simulator's
fitted output spread is 0), so since 2026-12-05 its steady state is the lock-step closed form of its own scheduling
(separate prefill steps, the overlap scheduler's one-step lag), which the simulator replays: only its host times are
fitted (``step_overhead_s`` 1.32 ms; ``request_overhead_s`` comes out at 5.5 us: the waves leave no room for a host
time per request). Its ``prefill_interference`` and ``prefill_steps`` are the drifting fit's and are not read;
``batch_wait`` is read by the disaggregated pools (:mod:`aitrinity.cost.disaggregated`)."""


@dataclass(frozen=True)
class SteadyState:
    """Per-request times at a fixed concurrency (arrays of the broadcast shape)."""

    ttft_s: Array
    tpot_s: Array
    request_latency_s: Array
    requests_per_s: Array
    output_tokens_per_s: Array
    request_s: Array
    """TTFT's part outside the GPU (``t_request``)."""
    prefill_steps_s: Array
    """TTFT's mixed steps (``n_prefill · t_step(decode c-1, prefill 1)``)."""
    wave_wait_s: Array
    """TTFT's wait behind a synchronised wave of prompts."""
    slot_wait_s: Array
    """TTFT's wait for a KV slot (more clients than the KV pool holds requests; 0 without ``kv_slots``)."""
    interference_s: Array
    """TPOT's share of other requests' prefill work."""
    decode_step: StepTimes
    """The pure-decode step of ``c`` sequences, by operator class (with speculation: a verification step and its
    drafts over the tokens it yields, per output token)."""
    mixed_step: StepTimes
    """A step of ``c - 1`` decodes and one prompt's prefill, by operator class."""


def _four_steps(
    m: ModelSpec, k: Kernels, lay: Layout, prof: EngineProfile, c: Array, ctx: Array, s_new: Array, cached: Array
) -> tuple[StepTimes, ...]:
    """The four steps the steady state is made of, in one call (stacked): ``c`` decodes; ``c - 1`` decodes and one
    prompt; the prompt alone; ``c - 1`` decodes and one token budget of a prompt (``cached`` of its tokens loaded
    from a prefix cache, attended to)."""
    zero, one = np.zeros(c.shape), np.ones(c.shape)
    budget = np.minimum(s_new, prof.token_budget)
    shape = StepShape(
        decode=np.stack([c, c - 1.0, zero, c - 1.0]),
        context=np.stack([ctx, ctx, one, ctx]),
        prefill_seqs=np.stack([zero, one, one, one]),
        prefill_len=np.stack([one, s_new, s_new, budget]),
        prefill_prefix=np.stack([zero, cached, cached, cached]),
    )
    steps4 = step_times(m, k, lay, shape, prof.step_overhead_s, prof.sequence_overhead_s)
    return tuple(StepTimes(*(getattr(steps4, f)[i] for f in OPERATOR_CLASSES)) for i in range(4))


def _drifting(
    prof: EngineProfile, c: Array, s_out: Array, dec: Array, mix: Array, extra: Array, chunk: Array, alone: Array
) -> tuple[Array, Array, Array]:
    """TTFT's mixed steps, TPOT and the wave wait of clients that drift apart (module doc), from the steps'
    times: ``dec`` of ``c`` decodes, ``mix`` of ``c - 1`` decodes and one prompt (``extra`` what the prompt adds
    to a decode step), ``chunk`` of ``c - 1`` decodes and one token budget of a prompt, ``alone`` the prompt's
    prefill alone."""
    tpot = dec + prof.prefill_interference * ((c - 1.0) / s_out) * extra
    # the prompt's own work, then the other steps of n_prefill: steps of at most a token budget of prompt work
    # (the same as the prompt's own up to the budget, the development runs' range; a longer prompt's own work
    # does not recur in the step in flight or the lag). A lone client meets no step in flight: its prompt's own
    # step and the lag's decode steps; the fitted steps weigh (c-1)/c (module doc)
    busy = (c - 1.0) / c
    steps = mix + busy * (prof.prefill_steps - 1.0) * chunk + (1.0 - busy) * prof.first_token_lag * dec
    # the other clients' prompts already waiting when it arrives, prefilled in the same steps (Little's law: they
    # arrive (c-1)/osl a step, and it waits the half of its n_prefill steps before its own), with the share f_mix
    # of their work that TPOT's steps carry too
    ahead = (c - 1.0) / s_out * prof.prefill_steps / 2.0
    steps = steps + prof.prefill_interference * ahead * extra
    wave = prof.batch_wait * (c - 1.0) / 2.0 * alone
    return steps, tpot, wave


def _slot_wait(prof: EngineProfile, clients: Array, c: Array, ttft: Array, s_out: Array, tpot: Array) -> Array:
    """More clients than KV slots: a closed loop of ``clients`` around ``c`` slots, each held for the request's
    time in the engine; by Little's law a client's cycle is ``clients / c`` of that, and what the request overhead
    does not fill of the rest is the wait for a slot."""
    service = ttft - prof.request_overhead_s + (s_out - 1.0) * tpot
    out: Array = np.maximum((clients / c - 1.0) * service - prof.request_overhead_s, 0.0)
    return out


def _lockstep(
    m: ModelSpec,
    k: Kernels,
    lay: Layout,
    prof: EngineProfile,
    c: Array,
    s_in: Array,
    s_new: Array,
    cached: Array,
    s_out: Array,
    decode: Array,
) -> tuple[Array, Array]:
    """Lock-step waves (module doc): the mean TTFT past ``t_request`` and the mean TPOT.

    The engine is idle when a round's prompts arrive, so the first to arrive starts a step alone (``t_1``); the
    other ``c' = c - 1`` arrive during it and are prefilled in ``n' = ceil(c'·isl / B)`` wave steps ``t_w`` of
    ``c'/n'`` prompts each. In an engine that mixes (``prof.mixed_batches``) the decodes of the prompts already done
    ride along (``1 + c'(n'-1)/2n'`` on average) and the first request's decodes carry all ``n'`` wave steps, a later
    one's the ``(n'-1)/2`` after its own on average:

        TTFT = t_1 + (c'/c)·(n' + 1)/2·t_w        TPOT = t_dec + [n' + c'(n'-1)/2] / c · (t_w - t_dec) / (osl - 1)

    In one that does not, a wave step runs no decodes: the requests already prefilled stall through the same steps,
    so the same count of them is added whole, ``t_w`` each, and every request of the round decodes together after the
    last wave. A first-token lag of ``L`` steps (:attr:`EngineProfile.first_token_lag`) adds the ``L`` steps after a
    prompt's own: the waves still to run, then decode steps (:func:`_lag`).
    """
    rest = c - 1.0
    n = np.maximum(np.ceil(rest * s_new / prof.token_budget), 1.0)
    zero, one = np.zeros(c.shape), np.ones(c.shape)
    riding = 1.0 + rest * (n - 1.0) / (2.0 * n) if prof.mixed_batches else zero
    shape = StepShape(
        decode=np.stack([zero, riding]),
        context=np.stack([s_in, s_in]),
        prefill_seqs=np.stack([one, rest / n]),
        prefill_len=np.stack([s_new, s_new]),
        prefill_prefix=np.stack([cached, cached]),
    )
    first, wave = step_times(m, k, lay, shape, prof.step_overhead_s, prof.sequence_overhead_s).total
    wave = np.where(rest > 0, wave, 0.0)
    n = np.where(rest > 0, n, 0.0)
    ttft = first + rest / c * (n + 1.0) / 2.0 * wave + _lag(prof.first_token_lag, c, n, wave, decode)
    per_token = np.maximum(s_out - 1.0, 1.0)
    steps = (n + rest * (n - 1.0) / 2.0) / c  # wave steps a request's decodes carry (or stall through), on average
    if prof.mixed_batches:
        tpot = decode + np.minimum(steps, s_out - 1.0) * np.maximum(wave - decode, 0.0) / per_token
    else:
        tpot = decode + np.where(s_out > 1.0, steps * wave / per_token, 0.0)
    return ttft, tpot


def _lag(lag: int, c: Array, n: Array, wave: Array, decode: Array) -> Array:
    """The mean time of the ``lag`` steps after a request's own prefill step in a lock-step round: the first request
    (prefilled alone) sees ``min(n, L)`` wave steps, a request of wave ``j`` (``(c-1)/n`` of them) ``min(n - j, L)``;
    the rest of its ``L`` steps are decode steps. ``sum_{j=1..n} min(n - j, L) = sum_{i=0..n-1} min(i, L)``."""
    if lag <= 0:
        return np.zeros(c.shape)
    first = np.minimum(n, lag)
    waves = np.where(n - 1.0 <= lag, n * (n - 1.0) / 2.0, lag * (lag + 1.0) / 2.0 + lag * (n - 1.0 - lag))
    per_wave = np.where(n > 0, (c - 1.0) / np.maximum(n, 1.0), 0.0)
    wave_steps = first + per_wave * waves
    all_steps = lag * (1.0 + per_wave * n)  # = lag·c
    out: Array = (wave_steps * wave + (all_steps - wave_steps) * decode) / c
    return out


def profile(engine: str) -> EngineProfile:
    return ENGINE_PROFILES.get(engine, ENGINE_PROFILES["generic"])


def steady_state(
    m: ModelSpec,
    k: Kernels,
    lay: Layout,
    concurrency: ArrayLike,
    isl: ArrayLike,
    osl: ArrayLike,
    engine: EngineProfile | None = None,
    prefill_fraction: ArrayLike = 1.0,
    speculation: Speculation | None = None,
    kv_slots: ArrayLike | None = None,
) -> SteadyState:
    """TTFT, TPOT and throughput of one model replica at ``concurrency`` clients (module doc).

    ``prefill_fraction`` is the share of each prompt computed rather than loaded (a prefix cache with hit
    rate ``h`` computes ``1 - h`` of it; the context attended to stays the whole prompt). ``speculation``: a
    speculative decoder (:mod:`aitrinity.cost.speculation`); each decode step is then a verification step with its
    drafts, yielding ``E`` tokens, and the decode step reported is its share per output token. The prompts that
    share the steps cost the same per output token (``(c-1)·E/osl`` of them per step, ``E`` tokens a step).

    ``kv_slots``: requests the engine's KV pool holds at once (:func:`aitrinity.cost.kv_pool.kv_slots`; None: no
    limit). With more clients than slots, ``n`` requests run and the others wait for one to finish (module doc)."""
    prof = engine or profile(lay.engine)
    clients = np.maximum(np.asarray(concurrency, dtype=np.float64), 1.0)
    c = clients if kv_slots is None else np.minimum(clients, np.maximum(np.asarray(kv_slots, dtype=np.float64), 1.0))
    s_in = np.asarray(isl, dtype=np.float64)
    s_new = np.maximum(s_in * np.asarray(prefill_fraction, dtype=np.float64), 1.0)
    s_out = np.maximum(np.asarray(osl, dtype=np.float64), 1.0)
    ctx = s_in + s_out / 2.0  # mean context over a generation
    cached = np.maximum(s_in - s_new, 0.0)  # loaded from a prefix cache: the new tokens attend to it
    c, ctx, s_new, cached = np.broadcast_arrays(c, ctx, s_new, cached)
    dec, mix, lone, chunk = _four_steps(m, k, lay, prof, c, ctx, s_new, cached)
    alone = lone.total
    extra = np.maximum(mix.total - dec.total, 0.0)
    if speculation is not None:  # a verification step and its drafts, per output token
        dec = speculative_step(m, k, lay, c, ctx, speculation, prof.step_overhead_s)
    if prof.lockstep:
        # (the prompt length at every row's shape: a wave's context is stacked beside its decodes)
        steps, tpot = _lockstep(m, k, lay, prof, c, np.broadcast_to(s_in, c.shape), s_new, cached, s_out, dec.total)
        wave = np.zeros(c.shape)
    else:
        steps, tpot, wave = _drifting(prof, c, s_out, dec.total, mix.total, extra, chunk.total, alone)
    tpot = np.where(s_out > 1.0, tpot, 0.0)  # one output token: no step after the first (module doc)
    ttft = prof.request_overhead_s + steps + wave
    queue = _slot_wait(prof, clients, c, ttft, s_out, tpot)
    ttft = ttft + queue
    latency = ttft + (s_out - 1.0) * tpot
    rps = clients / latency
    return SteadyState(
        ttft_s=ttft,
        tpot_s=tpot,
        request_latency_s=latency,
        requests_per_s=rps,
        output_tokens_per_s=rps * s_out,
        request_s=np.full(ttft.shape, prof.request_overhead_s),
        slot_wait_s=queue,
        prefill_steps_s=steps,
        wave_wait_s=wave,
        interference_s=np.where(s_out > 1.0, tpot - dec.total, 0.0),
        decode_step=dec,
        mixed_step=mix,
    )
