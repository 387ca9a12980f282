"""Torch modules from a :class:`~aitrinity.spec.edge.DnnSpec`: one ``nn.Module`` a chain node, random weights.

The same architecture the cost model derives its layer table from, built for
real, so per-node FLOPs (``FlopCounterMode``), parameters and output bytes can
be measured against the prediction, and a split model can run nodes ``0..k-1``
in one process and ``k..N-1`` in another.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from aitrinity.cost.dnn import expand
from aitrinity.spec.edge import DnnLayer, DnnSpec


def _act(kind: str) -> list[nn.Module]:
    if kind == "relu":
        return [nn.ReLU(inplace=True)]
    return [nn.ReLU6(inplace=True)] if kind == "relu6" else []


def _conv_bn(c: int, out: int, k: int, s: int, p: int, groups: int = 1, act: str = "none") -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c, out, k, s, p, groups=groups, bias=False), nn.BatchNorm2d(out), *_act(act))


class Bottleneck(nn.Module):
    def __init__(self, c: int, out: int, stride: int) -> None:
        super().__init__()
        w = out // 4
        self.body = nn.Sequential(
            _conv_bn(c, w, 1, 1, 0, act="relu"), _conv_bn(w, w, 3, stride, 1, act="relu"), _conv_bn(w, out, 1, 1, 0)
        )
        self.short = _conv_bn(c, out, 1, stride, 0) if stride != 1 or c != out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.short(x))


class InvertedResidual(nn.Module):
    def __init__(self, c: int, out: int, stride: int, expand_by: int) -> None:
        super().__init__()
        h = c * expand_by
        layers: list[nn.Module] = [] if expand_by == 1 else [_conv_bn(c, h, 1, 1, 0, act="relu6")]
        layers += [_conv_bn(h, h, 3, stride, 1, groups=h, act="relu6"), _conv_bn(h, out, 1, 1, 0)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c == out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


def _node(x: DnnLayer, stride: int, shape: Sequence[int]) -> nn.Module:
    c = shape[0]
    if x.op == "linear":
        assert x.out is not None
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), x.out, bias=x.bias), *_act(x.act))
    if x.op == "maxpool":
        return nn.MaxPool2d(x.k, stride, x.p)
    if x.op == "avgpool":
        return nn.AvgPool2d(x.k, stride, x.p)
    if x.op == "global-avgpool":
        return nn.AdaptiveAvgPool2d(1)
    assert x.out is not None
    if x.op == "conv":
        if x.bn:
            return _conv_bn(c, x.out, x.k, stride, x.p, x.groups, x.act)
        return nn.Sequential(nn.Conv2d(c, x.out, x.k, stride, x.p, groups=x.groups, bias=x.bias), *_act(x.act))
    if x.op == "bottleneck":
        return Bottleneck(c, x.out, stride)
    return InvertedResidual(c, x.out, stride, x.expand)


def build(spec: DnnSpec, shapes: Sequence[Sequence[int]]) -> nn.ModuleList:
    """One module a node; ``shapes[i]`` is node i's input shape (from the layer table), which the
    linear layers need for their input width."""
    nodes = expand(spec)
    if len(shapes) != len(nodes):
        raise ValueError(f"{len(shapes)} input shapes for {len(nodes)} nodes")
    return nn.ModuleList(_node(x, s, shape) for (x, s), shape in zip(nodes, shapes, strict=True))


def run(nodes: nn.ModuleList, x: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """Nodes ``start..stop-1`` on ``x`` (a batch)."""
    for m in list(nodes)[start:stop]:
        x = m(x)
    return x
