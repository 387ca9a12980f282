"""Edge inputs: a DNN as a chain of layers, the device / server / link tiers, and the split plan.

A :class:`DnnSpec` is the architecture as published (layer kinds, channels,
kernels, strides); :mod:`aitrinity.cost.dnn` derives every layer's FLOPs,
parameters and output shape from it. Split points lie *between* chain nodes,
so a residual block (ResNet bottleneck, MobileNetV2 inverted residual) is one
node: cutting inside it would ship two tensors (Neurosurgeon, Kang et al.
ASPLOS'17, splits chain DNNs at layer boundaries in the same way).

An :class:`EdgeScenario` is Workload (the DNN + frames/s) x Plan (split point,
codecs, accuracy budget) x System (device, server, uplink), as for training and
serving scenarios.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from aitrinity.spec._base import Power, Spec

LayerOp = Literal[
    "conv",
    "maxpool",
    "avgpool",
    "global-avgpool",
    "linear",
    "bottleneck",
    "inverted-residual",
]
Activation = Literal["none", "relu", "relu6"]


class DnnLayer(Spec):
    """One chain node as published. ``repeat`` > 1 stacks copies (the first with stride ``s``, the rest 1),
    named ``name1``, ``name2``, ... .

    - ``conv``: ``out`` channels, kernel ``k``, stride ``s``, padding ``p``, ``groups``, optional batch norm;
    - ``maxpool`` / ``avgpool``: kernel ``k``, stride ``s``, padding ``p``; ``global-avgpool``: to 1x1;
    - ``linear``: ``out`` features (the input is flattened);
    - ``bottleneck``: ResNet v1.5 (He et al. 2016; stride on the 3x3): 1x1 to ``out``/4, 3x3, 1x1 to ``out``,
      batch norm after each, a 1x1 projection when the shape changes;
    - ``inverted-residual``: MobileNetV2 (Sandler et al. 2018, Table 2): 1x1 expansion by ``expand``
      (skipped when 1), 3x3 depthwise, 1x1 linear projection to ``out``; residual when the shape is kept.
    """

    name: str
    op: LayerOp
    out: int | None = Field(default=None, gt=0)
    k: int = Field(default=1, gt=0)
    s: int = Field(default=1, gt=0)
    p: int = Field(default=0, ge=0)
    groups: int = Field(default=1, gt=0)
    bias: bool = True
    bn: bool = False
    act: Activation = "none"
    expand: int = Field(default=1, gt=0)
    repeat: int = Field(default=1, gt=0)

    @model_validator(mode="after")
    def _check(self) -> DnnLayer:
        if self.op in ("conv", "linear", "bottleneck", "inverted-residual") and self.out is None:
            raise ValueError(f"a {self.op} layer needs 'out'")
        if self.op == "bottleneck" and self.out is not None and self.out % 4:
            raise ValueError("a bottleneck's 'out' must be divisible by 4 (expansion 4)")
        return self


class DnnSpec(Spec):
    """A DNN for edge inference: input shape (C, H, W), the raw input's dtype, and the chain of layers."""

    name: str
    source: str
    aliases: list[str] = []
    input_shape: tuple[int, ...]
    input_dtype: Literal["uint8", "fp32"] = "uint8"
    """What the device would ship with no split: a camera frame is uint8."""
    activation_dtype: Literal["fp32", "fp16"] = "fp32"
    published_params: int | None = None
    """The parameter count the source reports, checked against the derived one."""
    layers: list[DnnLayer]

    @model_validator(mode="after")
    def _check(self) -> DnnSpec:
        if len(self.input_shape) != 3 or min(self.input_shape) <= 0:
            raise ValueError("input_shape must be (channels, height, width), all positive")
        if not self.layers:
            raise ValueError("layers must not be empty")
        return self


Codec = Literal["fp32", "fp16", "int8", "int4"]
Lossless = Literal["none", "zstd", "lz4"]


class EdgeSystemInput(Spec):
    """Device, server and links by catalog name or file. ``downlink`` defaults to the uplink."""

    device: str
    server: str
    uplink: str
    downlink: str | None = None
    device_power: Power | None = None
    """Device power while computing (default: its TDP)."""
    device_idle_power: Power | None = None
    """Device power while waiting for the server (default: the catalog's idle power, else 0)."""


class EdgeJob(Spec):
    """A stream of frames at ``frames_per_s``; ``bandwidth_trace`` (CSV: seconds, Mbit/s) is the uplink over time."""

    frames_per_s: float = Field(gt=0)
    bandwidth_trace: str | None = None
    result_bytes: int = Field(default=8, ge=0)
    """What the server sends back per frame (class id + score)."""


class EdgeWorkloadInput(Spec):
    model: str
    edge: EdgeJob


class EdgePlan(Spec):
    """Where to split and how to code the tensor that crosses the link.

    ``split``: ``auto`` (the planner picks), a chain index (0 = ship the raw input, N = all local) or a layer
    name (split after it). ``codecs`` / ``lossless`` are the allowed choices. ``accuracy_drop`` gives the
    measured accuracy lost per codec (or per ``split:codec``); choices above ``max_accuracy_drop`` are never
    picked.
    """

    split: int | str = "auto"
    codec: Codec = "fp32"
    lossless: Lossless = "none"
    codecs: list[Codec] = ["fp32", "fp16", "int8", "int4"]
    lossless_options: list[Lossless] = ["none"]
    lossless_ratio: dict[str, float] = {}
    """Measured compressed/raw size of zstd / lz4 (data-dependent; without a measurement they are not planned)."""
    accuracy_drop: dict[str, float] = {}
    max_accuracy_drop: float = Field(default=0.01, ge=0)
    objective: Literal["latency", "energy"] = "latency"


class EdgeScenario(Spec):
    """An edge-cloud inference scenario: Workload (DNN + frames/s) x Plan (split, codec) x System (tiers)."""

    name: str
    description: str = ""
    system: EdgeSystemInput
    workload: EdgeWorkloadInput
    plan: EdgePlan = EdgePlan()
