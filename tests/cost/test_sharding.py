"""The exact per-rank sharding bytes agree with the core model's ZeRO ideal wherever PyTorch is ideal."""

import math

import pytest

from aitrinity.cost import sharding as cs
from aitrinity.cost.memory import model_states
from aitrinity.spec.scenario import Plan

SHAPES = [[512, 256], [256], [256, 512], [1024, 256], [256, 1024], [256]]  # every dim 0 divisible by 2 and 4


@pytest.mark.parametrize("kind, zero", [("ddp", 0), ("fsdp2", 3)])
@pytest.mark.parametrize("world", [2, 4])
def test_exact_equals_the_zero_paper_when_shards_divide(kind, zero, world):
    params = sum(math.prod(s) for s in SHAPES)
    ideal = model_states(params, Plan(zero=zero, compute_dtype="fp32", master_weights=False), world)
    for rank in range(world):
        got = cs.rank_states(kind, SHAPES, world, rank)
        assert (got.weights, got.gradients, got.optimizer) == (ideal.weights, ideal.gradients, ideal.optimizer)


def test_zero1_partition_is_greedy_largest_first():
    sizes = [100, 60, 50, 40, 10]
    # 100 -> r0; 60 -> r1; 50 -> r1 (60 < 100); 40 -> r0 (100 < 110); 10 -> r1 (110 < 140)
    assert cs.zero_partition(sizes, 2) == [[0, 3], [1, 2, 4]]
    assert sum(cs.rank_states("zero1", [[s] for s in sizes], 2, r).optimizer for r in (0, 1)) == 8 * sum(sizes)


def test_fsdp2_rows_and_padding():
    assert [cs.fsdp2_rows(10, 4, r) for r in range(4)] == [3, 3, 3, 1]
    assert [cs.fsdp2_rows(2, 4, r) for r in range(4)] == [1, 1, 0, 0]
    # gloo's reduce-scatter counts twice; NCCL's once
    shapes = [[8, 4]]
    gloo = cs.wire_bytes("fsdp2", shapes, 2, 0, backend="gloo")
    nccl = cs.wire_bytes("fsdp2", shapes, 2, 0, backend="nccl")
    assert gloo - nccl == 0.5 * 32 * 4
