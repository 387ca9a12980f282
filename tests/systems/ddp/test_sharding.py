"""DDP, ZeroRedundancyOptimizer and FSDP2 on 2 gloo ranks, and activation checkpointing, measured vs predicted."""

import pytest

torch = pytest.importorskip("torch")

from aitrinity.cost import sharding as cs  # noqa: E402
from aitrinity.cost.memory import layer_activation_bytes, layer_activations  # noqa: E402
from aitrinity.spec.scenario import Plan  # noqa: E402
from aitrinity.systems import netns  # noqa: E402
from aitrinity.systems.ddp.launch import run_workers  # noqa: E402

SPEC = {
    "name": "tiny",
    "source": "test",
    "num_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 320,
    "vocab_size": 1000,
    "max_seq_len": 512,
}
IN_NAMESPACE = netns.unavailable() is None


@pytest.fixture(scope="module")
def measured():
    return run_workers(
        [], world=2, link="unlimited" if IN_NAMESPACE else None, sharding={"model": SPEC, "batch": 2, "seq": 32}
    )


@pytest.mark.multiproc
def test_model_state_bytes_per_rank_are_exact(measured):
    for rank in (0, 1):
        for r in measured[rank]:
            want = cs.rank_states(r["kind"], r["shapes"], 2, rank)
            got = (r["weights"], r["gradients"], r["optimizer"])
            assert got == (want.weights, want.gradients, want.optimizer), (r["kind"], rank)
    # ZeroRedundancyOptimizer's partition is uneven, FSDP2's halves every parameter
    zero = [measured[r][1]["optimizer"] for r in (0, 1)]
    assert zero[0] != zero[1] and sum(zero) == measured[0][0]["optimizer"]
    assert measured[0][2]["weights"] * 2 == measured[0][0]["weights"]


@pytest.mark.multiproc
@pytest.mark.skipif(not IN_NAMESPACE, reason=f"bytes on the wire need a private namespace: {netns.unavailable()}")
def test_bytes_on_the_wire_within_framing(measured):
    """The payload is exact; TCP/IP headers, ACKs and gloo framing add 0.2-0.3% on an idle machine and up
    to ~1% under load (smaller segments, more ACKs: seen 1.0101 for zero1 during a full suite run), so
    the bound is 3% -- far below what a wrong collective model would give (gloo's reduce-scatter alone
    is 2x)."""
    for i, kind in enumerate(("ddp", "zero1", "fsdp2")):
        r = measured[0][i]
        want = sum(cs.wire_bytes(kind, r["shapes"], 2, rank, root_shapes=r["root_shapes"]) for rank in (0, 1))
        got = r["lo_tx_step"]  # every rank's sends cross the namespace's one loopback
        assert got == pytest.approx(want, rel=0.03), kind
        assert got >= want  # TCP/IP and gloo framing only add


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_saved_activations_under_recomputation(mode):
    from torch.utils.checkpoint import checkpoint

    from aitrinity.systems.torch_models import Block
    from aitrinity.systems.validate import _llama, saved_activation_bytes

    m = _llama("t", 256, 2, 8, 2)
    b, s = 2, 256
    blk = Block(m).to(torch.bfloat16)
    blk.attn.recompute_core = mode == "selective"

    class Full(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blk = blk

        def forward(self, x):
            return checkpoint(self.blk, x, use_reentrant=False)

    got = saved_activation_bytes(Full() if mode == "full" else blk, b, s, m.hidden_size)
    want = layer_activation_bytes(layer_activations(m, s, b, False, 2.0), Plan(recompute=mode, flash_attention=False))
    assert got == pytest.approx(want, rel=0.10 if mode != "full" else 0.0)
