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
    job = ServingJob(prompt_tokens=4096, output_tokens=512)
    b = max_batch(m, plan, system, job)
    if b == 0:
        assert not _fits(m, plan, system, job, 1)
        return
    assert _fits(m, plan, system, job, b)
    assert not _fits(m, plan, system, job, b + 1)


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
