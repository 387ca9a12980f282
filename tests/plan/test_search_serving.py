import dataclasses

import numpy as np
import pytest

from aitrinity import catalog
from aitrinity.cost.estimate import price_serving_ledger
from aitrinity.cost.serving import serving_ledger
from aitrinity.plan.search_serving import search_serving
from aitrinity.spec.scenario import Plan, ServingJob
from tests.conftest import make_system


def _values(kind):
    """The values the search tries for one of its dimensions (declared by the technique's module)."""
    from aitrinity.plan import registry

    return registry.get(kind).dimension.values


def test_every_returned_serving_plan_is_feasible_under_the_scalar_model():
    m = catalog.model("llama-3.1-70b")
    job = ServingJob(prompt_tokens=8192, output_tokens=512, batch=16)
    system = make_system(n=8, host_memory="host-dram")
    res = search_serving(m, job, Plan(), system, "throughput", top=8, tpot_slo_s=0.05)
    assert res.best is not None
    for c in [*res.top, *res.pareto]:
        row_job, plan = job.model_copy(update={"batch": c.batch}), c.plan(Plan())
        est = price_serving_ledger(serving_ledger("s", m, row_job, plan, system), m, plan, row_job, system)
        assert est.memory.fits and all(t.fits for t in est.lower_tiers)
        assert est.serving.tpot_s <= 0.05
        assert est.serving.throughput_tokens_per_s == pytest.approx(c.throughput_tokens_per_s, rel=1e-9)
    # the best is the most throughput among feasible plans
    assert res.best.throughput_tokens_per_s == max(c.throughput_tokens_per_s for c in res.pareto)


@pytest.mark.parametrize("objective", ["throughput", "latency", "cost", "energy"])
@pytest.mark.parametrize("budget", [0.01, 0.05])
def test_serving_search_equals_brute_force(objective, budget):
    from aitrinity.plan import registry
    from aitrinity.plan.vector_serving import KV_DTYPES, WEIGHT_DTYPES, row_plan

    m = catalog.model("llama-3.1-8b")
    job = ServingJob(prompt_tokens=2048, output_tokens=128, batch=4, max_accuracy_drop=budget)
    system = make_system(n=2, host_memory="host-dram")
    res = search_serving(m, job, Plan(), system, objective)
    best_key, best = None, None
    from aitrinity.plan.rows import quantize
    from aitrinity.plan.search import layouts

    for tp, pp in layouts(m, system, 1):
        for b in sorted({*_values("batch"), 4}):
            for f in _values("kv-offload"):
                for w in WEIGHT_DTYPES:
                    for k in KV_DTYPES:
                        from aitrinity.errors import SpecError

                        row_job, plan = (
                            job.model_copy(update={"batch": b}),
                            row_plan(Plan(), tp, pp, {"kv-offload": f, "weight-quantization": w, "kv-quantization": k}),
                        )
                        try:
                            led = serving_ledger("s", m, row_job, plan, system)
                        except SpecError:
                            continue
                        est = price_serving_ledger(led, m, plan, row_job, system)
                        if not (est.memory.fits and all(t.fits for t in est.lower_tiers)):
                            continue
                        if led.serving.running < b:  # a concurrency the planner proposes runs all its clients
                            continue
                        drop = registry.quality_of(plan.exchanges).accuracy_drop
                        if drop > job.max_accuracy_drop:
                            continue
                        s = est.serving
                        value = {
                            "throughput": -s.throughput_tokens_per_s,
                            "latency": s.request_latency_s,
                            "cost": s.usd_per_million_output_tokens,
                            "energy": s.joules_per_output_token,
                        }[objective]
                        simple = (f > 0) + (w != "none") + (k != "none") + tp * pp
                        key = (quantize(np.array(value))[()], drop, simple, quantize(np.array(led.memory_bytes()))[()])
                        if best_key is None or key < best_key:
                            best_key, best = key, (tp, pp, b, f, w, k)
    got = res.best
    assert (got.tp, got.pp, got.batch, got.kv_offload, got.weight_quantization, got.kv_quantization) == best


def test_prefix_cache_capacity_is_searched_from_the_trace():
    from functools import partial
    from pathlib import Path

    from aitrinity import api
    from aitrinity.spec._base import validate

    trace = Path(__file__).resolve().parents[2] / "data" / "traces" / "mooncake_conversation_trace.jsonl"
    m = catalog.model("llama-3.1-8b")
    job = ServingJob(prompt_tokens=8192, output_tokens=256, batch=8)
    system = make_system(n=2, host_memory="host-dram")
    base = validate(Plan, {"exchanges": [{"kind": "prefix-cache", "tier": "host", "trace": str(trace)}]})
    res = search_serving(
        m, job, base, system, "throughput", top=5, prefix_hit_rate=partial(api.replayed_hit_rate, trace)
    )
    caps = {c.prefix_capacity_bytes for c in res.pareto}
    assert len(caps) >= 2 and None not in caps
    for c in res.top:
        row_job, plan = job.model_copy(update={"batch": c.batch}), c.plan(base)
        est = price_serving_ledger(serving_ledger("s", m, row_job, plan, system), m, plan, row_job, system)
        assert est.memory.fits and all(t.fits for t in est.lower_tiers)
        assert est.serving.throughput_tokens_per_s == pytest.approx(c.throughput_tokens_per_s, rel=1e-9)
        assert 0 < c.prefix_hit_rate < 0.4


def test_a_tp_degree_with_no_plan_that_fits_is_reported_not_a_crash():
    """Llama-3.1-405B in fp8 on 8 x H100: at tp 1 and 2 no batch fits its weights, so the fixed-concurrency steady
    state has nothing to price at those TP degrees (it raised an internal error); the plans that come back use all
    eight GPUs for one replica."""
    m, system = catalog.model("llama-3.1-405b"), make_system("h100-sxm")
    job = ServingJob(prompt_tokens=2048, output_tokens=512, batch=16)
    res = search_serving(m, job, Plan(weight_dtype="fp8", kv_dtype="fp8"), system)
    assert res.feasible > 0 and {c.tp * c.pp for c in res.top} == {8}
    assert any(r.reason == "device memory" and r.count > 0 for r in res.infeasible)


def test_a_moe_model_is_searched_over_expert_parallel_degrees_too():
    """DeepSeek-R1 on 8 x H200: every layout is tried with each EP degree its replicas allow (attention data
    parallel x expert parallel, as SGLang and TensorRT-LLM serve DeepSeek), and a chosen EP plan prices as the
    one-plan path prices it."""
    m, system = catalog.model("deepseek-r1"), make_system("h200")
    job = ServingJob(prompt_tokens=2048, output_tokens=512, batch=16)
    base = Plan(weight_dtype="fp8", kv_dtype="fp8")
    res = search_serving(m, job, base, system, pareto=False, top=50)
    eps = {(c.tp, c.ep) for c in res.top}
    assert any(ep > 1 for _, ep in eps) and any(ep == 1 for _, ep in eps)
    assert all(8 // c.tp % c.ep == 0 for c in res.top)  # EP spans replicas: it divides their number
    ep_plan = next(c for c in res.top if c.ep > 1)
    one = price_serving_ledger(
        serving_ledger("x", m, job.model_copy(update={"batch": ep_plan.batch}), ep_plan.plan(base), system),
        m,
        ep_plan.plan(base),
        job.model_copy(update={"batch": ep_plan.batch}),
        system,
    )
    assert one.serving.tpot_s == pytest.approx(ep_plan.tpot_s, rel=1e-9)


def test_a_concurrency_beyond_what_memory_holds_is_named_as_such():
    """The search proposes only concurrencies whose requests all fit at once; the others, of which one request fits,
    are counted apart from the layouts that do not fit at all -- a scenario asking for one is what diagnose prices
    with the wait for a KV slot."""

    m = catalog.model("qwen3-32b")
    job = ServingJob(prompt_tokens=4096, output_tokens=512, batch=8)
    system = make_system(n=1)
    res = search_serving(m, job, Plan(), system, "throughput")
    reasons = {r.reason: r.count for r in res.infeasible}
    assert reasons["more clients than device memory holds at once"] > 0
    assert res.best is not None and res.best.batch < max(_values("batch"))
    big = job.model_copy(update={"batch": max(_values("batch"))})
    led = serving_ledger("s", m, big, Plan(), system)
    assert 0 < led.serving.running < big.batch  # diagnose: runs what fits, the rest wait


def test_the_serving_search_tries_context_parallelism_for_long_prompts():
    """Context-parallel degrees are searched while a group keeps >= 8,192 tokens of a prompt (1, 2, 4, 8 for 64k on
    32 GPUs; only 1 for a 4k prompt), each candidate a replica of tp x cp x pp devices priced as `diagnose` prices the
    plan it returns."""
    from aitrinity.plan.search_serving import context_degrees

    m = catalog.model("llama-3.1-70b")
    system = make_system(n=32)
    job = ServingJob(prompt_tokens=65536, output_tokens=128, batch=4)
    assert context_degrees(job, Plan(), 32) == [1, 2, 4, 8]
    assert context_degrees(job.model_copy(update={"prompt_tokens": 4096}), Plan(), 32) == [1]
    assert context_degrees(job, Plan(ep=2), 32) == [1]  # CP serving is priced without EP
    res = search_serving(m, job, Plan(tp=8), system, top=200, pareto=False)
    assert {c.cp for c in res.top} > {1}
    assert all(c.replicas * c.tp * c.cp * c.pp == 32 for c in res.top)
    for c in (next(c for c in res.top if c.cp > 1), res.best):
        plan = c.plan(Plan(tp=8))
        assert plan.cp == c.cp and (f"cp{c.cp}" in c.layout) == (c.cp > 1)
        at = job.model_copy(update={"batch": c.batch})
        est = price_serving_ledger(serving_ledger("s", m, at, plan, system), m, plan, at, system)
        assert est.serving.ttft_s == pytest.approx(c.ttft_s, rel=1e-9)
        assert est.serving.throughput_tokens_per_s == pytest.approx(c.throughput_tokens_per_s, rel=1e-9)


def test_a_ulysses_scenario_is_searched_where_ulysses_can_split_the_heads_and_priced_as_diagnose_prices_it():
    """With cp_method ulysses the search keeps the CP degrees and TP layouts whose TP rank's heads the CP group can
    split (Llama-3.1-70B: 8 KV heads, so tp x cp <= 8), and prices each candidate as diagnose prices its plan."""
    from aitrinity.plan.search_serving import context_degrees

    m = catalog.model("llama-3.1-70b")
    system = make_system(n=32)
    job = ServingJob(prompt_tokens=65536, output_tokens=128, batch=4)
    base = Plan(tp=4, cp=2, cp_method="ulysses")
    long = job.model_copy(update={"prompt_tokens": 262144})  # 8,192 tokens a group up to cp 32
    assert context_degrees(long, Plan(), 64, m) == [1, 2, 4, 8, 16, 32]  # the ring splits any context
    assert context_degrees(long, base, 64, m) == [1, 2, 4, 8]  # tp 1 leaves 8 KV heads: no more than 8 ranks
    res = search_serving(m, job, base, system, top=300, pareto=False)
    ulysses = [c for c in res.top if c.cp > 1]
    assert ulysses and all(c.tp * c.cp <= 8 for c in ulysses)
    c = ulysses[0]
    plan = c.plan(base)
    assert plan.cp_method == "ulysses"
    at = job.model_copy(update={"batch": c.batch})
    est = price_serving_ledger(serving_ledger("s", m, at, plan, system), m, plan, at, system)
    assert est.serving.ttft_s == pytest.approx(c.ttft_s, rel=1e-9)


def test_kv_compression_with_nothing_to_compress_is_refused_row_by_row_as_diagnose_refuses_it():
    """The scenario's KV compression applies to every row, but compresses only KV that crosses a link: a row without
    KV offload (and no prefix cache outside HBM) is a plan diagnose refuses. The search priced those rows and could
    return one; its chain then found no reachable target and `trinity plan` failed."""
    from aitrinity import api
    from aitrinity.spec._base import validate
    from aitrinity.spec.scenario import Scenario

    sc = {
        "name": "kvc",
        "system": {"device": "h100-sxm", "num_devices": 2, "host_memory": "host-dram"},
        "workload": {"model": "llama-3.1-8b", "serving": {"prompt_tokens": 2048, "output_tokens": 256, "batch": 8}},
        "plan": {"exchanges": [{"kind": "kv-compression", "bits": 4}]},
    }
    rep = api.plan(validate(Scenario, sc), top=3)
    refused = {r.reason: r.count for r in rep.search.infeasible}
    assert refused[next(k for k in refused if k.startswith("KV compression with no KV crossing"))] > 0
    assert rep.search.best is not None and all(c.kv_offload > 0 for c in rep.search.top)
    assert rep.chain is not None and rep.chain.steps[-1].score_after == pytest.approx(
        1.0 / rep.search.best.throughput_tokens_per_s
    )


def test_each_serving_technique_module_declares_its_column_of_the_grid():
    """Batch, KV offload and the two quantizations are columns the technique modules declare: every non-layout column
    of the serving rows is one, a result is spelled by their labels and turned back into a plan by their moves, and
    a row's accuracy drop is what its technique's quality cost says of the entry."""
    from aitrinity.cost.serving import ServingRows
    from aitrinity.plan import registry
    from aitrinity.plan.vector_serving import LAYOUT_COLUMNS, dimensions

    assert [d.column for _, d in dimensions()] == [
        c for c in ServingRows.__dataclass_fields__ if c not in LAYOUT_COLUMNS
    ]
    m = catalog.model("llama-3.1-8b")
    job = ServingJob(prompt_tokens=2048, output_tokens=128, batch=3, max_accuracy_drop=1.0)
    res = search_serving(m, job, Plan(), make_system(n=2, host_memory="host-dram"), top=2000)
    assert 3 in {c.batch for c in res.top}  # the job's own batch joins the dimension's values
    c = next(c for c in res.top if c.weight_quantization == "int8" and c.kv_offload and c.kv_quantization == "fp8")
    assert c.techniques.split()[:5] == ["batch", str(c.batch), "kv-offload", f"{c.kv_offload:g}", "w:int8"]
    assert c.techniques.split()[5] == "kv:fp8"
    plan = c.plan(Plan())
    assert {x.kind for x in plan.exchanges} == {"kv-offload", "weight-quantization", "kv-quantization"}
    assert c.accuracy_drop == pytest.approx(registry.quality_of(plan.exchanges).accuracy_drop)
    assert c.accuracy_drop == pytest.approx(0.02)  # int8 weights (Kurtic et al. 2025); fp8 KV loses nothing


@pytest.mark.parametrize("objective", ["throughput", "latency", "cost"])
@pytest.mark.parametrize(
    ("prompt", "budget", "shuffled"),
    [(2048, 0.0, False), (2048, 0.05, False), (32768, 0.0, False), (2048, 0.0, True)],
)
def test_the_ranking_is_the_five_key_sort(objective, prompt, budget, shuffled, monkeypatch):
    """The search's ranking (its objective, accuracy drop, technique count, memory, search order; packed into one sort
    key where it can) is ``np.lexsort`` over the five keys."""
    from aitrinity.plan import registry
    from aitrinity.plan import search_serving as ss
    from aitrinity.plan.rows import quantize

    tables = []
    real = ss._complete
    monkeypatch.setattr(ss, "_complete", lambda *a: tables.append(real(*a)) or tables[-1])
    m = catalog.model("llama-3.1-70b")
    job = ServingJob(prompt_tokens=prompt, output_tokens=256, max_accuracy_drop=budget)
    search_serving(m, job, Plan(), make_system(n=16, host_memory="host-dram"), objective)
    (t,) = tables
    if shuffled:  # rows out of search order (as a search's parts of several CP degrees and options can be)
        t = dataclasses.replace(t, rank=np.random.default_rng(0).permutation(t.rank))
    idx, order = ss._ranking(t, objective, registry.option_combinations("serving"))
    p = t.priced
    score = {"throughput": -p.throughput_tokens_per_s, "latency": p.latency_s, "cost": p.usd_per_million_tokens}
    s = score[objective][idx]
    r = t.rows
    simple = r.tp[idx] * r.cp[idx] * r.pp[idx] + (r.ep[idx] > 1) + (r.cp[idx] > 1)
    for _, d in ss.dimensions():
        if d.plain is not None:
            simple = simple + (getattr(r, d.column)[idx] != d.code(d.plain))
    keys = (t.rank[idx], quantize(p.hbm_bytes[idx]), simple, t.drop[idx], quantize(s))
    assert len(idx) > 100
    assert order.tolist() == idx[np.lexsort(keys)].tolist()
