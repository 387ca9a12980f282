"""Generated request streams in the Mooncake trace format: Poisson or bursty arrivals, a rate that may follow a
diurnal curve, lognormal lengths, and multi-turn sessions whose prompts share their history.

Arrivals: a non-homogeneous process with rate ``rate(t)`` requests/s, drawn by
thinning (Lewis & Shedler 1979) from gaps of a renewal process at the peak
rate: exponential gaps (Poisson) or gamma gaps with coefficient of variation
``burstiness`` (> 1: bursty; 1: Poisson). Each arrival opens a new session or,
with probability ``followup``, continues a random open session: its prompt is
that session's whole history (previous prompts and answers) plus a new user
turn, so its leading blocks repeat the session's ``hash_ids`` (prefix-chained
ids of ``block_tokens``-token blocks, as in the Mooncake trace).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aitrinity.spec.traces import TraceRequest


@dataclass(frozen=True)
class Workload:
    duration_s: float = 600.0
    rate_rps: float = 2.0
    """Mean arrival rate (the peak of ``rate_shape`` x this)."""
    rate_shape: Callable[[float], float] | None = None
    """Relative rate over time in [0, 1] (default 1): e.g. :func:`diurnal`."""
    burstiness: float = 1.0
    """Coefficient of variation of the gaps: 1 Poisson, > 1 bursty."""
    prompt_tokens_median: float = 1000.0
    prompt_sigma: float = 1.0
    output_tokens_median: float = 200.0
    output_sigma: float = 0.8
    followup: float = 0.5
    """Probability that an arrival continues an open session."""
    max_context: int = 32_000
    block_tokens: int = 512


def diurnal(period_s: float, low: float = 0.2) -> Callable[[float], float]:
    """A day compressed into ``period_s``: a cosine between ``low`` (night) and 1 (peak at half the period)."""
    if not 0 <= low <= 1 or period_s <= 0:
        raise ValueError("low in [0, 1] and a positive period")
    return lambda t: low + (1 - low) * 0.5 * (1 - math.cos(2 * math.pi * t / period_s))


def diurnal_chat(duration_s: float = 1200.0, rate_rps: float = 3.0) -> Workload:
    """The diurnal serving example (``sim.autoscale``'s benchmark): one day in ``duration_s``, 5% to 100% of
    ``rate_rps``, single-turn 1,000-token prompts and 200-token answers (medians), contexts up to 6,000 tokens."""
    return Workload(
        duration_s=duration_s,
        rate_rps=rate_rps,
        rate_shape=diurnal(duration_s, low=0.05),
        prompt_tokens_median=1000,
        output_tokens_median=200,
        followup=0.0,
        max_context=6000,
    )


def generate(w: Workload, seed: int = 0) -> list[TraceRequest]:
    """Requests sorted by time, deterministic for a seed."""
    if w.duration_s <= 0 or w.rate_rps <= 0 or w.burstiness <= 0 or not 0 <= w.followup <= 1:
        raise ValueError("duration, rate and burstiness must be positive and followup in [0, 1]")
    rng = np.random.default_rng(seed)
    shape = w.rate_shape or (lambda _t: 1.0)
    k = 1 / w.burstiness**2  # gamma shape for the coefficient of variation asked
    t = 0.0
    out: list[TraceRequest] = []
    sessions: list[tuple[list[int], int]] = []  # (hash ids of the history, history tokens)
    next_id = 0
    while True:
        t += float(rng.gamma(k, 1 / (k * w.rate_rps)))
        if t >= w.duration_s:
            break
        if rng.random() > shape(t):  # thinning: keep with probability rate(t) / peak
            continue
        turn = max(1, int(rng.lognormal(math.log(w.prompt_tokens_median), w.prompt_sigma)))
        answer = max(1, int(rng.lognormal(math.log(w.output_tokens_median), w.output_sigma)))
        if sessions and rng.random() < w.followup:
            j = int(rng.integers(len(sessions)))
            ids, history = sessions[j]
        else:
            j, ids, history = -1, [], 0
        prompt = min(history + turn, w.max_context)
        full = prompt // w.block_tokens
        ids = list(ids[:full])  # the history's blocks repeat; the new turn's blocks are new
        while len(ids) < full:
            ids.append(next_id)
            next_id += 1
        out.append(TraceRequest(t * 1e3, prompt, answer, tuple(ids)))
        entry = (ids, prompt + answer)
        if j >= 0:
            sessions[j] = entry
        else:
            sessions.append(entry)
    return out
