"""Scenario inputs: Workload x Plan x System as three separate parts (Calculon-style).

A scenario file names catalog entries (or user files); the catalog resolves the
names into a :class:`System` and a :class:`~aitrinity.spec.model.ModelSpec`.
Cross-checks that need the model (heads divisible by TP, ...) happen in
:func:`check_plan`, which every ledger builder relies on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from aitrinity.errors import SpecError
from aitrinity.spec._base import Fraction, Power, PricePerHour, Spec
from aitrinity.spec.exchanges import SERVING_ONLY, TRAINING_ONLY, ExchangeSpec
from aitrinity.spec.hardware import BYTES_PER_DTYPE, DeviceSpec, Dtype, Efficiency, LinkSpec, MemoryTierSpec
from aitrinity.spec.model import ModelSpec

Overlap = Literal["max", "sum", "partial"]


MAX_COUNT = 10**12
"""The largest count (devices, tokens, batch, degrees) an input may give: far above any real system, and
below what the vectorized search's int64 arithmetic holds."""

MAX_TOKENS = 1e18
"""The most tokens a training run may ask for: some 60,000 times Llama 3's 15.6T, and few enough that the run's
FLOPs, time, dollars and joules stay finite."""


class SystemInput(Spec):
    """The hardware, by catalog name or file path."""

    device: str
    num_devices: int = Field(gt=0, le=MAX_COUNT)
    devices_per_node: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    """Devices on one scale-up link (a node, or an NVL72 rack); default: the device's
    ``typical_devices_per_node``."""
    devices_per_host: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    """Devices that share one host's DRAM and SSD (the ``host_memory`` and ``storage`` tiers, the CPU's memory
    bandwidth); default: the device's ``typical_devices_per_host`` (4 on a GB200 NVL72 tray, 4 / 8 on a TPU v5p / v6e
    host), else the node. At most ``devices_per_node``."""
    intra_node_link: str | None = None
    inter_node_link: str | None = None
    host_link: str | None = None
    host_memory: str | None = None
    storage: str | None = None
    remote_pool: str | None = None
    overlap: Overlap = "max"
    overlap_fraction: Fraction = 0.5
    comm_sm_share: float = Field(default=0.0, ge=0.0, lt=1.0)
    """The share of each GPU's SMs the communication kernels of overlapped collectives (data-parallel gradients,
    expert all-to-all) occupy while they run: the GEMMs beside them run on the rest, so a training step overlapping
    ``C`` seconds of them with ``B`` of GPU work takes ``max(B + share·C, C)``. 0: no interference (the default; NCCL's
    varies with its channel count). DeepSeek-V3's all-to-all kernels hold 20 of an H800's 132 SMs (DeepSeek-AI 2024,
    §3.2.2): 0.15."""
    usable_memory_fraction: Fraction = 0.95
    price_per_device_hour: PricePerHour | None = None
    power_per_device: Power | None = None
    efficiency: Efficiency | None = None
    engine: Literal["trtllm", "vllm", "sglang", "generic"] = "generic"
    """The serving engine whose kernels and scheduling price a GPU (measured tables with ``[silicon]``)."""
    engine_version: str | None = None
    """Its version; the closest measured one is used (and said) when there is no table for it."""


class System(Spec):
    """Resolved hardware: the objects the cost layer prices a Ledger on.

    Topology: ``num_devices`` devices in nodes of ``devices_per_node``; devices in
    a node talk over ``intra_node_link``, nodes over ``inter_node_link`` (one NIC
    per device, rail-optimised, as in DGX/HGX systems).
    """

    device: DeviceSpec
    num_devices: int = Field(gt=0, le=MAX_COUNT)
    devices_per_node: int = Field(gt=0, le=MAX_COUNT)
    devices_per_host: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    """See :attr:`SystemInput.devices_per_host`; None: the node is one host."""
    intra_node_link: LinkSpec
    inter_node_link: LinkSpec | None = None
    host_link: LinkSpec
    host_memory: MemoryTierSpec | None = None
    storage: MemoryTierSpec | None = None
    remote_pool: MemoryTierSpec | None = None
    overlap: Overlap = "max"
    overlap_fraction: Fraction = 0.5
    comm_sm_share: float = Field(default=0.0, ge=0.0, lt=1.0)
    """See :attr:`SystemInput.comm_sm_share`."""
    usable_memory_fraction: Fraction = 0.95
    price_per_device_hour_usd: float | None = None
    power_per_device_W: float | None = None
    efficiency: Efficiency | None = None
    engine: str = "generic"
    engine_version: str | None = None

    @model_validator(mode="after")
    def _check(self) -> System:
        if self.num_devices > self.devices_per_node and self.inter_node_link is None:
            raise ValueError(
                f"{self.num_devices} devices span several nodes of {self.devices_per_node}: inter_node_link is required"
            )
        if self.devices_per_host is not None and self.devices_per_host > self.devices_per_node:
            raise ValueError(
                f"devices_per_host {self.devices_per_host} is more than devices_per_node {self.devices_per_node}: "
                "a host's devices share one scale-up domain"
            )
        return self

    def channel(self, name: str) -> ChannelSpec:
        """The path a transfer on ``name`` takes, under the α-β model.

        ``host``: device <-> host DRAM over the host link (PCIe), limited by the DRAM
        tier's bandwidth when one is given; ``host_dram``: work the CPU does in its own
        memory (its share of the node's DRAM bandwidth); ``storage``: device <-> SSD through the
        host link; ``remote``: device <-> a remote memory pool over the inter-node NIC.
        """
        if name == "intra_node":
            return _link_channel(self.intra_node_link)
        if name == "inter_node":
            return _link_channel(self.inter_node_link or self.intra_node_link)
        if name == "host":
            return _tier_channel(self.host_link, self.host_memory)
        if name == "host_dram":  # the CPU's own memory traffic, shared by the host's devices
            dram = self._tier("host_memory", self.host_memory)
            share = self.host_share
            return ChannelSpec(
                name=dram.name,
                label=f"{dram.name}, 1/{share} per device",
                bandwidth_Bps=dram.bandwidth_Bps / share,
                latency_s=dram.latency_s,
            )
        if name == "storage":
            return _tier_channel(self.host_link, self._tier("storage", self.storage))
        if name == "remote":
            return _tier_channel(self.inter_node_link or self.host_link, self._tier("remote_pool", self.remote_pool))
        raise SpecError("channel", name, "intra_node, inter_node, host, host_dram, storage or remote")

    def _tier(self, field: str, tier: MemoryTierSpec | None) -> MemoryTierSpec:
        if tier is None:
            raise SpecError(f"system.{field}", None, "a memory tier for this exchange (e.g. nvme-gen4, remote-pool)")
        return tier

    def tier_capacity_per_device(self, tier: str) -> float | None:
        """Capacity of a lower tier one device may use: host DRAM and SSD are shared by a
        host's devices (:attr:`host_share`), a remote pool by the whole system. None when the tier is absent."""
        spec = {"host": self.host_memory, "ssd": self.storage, "remote": self.remote_pool}.get(tier)
        if spec is None:
            return None
        share = self.num_devices if tier == "remote" else self.host_share
        return spec.capacity_bytes / share

    @property
    def host_share(self) -> int:
        """Devices of this system that share one host's DRAM and SSD."""
        return min(self.devices_per_host or self.devices_per_node, self.num_devices)

    @property
    def num_nodes(self) -> int:
        return -(-self.num_devices // self.devices_per_node)

    @property
    def eff(self) -> Efficiency:
        return self.efficiency or self.device.efficiency

    @property
    def price_per_hour_usd(self) -> float | None:
        """Price of one device-hour (scenario override, else the catalog's)."""
        if self.price_per_device_hour_usd is not None:
            return self.price_per_device_hour_usd
        return self.device.price_per_hour_usd

    @property
    def power_W(self) -> float | None:
        """Power of one device while busy (override, else TDP: an upper bound); None where neither is known."""
        if self.power_per_device_W is not None:
            return self.power_per_device_W
        return self.device.tdp_W

    @property
    def usable_memory_bytes(self) -> float:
        return self.device.memory_capacity_bytes * self.usable_memory_fraction


class ChannelSpec(Spec):
    """Effective α-β parameters of a data path (a link, possibly limited by a memory tier)."""

    name: str
    label: str
    bandwidth_Bps: float
    """Achievable bandwidth: line rate x efficiency, capped by the tier's bandwidth."""
    latency_s: float


def _link_channel(link: LinkSpec) -> ChannelSpec:
    return ChannelSpec(
        name=link.name, label=link.name, bandwidth_Bps=link.bandwidth_Bps * link.efficiency, latency_s=link.latency_s
    )


def _tier_channel(link: LinkSpec, tier: MemoryTierSpec | None) -> ChannelSpec:
    ch = _link_channel(link)
    if tier is None:
        return ch
    return ChannelSpec(
        name=f"{link.name}+{tier.name}",
        label=f"{tier.name} via {link.name}",
        bandwidth_Bps=min(ch.bandwidth_Bps, tier.bandwidth_Bps),
        latency_s=ch.latency_s + tier.latency_s,
    )


class TrainingJob(Spec):
    """One optimizer step over ``global_batch`` sequences of ``seq_len`` tokens."""

    seq_len: int = Field(gt=0, le=MAX_COUNT)
    global_batch: int = Field(gt=0, le=MAX_COUNT)
    total_tokens: float | None = Field(default=None, gt=0, le=MAX_TOKENS)


class ServingJob(Spec):
    """Requests of ``prompt_tokens`` in and ``output_tokens`` out, ``batch`` of them at a time.

    ``mode`` says how they are served:

    * ``concurrency`` (the default): ``batch`` clients in a closed loop against an engine that batches
      continuously -- the protocol serving benchmarks measure; TTFT and TPOT are the steady state's,
      priced operator by operator (:mod:`aitrinity.cost.concurrency`);
    * ``static``: one static batch of ``batch`` prompts prefilled together, then decoded together; the
      roofline of the whole phase (the estimate of releases before the operator model).

    ``batch: max`` asks for the largest batch that fits in device memory.
    """

    prompt_tokens: int = Field(gt=0, le=MAX_COUNT)
    output_tokens: int = Field(gt=0, le=MAX_COUNT)
    batch: Annotated[int, Field(le=MAX_COUNT)] | Literal["max"] = 1
    mode: Literal["concurrency", "static"] = "concurrency"
    max_accuracy_drop: float = Field(default=0.01, ge=0.0, le=1.0)
    """The share of the exact model's benchmark score the service may lose to lossy exchanges (weight / KV
    quantization, KV compression): the planner keeps to it (0.01 = one percent, as the edge split's)."""
    moe_routing: Literal["balanced", "power_law_1.01", "power_law_1.2"] = "power_law_1.01"
    """MoE models: how the requests' tokens spread over the experts -- uniformly, or with power-law expert
    popularity (the default of NVIDIA's aiconfigurator); the hottest expert-parallel rank sets each MoE layer's
    pace (:data:`aitrinity.cost.operators.ROUTING_SKEW`)."""

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


class Disaggregation(Spec):
    """Serving with separate prefill and decode pools (DistServe, Zhong et al. OSDI'24; Mooncake, Qin et al.
    FAST'25; NVIDIA Dynamo): ``prefill_devices`` of the system's devices only prefill, in workers of
    ``prefill_tp`` devices (``prefill_ep`` of them sharing a MoE group, as ``plan.ep`` does); the other devices
    decode with the plan's own layout. Each prompt's KV cache crosses ``kv_link``, one of the system's links:
    ``intra_node`` or ``inter_node``; by default the intra-node link when every device is in one node (NVLink
    domain), else the inter-node one. ``workload.serving.batch`` is the clients per decode replica, as without
    disaggregation."""

    prefill_devices: int = Field(gt=0, le=MAX_COUNT)
    prefill_tp: int = Field(default=1, gt=0, le=MAX_COUNT)
    prefill_ep: int = Field(default=1, gt=0, le=MAX_COUNT)
    kv_link: Literal["intra_node", "inter_node"] | None = None


class Plan(Spec):
    """How the work is done: parallelism, memory techniques, dtypes.

    ``dp`` defaults to ``num_devices / (tp * cp * pp)``.
    """

    tp: int = Field(default=1, gt=0, le=MAX_COUNT)
    pp: int = Field(default=1, gt=0, le=MAX_COUNT)
    dp: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    ep: int = Field(default=1, gt=0, le=MAX_COUNT)
    cp: int = Field(default=1, gt=0, le=MAX_COUNT)
    """Context parallelism, each sequence split over ``cp`` ranks: in training (``aitrinity.cost.training``), and in
    serving for a prompt's prefill, its KV cache sharded over the ranks (``aitrinity.cost.serving``)."""
    cp_method: Literal["ring", "allgather", "ulysses"] = "ring"
    """How the ``cp`` ranks share attention: ``ring`` passes K and V around the group while it attends (ring
    attention, the transfers hidden behind the attention kernels), ``allgather`` gathers the sequence's K and V before
    each layer's attention, in series with it (Llama 3's: "exposed in the critical path", Dubey et al. 2024, §3.3.2;
    the same bytes as the ring), ``ulysses`` re-partitions Q, K, V and the output by heads with all-to-alls
    (DeepSpeed-Ulysses). Serving runs ``ring`` or ``ulysses`` (:func:`ulysses_serving_refusal`)."""
    micro_batch: int = Field(default=1, gt=0, le=MAX_COUNT)
    virtual_stages: int = Field(default=1, gt=0, le=MAX_COUNT)
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
    prefill_chunk_tokens: int = Field(default=8192, gt=0, le=MAX_COUNT)
    """Serving: tokens per prefill forward pass (chunked prefill, Agrawal et al. 2024 "Sarathi-Serve")."""
    exchanges: list[ExchangeSpec] = []
    """Techniques applied on top of the parallel layout (see ``aitrinity.spec.exchanges``)."""
    disaggregation: Disaggregation | None = None
    """Serving: prefill and decode on separate device pools; None: every replica does both."""

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


def moves_kv(exchanges: Iterable[Any]) -> bool:
    """Whether one of the exchanges moves KV across a link -- a KV offload, or a prefix cache outside HBM: what KV
    compression compresses."""
    return any(e.kind == "kv-offload" or (e.kind == "prefix-cache" and e.tier != "hbm") for e in exchanges)


def check_plan(plan: Plan, model: ModelSpec, system: System, training: bool) -> int:
    """Validate the plan against the model and system; return the data-parallel degree.

    Raises SpecError naming the field (``plan.tp`` ...) for impossible configurations.
    """
    n = system.num_devices - (_check_disaggregation(plan, model, system, training) if plan.disaggregation else 0)
    check_tp_heads(model, plan.tp)
    _check_tp_domain("plan.tp", plan.tp, system)
    if plan.pp > model.num_layers:
        raise SpecError("plan.pp", plan.pp, f"at most num_layers ({model.num_layers})")
    if plan.virtual_stages > 1 and plan.pp == 1:
        raise SpecError("plan.virtual_stages", plan.virtual_stages, "1 without pipeline parallelism (pp 1)")
    if not chunks_fit(model.num_layers, plan.pp, plan.virtual_stages):
        raise SpecError(
            "plan.virtual_stages",
            plan.virtual_stages,
            f"at most (num_layers + 2) / pp ({model.num_layers} + 2) / {plan.pp} for {model.name}: each model chunk "
            "of the interleaved schedule holds a layer, or the embedding or the loss",
        )
    _check_cp(plan, model, training)
    group = plan.tp * plan.cp * plan.pp
    if n % group:
        what = "the decode pool's devices" if plan.disaggregation else "system.num_devices"
        cp = " x cp" if plan.cp > 1 else ""
        raise SpecError(what, n, f"a multiple of tp{cp} x pp = {group}")
    dp = n // group
    if plan.dp is not None and plan.dp != dp:
        raise SpecError("plan.dp", plan.dp, f"num_devices / (tp x cp x pp) = {dp}")
    if plan.ep > 1:
        if model.moe is None:
            raise SpecError("plan.ep", plan.ep, f"1: {model.name} has no experts")
        if model.moe.num_experts % plan.ep:
            raise SpecError("plan.ep", plan.ep, f"a divisor of num_experts ({model.moe.num_experts})")
        if dp % plan.ep:
            raise SpecError("plan.ep", plan.ep, f"a divisor of the data-parallel degree ({dp})")
    if plan.sequence_parallel and plan.tp == 1:
        raise SpecError("plan.sequence_parallel", True, "tp > 1 (sequence parallelism splits TP regions)")
    check_exchanges(plan, system, training)
    if not training and plan.virtual_stages > 1:
        raise SpecError("plan.virtual_stages", plan.virtual_stages, "1 for serving (no interleaved schedule)")
    return dp


def check_tp_heads(model: ModelSpec, tp: int, field: str = "plan.tp") -> None:
    """TP splits the attention heads: ``tp`` divides the query heads, and divides the KV heads or is a multiple of
    them (the KV heads are then replicated), as the engines require."""
    heads, kv = model.num_attention_heads, model.kv_heads
    if heads % tp:
        raise SpecError(field, tp, f"a divisor of num_attention_heads ({heads}) of {model.name}")
    if kv % tp and tp % kv:
        raise SpecError(field, tp, f"a divisor or multiple of num_kv_heads ({kv}) of {model.name}")


def ulysses_serving_refusal(model: ModelSpec, tp: int, cp: int) -> str:
    """Why Ulysses context parallelism cannot serve ``model`` at ``tp x cp`` ('' when it can). Serving keeps each
    sequence's KV cache where its heads are attended: Ulysses splits a TP rank's query heads and KV heads over the
    ``cp`` ranks, so both must divide (a TP rank holds ``max(kv_heads / tp, 1)`` KV heads), and MLA's latent cache,
    which every head reads, cannot be split by head."""
    if model.mla is not None:
        return "cp_method ring for an MLA model (its latent KV cache is shared by every head: Ulysses cannot split it)"
    q, kv = model.num_attention_heads // tp, max(model.kv_heads // tp, 1)
    if q % cp or kv % cp:
        return (
            f"a divisor of the {q} query heads and {kv} KV heads per TP rank with cp_method ulysses (it splits "
            "heads over the CP group); ring has no such limit"
        )
    return ""


def ulysses_kv_heads(model: ModelSpec, tp: int, cp: int) -> int:
    """The K / V heads per TP rank that DeepSpeed-Ulysses moves when training at ``tp x cp``: the rank's own, or, where
    they are fewer than the CP group, each repeated ``cp / kv`` times before the all-to-all so that every rank receives
    the KV head its query heads attend (the GQA scheme of Ulysses implementations: verl issue 1226, InternEvo PR 224,
    prime-rl PR 3042). An MLA model's K and V are per query head in training."""
    if model.mla is not None:
        return model.num_attention_heads // tp
    return max(max(model.kv_heads // tp, 1), cp)


def ulysses_training_refusal(model: ModelSpec, tp: int, cp: int) -> str:
    """Why Ulysses context parallelism cannot train ``model`` at ``tp x cp`` ('' when it can): each TP rank's query
    heads split over the CP group, and its KV heads either split too or are repeated up to it
    (:func:`ulysses_kv_heads`), so one of the KV-head count and ``cp`` divides the other."""
    q = model.num_attention_heads // tp
    kv = q if model.mla is not None else max(model.kv_heads // tp, 1)
    if q % cp or (kv % cp and cp % kv):
        return (
            f"a divisor of the {q} query heads per TP rank, and a divisor or multiple of its {kv} KV heads, with "
            "cp_method ulysses (it splits heads over the CP group, repeating KV heads fewer than it); ring has no "
            "such limit"
        )
    return ""


def _check_cp(plan: Plan, model: ModelSpec, training: bool) -> None:
    """Context parallelism: Ulysses splits each TP rank's heads over the CP group. Serving runs ring attention
    (pass-KV prefill, Yang et al. 2024) or Ulysses (:func:`ulysses_serving_refusal`), on a dense or an
    expert-parallel-free model, without disaggregated pools."""
    if plan.cp == 1:
        return
    if not training:
        why = (
            "cp_method ring or ulysses for serving (pass-KV ring attention, or DeepSpeed-Ulysses's head all-to-alls)"
            if plan.cp_method == "allgather"
            else "1 with expert parallelism in serving (CP is priced for replicas without EP)"
            if plan.ep > 1
            else "1 with disaggregated pools (CP is priced for aggregated replicas)"
            if plan.disaggregation is not None
            else ulysses_serving_refusal(model, plan.tp, plan.cp)
            if plan.cp_method == "ulysses"
            else ""
        )
        if why:
            raise SpecError("plan.cp", plan.cp, why)
        return
    if plan.cp_method == "ulysses" and (why := ulysses_training_refusal(model, plan.tp, plan.cp)):
        raise SpecError("plan.cp", plan.cp, why)


def chunks_fit(num_layers: int, pp: Any, virtual_stages: Any) -> Any:
    """Whether ``pp`` stages of ``virtual_stages`` model chunks each can hold ``num_layers`` layers (arrays
    broadcast); interleaving needs a pipeline (``pp > 1``). Without it every stage holds a layer. With it, each
    chunk holds a layer, except that the first chunk may hold only the embedding and the last only the output layer
    and the loss: Llama 3 405B's 126 layers ran as 16 stages of 8 one-layer chunks, one layer fewer on the first and
    the last stage (Dubey et al. 2024, §3.3.2; Megatron-Core's ``account_for_embedding/loss_in_pipeline_split``)."""
    return (pp * virtual_stages <= num_layers + 2 * (virtual_stages > 1)) & ((pp > 1) | (virtual_stages == 1))


def check_sequence_split(seq_len: int, cp: int) -> None:
    """A sequence splits over ``cp`` ranks in ``2·cp`` equal chunks, rank ``i`` holding chunks ``i`` and
    ``2cp - 1 - i``, so that each does the same share of causal attention (Megatron-Core's load balancing)."""
    if cp > 1 and seq_len % (2 * cp):
        raise SpecError(
            "plan.cp",
            cp,
            f"a CP size whose 2 x cp chunks divide workload.training.seq_len ({seq_len}): each rank holds two of "
            "2 x cp equal chunks (load-balanced causal attention)",
        )


def _check_tp_domain(field: str, tp: int, system: System) -> None:
    """A TP group all-reduces in every layer: it is placed inside one node's (one NVLink domain's) devices, as the
    planner places it; a layout whose TP group would overflow it is refused."""
    if tp > system.devices_per_node:
        raise SpecError(
            field,
            tp,
            f"at most the {system.devices_per_node} devices of one node / NVLink domain (system.devices_per_node): "
            "a TP group all-reduces every layer and stays inside it",
        )


def _check_disaggregation(plan: Plan, model: ModelSpec, system: System, training: bool) -> int:
    """Validate ``plan.disaggregation``; return the prefill pool's device count."""
    d = plan.disaggregation
    assert d is not None
    field = "plan.disaggregation"
    if training:
        raise SpecError(field, "set", "absent for training (prefill and decode pools are a serving layout)")
    if d.prefill_devices >= system.num_devices:
        raise SpecError(f"{field}.prefill_devices", d.prefill_devices, f"fewer than num_devices ({system.num_devices})")
    if d.kv_link == "inter_node" and system.inter_node_link is None:
        raise SpecError(f"{field}.kv_link", d.kv_link, "intra_node (the system has no inter_node_link)")
    _check_tp_domain(f"{field}.prefill_tp", d.prefill_tp, system)
    if d.prefill_devices % d.prefill_tp:
        raise SpecError(f"{field}.prefill_tp", d.prefill_tp, f"a divisor of prefill_devices ({d.prefill_devices})")
    if model.num_attention_heads % d.prefill_tp:
        raise SpecError(
            f"{field}.prefill_tp", d.prefill_tp, f"a divisor of num_attention_heads ({model.num_attention_heads})"
        )
    if d.prefill_ep > 1:
        if model.moe is None or model.moe.num_experts % d.prefill_ep:
            experts = f"num_experts ({model.moe.num_experts})" if model.moe else f"1: {model.name} has no experts"
            raise SpecError(f"{field}.prefill_ep", d.prefill_ep, f"a divisor of {experts}")
        if (d.prefill_devices // d.prefill_tp) % d.prefill_ep:
            raise SpecError(
                f"{field}.prefill_ep",
                d.prefill_ep,
                f"a divisor of the prefill workers ({d.prefill_devices // d.prefill_tp})",
            )
    return d.prefill_devices


_TIER_FIELD = {"host": "host_memory", "ssd": "storage", "remote": "remote_pool"}


def check_exchanges(plan: Plan, system: System, training: bool) -> None:
    """Reject exchanges that do not apply to this workload or do not compose, with the reason."""
    seen: set[str] = set()
    for i, x in enumerate(plan.exchanges):
        field = f"plan.exchanges.{i}"
        if x.kind in seen:
            raise SpecError(field, x.kind, "each exchange at most once")
        seen.add(x.kind)
        if training and x.kind in SERVING_ONLY:
            raise SpecError(field, x.kind, "an exchange for training (this one applies to serving)")
        if not training and x.kind in TRAINING_ONLY:
            raise SpecError(field, x.kind, "an exchange for serving (this one applies to training)")
        tier = getattr(x, "tier", "host" if x.kind in ("optimizer-offload", "activation-offload") else "hbm")
        if tier != "hbm" and getattr(system, _TIER_FIELD[tier]) is None:
            raise SpecError(
                f"system.{_TIER_FIELD[tier]}",
                None,
                f"a {tier} tier for {x.kind} (e.g. "
                + {"host": "host-dram", "ssd": "nvme-gen4", "remote": "remote-pool"}[tier]
                + ")",
            )
        if x.kind == "gradient-compression":
            if x.method in ("fp16", "bf16") and BYTES_PER_DTYPE[plan.grads_dtype] <= 2:
                raise SpecError(
                    f"{field}.method",
                    x.method,
                    f"a compressor smaller than the {plan.grads_dtype} gradients (casting to 16 bits changes nothing)",
                )
            if x.method in ("topk", "sign", "powersgd") and plan.zero >= 2:
                raise SpecError(
                    f"{field}.method",
                    x.method,
                    "zero <= 1: sparse, sign and low-rank compressors need "
                    "the whole gradient, which ZeRO-2/3 reduce-scatter as it is produced",
                )
        if x.kind == "local-sgd" and plan.zero == 3:
            raise SpecError(field, x.kind, "zero <= 2: ZeRO-3 shards the parameters that local SGD keeps in full")
        if x.kind == "optimizer-offload" and plan.zero == 3:
            raise SpecError(
                field, x.kind, "zero <= 2 (ZeRO-Offload builds on ZeRO-2; stage 3 offload is ZeRO-Infinity)"
            )
        if x.kind == "kv-compression" and not moves_kv(plan.exchanges):
            raise SpecError(
                field,
                x.kind,
                "an exchange that moves KV across a link (kv-offload, or prefix-cache "
                "outside hbm): nothing to compress",
            )
        if x.kind == "kv-quantization" and BYTES_PER_DTYPE[x.dtype] >= BYTES_PER_DTYPE[plan.cache_dtype]:
            raise SpecError(f"{field}.dtype", x.dtype, f"fewer bytes than the KV dtype {plan.cache_dtype}")
        if x.kind == "weight-quantization" and BYTES_PER_DTYPE[x.dtype] >= BYTES_PER_DTYPE[plan.weights_dtype]:
            raise SpecError(f"{field}.dtype", x.dtype, f"fewer bytes than the weight dtype {plan.weights_dtype}")
