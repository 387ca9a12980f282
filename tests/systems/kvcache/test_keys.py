"""Block keys: chaining, salts, extras, and independence from PYTHONHASHSEED."""

import json
import subprocess
import sys

import pytest

from aitrinity.systems.kvcache.keys import Keyer


def test_chained_full_blocks_only():
    k = Keyer.of("t", block_tokens=4)
    a = k.keys(list(range(10))).keys
    assert len(a) == 2  # 10 tokens: two full blocks, the partial third has no key
    b = k.keys([*range(8), 99, 98, 97, 96]).keys
    assert b[:2] == a and len(b) == 3
    c = k.keys([0, 1, 2, 3, 4, 5, 6, 99]).keys
    assert c[0] == a[0] and c[1] != a[1]
    # chaining: equal second blocks after different first blocks get different keys
    assert k.keys([9, 9, 9, 9, 4, 5, 6, 7]).keys[1] != a[1]


def test_salt_and_extras_separate_everything_but_content():
    toks = list(range(8))
    base = Keyer.of("a", block_tokens=4, model="m", dtype="fp16").keys(toks)
    for other in (
        Keyer.of("b", block_tokens=4, model="m", dtype="fp16"),
        Keyer.of("a", block_tokens=4, model="m", dtype="bf16"),
        Keyer.of("a", block_tokens=4, model="m", dtype="fp16", adapter="lora-7"),
    ):
        ok = other.keys(toks)
        assert not set(ok.keys) & set(base.keys)
        assert ok.content == base.content
    assert Keyer.of("a", block_tokens=4, dtype="fp16", model="m").keys(toks).keys == base.keys  # order-free extras


def test_bad_tokens_rejected():
    with pytest.raises(ValueError):
        Keyer.of("a", block_tokens=2).keys([1, -1])
    with pytest.raises(ValueError):
        Keyer.of("a", block_tokens=0)


SCRIPT = (
    "import json;from aitrinity.systems.kvcache.keys import Keyer;"
    "print(json.dumps([k.hex() for k in Keyer.of('tenant', block_tokens=16, model='x').keys(list(range(100))).keys]))"
)


def test_identical_keys_across_interpreters_and_hash_seeds():
    outs = []
    for seed in ("0", "12345", "random"):
        env = {"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}
        r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
        outs.append(json.loads(r.stdout))
    assert outs[0] == outs[1] == outs[2] and len(outs[0]) == 6
