import json

import pytest

from aitrinity import api
from aitrinity.cli.main import main
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Scenario


def test_builtin_training_chain_crosses_two_pathways():
    """Memory binds -> sharding (bandwidth -> memory) -> the link binds -> compression (compute -> bandwidth)."""
    rep = api.plan("llama-70b-training-h100")
    ch = rep.chain
    assert ch is not None and len(set(ch.pathways)) >= 2
    assert ch.steps[0].relieved == "capacity (hbm)" and ch.steps[0].pathway == "bandwidth->memory"
    link_step = next(s for s in ch.steps if s.pathway == "compute->bandwidth")
    assert link_step.relieved.startswith("inter-node link")
    assert link_step.score_after < 0.9 * link_step.score_before  # compression relieved the link (int8: 2.0x)
    assert ch.steps[-1].fits_after
    # each step starts where the previous one ended
    for a, b in zip(ch.steps, ch.steps[1:], strict=False):
        assert a.binds_after == b.relieved and a.score_after == b.score_before


def test_chain_ends_at_the_best_plan():
    rep = api.plan("llama-70b-training-h100")
    assert rep.chain.steps[-1].score_after == rep.search.best.step_time_s


def test_from_the_scenarios_own_plan_backs_out_with_the_reverse_pathway():
    ch = api.plan("llama-70b-training-h100", start="scenario").chain
    reverse = [s for s in ch.steps if s.change.startswith("pipeline parallel 4 -> ")]
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
    # an edge scenario's sweep shows its best split x codec per value (it raised an internal error before)
    assert main(["plan", "camera-analytics-edge", "--sweep", "workload.edge.frames_per_s=5,30"]) == 0
    out = capsys.readouterr().out
    assert "best plan for each workload.edge.frames_per_s" in out and "acc. drop" in out
    assert main(["plan", "llama-70b-serving-long-context", "--slo-tpot", "30ms"]) == 0
    out = capsys.readouterr().out
    assert "TTFT" in out and "TPOT above the SLO" in out
    assert main(["plan", "llama-70b-training-h100", "--slo-ttft", "1s"]) == 2
    assert "training" in capsys.readouterr().err


def test_serving_chain_reuses_prefixes_where_prefill_compute_binds():
    """On the built-in serving example the chain crosses memory -> compute (prefix reuse) where prefill binds."""
    rep = api.plan("llama-70b-serving-long-context")
    ch = rep.chain
    prefix = next(s for s in ch.steps if s.exchange == "prefix-cache")
    # what it relieves is prefill: its compute, other requests' prefill sharing the decode steps, or the KV slots the
    # prompts hold while they are prefilled (more clients than slots: a shorter prefill frees a slot sooner)
    assert prefix.pathway == "memory->compute"
    assert prefix.relieved in ("compute", "other requests' prefill in the step", "KV cache slots")
    assert prefix.score_after < prefix.score_before
    assert len(set(ch.pathways)) >= 2
    best = rep.search.best
    assert ch.steps[-1].score_after == pytest.approx(1.0 / best.throughput_tokens_per_s)


def test_a_serving_chain_reaches_a_context_parallel_best_plan():
    """examples/long-context-serving.yaml: 128k-token prompts; the search's best splits them over cp groups, and the
    chain from the naive plan (no CP) gets there with a "context parallel" step, ending on the best plan's score."""
    rep = api.plan("examples/long-context-serving.yaml")
    best = rep.search.best
    assert best.cp > 1
    ch = rep.chain
    step = next(s for s in ch.steps if s.exchange == "cp")
    assert step.change == f"context parallel 1 -> {best.cp}" and step.pathway == "bandwidth->memory"
    assert ch.steps[-1].score_after == pytest.approx(1.0 / best.throughput_tokens_per_s)


def test_a_serving_chain_keeps_the_scenarios_speculative_decoder_as_a_step():
    """The scenario's speculative decoding, which the search keeps as given, is a step of the chain: the chain dropped
    it from every state, so it ended at 35,411 tokens/s while explaining a plan of 40,929."""
    sc = {
        "name": "spec",
        "system": {"device": "h100-sxm", "num_devices": 8, "host_memory": "host-dram"},
        "workload": {"model": "llama-3.1-8b", "serving": {"prompt_tokens": 2048, "output_tokens": 256, "batch": 16}},
        "plan": {"exchanges": [{"kind": "speculative-decoding", "draft_tokens": 3, "acceptance": 0.8}]},
    }
    rep = api.plan(validate(Scenario, sc))
    steps = rep.chain.steps
    assert [s.exchange for s in steps].count("speculative-decoding") == 1
    assert steps[-1].score_after == pytest.approx(1.0 / rep.search.best.throughput_tokens_per_s)
