"""Scenario inputs: Workload x Plan x System as three separate parts (Calculon-style).

A scenario file names catalog entries (or user files); the catalog resolves the
names into a :class:`System` and a :class:`~aitrinity.spec.model.ModelSpec`.
Cross-checks that need the model (heads divisible by TP, ...) happen in
:func:`check_plan`, which every ledger builder relies on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from aitrinity.errors import SpecError
from aitrinity.spec._base import Fraction, Power, PricePerHour, Spec
from aitrinity.spec.hardware import DeviceSpec, Dtype, Efficiency, LinkSpec, MemoryTierSpec
from aitrinity.spec.model import ModelSpec

Overlap = Literal["max", "sum", "partial"]


class SystemInput(Spec):
    """The hardware, by catalog name or file path."""

    device: str
    num_devices: int = Field(gt=0)
    devices_per_node: int = Field(default=8, gt=0)
    intra_node_link: str | None = None
    inter_node_link: str | None = None
    host_memory: str | None = None
    storage: str | None = None
    overlap: Overlap = "max"
    overlap_fraction: Fraction = 0.5
    usable_memory_fraction: Fraction = 0.95
    price_per_device_hour: PricePerHour | None = None
    power_per_device: Power | None = None
    efficiency: Efficiency | None = None


class System(Spec):
    """Resolved hardware: the objects the cost layer prices a Ledger on.

    Topology: ``num_devices`` devices in nodes of ``devices_per_node``; devices in
    a node talk over ``intra_node_link``, nodes over ``inter_node_link`` (one NIC
    per device, rail-optimised, as in DGX/HGX systems).
    """

    device: DeviceSpec
    num_devices: int = Field(gt=0)
    devices_per_node: int = Field(gt=0)
    intra_node_link: LinkSpec
    inter_node_link: LinkSpec | None = None
    host_memory: MemoryTierSpec | None = None
    storage: MemoryTierSpec | None = None
    overlap: Overlap = "max"
    overlap_fraction: Fraction = 0.5
    usable_memory_fraction: Fraction = 0.95
    price_per_device_hour: float | None = None
    power_per_device_W: float | None = None
    efficiency: Efficiency | None = None

    @model_validator(mode="after")
    def _check(self) -> System:
        if self.num_devices > self.devices_per_node and self.inter_node_link is None:
            raise ValueError(
                f"{self.num_devices} devices span several nodes of {self.devices_per_node}: inter_node_link is required"
            )
        return self

    @property
    def num_nodes(self) -> int:
        return -(-self.num_devices // self.devices_per_node)

    @property
    def eff(self) -> Efficiency:
        return self.efficiency or self.device.efficiency

    @property
    def price_per_hour_usd(self) -> float | None:
        """Price of one device-hour (scenario override, else the catalog's)."""
        if self.price_per_device_hour is not None:
            return self.price_per_device_hour
        return self.device.price_per_hour_usd

    @property
    def power_W(self) -> float:
        """Power of one device while busy (override, else TDP: an upper bound)."""
        return self.power_per_device_W or self.device.tdp_W

    @property
    def usable_memory_bytes(self) -> float:
        return self.device.memory_capacity_bytes * self.usable_memory_fraction


class TrainingJob(Spec):
    """One optimizer step over ``global_batch`` sequences of ``seq_len`` tokens."""

    seq_len: int = Field(gt=0)
    global_batch: int = Field(gt=0)
    total_tokens: float | None = Field(default=None, gt=0)


class ServingJob(Spec):
    """Static batches of ``batch`` requests, each ``prompt_tokens`` in and ``output_tokens`` out.

    ``batch: max`` asks for the largest batch that fits in device memory.
    """

    prompt_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    batch: int | Literal["max"] = 1

    @model_validator(mode="after")
    def _check(self) -> ServingJob:
        if isinstance(self.batch, int) and self.batch <= 0:
            raise ValueError("batch must be a positive whole number or 'max'")
        return self


class WorkloadInput(Spec):
    model: str
    training: TrainingJob | None = None
    serving: ServingJob | None = None

    @model_validator(mode="after")
    def _one_job(self) -> WorkloadInput:
        if (self.training is None) == (self.serving is None):
            raise ValueError("give exactly one of 'training' or 'serving'")
        return self


OPTIMIZER_STATE_BYTES = {"adam": 8.0, "adamw": 8.0, "sgd": 4.0, "sgd-nomomentum": 0.0}


class Plan(Spec):
    """How the work is done: parallelism, memory techniques, dtypes.

    ``dp`` defaults to ``num_devices / (tp * pp)``.
    """

    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    dp: int | None = Field(default=None, gt=0)
    ep: int = Field(default=1, gt=0)
    micro_batch: int = Field(default=1, gt=0)
    virtual_stages: int = Field(default=1, gt=0)
    zero: Literal[0, 1, 2, 3] = 0
    recompute: Literal["none", "selective", "full"] = "none"
    sequence_parallel: bool = False
    flash_attention: bool = True
    compute_dtype: Dtype = "bf16"
    weight_dtype: Dtype | None = None
    grad_dtype: Dtype | None = None
    kv_dtype: Dtype | None = None
    optimizer: Literal["adam", "adamw", "sgd", "sgd-nomomentum"] = "adam"
    master_weights: bool = True
    prefill_chunk_tokens: int = Field(default=8192, gt=0)
    """Serving: tokens per prefill forward pass (chunked prefill, Agrawal et al. 2024 "Sarathi-Serve")."""

    @property
    def weights_dtype(self) -> str:
        return self.weight_dtype or self.compute_dtype

    @property
    def grads_dtype(self) -> str:
        return self.grad_dtype or self.weights_dtype

    @property
    def cache_dtype(self) -> str:
        return self.kv_dtype or self.weights_dtype


class Scenario(Spec):
    """What a user writes: a name, the system, the workload and the plan."""

    name: str
    description: str = ""
    system: SystemInput
    workload: WorkloadInput
    plan: Plan = Plan()


def check_plan(plan: Plan, model: ModelSpec, system: System, training: bool) -> int:
    """Validate the plan against the model and system; return the data-parallel degree.

    Raises SpecError naming the field (``plan.tp`` ...) for impossible configurations.
    """
    n = system.num_devices
    heads, kv = model.num_attention_heads, model.kv_heads
    if heads % plan.tp:
        raise SpecError("plan.tp", plan.tp, f"a divisor of num_attention_heads ({heads}) of {model.name}")
    if kv % plan.tp and plan.tp % kv:
        raise SpecError("plan.tp", plan.tp, f"a divisor or multiple of num_kv_heads ({kv}) of {model.name}")
    if plan.pp > model.num_layers:
        raise SpecError("plan.pp", plan.pp, f"at most num_layers ({model.num_layers})")
    if model.num_layers % (plan.pp * plan.virtual_stages):
        raise SpecError(
            "plan.pp",
            plan.pp,
            f"pp x virtual_stages dividing num_layers ({model.num_layers}) of {model.name}",
        )
    if n % (plan.tp * plan.pp):
        raise SpecError("system.num_devices", n, f"a multiple of tp x pp = {plan.tp * plan.pp}")
    dp = n // (plan.tp * plan.pp)
    if plan.dp is not None and plan.dp != dp:
        raise SpecError("plan.dp", plan.dp, f"num_devices / (tp x pp) = {dp}")
    if plan.ep > 1:
        if model.moe is None:
            raise SpecError("plan.ep", plan.ep, f"1: {model.name} has no experts")
        if model.moe.num_experts % plan.ep:
            raise SpecError("plan.ep", plan.ep, f"a divisor of num_experts ({model.moe.num_experts})")
        if dp % plan.ep:
            raise SpecError("plan.ep", plan.ep, f"a divisor of the data-parallel degree ({dp})")
    if plan.sequence_parallel and plan.tp == 1:
        raise SpecError("plan.sequence_parallel", True, "tp > 1 (sequence parallelism splits TP regions)")
    if not training and plan.virtual_stages > 1:
        raise SpecError("plan.virtual_stages", plan.virtual_stages, "1 for serving (no interleaved schedule)")
    return dp
