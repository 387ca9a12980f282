"""trinity simulate: the serving simulator replaying a fixed-concurrency benchmark."""


def test_simulate_serving_replays_a_fixed_concurrency_benchmark(capsys):
    import json

    from aitrinity.cli.main import main

    args = ["simulate", "serving", "--concurrency", "8", "--isl", "512", "--osl", "64", "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "8 clients on 1 instance(s)" in out and "analytic steady state" in out
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["finished"] == 80 and data["analytic_steady_state"]["tpot_s"] > 0
    # the simulated and analytic decode steps price the same operator model: close at a steady state
    assert abs(data["tpot_s"]["mean"] / data["analytic_steady_state"]["tpot_s"] - 1) < 0.25


def test_simulate_serving_schedules_as_the_engine_does(capsys):
    import json

    from aitrinity.cli.main import main

    args = ["simulate", "serving", "--concurrency", "4", "--isl", "256", "--osl", "16", "--quiet", "--json"]
    assert main([*args, "--engine", "sglang"]) == 0
    sched = json.loads(capsys.readouterr().out)["scheduling"]
    assert sched == {
        "engine": "sglang",
        "token_budget": 8192,
        "mixed_batches": False,
        "first_token_lag": 1,
        "output_spread_tokens": 0.0,
    }
    assert main([*args, "--engine", "vllm", "--token-budget", "512"]) == 0
    sched = json.loads(capsys.readouterr().out)["scheduling"]
    assert sched["token_budget"] == 512 and sched["mixed_batches"] and sched["first_token_lag"] == 0
    assert main(args[:-1]) == 0  # the text output says how it schedules
    assert "generic scheduling: 8,192 tokens per iteration, mixed iterations" in capsys.readouterr().out


def test_a_disaggregated_closed_loop_names_its_pools_and_prints_its_disaggregated_twin(capsys):
    import json

    from aitrinity.cli.main import main

    args = ["simulate", "serving", "--concurrency", "8", "--isl", "512", "--osl", "64", "--quiet"]
    args += ["--instances", "3", "--prefill-instances", "1", "--kv-link", "nvlink-4"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "8 clients on 1 prefill + 2 decode instances (KV over nvlink-4)" in out
    assert "analytic steady state: TTFT" in out
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    twin = data["analytic_steady_state"]  # aitrinity.cost.disaggregated on the same pools, kernels and link
    assert data["finished"] == 80 and twin["ttft_s"] > 0
    assert abs(data["tpot_s"]["mean"] / twin["tpot_s"] - 1) < 0.25


def test_a_context_parallel_instance_splits_each_long_prompt_over_its_groups(capsys):
    """--cp 4: an instance of 4 groups of tp 8 GPUs; each 64k-token prompt split over the groups (ring attention), each
    sequence's KV sharded. TTFT falls about as the prompt's share of each group does, and the analytic steady state
    of the same layout follows it; --cp needs the operator model (--engine or --concurrency)."""
    import json

    from aitrinity.cli.main import main

    args = ["simulate", "serving", "--concurrency", "2", "--isl", "65536", "--osl", "16", "--requests", "6"]
    args += ["--model", "llama-3.1-70b", "--tp", "8", "--quiet", "--json"]
    runs = {}
    for cp in (1, 4):
        assert main([*args, "--cp", str(cp)]) == 0
        runs[cp] = json.loads(capsys.readouterr().out)
    one, four = runs[1], runs[4]
    assert four["ttft_s"]["mean"] < one["ttft_s"]["mean"] / 2.5
    assert four["analytic_steady_state"]["ttft_s"] < one["analytic_steady_state"]["ttft_s"] / 2.5
    assert main([*args[:-1], "--cp", "4"]) == 0
    assert "2 clients on 1 instance(s) of 32 x h100-sxm (tp 8 x cp 4)" in capsys.readouterr().out
    assert main(["simulate", "serving", "--cp", "2", "--quiet"]) == 2  # a trace replay without --engine
    assert "--cp" in capsys.readouterr().err


def test_an_instance_layout_the_engines_refuse_is_refused_in_one_line(capsys):
    """``diagnose`` refuses a TP degree that does not split the attention heads, or that leaves one node (one NVLink
    domain); ``simulate serving`` builds its instances from ``--tp`` and refuses the same, instead of pricing them."""
    from aitrinity.cli.main import main

    args = ["simulate", "serving", "--concurrency", "2", "--isl", "256", "--osl", "8", "--requests", "2"]
    args += ["--model", "llama-3.1-70b", "--quiet"]
    assert main([*args, "--tp", "3"]) == 2  # 64 heads, 8 KV heads
    err = capsys.readouterr().err
    assert "--tp" in err and "num_attention_heads (64)" in err and len(err.strip().splitlines()) == 1
    assert main([*args, "--tp", "16"]) == 2  # an HGX H100 node holds 8
    assert "at most the 8 GPUs of one h100-sxm node" in capsys.readouterr().err
    assert main([*args, "--tp", "8"]) == 0
    capsys.readouterr()
    ulysses = [*args, "--cp", "2", "--cp-method", "ulysses"]
    assert main([*ulysses, "--tp", "8"]) == 2  # one KV head per TP rank: nothing to split over 2 groups
    assert "1 KV heads per TP rank" in capsys.readouterr().err
    assert main([*ulysses, "--tp", "4"]) == 0
    capsys.readouterr()
    assert main([*args, "--tp", "4", "--cp", "2", "--instances", "2", "--prefill-instances", "1"]) == 2
    assert "aggregated instances" in capsys.readouterr().err
    # weights that leave no room for a KV cache: said in GiB, with what would make room
    assert main([*args[:-3], "--model", "gpt-oss-120b", "--quiet", "--tp", "1"]) == 2
    err = capsys.readouterr().err
    assert "room for a KV cache" in err and "GiB" in err and len(err.strip().splitlines()) == 1
