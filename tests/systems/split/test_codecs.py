"""Codecs: sizes exactly as the cost model predicts, bounded error, wrong sizes and bombs refused."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitrinity.cost.edge import payload_bytes
from aitrinity.systems.split import codecs

shapes = st.lists(st.integers(1, 9), min_size=1, max_size=4).map(tuple)


@settings(max_examples=80, deadline=None)
@given(shape=shapes, codec=st.sampled_from(["fp32", "fp16", "int8", "int4"]), seed=st.integers(0, 2**16))
def test_sizes_and_round_trip(shape, codec, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    data = codecs.encode(x, codec)
    assert len(data) == payload_bytes(x.size, codec)
    y = codecs.decode(data, codec, shape)
    assert y.shape == x.shape and y.dtype == np.float32
    span = float(x.max() - x.min())
    tol = {"fp32": 0.0, "fp16": 2e-3 * float(abs(x).max()), "int8": span / 255 / 2, "int4": span / 15 / 2}[codec]
    assert float(abs(y - x).max()) <= tol * 1.001 + 1e-6


def test_raw_frames_and_constant_tensors():
    f = np.arange(12, dtype=np.uint8).reshape(1, 3, 4)
    assert codecs.decode(codecs.encode(f, "raw"), "raw", f.shape).tolist() == f.tolist()
    with pytest.raises(ValueError, match="uint8"):
        codecs.encode(f.astype(np.float32), "raw")
    c = np.full((5,), 2.5, np.float32)
    assert np.allclose(codecs.decode(codecs.encode(c, "int4"), "int4", (5,)), 2.5)


def test_a_payload_that_does_not_fit_the_shape_is_refused():
    data = codecs.encode(np.zeros(10, np.float32), "int8")
    with pytest.raises(ValueError, match="expected"):
        codecs.decode(data, "int8", (11,))
    with pytest.raises(ValueError, match="expected"):
        codecs.decode(data[:-1], "int8", (10,))


@pytest.mark.parametrize("ll", ["zstd", "lz4"])
def test_lossless_round_trip_and_bomb(ll):
    pytest.importorskip({"zstd": "zstandard", "lz4": "lz4"}[ll])
    raw = bytes(100_000)
    packed = codecs.compress(raw, ll)
    assert len(packed) < 1000
    assert codecs.decompress(packed, ll, len(raw)) == raw
    with pytest.raises(ValueError):
        codecs.decompress(packed, ll, 1000)  # more than the header admits: cut off, refused
    with pytest.raises(ValueError):
        codecs.decompress(b"not compressed at all", ll, 10)
