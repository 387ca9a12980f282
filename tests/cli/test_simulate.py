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
