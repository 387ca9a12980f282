"""Exact-state tests of the training ledger: every byte and FLOP traced to its formula."""

import dataclasses

import pytest

from aitrinity import catalog
from aitrinity.cost.training import training_ledger
from aitrinity.errors import SpecError
from aitrinity.spec.scenario import Plan, TrainingJob
from tests.conftest import make_system

L8B = "llama-3.1-8b"


def _ledger(plan: Plan, n: int = 16, job: TrainingJob | None = None, model: str = L8B, per_node: int = 8):
    job = job or TrainingJob(seq_len=4096, global_batch=64)
    return training_ledger("t", catalog.model(model), job, plan, make_system(n=n, per_node=per_node))


def _traffic(ledger, purpose):
    [t] = [t for t in ledger.phases[0].traffic if t.purpose.startswith(purpose)]
    return t


def test_dp_ring_all_reduce_bytes_and_link():
    led = _ledger(Plan())
    psi = led.params_total
    t = _traffic(led, "DP gradient all-reduce")
    assert t.bytes_per_device == pytest.approx(2 * 15 / 16 * psi * 2)  # 2(n-1)/n x bf16 gradients
    assert t.messages == 2 * 15
    assert (t.channel, t.link) == ("inter_node", "infiniband-ndr")  # 16 ranks on 2 nodes


def test_zero3_moves_one_and_a_half_times_dp_bytes_with_one_micro_batch():
    """ZeRO paper §7.2: stage 3 communicates 3Ψ vs 2Ψ for DP (one micro-batch per step)."""
    job = TrainingJob(seq_len=4096, global_batch=16)
    dp = sum(t.bytes_per_device for t in _ledger(Plan(zero=0), job=job).phases[0].traffic)
    z3 = sum(t.bytes_per_device for t in _ledger(Plan(zero=3), job=job).phases[0].traffic)
    assert z3 == pytest.approx(1.5 * dp)


def test_tensor_parallel_all_reduces_per_layer():
    led = _ledger(Plan(tp=8), n=8)
    m = catalog.model(L8B)
    mb = led.training.num_microbatches
    payload = 1 * 4096 * m.hidden_size * 2
    t = _traffic(led, "TP activations")
    assert t.bytes_per_device == pytest.approx(m.num_layers * mb * 4 * 2 * 7 / 8 * payload)
    assert t.channel == "intra_node"
    full = _traffic(_ledger(Plan(tp=8, recompute="full"), n=8), "TP activations")
    assert full.bytes_per_device == pytest.approx(1.5 * t.bytes_per_device)  # 6 instead of 4 per layer


def test_tensor_parallel_larger_than_a_node_is_refused():
    """A TP group stays inside one node / NVLink domain (issue 19): one line naming the field."""
    with pytest.raises(SpecError, match=r"plan\.tp.*devices_per_node"):
        _ledger(Plan(tp=8), n=16, per_node=4)
    assert _traffic(_ledger(Plan(tp=4), n=16, per_node=4), "TP activations").channel == "intra_node"


def test_pipeline_point_to_point_and_bubble():
    led = _ledger(Plan(tp=2, pp=4), n=16)
    m = catalog.model(L8B)
    mb = led.training.num_microbatches
    assert mb == 64 // 2
    t = _traffic(led, "PP activations")
    assert t.bytes_per_device == pytest.approx(2 * mb * 4096 * m.hidden_size * 2 / 2)
    assert led.phases[0].pipeline_bubble_fraction == pytest.approx(3 / mb)
    # interleaved: each micro-batch crosses a stage boundary at every one of a device's v chunks (Narayanan et al.
    # 2021, §2.2.2), and the bubble shrinks v-fold
    led4 = _ledger(Plan(tp=2, pp=4, virtual_stages=4), n=16)
    assert _traffic(led4, "PP activations").bytes_per_device == pytest.approx(4 * t.bytes_per_device)
    assert led4.phases[0].pipeline_bubble_fraction == pytest.approx(3 / mb / 4)


def test_flops_split_and_recompute():
    base = _ledger(Plan(flash_attention=False)).phases[0].flops
    assert base.backward == pytest.approx(2 * base.forward)
    assert base.recompute == 0
    full = _ledger(Plan(recompute="full", flash_attention=False)).phases[0].flops
    assert full.recompute == pytest.approx(full.forward)
    assert full.model_total == base.model_total  # recomputation is not useful work
    # 16 balanced devices: model FLOPs per device = hardware FLOPs without recompute
    assert base.model_total / 16 == pytest.approx(base.hardware)


def test_zero_stages_shard_model_states():
    mem = {z: {i.category: i.bytes for i in _ledger(Plan(zero=z)).memory} for z in range(4)}
    psi = _ledger(Plan()).params_total
    assert mem[0]["optimizer"] == pytest.approx(12 * psi)
    assert mem[1]["optimizer"] == pytest.approx(12 * psi / 16)
    assert mem[2]["gradients"] == pytest.approx(2 * psi / 16)
    assert mem[3]["weights"] == pytest.approx(2 * psi / 16)
    assert mem[0]["activations"] == mem[3]["activations"]


def test_moe_expert_parallel_all_to_all():
    job = TrainingJob(seq_len=4096, global_batch=64)
    led = _ledger(Plan(ep=8, zero=1), n=16, job=job, model="mixtral-8x7b")
    t = _traffic(led, "EP token all-to-all")
    m = catalog.model("mixtral-8x7b")
    mb = led.training.num_microbatches
    assert t.bytes_per_device == pytest.approx(32 * mb * 4 * 7 / 8 * 4096 * 2 * m.hidden_size * 2)
    assert t.channel == "intra_node"


@pytest.mark.parametrize(
    ("plan", "n", "job", "field"),
    [
        (Plan(tp=3), 12, None, "plan.tp"),  # 32 heads
        (Plan(tp=8, pp=2), 24, None, "system.num_devices"),  # 16 does not divide 24 devices
        (Plan(pp=5, virtual_stages=8), 10, None, "plan.virtual_stages"),  # 32 layers: 40 chunks
        (Plan(pp=2, virtual_stages=18), 2, None, "plan.virtual_stages"),  # 36 chunks: 32 layers + embedding + loss
        (Plan(virtual_stages=2), 16, None, "plan.virtual_stages"),  # interleaving without a pipeline
        (Plan(pp=40), 40, None, "plan.pp"),  # more stages than layers
        (Plan(dp=4), 16, None, "plan.dp"),
        (Plan(ep=2), 16, None, "plan.ep"),  # dense model
        (Plan(sequence_parallel=True), 16, None, "plan.sequence_parallel"),
        (Plan(), 16, TrainingJob(seq_len=4096, global_batch=24), "workload.training.global_batch"),
        (Plan(), 16, TrainingJob(seq_len=10**6, global_batch=16), "workload.training.seq_len"),
    ],
)
def test_impossible_configs_name_the_field(plan, n, job, field):
    with pytest.raises(SpecError) as e:
        _ledger(plan, n=n, job=job)
    assert e.value.field == field
    assert "\n" not in str(e.value)


def test_uneven_pipeline_split_gives_the_middle_stages_the_extra_layers():
    """Llama 3 (Dubey et al. 2024, §3.3.2): 126 layers on 16 stages, one fewer on the first and the last."""
    from aitrinity.cost.training import stage_bounds

    sizes = [hi - lo for lo, hi in (stage_bounds(126, 16, s) for s in range(16))]
    assert sizes == [7] + [8] * 14 + [7]
    assert [stage_bounds(96, 8, s) for s in range(8)] == [(12 * s, 12 * s + 12) for s in range(8)]
    bounds = [stage_bounds(10, 3, s) for s in range(3)]
    assert bounds == [(0, 3), (3, 7), (7, 10)]
    led = training_ledger(
        "t",
        catalog.model("llama-3.1-405b"),
        TrainingJob(seq_len=8192, global_batch=2048),
        Plan(tp=8, pp=16, zero=1),
        make_system(n=8192),
    )
    assert led.parallelism.pp == 16
    # and interleaved as Meta ran it: 16 stages of 8 one-layer chunks, the first chunk the embedding alone and the
    # last the loss alone (32 layers + 2 = 34 = 2 x 17 chunks likewise)
    for name, pp, v, n in (("llama-3.1-405b", 16, 8, 8192), (L8B, 2, 17, 16)):
        job = TrainingJob(seq_len=8192, global_batch=2048)
        led = training_ledger("t", catalog.model(name), job, Plan(tp=8, pp=pp, virtual_stages=v), make_system(n=n))
        assert led.parallelism.pp == pp


def test_the_multi_token_prediction_module_trains_on_the_last_stage_among_its_layers():
    """DeepSeek-V3 trains one MTP module beside its 61 layers (report §2.2, D = 1): a block like its deepest (MoE)
    layer, split with the layers -- 62 blocks on 16 stages leave the last stage two of the model's layers and the
    module's -- plus the module's 2h x h projection and a second pass through the output head. Without the module the
    split, the FLOPs and the step are the model's alone; the published parameter count leaves the module out."""
    from aitrinity.cost.flops import layer_dense_flops, score_flops_per_query, token_flops
    from aitrinity.cost.params import count
    from aitrinity.cost.training import mtp_extra_flops, stage_layers, training_token_flops

    m = catalog.model("deepseek-v3")
    bare = m.model_copy(update={"mtp_layers": 0})
    assert m.mtp_layers == 1 and count(m).total == count(bare).total  # 671B either way
    with_mtp = [stage_layers(m, 16, st) for st in range(16)]
    without = [stage_layers(bare, 16, st) for st in range(16)]
    assert with_mtp[-1] == (0, 3) and without[-1] == (0, 3)  # 2 layers + the module's block, or 3 layers
    assert sum(d + e for d, e in with_mtp) == 62 and sum(d + e for d, e in without) == 61
    assert stage_layers(m, 1, 0) == (3, 59)  # one stage: the 58 MoE layers and the module's
    h, s = m.hidden_size, 4096
    module = layer_dense_flops(m, moe_layer=True).dense + score_flops_per_query(m, s) / m.num_layers
    assert mtp_extra_flops(m) == pytest.approx(2 * 2 * h * h + 2 * m.vocab_size * h)
    assert training_token_flops(m, s) == pytest.approx(
        token_flops(m).dense + score_flops_per_query(m, s) + module + mtp_extra_flops(m)
    )
    assert training_token_flops(bare, s) == token_flops(bare).dense + score_flops_per_query(bare, s)
    job, plan, system = TrainingJob(seq_len=s, global_batch=512), Plan(pp=16, ep=8), make_system(n=256)
    a, b = (training_ledger("t", x, job, plan, system).phases[0].flops for x in (m, bare))
    assert a.model_total / b.model_total == pytest.approx(training_token_flops(m, s) / training_token_flops(bare, s))
    assert a.model_total > b.model_total


@pytest.mark.parametrize(
    ("model", "pp", "n", "job"),
    [
        ("gpt-3-175b", 80, 1280, TrainingJob(seq_len=2048, global_batch=1536)),  # 96 layers over 80 stages: uneven
        ("deepseek-v3", 16, 256, TrainingJob(seq_len=4096, global_batch=512)),  # dense first layers, then MoE
        (L8B, 4, 64, TrainingJob(seq_len=4096, global_batch=4)),  # fewer micro-batches than stages
    ],
)
def test_the_peak_stage_is_found_among_the_candidates(monkeypatch, model, pp, n, job):
    """Pricing only the stages that can hold the peak (first, last, the first of each run of alike stages) gives
    exactly what pricing every stage gives, for every row of the planner's grid."""
    import numpy as np

    from aitrinity.cost import training
    from aitrinity.cost.effects import grad_sync
    from aitrinity.plan.search import DEFAULT_SPACE, _rows

    m = catalog.model(model)
    base = Plan(tp=8, pp=pp)
    rows, syncs = _rows(True, DEFAULT_SPACE), [grad_sync(m, base)]
    rows = dataclasses.replace(rows, compression=np.zeros(len(rows), dtype=np.int64))
    L = training.layout_constants(m, job, base, 8, pp, n // (8 * pp))
    assert len(training._peak_candidates(L)) < pp
    fast = training.columns(m, job, base, L, rows, syncs)
    monkeypatch.setattr(training, "_peak_candidates", lambda lc: np.arange(lc.pp))
    every = training.columns(m, job, base, L, rows, syncs)
    for f in ("weights", "gradients", "optimizer", "activations", "hbm_resident", "host_resident", "layers_peak"):
        assert np.array_equal(getattr(fast, f), getattr(every, f)), f
    assert np.array_equal(fast.hbm_bytes, every.hbm_bytes)


def test_distinct_rows_spread_back_to_every_row():
    """``Rows.distinct``: the combinations, spread back, are every row's values in the fields asked for, and differ
    from each other in them; the answer is cached, and rows taken from the grid (twice over) answer with its
    combinations."""
    import numpy as np

    from aitrinity.cost.training import PEAK_FIELDS
    from aitrinity.plan.search import DEFAULT_SPACE, _rows

    rows = _rows(True, DEFAULT_SPACE)
    combos, each = rows.distinct(PEAK_FIELDS)
    assert len(combos) < len(rows) and each.shape == (len(rows),)
    for f in PEAK_FIELDS:
        assert np.array_equal(getattr(combos, f)[each], getattr(rows, f)), f
    assert len({tuple(getattr(combos, f)[i] for f in PEAK_FIELDS) for i in range(len(combos))}) == len(combos)
    assert rows.distinct(PEAK_FIELDS)[0] is combos
    some = rows.take(np.arange(0, len(rows), 7)).take(np.array([5, 1, 3]))
    again, where = some.distinct(PEAK_FIELDS)
    assert again is combos
    for f in PEAK_FIELDS:
        assert np.array_equal(getattr(again, f)[where], getattr(some, f)), f


@pytest.mark.parametrize(("model", "pp", "n"), [(L8B, 4, 64), ("deepseek-v3", 16, 256)])
def test_the_peak_memory_of_distinct_rows_is_every_rows(monkeypatch, model, pp, n):
    """The peak memory priced once per distinct (micro-batch, ZeRO, recomputation, SP, virtual stages) and spread
    back is, element for element, the peak memory priced row by row."""
    import numpy as np

    from aitrinity.cost import training
    from aitrinity.cost.effects import grad_sync
    from aitrinity.plan.search import DEFAULT_SPACE, _rows

    m, job = catalog.model(model), TrainingJob(seq_len=4096, global_batch=512)
    base = Plan(tp=8, pp=pp)
    rows = _rows(True, DEFAULT_SPACE)
    rows = dataclasses.replace(rows, compression=np.zeros(len(rows), dtype=np.int64))
    L = training.layout_constants(m, job, base, 8, pp, n // (8 * pp))
    fast = training.columns(m, job, base, L, rows, [grad_sync(m, base)])
    monkeypatch.setattr(training.Rows, "distinct", lambda self, fields: (self, np.arange(len(self))))
    every = training.columns(m, job, base, L, rows, [grad_sync(m, base)])
    for f in ("weights", "gradients", "optimizer", "activations", "hbm_resident", "host_resident", "hbm_bytes"):
        assert np.array_equal(getattr(fast, f), getattr(every, f)), f
