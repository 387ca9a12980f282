"""Property: over random scenarios, every plan the search returns is feasible under the scalar cost model."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aitrinity import catalog
from aitrinity.cost.estimate import price_serving_ledger, price_training_ledger
from aitrinity.cost.serving import serving_ledger
from aitrinity.cost.training import training_ledger
from aitrinity.plan.search import Space, search_training
from aitrinity.plan.search_serving import search_serving
from aitrinity.spec.scenario import Plan, ServingJob, TrainingJob
from tests.conftest import make_system

MODELS = ["llama-3.1-8b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "opt-13b"]
SMALL = Space.of(
    {"micro-batch": (1, 2, 4), "zero": (0, 1, 2, 3), "virtual-stages": (1, 2), "activation-offload": (0.0, 1.0)}
)
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fits(est) -> bool:
    return est.memory.fits and all(t.fits for t in est.lower_tiers)


@SETTINGS
@given(
    st.sampled_from(MODELS),
    st.sampled_from([4, 8, 16]),
    st.sampled_from(["h100-sxm", "a100-40gb-sxm", "l4"]),
    st.booleans(),
    st.sampled_from([1024, 4096]),
    st.integers(1, 8),
)
def test_training_plans_returned_are_feasible(name, n, device, host, seq, k):
    m = catalog.model(name)
    system = make_system(device=device, n=n, host_memory="host-dram" if host else None)
    job = TrainingJob(seq_len=min(seq, m.max_seq_len), global_batch=n * k)
    res = search_training(m, job, Plan(), system, top=3, space=SMALL)
    for c in [*res.top, *res.pareto[:5]]:
        plan = c.plan(Plan())
        est = price_training_ledger(training_ledger("p", m, job, plan, system), m, plan, system)
        assert _fits(est)
        assert abs(est.training.step_time_s / c.step_time_s - 1) < 1e-9


@SETTINGS
@given(
    st.sampled_from(MODELS),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from(["h100-sxm", "l40s"]),
    st.booleans(),
    st.integers(128, 4096),
    st.integers(16, 512),
)
def test_serving_plans_returned_are_feasible(name, n, device, host, prompt, out):
    m = catalog.model(name)
    system = make_system(device=device, n=n, host_memory="host-dram" if host else None)
    job = ServingJob(prompt_tokens=min(prompt, m.max_seq_len - out), output_tokens=out, batch=4)
    res = search_serving(m, job, Plan(), system, "throughput", top=3)
    for c in [*res.top, *res.pareto[:5]]:
        row_job, plan = job.model_copy(update={"batch": c.batch}), c.plan(Plan())
        est = price_serving_ledger(serving_ledger("s", m, row_job, plan, system), m, plan, row_job, system)
        assert _fits(est)
        assert abs(est.serving.throughput_tokens_per_s / c.throughput_tokens_per_s - 1) < 1e-9


def test_jobs_longer_than_the_model_are_rejected_like_the_scalar_path():
    import pytest

    from aitrinity.errors import SpecError

    m = catalog.model("opt-13b")
    with pytest.raises(SpecError) as e:
        search_training(m, TrainingJob(seq_len=4096, global_batch=8), Plan(), make_system(n=8), space=SMALL)
    assert e.value.field == "workload.training.seq_len"
    with pytest.raises(SpecError):
        search_serving(m, ServingJob(prompt_tokens=2000, output_tokens=100), Plan(), make_system(n=1))
