"""Exact per-rank bytes of data-parallel sharding as PyTorch implements it (pure).

``cost.memory.model_states`` is the ZeRO paper's ideal: stage 1 divides the
optimizer states by ``n``, stage 3 also weights and gradients. PyTorch's
implementations differ from the ideal in ways that are exact and documented
here, so predictions match measurements without loosening a test:

- ``ZeroRedundancyOptimizer`` (ZeRO-1) gives whole parameters to ranks, largest
  first, each to the rank holding the fewest elements so far (its
  ``_partition_parameters``): a rank's optimizer share is its partition, not
  ``1/n``. After the step each rank broadcasts its partition's updated
  parameters: ``(n-1)`` times its partition's bytes on top of DDP's all-reduce.
- FSDP2 (``fully_shard``) splits every parameter along dim 0 into ``ceil(d0/n)``
  rows per rank (the last ranks may get fewer, or none): weights, gradients and
  optimizer states of a rank follow its rows. Per step it all-gathers each
  group's weights (padded to ``n·ceil(d0/n)`` rows) for forward and, except the
  root group's, which it does not reshard after forward, again for backward;
  and it reduce-scatters the gradients.

Bytes on the wire per rank for one step, ``S`` = bytes of all gradients
(``cost.collectives``): DDP ``2(n-1)/n·S``; ZeRO-1 that plus its broadcast;
FSDP2 ``(n-1)/n·(2W - W_root) + f_rs·(n-1)/n·W`` (padded), where ``f_rs`` is the backend's
reduce-scatter factor: 1 for NCCL's ring, 2 for gloo -- measured on the wire
(``tests/systems/ddp/test_sharding.py``): gloo's reduce-scatter sends as much
as an all-reduce.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

REDUCE_SCATTER_FACTOR = {"nccl": 1.0, "gloo": 2.0}
"""Bytes a backend's reduce-scatter sends relative to the ideal ``(n-1)/n·S``."""


def zero_partition(sizes: Sequence[int], world: int) -> list[list[int]]:
    """Parameter indices per rank, as ``ZeroRedundancyOptimizer`` assigns them."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)  # stable: ties keep model order
    load = [0] * world
    out: list[list[int]] = [[] for _ in range(world)]
    for i in order:
        r = load.index(min(load))
        out[r].append(i)
        load[r] += sizes[i]
    return out


def fsdp2_rows(d0: int, world: int, rank: int) -> int:
    """Rows of a dim-0 size ``d0`` parameter that FSDP2 leaves on ``rank``."""
    c = math.ceil(d0 / world)
    return max(0, min(d0, (rank + 1) * c) - rank * c)


def fsdp2_local_numel(shape: Sequence[int], world: int, rank: int) -> int:
    rest = math.prod(shape[1:]) if len(shape) > 1 else 1
    return fsdp2_rows(shape[0], world, rank) * rest


@dataclass(frozen=True)
class RankStates:
    """Bytes one rank holds: weights, gradients, optimizer states."""

    weights: int
    gradients: int
    optimizer: int


def rank_states(
    kind: str,
    shapes: Sequence[Sequence[int]],
    world: int,
    rank: int,
    *,
    bytes_per: int = 4,
    optimizer_per_param: int = 8,
) -> RankStates:
    """``kind``: ddp, zero1 (ZeroRedundancyOptimizer) or fsdp2; Adam's two fp32 moments by default."""
    sizes = [math.prod(s) for s in shapes]
    total = sum(sizes)
    if kind == "ddp":
        return RankStates(total * bytes_per, total * bytes_per, total * optimizer_per_param)
    if kind == "zero1":
        mine = sum(sizes[i] for i in zero_partition(sizes, world)[rank])
        return RankStates(total * bytes_per, total * bytes_per, mine * optimizer_per_param)
    if kind == "fsdp2":
        local = sum(fsdp2_local_numel(s, world, rank) for s in shapes)
        return RankStates(local * bytes_per, local * bytes_per, local * optimizer_per_param)
    raise ValueError(f"unknown sharding {kind!r}: expected ddp, zero1 or fsdp2")


def _padded(shapes: Sequence[Sequence[int]], world: int) -> int:
    return sum(math.ceil(s[0] / world) * world * (math.prod(s[1:]) if len(s) > 1 else 1) for s in shapes)


def wire_bytes(
    kind: str,
    shapes: Sequence[Sequence[int]],
    world: int,
    rank: int,
    *,
    backend: str = "gloo",
    bytes_per: int = 4,
    root_shapes: Sequence[Sequence[int]] = (),
) -> float:
    """Bytes ``rank`` sends for one training step (see the module docstring); ``root_shapes``: FSDP2's
    root-group parameters (among ``shapes``), not resharded after forward."""
    sizes = [math.prod(s) for s in shapes]
    s_bytes = sum(sizes) * bytes_per
    share = (world - 1) / world
    if kind == "ddp":
        return 2 * share * s_bytes
    if kind == "zero1":
        mine = sum(sizes[i] for i in zero_partition(sizes, world)[rank]) * bytes_per
        return 2 * share * s_bytes + (world - 1) * mine
    if kind == "fsdp2":
        w = _padded(shapes, world) * bytes_per
        w_root = _padded(root_shapes, world) * bytes_per
        return share * (2 * w - w_root) + REDUCE_SCATTER_FACTOR[backend] * share * w
    raise ValueError(f"unknown sharding {kind!r}")
