"""One pricer, seen from the outside: for scenarios that carry the exchanges a search keeps as given, the best plan
`trinity plan` returns, diagnosed as a scenario of its own, gives the planner's numbers, and the chain that explains it
ends at it. (A consistency probe of this shape found the chain dropping a speculative decoder and the search
returning plans with KV compression that diagnose refuses.)"""

import pytest

from aitrinity import api
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Scenario

SERVING = {
    "none": [],
    "prefix cache in host memory": [{"kind": "prefix-cache", "hit_rate": 0.5, "tier": "host", "capacity": "200 GiB"}],
    "KV compression": [{"kind": "kv-compression", "bits": 4}],
    "weight streaming": [{"kind": "weight-streaming", "tier": "host", "fraction": 0.25}],
    "speculative decoding": [{"kind": "speculative-decoding", "draft_tokens": 2, "acceptance": 0.7}],
}
TRAINING = {
    "none": [],
    "local SGD": [{"kind": "local-sgd", "period": 4}],
    "optimizer offload": [{"kind": "optimizer-offload"}],
}


def _scenario(workload: dict, exchanges: list, n: int) -> Scenario:
    return validate(
        Scenario,
        {
            "name": "p",
            "system": {"device": "h100-sxm", "num_devices": n, "host_memory": "host-dram"},
            "workload": workload,
            "plan": {"exchanges": exchanges},
        },
    )


@pytest.mark.parametrize("mode", ["concurrency", "static"])
@pytest.mark.parametrize("exchanges", SERVING.values(), ids=SERVING.keys())
def test_serving_best_plan_diagnosed_and_chain_end_are_the_search(exchanges, mode):
    job = {"prompt_tokens": 2048, "output_tokens": 256, "batch": 8, "mode": mode}
    s = _scenario({"model": "llama-3.1-8b", "serving": job}, exchanges, 2)
    rep = api.plan(s, top=1)
    best = rep.search.best
    assert best is not None and rep.chain is not None
    serving = s.workload.serving.model_copy(update={"batch": best.batch})
    own = s.model_copy(
        update={"plan": best.plan(s.plan), "workload": s.workload.model_copy(update={"serving": serving})}
    )
    est = api.diagnose(own).estimate.serving
    assert (est.ttft_s, est.tpot_s) == pytest.approx((best.ttft_s, best.tpot_s), rel=1e-9)
    assert est.throughput_tokens_per_s == pytest.approx(best.throughput_tokens_per_s, rel=1e-9)
    assert rep.chain.steps[-1].score_after == pytest.approx(1.0 / best.throughput_tokens_per_s, rel=1e-9)


@pytest.mark.parametrize("exchanges", TRAINING.values(), ids=TRAINING.keys())
def test_training_best_plan_diagnosed_and_chain_end_are_the_search(exchanges):
    s = _scenario({"model": "llama-3.1-8b", "training": {"seq_len": 4096, "global_batch": 256}}, exchanges, 16)
    rep = api.plan(s, top=1)
    best = rep.search.best
    assert best is not None and rep.chain is not None
    est = api.diagnose(s.model_copy(update={"plan": best.plan(s.plan)})).estimate.training
    assert est.step_time_s == pytest.approx(best.step_time_s, rel=1e-9)
    assert rep.chain.steps[-1].score_after == pytest.approx(best.step_time_s, rel=1e-9)


@pytest.mark.parametrize("device", ["tpu-v6e", "tpu-v5p"])
def test_a_training_search_off_a_gpu_is_the_diagnosis(device):
    """Off a GPU, diagnose prices a training step by the phase roofline; `trinity plan` handed the search the catalog's
    operator kernels all the same, so its rows and the chain disagreed with diagnose by up to 18% on TPUs (found by
    tools/probe.py once it drew TPUs)."""
    s = validate(
        Scenario,
        {
            "name": "tpu",
            "system": {"device": device, "num_devices": 64},
            "workload": {"model": "llama-3.1-70b", "training": {"seq_len": 8192, "global_batch": 64}},
            "plan": {"exchanges": [{"kind": "optimizer-offload"}]},
        },
    )
    rep = api.plan(s, top=3)
    assert rep.search.top and rep.chain is not None
    for row in rep.search.top:
        est = api.diagnose(s.model_copy(update={"plan": row.plan(s.plan)})).estimate.training
        assert est.step_time_s == pytest.approx(row.step_time_s, rel=1e-9)
    assert rep.chain.steps[-1].score_after == pytest.approx(rep.search.top[0].step_time_s, rel=1e-9)


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_a_moe_search_on_an_engines_tables_is_the_diagnosis(engine):
    """DeepSeek-V3 on 16 B200s under SGLang (lock-step waves) raised an internal error in `trinity plan` (the waves'
    prompt length was one value beside the rows' per-layout shapes; found by tools/probe.py with engines)."""
    s = validate(
        Scenario,
        {
            "name": "p",
            "system": {"device": "b200", "num_devices": 16, "engine": engine},
            "workload": {"model": "deepseek-v3", "serving": {"prompt_tokens": 4096, "output_tokens": 512, "batch": 64}},
            "plan": {"exchanges": []},
        },
    )
    best = api.plan(s, top=1, pareto=False).search.best
    assert best is not None
    serving = s.workload.serving.model_copy(update={"batch": best.batch})
    own = s.model_copy(
        update={"plan": best.plan(s.plan), "workload": s.workload.model_copy(update={"serving": serving})}
    )
    est = api.diagnose(own).estimate.serving
    assert (est.ttft_s, est.tpot_s) == pytest.approx((best.ttft_s, best.tpot_s), rel=1e-9)
