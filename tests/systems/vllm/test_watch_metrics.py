"""`trinity watch`'s verdicts from vLLM's Prometheus text, without a server."""

from __future__ import annotations

import pytest

from aitrinity import catalog
from aitrinity.systems.vllm.watch import RELIEF, judge, line, parse_metrics, with_tiers

pytest.importorskip("prometheus_client", reason="the [vllm] extra brings prometheus_client")


def text(running=0, waiting=0, kv=0.0, pre=0, prompt=0, gen=0) -> str:
    lab = '{engine="0",model_name="m"}'
    return "\n".join(
        [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{lab} {running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{lab} {waiting}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{lab} {kv}",
            "# TYPE vllm:num_preemptions counter",
            f"vllm:num_preemptions_total{lab} {pre}",
            f"vllm:num_preemptions_created{lab} 1.7e9",
            "# TYPE vllm:prompt_tokens counter",
            f"vllm:prompt_tokens_total{lab} {prompt}",
            "# TYPE vllm:generation_tokens counter",
            f"vllm:generation_tokens_total{lab} {gen}",
            "# TYPE vllm:prefix_cache_hits counter",
            f"vllm:prefix_cache_hits_total{lab} 256",
            "# TYPE vllm:prefix_cache_queries counter",
            f"vllm:prefix_cache_queries_total{lab} 1024",
            "",
        ]
    )


def test_counters_are_read_and_created_timestamps_ignored():
    s = parse_metrics(text(running=3, waiting=1, kv=0.5, pre=2, prompt=100, gen=40), t=1.0)
    assert (s.running, s.waiting, s.kv_usage, s.preemptions, s.prompt_tokens, s.generation_tokens) == (
        3,
        1,
        0.5,
        2,
        100,
        40,
    )
    assert (s.prefix_hits, s.prefix_queries) == (256, 1024)


def test_not_a_vllm_server_says_so():
    with pytest.raises(ValueError, match="vLLM"):
        parse_metrics("# TYPE up gauge\nup 1\n", t=0.0)


def test_preemptions_mean_kv_capacity_whatever_else():
    a = parse_metrics(text(pre=1), 0.0)
    v = judge(a, parse_metrics(text(running=4, kv=0.95, pre=3, prompt=900, gen=50), 2.0))
    assert v.binds == "KV capacity" and v.preemptions == 2 and v.relieve == RELIEF["KV capacity"]
    assert v.prompt_tokens_per_s == 450


def test_waiting_with_a_full_cache_is_kv_with_room_a_queue_and_nothing_idle():
    a = parse_metrics(text(), 0.0)
    assert judge(a, parse_metrics(text(running=8, waiting=2, kv=0.93, gen=80), 1.0)).binds == "KV capacity"
    assert judge(a, parse_metrics(text(running=8, waiting=2, kv=0.40, gen=80), 1.0)).binds == "queue"
    assert judge(a, parse_metrics(text(), 1.0)).binds == "idle"
    assert judge(a, parse_metrics(text(running=1, gen=80), 1.0)).binds == "busy"  # no model or device given


def test_long_prompts_bind_compute_and_many_decodes_bind_memory_bandwidth():
    m, dev = catalog.model("llama-3.1-8b"), catalog.device("h100-sxm")
    a = parse_metrics(text(), 0.0)
    prefill = judge(a, parse_metrics(text(running=2, prompt=200_000, gen=2), 1.0), m, dev)
    decode = judge(a, parse_metrics(text(running=16, gen=1_600), 1.0), m, dev)
    assert prefill.binds == "compute" and decode.binds == "memory bandwidth"
    assert prefill.expected is not None and prefill.expected.compute_s > prefill.expected.memory_s
    assert "binds: memory bandwidth" in line(decode) and "->" in line(decode)


def test_a_slow_connector_tier_binds_and_reports_its_bandwidth():
    """The connector's worker spent 0.6 s of a 1 s period reading 2,048 tokens' blocks from disk: more than the
    model's GPU work for the period's 256 computed prompt tokens, so the disk tier binds; its read bandwidth is
    the period's bytes over those seconds. Another period it read from memory in 1 ms: compute binds."""
    m, dev = catalog.model("llama-3.1-8b"), catalog.device("h100-sxm")
    hello = {"block_bytes": 128 * 131072, "block_tokens": 128}  # 128 tokens x 128 KiB (Llama-3.1-8B bf16 KV)

    def sample(t, prompt, disk_tokens, disk_s, mem_tokens=0.0, mem_s=0.0):
        stats = {"loaded_by_tier": {"disk": disk_tokens, "memory": mem_tokens}}
        stats["load_s_by_tier"] = {"disk": disk_s, "memory": mem_s}
        return with_tiers(parse_metrics(text(running=1, prompt=prompt, gen=1), t), stats, hello)

    a, b = sample(0.0, 0, 0, 0.0), sample(1.0, 256, 2048, 0.6)
    v = judge(a, b, m, dev)
    assert v.binds == "KV tier" and "disk" in v.why and v.relieve == RELIEF["KV tier"]
    disk = next(t for t in v.tiers if t.tier == "disk")
    assert disk.tokens_per_s == 2048 and disk.busy == pytest.approx(0.6)
    assert disk.read_Bps == pytest.approx(16 * 128 * 131072 / 0.6)
    assert v.rates().links_Bps == {"disk": disk.read_Bps}
    assert "disk 2,048 tok/s loaded, 60% busy" in line(v)
    c = sample(2.0, 256 + 200_000, 2048, 0.6, mem_tokens=2048, mem_s=0.001)
    assert judge(b, c, m, dev).binds == "compute"
    assert judge(a, b).binds == "KV tier"  # without a model: the tier took over half the period
