"""The operator model's kernels are asked for the work the model has: with kernels that return FLOPs (or bytes)
instead of seconds, a training layer and a serving prefill step of every catalog model come out at
:mod:`aitrinity.cost.flops`' count, which is derived from the parameter count, and a decode step's attention reads the
KV cache :mod:`aitrinity.cost.memory` sizes (a second formula written apart from the operator model's would drift from
it: until 2026-12-05 the training layer priced MLA's projections 4x and its attention 3.6x too wide, and the
roofline's decode read MLA's latent twice, as if it were a K and a V)."""

import pathlib
from types import SimpleNamespace

import numpy as np
import pytest

from aitrinity import catalog
from aitrinity.cost.flops import causal_score_flops, layer_dense_flops, token_flops
from aitrinity.cost.operators import Layout, StepShape, step_times
from aitrinity.cost.train_operators import FLASH_BACKWARD, MicroBatch, layer_times

MODELS = sorted(p.stem for p in (pathlib.Path(catalog.__file__).parent / "data" / "models").glob("*.yaml"))


def _mb(flash: bool = True, s: int = 2048) -> MicroBatch:
    return MicroBatch(1, s, 0, False, flash, "bf16")


class _Flops:
    """Kernels that return FLOPs instead of seconds (GEMMs 2mnk, flash attention QK^T + AV over the causal half) and
    nothing else: a layer's GEMM "time" is then its matmul FLOPs."""

    def gemm(self, m, n, k, dtype):
        return 2.0 * np.asarray(m, dtype=float) * n * k

    def grouped_gemm(self, groups, m, n, k, dtype):
        return np.asarray(groups, dtype=float) * self.gemm(m, n, k, dtype)

    def moe(self, tokens, shape, dtype):
        return np.full(np.shape(tokens), np.nan)

    def prefill_attention(self, batch, tokens, heads, kv_heads, head_dim, kv_dtype, mla=None, compute_dtype="bf16"):
        from aitrinity.cost.kernels import RooflineKernels

        return RooflineKernels.prefill_attention(
            _UNIT, batch, tokens, heads, kv_heads, head_dim, kv_dtype, mla, compute_dtype
        )

    def __getattr__(self, name):  # collectives, element-wise passes: not FLOPs
        return lambda *a, **kw: np.zeros(np.shape(a[0]))


_UNIT = SimpleNamespace(  # the roofline's prefill attention at 1 FLOP/s and no launch: its FLOP count
    params=SimpleNamespace(attention=SimpleNamespace(launch_s=0.0, prefill_efficiency=1.0)), _peak=lambda dtype: 1.0
)


@pytest.mark.parametrize("name", ["gpt-oss-120b", "gemma-3-27b", "llama-3.1-8b"])
def test_sliding_window_layers_train_on_the_share_of_the_scores_they_keep(name):
    """gpt-oss attends within 128 tokens on half its layers, Gemma 3 within 1,024 on five of six: at 16k tokens a
    flash-attention layer pays, on average, the score FLOPs cost.flops counts for those windows (and a model without
    windows the whole causal matrix); unfused attention computes the whole matrix whatever the window."""
    m, k, s = catalog.model(name), _Flops(), 16384
    t = layer_times(m, k, 1, 1, _mb(s=s), False)
    assert float(t.attention) == pytest.approx(
        (1.0 + FLASH_BACKWARD) * causal_score_flops(m, 0, s) / m.num_layers, rel=1e-3
    )
    if m.sliding_window:
        unfused = layer_times(m, k, 1, 1, _mb(flash=False, s=s), False)
        whole = layer_times(m.model_copy(update={"sliding_window": None}), k, 1, 1, _mb(flash=False, s=s), False)
        assert float(unfused.attention) == float(whole.attention)


@pytest.mark.parametrize("name", MODELS)
def test_every_catalog_models_training_layers_price_its_flops(name):
    m, k, s = catalog.model(name), _Flops(), 4096
    for moe in [False, True] if m.moe else [False]:
        t = layer_times(m, k, 1, 1, _mb(s=s), moe)
        per_token = layer_dense_flops(m, moe_layer=moe)
        assert float(t.gemm) == pytest.approx(
            3.0 * s * (per_token.attention_proj + per_token.mlp + per_token.router), rel=1e-3
        )
        assert float(t.attention) == pytest.approx(
            (1.0 + FLASH_BACKWARD) * causal_score_flops(m, 0, s) / m.num_layers, rel=1e-3
        )


@pytest.mark.parametrize("name", MODELS)
def test_every_catalog_models_prefill_step_prices_its_flops(name):
    """One prompt of 4,096 tokens through the serving step (one GPU, balanced routing): its GEMMs and attention are
    the model's forward FLOPs (the LM head runs on the last token only)."""
    m, k, s = catalog.model(name), _Flops(), 4096
    st = step_times(m, k, Layout(routing="balanced"), StepShape(0.0, 1.0, 1.0, float(s), 0.0))
    f = token_flops(m)
    assert float(st.gemm) == pytest.approx(s * (f.attention_proj + f.mlp + f.router) + f.lm_head, rel=1e-3)
    assert float(st.attention) == pytest.approx(causal_score_flops(m, 0, s), rel=1e-3)


@pytest.mark.parametrize("name", MODELS)
def test_every_catalog_models_decode_step_reads_the_kv_cache_it_holds(name):
    """A decode step of 4 sequences at a 2,048-token context on the roofline at 1 byte/s: its attention reads what the
    KV cache holds for them (MLA: the latent once; DeepSeek Sparse Attention: and its index keys; windows: the
    tokens the window keeps)."""
    from aitrinity.cost.kernels import RooflineKernels
    from aitrinity.cost.memory import kv_bytes_per_token, kv_tokens_held

    class Bytes(_Flops):
        def decode_attention(self, batch, context, heads, kv_heads, head_dim, kv_dtype, mla=None):
            return RooflineKernels._decode_attention(_BYTES, batch, context, kv_heads, head_dim, 2, mla)

    m, b, c = catalog.model(name), 4.0, 2048.0
    st = step_times(m, Bytes(), Layout(routing="balanced"), StepShape(b, c))
    assert float(st.attention) == pytest.approx(b * kv_tokens_held(m, c) * kv_bytes_per_token(m, "bf16"), rel=1e-9)


_BYTES = SimpleNamespace(  # the roofline's decode attention at 1 byte/s and no launch: the bytes it reads
    params=SimpleNamespace(attention=SimpleNamespace(launch_s=0.0, decode_memory_efficiency=1.0)),
    memory_bandwidth_Bps=1.0,
)


def test_the_last_stage_trains_the_multi_token_prediction_modules_projection_and_head_pass():
    """DeepSeek-V3's MTP module (report §2.2) on the last stage: besides its block (a layer, counted in the stage's
    layers), forward and backward through its 2h x h projection and a second pass through the output head."""
    from aitrinity.cost.train_operators import stage_times

    m, k, s = catalog.model("deepseek-v3"), _Flops(), 4096
    bare = m.model_copy(update={"mtp_layers": 0})
    last, plain = (stage_times(x, k, 1, 1, _mb(s=s), 0, 2, first=False, last=True) for x in (m, bare))
    h = m.hidden_size
    assert float(last.gemm - plain.gemm) == pytest.approx(3.0 * s * (2 * m.vocab_size * h + 2 * 2 * h * h), rel=1e-9)
    middle = [stage_times(x, k, 1, 1, _mb(s=s), 0, 2, first=False, last=False) for x in (m, bare)]
    assert float(middle[0].gemm) == float(middle[1].gemm)  # nothing of it elsewhere
