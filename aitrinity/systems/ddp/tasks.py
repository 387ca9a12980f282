"""Training data and models for the data-parallel runs: scikit-learn's bundled digits, or a generated task.

``digits``: the 1,797 8x8 handwritten digits scikit-learn ships (no download),
scaled to [0, 1], a fixed 80/20 split. ``generated``: a harder 20-class
problem made offline from a seed -- 4 Gaussian clusters per class in 32
dimensions, overlapping, pushed through a fixed random tanh layer -- on which a
broken compressor loses accuracy visibly. Both are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

TASKS = ("digits", "generated")


@dataclass(frozen=True)
class Task:
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int

    @property
    def features(self) -> int:
        return int(self.x_train.shape[1])


def _split(x: np.ndarray, y: np.ndarray, name: str, classes: int, seed: int) -> Task:
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    t = lambda a, dt: torch.as_tensor(np.ascontiguousarray(a), dtype=dt)  # noqa: E731
    return Task(
        name,
        t(x[:cut], torch.float32),
        t(y[:cut], torch.int64),
        t(x[cut:], torch.float32),
        t(y[cut:], torch.int64),
        classes,
    )


def load(name: str) -> Task:
    if name == "digits":
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise RuntimeError(
                "the digits task needs scikit-learn (pip install scikit-learn); try 'generated'"
            ) from None
        d = load_digits()
        return _split(d.data / 16.0, d.target, "digits", 10, 0)
    if name == "generated":
        rng = np.random.default_rng(1234)
        classes, per, dim, n = 20, 4, 32, 6000
        centers = rng.normal(0, 1.0, (classes * per, dim))
        label = rng.integers(0, classes * per, n)
        x = centers[label] + rng.normal(0, 0.9, (n, dim))
        w = rng.normal(0, 1 / np.sqrt(dim), (dim, dim))
        return _split(np.tanh(x @ w) + 0.1 * x, label // per, "generated", classes, 0)
    raise ValueError(f"unknown task {name!r}: expected one of {', '.join(TASKS)}")


def mlp(features: int, classes: int, hidden: int = 256, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)
    )


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((model(x).argmax(dim=1) == y).float().mean())
