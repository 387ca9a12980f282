"""Hardware inputs: devices, links and memory tiers (catalog data or user files).

Conventions (DESIGN.md): FLOP/s are *dense* peaks per dtype (no structured
sparsity); bandwidths of links are per device and per direction; memory
bandwidth is the device's peak to its own memory.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from aitrinity.spec._base import Bandwidth, Bytes, FlopRate, Fraction, Power, PricePerHour, Seconds, Spec

Dtype = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]

BYTES_PER_DTYPE: dict[str, float] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
    "int4": 0.5,
    "fp4": 0.5,
}


class Efficiency(Spec):
    """Achievable fractions of peak, as data (Calculon's convention).

    Matmul efficiency follows a saturating curve in the number of rows ``m``
    (tokens) a GEMM processes: ``eff(m) = compute * m / (m + compute_half_rows)``.
    ``compute_half_rows = 0`` means flat. ``memory`` is the achievable fraction
    of peak memory bandwidth for streaming access. ``op_overhead_s`` is the
    host-side cost of launching one operator (eager dispatch), paid serially;
    0 for compiled code or CUDA graphs, measured by ``trinity calibrate``.
    """

    compute: Fraction = 0.75
    compute_half_rows: float = Field(default=0.0, ge=0)
    memory: Fraction = 0.85
    op_overhead_s: float = Field(default=0.0, ge=0)

    def compute_at(self, rows: Any) -> Any:
        """The GEMM efficiency at ``rows`` rows (a number, or an array of them: the planner's rows)."""
        if self.compute_half_rows <= 0:
            return self.compute
        return self.compute * rows / (rows + self.compute_half_rows)


class GemmParams(Spec):
    """One GEMM dtype's roofline: ``t = launch_s + max(2mnk / (peak·e(m)), bytes / (bw·u))`` with
    ``e(m) = efficiency·m / (m + half_rows)``."""

    efficiency: Fraction
    half_rows: float = Field(ge=0)
    launch_s: Seconds


class AttentionParams(Spec):
    """Flash attention: prefill at a fraction of bf16 peak, decode at a fraction of memory bandwidth."""

    prefill_efficiency: Fraction
    decode_memory_efficiency: Fraction
    launch_s: Seconds


class CollectiveParams(Spec):
    """An in-node all-reduce under the α-β model: ``latency_s + 2(n-1)/n · bytes / bus_bandwidth_Bps``."""

    latency_s: Seconds
    bus_bandwidth_Bps: Bandwidth


class KernelParams(Spec):
    """A GPU's kernels in a few numbers, for pricing without the measured tables (``[silicon]`` extra).

    Derived from those tables by ``tools/derive_kernel_params.py``, which records its inputs in ``source``;
    see docs/silicon.md.
    """

    source: str
    gemm: dict[str, GemmParams]
    """By dtype: bf16, fp8 (and fp4 where the GPU has it)."""
    attention: AttentionParams
    all_reduce: dict[int, CollectiveParams]
    """By GPU count in the group (2, 4, 8)."""
    memory_efficiency: Fraction = 0.8
    elementwise_launch_s: Seconds = 3e-6

    def gemm_for(self, dtype: str) -> GemmParams:
        for d in (dtype, "fp8" if dtype in ("fp4", "int4", "int8") else "bf16", "bf16"):
            if d in self.gemm:
                return self.gemm[d]
        return next(iter(self.gemm.values()))

    def all_reduce_for(self, gpus: int) -> CollectiveParams:
        if gpus in self.all_reduce:
            return self.all_reduce[gpus]
        nearest = min(self.all_reduce, key=lambda n: abs(n - gpus))
        return self.all_reduce[nearest]


class Measurement(Spec):
    """One number a calibration measured: what, how and when."""

    quantity: str
    value: float
    unit: str
    method: str
    measured_at: str


class DeviceSpec(Spec):
    """An accelerator or a host CPU (one socket / one GPU)."""

    name: str
    kind: Literal["gpu", "cpu", "accelerator", "soc"]
    vendor: str
    source: str
    aliases: list[str] = []
    peak_flops: dict[Dtype, FlopRate]
    memory_kind: str
    memory_capacity_bytes: Bytes
    memory_bandwidth_Bps: Bandwidth
    tdp_W: Power | None = None
    """Board power while busy (TDP: an upper bound), where published. None: the vendor publishes none (Google's TPUs),
    so energy is left out -- as $ is without a price -- unless a scenario gives ``system.power_per_device``."""
    price_per_hour_usd: PricePerHour | None = None
    price_source: str | None = None
    efficiency: Efficiency = Efficiency()
    typical_intra_node_link: str = "pcie-5-x16"
    typical_inter_node_link: str = "ethernet-100g"
    typical_host_link: str = "pcie-5-x16"
    typical_devices_per_node: int = Field(default=8, gt=0)
    """Devices that share the scale-up domain (``typical_intra_node_link``): 8 on an HGX board, 72 in an NVL72
    rack. A scenario's ``system.devices_per_node`` defaults to it."""
    typical_devices_per_host: int | None = Field(default=None, gt=0)
    """Devices that share one host's DRAM and SSD, where that is fewer than the scale-up domain: a GB200 / GB300
    NVL72 compute tray holds 4 of the rack's 72 GPUs, a TPU v5p host 4 chips and a v6e host 8 of the pod's 256. None:
    the scale-up domain is one host (an HGX / DGX node). A scenario's ``system.devices_per_host`` defaults to it."""
    measured: list[Measurement] = []
    """Set by ``trinity calibrate``: every measurement behind the figures above."""
    tier: Literal["device", "edge", "cloud"] = "cloud"
    """Where it sits in a device-edge-cloud deployment (edge scenarios)."""
    idle_W: Power | None = None
    """Power while idle / waiting, where published (edge scenarios: a device waiting for the server)."""
    kernels: KernelParams | None = None
    """Per-operator roofline parameters derived from measured kernel tables (GPUs that have them)."""

    @model_validator(mode="after")
    def _check(self) -> DeviceSpec:
        if not self.peak_flops:
            raise ValueError("peak_flops must list at least one dtype")
        if self.price_per_hour_usd is not None and not self.price_source:
            raise ValueError("price_source is required when price_per_hour_usd is given")
        return self

    def peak_flops_for(self, dtype: str) -> float:
        """Dense peak for ``dtype``; bf16 and fp16 stand in for each other."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        twin = {"bf16": "fp16", "fp16": "bf16"}.get(dtype)
        if twin and twin in self.peak_flops:
            return self.peak_flops[twin]
        from aitrinity.errors import SpecError

        raise SpecError(
            "plan.compute_dtype",
            dtype,
            f"a dtype {self.name} has a peak for: {', '.join(self.peak_flops)} "
            f"(e.g. --set plan.compute_dtype={'bf16' if 'bf16' in self.peak_flops else next(iter(self.peak_flops))})",
        )


class RadioModel(Spec):
    """Transmit power of a wireless uplink: ``P = tx_base_W + tx_W_per_Mbps x throughput`` (Huang et al.,
    MobiSys'12, "A close examination of performance and power characteristics of 4G LTE networks", Table 4).
    A transfer of ``b`` bits taking ``t`` seconds costs ``tx_base_W x t + tx_W_per_Mbps x b / 1e6`` joules."""

    tx_base_W: float = Field(ge=0)
    tx_W_per_Mbps: float = Field(ge=0)
    source: str


class LinkSpec(Spec):
    """A link under the α-β model: ``time = latency_s + bytes / bandwidth_Bps``.

    ``bandwidth_Bps`` is per device and per direction (e.g. NVLink 4: 450 GB/s
    each way of the 900 GB/s bidirectional total).
    """

    name: str
    kind: Literal["nvlink", "infinity-fabric", "ici", "pcie", "infiniband", "ethernet", "wan", "wireless"]
    source: str
    aliases: list[str] = []
    bandwidth_Bps: Bandwidth
    latency_s: Seconds
    efficiency: Fraction = 0.85
    radio: RadioModel | None = None
    """Transmit energy of a wireless uplink (edge scenarios), where published."""


class MemoryTierSpec(Spec):
    """A memory tier below device memory: host DRAM, NVMe SSD, a remote pool."""

    name: str
    kind: Literal["dram", "ssd", "remote"]
    source: str
    aliases: list[str] = []
    capacity_bytes: Bytes
    bandwidth_Bps: Bandwidth
    latency_s: Seconds
