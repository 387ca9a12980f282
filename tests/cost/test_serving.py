import pytest

from aitrinity import catalog
from aitrinity.cost.estimate import price
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.cost.params import count
from aitrinity.cost.serving import max_batch, serving_ledger
from aitrinity.errors import SpecError
from aitrinity.spec.scenario import Plan, ServingJob
from tests.conftest import make_system


def _fits(m, plan, system, job, batch):
    led = serving_ledger("s", m, job.model_copy(update={"batch": batch}), plan, system)
    return led.memory_bytes() <= system.usable_memory_bytes


@pytest.mark.parametrize("name", ["llama-3.1-70b", "mixtral-8x7b", "mistral-7b", "deepseek-v3"])
def test_max_batch_is_the_exact_fit_boundary(name):
    m = catalog.model(name)
    system = make_system(n=8)
    plan = Plan(tp=8, ep=1)
    job = ServingJob(prompt_tokens=4096, output_tokens=512, mode="static")  # a batch held at once
    b = max_batch(m, plan, system, job)
    if b == 0:
        assert not _fits(m, plan, system, job, 1)
        return
    assert _fits(m, plan, system, job, b)
    assert not _fits(m, plan, system, job, b + 1)


def test_clients_beyond_what_fits_wait_for_a_kv_slot():
    """At fixed concurrency a server holds the requests that fit and the other clients wait: the ledger keeps
    ``max_batch`` requests in memory, and the TTFT adds the closed loop's wait for a slot, the steady state's own."""
    from aitrinity.cost.concurrency import steady_state
    from aitrinity.cost.estimate import price_serving_ledger
    from aitrinity.cost.kernels import roofline
    from aitrinity.cost.operators import Layout

    m, system, plan = catalog.model("qwen3-32b"), make_system(n=1), Plan()
    job = ServingJob(prompt_tokens=4096, output_tokens=512, batch=128)
    led = serving_ledger("s", m, job, plan, system)
    f = led.serving
    assert f.batch == 128 and 1 < f.max_batch < 128 and f.running == f.max_batch
    held = serving_ledger("s", m, job.model_copy(update={"batch": f.max_batch}), plan, system)
    assert led.memory_bytes() == held.memory_bytes() <= system.usable_memory_bytes
    est = price_serving_ledger(led, m, plan, job, system)
    assert est.memory.fits
    ss = steady_state(m, roofline(system.device), Layout(), 128, 4096, 512, kv_slots=f.max_batch)
    assert est.serving.ttft_s == pytest.approx(float(ss.ttft_s), rel=1e-12)
    slots = {r.id: r.time_s for r in est.phases[0].resources}["latency:kv_slots"]
    assert slots == pytest.approx(float(ss.slot_wait_s), rel=1e-12) and slots > 0.5 * est.serving.ttft_s
    # a server that cannot hold one request: no slot to wait for, it does not fit
    none = serving_ledger("s", m, job, plan, make_system(n=1, device="l40s"))
    assert none.serving.running == none.serving.max_batch == 0
    est = price_serving_ledger(none, m, plan, job, make_system(n=1, device="l40s"))
    assert not est.memory.fits and "latency:kv_slots" not in {r.id for r in est.phases[0].resources}
    # a static batch of 128 is held at once: it does not fit
    static = serving_ledger("s", m, job.model_copy(update={"mode": "static"}), plan, system)
    assert static.serving.running == 128 and static.memory_bytes() > system.usable_memory_bytes


def test_batch_max_uses_the_largest_batch():
    m = catalog.model("llama-3.1-8b")
    system = make_system(n=1)
    led = serving_ledger("s", m, ServingJob(prompt_tokens=2048, output_tokens=256, batch="max"), Plan(), system)
    assert led.serving.batch == led.serving.max_batch > 1


def test_long_context_decode_is_bound_by_memory_bandwidth_and_kv_outgrows_weights():
    m = catalog.model("llama-3.1-70b")
    system = make_system(n=8)
    led = serving_ledger("s", m, ServingJob(prompt_tokens=32768, output_tokens=1024, batch=32), Plan(tp=8), system)
    mem = {i.category: i.bytes for i in led.memory}
    assert mem["kv_cache"] > 2 * mem["weights"]
    dec = price(led, system).phase("decode_step")
    assert max(dec.resources, key=lambda r: r.time_s).kind == "memory_bandwidth"


def test_decode_reads_weights_and_the_whole_kv_cache():
    m = catalog.model("llama-3.1-8b")
    job = ServingJob(prompt_tokens=1000, output_tokens=200, batch=4)
    led = serving_ledger("s", m, job, Plan(), make_system(n=1))
    ctx = 1000 + 100
    expected = 2 * count(m).total + 4 * (ctx + 1) * kv_bytes_per_token(m, "bf16")
    assert led.phase("decode_step").hbm_bytes == pytest.approx(expected)


def test_moe_decode_reads_only_the_experts_it_touches():
    m = catalog.model("mixtral-8x7b")
    led = serving_ledger("s", m, ServingJob(prompt_tokens=10, output_tokens=2, batch=1), Plan(), make_system(n=1))
    pc = count(m)
    weights = 2 * (pc.non_expert + pc.routed_experts * 2 / 8)
    kv = 1 * (10 + 1 + 1) * kv_bytes_per_token(m, "bf16")
    assert led.phase("decode_step").hbm_bytes == pytest.approx(weights + kv)


def test_context_longer_than_the_model_is_rejected():
    m = catalog.model("llama-2-7b")
    with pytest.raises(SpecError) as e:
        serving_ledger("s", m, ServingJob(prompt_tokens=4000, output_tokens=200), Plan(), make_system(n=1))
    assert e.value.field == "workload.serving"


def test_context_parallel_serving_splits_a_prompt_and_shards_its_kv():
    """Serving with cp 4 groups of tp 8 (static batch): the prefill's FLOPs per device are 1/32 of the model's, each
    device holds 1/4 of every sequence's KV, every layer gathers the prompt's K and V from the other three groups
    (the ring's 3/4 of it, over InfiniBand: the groups sit on different nodes) and every decode step gathers the
    groups' partial attention outputs; the weights stay whole on each group."""
    m = catalog.model("llama-3.1-70b")
    job = ServingJob(mode="static", prompt_tokens=65536, output_tokens=256, batch=2)
    one = serving_ledger("s", m, job, Plan(tp=8), make_system(n=8))
    cp = serving_ledger("s", m, job, Plan(tp=8, cp=4), make_system(n=32))
    assert cp.parallelism.cp == 4 and cp.serving.replicas == 1
    pre, pre1 = cp.phase("prefill"), one.phase("prefill")
    assert pre.flops.forward == pytest.approx(pre1.flops.model_total / 32)
    mem, mem1 = ({i.category: i.bytes for i in x.memory} for x in (cp, one))
    assert mem["kv_cache"] == pytest.approx(mem1["kv_cache"] / 4) and mem["weights"] == mem1["weights"]
    [ring] = [t for t in pre.traffic if t.purpose.startswith("CP ring attention")]
    per_layer = 2 * 65536 * kv_bytes_per_token(m, "bf16") / 8 / m.num_layers  # K and V of a layer on a TP rank
    assert ring.bytes_per_device == pytest.approx(m.num_layers * per_layer * 3 / 4)
    assert ring.channel == "inter_node"
    [merge] = [t for t in cp.phase("decode_step").traffic if t.purpose.startswith("CP attention merge")]
    assert merge.bytes_per_device > 0
    # more sequences fit: the KV per device is a quarter
    assert cp.serving.max_batch > 3 * one.serving.max_batch


@pytest.mark.parametrize(
    ("plan", "why"),
    [
        (Plan(tp=8, cp=2, cp_method="ulysses"), "4 query heads and 1 KV heads per TP rank"),  # 8 KV heads / tp 8
        (Plan(tp=4, cp=2, cp_method="allgather"), "ring or ulysses"),
        (Plan(tp=4, ep=2, cp=2), "expert parallelism"),
    ],
)
def test_context_parallel_serving_refuses_what_it_does_not_price(plan, why):
    m = catalog.model("mixtral-8x7b")
    with pytest.raises(SpecError, match=why) as e:
        serving_ledger("s", m, ServingJob(prompt_tokens=4096, output_tokens=64, batch=1), plan, make_system(n=16))
    assert e.value.field == "plan.cp"


def test_ulysses_serving_exchanges_heads_and_shards_the_kv_by_head():
    """cp_method ulysses (DeepSpeed-Ulysses, Jacobs et al. 2023, §3.1): each layer of a prompt sends its ranks' Q, K
    and V to a split of the heads and the outputs back (two all-to-alls a layer, (cp-1)/cp of each buffer leaving);
    each rank keeps its heads' KV of every sequence, a 1/cp of it as with the ring; a decode gathers its heads'
    outputs. MLA's shared latent cannot be split by head (refused), nor fewer KV heads than CP ranks."""
    m = catalog.model("llama-3.1-70b")  # 64 query heads, 8 KV heads, head 128
    job = ServingJob(mode="static", prompt_tokens=65536, output_tokens=256, batch=2)
    ring = serving_ledger("s", m, job, Plan(tp=4, cp=2), make_system(n=8))
    uly = serving_ledger("s", m, job, Plan(tp=4, cp=2, cp_method="ulysses"), make_system(n=8))
    mem_r, mem_u = ({i.category: i.bytes for i in x.memory} for x in (ring, uly))
    assert mem_u["kv_cache"] == pytest.approx(mem_r["kv_cache"])  # 1/cp either way
    [a2a] = [t for t in uly.phase("prefill").traffic if t.purpose.startswith("CP Ulysses all-to-all")]
    tokens = 2 * 65536 / 2  # a rank's share of the batch's prompts
    qkv, back = tokens * (16 + 2 * 2) * 128 * 2, tokens * 16 * 128 * 2  # per TP rank: 16 query, 2 KV heads
    assert a2a.bytes_per_device == pytest.approx(m.num_layers * (qkv + back) / 2)  # (cp-1)/cp of each buffer
    assert not [t for t in uly.phase("prefill").traffic if t.purpose.startswith("CP ring")]
    [merge] = [t for t in uly.phase("decode_step").traffic if t.purpose.startswith("CP attention merge")]
    assert merge.bytes_per_device == pytest.approx(m.num_layers * 2 * 16 * 128 * 2 / 2)  # outputs, (cp-1)/cp
    for model, plan, why in (
        ("deepseek-v3", Plan(tp=8, cp=2, cp_method="ulysses"), "MLA model"),
        ("llama-3.1-70b", Plan(tp=4, cp=4, cp_method="ulysses"), "2 KV heads per TP rank"),
    ):
        with pytest.raises(SpecError, match=why):
            serving_ledger("s", catalog.model(model), job, plan, make_system(n=16))
