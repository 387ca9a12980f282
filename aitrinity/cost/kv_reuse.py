"""Load cached prefix KV or recompute it? The per-request decision (pure).

A request of ``n`` prompt tokens finds its first ``L_max`` tokens cached, block by
block, in tiers (memory, disk, a remote pool) that each have a bandwidth and a
per-access latency. Loading the first ``L`` tokens (a multiple of the block) and
recomputing the rest takes::

    T(L) = sum over loaded blocks b of (latency_t(b) + block_bytes / (c · bandwidth_t(b)))
         + prefill_flops(L, n - L) / G

with ``c`` the KV compression ratio and ``G`` the achievable FLOP/s; the
suffix's attention over the loaded prefix is counted in ``prefill_flops``
(``cost.flops.causal_score_flops``). Loading and computing are taken to run one
after the other (no layer-wise overlap), which is what ``systems.kvcache``'s
model integration does. The decision is the ``L`` with the least ``T``:
``recompute`` (L = 0), ``load`` (L = L_max) or ``partial`` (in between).

Break-even bandwidth of a tier: loading ``L`` tokens pays while

    B > (kv_bytes(L) / c) / (prefill_flops(0, L) / G - accesses · latency)

Mooncake (Qin et al., FAST'25, §2, Eq. 1-2) states the dense-MHA case,
``B/G > kv_size(n) / flops(n)`` with ``flops(n) = l(24nd² + 4n²d)`` and
``kv_size(n) = l · 4nd · s``; here it is generalised to GQA / MLA KV sizes,
MoE and sliding-window FLOPs, compression and per-access latency.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from aitrinity.cost.flops import causal_score_flops, token_flops
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.spec.model import ModelSpec


def prefill_flops(m: ModelSpec, start: int, new: int, *, masked_past: bool = False) -> float:
    """Forward FLOPs to compute KV for ``new`` prompt tokens after ``start`` cached ones.

    Projections and MLP per token plus causal attention scores; the LM head is
    left out (only the last prompt token needs logits, whatever is reused).

    ``masked_past``: the attention kernel skips the causal upper triangle only
    without a cached prefix; with one (``start > 0``) it is handed an explicit
    mask and computes every score of the new queries against all ``start +
    new`` keys. That is what transformers' SDPA path does on CPU (PyTorch's
    causal kernel cannot offset the diagonal): on a tiny Llama, a 2,560-token
    prompt with its first 512 tokens loaded reached its first token 1.24x
    later than with none loaded; this model predicts 1.19x, the causal one
    0.88x (``benchmarks/bench_kvcache.py``, TTFT sweep). A sliding window is
    masked, not skipped, on that path.
    """
    if new <= 0:
        return 0.0
    tf = token_flops(m)
    if masked_past and start > 0:
        scores = 2.0 * m.num_layers * m.num_attention_heads * new * (start + new) * (m.dim_head + m.v_head_dim)
    else:
        scores = causal_score_flops(m, start, new)
    return new * (tf.dense - tf.lm_head) + scores


@dataclass(frozen=True)
class Source:
    """Where a run of cached blocks sits: a tier's read bandwidth and per-block latency."""

    tier: str
    bandwidth_Bps: float
    latency_s: float


class TierBreakEven(BaseModel):
    tier: str
    tokens: int
    load_time_s: float
    recompute_time_s: float
    breakeven_bandwidth_Bps: float | None
    """None: loading never pays (latency alone outweighs recomputation)."""


class ReuseDecision(BaseModel):
    choice: Literal["load", "partial", "recompute"]
    prompt_tokens: int
    cached_tokens: int
    load_tokens: int
    tokens_by_tier: dict[str, int]
    """Tokens loaded from each tier under the chosen plan."""
    load_time_s: float
    compute_time_s: float
    time_s: float
    recompute_all_s: float
    speedup: float
    breakeven: list[TierBreakEven]
    reason: str


def decide(
    m: ModelSpec,
    prompt_tokens: int,
    cached: Sequence[Source | None],
    *,
    block_tokens: int,
    flops_per_s: float,
    kv_dtype: str = "bf16",
    compression: float = 1.0,
    masked_past: bool = False,
) -> ReuseDecision:
    """The fastest way to get the prompt's KV: ``cached[b]`` is where block ``b`` sits (None ends the prefix).

    At least one prompt token is always computed (it yields the first output
    token's logits), so at most ``(n - 1) // block`` blocks are loaded.
    ``masked_past``: the attention kernel computes the full score rectangle
    once a prefix is loaded (``prefill_flops``), so a short prefix can cost
    more to compute after than it saves.
    """
    if prompt_tokens <= 0 or block_tokens <= 0:
        raise ValueError("prompt_tokens and block_tokens must be positive")
    if flops_per_s <= 0 or compression <= 0:
        raise ValueError("flops_per_s and compression must be positive")
    run = _leading_run(cached[: min(len(cached), (prompt_tokens - 1) // block_tokens)])
    block_bytes = kv_bytes_per_token(m, kv_dtype) * block_tokens / compression

    def compute(start: int) -> float:
        flops = prefill_flops(m, start, prompt_tokens - start, masked_past=masked_past)
        return (flops + 2.0 * m.vocab_size * m.hidden_size) / flops_per_s

    best_k, best_t, loads = _best_prefix(run, block_tokens, block_bytes, compute)
    by_tier: dict[str, int] = {}
    for s in run[:best_k]:
        by_tier[s.tier] = by_tier.get(s.tier, 0) + block_tokens
    cached_tokens = len(run) * block_tokens
    choice: Literal["load", "partial", "recompute"] = (
        "recompute" if best_k == 0 else "load" if best_k == len(run) else "partial"
    )
    t0 = compute(0)
    return ReuseDecision(
        choice=choice,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        load_tokens=best_k * block_tokens,
        tokens_by_tier=by_tier,
        load_time_s=loads[best_k],
        compute_time_s=best_t - loads[best_k],
        time_s=best_t,
        recompute_all_s=t0,
        speedup=t0 / best_t,
        breakeven=_breakeven(run, block_tokens, block_bytes, compute),
        reason=_reason(choice, best_k, len(run)),
    )


def _leading_run(cached: Sequence[Source | None]) -> list[Source]:
    """The blocks up to the first one that is not cached."""
    run: list[Source] = []
    for s in cached:
        if s is None:
            break
        run.append(s)
    return run


def _best_prefix(
    run: Sequence[Source], block_tokens: int, block_bytes: float, compute: Callable[[int], float]
) -> tuple[int, float, list[float]]:
    """How many leading blocks to load (``k``, 0 = recompute all), the request's time with them, and the cumulative
    load time after each block (``loads[k]``): loads run in order, so loading block ``k`` means loading those before
    it."""
    best_k, best_t, load_t, loads = 0, compute(0), 0.0, [0.0]
    for k, s in enumerate(run, 1):
        load_t += s.latency_s + block_bytes / s.bandwidth_Bps
        loads.append(load_t)
        t = load_t + compute(k * block_tokens)
        if t < best_t:
            best_k, best_t = k, t
    return best_k, best_t, loads


def _reason(choice: str, loaded: int, cached: int) -> str:
    if not cached:
        return "nothing cached"
    if choice == "recompute":
        return "not worth loading: recomputing is faster than reading the cached blocks"
    if choice == "partial":
        return f"load {loaded} of {cached} cached blocks; the slower tiers' blocks are cheaper to recompute"
    return "load every cached block"


def _breakeven(
    run: Sequence[Source], block_tokens: int, block_bytes: float, compute: Callable[[int], float]
) -> list[TierBreakEven]:
    """Per tier: loading all of its cached blocks vs recomputing them, and the bandwidth where the two meet.

    Block ``i`` saves ``compute(i·B) - compute((i+1)·B)``, the compute time the
    request sheds when it also loads that block (with a causal kernel, exactly
    ``prefill_flops(i·B, B) / G``).
    """
    out = []
    for tier in dict.fromkeys(s.tier for s in run):
        idx = [i for i, s in enumerate(run) if s.tier == tier]
        src = run[idx[0]]
        saved_s = sum(compute(i * block_tokens) - compute((i + 1) * block_tokens) for i in idx)
        nbytes = block_bytes * len(idx)
        lat = src.latency_s * len(idx)
        out.append(
            TierBreakEven(
                tier=tier,
                tokens=len(idx) * block_tokens,
                load_time_s=lat + nbytes / src.bandwidth_Bps,
                recompute_time_s=saved_s,
                breakeven_bandwidth_Bps=nbytes / (saved_s - lat) if saved_s > lat else None,
            )
        )
    return out


def breakeven_bandwidth(
    m: ModelSpec,
    tokens: int,
    *,
    flops_per_s: float,
    kv_dtype: str = "bf16",
    compression: float = 1.0,
    latency_s: float = 0.0,
) -> float:
    """Link bandwidth above which loading a ``tokens``-token prefix beats recomputing it (inf: never)."""
    saved_s = prefill_flops(m, 0, tokens) / flops_per_s
    if saved_s <= latency_s:
        return math.inf
    return kv_bytes_per_token(m, kv_dtype) * tokens / compression / (saved_s - latency_s)
