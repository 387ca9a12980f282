"""Exact eviction order of every policy, pins, readers and refusals."""

import pytest

from aitrinity.cost.block_index import BlockIndex, Full


def fill(ix: BlockIndex, keys, size=1, flops=None):
    out = []
    for i, k in enumerate(keys):
        out += [v for v, _ in ix.insert(k, size, flops[i] if flops else 0.0)]
    return out


def test_lru_order_and_eviction():
    ix = BlockIndex(3, "lru")
    fill(ix, "abc")
    ix.touch("a")
    assert ix.eviction_order() == ["b", "c", "a"]
    assert fill(ix, "d") == ["b"]
    assert ix.eviction_order() == ["c", "a", "d"]
    assert ix.used_bytes == 3 and ix.evictions == 1


def test_lfu_fewest_hits_first_ties_least_recent():
    ix = BlockIndex(3, "lfu")
    fill(ix, "abc")
    ix.touch("a")
    ix.touch("a")
    ix.touch("c")
    # b: 1 use, c: 2, a: 3
    assert ix.eviction_order() == ["b", "c", "a"]
    assert fill(ix, "d") == ["b"]
    # d has 1 use (newest), c 2, a 3
    assert fill(ix, "e") == ["d"]


def test_cost_aware_keeps_most_flops_saved_per_byte():
    ix = BlockIndex(30, "cost")
    # x: 100 FLOP / 10 B = 10; y: 500 / 10 = 50; z: 20 / 10 = 2
    fill(ix, "xyz", size=10, flops=[100, 500, 20])
    assert ix.eviction_order() == ["z", "x", "y"]
    assert fill(ix, "w", size=10, flops=[300]) == ["z"]
    # inflation L = 2 now: w = 2 + 30 = 32 > x = 10, so x goes next
    assert ix.eviction_order() == ["x", "w", "y"]
    ix.touch("x")  # x: L + 2 * 10 = 22, still below w
    assert ix.eviction_order()[0] == "x"
    for _ in range(3):
        ix.touch("x")  # x: 2 + 5 * 10 = 52
    assert ix.eviction_order() == ["w", "y", "x"]


@pytest.mark.parametrize("policy", ["lru", "lfu", "cost"])
def test_a_large_block_evicts_several_in_eviction_order(policy):
    ix = BlockIndex(10, policy)
    fill(ix, "abcde", size=2, flops=[50, 10, 40, 20, 30])
    ix.touch("a")
    ix.touch("d")
    order = ix.eviction_order()
    assert fill(ix, "f", size=5) == order[:3]  # 3 blocks free 6 >= 5 bytes
    assert ix.used_bytes == 9 and ix.evictions == 3 and set(ix) == {*order[3:], "f"}


@pytest.mark.parametrize("policy", ["lru", "lfu", "cost"])
def test_pins_and_readers_are_respected(policy):
    ix = BlockIndex(3, policy)
    fill(ix, "abc")
    ix.pin("a")
    ix.pin("b", soft=True)
    ix.acquire("c")
    # a hard-pinned, c being read: only the soft-pinned b may go
    assert fill(ix, "d") == ["b"]
    ix.release("c")
    assert fill(ix, "e") in (["c"], ["d"])
    ix.acquire(ix.eviction_order()[-1])
    for k in ix:
        if k != "a":
            ix.pin(k)
    used = ix.used_bytes
    with pytest.raises(Full):
        ix.insert("f", 1)
    assert ix.used_bytes == used and "f" not in ix  # a refused insert changes nothing


def test_soft_pins_go_last_and_unpin():
    ix = BlockIndex(2, "lru")
    fill(ix, "ab")
    ix.pin("a", soft=True)
    assert fill(ix, "c") == ["b"]
    ix.unpin("a")
    assert fill(ix, "d") == ["a"]


def test_oversized_block_and_release_without_acquire():
    ix = BlockIndex(4)
    with pytest.raises(Full):
        ix.insert("big", 5)
    ix.insert("a", 1)
    with pytest.raises(ValueError):
        ix.release("a")
    with pytest.raises(ValueError):
        BlockIndex(10, "fifo")


def test_prefix_and_remove():
    ix = BlockIndex(None)
    fill(ix, [1, 2, 3])
    assert ix.prefix([1, 2, 9, 3]) == 2
    ix.pin(2)
    assert ix.remove(2).size_bytes == 1 and ix.prefix([1, 2]) == 1
    assert ix.remove(2) is None
