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
        "output_spread": 0.0,
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
