"""Telemetry: every loop's measurements come out as one Rates shape (links, latency, compute, memory)."""

import dataclasses
import math

import pytest

from aitrinity import catalog
from aitrinity.control import Rates, Telemetry
from aitrinity.systems.ddp.worker import LINK
from aitrinity.systems.ddp.worker import Telemetry as DDPTelemetry
from aitrinity.systems.vllm.lookup import Rates as StoreRates
from aitrinity.systems.vllm.watch import Sample, judge


def read(t: Telemetry) -> Rates:
    """What a Controller's caller reads, from any loop (the Protocol is checked by mypy)."""
    return t.rates()


def test_rates_are_non_negative_numbers():
    assert Rates(links_Bps={"x": 1e9}, flops_per_s=2.0).to_json()["links_Bps"] == {"x": 1e9}
    for bad in ({"links_Bps": {"x": -1.0}}, {"flops_per_s": math.nan}, {"latency_s": {"x": -1e-6}}):
        with pytest.raises(ValueError):
            Rates(**bad)


def test_ddp_telemetry_reports_its_link_and_compute():
    t = DDPTelemetry(["none", "fp16"], world=2, density=0.01)
    t.alpha_s, t.bandwidth_Bps = 50e-6, 1.25e8
    t.observe("none", buckets=1, sent=0.0, comm_s=0.0, codec_s=0.0, elements=0, compute_s=0.02)
    r = read(t)
    assert r.links_Bps == {LINK: 1.25e8} and r.latency_s == {LINK: 50e-6} and r.compute_s == 0.02


def test_store_rates_turn_block_reads_into_tier_bandwidths():
    s = StoreRates(block_bytes=2_000_000)
    assert read(s).links_Bps == {}  # nothing read yet
    s.read("disk", blocks=4, seconds=0.02)
    s.prefill(flops=1e12, seconds=0.5)
    r = read(s)
    assert r.links_Bps["disk"] == pytest.approx(2_000_000 / 0.005) and r.flops_per_s == pytest.approx(2e12)
    assert StoreRates().rates().links_Bps == {}  # block size unknown: no bandwidth claimed


def test_watch_period_reports_what_the_server_achieved():
    from aitrinity.systems.vllm.priced import served

    s = served(catalog.model("llama-3.1-8b"), "h100-sxm")
    before = Sample(t=0.0, running=4, waiting=0, kv_usage=0.2, preemptions=0, prompt_tokens=0, generation_tokens=0)
    after = Sample(t=2.0, running=4, waiting=0, kv_usage=0.3, preemptions=0, prompt_tokens=4000, generation_tokens=800)
    after = dataclasses.replace(after, finished=4, latency_sum=8.0, prompt_len_sum=4000, output_len_sum=800)
    v = judge(before, after, s)
    assert v.expected is not None
    r = read(v)
    assert r.flops_per_s == pytest.approx(v.expected.flops / 2.0) and r.memory_Bps == pytest.approx(
        v.expected.bytes / 2.0
    )
    assert v.to_json()["rates"]["flops_per_s"] == r.flops_per_s
    assert read(judge(before, after)).flops_per_s is None  # no model: no rate claimed
