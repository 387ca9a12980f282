"""Edge scenarios through the front door: resolve names, then call the pure split model and planner.

``api.diagnose`` and ``api.plan`` hand an :class:`~aitrinity.spec.edge.EdgeScenario`
here. What-if overrides: scenario fields as dotted paths (``plan.split=4``,
``workload.edge.frames_per_s=30``, ``system.uplink=5g-uplink``) and the
shorthand ``uplink=`` (or ``link=``) with a bandwidth (``uplink=2Mbit/s``) or a
link name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aitrinity import catalog, units
from aitrinity import overrides as ov
from aitrinity.catalog.loader import is_file
from aitrinity.catalog.traces import load_link_trace
from aitrinity.cost.dnn import LayerTable, layer_table
from aitrinity.cost.edge import Choices, Processor, SplitOption, Uplink, split_options
from aitrinity.errors import SpecError, UnitError, UnknownNameError
from aitrinity.plan.split import EdgeDiagnosis, EdgePlanReport, diagnose_split, plan_split
from aitrinity.spec._base import validate
from aitrinity.spec.edge import EdgeScenario
from aitrinity.spec.hardware import DeviceSpec


@dataclass(frozen=True)
class EdgeInputs:
    scenario: EdgeScenario
    table: LayerTable
    device: Processor
    server: Processor
    uplink: Uplink
    downlink: Uplink
    choices: Choices
    trace: tuple[tuple[float, float], ...]

    def options(self) -> list[SplitOption]:
        return split_options(
            self.table,
            self.device,
            self.server,
            self.uplink,
            self.choices,
            result_bytes=self.scenario.workload.edge.result_bytes,
            downlink_Bps=self.downlink.bandwidth_Bps,
            downlink_latency_s=self.downlink.latency_s,
        )


def processor(d: DeviceSpec, dtype: str, busy_W: float | None = None, idle_W: float | None = None) -> Processor:
    """Achievable rates of a catalog device for a DNN at ``dtype`` (fp32 activations use the fp32 peak); busy power
    ``busy_W``, else its TDP, else 0 -- the split prices the device's energy, which :func:`resolve` checks, not the
    server's."""
    return Processor(
        name=d.name,
        flops_per_s=d.peak_flops_for(dtype) * d.efficiency.compute,
        mem_Bps=d.memory_bandwidth_Bps * d.efficiency.memory,
        busy_W=busy_W or d.tdp_W or 0.0,
        idle_W=idle_W if idle_W is not None else (d.idle_W or 0.0),
    )


def _uplink(ref: str, base: Path | None, field: str) -> Uplink:
    try:
        link = catalog.link(ref, base)
    except UnknownNameError as e:
        raise e.at(field) from None
    radio = link.radio
    return Uplink(
        name=link.name,
        bandwidth_Bps=link.bandwidth_Bps * link.efficiency,
        latency_s=link.latency_s,
        tx_base_W=radio.tx_base_W if radio else None,
        tx_W_per_Mbps=radio.tx_W_per_Mbps if radio else 0.0,
    )


def _apply(s: EdgeScenario, overrides: Sequence[str]) -> tuple[EdgeScenario, float | None]:
    """Field overrides applied; an ``uplink=<bandwidth>`` override returned apart."""
    fields: list[ov.Override] = []
    bandwidth: float | None = None
    for o in (ov.parse(t) for t in overrides):
        if o.key in ("uplink", "link"):
            try:
                bandwidth = units.parse_bandwidth(o.value)
            except UnitError:
                o = ov.Override("system.uplink", o.value)
            else:
                if not bandwidth > 0:
                    raise SpecError(o.key, o.value, "a positive bandwidth such as 2Mbit/s")
                continue
        elif "." not in o.key and o.key not in ov.SECTIONS:
            raise SpecError("--set", o.key, "a scenario field (plan.split=4, workload.edge.frames_per_s=30) or uplink=")
        fields.append(o)
    if fields:
        data = ov.apply_fields(s.model_dump(mode="json", exclude_unset=True), fields)
        s = validate(EdgeScenario, data, source="--set")
    return s, bandwidth


def resolve(s: EdgeScenario, base: Path | None = None, overrides: Sequence[str] = ()) -> EdgeInputs:
    s, bandwidth = _apply(s, overrides)
    try:
        dnn = catalog.dnn(s.workload.model, base)
    except UnknownNameError as e:
        raise e.at("workload.model") from None
    try:
        table = layer_table(dnn)
    except ValueError as e:
        raise SpecError("workload.model", s.workload.model, f"a consistent architecture ({e})") from None
    dt = dnn.activation_dtype
    sy = s.system
    try:
        dev = catalog.device(sy.device, base)
    except UnknownNameError as e:
        raise e.at("system.device") from None
    try:
        srv = catalog.device(sy.server, base)
    except UnknownNameError as e:
        raise e.at("system.server") from None
    up = _uplink(sy.uplink, base, "system.uplink")
    if bandwidth is not None:
        up = Uplink(up.name, bandwidth, up.latency_s, up.tx_base_W, up.tx_W_per_Mbps)
    down = _uplink(sy.downlink, base, "system.downlink") if sy.downlink else up
    p = s.plan
    choices = Choices(
        codecs=tuple(p.codecs),
        lossless=tuple(p.lossless_options),
        lossless_ratio=dict(p.lossless_ratio),
        accuracy_drop=dict(p.accuracy_drop),
        max_accuracy_drop=p.max_accuracy_drop,
    )
    trace: tuple[tuple[float, float], ...] = ()
    if s.workload.edge.bandwidth_trace:
        path = Path(s.workload.edge.bandwidth_trace)
        if base is not None and not path.is_absolute() and is_file(base / path):
            path = base / path
        lt = load_link_trace(path)
        trace = tuple(zip(lt.times_s, lt.bandwidth_Bps, strict=True))
    if sy.device_power is None and dev.tdp_W is None:
        raise SpecError.at(
            "system.device_power",
            f"{dev.name} publishes no power, and the split prices the device's energy: give one (e.g. "
            "--set system.device_power=5W)",
        )
    for field, d in (("system.device", dev), ("system.server", srv)):
        try:
            d.peak_flops_for(dt)
        except SpecError:  # (it names plan.compute_dtype, which an edge scenario does not have)
            raise SpecError(
                field,
                d.name,
                f"a device with a {dt} peak ({dnn.name} runs in {dt}); {d.name} has {', '.join(d.peak_flops)}",
            ) from None
    return EdgeInputs(
        scenario=s,
        table=table,
        device=processor(dev, dt, sy.device_power, sy.device_idle_power),
        server=processor(srv, dt),
        uplink=up,
        downlink=down,
        choices=choices,
        trace=trace,
    )


def fixed_choice(inp: EdgeInputs, options: Sequence[SplitOption]) -> SplitOption | None:
    """The option the plan fixes (``split`` not ``auto``), or None."""
    p = inp.scenario.plan
    if p.split == "auto":
        return None
    n = len(inp.table.layers)
    if isinstance(p.split, int):
        k = p.split
    else:
        names = ["input", *(x.name for x in inp.table.layers)]
        if p.split not in names:
            raise UnknownNameError("layer", p.split, names, "plan.split")
        k = names.index(p.split)
    if not 0 <= k <= n:
        raise SpecError("plan.split", p.split, f"auto, a layer name or 0..{n}")
    codec = "raw" if k == 0 else "local" if k == n else p.codec
    for o in options:
        if o.split == k and o.codec == codec and o.lossless == (p.lossless if k < n else "none"):
            return o
    raise SpecError("plan.codec", p.codec, f"one of plan.codecs {list(p.codecs)}")


def diagnose(s: EdgeScenario, base: Path | None = None, overrides: Sequence[str] = ()) -> EdgeDiagnosis:
    inp = resolve(s, base, overrides)
    opts = inp.options()
    return diagnose_split(
        inp.scenario.name,
        inp.table.model,
        opts,
        inp.uplink.name,
        inp.uplink.bandwidth_Bps,
        inp.scenario.workload.edge.frames_per_s,
        inp.device.name,
        inp.server.name,
        fixed_choice(inp, opts),
        inp.scenario.plan.objective,
        inp.trace,
    )


def plan(
    s: EdgeScenario, base: Path | None = None, overrides: Sequence[str] = (), objective: str | None = None, top: int = 5
) -> EdgePlanReport:
    inp = resolve(s, base, overrides)
    objective = objective or inp.scenario.plan.objective
    if objective not in ("latency", "energy"):
        raise SpecError("--objective", objective, "latency or energy for an edge scenario")
    return plan_split(inp.scenario.name, inp.options(), inp.uplink.bandwidth_Bps, objective, top)
