"""`trinity watch`'s verdicts from vLLM's Prometheus text, without a server."""

from __future__ import annotations

import pytest

from aitrinity import catalog
from aitrinity.systems.vllm import priced
from aitrinity.systems.vllm.watch import RELIEF, judge, line, measured_load, parse_metrics, with_tiers

pytest.importorskip("prometheus_client", reason="the [vllm] extra brings prometheus_client")


def text(running=0, waiting=0, kv=0.0, pre=0, prompt=0, gen=0, done=(0, 0.0, 0, 0), first=(0, 0.0), pool=None) -> str:
    """``done``: requests finished, the sum of their latencies, prompt and output lengths; ``first``: the sum of their
    TTFTs (and of their TPOTs, the second); ``pool``: the engine's KV blocks of 16 tokens."""
    lab = '{engine="0",model_name="m"}'
    n, latency, isl, osl = done
    histograms = []
    for name, total in (
        ("e2e_request_latency_seconds", latency),
        ("request_prompt_tokens", isl),
        ("request_generation_tokens", osl),
        ("time_to_first_token_seconds", first[0]),
        ("request_time_per_output_token_seconds", first[1]),
    ):
        histograms += [
            f"# TYPE vllm:{name} histogram",
            f'vllm:{name}_bucket{{engine="0",model_name="m",le="+Inf"}} {n}',
            f"vllm:{name}_count{lab} {n}",
            f"vllm:{name}_sum{lab} {total}",
        ]
    if pool is not None:
        histograms += [
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="16",engine="0",num_gpu_blocks="{pool}"}} 1.0',
        ]
    return "\n".join(
        [
            *histograms,
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


def test_the_periods_closed_loop_is_measured_from_the_finished_requests():
    """Four requests finished in a 2 s period, 3 s of latency in all: 1.5 in flight on average (Little's law), their
    mean lengths and latencies; a period in which none finished has no load."""
    a = parse_metrics(text(done=(2, 1.0, 300, 40), first=(0.2, 0.02)), 0.0)
    b = parse_metrics(text(done=(6, 4.0, 3_100, 440), first=(0.6, 0.06)), 2.0)
    ld = measured_load(a, b)
    assert ld is not None
    assert (ld.requests, ld.clients, ld.prompt_tokens, ld.output_tokens) == (4, 1.5, 700, 100)
    assert ld.latency_s == pytest.approx(0.75) and ld.ttft_s == pytest.approx(0.1) and ld.tpot_s == pytest.approx(0.01)
    assert measured_load(b, parse_metrics(text(done=(6, 4.0, 3_100, 440)), 3.0)) is None
    assert b.kv_pool_tokens is None and parse_metrics(text(pool=100), 0.0).kv_pool_tokens == 1_600


def test_long_prompts_bind_compute_and_many_decodes_bind_memory_bandwidth():
    m = catalog.model("llama-3.1-8b")
    served = priced.served(m, "h100-sxm")
    a = parse_metrics(text(), 0.0)
    # two requests of 100k prompt tokens and one output token; sixteen of 100 -> 100 tokens
    prefill = judge(a, parse_metrics(text(running=2, prompt=200_000, gen=2, done=(2, 2.0, 200_000, 2)), 1.0), served)
    decode = judge(a, parse_metrics(text(running=16, gen=1_600, done=(16, 16.0, 1_600, 1_600)), 1.0), served)
    assert prefill.binds == "compute" and decode.binds == "memory bandwidth"
    assert prefill.expected is not None and prefill.expected.compute_s > prefill.expected.memory_s
    assert "binds: memory bandwidth" in line(decode) and "->" in line(decode)
    # no request finished: the lengths are unknown, so nothing is priced -- unless the caller passes the last load
    mid = parse_metrics(text(running=16, gen=1_600), 1.0)
    assert judge(a, mid, served).binds == "busy" and "finished" in judge(a, mid, served).why
    assert judge(a, mid, served, last=decode.load).binds == "memory bandwidth"


def test_a_period_is_priced_by_the_pricer_diagnose_uses():
    """The period's load -- 8 clients, 1,000 -> 200 tokens -- priced by the watch equals `trinity diagnose`'s estimate
    of the same serving scenario, to the last bit (same ledger, same kernels, same steady state)."""
    from aitrinity import api, silicon
    from aitrinity.spec._base import validate
    from aitrinity.spec.scenario import Scenario

    m = catalog.model("llama-3.1-8b")
    k = silicon.kernels(catalog.device("h100-sxm"), "vllm").kernels
    served = priced.served(m, "h100-sxm", tp=2, kernels=k)
    a = parse_metrics(text(), 0.0)
    b = parse_metrics(text(running=8, prompt=10_000, gen=2_000, done=(10, 8.0, 10_000, 2_000), first=(1, 0.1)), 1.0)
    v = judge(a, b, served)
    scenario = {
        "name": "same",
        "system": {"device": "h100-sxm", "num_devices": 2, "engine": "vllm"},
        "workload": {"model": "llama-3.1-8b", "serving": {"prompt_tokens": 1000, "output_tokens": 200, "batch": 8}},
        "plan": {"tp": 2},
    }
    est = api.estimate(api.resolve(validate(Scenario, scenario)))
    assert v.expected is not None and est.serving is not None
    assert (v.expected.ttft_s, v.expected.tpot_s) == (est.serving.ttft_s, est.serving.tpot_s)
    assert v.expected.output_tokens_per_s == est.serving.output_tokens_per_s
    assert "TTFT 100 ms (priced" in line(v) and "10 done, 8.0 in flight" in line(v)


def test_the_servers_kv_pool_bounds_the_requests_priced_at_once():
    """A pool of 16 requests' worth of 1,100-token contexts (1,100 blocks of 16 tokens): the pricer runs those 16 at
    once and the other clients wait for a slot; fp8 KV in the same memory runs about twice as many (the workspace and
    logits of a larger batch take a little), at about twice the rate."""
    m = catalog.model("llama-3.1-8b")
    s = priced.served(m, "h100-sxm", kv_pool_tokens=16 * 1_100)
    load = priced.Load(
        requests=8, clients=64, prompt_tokens=700, output_tokens=400, latency_s=1.0, ttft_s=None, tpot_s=None
    )
    plans = priced.options(s)
    bf16 = priced.expected(priced.estimate(s, load), 0, 0)
    fp8 = priced.expected(priced.estimate(s, load, plans["kv-quantization fp8"]), 0, 0)
    assert bf16.running == 16 and 30 <= fp8.running <= 32
    assert fp8.output_tokens_per_s > 1.8 * bf16.output_tokens_per_s and fp8.ttft_s < bf16.ttft_s / 2  # half the wait
    # without the pool the device's 80 GB hold every client
    assert priced.expected(priced.estimate(priced.served(m, "h100-sxm"), load), 0, 0).running == 64


def test_a_pool_and_weights_that_cannot_be_on_one_device_are_said():
    """Llama-3.1-70B's bf16 weights alone are 141 GB: at tp 1 on an 80 GB H100 the server must be larger than given."""
    pool = 100_000
    small = priced.served(catalog.model("llama-3.1-70b"), "h100-sxm", tp=1, kv_pool_tokens=pool)
    why = priced.overcommitted(small)
    assert why is not None and "--tp" in why and "h100-sxm" in why
    assert (
        priced.overcommitted(priced.served(catalog.model("llama-3.1-70b"), "h100-sxm", tp=4, kv_pool_tokens=pool))
        is None
    )
    assert priced.overcommitted(priced.served(catalog.model("llama-3.1-70b"), "h100-sxm")) is None  # no pool known


def test_the_advisor_picks_among_the_registrys_exchanges_with_patience():
    """64 clients on a 16-request pool: each one-step exchange is predicted at the load; the best beats the plan as
    served by far more than the margin, and the advice switches to it on the second such period, not the first."""
    m = catalog.model("llama-3.1-8b")
    s = priced.served(m, "h100-sxm", kv_pool_tokens=16 * 1_100)
    adv = priced.Advisor.of(s)
    assert set(adv.plans) == {"as served", "kv-quantization fp8", "kv-quantization int8", "weight-quantization fp8"}
    load = priced.Load(
        requests=8, clients=64, prompt_tokens=700, output_tokens=400, latency_s=1.0, ttft_s=None, tpot_s=None
    )
    first = adv.advise(load)
    assert first.choice == "as served" and not first.switched and "1/2" in first.reason
    second = adv.advise(load)
    best = min(second.predicted_s, key=second.predicted_s.__getitem__)
    assert second.switched and second.choice == best != "as served"
    assert second.predicted_s[best] < 0.9 * second.predicted_s["as served"]
    assert second.predicted_s[best] == priced.estimate(s, load, adv.plans[best]).serving.request_latency_s
    # one-step options from what runs now: the registry's host-only KV offload appears only with host memory
    assert not any(k.startswith("kv-offload") for k in adv.plans)


def test_a_slow_connector_tier_binds_and_reports_its_bandwidth():
    """The connector's worker spent 0.6 s of a 1 s period reading 2,048 tokens' blocks from disk: more than the
    model's GPU work for the period's 256 computed prompt tokens, so the disk tier binds; its read bandwidth is
    the period's bytes over those seconds. Another period it read from memory in 1 ms: compute binds."""
    served = priced.served(catalog.model("llama-3.1-8b"), "h100-sxm")
    hello = {"block_bytes": 128 * 131072, "block_tokens": 128}  # 128 tokens x 128 KiB (Llama-3.1-8B bf16 KV)

    def sample(t, prompt, disk_tokens, disk_s, mem_tokens=0.0, mem_s=0.0):
        stats = {"loaded_by_tier": {"disk": disk_tokens, "memory": mem_tokens}}
        stats["load_s_by_tier"] = {"disk": disk_s, "memory": mem_s}
        done = (int(t), t, prompt, int(t))  # one request a second, 1 s each
        return with_tiers(parse_metrics(text(running=1, prompt=prompt, gen=1, done=done), t), stats, hello)

    a, b = sample(0.0, 0, 0, 0.0), sample(1.0, 256, 2048, 0.6)
    v = judge(a, b, served)
    assert v.binds == "KV tier" and "disk" in v.why and v.relieve == RELIEF["KV tier"]
    disk = next(t for t in v.tiers if t.tier == "disk")
    assert disk.tokens_per_s == 2048 and disk.busy == pytest.approx(0.6)
    assert disk.read_Bps == pytest.approx(16 * 128 * 131072 / 0.6)
    assert v.rates().links_Bps == {"disk": disk.read_Bps}
    assert "disk 2,048 tok/s loaded, 60% busy" in line(v)
    c = sample(2.0, 256 + 100_000, 2048, 0.6, mem_tokens=2048, mem_s=0.001)
    assert judge(b, c, served).binds == "compute"
    assert judge(a, b).binds == "KV tier"  # without a model: the tier took over half the period


def test_the_cli_prices_each_period_and_advises(tmp_path, capsys):
    """`trinity watch --json` against a stand-in server whose /metrics advances by a canned read each GET: the first
    read gives the KV pool (1,100 blocks of 16 tokens), a period with finished requests is priced at its load and
    advised on, a period with none is priced at the last load (no advice), and the advice switches on the second
    advised period. (The live-server tests run vLLM itself; this one holds the CLI's loop.)"""
    import http.server
    import json
    import threading

    from aitrinity.cli.main import main

    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    heavy = dict(running=16, waiting=40, kv=0.97)
    reads = [
        text(pool=1_100),
        text(prompt=5_600, gen=3_200, done=(8, 64.0, 5_600, 3_200), first=(24.0, 0.08), pool=1_100, **heavy),
        text(prompt=5_600, gen=6_400, done=(8, 64.0, 5_600, 3_200), first=(24.0, 0.08), pool=1_100, **heavy),
        text(prompt=11_200, gen=9_600, done=(16, 128.0, 11_200, 6_400), first=(48.0, 0.16), pool=1_100, **heavy),
    ]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = (reads.pop(0) if len(reads) > 1 else reads[0]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        args = ["watch", url, "--model-config", str(tmp_path / "config.json"), "--device", "h100-sxm"]
        assert main([*args, "--period", "0.2", "--count", "3", "--json", "--quiet"]) == 0
    finally:
        srv.shutdown()
    first, idle, second = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert first["load"]["clients"] == pytest.approx(64.0 / first["period_s"], rel=1e-9)
    assert first["load"]["prompt_tokens"] == 700 and first["expected"] is not None
    assert first["advice"]["choice"] == "as served" and not first["advice"]["switched"]
    assert set(first["advice"]["predicted_latency_s"]) >= {"as served", "kv-quantization fp8"}
    assert idle["load"] is None and idle["advice"] is None and idle["expected"] is not None  # the last load's
    assert second["advice"]["switched"] and second["advice"]["choice"] != "as served"
