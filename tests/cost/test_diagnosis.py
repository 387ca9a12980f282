import pytest

from aitrinity import api, catalog
from aitrinity.cost.capacity import min_devices_serving, min_devices_training
from aitrinity.cost.diagnosis import diagnose
from aitrinity.cost.estimate import price
from aitrinity.cost.serving import serving_ledger
from aitrinity.cost.training import training_ledger
from aitrinity.spec.scenario import Plan, ServingJob, TrainingJob
from tests.conftest import make_system


def test_binding_resource_utilization_and_headroom():
    system = make_system(n=16)
    led = training_ledger(
        "t", catalog.model("llama-3.1-8b"), TrainingJob(seq_len=4096, global_batch=64), Plan(zero=2), system
    )
    d = diagnose(price(led, system))
    assert d.capacity.fits
    [ph] = d.phases
    times = {u.id: u.time_s for u in ph.uses}
    top = max(times, key=times.get)
    assert ph.binding == top
    assert ph.binding_label == next(u.resource for u in ph.uses if u.id == top)
    assert ph.time_if_free_s == pytest.approx(max(t for r, t in times.items() if r != top))
    assert ph.speedup_if_free == pytest.approx(ph.time_s / ph.time_if_free_s)
    assert all(0 <= u.utilization <= 1 for u in ph.uses)
    assert f"if {ph.binding_label} were free" in ph.sentence and "faster" in ph.sentence
    assert d.binding == ph.binding


def test_headroom_of_an_operator_model_phase_removes_the_binding_time_in_series():
    """The operator model runs its terms one after another: freeing compute removes its time and its
    share of the pipeline bubble (a number of stage slots), not everything but the next resource."""
    d = api.diagnose("llama-70b-training-h100")
    [ph] = d.phases
    est = d.estimate.phases[0]
    assert est.operators and ph.binding == "compute"
    compute = next(r.time_s for r in est.resources if r.resource == "compute")
    scale = est.time_s / (est.time_s - est.bubble_s)
    assert ph.time_if_free_s == pytest.approx(est.time_s - compute * scale)


def test_capacity_binds_when_nothing_fits():
    d = api.diagnose("trillion-param-training")
    assert not d.capacity.fits
    assert d.binding == "capacity:hbm" and d.binding_label == "capacity (hbm)"
    assert d.capacity.largest_category == "optimizer"
    assert str(d.capacity.min_devices) in d.verdict


@pytest.mark.parametrize("zero", [1, 3])
def test_min_devices_training_is_the_exact_boundary(zero):
    m = catalog.model("megatron-1t")
    job = TrainingJob(seq_len=2048, global_batch=3072)
    plan = Plan(tp=8, pp=16, zero=zero, recompute="full", sequence_parallel=True)
    system = make_system(n=128)
    n = min_devices_training(m, job, plan, system)
    assert n is not None and n % 128 == 0

    def fits(devices: int) -> bool:
        dp = devices // 128
        sized = make_system(n=devices)
        gb = dp * max(1, 3072 // dp)
        led = training_ledger("t", m, TrainingJob(seq_len=2048, global_batch=gb), plan, sized)
        return led.memory_bytes() <= sized.usable_memory_bytes

    assert fits(n)
    assert n == 128 or not fits(n - 128)


def test_min_devices_none_when_states_do_not_shard():
    m = catalog.model("megatron-1t")
    plan = Plan(tp=1, pp=1, zero=0)
    assert min_devices_training(m, TrainingJob(seq_len=2048, global_batch=64), plan, make_system(n=8)) is None


def test_min_devices_serving():
    m = catalog.model("llama-3.1-70b")
    job = ServingJob(prompt_tokens=8192, output_tokens=512, batch=8, mode="static")
    system = make_system(n=8)
    n = min_devices_serving(m, job, Plan(), system)
    assert n == 4  # 141 GB of weights need more than two 80 GB devices
    led = serving_ledger("s", m, job, Plan(tp=4), make_system(n=4))
    assert led.memory_bytes() <= system.usable_memory_bytes
    led2 = serving_ledger("s", m, job, Plan(tp=2), make_system(n=2))
    assert led2.memory_bytes() > system.usable_memory_bytes


def test_builtin_examples_tell_their_stories():
    train = api.diagnose("llama-70b-training-h100")
    assert train.capacity.fits and train.kind == "training"
    assert 0.3 < train.estimate.training.mfu < 0.75
    serve = api.diagnose("llama-70b-serving-long-context")
    items = {i.category: i.bytes for i in serve.estimate.memory.items}
    assert items["kv_cache"] > items["weights"]
    # decode steps carry the 32k prompts' prefill (their new tokens attend to the cached prefix too) and read a
    # KV cache 2.5x the weights: those two lead
    decode = {u.kind: u.time_s for u in serve.phases[1].uses}
    assert serve.phases[1].binding == "compute:interference"
    assert decode["memory_bandwidth"] > 0.8 * serve.phases[1].time_s * serve.phases[1].binding_share
    assert "KV cache" in serve.verdict


def test_unbounded_headroom_is_null_not_infinity():
    import json

    from aitrinity.cost.diagnosis import diagnose_phase
    from aitrinity.cost.estimate import PhaseEstimate, ResourceTime

    ph = PhaseEstimate(
        phase="decode_step",
        time_s=1.0,
        bubble_s=0.0,
        overlap="max",
        resources=[ResourceTime(id="compute", resource="compute", kind="compute", time_s=1.0, detail="")],
    )
    d = diagnose_phase(ph, 0.5)
    assert d.speedup_if_free is None and "unboundedly" in d.sentence
    json.dumps(d.model_dump(mode="json"), allow_nan=False)
