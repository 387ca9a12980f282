import pytest

from aitrinity import catalog
from aitrinity.cost.estimate import combine, price
from aitrinity.cost.serving import serving_ledger
from aitrinity.cost.training import training_ledger
from aitrinity.spec.hardware import Efficiency
from aitrinity.spec.scenario import Plan, ServingJob, TrainingJob
from tests.conftest import make_system


def test_overlap_models():
    assert combine([3.0, 1.0, 2.0], "max", 0.5) == 3.0
    assert combine([3.0, 1.0, 2.0], "sum", 0.5) == 6.0
    assert combine([3.0, 1.0, 2.0], "partial", 0.25) == pytest.approx(3.0 + 0.75 * 3.0)
    assert combine([], "max", 0.5) == 0.0


def _train(system, plan=None):
    m = catalog.model("llama-3.1-8b")
    led = training_ledger(
        "t", m, TrainingJob(seq_len=4096, global_batch=64), plan or Plan(flash_attention=False), system
    )
    return price(led, system)


def test_mfu_equals_compute_efficiency_when_compute_bound():
    system = make_system(n=8)
    est = _train(system)
    assert est.phases[0].resources[0].kind == "compute"
    assert max(est.phases[0].resources, key=lambda r: r.time_s).kind == "compute"
    assert est.training.mfu == pytest.approx(system.device.efficiency.compute)


def test_halving_flops_doubles_compute_bound_time_not_bandwidth_bound_time():
    fast = make_system(n=1)
    slow = make_system(n=1, efficiency=Efficiency(compute=0.35, memory=0.85))
    train_fast, train_slow = _train(fast), _train(slow)
    assert train_slow.training.step_time_s == pytest.approx(2 * train_fast.training.step_time_s)
    m = catalog.model("llama-3.1-8b")
    job = ServingJob(prompt_tokens=512, output_tokens=64, batch=1)
    dec_fast = price(serving_ledger("s", m, job, Plan(), fast), fast).phase("decode_step")
    dec_slow = price(serving_ledger("s", m, job, Plan(), slow), slow).phase("decode_step")
    assert dec_slow.time_s == pytest.approx(dec_fast.time_s)


def test_overlap_sum_adds_every_resource():
    system = make_system(n=16, overlap="sum")
    est = _train(system)
    ph = est.phases[0]
    assert ph.time_s == pytest.approx(sum(r.time_s for r in ph.resources) + ph.bubble_s)


def test_dollars_and_joules():
    system = make_system(n=8)
    est = _train(system)
    t = est.training.step_time_s
    assert est.training.usd_per_step == pytest.approx(2.99 * 8 * t / 3600)
    assert est.training.joules_per_step == pytest.approx(700 * 8 * t)
    assert est.training.joules_per_token == pytest.approx(700 * 8 * t / (64 * 4096))
    no_price = make_system(device="h200", n=8)
    assert _train(no_price).training.usd_per_step is None


def test_link_time_is_alpha_beta():
    system = make_system(n=16)
    est = _train(system, Plan())
    ph, led = est.phases[0], est.ledger.phases[0]
    [ib] = [r for r in ph.resources if "infiniband" in r.resource]
    link = system.inter_node_link
    traffic = [t for t in led.traffic if t.channel == "inter_node"]
    expected = sum(t.messages for t in traffic) * link.latency_s + sum(t.bytes_per_device for t in traffic) / (
        link.bandwidth_Bps * link.efficiency
    )
    assert ib.time_s == pytest.approx(expected)
