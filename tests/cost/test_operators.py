"""A serving step as its operators: broadcasting, TP, and what each operator class depends on."""

import numpy as np
import pytest

from aitrinity import catalog, silicon
from aitrinity.cost.operators import OPERATOR_CLASSES, Layout, StepShape, step_times


@pytest.fixture(scope="module")
def k():
    return silicon.roofline(catalog.device("h100-sxm"))


@pytest.fixture(scope="module")
def m():
    return catalog.model("llama-3.1-70b")


def test_a_batch_of_shapes_is_priced_like_each_one(k, m):
    dec = np.array([1.0, 8.0, 64.0])
    ctx = np.array([512.0, 2048.0, 8192.0])
    lay = Layout(tp=4)
    batch = step_times(m, k, lay, StepShape(decode=dec, context=ctx))
    for i in range(3):
        one = step_times(m, k, lay, StepShape(decode=dec[i], context=ctx[i]))
        for c in OPERATOR_CLASSES:
            assert getattr(batch, c)[i] == pytest.approx(float(getattr(one, c)))
    assert batch.total == pytest.approx(sum(getattr(batch, c) for c in OPERATOR_CLASSES))


def test_tp_splits_the_gemms_and_adds_all_reduces(k, m):
    s = StepShape(decode=8, context=2048)
    one, eight = step_times(m, k, Layout(tp=1), s), step_times(m, k, Layout(tp=8), s)
    assert float(one.communication) == 0.0 and float(eight.communication) > 0.0
    assert float(eight.gemm) < float(one.gemm) / 4  # weights read per rank shrink 8x (plus launches)
    # at small batch, 160 all-reduces a step are a visible fixed cost: latency, not bytes
    assert float(eight.communication) > 160 * catalog.device("h100-sxm").kernels.all_reduce[8].latency_s


def test_context_drives_decode_attention_and_prefill_drives_gemms(k, m):
    lay = Layout(tp=8)
    short, long = step_times(m, k, lay, StepShape(decode=32, context=np.array([1024.0, 32768.0]))).attention
    assert long > 10 * short
    no_pf, pf = step_times(
        m, k, lay, StepShape(decode=32, context=1024, prefill_seqs=np.array([0.0, 1.0]), prefill_len=4096)
    ).gemm
    assert pf > 5 * no_pf


def test_overhead_is_the_engine_class_only(k, m):
    s = StepShape(decode=4, context=1024)
    a = step_times(m, k, Layout(), s)
    b = step_times(m, k, Layout(), s, step_overhead_s=1e-3)
    assert float(b.engine) == 1e-3 and float(b.total - a.total) == pytest.approx(1e-3)


def test_moe_touches_more_experts_as_the_batch_grows(k):
    m = catalog.model("mixtral-8x7b")
    g = step_times(m, k, Layout(tp=2), StepShape(decode=np.array([1.0, 256.0]), context=1024)).gemm
    assert g[1] > g[0]


def test_expert_parallel_moe_steps_pay_two_all_to_alls_per_moe_layer(k):
    """GShard (Lepikhin et al. 2020, §2.2): the routed tokens' top-k copies go out to the experts' ranks and
    come back; nothing else in the step changes with EP, and a dense model has no all-to-all."""
    moe = catalog.model("mixtral-8x7b")
    shape = StepShape(decode=32.0, context=2048.0)
    one = step_times(moe, k, Layout(tp=1, ep=1, routing="balanced"), shape)
    two = step_times(moe, k, Layout(tp=1, ep=2, routing="balanced"), shape)
    routed = 32.0 * moe.moe.experts_per_token * moe.hidden_size * 2.0
    want = 2.0 * moe.num_moe_layers * float(k.all_to_all(routed, 2))
    assert float(two.communication - one.communication) == pytest.approx(want)
    assert float(two.attention) == float(one.attention) and float(two.elementwise) == float(one.elementwise)
    assert float(k.all_to_all(routed, 1)) == 0.0
    # (n-1)/n of the payload leaves each GPU: more of it over 4 GPUs than over 2, less than an all-reduce's 2(n-1)/n
    assert float(k.all_to_all(1e9, 2)) < float(k.all_to_all(1e9, 4)) < float(k.all_reduce(1e9, 4))


def test_an_expert_group_wider_than_a_node_sends_the_other_nodes_share_over_the_network(k):
    """DeepSeek-V3 with EP 16 over HGX nodes of 8: half of each dispatch and combine leaves through the GPU's NIC
    while the other half stays on NVLink (the longer of the two); on a 72-GPU NVLink rack the same group stays
    inside, as without a scale-out at all."""
    from aitrinity.cost.operators import ScaleOut

    m, shape = catalog.model("deepseek-v3"), StepShape(decode=128.0, context=2048.0)
    ib = ScaleOut(8, 0.85 * 100e9, 5e-6)
    rack = step_times(m, k, Layout(tp=1, ep=16, scale_out=ScaleOut(72, 0.85 * 100e9, 5e-6)), shape)
    alone = step_times(m, k, Layout(tp=1, ep=16), shape)
    nodes = step_times(m, k, Layout(tp=1, ep=16, scale_out=ib), shape)
    assert float(rack.communication) == float(alone.communication)
    lay = Layout(tp=1, ep=16)
    routed = 128.0 * m.moe.experts_per_token * m.hidden_size * 2.0 * lay.skew
    far = 5e-6 + routed * 8 / 16 / (0.85 * 100e9)
    near = float(k.all_to_all(routed * 8 / 16, 8))
    assert far > near  # the NIC is the slower half here
    extra = 2.0 * m.num_moe_layers * (far - float(k.all_to_all(routed, 16)))
    assert float(nodes.communication - alone.communication) == pytest.approx(extra)
    assert float(nodes.gemm) == float(alone.gemm) and float(nodes.attention) == float(alone.attention)
    # within a node nothing changes
    inside = step_times(m, k, Layout(tp=1, ep=8, scale_out=ib), shape)
    assert float(inside.communication) == float(step_times(m, k, Layout(tp=1, ep=8), shape).communication)


def test_a_prefill_over_a_cached_prefix_adds_the_new_rows_of_the_causal_matrix(k, m):
    """4k new tokens after 12k cached ones: the attention of the new rows (16k² − 12k² cells over two, against
    4k² for the new tokens alone), the same GEMMs."""
    lay = Layout(tp=8)
    alone = step_times(m, k, lay, StepShape(0, 1.0, 1, 4096))
    after = step_times(m, k, lay, StepShape(0, 1.0, 1, 4096, 12288))
    whole = step_times(m, k, lay, StepShape(0, 1.0, 1, 16384))
    head = step_times(m, k, lay, StepShape(0, 1.0, 1, 12288))
    assert float(after.gemm) == float(alone.gemm)
    assert float(after.attention) == pytest.approx(float(whole.attention - head.attention))
    assert float(after.attention) > 5 * float(alone.attention)  # (16² − 12²) / 4² = 7, less the launches


def _with_gemm_launch(dev, launch_s):
    from aitrinity.cost.kernels import roofline

    gemm = {d: p.model_copy(update={"launch_s": launch_s}) for d, p in dev.kernels.gemm.items()}
    return roofline(dev.model_copy(update={"kernels": dev.kernels.model_copy(update={"gemm": gemm})}))


@pytest.mark.parametrize("tokens", [4.0, 64.0, 4096.0])
def test_routed_experts_run_as_grouped_gemms_with_one_launch_each(tokens):
    """However many experts a step touches (a handful at 4 tokens, nearly all 256 at 4,096), a DeepSeek-V3 MoE
    layer launches five GEMM kernels: the router, the grouped up and down projections of the routed experts,
    and the shared expert's two; a fused MoE kernel does not launch once per expert."""
    from aitrinity.cost.operators import mlp_time

    dev, m = catalog.device("h100-sxm"), catalog.model("deepseek-v3")
    lay = Layout(tp=8, weight_dtype="fp8")
    a = mlp_time(m, _with_gemm_launch(dev, 1e-6), lay, np.array(tokens), moe_layer=True)
    b = mlp_time(m, _with_gemm_launch(dev, 101e-6), lay, np.array(tokens), moe_layer=True)
    assert float(b - a) == pytest.approx(5 * 100e-6)


def test_a_grouped_gemm_is_its_groups_work_and_one_launch(k):
    one = k.gemm(8.0, 4096, 7168, "bf16")
    launch = k.params.gemm_for("bf16").launch_s
    assert float(k.grouped_gemm(1.0, 8.0, 4096, 7168, "bf16")) == pytest.approx(float(one))
    assert float(k.grouped_gemm(32.0, 8.0, 4096, 7168, "bf16")) == pytest.approx(launch + 32 * float(one - launch))


def test_a_moe_group_splits_into_moe_tp_x_ep_over_tp_x_attention_dp():
    assert Layout(tp=8, ep=8, attention_dp=1).moe_tp == 1  # TensorRT-LLM's TEP
    assert Layout(tp=1, ep=8).dp == 8 and Layout(tp=1, ep=8).moe_tp == 1  # DP attention + EP
    assert Layout(tp=2, ep=4).moe_tp == 2 and Layout(tp=4, ep=1, attention_dp=2).moe_tp == 8
    with pytest.raises(ValueError, match="cannot hold ep 3"):
        Layout(tp=2, ep=3, attention_dp=1)


def test_attention_tp_with_expert_parallel_moe_needs_no_all_to_all(k):
    """With attention TP (dp 1) every rank already holds the step's tokens: an EP rank runs its experts on them and
    the MLP's all-reduce combines the outputs, so TEP's collectives are pure TP's. The experts' work is the same
    (each rank: 1/8 of the expert FLOPs), in fewer, wider GEMMs."""
    m = catalog.model("deepseek-v3")
    shape = StepShape(decode=64.0, context=2048.0)
    tep = step_times(m, k, Layout(tp=8, ep=8, attention_dp=1, weight_dtype="fp8"), shape)
    pure_tp = step_times(m, k, Layout(tp=8, weight_dtype="fp8"), shape)
    assert float(tep.communication) == float(pure_tp.communication)
    assert float(tep.attention) == float(pure_tp.attention)
    # DP attention over the same 8 GPUs, the 64 sequences 8 per replica: each replica's tokens are dispatched and
    # combined over the group, and a replica reads only its own sequences' latent KV, which TP cannot split
    dep = step_times(m, k, Layout(tp=1, ep=8, weight_dtype="fp8"), StepShape(decode=8.0, context=2048.0))
    routed = 8.0 * m.moe.experts_per_token * m.hidden_size * 2.0
    assert float(dep.communication) >= 2.0 * m.num_moe_layers * float(k.all_to_all(routed, 8))
    assert float(dep.attention) < 0.5 * float(tep.attention)


def test_mla_projections_are_the_low_rank_pairs_of_deepseek_v2(k):
    """DeepSeek-V3's attention projections hold 187M parameters per layer (q 7168x1536 + 1536x128x192, kv
    7168x576 + 512x128x256, o 128x128x7168): one token on one GPU reads those bytes in five GEMMs, not the
    latent dimension times every head (646M, what the model priced until 2026-12-03)."""
    from aitrinity.cost.operators import projection_time

    m = catalog.model("deepseek-v3")
    params = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert params == pytest.approx(187e6, rel=0.01)
    t = float(projection_time(m, k, Layout(tp=1, weight_dtype="fp8"), np.array(1.0)))
    per_byte = 1.0 / (k.memory_bandwidth_Bps * k.params.memory_efficiency)  # fp8: one byte per parameter
    assert params * per_byte < t < 646e6 * per_byte


def test_experts_split_over_the_whole_group_gather_the_replicas_tokens(k):
    """dp 2 replicas of tp 4, every expert over all 8 GPUs (ep 1): each MoE layer all-gathers the two replicas'
    tokens and reduce-scatters the outputs -- one all-reduce's traffic of both replicas' activations."""
    m = catalog.model("mixtral-8x7b")
    shape = StepShape(decode=32.0, context=1024.0)
    dp2 = step_times(m, k, Layout(tp=4, ep=1, attention_dp=2), shape)
    dp1 = step_times(m, k, Layout(tp=4), shape)
    want = m.num_moe_layers * float(k.all_reduce(32.0 * 2 * m.hidden_size * 2.0, 8))
    assert float(dp2.communication - dp1.communication) == pytest.approx(want)


def test_a_skewed_routing_slows_the_hottest_expert_rank_more_as_ep_grows(k):
    """Power-law expert popularity (aiconfigurator's default workload) loads one EP rank above the mean: by the
    measured fused-MoE ratio, 1.12x at EP 8 and 1.55x at EP 256 for alpha 1.01 (ROUTING_SKEW). A decode step that
    streams the touched experts' weights barely notices (the hottest rank touches about as many experts); a prefill
    step of many tokens per expert pays it in its expert GEMMs and its all-to-all."""
    from aitrinity.cost.operators import ROUTING_SKEW

    assert Layout(ep=8).skew == pytest.approx(0.976 + 0.059 * 3) and Layout(ep=8, routing="balanced").skew == 1.0
    assert Layout(ep=1).skew == 1.0 and Layout(ep=256, attention_dp=256).skew > Layout(ep=8).skew
    with pytest.raises(ValueError, match="routing 'zipf'"):
        Layout(routing="zipf")
    assert set(ROUTING_SKEW) == {"balanced", "power_law_1.01", "power_law_1.2"}
    m = catalog.model("deepseek-v3")

    def ratio(shape):
        skew = step_times(m, k, Layout(tp=1, ep=8, weight_dtype="fp8"), shape)
        flat = step_times(m, k, Layout(tp=1, ep=8, weight_dtype="fp8", routing="balanced"), shape)
        return float(skew.gemm / flat.gemm), float(skew.communication / flat.communication)

    decode_gemm, _ = ratio(StepShape(decode=4.0, context=2048.0))
    prefill_gemm, prefill_comm = ratio(StepShape(decode=0.0, context=1.0, prefill_seqs=1.0, prefill_len=8192.0))
    assert decode_gemm < 1.03 < prefill_gemm and prefill_comm > 1.05


def test_sparse_attention_reads_the_top_k_tokens_and_the_indexer_reads_them_all(k):
    """DeepSeek Sparse Attention (GLM-5, DeepSeek-V3.2): at 128k tokens of context a decode step's main attention
    reads 2,048 tokens' latent KV (576 bytes each in fp8), not 128k; the indexer reads every token's 128-byte fp8
    key. So the step reads about 128/576 + 2048/131072 = 0.24 of dense MLA's bytes. At 1k tokens, below the top-k,
    the indexer is pure overhead."""
    import json
    from importlib import resources

    from aitrinity.catalog.hf import from_hf_config
    from aitrinity.spec.model import MLASpec

    path = resources.files("aiconfigurator_core") / "model_configs" / "nvidia--GLM-5-NVFP4_config.json"
    m = from_hf_config(json.loads(path.read_text()), "glm-5")
    off = {"index_heads": None, "index_head_dim": None, "index_topk": None}
    dense = m.model_copy(update={"mla": m.mla.model_copy(update=off)})
    lay = Layout(tp=8, weight_dtype="fp8", kv_dtype="fp8", routing="balanced")

    def attention(model, ctx):
        return float(step_times(model, k, lay, StepShape(decode=64.0, context=ctx)).attention)

    assert 0.2 < attention(m, 131072.0) / attention(dense, 131072.0) < 0.3
    assert attention(m, 1024.0) > attention(dense, 1024.0)
    with pytest.raises(ValueError, match="come together"):
        MLASpec.model_validate({**m.mla.model_dump(), "index_topk": None})


def test_diagnose_prices_an_expert_group_across_nodes_on_the_scale_out_network():
    """The scenario's topology reaches the operator model: DeepSeek-R1 with EP 16 on two 8-GPU H200 nodes decodes
    slower than on one 16-GPU NVLink domain with the same GPUs and link (the all-to-all's far half crosses the NIC)."""
    from aitrinity import api
    from aitrinity.spec._base import validate
    from aitrinity.spec.scenario import Scenario

    def tpot(per_node: int) -> float:
        doc = {
            "name": "wide-ep",
            "system": {
                "device": "h200",
                "num_devices": 16,
                "devices_per_node": per_node,
                "inter_node_link": "infiniband-ndr",
            },
            "workload": {"model": "deepseek-r1", "serving": {"prompt_tokens": 1024, "output_tokens": 256, "batch": 64}},
            "plan": {"tp": 1, "ep": 16, "weight_dtype": "fp8"},
        }
        return api.estimate(api.resolve(validate(Scenario, doc))).serving.tpot_s

    assert tpot(8) > 1.3 * tpot(16)  # 102 ms against 60 ms on 2026-12-05


def test_the_cross_node_all_to_all_is_near_deepeps_measured_one():
    """DeepEP's README (deepseek-ai/DeepEP, "Low-latency kernels with pure RDMA"): on H800 with a 400 Gb/s CX7 NIC per
    GPU, 128 tokens per rank, hidden 7168, top-8 experts, EP 16 over two nodes, the BF16 combine takes 195 us (the FP8
    dispatch 118 us). The scale-out all-to-all of the same bf16 payload over an NDR link comes within 20% of it."""
    from aitrinity.cost.operators import ScaleOut

    k = silicon.roofline(catalog.device("h100-sxm"))
    out = ScaleOut.over(8, catalog.link("infiniband-ndr"))
    payload = np.array(128 * 8 * 7168 * 2.0)  # uniform routing, as DeepEP's test draws it
    combine = float(out.all_to_all(k, payload, 16))
    assert combine == pytest.approx(195e-6, rel=0.20)
    assert float(out.all_to_all(k, payload / 2, 16)) == pytest.approx(118e-6, rel=0.30)  # fp8: half the bytes


def test_a_decode_step_runs_the_shared_expert_beside_the_routed_ones(k):
    """In a decode step (a CUDA graph) the shared expert runs on a second stream beside the router, dispatch, routed
    experts and combine (TensorRT-LLM's maybe_execute_in_parallel; aiconfigurator's OverlapOp): each MoE layer saves
    the shorter of the two. A step with a prompt in it runs them in turn; a MoE model without a shared expert
    (Mixtral) has nothing to overlap."""
    from aitrinity.cost.operators import mlp_time, shared_expert_time

    m, lay = catalog.model("deepseek-v3"), Layout(tp=1, ep=8, routing="balanced")
    decode = step_times(m, k, lay, StepShape(decode=16.0, context=2048.0))
    rows = np.array(16.0)
    shared = float(shared_expert_time(m, k, lay, rows))
    routed = float(mlp_time(m, k, lay, rows, moe_layer=True)) - shared
    a2a = decode.communication  # (the step's only collectives here are the MoE layers' dispatch and combine)
    per_layer_a2a = float(a2a) / m.num_moe_layers
    assert 0 < shared < routed + per_layer_a2a
    dense = float(mlp_time(m, k, lay, rows, moe_layer=False))
    head = float(k.gemm(rows, m.vocab_size, m.hidden_size, "bf16"))
    from aitrinity.cost.operators import projection_time

    want = m.num_layers * float(projection_time(m, k, lay, rows)) + m.num_dense_layers * dense
    want += m.num_moe_layers * routed + head  # the shared expert hidden behind the routed path
    assert float(decode.gemm) == pytest.approx(want)
    mixed = step_times(m, k, lay, StepShape(decode=15.0, context=2048.0, prefill_seqs=1.0, prefill_len=1.0))
    assert float(mixed.gemm) == pytest.approx(want + m.num_moe_layers * shared)  # the same 16 rows, in turn
    mixtral = catalog.model("mixtral-8x7b")
    assert float(shared_expert_time(mixtral, k, Layout(tp=1, ep=8), rows)) == 0.0


def test_context_parallel_prefill_splits_a_prompt_and_hides_its_ring_behind_the_attention(k):
    """Llama-3.1-405B, tp 8, a 128k-token prompt over cp 16 groups on 16 HGX nodes (Yang et al. 2024's layout): each
    rank runs 1/16 of the prompt's GEMMs (8k rows) and of its causal attention; the other ranks' K and V of each layer
    (15/16 of the prompt's, over InfiniBand) arrive while the rank attends, so nothing of the ring shows."""
    from aitrinity.cost.operators import ScaleOut

    m = catalog.model("llama-3.1-405b")
    ib = ScaleOut(8, 0.85 * 50e9, 5e-6)
    prompt = StepShape(decode=0.0, context=1.0, prefill_seqs=1.0, prefill_len=131072.0)
    one = step_times(m, k, Layout(tp=8, scale_out=ib), prompt)
    cp = step_times(m, k, Layout(tp=8, cp=16, scale_out=ib), prompt)
    eighth = step_times(m, k, Layout(tp=8, scale_out=ib), StepShape(0.0, 1.0, 1.0, 131072.0 / 16))
    assert float(cp.gemm) == pytest.approx(float(eighth.gemm))  # the rank's 8,192 rows
    assert float(cp.attention) == pytest.approx(float(one.attention) / 16)  # load-balanced causal attention
    assert float(cp.communication) == pytest.approx(float(eighth.communication))  # TP all-reduces only: ring hidden
    assert 14 < float(one.total) / float(cp.total) < 16
    # a short prompt cannot hide it: the ring shows as communication
    short = StepShape(decode=0.0, context=1.0, prefill_seqs=1.0, prefill_len=2048.0)
    cp_short = step_times(m, k, Layout(tp=8, cp=16, scale_out=ib), short)
    tp_short = step_times(m, k, Layout(tp=8, scale_out=ib), StepShape(0.0, 1.0, 1.0, 2048.0 / 16))
    assert float(cp_short.communication) > float(tp_short.communication)


def test_context_parallel_decode_attends_a_shard_of_each_context_and_merges_the_partials(k):
    """Decodes run every rank's projections and MLP (the weights are whole on each CP rank); each rank reads 1/cp of
    every context's KV, and the partial attention outputs of every layer are gathered across the group."""
    from aitrinity.cost.kv_pool import kv_capacity_tokens, kv_pool

    m = catalog.model("llama-3.1-70b")
    dec = StepShape(decode=8.0, context=131072.0)
    one = step_times(m, k, Layout(tp=8), dec)
    cp = step_times(m, k, Layout(tp=8, cp=4), dec)
    quarter = step_times(m, k, Layout(tp=8), StepShape(decode=8.0, context=131072.0 / 4))
    assert float(cp.gemm) == float(one.gemm)
    assert float(cp.attention) == pytest.approx(float(quarter.attention))
    partial = 8.0 * (64 / 8) * (2.0 * 128 + 4.0) * 4  # decodes x heads per TP rank x (bf16 output + fp32 lse) x cp
    merge = m.num_layers * float(k.all_to_all(partial, 4))
    assert float(cp.communication) == pytest.approx(float(one.communication) + merge)
    # and the replica of tp x cp GPUs holds cp times the KV tokens of one TP group
    pool = kv_pool("generic")
    dev = catalog.device("h100-sxm")
    base = kv_capacity_tokens(m, Layout(tp=8), dev.memory_capacity_bytes, pool)
    assert kv_capacity_tokens(m, Layout(tp=8, cp=4), dev.memory_capacity_bytes, pool) == pytest.approx(4 * base, abs=4)


def test_a_prompt_over_a_long_cached_prefix_passes_its_queries_round_not_the_cache(k):
    """Yang et al. 2024: pass-KV for a full prefill, pass-Q once the cached context dwarfs the new tokens -- the ring
    moves the smaller of the K and V of prefix + prompt and the prompt's queries and partial outputs."""
    from aitrinity.cost.operators import ScaleOut, attention_shape, context_parallel_time

    m = catalog.model("llama-3.1-70b")
    lay = Layout(tp=8, cp=4, scale_out=ScaleOut(8, 0.85 * 50e9, 5e-6))
    a, g, d = attention_shape(m, 8)
    one = np.ones(1)

    def ring(new: float, cached: float) -> float:
        step = StepShape(0 * one, 0 * one, one, new * one, cached * one)
        return float(context_parallel_time(m, k, lay, step, (a, g, d))[0])

    kv_per_token, q_per_token = 2 * g * d * 2.0, a * (2 * d * 2.0 + 4.0)
    assert q_per_token > kv_per_token  # GQA: a token's queries outweigh its K and V
    # a 512-token turn on a 256k-token cached conversation: the queries go round (4x less than the cache's K and V)
    assert 512 * q_per_token < (512 + 262144) * kv_per_token
    hidden = ring(512, 262144)
    far = 5e-6 + 512 * q_per_token * 3 / 4 / (0.85 * 50e9)  # each of the 4 groups on its own node
    assert hidden <= far


def test_ulysses_prefill_pays_its_all_to_alls_in_series_and_attends_a_split_of_the_heads(k):
    """cp_method ulysses: the rank's 1/cp of the prompt's tokens go through an all-to-all of their Q, K, V before the
    attention and of its output after -- in series (the attention needs them), unlike the ring that hides behind it --
    and the attention is the rank's 1/cp of the heads over the whole prompt: the same work as the ring's shard."""
    from aitrinity.cost.operators import ulysses_bytes

    m = catalog.model("llama-3.1-70b")
    prompt = StepShape(decode=0.0, context=1.0, prefill_seqs=1.0, prefill_len=65536.0)
    ring = step_times(m, k, Layout(tp=4, cp=2), prompt)
    uly = step_times(m, k, Layout(tp=4, cp=2, cp_method="ulysses"), prompt)
    shard = step_times(m, k, Layout(tp=4), StepShape(0.0, 1.0, 1.0, 65536.0 / 2))
    assert float(uly.attention) == pytest.approx(float(ring.attention)) and float(uly.gemm) == float(ring.gemm)
    qkv, back = ulysses_bytes(m, 16, 2, 65536.0 / 2)
    exchanged = m.num_layers * (k.all_to_all(qkv, 2) + k.all_to_all(back, 2))
    assert float(uly.communication) == pytest.approx(float(shard.communication) + float(exchanged))
    decode = StepShape(decode=8.0, context=65536.0)
    gathered = step_times(m, k, Layout(tp=4, cp=2, cp_method="ulysses"), decode)
    alone = step_times(m, k, Layout(tp=4), decode)
    assert float(gathered.communication) > float(alone.communication)  # the heads' outputs, every layer


def test_the_lm_head_runs_in_the_compute_dtype_unquantized():
    """The LM head (and a MoE router) ran in bf16 whatever the plan: on a profile where bf16 is 100x slower than fp32,
    an fp32 13M-parameter model's decode step was priced at 55 ms, 47 of them its 2,048 x 512 LM head. It runs in
    the plan's compute dtype, bf16 where that is a quantized one (fp8 weights keep a bf16 head)."""
    dev = catalog.device("h100-sxm")
    k = silicon.roofline(dev.model_copy(update={"peak_flops": {"bf16": 1e9, "fp32": 1e11}, "kernels": None}))
    tiny = catalog.model("llama-3.1-8b").model_copy(
        update={"num_layers": 1, "hidden_size": 512, "intermediate_size": 1376, "vocab_size": 2048}
    )
    step = StepShape(decode=np.array([1.0]), context=np.array([256.0]))

    def gemm(compute: str) -> float:
        lay = Layout(weight_dtype="fp32", kv_dtype="fp32", compute_dtype=compute)
        return float(step_times(tiny, k, lay, step).gemm[0])

    head_bf16 = float(k.gemm(np.array([1.0]), 2048, 512, "bf16")[0])
    head_fp32 = float(k.gemm(np.array([1.0]), 2048, 512, "fp32")[0])
    assert gemm("bf16") - gemm("fp32") == pytest.approx(head_bf16 - head_fp32)
    assert head_bf16 > 10 * head_fp32 and gemm("fp8") == gemm("bf16")
