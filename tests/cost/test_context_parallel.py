"""Context parallelism (issue 19, item 4): each sequence split over ``cp`` ranks -- exact ledger state."""

import pytest

from aitrinity import catalog
from aitrinity.cost.estimate import price_training_ledger
from aitrinity.cost.kernels import roofline
from aitrinity.cost.train_operators import MicroBatch, layer_times
from aitrinity.cost.training import cp_widths, training_ledger
from aitrinity.errors import SpecError
from aitrinity.spec.scenario import Plan, TrainingJob, check_plan
from tests.conftest import make_system

L8B = "llama-3.1-8b"
JOB = TrainingJob(seq_len=32768, global_batch=16)


def _ledger(plan: Plan, n: int, job: TrainingJob = JOB, per_node: int = 8):
    return training_ledger("cp", catalog.model(L8B), job, plan, make_system(n=n, per_node=per_node))


def _mem(ledger, category):
    return sum(i.bytes for i in ledger.memory if i.category == category)


def _traffic(ledger, purpose):
    return [t for t in ledger.phases[0].traffic if t.purpose.startswith(purpose)]


def test_a_cp_rank_holds_and_computes_its_share_of_the_sequence():
    """Same dp, tp, pp: with cp 4 on four times the devices each rank keeps a quarter of every activation and does
    a quarter of the FLOPs; the model's FLOPs and each rank's weights are unchanged."""
    one, four = _ledger(Plan(tp=2), n=4), _ledger(Plan(tp=2, cp=4), n=16)
    assert (one.parallelism.dp, four.parallelism.dp, four.parallelism.cp) == (2, 2, 4)
    assert _mem(four, "activations") == pytest.approx(_mem(one, "activations") / 4, rel=1e-12)
    assert _mem(four, "weights") == _mem(one, "weights")
    f1, f4 = one.phases[0].flops, four.phases[0].flops
    assert f4.forward == pytest.approx(f1.forward / 4, rel=1e-12)
    assert f4.model_total == f1.model_total
    assert four.phases[0].gemm_rows == one.phases[0].gemm_rows / 4
    [tp1], [tp4] = _traffic(one, "TP activations"), _traffic(four, "TP activations")
    assert tp4.bytes_per_device == pytest.approx(tp1.bytes_per_device / 4)  # a rank's tokens


def test_zero_shards_and_gradients_reduce_over_dp_times_cp():
    led = _ledger(Plan(tp=2, cp=4, zero=1), n=16)
    base = _ledger(Plan(tp=2, zero=1), n=4)
    assert _mem(led, "optimizer") == pytest.approx(_mem(base, "optimizer") / 4)
    [dp] = _traffic(led, "DP gradient all-reduce")
    assert dp.group_size == 8  # dp 2 x cp 4 replicas of the same weights


def test_ring_moves_the_sequences_keys_and_values_per_layer():
    """Forward an all-gather of the sequence's K and V, backward another and a reduce-scatter of their gradients
    (per layer per micro-batch); full recomputation gathers once more."""
    m = catalog.model(L8B)
    led = _ledger(Plan(tp=2, cp=4), n=16, per_node=4)
    mb = led.training.num_microbatches
    kv, _ = cp_widths(m, 2)
    assert kv == 2 * (m.kv_heads // 2) * m.dim_head
    gathered = 1 * JOB.seq_len * kv * 2  # b s (K + V) bf16
    [ag] = _traffic(led, "CP K/V all-gather")
    [rs] = _traffic(led, "CP K/V gradient reduce-scatter")
    assert ag.bytes_per_device == pytest.approx(m.num_layers * mb * 2 * 3 / 4 * gathered)
    assert rs.bytes_per_device == pytest.approx(m.num_layers * mb * 3 / 4 * gathered)
    assert ag.messages == m.num_layers * mb * 2 * 3 and ag.group_size == 4
    assert (ag.channel, rs.channel) == ("inter_node", "inter_node")  # 4 ranks 2 apart span 8 devices: 2 nodes of 4
    full = _traffic(_ledger(Plan(tp=2, cp=4, recompute="full"), n=16, per_node=4), "CP K/V all-gather")[0]
    assert full.bytes_per_device == pytest.approx(1.5 * ag.bytes_per_device)


def test_cp_group_inside_a_node_stays_on_nvlink():
    led = _ledger(Plan(tp=2, cp=4), n=16, per_node=8)
    assert {t.channel for t in _traffic(led, "CP ")} == {"intra_node"}


def test_ulysses_all_to_alls_each_ranks_tokens_of_q_k_v_and_output():
    m = catalog.model(L8B)
    led = _ledger(Plan(tp=2, cp=4, cp_method="ulysses"), n=16)
    mb = led.training.num_microbatches
    kv, qo = cp_widths(m, 2)
    per_rank = JOB.seq_len / 4 * (kv + qo) * 2
    [a2a] = _traffic(led, "CP Q/K/V/O all-to-all")
    assert a2a.bytes_per_device == pytest.approx(m.num_layers * mb * 2 * 3 / 4 * per_rank)
    assert not _traffic(led, "CP K/V")


def test_ulysses_repeats_kv_heads_a_cp_group_outnumbers():
    """Llama-3.1-8B at tp 8 keeps one KV head per TP rank; Ulysses over cp 4 hands each rank the KV head its query
    heads attend by repeating it 4 times before the all-to-all (the GQA scheme of Ulysses implementations), so the
    K / V part of the all-to-all is 4 heads wide, not 1; a group of 2 repeats it twice."""
    m = catalog.model(L8B)
    for cp in (2, 4):
        led = _ledger(Plan(tp=8, cp=cp, cp_method="ulysses"), n=8 * cp)
        mb = led.training.num_microbatches
        _, qo = cp_widths(m, 8)
        kv = 2.0 * cp * m.dim_head  # the one KV head of the rank, repeated cp times
        per_rank = JOB.seq_len / cp * (kv + qo) * 2
        [a2a] = _traffic(led, "CP Q/K/V/O all-to-all")
        assert a2a.bytes_per_device == pytest.approx(m.num_layers * mb * 2 * (cp - 1) / cp * per_rank)


def test_ulysses_training_needs_the_query_heads_to_split_and_the_kv_heads_to_split_or_repeat():
    """The query heads of a TP rank split over the CP group; its KV heads split or are repeated up to it, so one of
    their count and cp divides the other: 40 query / 8 KV heads (Qwen2.5-14B's) take cp 2, 4 and 8 -- and 40 with
    each KV head repeated 5 times -- but not cp 5 or 10 (8 KV heads cannot be spread over them evenly)."""
    from aitrinity.spec.scenario import ulysses_training_refusal

    m = catalog.model(L8B).model_copy(update={"num_attention_heads": 40, "num_kv_heads": 8, "hidden_size": 5120})
    assert [cp for cp in (2, 4, 5, 8, 10, 20, 40) if not ulysses_training_refusal(m, 1, cp)] == [2, 4, 8, 40]
    assert "8 KV heads" in ulysses_training_refusal(m, 1, 10)
    assert "query heads" in ulysses_training_refusal(m, 1, 3)
    with pytest.raises(SpecError, match=r"plan\.cp.*divisor or multiple of its 8 KV heads"):
        check_plan(Plan(cp=10, cp_method="ulysses"), m, make_system(n=10), training=True)
    assert check_plan(Plan(cp=8, cp_method="ulysses"), m, make_system(n=8), training=True) == 1


def test_attention_and_gemms_of_a_cp_rank():
    """The operator model: a rank's GEMMs run s/cp rows, its attention is 1/cp of the sequence's."""
    m, k = catalog.model(L8B), roofline(catalog.device("h100-sxm"))
    whole = MicroBatch(1, 32768, 0, False, True, "bf16")
    split = MicroBatch(1, 32768, 0, False, True, "bf16", context_parallel=4)
    a, b = layer_times(m, k, 1, 1, whole, False), layer_times(m, k, 1, 1, split, False)
    assert float(b.attention) == pytest.approx(float(a.attention) / 4, rel=1e-12)
    assert float(split.tokens) == 8192.0


def test_long_context_fits_with_cp_and_not_without():
    """What CP is for: the activations of 128k tokens of Llama-3.1-8B (no recomputation) do not fit an H100's memory
    at tp 8; split over 8 ranks they do, and the step is priced on the GPU operator model."""
    job = TrainingJob(seq_len=131072, global_batch=8)
    m, system = catalog.model(L8B), make_system(n=64, per_node=8)
    plan = Plan(tp=8, zero=1, sequence_parallel=True)
    assert not price_training_ledger(training_ledger("x", m, job, plan, system), m, plan, system).memory.fits
    with_cp = plan.model_copy(update={"cp": 8})
    est = price_training_ledger(training_ledger("x", m, job, with_cp, system), m, with_cp, system)
    assert est.memory.fits and est.training.step_time_s > 0


@pytest.mark.parametrize(
    ("plan", "job", "n", "match"),
    [
        (Plan(cp=3), TrainingJob(seq_len=4096, global_batch=8), 12, r"plan\.cp.*2 x cp chunks divide.*4096"),
        (Plan(cp=4), TrainingJob(seq_len=4096, global_batch=8), 6, r"system\.num_devices.*tp x cp x pp = 4"),
        (Plan(tp=8, cp=8, cp_method="ulysses"), JOB, 64, r"plan\.cp.*4 query heads per TP rank"),
    ],
)
def test_bad_context_parallel_layouts_are_refused_with_the_field(plan, job, n, match):
    with pytest.raises(SpecError, match=match):
        _ledger(plan, n=n, job=job)


def test_serving_takes_ring_and_ulysses_context_parallelism_and_refuses_the_rest():
    """Serving prices ring (pass-KV) and, where the heads divide, Ulysses CP on aggregated replicas without EP
    (tests/cost/test_serving.py); Llama 3's all-gathers are a training method, refused with the field named."""
    m = catalog.model(L8B)
    assert check_plan(Plan(cp=2), m, make_system(n=2), training=False) == 1
    assert check_plan(Plan(cp=2, cp_method="ulysses"), m, make_system(n=2), training=False) == 1
    with pytest.raises(SpecError, match=r"plan\.cp.*ring or ulysses"):
        check_plan(Plan(cp=2, cp_method="allgather"), m, make_system(n=2), training=False)


def test_llama_3s_allgather_moves_the_rings_bytes_in_series_with_the_kernels():
    """cp_method allgather (Dubey et al. 2024, §3.3.2: the all-gather "exposed in the critical path") moves the bytes
    the ring moves, but the operator model times them in the step: the step grows by their link time over every
    micro-batch slot, bubble included, where the ring's hid behind the kernels (max overlap); the breakdown names
    them."""
    system = make_system(n=32, per_node=4)  # cp 4 groups of tp 2 span two nodes: the gathers cross the network
    ring_plan, gather_plan = Plan(tp=2, cp=4), Plan(tp=2, cp=4, cp_method="allgather")
    ring, gather = _ledger(ring_plan, n=32, per_node=4), _ledger(gather_plan, n=32, per_node=4)
    moved = [sum(t.bytes_per_device for t in _traffic(x, "CP K/V")) for x in (ring, gather)]
    assert moved[0] == pytest.approx(moved[1]) and moved[0] > 0
    m = catalog.model(L8B)
    est_ring = price_training_ledger(ring, m, ring_plan, system)
    est_gather = price_training_ledger(gather, m, gather_plan, system)
    parts = {o.operator: o.time_s for o in est_gather.phases[0].operators}
    assert parts["cp_gather"] > 0 and "cp_gather" not in {o.operator for o in est_ring.phases[0].operators}
    # pp 1: no bubble to grow; the ring's bytes were hidden, the gathers' add to the step
    assert est_gather.training.step_time_s == pytest.approx(est_ring.training.step_time_s + parts["cp_gather"])
    with pytest.raises(SpecError, match="cp_method ring"):
        check_plan(gather_plan, m, make_system(n=8), training=False)  # serving runs the ring
