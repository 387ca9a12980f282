"""The KV-cache store against its physical references, each measured in the same run (issue 4).

- memory tier put (at capacity: each put evicts) / get(+copy out) for 64 KiB-32 MiB blocks vs ``memcpy`` (numpy copyto
  into a warm buffer); goal >= 50%. Also put vs the same copy cycling through the 5 buffers a 4-block tier at
  capacity writes into, and put while filling (fresh pages) vs a copy into a new buffer.
- disk tier read (read + checksum) vs a plain sequential read of the same file (page cache warm for both); goal >= 50%
- Redis tier get / put vs ``redis-benchmark`` (1 client, no pipelining, same value size); goal >= 50%
- block-index lookups per second with 100k cached blocks; goal >= 1M blocks/s
- the floor (``floor``): a put cut to its bare minimum in Python against its copy at 64 KiB, the copy into a frame's
  payload offset and between 4K-aliased buffers, and an index insert at capacity by policy
- CPU time-to-first-token with vs without reuse, tiny Llama (transformers), 90% shared prefix; goal >= 5x lower
- TTFT against the share of the prompt reused (0-90%, memory tier): measured TTFT / no-reuse TTFT next to the
  prefill compute left by the cost model (``cost.kv_reuse.prefill_flops``, with a causal kernel and with the
  masked kernel transformers runs after a loaded prefix), and the TTFT when the load-vs-recompute decision is
  asked first

    python benchmarks/bench_kvcache.py [--quick] [--json] [--skip redis,ttft]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import NDArray

from aitrinity.cost.block_index import BlockIndex
from aitrinity.systems.kvcache import BlockKeys, DiskTier, Keyer, KVStore, MemoryTier, RedisTier, TierConfig, frame

MiB = 2**20
KiB64 = 64 * 1024


def best(fn: Callable[[], object], repeat: int, loop_s: float = 0.05) -> float:
    """Time per call: the best of ``repeat`` loops, each ~``loop_s`` long (after a warm-up)."""
    fn()
    t = time.perf_counter()
    fn()
    n = max(1, int(loop_s / max(time.perf_counter() - t, 1e-7)))
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t) / n)
    return min(times)


def keys(n: int, salt: str = "bench") -> list[bytes]:
    k = Keyer.of(salt, block_tokens=1)
    return k.keys(list(range(n))).keys


def page_aligned(size: int, fill: int | None = None) -> NDArray[np.uint8]:
    """``size`` bytes starting on a page boundary. Two buffers of under 128 KiB from ``malloc`` sit next to each other
    a few bytes apart modulo 4 KiB, and a copy between them stalls on 4K aliasing (each load waits on a store to an
    address that matches in its low 12 bits): measured here, 28-37 us for a 64 KiB copy that takes 2.1-2.5 us
    between aligned buffers. The reference copy must not be the slow case."""
    raw = np.empty(size + 4096, dtype=np.uint8)
    start = -raw.ctypes.data % 4096
    out = raw[start : start + size]
    if fill is not None:
        out[:] = fill
    return out


def _memory_row(size: int, repeat: int) -> dict[str, float]:
    src = page_aligned(size)
    src[:] = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    dst = page_aligned(size, 0)
    memcpy = size / best(lambda: np.copyto(dst, src), repeat)
    # the same copy into the buffers a 4-block tier at capacity cycles through (4 resident + the one being
    # written): a cache always writes into its coldest buffer, which the one-buffer memcpy never does
    ring = [page_aligned(size, 1) for _ in range(5)]
    turn = iter(range(10**9))
    memcpy_ring = size / best(lambda: np.copyto(ring[next(turn) % 5], src), repeat)
    kept: list[np.ndarray] = []
    fresh_copy = size / best(lambda: kept.append(np.array(src, copy=True)), repeat)  # new pages each time
    kept.clear()
    # a tier at capacity (the steady state of a cache): every put evicts one block
    store = KVStore([TierConfig(MemoryTier(), 4 * (size + 64))])
    it = iter(keys(100_000))
    put = size / best(lambda: store.put(next(it), src.data), repeat)
    filling = KVStore([TierConfig(MemoryTier(), None)])
    put_fill = size / best(lambda: filling.put(next(it), src.data), repeat)
    one = BlockKeys(store.index[0].eviction_order()[-1:], [b""], 1)  # type: ignore[arg-type]

    def get_copy() -> None:
        got = store.fetch(one)
        np.copyto(dst, np.frombuffer(got.payloads[0], dtype=np.uint8))

    get = size / best(get_copy, repeat)
    return {
        "block_MiB": size / MiB,
        "memcpy_GBps": memcpy / 1e9,
        "put_GBps": put / 1e9,
        "get_copy_GBps": get / 1e9,
        "put_vs_memcpy": put / memcpy,
        "memcpy_ring_GBps": memcpy_ring / 1e9,
        "put_vs_memcpy_ring": put / memcpy_ring,
        "get_vs_memcpy": get / memcpy,
        "fresh_copy_GBps": fresh_copy / 1e9,
        "put_filling_GBps": put_fill / 1e9,
        "put_filling_vs_fresh_copy": put_fill / fresh_copy,
    }


def memory_tier(sizes: list[int], repeat: int) -> list[dict[str, float]]:
    return [_memory_row(size, repeat) for size in sizes]


def _disk_row(d: str, size: int, repeat: int) -> dict[str, float]:
    payload = os.urandom(size)
    k = Keyer.of("bench", block_tokens=1)
    tier = DiskTier(d, k.namespace, fsync=False)
    store = KVStore([TierConfig(tier, None)])
    bk = k.keys([size % 1000])
    store.put_blocks(bk, [payload])
    path = tier.dir / (bk.keys[0].hex() + DiskTier.SUFFIX)

    def plain() -> None:
        with open(path, "rb", buffering=0) as f:
            buf = bytearray(os.fstat(f.fileno()).st_size)
            f.readinto(buf)

    ref = size / best(plain, repeat)
    ours = size / best(lambda: store.fetch(bk), repeat)
    return {
        "block_MiB": size / MiB,
        "sequential_read_GBps": ref / 1e9,
        "get_GBps": ours / 1e9,
        "get_vs_read": ours / ref,
    }


def disk_tier(sizes: list[int], repeat: int) -> list[dict[str, float]]:
    with tempfile.TemporaryDirectory() as d:
        return [_disk_row(d, size, repeat) for size in sizes]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_tier(sizes: list[int], requests: int) -> list[dict[str, float]] | str:
    exe, bench = shutil.which("redis-server"), shutil.which("redis-benchmark")
    if not exe or not bench:
        return "skipped: redis-server / redis-benchmark not installed"
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        rows = []
        for size in sizes:
            out = subprocess.run(
                [
                    bench,
                    "-p",
                    str(port),
                    "-t",
                    "set,get",
                    "-d",
                    str(size),
                    "-n",
                    str(requests),
                    "-c",
                    "1",
                    "-P",
                    "1",
                    "-q",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            rps = {m.group(1).lower(): float(m.group(2)) for m in re.finditer(r"(SET|GET): ([\d.]+) requests", out)}
            # a tier at capacity (8 blocks): each put SETs one block and DELs the evicted one, so the server
            # reuses memory as redis-benchmark's single key does
            k = Keyer.of(f"bench-{size}", block_tokens=1)
            tier = RedisTier(f"redis://127.0.0.1:{port}/0", k.namespace, timeout_s=10)
            store = KVStore([TierConfig(tier, 8 * (size + 64))])
            payload = os.urandom(size)
            ks = keys(2 * requests, f"bench-{size}")
            for key in ks[:requests]:  # warm-up pass
                assert store.put(key, payload)
            t = time.perf_counter()
            for key in ks[requests:]:
                assert store.put(key, payload)
            put = requests * size / (time.perf_counter() - t)
            resident = [BlockKeys([key], [key], 1) for key in ks[-8:]]
            t = time.perf_counter()
            for i in range(requests):
                assert store.fetch(resident[i % 8]).blocks == 1
            get = requests * size / (time.perf_counter() - t)
            ref_set, ref_get = rps["set"] * size, rps["get"] * size
            rows.append(
                {
                    "value_MiB": size / MiB,
                    "redis_benchmark_set_GBps": ref_set / 1e9,
                    "redis_benchmark_get_GBps": ref_get / 1e9,
                    "put_GBps": put / 1e9,
                    "get_GBps": get / 1e9,
                    "put_vs_benchmark": put / ref_set,
                    "get_vs_benchmark": get / ref_get,
                }
            )
        return rows
    finally:
        proc.kill()
        proc.wait()


def put_floor(repeat: int, size: int = KiB64) -> dict[str, float]:
    """What a put could cost in Python at all, against its copy: a put cut to its bare minimum (a spare buffer, the
    header packed in place, one ``memoryview`` copy, an ``OrderedDict`` insert and LRU ``popitem``, the evicted
    buffer kept; no pins, tiers, content index or eviction log); the same copy to a payload 40 bytes into its frame
    (where a frame's payload lands) and between two ``malloc``-adjacent buffers (4K aliasing, the old reference);
    and an index insert at capacity by policy. Microseconds."""
    src = page_aligned(size, 7)
    header = frame.HEADER
    spare: list[bytearray] = []
    order: OrderedDict[bytes, None] = OrderedDict()
    held: dict[bytes, bytearray] = {}

    def bare_put(key: bytes) -> None:
        mv = src.data
        buf = spare.pop() if spare else bytearray(size + frame.HEADER_BYTES)
        header.pack_into(buf, 0, frame.MAGIC, frame.VERSION, 0, 0, key, size, 0)
        memoryview(buf)[frame.HEADER_BYTES :] = mv
        if len(order) >= 4:
            old, _ = order.popitem(last=False)
            spare.append(held.pop(old))
        order[key] = None
        held[key] = buf

    it = iter(keys(300_000, "floor"))
    out = {"bare_put_us": best(lambda: bare_put(next(it)), repeat) * 1e6}
    frame_buf = bytearray(size + frame.HEADER_BYTES)
    payload = memoryview(frame_buf)[frame.HEADER_BYTES :]

    def copy_into_frame() -> None:
        payload[:] = src.data

    out["copy_into_frame_us"] = best(copy_into_frame, repeat) * 1e6
    dst = page_aligned(size, 0)
    out["copy_aligned_us"] = best(lambda: np.copyto(dst, src), repeat) * 1e6
    raw = np.empty(2 * size + 8192 + 16, dtype=np.uint8)  # dst 16 bytes past src modulo 4 KiB
    a = -raw.ctypes.data % 4096
    near_src, near_dst = raw[a : a + size], raw[a + size + 4096 + 16 : a + 2 * size + 4096 + 16]
    out["copy_4k_aliased_us"] = best(lambda: np.copyto(near_dst, near_src), repeat) * 1e6
    for policy in ("lru", "lfu", "cost"):
        ix = BlockIndex(4 * size, policy)
        kit = iter(keys(300_000, policy))

        def insert(ix: BlockIndex = ix, kit: Iterator[bytes] = kit) -> None:
            ix.insert(next(kit), size)

        out[f"index_insert_{policy}_us"] = best(insert, repeat) * 1e6
    return out


def index_lookups(blocks: int = 100_000, prompt_blocks: int = 64) -> dict[str, float]:
    ix = BlockIndex(None)
    ks = keys(blocks)
    for k in ks:
        ix.insert(k, 1)
    prompts = [ks[i : i + prompt_blocks] for i in range(0, blocks - prompt_blocks, prompt_blocks)]
    t = time.perf_counter()
    n = sum(ix.prefix(p) for p in prompts)
    index_rate = n / (time.perf_counter() - t)
    store = KVStore([TierConfig(MemoryTier(), None)])
    for k in ks:
        store.put(k, b"x")
    bks = [BlockKeys(p, p, 1) for p in prompts]
    t = time.perf_counter()
    n = sum(store.lookup(bk).blocks for bk in bks)
    store_rate = n / (time.perf_counter() - t)
    return {
        "cached_blocks": blocks,
        "index_prefix_blocks_per_s": index_rate,
        "store_lookup_blocks_per_s": store_rate,
        "store_blocks": sum(len(ix) for ix in store.index),
    }


def ttft(prompt_tokens: int, shared: float, repeat: int) -> dict[str, float] | str:
    try:
        import torch

        from aitrinity.systems.kvcache.hf import PrefixCachedLM, keyer_for, tiny_llama
    except ImportError as e:
        return f"skipped: {e}"
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    model = tiny_llama()
    block = 256
    gen = torch.Generator().manual_seed(0)
    n_shared = int(prompt_tokens * shared) // block * block
    prefix = torch.randint(0, 2048, (n_shared,), generator=gen).tolist()
    prompts = [
        prefix + torch.randint(0, 2048, (prompt_tokens - n_shared,), generator=gen).tolist() for _ in range(repeat + 1)
    ]
    out: dict[str, float] = {"prompt_tokens": prompt_tokens, "shared_tokens": n_shared}
    with tempfile.TemporaryDirectory() as d:
        for name, tier in (("memory", MemoryTier()), ("disk", DiskTier(d, "ttft", fsync=False))):
            store = KVStore([TierConfig(tier, None)])
            lm = PrefixCachedLM(model, store, keyer_for(model, block_tokens=block))
            lm.generate(prompts[0], 1)  # stores the shared prefix (and warms the model up)
            cold, warm = [], []
            for p in prompts[1:]:  # alternated, so drifts of this VM's speed hit both alike
                cold.append(lm.generate(p, 1, reuse=False))
                warm.append(lm.generate(p, 1))
            assert all(w.reused_tokens == n_shared for w in warm)
            assert all(w.tokens == c.tokens for w, c in zip(warm, cold, strict=True))
            out[f"{name}_no_reuse_ttft_s"] = statistics.median(c.ttft_s for c in cold)
            out[f"{name}_reuse_ttft_s"] = statistics.median(w.ttft_s for w in warm)
            out[f"{name}_speedup"] = out[f"{name}_no_reuse_ttft_s"] / out[f"{name}_reuse_ttft_s"]
    return out


def ttft_sweep(prompt_tokens: int, shares: list[float], repeat: int) -> list[dict[str, float | str]] | str:
    """TTFT with the first ``share`` of the prompt reused from the memory tier, relative to no reuse.

    Next to it: the prefill compute left by the cost model with a causal kernel and with the kernel
    transformers' SDPA path really runs once a prefix is loaded (every score computed:
    ``prefill_flops(masked_past=True)``), and the TTFT when the load-vs-recompute decision is asked first
    (``ReuseCost(masked_past=True)``, FLOP/s calibrated from the no-reuse runs).
    """
    try:
        import torch

        from aitrinity.cost.kv_reuse import prefill_flops
        from aitrinity.systems.kvcache.decision import ReuseCost
        from aitrinity.systems.kvcache.hf import PrefixCachedLM, keyer_for, model_spec, tiny_llama
    except ImportError as e:
        return f"skipped: {e}"
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    model = tiny_llama()
    spec = model_spec(model)
    block = 256
    gen = torch.Generator().manual_seed(1)
    base = torch.randint(0, 2048, (prompt_tokens,), generator=gen).tolist()
    store = KVStore([TierConfig(MemoryTier(), None)])
    keyer = keyer_for(model, block_tokens=block)
    lm = PrefixCachedLM(model, store, keyer)
    lm.generate(base, 1)  # stores every full block of the base prompt; a prompt sharing L tokens hits L
    full = prefill_flops(spec, 0, prompt_tokens)
    prompts = {}  # reused tokens -> prompts sharing exactly that many leading tokens with the base
    for share in shares:
        shared = int(prompt_tokens * share) // block * block
        rand = [torch.randint(0, 2048, (prompt_tokens - shared,), generator=gen).tolist() for _ in range(2 * repeat)]
        prompts[shared] = [base[:shared] + r for r in rand]  # each is used once: a generation stores its blocks
    lm_head = 2.0 * spec.vocab_size * spec.hidden_size
    calib = statistics.median(lm.generate(p, 1, reuse=False).ttft_s for p in prompts[0][:repeat])
    decided = PrefixCachedLM(
        model, store, keyer, ReuseCost(spec, (full + lm_head) / calib, kv_dtype="fp32", masked_past=True)
    )
    rows: list[dict[str, float | str]] = []
    for shared, ps in prompts.items():
        cold, warm, chosen = [], [], []
        for a, b in zip(ps[:repeat], ps[repeat:], strict=True):  # interleaved: this VM's drifts hit all three
            cold.append(lm.generate(a, 1, reuse=False))
            warm.append(lm.generate(a, 1))  # stores a's blocks, so the decision runs on a fresh prompt b
            chosen.append(decided.generate(b, 1))
        assert all(w.reused_tokens == shared for w in warm), [w.reused_tokens for w in warm]
        assert all(c.reused_tokens in (0, shared) for c in chosen), [c.reused_tokens for c in chosen]
        no_reuse = statistics.median(c.ttft_s for c in cold)
        rows.append(
            {
                "reused_share": shared / prompt_tokens,
                "no_reuse_ttft_s": no_reuse,
                "ttft_vs_no_reuse": statistics.median(w.ttft_s for w in warm) / no_reuse,
                "compute_left_causal": prefill_flops(spec, shared, prompt_tokens - shared) / full,
                "compute_left_masked": prefill_flops(spec, shared, prompt_tokens - shared, masked_past=True) / full,
                "decision": chosen[0].choice,
                "decided_ttft_vs_no_reuse": statistics.median(c.ttft_s for c in chosen) / no_reuse,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--skip", default="", help="comma-separated sections to skip: memory,disk,redis,index,floor,ttft,ttft_sweep"
    )
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    # the sizes (64 KiB, 1, 4, 8, 32 MiB) in both modes; the full run fills in between
    sizes = [KiB64, MiB, 4 * MiB, 8 * MiB, 32 * MiB]
    if not a.quick:
        sizes = sorted([*sizes, 256 * 1024, 2 * MiB, 16 * MiB])
    repeat = 3 if a.quick else 7
    res: dict[str, object] = {"python": sys.version.split()[0], "cpus": len(os.sched_getaffinity(0))}
    steps: list[tuple[str, Callable[[], object]]] = [
        ("memory", lambda: memory_tier(sizes, repeat)),
        ("disk", lambda: disk_tier(sizes, repeat)),
        (
            "redis",
            lambda: redis_tier(
                [KiB64, MiB, 4 * MiB] if a.quick else [KiB64, MiB, 4 * MiB, 8 * MiB, 32 * MiB], 50 if a.quick else 200
            ),
        ),
        ("index", index_lookups),
        ("floor", lambda: put_floor(repeat)),
        ("ttft", lambda: ttft(2560, 0.9, 3 if a.quick else 7)),
        ("ttft_sweep", lambda: ttft_sweep(2560, [0.0, 0.2, 0.4, 0.6, 0.8, 0.9], 3 if a.quick else 7)),
    ]
    for name, fn in steps:
        if name not in skip:
            print(f"bench: {name}", file=sys.stderr)
            res[name] = fn()
    if a.json:
        print(json.dumps(res, indent=2))
        return
    for name, val in res.items():
        if isinstance(val, list):
            print(f"\n## {name}")
            cols = list(val[0])
            print(" | ".join(cols))
            for row in val:
                print(" | ".join(f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c]) for c in cols))
        else:
            print(f"\n## {name}: {val}")


if __name__ == "__main__":
    main()
