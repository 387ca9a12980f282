"""Measured vs predicted on real torch modules (CPU): parameters, FLOPs, saved activations.

Skipped when torch (an optional extra) is absent.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from aitrinity.cost.flops import score_flops_per_query, token_flops  # noqa: E402
from aitrinity.cost.memory import layer_activation_bytes, layer_activations  # noqa: E402
from aitrinity.cost.params import count  # noqa: E402
from aitrinity.spec.model import ModelSpec  # noqa: E402
from aitrinity.spec.scenario import Plan  # noqa: E402
from aitrinity.systems.torch_models import Block, Decoder  # noqa: E402
from aitrinity.systems.validate import saved_activation_bytes  # noqa: E402

LLAMA = ModelSpec(
    name="tiny-llama",
    source="test",
    num_layers=2,
    hidden_size=256,
    num_attention_heads=8,
    num_kv_heads=2,
    intermediate_size=688,
    vocab_size=1000,
    max_seq_len=512,
)
GPT = ModelSpec(
    name="tiny-gpt",
    source="test",
    num_layers=2,
    hidden_size=256,
    num_attention_heads=8,
    intermediate_size=1024,
    vocab_size=1000,
    max_seq_len=512,
    mlp="standard",
    norm="layernorm",
    qkv_bias=True,
    linear_bias=True,
    position="learned",
    learned_positions=512,
    tie_embeddings=True,
)


@pytest.mark.parametrize("m", [LLAMA, GPT], ids=lambda m: m.name)
def test_parameter_count_is_exact(m):
    torch.manual_seed(0)
    assert sum(p.numel() for p in Decoder(m).parameters()) == count(m).total


@pytest.mark.parametrize("m", [LLAMA, GPT], ids=lambda m: m.name)
def test_forward_and_backward_flops_are_exact(m):
    torch.manual_seed(0)
    model = Decoder(m)
    b, s = 2, 128
    ids = torch.randint(0, m.vocab_size, (b, s))
    with FlopCounterMode(display=False) as fwd:
        out = model(ids)
    predicted = b * s * (token_flops(m).dense + score_flops_per_query(m, s))  # full s x s, as Megatron counts
    assert fwd.get_total_flops() == predicted
    with FlopCounterMode(display=False) as bwd:
        out.float().pow(2).mean().backward()
    assert bwd.get_total_flops() == pytest.approx(2 * predicted, rel=0.01)  # dgrad + wgrad (+ tiny loss ops)


@pytest.mark.parametrize("m", [LLAMA, GPT], ids=lambda m: m.name)
def test_saved_activations_of_a_layer_within_three_percent(m):
    """Korthikanti-style accounting vs what autograd actually keeps (eager attention, bf16, no dropout).

    Measured is higher by ~1%: the boolean causal mask. (GQA attention keeps K and V at the KV-head
    count; broadcasting matmuls would save them expanded to every query head, +6-8%.)
    """
    torch.manual_seed(0)
    block = Block(m).to(torch.bfloat16)
    b, s = 2, 256
    measured = saved_activation_bytes(block, b, s, m.hidden_size)
    predicted = layer_activation_bytes(layer_activations(m, s, b, False, 2.0), Plan(flash_attention=False))
    assert measured == pytest.approx(predicted, rel=0.03), (measured, predicted)
