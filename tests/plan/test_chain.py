import json

from aitrinity import api
from aitrinity.cli.main import main


def test_builtin_training_chain_crosses_two_pathways():
    """Memory binds -> sharding (bandwidth -> memory) -> the link binds -> compression (compute -> bandwidth)."""
    rep = api.plan("llama-70b-training-h100")
    ch = rep.chain
    assert ch is not None and len(set(ch.pathways)) >= 2
    assert ch.steps[0].relieved == "capacity (hbm)" and ch.steps[0].pathway == "bandwidth->memory"
    link_step = next(s for s in ch.steps if s.pathway == "compute->bandwidth")
    assert link_step.relieved.startswith("inter-node link") and link_step.time_after_s < link_step.time_before_s
    assert ch.steps[-1].fits_after
    # each step starts where the previous one ended
    for a, b in zip(ch.steps, ch.steps[1:], strict=False):
        assert a.binds_after == b.relieved and a.time_after_s == b.time_before_s


def test_chain_ends_at_the_best_plan():
    rep = api.plan("llama-70b-training-h100")
    assert rep.chain.steps[-1].time_after_s == rep.search.best.step_time_s


def test_from_the_scenarios_own_plan_backs_out_with_the_reverse_pathway():
    ch = api.plan("llama-70b-training-h100", start="scenario").chain
    reverse = [s for s in ch.steps if s.change.startswith("pipeline parallel 4 -> 1")]
    assert reverse and reverse[0].pathway == "memory->bandwidth"


def test_cli_plan_explain_and_sweep(capsys):
    assert main(["plan", "llama-70b-training-h100", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "best plans:" in out and "Pareto frontier" in out and "chain from the naive" in out
    assert main(["explain", "llama-70b-training-h100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chain"]["pathways"]
    assert main(["plan", "llama-70b-training-h100", "--sweep", "link=25Gbit/s,400Gbit/s"]) == 0
    out = capsys.readouterr().out
    assert "25Gbit/s" in out and "<- plan changes" in out
    assert main(["plan", "llama-70b-serving-long-context"]) == 2
    assert "training workload" in capsys.readouterr().err
