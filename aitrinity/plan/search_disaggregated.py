"""Search disaggregated serving splits: how many devices prefill, in which layout, and how the rest decode.

DistServe (Zhong et al., OSDI'24, §4) chooses each phase's parallelism and the number of instances of each so that
the two pools' rates match under the latency objectives; Mooncake and NVIDIA Dynamo size the pools the same way.
Here a candidate is a prefill layout (TP, and EP for a MoE model) with a device count, a decode layout on the rest
of the system (one pipeline stage: a replica is ``tp`` devices), and the clients per decode replica. Each is priced
by :func:`aitrinity.cost.disaggregated.disaggregated_steady_state` -- the same function ``trinity diagnose`` prices
``plan.disaggregation`` with -- vectorized over the prefill device counts and the batches of a pair of layouts.
A candidate is infeasible when a pool's weights, or a decode replica's KV cache at its batch, do not fit in device
memory, or when it misses a TTFT / TPOT objective. A row is the steady state alone: ``diagnose`` also holds each
phase at or above its ledger's roofline, which rarely binds (a speculative decoder's HBM bytes per token can, by
about 0.1%). The scenario's dtypes and exchanges apply to every candidate;
the aggregated search (:mod:`aitrinity.plan.search_serving`) is what to compare it with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from aitrinity.cost.concurrency import EngineProfile, profile
from aitrinity.cost.disaggregated import KVLink, Pool, disaggregated_steady_state
from aitrinity.cost.disaggregated_estimate import kv_link
from aitrinity.cost.kernels import Kernels, roofline
from aitrinity.cost.ledger import Result
from aitrinity.cost.operators import Layout, ScaleOut
from aitrinity.cost.serving import ServingEffects, effects, max_batch, pool_columns, weight_bytes_per_device
from aitrinity.cost.serving_pricing import concurrency_rates, decoding, phase_times, pool_times
from aitrinity.cost.speculation import Speculation
from aitrinity.plan import registry
from aitrinity.plan.objective import require
from aitrinity.plan.search import ReasonCount
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Disaggregation, Plan, ServingJob, System, moves_kv

SplitObjective = Literal["throughput", "latency", "cost", "energy"]
REASONS = (
    "feasible",
    "device memory",
    "TTFT above the SLO",
    "TPOT above the SLO",
    "KV compression with no KV crossing a link (no KV offload, no prefix cache outside HBM)",
)


class SplitChoice(Result):
    """One disaggregated deployment: the prefill pool, the decode pool, the clients, and what they give."""

    prefill_devices: int
    prefill_tp: int
    prefill_ep: int
    decode_tp: int
    decode_ep: int
    decode_replicas: int
    batch: int
    """Clients per decode replica."""
    ttft_s: float
    tpot_s: float
    latency_s: float
    tokens_per_s: float
    joules_per_token: float | None
    """None without a device power, as $ without a price."""
    usd_per_million_tokens: float | None
    prefill_utilization: float
    binding_pool: str

    @property
    def label(self) -> str:
        ep_p = f" ep{self.prefill_ep}" if self.prefill_ep > 1 else ""
        ep_d = f" ep{self.decode_ep}" if self.decode_ep > 1 else ""
        return (
            f"prefill {self.prefill_devices // self.prefill_tp} x tp{self.prefill_tp}{ep_p} + "
            f"decode {self.decode_replicas} x tp{self.decode_tp}{ep_d}, batch {self.batch}"
        )

    def plan(self, base: Plan) -> Plan:
        """``base`` with this split: the decode layout as its own, the prefill pool as its disaggregation."""
        link = base.disaggregation.kv_link if base.disaggregation else None
        split = Disaggregation(
            prefill_devices=self.prefill_devices, prefill_tp=self.prefill_tp, prefill_ep=self.prefill_ep, kv_link=link
        )
        return base.model_copy(
            update={"tp": self.decode_tp, "pp": 1, "dp": None, "ep": self.decode_ep, "disaggregation": split}
        )


class SplitSearchResult(Result):
    objective: str
    evaluated: int
    feasible: int
    best: SplitChoice | None
    top: list[SplitChoice]
    infeasible: list[ReasonCount]


def pool_layouts(m: ModelSpec, system: System) -> list[tuple[int, int]]:
    """(tp, ep) a pool's replica may take: TP within one node over a divisor of the heads (and of the KV heads, or
    a multiple of them), and for a MoE model each EP degree dividing the experts, up to the system's devices."""
    heads, kv, n = m.num_attention_heads, m.kv_heads, system.num_devices
    tps = [t for t in range(1, min(system.devices_per_node, n) + 1) if heads % t == 0 and (kv % t == 0 or t % kv == 0)]
    eps = [e for e in range(1, n + 1) if m.moe and m.moe.num_experts % e == 0] if m.moe else [1]
    return [(t, e) for t in tps for e in eps if t * e < n]


@dataclass(frozen=True)
class _Splits:
    """What every pair of pool layouts is priced with: the scenario's model, job, plan (and that plan with its
    exchanges applied), system, kernels, engine profile, speculation, KV link and scale-out, and the batches tried."""

    m: ModelSpec
    job: ServingJob
    base: Plan
    qplan: Plan
    fx: ServingEffects
    system: System
    kernels: Kernels
    prof: EngineProfile
    speculation: Speculation | None
    link: KVLink
    scale_out: ScaleOut | None
    batches: np.ndarray

    def layout(self, tp: int, ep: int) -> Layout:
        """A pool's replica layout: the scenario's dtypes, engine and routing on ``tp x ep`` devices."""
        q = self.qplan
        return Layout(
            tp,
            ep,
            q.weights_dtype,
            q.cache_dtype,
            self.system.engine,
            routing=self.job.moe_routing,
            scale_out=self.scale_out,
            compute_dtype=q.compute_dtype,
        )


def _price_pair(
    x: _Splits, prefill: tuple[int, int], decode: tuple[int, int], ttft_slo_s: float | None, tpot_slo_s: float | None
) -> tuple[dict[str, np.ndarray] | None, int]:
    """Every prefill device count and batch of one (prefill, decode) pair of layouts, vectorized: the columns of
    :data:`_COLUMNS` (None when none is priced) and how many were refused for memory before pricing."""
    (tp_p, ep_p), (tp_d, ep_d) = prefill, decode
    m, job, system, n = x.m, x.job, x.system, x.system.num_devices
    step_p, step_d = tp_p * ep_p, tp_d * ep_d
    pd, b, refused = _grid(x, prefill, decode)
    if not len(pd):
        return None, refused
    dec_replicas = (n - pd) / tp_d
    ds = disaggregated_steady_state(
        m,
        x.kernels,
        Pool(pd / step_p, x.layout(tp_p, ep_p)),
        Pool((n - pd) / step_d, x.layout(tp_d, ep_d)),
        x.link,
        b * dec_replicas,
        job.prompt_tokens,
        job.output_tokens,
        x.prof,
        token_budget=x.base.prefill_chunk_tokens,
        speculation=x.speculation,
    )
    # each phase with its exchanges' streams and above its roofline floor, as diagnose prices the plan
    pre_plan = x.qplan.model_copy(update={"tp": tp_p, "ep": ep_p, "pp": 1, "disaggregation": None})
    dec_plan = x.qplan.model_copy(update={"tp": tp_d, "ep": ep_d, "pp": 1, "dp": None, "disaggregation": None})
    cols = pool_columns(m, pre_plan, dec_plan, x.fx, job.prompt_tokens, job.output_tokens, decoding(ds))
    one, dec = (phase_times(c, system, x.qplan.compute_dtype) for c in cols)
    ttft, step = pool_times(system, one, dec, ds)
    tpot = step if job.output_tokens > 1 else np.zeros_like(step)  # one output token: no TPOT
    r = concurrency_rates(system, b * dec_replicas, 1, job.output_tokens, ttft, tpot, ds.transfer_s)
    reason = np.zeros(pd.shape, dtype=np.int64)
    if ttft_slo_s is not None:
        reason = np.where(ttft > ttft_slo_s, 2, reason)
    if tpot_slo_s is not None:
        reason = np.where((reason == 0) & (tpot > tpot_slo_s), 3, reason)
    values = {
        "prefill_devices": pd,
        "prefill_tp": np.full(pd.shape, tp_p),
        "prefill_ep": np.full(pd.shape, ep_p),
        "decode_tp": np.full(pd.shape, tp_d),
        "decode_ep": np.full(pd.shape, ep_d),
        "decode_replicas": dec_replicas,
        "batch": b,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "latency_s": r.latency_s,
        "tokens_per_s": r.tokens_per_s,
        "joules_per_token": r.joules_per_token,
        "usd_per_million_tokens": r.usd_per_million_tokens,
        "prefill_utilization": ds.prefill_utilization,
        "prefill_binds": ds.binding_pool == "prefill",
        "reason": reason,
    }
    return {f: np.asarray(v) for f, v in values.items()}, refused


def _grid(x: _Splits, prefill: tuple[int, int], decode: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, int]:
    """The prefill device counts and decode batches of one (prefill, decode) pair of layouts whose weights and KV
    fit (every split of the devices into whole prefill and decode replicas, times the searched batches), and how
    many of the candidates did not fit (counted, not priced)."""
    (tp_p, ep_p), (tp_d, ep_d) = prefill, decode
    m, job, system, n = x.m, x.job, x.system, x.system.num_devices
    pre_plan = x.qplan.model_copy(update={"tp": tp_p, "ep": ep_p, "pp": 1, "disaggregation": None})
    dec_plan = x.base.model_copy(update={"tp": tp_d, "ep": ep_d, "pp": 1, "dp": None, "disaggregation": None})
    fit = (
        max_batch(m, dec_plan, system, job) if weight_bytes_per_device(m, pre_plan) <= system.usable_memory_bytes else 0
    )
    step_p, step_d = tp_p * ep_p, tp_d * ep_d
    p_dev = np.arange(step_p, n, step_p, dtype=np.float64)
    p_dev = p_dev[(n - p_dev) % step_d == 0]
    pd, b = (a.ravel() for a in np.meshgrid(p_dev, x.batches, indexing="ij"))
    fits = b <= fit
    return pd[fits], b[fits], int(np.count_nonzero(~fits))


def batch_values(job: ServingJob) -> tuple[int, ...]:
    """The decode batches the split search tries: the serving search's batch dimension (its values and the job's)."""
    batch = registry.get("batch").dimension
    assert batch is not None
    return batch.tried(batch.values, True, job)


def search_splits(
    m: ModelSpec,
    job: ServingJob,
    base: Plan,
    system: System,
    objective: SplitObjective = "throughput",
    top: int = 5,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    kernels: Kernels | None = None,
) -> SplitSearchResult:
    """Every split of ``system`` into a prefill and a decode pool (module doc), best first by ``objective``."""
    require(objective, system)
    if base.cp > 1:
        from aitrinity.errors import SpecError

        raise SpecError("plan.cp", base.cp, "1 to split into pools (CP is priced for aggregated replicas)")
    qplan, fx = effects(base)
    batches = np.array(batch_values(job), dtype=np.float64)
    link = kv_link(base.disaggregation or Disaggregation(prefill_devices=1), system)
    k = kernels or roofline(system.device)
    x = _Splits(
        m, job, base, qplan, fx, system, k, profile(system.engine), fx.speculation, link, ScaleOut.of(system), batches
    )
    cols: dict[str, list[np.ndarray]] = {f: [] for f in _COLUMNS}
    shapes = pool_layouts(m, system)
    memory_bound = 0
    for prefill in shapes:
        for decode in shapes:
            values, refused = _price_pair(x, prefill, decode, ttft_slo_s, tpot_slo_s)
            memory_bound += refused
            for f, v in (values or {}).items():
                cols[f].append(v)
    t = {f: np.concatenate(v) if v else np.zeros(0) for f, v in cols.items()}
    score = {
        "throughput": -t["tokens_per_s"],
        "latency": t["latency_s"],
        "cost": t["usd_per_million_tokens"],
        "energy": t["joules_per_token"],
    }[objective]
    if any(x.kind == "kv-compression" for x in base.exchanges) and not moves_kv(base.exchanges):
        # diagnose refuses such a plan: the pools' own KV transfer is priced uncompressed
        t["reason"] = np.where(t["reason"] == 0, len(REASONS) - 1, t["reason"])
    ok = np.flatnonzero((t["reason"] == 0) & np.isfinite(score))
    # best first; among equals the fewer prefill devices, then the smaller layouts
    order = ok[np.lexsort((t["decode_tp"][ok], t["prefill_tp"][ok], t["prefill_devices"][ok], np.round(score[ok], 9)))]
    counts = np.bincount(t["reason"].astype(np.int64), minlength=len(REASONS))
    counts[REASONS.index("device memory")] += memory_bound
    chosen = [_choice(t, int(i)) for i in order[:top]]
    return SplitSearchResult(
        objective=objective,
        evaluated=len(score) + memory_bound,
        feasible=len(ok),
        best=chosen[0] if chosen else None,
        top=chosen,
        infeasible=[ReasonCount(reason=REASONS[j], count=int(c)) for j, c in enumerate(counts) if j and c],
    )


_COLUMNS = (
    "prefill_devices",
    "prefill_tp",
    "prefill_ep",
    "decode_tp",
    "decode_ep",
    "decode_replicas",
    "batch",
    "ttft_s",
    "tpot_s",
    "latency_s",
    "tokens_per_s",
    "joules_per_token",
    "usd_per_million_tokens",
    "prefill_utilization",
    "prefill_binds",
    "reason",
)


def _choice(t: dict[str, np.ndarray], i: int) -> SplitChoice:
    usd, joules = float(t["usd_per_million_tokens"][i]), float(t["joules_per_token"][i])
    ints = ("prefill_devices", "prefill_tp", "prefill_ep", "decode_tp", "decode_ep", "decode_replicas", "batch")
    floats = ("ttft_s", "tpot_s", "latency_s", "tokens_per_s", "prefill_utilization")
    return SplitChoice(
        **{f: int(t[f][i]) for f in ints},
        **{f: float(t[f][i]) for f in floats},
        usd_per_million_tokens=None if np.isnan(usd) else usd,
        joules_per_token=None if np.isnan(joules) else joules,
        binding_pool="prefill" if t["prefill_binds"][i] else "decode",
    )
