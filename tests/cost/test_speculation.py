"""Speculative decoding: tokens per step, what a step costs, and what it buys per output token."""

import pytest

from aitrinity import api, catalog
from aitrinity.cost.speculation import Speculation
from aitrinity.errors import SpecError
from aitrinity.plan import registry
from aitrinity.spec._base import validate
from aitrinity.spec.exchanges import SpeculativeDecoding
from aitrinity.spec.scenario import Scenario


@pytest.mark.parametrize(
    "k, a, expected",
    [(1, 0.85, 1.85), (1, 0.9, 1.9), (4, 0.7, (1 - 0.7**5) / 0.3), (3, 1.0, 4.0), (3, 0.0, 1.0)],
)
def test_tokens_per_step_is_leviathans_expectation(k, a, expected):
    """Leviathan et al. 2023, eq. 1: E = (1 - a^(k+1)) / (1 - a); DeepSeek-V3's MTP (k 1, 85-90% accepted) gives
    1.85-1.9 tokens a step."""
    assert Speculation(k, a).tokens_per_step == pytest.approx(expected)


def _scenario(batch, speculative, model="llama-3.1-70b"):
    ex = [{"kind": "speculative-decoding", "draft_tokens": 1, "acceptance": 0.85}] if speculative else []
    return validate(
        Scenario,
        {
            "name": "s",
            "system": {"device": "h100-sxm", "num_devices": 8},
            "workload": {"model": model, "serving": {"prompt_tokens": 1024, "output_tokens": 1024, "batch": batch}},
            "plan": {"tp": 8, "weight_dtype": "fp8", "compute_dtype": "fp8", "kv_dtype": "fp8", "exchanges": ex},
        },
    )


def test_a_small_batch_decodes_nearly_e_times_faster_and_a_large_one_gains_less():
    """At 1-8 clients a decode step streams the weights and launches its kernels whatever its rows: verifying two
    positions costs about one step, and one draft block about 1/80 of it, so TPOT falls by nearly E = 1.85 (DeepSeek
    reports 1.8x decoding speed for its MTP, §5.4.3). At 512 clients the step is bound by its FLOPs, which the
    verified and rejected positions multiply: the gain shrinks."""
    gain = {}
    for b in (1, 8, 512):
        plain = api.diagnose(_scenario(b, False)).estimate.serving
        spec = api.diagnose(_scenario(b, True)).estimate.serving
        gain[b] = plain.tpot_s / spec.tpot_s
    assert 1.65 < gain[1] < 1.85 and 1.6 < gain[8] < 1.85
    assert gain[512] < 1.3


def test_it_spends_flops_to_relieve_bytes_per_output_token():
    """The exchange's pathway, compute -> bandwidth, on the decode phase of the ledger (per output token)."""
    plain = api.diagnose(_scenario(8, False)).estimate.ledger.phases[1]
    spec = api.diagnose(_scenario(8, True)).estimate.ledger.phases[1]
    assert spec.flops.forward > plain.flops.forward
    assert spec.hbm_bytes < 0.6 * plain.hbm_bytes


def test_the_draft_holds_its_blocks_and_their_kv_in_device_memory():
    """The draft's blocks are weights on the device, and their attention keeps its own KV for every sequence (DeepSeek's
    MTP module is a full block with its attention); the embedding and the output head are the target's. Until
    2026-12-06 a speculative plan's memory was the target's alone."""
    from aitrinity.cost.params import count
    from aitrinity.cost.speculation import Speculation, draft_model

    m = catalog.model("llama-3.1-70b")
    plain, spec = (
        {i.category: i.bytes for i in api.diagnose(_scenario(8, s)).estimate.memory.items} for s in (False, True)
    )
    pd = count(draft_model(m, Speculation(1, 0.85)))
    blocks = pd.total - pd.embedding - pd.lm_head  # one block of 70B's shape, fp8, over tp 8
    assert spec["weights"] - plain["weights"] == pytest.approx(blocks / 8, rel=1e-9)
    assert spec["kv_cache"] == pytest.approx(plain["kv_cache"] * (1 + 1 / m.num_layers), rel=1e-9)


def test_it_is_lossless_serving_only_and_checked():
    assert registry.get("speculative-decoding").quality(SpeculativeDecoding(kind="speculative-decoding")).free
    for bad, words in (({"draft_tokens": 0}, "draft_tokens"), ({"acceptance": 1.5}, "acceptance")):
        sc = _scenario(8, True).model_dump(mode="json", exclude_none=True)
        sc["plan"]["exchanges"][0].update(bad)
        with pytest.raises(SpecError) as e:
            validate(Scenario, sc)
        assert words in str(e.value) and "\n" not in str(e.value)
    train = {
        "name": "t",
        "system": {"device": "h100-sxm", "num_devices": 8},
        "workload": {"model": "llama-3.1-8b", "training": {"seq_len": 2048, "global_batch": 64}},
        "plan": {"exchanges": [{"kind": "speculative-decoding"}]},
    }
    with pytest.raises(SpecError, match="this one applies to serving"):
        api.diagnose(validate(Scenario, train))
