"""The split ledger: exact payload sizes, the envelope agrees with brute force, the accuracy budget binds."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitrinity import catalog
from aitrinity.cost.dnn import layer_table
from aitrinity.cost.edge import (
    Choices,
    Processor,
    Uplink,
    best,
    envelope,
    message_bytes,
    payload_bytes,
    split_options,
)

TABLE = layer_table(catalog.dnn("resnet-50"))
DEV = Processor("dev", 15e9, 8e9, busy_W=6.4, idle_W=2.7)
SRV = Processor("srv", 20e12, 250e9)
LTE = Uplink("lte", 0.7e6, 0.035, tx_base_W=1.288, tx_W_per_Mbps=0.438)
ALL = Choices(accuracy_drop={"fp16": 0.0, "int8": 0.001, "int4": 0.002}, max_accuracy_drop=0.01)


def test_payload_sizes():
    assert payload_bytes(10, "fp32") == 40
    assert payload_bytes(10, "fp16") == 20
    assert payload_bytes(10, "int8") == 18
    assert payload_bytes(11, "int4") == 8 + 6
    assert payload_bytes(10, "raw") == 10
    assert message_bytes(100, 4) == 40 + 16 + 100
    with pytest.raises(ValueError, match="unknown codec"):
        payload_bytes(1, "bf8")


def test_every_split_and_codec_is_listed_with_its_ledger():
    opts = split_options(TABLE, DEV, SRV, LTE, ALL)
    n = len(TABLE.layers)
    assert len(opts) == 1 + (n - 1) * 4 + 1
    local = next(o for o in opts if o.split == n)
    raw = next(o for o in opts if o.split == 0)
    assert local.uplink_bytes == 0 and local.server_flops == 0 and local.device_flops == TABLE.flops
    assert raw.uplink_bytes == message_bytes(3 * 224 * 224, 3) and raw.device_flops == 0
    for o in opts:
        assert o.device_flops + o.server_flops == pytest.approx(TABLE.flops)
        assert o.latency_s == pytest.approx(o.latency_at(LTE.bandwidth_Bps))
        assert o.device_energy_J == pytest.approx(o.energy_at(LTE.bandwidth_Bps))


def test_the_accuracy_budget_and_missing_measurements_exclude_codecs():
    strict = Choices(accuracy_drop={"int8": 0.02}, max_accuracy_drop=0.01)
    opts = split_options(TABLE, DEV, SRV, LTE, strict)
    int8 = [o for o in opts if o.codec == "int8"]
    assert int8 and all(not o.allowed and "above the 1.0% budget" in (o.why_not or "") for o in int8)
    int4 = [o for o in opts if o.codec == "int4"]
    assert all(not o.allowed and "no measured accuracy" in (o.why_not or "") for o in int4)
    per_split = Choices(accuracy_drop={"int8": 0.02, "layer4_3:int8": 0.0})
    ok = [o for o in split_options(TABLE, DEV, SRV, LTE, per_split) if o.codec == "int8" and o.allowed]
    assert [o.after for o in ok] == ["layer4_3"]


def test_lossless_needs_a_measured_ratio():
    c = Choices(codecs=("fp32",), lossless=("none", "zstd"))
    assert all(not o.allowed for o in split_options(TABLE, DEV, SRV, LTE, c) if o.lossless == "zstd")
    c = Choices(codecs=("fp32",), lossless=("none", "zstd"), lossless_ratio={"zstd": 0.5})
    z = next(o for o in split_options(TABLE, DEV, SRV, LTE, c) if o.split == 0 and o.lossless == "zstd")
    assert z.allowed and z.uplink_bytes == message_bytes(math.ceil(3 * 224 * 224 * 0.5), 3)


@settings(max_examples=60, deadline=None)
@given(bw=st.floats(2e4, 5e10), objective=st.sampled_from(["latency", "energy"]))
def test_the_envelope_is_the_brute_force_best_at_every_bandwidth(bw, objective):
    opts = split_options(TABLE, DEV, SRV, LTE, ALL)
    segs = envelope(opts, objective)
    seg = next(s for s in segs if s.low_Bps <= bw < s.high_Bps)
    chosen = next(o for o in opts if (o.split, o.codec, o.lossless) == (seg.split, seg.codec, seg.lossless))
    brute = best(opts, bw, objective)
    cost = (lambda o: o.latency_at(bw)) if objective == "latency" else (lambda o: o.energy_at(bw))
    assert cost(chosen) == pytest.approx(cost(brute), rel=1e-9)


def test_break_evens_sit_where_neighbours_cost_the_same():
    opts = split_options(TABLE, DEV, SRV, LTE, ALL)
    segs = envelope(opts, "latency")
    assert len(segs) >= 2  # all local at low bandwidth, offload at high
    assert segs[0].choice == "all local" and segs[-1].split < len(TABLE.layers)
    by = {(o.split, o.codec, o.lossless): o for o in opts}
    for a, b in itertools.pairwise(segs):
        B = a.high_Bps
        oa, ob = by[(a.split, a.codec, a.lossless)], by[(b.split, b.codec, b.lossless)]
        assert oa.latency_at(B) == pytest.approx(ob.latency_at(B), rel=1e-9)


def test_a_radio_makes_sending_cost_energy():
    quiet = Uplink("wired", LTE.bandwidth_Bps, LTE.latency_s)
    raw_radio = next(o for o in split_options(TABLE, DEV, SRV, LTE, ALL) if o.split == 0)
    raw_wired = next(o for o in split_options(TABLE, DEV, SRV, quiet, ALL) if o.split == 0)
    assert raw_radio.device_energy_J > raw_wired.device_energy_J
    bits = raw_radio.uplink_bytes * 8
    t = raw_radio.uplink_bytes / LTE.bandwidth_Bps
    radio_J = 1.288 * t + 0.438 * bits / 1e6
    assert raw_radio.device_energy_J - raw_wired.device_energy_J == pytest.approx(radio_J - 2.7 * t, rel=1e-6)


def test_measured_node_times_replace_the_roofline():
    n = len(TABLE.layers)
    opts = split_options(TABLE, DEV, SRV, LTE, ALL, device_times=[0.01] * n, server_times=[0.001] * n)
    local = next(o for o in opts if o.split == n)
    assert local.latency_s == pytest.approx(0.01 * n)
    with pytest.raises(ValueError, match="node times"):
        split_options(TABLE, DEV, SRV, LTE, ALL, device_times=[0.01])


def test_a_token_bucket_burst_is_not_paced():
    bucket = Uplink("tbf", LTE.bandwidth_Bps, LTE.latency_s, burst_bytes=1500)
    plain = {(o.split, o.codec): o for o in split_options(TABLE, DEV, SRV, LTE, ALL)}
    for o in split_options(TABLE, DEV, SRV, bucket, ALL):
        p = plain[(o.split, o.codec)]
        assert o.paced_bytes == max(o.uplink_bytes - 1500, 0)
        assert p.latency_s - o.latency_s == pytest.approx((p.paced_bytes - o.paced_bytes) / LTE.bandwidth_Bps)
