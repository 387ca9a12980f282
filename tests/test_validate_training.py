"""Published large-scale training runs against the operator model, with the catalog's kernel parameters
(the default install; nothing fitted to these numbers).

Sources: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC'21: Table 1 (1T on 3,072 A100 at 163 TFLOP/s per GPU) and §5.1 (GPT-3 175B on 1,024 A100
at 140 TFLOP/s), both counted with their eq. 3; Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4
(405B on 8,192 and 16,384 H100 at 43% and 41% BF16 MFU). The issue's bar: each within 10%.
"""

import json

import pytest

from aitrinity import validate_training as vt
from aitrinity.cli.main import main

ASKED = ("gpt-3 175b, 1,024 A100", "megatron 1t, 3,072 A100", "llama 3 405b, 8,192 H100", "llama 3 405b, 16,384 H100")


@pytest.fixture(scope="module")
def checks():
    return {c.run: c for c in vt.check_all()}


@pytest.mark.parametrize("run", ASKED)
def test_published_run_within_ten_percent(checks, run):
    c = checks[run]
    assert c.kernels.startswith("roofline (catalog")
    assert abs(c.error) <= 0.10, (c.predicted, c.published)


def test_more_gpus_at_the_same_batch_lower_mfu(checks):
    # Table 4: 16,384 GPUs at the same 16M-token batch run fewer micro-batches per pipeline: lower MFU.
    assert checks["llama 3 405b, 16,384 H100"].predicted < checks["llama 3 405b, 8,192 H100"].predicted


@pytest.mark.parametrize("run", ["llama 3 405b, 8,192 H100", "llama 3 405b, 16,384 H100"])
def test_llama_3s_layout_fits_only_with_recomputation(checks, run):
    """Why the Llama 3 rows recompute activations (the paper does not say): its published layout on 80 GB H100s --
    tp 8, pp 16, 8k sequences, interleaved one layer per chunk -- fits with full recomputation and not without it
    (nor with selective recomputation, which flash attention leaves little to drop)."""
    from aitrinity import api
    from aitrinity.spec._base import validate
    from aitrinity.spec.scenario import Scenario

    published = next(r for r in vt.RUNS if r.name == run)
    assert published.plan["virtual_stages"] == 8 and published.plan["recompute"] == "full"
    assert checks[run].fits
    for rc in ("none", "selective"):
        doc = vt.scenario(published)
        doc["plan"] = {**doc["plan"], "recompute": rc}
        assert not api.diagnose(validate(Scenario, doc)).capacity.fits


def test_the_long_context_row_is_priced_with_context_parallelism(checks):
    # Table 4, third row: 131k-token sequences over cp 16. Reported, not asserted within 10% (the bar is
    # the rows above); docs/silicon.md gives its error.
    c = checks["llama 3 405b, 16,384 H100, 131k context"]
    run = next(r for r in vt.RUNS if r.name == c.run)
    assert run.plan["cp"] == 16 and run.seq_len == 131072 and run.global_batch * run.seq_len == 2**24
    assert 0.0 < c.predicted < 1.0 and c.step_time_s > 0


def test_deepseek_v3s_training_layout_is_priced_with_its_all_to_all_on_infiniband(checks):
    """Issue 19: DeepSeek-V3's layout (report section 3.2: pp 16, ep 64 spanning 8 nodes, ZeRO-1, no TP, 2,048 H800)
    is expressed and priced: its 61 layers split unevenly over 16 stages, its expert all-to-all crosses the
    scale-out network (an 8-GPU node holds 8 of the 64 EP ranks). Its throughput is reported against the report's
    1,543 tokens/s per GPU (Table 1), not asserted: docs/silicon.md gives the error and why."""
    from aitrinity import api
    from aitrinity.spec._base import validate
    from aitrinity.spec.scenario import Scenario

    run = next(r for r in vt.RUNS if r.model == "deepseek-v3")
    r = api.resolve(validate(Scenario, vt.scenario(run)))
    assert r.system.device.name == "h800" and r.system.intra_node_link.name == "nvlink-h800"
    assert r.system.comm_sm_share == pytest.approx(20 / 132)  # §3.2.2: the all-to-all kernels' 20 SMs
    [a2a] = [t for t in api.ledger(r).phases[0].traffic if t.purpose == "EP token all-to-all"]
    assert (a2a.channel, a2a.link, a2a.group_size) == ("inter_node", "infiniband-ndr", 64)
    c = checks[run.name]
    assert c.metric == "tokens/s per GPU" and c.published == pytest.approx(1543.2, abs=0.1)
    assert c.fits and c.predicted > 0


def test_megatron_runs_are_priced_with_their_own_conventions():
    gpt = vt.scenario(vt.RUNS[0])
    assert gpt["system"]["overlap"] == "sum"  # gradients reduced after the backward pass
    assert gpt["plan"]["recompute"] == "full" and gpt["plan"]["flash_attention"] is False


def test_cli_prints_the_table_and_json(capsys):
    assert main(["validate", "--training", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "megatron 1t, 3,072 A100" in out and "| run |" in out
    assert main(["validate", "--training", "--quiet", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {d["run"] for d in data} >= set(ASKED)


def test_cli_refuses_serving_and_training_together(capsys):
    assert main(["validate", "--training", "--serving", "x.csv"]) == 2
    assert "one of them" in capsys.readouterr().err
