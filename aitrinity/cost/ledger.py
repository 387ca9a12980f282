"""The Ledger: what (Workload, Plan, System) costs, per phase. Pure numbers, no timing policy.

Everything is per device (the busiest one) unless a name says otherwise.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Phase = Literal["train_step", "prefill", "decode_step"]
Category = Literal["weights", "gradients", "optimizer", "activations", "kv_cache", "buffers"]
Channel = Literal["intra_node", "inter_node", "host", "host_dram", "storage", "remote"]


class Result(BaseModel):
    """Base of result types: immutable, JSON-serialisable."""

    model_config = ConfigDict(frozen=True, defer_build=True)


class Traffic(Result):
    """Bytes one device sends over one channel for one purpose in a phase."""

    purpose: str
    collective: str
    channel: Channel
    link: str
    group_size: int
    bytes_per_device: float
    messages: float


class MemoryItem(Result):
    """Resident bytes of one category in one tier on the busiest device."""

    tier: Literal["hbm", "host", "ssd", "remote"] = "hbm"
    category: Category
    bytes: float


class Flops(Result):
    """FLOPs one device executes in a phase.

    ``forward``/``backward``/``recompute`` are on the busiest device.
    ``model_total`` is the useful work of the whole system (MFU's numerator:
    forward + backward, no recomputation); ``hardware`` adds recomputation
    (HFU's numerator, per busiest device).
    """

    forward: float
    backward: float = 0.0
    recompute: float = 0.0
    exchange: float = 0.0
    """Work an exchange spends (PowerSGD's products, on-the-fly dequantization)."""
    model_total: float

    @property
    def hardware(self) -> float:
        return self.forward + self.backward + self.recompute + self.exchange


class PhaseLedger(Result):
    phase: Phase
    tokens: float
    """Tokens the whole system processes in this phase."""
    flops: Flops
    gemm_rows: float
    """Rows (tokens) of a typical GEMM, for the device's efficiency curve."""
    hbm_bytes: float
    """Device-memory traffic: every weight, KV and saved-activation byte moved once per use."""
    traffic: list[Traffic]
    pipeline_bubble_fraction: float = 0.0
    """Idle fraction of compute from pipeline fill/drain (Narayanan et al. 2021, eq. 1)."""
    operators: float = 0.0
    """Operators launched along the phase's critical path (for the per-operator overhead)."""


class TrainingFacts(Result):
    seq_len: int
    global_batch: int
    micro_batch: int
    num_microbatches: int
    tokens_per_step: float
    total_tokens: float | None


class ServingFacts(Result):
    prompt_tokens: int
    output_tokens: int
    batch: int
    max_batch: int
    """Largest batch that fits in device memory (0: not even one request)."""
    running: int
    """Requests in device memory at once: ``batch``; at fixed concurrency with more clients than fit, ``max_batch``
    (the others wait for a KV slot; :func:`aitrinity.cost.concurrency.steady_state`; 0: not even one fits)."""
    kv_bytes_per_token: float
    """Whole-model KV bytes per cached token (before TP/PP sharding)."""
    kv_bytes_per_token_per_device: float
    replicas: int
    pipeline_batches_in_flight: int


class Parallelism(Result):
    tp: int
    pp: int
    dp: int
    ep: int
    zero: int
    recompute: str
    sequence_parallel: bool
    cp: int = 1
    """Context parallelism (training)."""


class Ledger(Result):
    scenario: str
    model: str
    params_total: float
    params_active: float
    num_devices: int
    compute_dtype: str
    parallelism: Parallelism
    phases: list[PhaseLedger]
    memory: list[MemoryItem]
    """Peak resident bytes on the busiest device."""
    training: TrainingFacts | None = None
    serving: ServingFacts | None = None

    def phase(self, name: Phase) -> PhaseLedger:
        for p in self.phases:
            if p.phase == name:
                return p
        raise KeyError(name)

    def memory_bytes(self, tier: str = "hbm") -> float:
        return sum(i.bytes for i in self.memory if i.tier == tier)
