"""The digits camera: scikit-learn's bundled 8x8 digits as 64x64 uint8 frames, and a CNN trained on them here.

Frames: the 0..16 grey levels scaled to 0..255 and each pixel repeated 8x8
(nearest-neighbour upsampling). The first 75% of a seeded permutation train
(1,347 images), the rest test (450). Accuracy per split x codec runs the test
set through the real codecs at the split: device nodes, encode, decode,
server nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from aitrinity import catalog
from aitrinity.cost.dnn import LayerTable, layer_table
from aitrinity.systems.split import codecs
from aitrinity.systems.split.torch_dnn import build, run

DNN = "digits-cnn"


def frames(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train frames, train labels, test frames, test labels); frames are uint8 (n, 1, 64, 64)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    img = np.rint(d.images * (255 / 16)).astype(np.uint8)
    big = np.kron(img, np.ones((1, 8, 8), np.uint8))[:, None]
    order = np.random.default_rng(seed).permutation(len(big))
    cut = int(0.75 * len(big))
    tr, te = order[:cut], order[cut:]
    return big[tr], d.target[tr], big[te], d.target[te]


def to_input(frames_u8: np.ndarray) -> torch.Tensor:
    """The device's (and, for a raw offload, the server's) first step: uint8 frame -> float in [0, 1]."""
    return torch.from_numpy(frames_u8.astype(np.float32) / 255.0)


def model(seed: int = 0) -> tuple[LayerTable, nn.ModuleList]:
    spec = catalog.dnn(DNN)
    table = layer_table(spec)
    torch.manual_seed(seed)
    shapes = [spec.input_shape, *(x.out_shape for x in table.layers[:-1])]
    return table, build(spec, shapes)


def train(epochs: int = 12, seed: int = 0, batch: int = 64, lr: float = 3e-3) -> tuple[LayerTable, nn.ModuleList]:
    """Train the digits CNN (Adam, cross-entropy) on the training frames; deterministic for a seed."""
    table, nodes = model(seed)
    xtr, ytr, _, _ = frames(seed)
    x, y = to_input(xtr), torch.from_numpy(ytr).long()
    opt = torch.optim.Adam(nodes.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    nodes.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), batch):
            idx = perm[i : i + batch]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(run(nodes, x[idx]), y[idx])
            loss.backward()
            opt.step()
    return table, nodes.eval()


def accuracy(nodes: nn.ModuleList, x_u8: np.ndarray, y: np.ndarray, split: int, codec: str) -> float:
    """Top-1 accuracy with the tensor after node ``split - 1`` sent through ``codec`` (0: the raw frame)."""
    with torch.no_grad():
        correct = 0
        for frame, label in zip(x_u8, y, strict=True):
            if split == 0:
                t = torch.from_numpy(codecs.decode(codecs.encode(frame, "raw"), "raw", frame.shape).copy())
                h = to_input(t.numpy()[None])
            else:
                h = run(nodes, to_input(frame[None]), 0, split)
                if split < len(nodes):
                    a = h[0].numpy()
                    h = torch.from_numpy(codecs.decode(codecs.encode(a, codec), codec, a.shape).copy())[None]
            out = run(nodes, h, split) if split < len(nodes) else h
            correct += int(out.argmax(1).item() == int(label))
    return correct / len(y)


def accuracy_table(
    nodes: nn.ModuleList, x_u8: np.ndarray, y: np.ndarray, codec_names: Sequence[str] = ("fp32", "fp16", "int8", "int4")
) -> dict[str, float]:
    """Accuracy per ``split:codec`` for every split (``0:raw`` and ``N:local`` included)."""
    n = len(nodes)
    out = {"0:raw": accuracy(nodes, x_u8, y, 0, "raw"), f"{n}:local": accuracy(nodes, x_u8, y, n, "local")}
    for k in range(1, n):
        for c in codec_names:
            out[f"{k}:{c}"] = accuracy(nodes, x_u8, y, k, c)
    return out


def save(nodes: nn.ModuleList, path: str | Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in nodes.state_dict().items()}, str(path))


def load(path: str | Path) -> tuple[LayerTable, nn.ModuleList]:
    from safetensors.torch import load_file

    table, nodes = model()
    nodes.load_state_dict(load_file(str(path)))
    return table, nodes.eval()
