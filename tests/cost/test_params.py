"""Parameter counts derived from architecture vs published sizes (within 0.5%)."""

import pytest

from aitrinity import catalog
from aitrinity.cost.params import count
from aitrinity.cost.training import Layout, mtp_extra_params, stage_params


@pytest.mark.parametrize("name", catalog.names("models"))
def test_every_catalog_model_within_half_a_percent_of_published(name):
    m = catalog.model(name)
    assert m.reference_params and m.reference_source
    got = count(m).total
    assert got == pytest.approx(m.reference_params, rel=0.005), f"{name}: {got / 1e9:.3f}B"


@pytest.mark.parametrize(
    ("name", "exact"),
    [
        # Sum of the tensor shapes in the released checkpoints' configs
        ("llama-2-7b", 6_738_415_616),
        ("llama-3.1-8b", 8_030_261_248),
        ("mistral-7b", 7_241_732_096),
        ("mixtral-8x7b", 46_702_792_704),
        # the safetensors headers of moonshotai/Kimi-K2-Instruct (the model card rounds it to 1T)
        ("kimi-k2", 1_026_408_232_448),
    ],
)
def test_exact_counts_of_released_checkpoints(name, exact):
    assert count(catalog.model(name)).total == exact


def test_moe_active_parameters():
    # Mixtral: ~12.9B active of 46.7B (Jiang et al. 2024, section 2); DeepSeek-V3: 37B of 671B
    mix = catalog.model("mixtral-8x7b")
    assert count(mix).active(mix) == pytest.approx(12.9e9, rel=0.01)
    ds = catalog.model("deepseek-v3")
    assert count(ds).active(ds) == pytest.approx(37e9, rel=0.02)


@pytest.mark.parametrize("name", ["llama-3.1-70b", "mixtral-8x7b", "deepseek-v3", "gpt-3-175b"])
def test_pipeline_stages_partition_the_model(name):
    m = catalog.model(name)
    pp = 1 if m.num_layers % 2 else 2
    lay = Layout(tp=1, pp=pp, dp=1, ep=1, micro_batch=1, num_microbatches=1)
    held = sum(sum(stage_params(m, lay, s)) for s in range(pp))
    tied_copy = m.vocab_size * m.hidden_size if (m.tie_embeddings and pp > 1) else 0
    # a multi-token-prediction module trains beside the model (DeepSeek-V3, §2.2): a block like the deepest layer and
    # its projection and norms; the published count leaves it out, the stages hold it
    deepest = count(m).total - count(m.model_copy(update={"num_layers": m.num_layers - 1})).total
    mtp = m.mtp_layers * deepest + mtp_extra_params(m)
    assert held == count(m).total + tied_copy + mtp
