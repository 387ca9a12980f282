"""A DNN's layer table, derived from its published architecture (pure).

For each chain node: FLOPs, parameters, output shape and bytes. FLOPs count
what ``torch.utils.flop_counter.FlopCounterMode`` counts -- 2 x multiply-
accumulates of convolutions and matrix products, no bias adds, pooling,
activations or batch norm (these are a few percent of a CNN's work). Output
size of a convolution or pooling window: ``floor((h + 2p - k) / s) + 1``.
Parameters include batch-norm scale and shift (running statistics are
buffers, not parameters, as torch counts them).
"""

from __future__ import annotations

import math

from aitrinity.cost.ledger import Result
from aitrinity.spec.edge import DnnLayer, DnnSpec
from aitrinity.spec.hardware import BYTES_PER_DTYPE

Shape = tuple[int, ...]


class LayerCost(Result):
    name: str
    op: str
    flops: float
    params: int
    out_shape: Shape
    out_bytes: int
    """Output tensor at the activation dtype: what crosses the link when the split is after this node."""


class LayerTable(Result):
    model: str
    input_shape: Shape
    input_bytes: int
    """The raw input at its own dtype (a uint8 camera frame)."""
    activation_dtype: str
    layers: list[LayerCost]

    @property
    def flops(self) -> float:
        return sum(x.flops for x in self.layers)

    @property
    def params(self) -> int:
        return sum(x.params for x in self.layers)


def _window(h: int, k: int, s: int, p: int) -> int:
    out = (h + 2 * p - k) // s + 1
    if out <= 0:
        raise ValueError(f"a {k}x{k} window with stride {s} and padding {p} does not fit a {h}-wide input")
    return out


def _conv(c: int, h: int, w: int, out: int, k: int, s: int, p: int, groups: int) -> tuple[float, int, int, int]:
    """FLOPs, weight count, output height and width of one convolution."""
    if c % groups or out % groups:
        raise ValueError(f"groups={groups} must divide {c} input and {out} output channels")
    ho, wo = _window(h, k, s, p), _window(w, k, s, p)
    weights = out * (c // groups) * k * k
    return 2.0 * weights * ho * wo, weights, ho, wo


def _node(x: DnnLayer, shape: Shape, stride: int) -> tuple[float, int, Shape]:
    """(FLOPs, params, output shape) of one node, given its input shape."""
    if x.op == "linear":
        assert x.out is not None
        n = math.prod(shape)
        return 2.0 * n * x.out, n * x.out + (x.out if x.bias else 0), (x.out,)
    if len(shape) != 3:
        raise ValueError(f"{x.name}: a {x.op} needs a (C, H, W) input, got {shape}")
    c, h, w = shape
    if x.op in ("maxpool", "avgpool"):
        return 0.0, 0, (c, _window(h, x.k, stride, x.p), _window(w, x.k, stride, x.p))
    if x.op == "global-avgpool":
        return 0.0, 0, (c, 1, 1)
    assert x.out is not None
    if x.op == "conv":
        f, wt, ho, wo = _conv(c, h, w, x.out, x.k, stride, x.p, x.groups)
        extra = 2 * x.out if x.bn else (x.out if x.bias else 0)
        return f, wt + extra, (x.out, ho, wo)
    if x.op == "bottleneck":  # 1x1 -> 3x3 (stride) -> 1x1, BN after each (He et al. 2016, Fig. 5 right)
        width = x.out // 4
        f1, w1, _, _ = _conv(c, h, w, width, 1, 1, 0, 1)
        f2, w2, ho, wo = _conv(width, h, w, width, 3, stride, 1, 1)
        f3, w3, _, _ = _conv(width, ho, wo, x.out, 1, 1, 0, 1)
        flops, params = f1 + f2 + f3, w1 + w2 + w3 + 2 * (width + width + x.out)
        if stride != 1 or c != x.out:  # projection shortcut
            fd, wd, _, _ = _conv(c, h, w, x.out, 1, stride, 0, 1)
            flops, params = flops + fd, params + wd + 2 * x.out
        return flops, params, (x.out, ho, wo)
    # inverted residual: [1x1 expand] -> 3x3 depthwise (stride) -> 1x1 project, BN after each (Sandler et al. 2018)
    hidden = c * x.expand
    flops, params = 0.0, 0
    if x.expand != 1:
        fe, we, _, _ = _conv(c, h, w, hidden, 1, 1, 0, 1)
        flops, params = fe, we + 2 * hidden
    fdw, wdw, ho, wo = _conv(hidden, h, w, hidden, 3, stride, 1, hidden)
    fp, wp, _, _ = _conv(hidden, ho, wo, x.out, 1, 1, 0, 1)
    return flops + fdw + fp, params + wdw + 2 * hidden + wp + 2 * x.out, (x.out, ho, wo)


def expand(spec: DnnSpec) -> list[tuple[DnnLayer, int]]:
    """Chain nodes with ``repeat`` unrolled: (layer renamed name1, name2, ..., the stride it runs with)."""
    nodes: list[tuple[DnnLayer, int]] = []
    for x in spec.layers:
        for i in range(x.repeat):
            name = f"{x.name}{i + 1}" if x.repeat > 1 else x.name
            nodes.append((x.model_copy(update={"name": name, "repeat": 1}), x.s if i == 0 else 1))
    return nodes


def layer_table(spec: DnnSpec) -> LayerTable:
    """Derive every node's FLOPs, parameters and output from the architecture; shapes propagate."""
    act = BYTES_PER_DTYPE[spec.activation_dtype]
    shape: Shape = tuple(spec.input_shape)
    rows: list[LayerCost] = []
    for x, stride in expand(spec):
        try:
            flops, params, shape = _node(x, shape, stride)
        except ValueError as e:
            raise ValueError(f"{spec.name}: {x.name}: {e}") from None
        rows.append(
            LayerCost(
                name=x.name, op=x.op, flops=flops, params=params, out_shape=shape, out_bytes=int(math.prod(shape) * act)
            )
        )
    in_bytes = math.prod(spec.input_shape) * (1 if spec.input_dtype == "uint8" else 4)
    return LayerTable(
        model=spec.name,
        input_shape=tuple(spec.input_shape),
        input_bytes=in_bytes,
        activation_dtype=spec.activation_dtype,
        layers=rows,
    )
