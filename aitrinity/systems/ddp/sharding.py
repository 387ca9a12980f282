"""Measure what DDP, ZeroRedundancyOptimizer and FSDP2 keep per rank and send per step (run inside a worker).

A reference decoder (``systems.torch_models.Decoder``, fp32, Adam) takes two
training steps under each sharding; after them each rank reports the bytes of
its local weights, gradients and optimizer moments (DTensor shards as their
local tensors; Adam's scalar step counters left out). When the ranks run in a
private network namespace (``launch.run_workers(link=...)``), the loopback's
transmit counter around the second step, minus what a bare barrier sends,
is the step's bytes on the wire from all ranks (TCP/IP headers included).
Predictions: ``cost.sharding``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from aitrinity.spec.model import ModelSpec
from aitrinity.systems.torch_models import Decoder

KINDS = ("ddp", "zero1", "fsdp2")


def _lo_tx() -> int:
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            return int(rest.split()[8])
    raise OSError("no loopback in /proc/net/dev")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _nbytes(ts: Sequence[torch.Tensor]) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in ts)


def _wrap(kind: str, model: Decoder) -> tuple[nn.Module, Any, dict[Any, Any]]:
    if kind == "ddp":
        opt = torch.optim.Adam(model.parameters())
        return nn.parallel.DistributedDataParallel(model), opt, opt.state
    if kind == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        zopt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam)
        return nn.parallel.DistributedDataParallel(model), zopt, zopt.optim.state
    if kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for blk in model.blocks:
            fully_shard(blk)
        fully_shard(model)
        opt = torch.optim.Adam(model.parameters())
        return model, opt, opt.state
    raise ValueError(kind)


def measure(kind: str, spec: dict[str, Any], batch: int, seq: int, rank: int) -> dict[str, Any]:
    m = ModelSpec(**spec)
    torch.manual_seed(0)
    model = Decoder(m)
    shapes = [list(p.shape) for p in model.parameters()]
    in_blocks = {id(p) for p in model.blocks.parameters()}
    root_shapes = [list(p.shape) for p in model.parameters() if id(p) not in in_blocks]
    wrapped, opt, opt_state = _wrap(kind, model)
    ids = torch.randint(0, m.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(rank))

    def step() -> None:
        opt.zero_grad(set_to_none=False)
        logits = wrapped(ids)
        nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1)).backward()
        opt.step()

    step()
    dist.barrier()
    t0 = _lo_tx()
    dist.barrier()
    barrier = _lo_tx() - t0
    # read the counter before a barrier: no rank can start the step (FSDP2 all-gathers at once) before it is read,
    # however late this process is scheduled; the two barriers around the step are subtracted
    t1 = _lo_tx()
    dist.barrier()
    step()
    dist.barrier()
    wire = _lo_tx() - t1 - 2 * barrier
    moments = [v for st in opt_state.values() for v in st.values() if torch.is_tensor(v) and v.numel() > 1]
    params = list(model.parameters())
    return {
        "kind": kind,
        "rank": rank,
        "shapes": shapes,
        "root_shapes": root_shapes,
        "weights": _nbytes(params),
        "gradients": _nbytes([p.grad for p in params if p.grad is not None]),
        "optimizer": _nbytes(moments),
        "lo_tx_step": wire,
    }


def run(cfg: dict[str, Any], rank: int) -> list[dict[str, Any]]:
    return [measure(k, cfg["model"], cfg.get("batch", 2), cfg.get("seq", 64), rank) for k in cfg.get("kinds", KINDS)]
