"""A disaggregated plan (plan.disaggregation) through api.diagnose: two pools, one Estimate."""

import json

import pytest

from aitrinity import api, catalog, silicon
from aitrinity.cli.main import main
from aitrinity.cost.concurrency import profile
from aitrinity.cost.disaggregated import Pool, disaggregated_steady_state
from aitrinity.cost.disaggregated_estimate import kv_link
from aitrinity.cost.operators import Layout
from aitrinity.errors import SpecError
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Disaggregation, Scenario


def _scenario(disaggregation=None, mode="concurrency", model="llama-3.1-8b", **plan):
    return validate(
        Scenario,
        {
            "name": "s",
            "system": {"device": "h100-sxm", "num_devices": 8, "engine": "vllm"},
            "workload": {
                "model": model,
                "serving": {"prompt_tokens": 2048, "output_tokens": 256, "batch": 32, "mode": mode},
            },
            "plan": {"tp": 2, **plan, **({"disaggregation": disaggregation} if disaggregation else {})},
        },
    )


SPLIT = {"prefill_devices": 2, "prefill_tp": 1}  # two one-GPU prefill workers, three tp-2 decode replicas


def test_diagnose_prices_the_two_pools_with_the_steady_state_of_the_loop():
    d = api.diagnose(_scenario(SPLIT))
    s = d.estimate.serving
    m, dev = catalog.model("llama-3.1-8b"), catalog.device("h100-sxm")
    k = silicon.kernels(dev, "vllm").kernels
    sys_ = api.resolve(_scenario(SPLIT)).system
    want = disaggregated_steady_state(
        m,
        k,
        Pool(2, Layout(1, engine="vllm")),
        Pool(3, Layout(2, engine="vllm")),
        kv_link(Disaggregation(**SPLIT), sys_),
        32 * 3,
        2048,
        256,
        profile("vllm"),
    )
    assert s.ttft_s == pytest.approx(float(want.ttft_s)) and s.tpot_s == pytest.approx(float(want.tpot_s))
    assert s.output_tokens_per_s == pytest.approx(96 * 256 / float(want.request_latency_s))
    p = s.pools
    assert (p.prefill_devices, p.prefill_workers, p.decode_devices, p.decode_replicas, p.clients) == (2, 2, 6, 3, 96)
    assert p.kv_link == "nvlink-4" and p.binding_pool in ("prefill", "decode")
    # decode carries no prompt: no "other requests' prefill" resource, which the aggregated plan has
    dec = {r.id for r in d.estimate.phases[1].resources}
    assert "compute:interference" not in dec
    agg = api.diagnose(_scenario())
    assert "compute:interference" in {r.id for r in agg.estimate.phases[1].resources}
    assert agg.estimate.serving.pools is None


def test_the_cli_prints_the_pools_and_json_carries_them(capsys, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(json.dumps(_scenario(SPLIT).model_dump(mode="json", exclude_none=True)))
    assert main(["diagnose", str(f)]) == 0
    out = capsys.readouterr().out
    assert "pools: prefill 2 x tp1 (2 devices" in out and "-> decode 3 x tp2 (6 devices, 96 clients" in out
    assert main(["diagnose", str(f), "--json"]) == 0
    pools = json.loads(capsys.readouterr().out)[0]["estimate"]["serving"]["pools"]
    assert pools["prefill_devices"] == 2 and pools["kv_link"] == "nvlink-4"


@pytest.mark.parametrize(
    "split, plan, words",
    [
        ({"prefill_devices": 8}, {}, "fewer than num_devices (8)"),
        ({"prefill_devices": 3, "prefill_tp": 2}, {}, "a divisor of prefill_devices (3)"),
        ({"prefill_devices": 2, "prefill_ep": 2}, {}, "has no experts"),
        ({"prefill_devices": 3}, {}, "a multiple of tp x pp = 2"),
        ({"prefill_devices": 2, "prefill_tp": 3}, {}, "a divisor of prefill_devices (2)"),
    ],
)
def test_an_impossible_split_is_one_line_naming_its_field(split, plan, words):
    with pytest.raises(SpecError) as e:
        api.diagnose(_scenario(split, **plan))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_kv_crosses_the_link_named_and_nvlink_by_default_within_a_node():
    """2,048 prompt tokens x 128 KiB of Llama-3.1-8B KV per token, each tp-1 prefill worker sending all of it:
    over NVLink 4 (450 GB/s x 0.85) about 0.7 ms, over one 400 Gbit/s NDR port (50 GB/s x 0.85) about 6.3 ms."""
    near = api.diagnose(_scenario(SPLIT)).estimate.serving.pools
    far = api.diagnose(_scenario({**SPLIT, "kv_link": "inter_node"})).estimate.serving.pools
    kv = 2048 * 2 * 32 * 8 * 128 * 2
    assert near.kv_link == "nvlink-4" and near.kv_transfer_s == pytest.approx(1e-6 + kv / (450e9 * 0.85))
    assert far.kv_link == "infiniband-ndr" and far.kv_transfer_s == pytest.approx(5e-6 + kv / (50e9 * 0.85))


def test_static_mode_and_training_reject_pools():
    with pytest.raises(SpecError, match="mode: concurrency"):
        api.diagnose(_scenario(SPLIT, mode="static"))
    train = validate(
        Scenario,
        {
            "name": "t",
            "system": {"device": "h100-sxm", "num_devices": 8},
            "workload": {"model": "llama-3.1-8b", "training": {"seq_len": 2048, "global_batch": 64}},
            "plan": {"tp": 2, "disaggregation": SPLIT},
        },
    )
    with pytest.raises(SpecError, match="absent for training"):
        api.diagnose(train)


def test_the_decode_pool_verifies_a_speculative_decoders_drafts():
    """A speculative-decoding exchange applies to the decode pool: TPOT per output token falls by most of E = 1.85 at
    this memory-bound occupancy, and the split search prices it as diagnose does."""
    from aitrinity.plan.search_disaggregated import search_splits

    plain = api.diagnose(_scenario(SPLIT)).estimate.serving
    sc = _scenario(SPLIT).model_dump(mode="json", exclude_none=True)
    sc["plan"]["exchanges"] = [{"kind": "speculative-decoding", "draft_tokens": 1, "acceptance": 0.85}]
    spec_sc = validate(Scenario, sc)
    spec = api.diagnose(spec_sc).estimate.serving
    assert spec.tpot_s < plain.tpot_s / 1.4
    r = api.resolve(spec_sc)
    k = silicon.kernels(r.system.device, r.system.engine).kernels
    best = search_splits(r.model, r.scenario.workload.serving, r.scenario.plan, r.system, kernels=k).best
    again = r.scenario.model_copy(update={"plan": best.plan(r.scenario.plan)})
    job = again.workload.serving.model_copy(update={"batch": best.batch})
    again = again.model_copy(update={"workload": again.workload.model_copy(update={"serving": job})})
    # diagnose also holds each phase at or above its ledger roofline (here HBM bytes per token, 0.1% above)
    assert api.diagnose(again).estimate.serving.tpot_s == pytest.approx(best.tpot_s, rel=0.01)
