"""Serving instances with continuous batching, chunked prefill, a KV memory limit and preemption.

Each instance runs iterations back to back while it has work (vLLM's
scheduler, simplified). An iteration gives every running request that has
finished its prompt one decode token, then fills the rest of a token budget
with prompt chunks (running requests first, then waiting ones in arrival
order, each admitted only when its whole prompt and first output token fit in the free KV cache -- or its
whole output too, ``reserve_output``; the cache is what the weights leave, or ``kv_capacity_tokens``). A
decode token that finds no free KV slot preempts the most recently admitted
request: its KV is freed and it goes back to the head of the queue to be
recomputed. A request whose prompt and output can never fit is rejected with
that reason.

Iteration time is a roofline on the instance (``Estimate``'s ``max``
overlap): ``max(bytes / achievable HBM bandwidth, FLOPs / achievable FLOP/s)``
plus a fixed overhead, where bytes = weights + KV read by every decode (its
context) + KV written, and FLOPs = 2 · active parameters · tokens + attention
scores (``cost.flops``). TTFT = first token − arrival; TPOT = (last − first) /
(output − 1). Requests are routed to the instance with the fewest outstanding
tokens.

Engine scheduling (:class:`EngineScheduling`, per engine with ``--engine``): ``mixed_batches=False`` runs an
iteration that has prompt work without decodes (SGLang's default), admitting only while a KV slot stays free for
every running request's next token; ``first_token_lag`` holds a first token back that many iterations (an overlap
scheduler returns iteration n's output while n + 1 runs; TPOT counts from when the token was computed); a closed
loop's ``output_spread_tokens`` draws each request's output length around the benchmark's.

Fast-forward (``fast_forward``, the default): most iterations are pure decode steps of an unchanged
batch -- nothing to admit, no prompt chunk, nobody finishing, KV room for every token. When an iteration
starts such a stretch, its iterations up to the one before the first completion (or the first that
would overflow the KV cache) are priced at once, in arrays, and one event is scheduled at the stretch's
end. The stretch is applied lazily: whenever the router looks at the instances (an arrival, a hand-off),
each stretch is applied up to its last iteration that has started, and a request routed to an instance
in a stretch cuts it there. The arithmetic is the per-iteration one, in the same order, so the result
is the same as with one event per iteration (``fast_forward=False``; ``tests/sim/test_serving.py``
compares them exactly).

Prefill/decode disaggregation (``prefill_instances`` > 0; DistServe, Zhong et
al. OSDI'24; Mooncake, Qin et al. FAST'25): the first ``prefill_instances``
instances only run prompt chunks; a prompt's last chunk yields the first
token, then its KV crosses ``kv_link`` (α-β: ``latency + bytes / bandwidth``,
one transfer at a time per prefill instance; the prefill instance holds the KV
until it has left) to the decode instance with the fewest outstanding tokens,
which admits it when prompt + next token fit and only decodes. A request
preempted on a decode instance goes back to the prefill pool. Cost: every
instance is paid for the whole run (``price_per_hour_usd``); energy =
busy time x ``busy_W`` + idle time x ``idle_W``.

Prefix cache (``prefix_cache`` ``local`` or ``global``; Mooncake's KV pool):
a :class:`~aitrinity.cost.block_index.BlockIndex` of ``cache_capacity_tokens``
outside device memory -- one per instance (each a share of the capacity, e.g.
host DRAM) or one pool for all. When an instance admits a request, the
prompt's leading blocks found in its cache are loaded (``bytes /
cache_load_Bps``, added to that iteration) instead of computed; at least the
prompt's last token is always computed (it yields the first token). A prompt's
blocks enter the cache when its prefill ends. With local caches the router is
cache-aware: the instance with the least outstanding work after subtracting
the tokens its cache holds for this request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aitrinity.cost.block_index import BlockIndex
from aitrinity.cost.concurrency import ENGINE_PROFILES, profile
from aitrinity.cost.flops import causal_score_flops, score_flops_per_query, token_flops
from aitrinity.cost.kernels import Kernels
from aitrinity.cost.ledger import Result
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.cost.operators import Layout, StepShape, step_times
from aitrinity.cost.params import count
from aitrinity.sim.core import Simulator
from aitrinity.sim.metrics import Percentiles, percentiles
from aitrinity.spec.hardware import BYTES_PER_DTYPE, DeviceSpec
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.traces import TraceRequest
from aitrinity.units import format_bytes

StepTime = Callable[[int, float, int, float, float], float]
"""(decoding sequences, their mean context, prompt chunks, mean chunk tokens, mean tokens already in the KV cache
of a chunk's sequence -- earlier chunks and a prefix-cache hit, which its new tokens attend to) -> seconds of one
iteration."""


@dataclass(frozen=True)
class OperatorStep:
    """An instance's iteration timed by the operator model (:func:`aitrinity.cost.operators.step_times`): a
    TP group of ``layout.tp`` GPUs, its kernels, and the engine's host-side time per step."""

    model: ModelSpec
    kernels: Kernels
    layout: Layout
    step_overhead_s: float = 0.0
    sequence_overhead_s: float = 0.0
    """Host time per sequence in an iteration (:attr:`aitrinity.cost.concurrency.EngineProfile.sequence_overhead_s`)."""
    _memo: dict[tuple[int, int, int, int, int], float] = field(default_factory=dict, compare=False, repr=False)

    CONTEXT_GRAIN = 32
    """Mean contexts are rounded to this many tokens for the memo (a step's attention barely moves within it)."""

    def __call__(self, decode: int, context: float, chunks: int, chunk_tokens: float, chunk_prefix: float) -> float:
        g = self.CONTEXT_GRAIN
        key = (decode, round(context / g), chunks, round(chunk_tokens), round(chunk_prefix / g))
        hit = self._memo.get(key)
        if hit is None:
            shape = StepShape(decode, max(key[1] * g, 1.0), chunks, max(chunk_tokens, 1.0), key[4] * g)
            hit = float(
                step_times(
                    self.model, self.kernels, self.layout, shape, self.step_overhead_s, self.sequence_overhead_s
                ).total
            )
            self._memo[key] = hit
        return hit

    def decode_times(self, decode: int, contexts: np.ndarray) -> np.ndarray:
        """Pure decode iterations of ``decode`` sequences at each of ``contexts`` (mean context per iteration):
        ``self(decode, c, 0, 0.0, 0.0)`` for each, the memo's misses priced in one array call."""
        g = self.CONTEXT_GRAIN
        grains, where = np.unique(np.round(contexts / g).astype(np.int64), return_inverse=True)
        out = np.array([self._memo.get((decode, int(k), 0, 0, 0), np.nan) for k in grains])
        missing = np.flatnonzero(np.isnan(out))
        if len(missing):
            shape = StepShape(decode, np.maximum(grains[missing] * g, 1.0), 0, 1.0)
            priced = step_times(
                self.model, self.kernels, self.layout, shape, self.step_overhead_s, self.sequence_overhead_s
            ).total
            out[missing] = priced
            for k, t in zip(grains[missing], priced, strict=True):
                self._memo[(decode, int(k), 0, 0, 0)] = float(t)
        times: np.ndarray = out[where]
        return times


@dataclass(frozen=True)
class ClosedLoop:
    """A fixed-concurrency benchmark: ``clients`` each send a request of ``prompt_tokens`` for
    ``output_tokens`` and send the next when it completes, ``requests`` in all. Each request reaches the
    engine some time after it is sent (HTTP, tokenization): exponential with mean ``request_overhead_s``,
    seeded. That spread is what keeps equal-length clients from staying in lock-step waves after the
    first round, as they do not in a real server."""

    clients: int
    prompt_tokens: int
    output_tokens: int
    requests: int
    request_overhead_s: float = 0.0
    output_spread_tokens: float = 0.0
    """Each request asks for ``output_tokens + u`` tokens (rounded), ``u`` uniform in [-spread, spread], the spread
    at most ``output_tokens - 1`` (seeded; mean kept; a one-token output stays one token). Even a few tokens let
    clients drift apart instead of finishing in the same iteration round after round. In tokens, not a share of the
    length: the jitter that breaks the waves need not grow with the output, and a share of it did grow -- clients
    drifted further apart at 512 output tokens than at 128, and the simulated TTFT fell with the length where the
    measured runs' stays flat (docs/simulation.md)."""


@dataclass(frozen=True)
class ServingConfig:
    instances: int
    memory_capacity_bytes: float
    """Device memory of one instance (weights + KV cache)."""
    memory_bandwidth_Bps: float
    """Achievable memory bandwidth of one instance (the device's ``memory_bandwidth_Bps`` x its memory
    efficiency by :func:`for_device`)."""
    flops_per_s: float
    """Achievable FLOP/s of one instance."""
    weights_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    token_budget: int = 2048
    max_batch: int = 256
    overhead_s: float = 0.002
    slo_ttft_s: float = 2.0
    slo_tpot_s: float = 0.1
    prefill_instances: int = 0
    """> 0: that many of ``instances`` only prefill, the rest only decode (disaggregation)."""
    kv_link_Bps: float = 50e9
    """Prefill -> decode KV transfer bandwidth (disaggregation), e.g. a 400 Gbit/s NIC at 100 GB/s."""
    kv_link_latency_s: float = 1e-5
    price_per_hour_usd: float | None = None
    """Of one instance (the catalog device's ``price_per_hour_usd`` by :func:`for_device`)."""
    busy_W: float | None = None
    idle_W: float = 0.0
    prefix_cache: str = "none"
    """'none', 'local' (one cache per instance) or 'global' (one pool)."""
    cache_capacity_tokens: int = 0
    cache_block_tokens: int = 512
    cache_load_Bps: float = 25e9
    cache_policy: str = "lru"
    step_time: StepTime | None = None
    """The iteration time of an instance from the operator model (:class:`OperatorStep`); None: the
    roofline above."""
    mixed_batches: bool = True
    """True: prompt chunks ride in the decode iterations (vLLM, TensorRT-LLM). False: an iteration with prompt work
    to do runs no decodes (SGLang's default, without ``--enable-mixed-chunk``)."""
    first_token_lag: int = 0
    """Iterations between a prompt's last chunk and its first token reaching the client: an overlap scheduler
    processes iteration n's output while iteration n + 1 runs (TensorRT-LLM's PyTorch backend, SGLang)."""
    kv_capacity_tokens: int | None = None
    """KV tokens an instance holds (an engine's pool, :func:`aitrinity.cost.kv_pool.kv_capacity_tokens`); None: all
    the memory the weights leave."""
    reserve_output: bool = False
    """Admission holds a request's whole output from the start, so a running request never needs another KV slot
    (TensorRT-LLM's ``GUARANTEED_NO_EVICT``); False: it holds its prompt and one slot per token computed, and the
    newest request is preempted when a decode token finds none (vLLM, SGLang)."""
    fast_forward: bool = True
    """Price a stretch of pure decode iterations (same batch, no admission, no completion, no preemption) at once
    and apply it lazily (module doc); False: one event per iteration, the reference the tests compare with."""


@dataclass(frozen=True)
class EngineScheduling:
    """How an engine's scheduler fills its iterations, as the simulator replays it (the kernels and host time per
    iteration come from :class:`OperatorStep`; the analytic model's fitted weights are
    :class:`aitrinity.cost.concurrency.EngineProfile`)."""

    token_budget: int = 8192
    """Tokens per iteration at most (vLLM's ``max_num_batched_tokens`` for its OpenAI server on a GPU of >= 70 GiB,
    TensorRT-LLM's ``max_num_tokens``, SGLang's ``chunked_prefill_size`` on an 80 GB GPU: 8192 each)."""
    mixed_batches: bool = True
    first_token_lag: int = 0
    output_spread_tokens: float = 0.0
    """Fitted (``benchmarks/bench_sim_concurrency.py --fit``): what keeps the measured runs' clients from moving in
    lock-step is not known; the simulator gives it as a spread of output lengths (:class:`ClosedLoop`)."""


OUTPUT_SPREAD_TOKENS: dict[str, float] = {"trtllm": 24.0, "vllm": 32.0, "sglang": 0.0, "generic": 24.0}
"""Fitted on ``serving_h100_dense.csv`` only (``benchmarks/bench_sim_concurrency.py --every 5 --fit --spreads
0,4,8,12,16,20,24,32,40,48,64``, 2026-12-07); ``generic`` takes TensorRT-LLM's."""

ENGINE_SCHEDULING: dict[str, EngineScheduling] = {
    e: EngineScheduling(int(p.token_budget), p.mixed_batches, p.first_token_lag, OUTPUT_SPREAD_TOKENS[e])
    for e, p in ENGINE_PROFILES.items()
}
"""Each engine's token budget, mixed or separate prefill iterations and first-token lag are its
:data:`aitrinity.cost.concurrency.ENGINE_PROFILES` entry's, so the simulator and the analytic steady state schedule
alike. TensorRT-LLM: mixed iterations, its overlap scheduler (on by default in the PyTorch backend) returns a token one
iteration late. vLLM 0.12: mixed (chunked prefill), no async scheduling by default. SGLang: prefill iterations
apart from decode ones (``--enable-mixed-chunk`` off by default), its overlap scheduler on."""


def scheduling(engine: str) -> EngineScheduling:
    return ENGINE_SCHEDULING.get(engine, ENGINE_SCHEDULING["generic"])


def for_device(d: DeviceSpec, instances: int = 1, **kw: Any) -> ServingConfig:
    """A ServingConfig for instances of one catalog device: its memory, achievable bandwidth and bf16 FLOP/s,
    price and power (``kw`` overrides any field)."""
    base: dict[str, Any] = {
        "instances": instances,
        "memory_capacity_bytes": d.memory_capacity_bytes,
        "memory_bandwidth_Bps": d.memory_bandwidth_Bps * d.efficiency.memory,
        "flops_per_s": d.peak_flops_for("bf16") * d.efficiency.compute,
        "price_per_hour_usd": d.price_per_hour_usd,
        "busy_W": d.tdp_W,
        "idle_W": d.idle_W or 0.0,
    }
    return ServingConfig(**{**base, **kw})


@dataclass
class _Req:
    rid: int
    arrival: float
    prompt: int
    output: int
    """Tokens still to produce (a preempted request's produced tokens move into its prompt)."""
    asked: int = 0
    """Output tokens the request asked for."""
    prefilled: int = 0
    generated: int = 0
    first_token: float | None = None
    last_token: float | None = None
    admitted_at: int = -1
    blocks: tuple[int, ...] = ()
    """The prompt's prefix-chained block ids (for the prefix cache)."""
    counted: bool = False
    """Its prompt is in the hit-rate statistics (a preempted request is looked up again, not counted again)."""
    first_out: float | None = None
    """When its first token was computed (TPOT counts from here; ``first_token`` adds the output lag)."""
    lag: int = 0
    """Iterations until its first token reaches the client."""
    full: bool = False
    """Holds its whole output's KV from admission (``ServingConfig.reserve_output``)."""

    @property
    def kv_tokens(self) -> int:
        return self.prefilled + self.generated

    @property
    def reserved(self) -> int:
        """KV slots held while running: the whole prompt and the first output token from admission, then each
        further token (or the whole output from admission, ``full``)."""
        return self.prompt + (self.output if self.full else max(self.generated, 1))


@dataclass
class _Run:
    """``len(ends)`` decode iterations of the same requests, back to back from ``start``; ``applied`` of them
    are in the requests' and the instance's state (the first one from the moment the run is made)."""

    decode: list[_Req]
    start: float
    dts: np.ndarray
    ends: np.ndarray
    applied: int = 0


@dataclass
class _Instance:
    role: str = "both"
    """'both' (colocated), 'prefill' or 'decode' (disaggregated)."""
    waiting: deque[_Req] = field(default_factory=deque)
    running: list[_Req] = field(default_factory=list)
    kv_used: int = 0
    busy: bool = False
    busy_s: float = 0.0
    peak_kv: int = 0
    link_free: float = 0.0
    run: _Run | None = None
    """A pure decode stretch priced ahead, applied up to the last of its iterations that has started."""
    lagging: list[_Req] = field(default_factory=list)
    """Requests whose first token is computed but not yet out (``first_token_lag``)."""

    def outstanding(self) -> int:
        return sum(r.prompt - r.prefilled + r.output - r.generated for r in (*self.waiting, *self.running))


class ServingSimResult(Result):
    requests: int
    finished: int
    rejected: dict[str, int]
    """Reason -> count."""
    preemptions: int
    ttft_s: Percentiles
    tpot_s: Percentiles
    goodput_rps: float
    """Finished requests per second that met both SLOs."""
    output_tokens_per_s: float
    kv_capacity_tokens: int
    peak_kv_tokens: list[int]
    utilization: list[float]
    makespan_s: float
    kv_transfers: int = 0
    kv_transfer_bytes: float = 0.0
    prefix_hit_tokens: int = 0
    prefix_token_hit_rate: float = 0.0
    """Prompt tokens loaded from the prefix cache / prompt tokens admitted."""
    prefix_bytes_loaded: float = 0.0
    cost_usd: float | None = None
    """Every instance for the whole run at ``price_per_hour_usd``."""
    energy_J: float | None = None
    """Busy time x busy power + idle time x idle power, all instances."""
    events: int = 0
    """Simulator events processed: the work of the simulation itself (fewer with ``fast_forward``), not a result."""


def simulate_serving(
    requests: Sequence[TraceRequest],
    m: ModelSpec,
    cfg: ServingConfig,
    *,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    closed: ClosedLoop | None = None,
) -> ServingSimResult:
    """``progress(settled, total)``: requests finished or rejected so far, every 10,000 events and at the end.
    ``closed``: ignore ``requests`` and run that closed loop instead (:func:`simulate_closed_loop`)."""
    return _Engine(requests, m, cfg, seed, progress, closed).run()


class _Engine:
    """One simulation: the instances, the router, the caches and the event handlers (module doc)."""

    def __init__(
        self,
        requests: Sequence[TraceRequest],
        m: ModelSpec,
        cfg: ServingConfig,
        seed: int,
        progress: Callable[[int, int], None] | None,
        closed: ClosedLoop | None,
    ) -> None:
        _check(cfg)
        self.m, self.cfg, self.closed, self.progress = m, cfg, closed, progress
        self.weights = count(m).total * BYTES_PER_DTYPE[cfg.weights_dtype]
        self.kv_per_token = kv_bytes_per_token(m, cfg.kv_dtype)
        self.capacity = (
            int((cfg.memory_capacity_bytes - self.weights) // self.kv_per_token)
            if cfg.kv_capacity_tokens is None
            else cfg.kv_capacity_tokens
        )
        self.grow = 0 if cfg.reserve_output else 1
        """KV slots a decode token takes (none when admission reserved the whole output)."""
        if self.capacity <= 0:
            raise ValueError(
                f"weights that leave room for a KV cache (they take {format_bytes(self.weights)} of the instance's "
                f"{format_bytes(cfg.memory_capacity_bytes)}: more GPUs per instance or fewer bytes per weight)"
            )
        self.dense = token_flops(m).dense
        self.score = (2.0 * m.num_layers * m.num_attention_heads, m.dim_head + m.v_head_dim, m.sliding_window)
        self.mixed_windows = 0 < m.local_layers < m.num_layers
        self.sim = Simulator(seed)
        npre = cfg.prefill_instances
        self.insts = [_Instance("prefill" if k < npre else "decode" if npre else "both") for k in range(cfg.instances)]
        self.prefill_pool = [k for k, x in enumerate(self.insts) if x.role != "decode"]
        self.decode_pool = [k for k, x in enumerate(self.insts) if x.role != "prefill"]
        self.rejected: dict[str, int] = {}
        self.done: list[_Req] = []
        self.admissions = self.preemptions = self.transfers = 0
        self.moved = 0.0
        self.block = cfg.cache_block_tokens
        self.block_bytes = int(self.kv_per_token * self.block)
        n_caches = 0 if cfg.prefix_cache == "none" else cfg.instances if cfg.prefix_cache == "local" else 1
        per_cache = cfg.cache_capacity_tokens // self.block // max(n_caches, 1) * self.block_bytes
        self.caches = [BlockIndex(per_cache, cfg.cache_policy) for _ in range(n_caches)]
        self.block_flops: dict[int, float] = {}
        self.hit_tokens = self.prompt_tokens = 0
        self.loaded = 0.0
        self.reqs = [
            _Req(
                k,
                t.timestamp_ms / 1e3,
                max(t.prompt_tokens, 1),
                max(t.output_tokens, 1),
                max(t.output_tokens, 1),
                blocks=t.hash_ids,
                full=cfg.reserve_output,
            )
            for k, t in enumerate(requests if closed is None else ())
        ]

    # ------------------------------------------------------------------ running

    def run(self) -> ServingSimResult:
        for r in self.reqs:
            self.sim.at(r.arrival, self.arrive, r)
        if self.closed is not None:
            for _ in range(min(self.closed.clients, self.closed.requests)):
                self.send(0.0)
        self.sim.run(progress=self._settled if self.progress else None)
        self._settled(0)
        return self.result()

    def _settled(self, _events: int) -> None:
        if self.progress is not None:
            total = len(self.reqs) if self.closed is None else self.closed.requests
            self.progress(len(self.done) + sum(self.rejected.values()), total)

    def send(self, at: float) -> None:
        """A closed-loop client sends a request at ``at``; it reaches the engine after the request overhead."""
        closed = self.closed
        assert closed is not None
        o = max(closed.output_tokens, 1)
        spread = min(closed.output_spread_tokens, o - 1)  # never below one token, so the mean is kept
        if spread > 0:
            o = round(o + spread * (2.0 * float(self.sim.rng.random()) - 1.0))
        r = _Req(len(self.reqs), at, max(closed.prompt_tokens, 1), o, o, full=self.cfg.reserve_output)
        self.reqs.append(r)
        mean = closed.request_overhead_s
        overhead = float(self.sim.rng.exponential(mean)) if mean > 0 else 0.0
        self.sim.at(at + overhead, self.arrive, r)

    # ------------------------------------------------------------------ routing and caches

    def cache_of(self, i: int) -> BlockIndex | None:
        if not self.caches:
            return None
        return self.caches[i] if self.cfg.prefix_cache == "local" else self.caches[0]

    def cached_tokens(self, i: int, r: _Req) -> int:
        c = self.cache_of(i)
        if c is None:
            return 0
        return min(c.prefix(r.blocks[: r.prompt // self.block]) * self.block, r.prompt - 1)

    def enqueue(self, pool: list[int], r: _Req, front: bool = False) -> None:
        insts = self.insts
        for k in pool:  # the router sees every instance as it is now
            if insts[k].run is not None:
                self._apply(insts[k], self.sim.now)
        if self.cfg.prefix_cache == "local" and not front:  # cache-aware: outstanding work less what is cached
            i = min(pool, key=lambda k: (insts[k].outstanding() - self.cached_tokens(k, r), k))
        else:
            i = min(pool, key=lambda k: (insts[k].outstanding(), k))
        if front:
            insts[i].waiting.appendleft(r)
        else:
            insts[i].waiting.append(r)
        if insts[i].run is not None:  # its next iteration may admit the request: the stretch ends there
            self._cut(i)
        if not insts[i].busy:
            insts[i].busy = True
            self.sim.at(self.sim.now, self.iterate, i)

    def arrive(self, r: _Req) -> None:
        if r.prompt + r.output > self.capacity:
            why = "needs more KV than an instance holds"
            self.rejected[why] = self.rejected.get(why, 0) + 1
            return
        self.enqueue(self.prefill_pool, r)

    # ------------------------------------------------------------------ disaggregation

    def hand_off(self, i: int, r: _Req, ready: float) -> None:
        """A prefilled request's KV leaves prefill instance i over the KV link."""
        inst = self.insts[i]
        nbytes = self.kv_per_token * r.kv_tokens
        start = max(ready, inst.link_free)
        inst.link_free = start + self.cfg.kv_link_latency_s + nbytes / self.cfg.kv_link_Bps
        self.transfers += 1
        self.moved += nbytes
        self.sim.at(inst.link_free, self.transferred, i, r)

    def transferred(self, src: int, r: _Req) -> None:
        inst = self.insts[src]
        inst.kv_used -= r.reserved  # the KV has left the prefill instance
        self.enqueue(self.decode_pool, r)
        if not inst.busy and (inst.waiting or inst.running):
            inst.busy = True
            self.sim.at(self.sim.now, self.iterate, src)

    def preempt(self, inst: _Instance) -> None:
        victim = max(inst.running, key=lambda r: r.admitted_at)
        inst.running.remove(victim)
        if victim in inst.lagging:  # recomputed from scratch: its first token is computed again
            inst.lagging.remove(victim)
            victim.first_out = None
        inst.kv_used -= victim.reserved
        # recompute preemption (vLLM): the tokens it produced join its prompt; it keeps its first-token time
        victim.prompt += victim.generated
        victim.output -= victim.generated
        victim.prefilled = victim.generated = 0
        self.preemptions += 1
        if inst.role == "decode":  # back to the prefill pool to be recomputed there
            self.enqueue(self.prefill_pool, victim, front=True)
        else:
            inst.waiting.appendleft(victim)

    # ------------------------------------------------------------------ one iteration of an instance

    def iterate(self, i: int, run: _Run | None = None) -> None:
        inst, cfg = self.insts[i], self.cfg
        if inst.run is not None or run is not None:
            if run is not inst.run:  # the end of a stretch that was cut
                return
            self._apply(inst, float("inf"))
            inst.run = None
        decode = [r for r in inst.running if r.prefilled == r.prompt]
        # one KV slot per decode token; preempt the newest requests until they fit
        while decode and inst.kv_used + self.grow * len(decode) > self.capacity:
            self.preempt(inst)
            decode = [r for r in inst.running if r.prefilled == r.prompt]
        admitted = self.admissions
        if cfg.mixed_batches or not (inst.waiting or len(decode) < len(inst.running)):
            chunks, load_bytes = self._schedule(i, inst, len(decode))
        else:  # a prefill iteration if a prompt can run (none admitted with the whole budget: a decode iteration)
            chunks, load_bytes = self._schedule(i, inst, 0, prefill_only=True)
            if chunks:
                decode = []
        ff = cfg.fast_forward and not inst.lagging and not chunks and admitted == self.admissions
        if ff and decode and self._fast_forward(i, decode):
            return
        if not decode and not chunks:
            if any(r.prefilled == r.prompt for r in inst.running):  # just admitted, prefilled elsewhere
                self.sim.at(self.sim.now, self.iterate, i)
                return
            inst.busy = False
            return
        dt = self._step_time(decode, chunks) + load_bytes / cfg.cache_load_Bps
        self.loaded += load_bytes
        end = self.sim.now + dt
        inst.busy_s += dt
        for r in decode:
            r.generated += 1
            inst.kv_used += self.grow
            r.last_token = end
        if inst.lagging:
            self._lagged(inst, end)
        for r, n in chunks:
            self._prefilled(i, r, n, end)
        inst.peak_kv = max(inst.peak_kv, inst.kv_used)
        self._finish(inst, end)
        if inst.role == "prefill":
            for r in [r for r in inst.running if r.prefilled == r.prompt]:
                inst.running.remove(r)  # its KV stays reserved here until the transfer ends
                self.hand_off(i, r, end)
        self.sim.at(end, self.iterate, i)

    def _fast_forward(self, i: int, decode: list[_Req]) -> bool:
        """Start a stretch of pure decode iterations here, if at least two are certain (module doc)."""
        inst, n = self.insts[i], len(decode)
        steps = min(r.output - r.generated for r in decode) - 1  # the iteration that finishes one runs alone
        if self.grow:
            steps = min(steps, (self.capacity - inst.kv_used) // n)  # every iteration's tokens fit
        if steps < 2:
            return False
        dts = self._decode_times(decode, steps)
        now = self.sim.now
        ends = np.cumsum(np.concatenate(([now], dts)))[1:]  # now + dt, + dt, ...: the per-iteration sums
        inst.run = _Run(decode, now, dts, ends)
        self._apply(inst, now)  # its first iteration starts now
        self.sim.at(float(ends[-1]), self.iterate, i, inst.run)
        return True

    def _decode_times(self, decode: list[_Req], steps: int) -> np.ndarray:
        """Times of ``steps`` decode iterations of ``decode``, each request one token further per iteration; the
        same arithmetic as :meth:`_step_time`, element-wise."""
        n, cfg = len(decode), self.cfg
        held = sum(r.kv_tokens for r in decode)
        if isinstance(cfg.step_time, OperatorStep):
            return cfg.step_time.decode_times(n, (held + n * np.arange(steps)) / n)
        if cfg.step_time is not None:
            return np.array([cfg.step_time(n, (held + n * j) / n, 0, 0.0, 0.0) for j in range(steps)])
        j = np.arange(steps)
        ctx = np.array([r.kv_tokens + 1 for r in decode])[:, None] + j[None, :]
        a, b, w = self.score
        if self.mixed_windows:  # local and global layers: score_flops_per_query's own arithmetic, element-wise
            m = self.m
            per_layer = 2.0 * m.num_attention_heads * b
            local = m.local_layers
            scores = (per_layer * (local * np.minimum(ctx, w or 0) + (m.num_layers - local) * ctx)).sum(axis=0)
        else:
            if w:
                ctx = np.minimum(ctx, w)
            scores = (a * ctx * b).sum(axis=0)
        flops = self.dense * n + scores
        nbytes = self.weights + self.kv_per_token * (held + n * j + n)
        dts: np.ndarray = np.maximum(nbytes / cfg.memory_bandwidth_Bps, flops / cfg.flops_per_s) + cfg.overhead_s
        return dts

    def _apply(self, inst: _Instance, now: float) -> None:
        """Apply the stretch's iterations that have started by ``now`` (each at its start, as the event per
        iteration would have)."""
        run = inst.run
        assert run is not None
        if run.applied and not run.ends[run.applied - 1] < now:  # the next iteration has not started
            return
        started = 1 + int(np.searchsorted(run.ends[:-1], now, side="left"))  # iteration j starts at ends[j-1]
        k = started - run.applied
        for r in run.decode:
            r.generated += k
            r.last_token = float(run.ends[started - 1])
        inst.kv_used += self.grow * k * len(run.decode)
        inst.busy_s = float(np.cumsum(np.concatenate(([inst.busy_s], run.dts[run.applied : started])))[-1])
        inst.peak_kv = max(inst.peak_kv, inst.kv_used)
        run.applied = started

    def _cut(self, i: int) -> None:
        """End instance i's stretch after its iterations that have started; the next one is a normal iteration."""
        inst = self.insts[i]
        run = inst.run
        assert run is not None
        self._apply(inst, self.sim.now)
        inst.run = None
        self.sim.at(float(run.ends[run.applied - 1]), self.iterate, i)

    def _schedule(
        self, i: int, inst: _Instance, n_decode: int, prefill_only: bool = False
    ) -> tuple[list[tuple[_Req, int]], float]:
        """Fill the token budget after the decodes: running prompts' next chunks, then waiting requests admitted in
        order while their whole prompt and first token fit (with their cached prefix loaded, not computed).

        ``prefill_only`` (an iteration without decodes): admission also keeps a KV slot for the next token of every
        running request and of each one it admits, so that the decode iteration after it fits. Without that, a
        request preempted for room would be admitted again at once and preempted again, with no decode between."""
        budget = self.cfg.token_budget - n_decode
        keep = self.grow * (len(inst.running) if prefill_only else n_decode)
        chunks: list[tuple[_Req, int]] = []
        load_bytes = 0.0
        for r in inst.running:
            if r.prefilled < r.prompt and budget > 0:
                n = min(budget, r.prompt - r.prefilled)
                chunks.append((r, n))
                budget -= n
        while inst.waiting and budget > 0 and len(inst.running) < self.cfg.max_batch:
            r = inst.waiting[0]
            if inst.kv_used + keep + r.reserved > self.capacity:
                break
            keep += self.grow * prefill_only
            inst.waiting.popleft()
            r.admitted_at = self.admissions
            self.admissions += 1
            inst.running.append(r)
            inst.kv_used += r.reserved  # the whole prompt and the token its last chunk yields (or has yielded)
            if r.prefilled == 0 and inst.role != "decode":
                hit = self.cached_tokens(i, r)
                r.prefilled = hit
                load_bytes += hit * self.kv_per_token
                if not r.counted:
                    r.counted = True
                    self.hit_tokens += hit
                    self.prompt_tokens += r.prompt
            if r.prefilled < r.prompt:
                n = min(budget, r.prompt - r.prefilled)
                chunks.append((r, n))
                budget -= n
        return chunks, load_bytes

    def _step_time(self, decode: list[_Req], chunks: list[tuple[_Req, int]]) -> float:
        """The iteration's time without the cache loads: the operator model, or the roofline (module doc)."""
        cfg, m = self.cfg, self.m
        if cfg.step_time is not None:
            ctx = sum(r.kv_tokens for r in decode) / len(decode) if decode else 0.0
            chunk = sum(n for _, n in chunks) / len(chunks) if chunks else 0.0
            prefix = sum(r.prefilled for r, _ in chunks) / len(chunks) if chunks else 0.0
            return cfg.step_time(len(decode), ctx, len(chunks), chunk, prefix)
        tokens = len(decode) + sum(n for _, n in chunks)
        a, b, w = self.score  # score_flops_per_query, its factors hoisted (the same products, in the same order)
        if self.mixed_windows:
            scores = sum(score_flops_per_query(m, r.kv_tokens + 1) for r in decode)
        else:
            scores = sum(a * (min(r.kv_tokens + 1, w) if w else r.kv_tokens + 1) * b for r in decode)
        flops = self.dense * tokens + scores
        flops += sum(causal_score_flops(m, r.prefilled, n) for r, n in chunks)
        nbytes = self.weights + self.kv_per_token * (sum(r.kv_tokens for r in decode) + tokens)
        return max(nbytes / cfg.memory_bandwidth_Bps, flops / cfg.flops_per_s) + cfg.overhead_s

    def _prefilled(self, i: int, r: _Req, n: int, end: float) -> None:
        """A chunk of ``n`` prompt tokens is computed; the prompt's last chunk yields a token (its slot was reserved)
        and puts the prompt's blocks in the cache."""
        r.prefilled += n
        if r.prefilled != r.prompt:
            return
        r.generated += 1
        r.last_token = end
        if r.first_out is None:
            r.first_out = end
            if self.cfg.first_token_lag and self.insts[i].role == "both":
                r.lag = self.cfg.first_token_lag
                self.insts[i].lagging.append(r)
            else:
                r.first_token = end
        c = self.cache_of(i)
        if c is not None:
            for j, b in enumerate(r.blocks[: r.prompt // self.block]):
                if not c.touch(b) and c.fits(self.block_bytes):
                    c.insert(b, self.block_bytes, self._block_flops(j))

    def _lagged(self, inst: _Instance, end: float) -> None:
        """One more iteration has ended after these requests' first tokens were computed; those whose lag is over
        have their first token out at ``end``."""
        out = []
        for r in inst.lagging:
            r.lag -= 1
            if r.lag <= 0:
                r.first_token = end
                out.append(r)
        for r in out:
            inst.lagging.remove(r)

    def _block_flops(self, j: int) -> float:
        """The prefill FLOPs of a prompt's ``j``-th block (what the cache saves by holding it), memoized."""
        flops = self.block_flops.get(j)
        if flops is None:
            B = self.block
            flops = self.block_flops[j] = causal_score_flops(self.m, j * B, B) + self.dense * B
        return flops

    def _finish(self, inst: _Instance, end: float) -> None:
        """Requests that produced their last token leave; a closed-loop client sends its next request."""
        for r in [r for r in inst.running if r.prefilled == r.prompt and r.generated >= r.output]:
            if r.first_token is None:  # finished within its first token's lag: out with the last one
                r.first_token = end
                if r in inst.lagging:
                    inst.lagging.remove(r)
            inst.running.remove(r)
            inst.kv_used -= r.reserved
            self.done.append(r)
            if self.closed is not None and len(self.reqs) < self.closed.requests:
                self.send(end)

    # ------------------------------------------------------------------ the result

    def result(self) -> ServingSimResult:
        cfg, done, insts = self.cfg, self.done, self.insts
        first = min((r.arrival for r in self.reqs), default=0.0)
        span = max(self.sim.now - first, 1e-12)
        busy = sum(x.busy_s for x in insts)
        cost = cfg.price_per_hour_usd * cfg.instances * span / 3600 if cfg.price_per_hour_usd else None
        energy = busy * cfg.busy_W + (cfg.instances * span - busy) * cfg.idle_W if cfg.busy_W else None
        ttft = [r.first_token - r.arrival for r in done if r.first_token is not None]
        tpot = [
            (r.last_token - r.first_out) / (r.asked - 1)
            for r in done
            if r.asked > 1 and r.first_out is not None and r.last_token is not None
        ]
        good = sum(
            1
            for r in done
            if r.first_token is not None
            and r.last_token is not None
            and r.first_token - r.arrival <= cfg.slo_ttft_s
            and r.first_out is not None
            and (r.asked <= 1 or (r.last_token - r.first_out) / (r.asked - 1) <= cfg.slo_tpot_s)
        )
        return ServingSimResult(
            requests=len(self.reqs),
            finished=len(done),
            rejected=self.rejected,
            preemptions=self.preemptions,
            ttft_s=percentiles(ttft),
            tpot_s=percentiles(tpot),
            goodput_rps=good / span,
            output_tokens_per_s=sum(r.asked for r in done) / span,
            kv_capacity_tokens=self.capacity,
            peak_kv_tokens=[x.peak_kv for x in insts],
            utilization=[x.busy_s / span for x in insts],
            makespan_s=span,
            prefix_hit_tokens=int(self.hit_tokens),
            prefix_token_hit_rate=self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0,
            prefix_bytes_loaded=self.loaded,
            kv_transfers=self.transfers,
            kv_transfer_bytes=self.moved,
            cost_usd=cost,
            energy_J=energy,
            events=self.sim.processed,
        )


def _check(cfg: ServingConfig) -> None:
    if cfg.instances < 1 or cfg.token_budget < 1 or cfg.max_batch < 1:
        raise ValueError("instances, token_budget and max_batch must be positive")
    if cfg.prefill_instances and not 0 < cfg.prefill_instances < cfg.instances:
        raise ValueError("prefill_instances must leave at least one decode instance")
    if cfg.kv_link_Bps <= 0:
        raise ValueError("kv_link_Bps must be positive")
    if cfg.prefix_cache not in ("none", "local", "global"):
        raise ValueError("prefix_cache must be none, local or global")
    if cfg.prefix_cache != "none" and (cfg.cache_block_tokens < 1 or cfg.cache_load_Bps <= 0):
        raise ValueError("cache_block_tokens and cache_load_Bps must be positive")


def simulate_closed_loop(
    m: ModelSpec,
    cfg: ServingConfig,
    loop: ClosedLoop,
    *,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> ServingSimResult:
    """Replay a fixed-concurrency benchmark (the protocol of :mod:`aitrinity.cost.concurrency`): TTFT is
    measured from when a client sends, so it includes the request overhead."""
    if loop.clients < 1 or loop.requests < 1:
        raise ValueError("clients and requests must be positive")
    return simulate_serving((), m, cfg, seed=seed, progress=progress, closed=loop)


def replay_benchmark(
    m: ModelSpec,
    k: Kernels,
    lay: Layout,
    d: DeviceSpec,
    clients: int,
    isl: int,
    osl: int,
    rounds: int = 10,
    sched: EngineScheduling | None = None,
) -> ServingSimResult:
    """A fixed-concurrency benchmark run on one replica of ``lay`` on ``d`` as its engine (``lay.engine``) runs it:
    ``clients`` clients, ``rounds`` requests each of ``isl`` / ``osl`` tokens; the engine's KV pool
    (:mod:`aitrinity.cost.kv_pool`), scheduling (:func:`scheduling`) and host times (its
    :class:`~aitrinity.cost.concurrency.EngineProfile`), iterations timed by the operator model on ``k``. ``sched``
    replaces the engine's scheduling (``benchmarks/bench_sim_concurrency.py --fit`` tries output spreads)."""
    from aitrinity.cost.kv_pool import kv_capacity_tokens, kv_pool

    pool, prof, sched = kv_pool(lay.engine), profile(lay.engine), sched or scheduling(lay.engine)
    cfg = for_device(
        d,
        1,
        memory_capacity_bytes=d.memory_capacity_bytes * lay.tp * lay.cp,
        weights_dtype=lay.weight_dtype,
        kv_dtype=lay.kv_dtype,
        kv_capacity_tokens=kv_capacity_tokens(m, lay, d.memory_capacity_bytes, pool),
        reserve_output=pool.reserve_output,
        token_budget=sched.token_budget,
        mixed_batches=sched.mixed_batches,
        first_token_lag=sched.first_token_lag,
        max_batch=max(clients, 1),
        step_time=OperatorStep(m, k, lay, prof.step_overhead_s),
    )
    loop = ClosedLoop(clients, isl, osl, clients * rounds, prof.request_overhead_s, sched.output_spread_tokens)
    return simulate_closed_loop(m, cfg, loop)
