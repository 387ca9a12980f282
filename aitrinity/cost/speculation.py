"""Speculative decoding: draft ``k`` tokens cheaply, verify them in one step of the model, keep the accepted ones.

Leviathan et al. (ICML 2023, "Fast Inference from Transformers via Speculative Decoding") and Chen et al. (2023):
a draft proposes ``k`` tokens; the target model scores all ``k + 1`` positions in one forward pass and rejection
sampling keeps a prefix of them plus one token of its own, so the output distribution is the target's (lossless).
With each draft token accepted with probability ``a`` (independently), a step yields
``E = (1 - a^(k+1)) / (1 - a)`` tokens on average (their eq. 1). DeepSeek-V3's multi-token prediction (MTP) module
(DeepSeek-AI 2024, §2.2 and §5.4.3) is such a draft: one more transformer block sharing the embedding and output
head, one draft token (``k = 1``), the second token accepted 85-90% of the time, 1.8x the decoding speed.

A verification step of ``c`` sequences is a decode step whose GEMMs, collectives and element-wise kernels run
``c·(k+1)`` rows (MoE: the experts those touch; the LM head scores every position) while attention still reads each
sequence's KV cache once (the ``k + 1`` queries share it). The draft runs ``k`` passes of ``draft_layers`` blocks
over ``c`` tokens (embedding, blocks, LM head). Per output token, the step and the drafts are divided by ``E``:
decode trades FLOPs (drafts, rejected positions) for weight and KV reads per token -- a compute -> bandwidth
exchange that pays while decode is bound by HBM bandwidth or launches, and costs when it is compute bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from aitrinity.cost.kernels import Kernels
from aitrinity.cost.operators import OPERATOR_CLASSES, Layout, StepShape, StepTimes, step_times
from aitrinity.spec.model import ModelSpec


@dataclass(frozen=True)
class Speculation:
    """A speculative decoder as numbers: draft tokens per step, their acceptance rate, the draft's blocks."""

    draft_tokens: int
    acceptance: float
    draft_layers: int = 1

    @property
    def tokens_per_step(self) -> float:
        """``E``: output tokens a verification step yields on average (Leviathan et al. 2023, eq. 1)."""
        a, k = self.acceptance, self.draft_tokens
        return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def draft_model(m: ModelSpec, spec: Speculation) -> ModelSpec:
    """The draft as a model: ``draft_layers`` blocks of ``m``'s shape (MoE blocks for a MoE model, as DeepSeek-V3's
    MTP module is) with its embedding and output head."""
    moe = m.moe.model_copy(update={"first_dense_layers": 0}) if m.moe else None
    return m.model_copy(update={"num_layers": spec.draft_layers, "moe": moe, "sliding_window_layers": None})


def speculative_step(
    m: ModelSpec,
    k: Kernels,
    lay: Layout,
    sequences: ArrayLike,
    context: ArrayLike,
    spec: Speculation,
    step_overhead_s: float = 0.0,
) -> StepTimes:
    """One verification step of ``sequences`` sequences with the ``k`` draft passes before it, by operator class
    (module doc), over the ``E`` tokens it yields: the decode time per output token."""
    c = np.asarray(sequences, dtype=np.float64)
    rows = step_times(m, k, lay, StepShape(c * (spec.draft_tokens + 1), context), step_overhead_s)
    once = step_times(m, k, lay, StepShape(c, context))  # attention reads each sequence's KV once
    draft = step_times(draft_model(m, spec), k, lay, StepShape(c, context))
    parts = {f: getattr(rows, f) + spec.draft_tokens * getattr(draft, f) for f in OPERATOR_CLASSES}
    parts["attention"] = once.attention + spec.draft_tokens * draft.attention
    return StepTimes(**{f: t / spec.tokens_per_step for f, t in parts.items()})
