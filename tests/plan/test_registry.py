"""The exchange registry: one entry per technique, its quality cost, and what the planner and reports do
with it."""

import dataclasses
import typing
from typing import Literal

import pytest
from pydantic import Field

from aitrinity import api, catalog
from aitrinity.cost.serving import ServingEffects
from aitrinity.plan import registry
from aitrinity.plan.breakeven import report
from aitrinity.plan.exchanges import CATALOG, ExchangeInfo
from aitrinity.plan.registry import Exchange, Quality
from aitrinity.plan.search_serving import search_serving
from aitrinity.spec import exchanges as ex
from aitrinity.spec._base import Spec, validate
from aitrinity.spec.scenario import Plan, Scenario, ServingJob
from tests.conftest import make_system


def _union() -> tuple[type, ...]:
    return typing.get_args(typing.get_args(ex.ExchangeSpec)[0])


def test_every_plan_exchange_is_registered_with_its_spec_and_workload():
    for cls in _union():
        kind = typing.get_args(cls.model_fields["kind"].annotation)[0]
        x = registry.get(kind)
        assert x.spec is cls, kind
        assert x.workloads == (("training",) if kind in ex.TRAINING_ONLY else ("serving",)), kind


def test_every_registered_technique_names_its_pathway_and_source():
    kinds = [x.kind for x in registry.registered()]
    assert len(kinds) == len(set(kinds)) == len(CATALOG)
    for x in registry.registered():
        assert x.info.source and x.info.title and "->" in x.info.pathway, x.kind
        assert CATALOG[x.kind] is x.info
    assert {"tp", "pp", "zero", "recompute", "sequence-parallel", "edge-split"} <= set(kinds)
    assert [x.kind for x in registry.registered("edge")] == ["edge-split"]


def test_a_second_technique_of_a_kind_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("zero"))
    with pytest.raises(KeyError, match="no exchange"):
        registry.get("no-such-technique")


class ToyCodec(Spec):
    """A toy KV codec: KV crosses links at ``ratio`` of its bytes, for a small accuracy cost."""

    kind: Literal["toy-kv-codec"] = "toy-kv-codec"
    ratio: float = Field(gt=0, le=1)


def _toy_effect(x: ToyCodec, plan: Plan, fx: ServingEffects) -> tuple[Plan, ServingEffects]:
    return plan, dataclasses.replace(fx, kv_wire_scale=fx.kv_wire_scale * x.ratio)


TOY = Exchange(
    ExchangeInfo(
        "toy-kv-codec",
        "toy KV codec",
        "compute->bandwidth",
        "nothing",
        "KV bytes on a link",
        "kv_link",
        "below",
        "faster",
        "this test",
    ),
    ("serving",),
    ToyCodec,
    quality=lambda e: Quality(accuracy_drop=0.002, source="this test"),
    searched=True,
    serving_effect=_toy_effect,
    options=(ToyCodec(ratio=0.5),),
)

SERVING = {
    "name": "toy",
    "system": {"device": "h100-sxm", "num_devices": 8, "host_memory": "host-dram"},
    "workload": {"model": "llama-3.1-70b", "serving": {"prompt_tokens": 8192, "output_tokens": 256, "batch": 16}},
    "plan": {"exchanges": [{"kind": "prefix-cache", "hit_rate": 0.5, "tier": "host"}]},
}


@pytest.fixture
def toy():
    registry.register(TOY)
    yield TOY
    registry.unregister(TOY.kind)
    assert TOY.kind not in CATALOG


def test_a_technique_registered_from_a_test_is_priced_searched_explained_and_reported(toy):
    from aitrinity.cli import render
    from aitrinity.cost.estimate import price_serving_ledger
    from aitrinity.cost.serving import serving_ledger
    from aitrinity.plan.chain import serving_chain
    from aitrinity.plan.report import PlanReport

    r = api.resolve(validate(Scenario, SERVING))
    m, job, base, system = r.model, r.scenario.workload.serving, r.scenario.plan, r.system
    assert CATALOG["toy-kv-codec"].pathway == "compute->bandwidth"

    # priced: the scalar ledger and diagnose's estimate see its effect (the prefix cache's KV crosses the host link)
    with_toy = base.model_copy(update={"exchanges": [*base.exchanges, ToyCodec(ratio=0.5)]})

    def host_bytes(p):
        led = serving_ledger("s", m, job, p, system)
        return sum(t.bytes_per_device for ph in led.phases for t in ph.traffic if t.channel == "host"), led

    (plain, _), (halved, led) = host_bytes(base), host_bytes(with_toy)
    assert halved == pytest.approx(plain / 2)
    assert price_serving_ledger(led, m, with_toy, job, system).serving is not None

    # searched: every candidate with and without it, the same numbers as the scalar model
    res = search_serving(m, job, base, system)
    registry.unregister(toy.kind)
    plain_res = search_serving(m, job, base, system)
    registry.register(toy)
    assert res.evaluated == 2 * plain_res.evaluated
    toyed = [c for c in res.pareto if c.added]
    assert toyed, "halving the KV link bytes for 0.2% accuracy is on the frontier"
    for c in toyed:
        assert c.added == [{"kind": "toy-kv-codec", "ratio": 0.5}] and c.accuracy_drop == pytest.approx(0.002)
        assert "toy-kv-codec" in c.techniques
        plan = c.plan(base)
        row_job = job.model_copy(update={"batch": c.batch})
        est = price_serving_ledger(serving_ledger("s", m, row_job, plan, system), m, plan, row_job, system)
        assert est.serving.throughput_tokens_per_s == pytest.approx(c.throughput_tokens_per_s, rel=1e-9)

    # explained: the chain to a plan with it names its step and pathway
    chain = serving_chain(m, job, base, system, toyed[0])
    step = next(s for s in chain.steps if s.exchange == "toy-kv-codec")
    assert step.pathway == "compute->bandwidth" and "toy KV codec none -> toy-kv-codec(ratio=0.5)" in step.sentence
    assert "accuracy drop" in step.sentence

    # reported: the plan table and the JSON carry it
    rep = PlanReport(scenario="toy", kind="serving", search=res, chain=chain, min_devices=None)
    assert "toy-kv-codec" in render.plan(rep) and '"toy-kv-codec"' in rep.model_dump_json()


def test_quality_costs_combine_drops_add_and_step_factors_multiply():
    entries = [
        ex.WeightQuantization(kind="weight-quantization", dtype="int4"),
        ex.KVQuantization(kind="kv-quantization", dtype="int4"),
        ex.LocalSGD(kind="local-sgd", period=4, steps_factor=1.5),
        ex.GradientCompression(kind="gradient-compression", method="topk", steps_factor=1.2),
        ex.OptimizerOffload(kind="optimizer-offload"),
    ]
    q = registry.quality_of(entries)
    assert q.accuracy_drop == pytest.approx(0.02 + 0.01)
    assert q.steps_factor == pytest.approx(1.5 * 1.2)
    assert registry.quality_of([ex.WeightQuantization(kind="weight-quantization", dtype="fp8")]).free


def test_the_serving_search_keeps_to_the_accuracy_budget_and_reports_each_plans_loss():
    m = catalog.model("llama-3.1-70b")
    system = make_system(n=8, host_memory="host-dram")
    strict = search_serving(m, ServingJob(prompt_tokens=2048, output_tokens=256, batch=16), Plan(), system)
    loose = search_serving(
        m, ServingJob(prompt_tokens=2048, output_tokens=256, batch=16, max_accuracy_drop=0.05), Plan(), system
    )
    assert strict.feasible < loose.feasible
    assert any(r.reason == "accuracy drop above the budget" and r.count > 0 for r in strict.infeasible)
    for c in [*strict.top, *strict.pareto]:
        assert c.weight_quantization in ("none", "fp8") and c.accuracy_drop <= 0.01
    table = {"none": 0.0, "fp8": 0.0, "int8": 0.02, "int4": 0.02}
    lossy = [c for c in loose.pareto if c.weight_quantization in ("int8", "int4")]
    assert lossy, "with a 5% budget the frontier trades accuracy for memory"
    for c in loose.pareto:
        assert c.accuracy_drop == pytest.approx(table[c.weight_quantization])


LOCAL_SGD = {
    "name": "t",
    "system": {"device": "h100-sxm", "num_devices": 64, "inter_node_link": "ethernet-25g"},
    "workload": {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "global_batch": 256}},
    "plan": {"zero": 1, "exchanges": [{"kind": "local-sgd", "period": 4}]},
}


def _local_sgd(steps_factor: float):
    data = {
        **LOCAL_SGD,
        "plan": {"zero": 1, "exchanges": [{"kind": "local-sgd", "period": 4, "steps_factor": steps_factor}]},
    }
    r = api.resolve(validate(Scenario, data))
    return report(r.scenario, r.model, r.system, 0)


def test_local_sgd_pays_off_only_while_its_statistical_cost_is_within_what_the_link_leaves_it():
    free = _local_sgd(1.0)
    assert free.pays_off and "none assumed" in free.sentence
    afford = free.time_per_unit_without_s / free.time_per_unit_with_s
    assert afford > 1.0 and f"{afford:.2f}x" in free.sentence
    within, beyond = _local_sgd(afford * 0.95), _local_sgd(afford * 1.05)
    assert within.pays_off and not beyond.pays_off
    # a statistical cost lowers the bandwidth below which local SGD pays off
    assert within.threshold_Bps is not None and within.current_Bps < within.threshold_Bps
    assert free.threshold_Bps is None or within.threshold_Bps < free.threshold_Bps
    # period 4 can save at most 4x the synchronisation: a cost beyond what today's link leaves it may still pay
    # on a slower link, or (as here, where the link already binds) on none at all
    assert beyond.threshold_Bps is None or beyond.threshold_Bps < beyond.current_Bps
    assert within.steps_factor == pytest.approx(afford * 0.95)


def test_what_a_plan_uses_is_read_from_the_registry():
    plan = Plan(
        tp=2,
        pp=1,
        zero=1,
        recompute="selective",
        sequence_parallel=True,
        micro_batch=4,
        exchanges=[ex.GradientCompression(kind="gradient-compression", method="int8")],
    )
    assert registry.used_by(plan, "training") == [
        "tp",
        "gradient-compression",
        "recompute",
        "sequence-parallel",
        "zero",
    ]
    serving = Plan(tp=1, exchanges=[ex.KVQuantization(kind="kv-quantization", dtype="fp8")])
    assert registry.used_by(serving, "serving") == ["kv-quantization"]


class ToySparsifier(Spec):
    """A toy gradient sparsifier: sends ``keep`` of the gradient bytes, needing ``steps`` times the steps."""

    kind: Literal["toy-sparsifier"] = "toy-sparsifier"
    keep: float = Field(gt=0, le=1)
    steps: float = Field(default=1.0, ge=1.0)


def _toy_sync(x: ToySparsifier, sync):
    return dataclasses.replace(sync, bytes_per_element=sync.bytes_per_element * x.keep)


TOY_TRAINING = Exchange(
    ExchangeInfo(
        "toy-sparsifier",
        "toy gradient sparsifier",
        "compute->bandwidth",
        "statistical efficiency",
        "data-parallel link bytes",
        "dp_link",
        "below",
        "faster",
        "this test",
    ),
    ("training",),
    ToySparsifier,
    quality=lambda e: Quality(steps_factor=e.steps, source="this test"),
    searched=True,
    sync_effect=_toy_sync,
    options=(ToySparsifier(keep=0.1, steps=1.05),),
)

TRAIN = {
    "name": "toy-train",
    "system": {"device": "h100-sxm", "num_devices": 64, "inter_node_link": "ethernet-25g"},
    "workload": {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "global_batch": 256}},
    "plan": {"zero": 1},
}


def test_a_training_technique_registered_from_a_test_is_priced_searched_explained_and_reported():
    from aitrinity.cli import render
    from aitrinity.cost.estimate import price_training_ledger
    from aitrinity.cost.training import training_ledger
    from aitrinity.plan.chain import training_chain
    from aitrinity.plan.report import PlanReport
    from aitrinity.plan.search import Space, search_training

    SMALL_SPACE = Space.of(
        {"micro-batch": (1, 2), "zero": (0, 1), "virtual-stages": (1,), "activation-offload": (0.0,)}
    )

    r = api.resolve(validate(Scenario, TRAIN))
    m, job, base, system = r.model, r.scenario.workload.training, r.scenario.plan, r.system
    plain_res = search_training(m, job, base, system, space=SMALL_SPACE)
    registry.register(TOY_TRAINING)
    try:
        # priced: the scalar ledger sends a tenth of the gradient bytes
        with_toy = base.model_copy(update={"exchanges": [ToySparsifier(keep=0.1)]})

        def dp_bytes(p):
            led = training_ledger("t", m, job, p, system)
            return sum(t.bytes_per_device for t in led.phases[0].traffic if "DP gradient" in t.purpose)

        assert dp_bytes(with_toy) == pytest.approx(dp_bytes(base) * 0.1)
        # searched: every candidate with and without it; its rows re-price to the same step time
        res = search_training(m, job, base, system, space=SMALL_SPACE)
        assert res.evaluated == 2 * plain_res.evaluated
        toyed = [c for c in res.pareto if c.added]
        assert toyed, "a tenth of the gradient bytes is on the frontier (bytes moved)"
        for c in toyed:
            assert c.added == [{"kind": "toy-sparsifier", "keep": 0.1, "steps": 1.05}]
            plan = c.plan(base)
            est = price_training_ledger(training_ledger("t", m, job, plan, system), m, plan, system)
            assert est.training.step_time_s == pytest.approx(c.step_time_s, rel=1e-9)
        # explained and reported
        chain = training_chain(m, job, base, system, toyed[0])
        step = next(s for s in chain.steps if s.exchange == "toy-sparsifier")
        assert (
            step.pathway == "compute->bandwidth" and "toy gradient sparsifier none -> toy-sparsifier" in step.sentence
        )
        rep = PlanReport(scenario="toy", kind="training", search=res, chain=chain, min_devices=None)
        assert "toy-sparsifier" in render.plan(rep)
    finally:
        registry.unregister(TOY_TRAINING.kind)


def test_a_statistical_cost_is_paid_in_the_ranking():
    """The ranking is by time to the same loss: the sparsifier fills most of the top 50 when it costs no extra
    steps, and none of it when it needs five times the steps."""
    from aitrinity.plan.search import Space, search_training

    space = Space.of({"micro-batch": (1, 2), "zero": (0, 1), "virtual-stages": (1,), "activation-offload": (0.0,)})
    r = api.resolve(validate(Scenario, TRAIN))
    in_top = {}
    for steps in (1.0, 5.0):
        toy = dataclasses.replace(TOY_TRAINING, options=(ToySparsifier(keep=0.1, steps=steps),))
        registry.register(toy)
        try:
            w = r.scenario.workload.training
            res = search_training(r.model, w, r.scenario.plan, r.system, top=50, space=space)
            in_top[steps] = sum(1 for c in res.top if c.added)
        finally:
            registry.unregister(toy.kind)
    assert in_top[1.0] > 25 and in_top[5.0] == 0


def test_choices_are_a_technique_s_fixed_values():
    """What a Controller may switch between comes from the registry (the DDP hook's `auto` options do)."""
    from aitrinity.systems.ddp.worker import AUTO_OPTIONS, NOT_SWITCHED

    methods = registry.choices("gradient-compression", "method")
    assert "int8" in methods and "powersgd" in methods
    assert ("none", *(m for m in methods if m not in NOT_SWITCHED)) == AUTO_OPTIONS
    with pytest.raises(KeyError):
        registry.choices("gradient-compression", "density")  # a number, not a choice
    with pytest.raises(KeyError):
        registry.choices("gradient-compression", "nope")


@pytest.mark.parametrize("with_move", [True, False], ids=["given move", "no move"])
def test_a_registered_technique_the_scenario_gives_is_a_chain_step_with_a_move_and_kept_without_one(with_move):
    """The chain enumerates the registry's moves: a technique registered with one is a step of its own under its words;
    one registered without a move (and without options) stays in every state, so the chain still ends at the plan."""
    from aitrinity.plan.chain import serving_chain

    def hits(x: ToyCodec, plan: Plan, fx: ServingEffects) -> tuple[Plan, ServingEffects]:  # an effect that counts
        return plan, dataclasses.replace(fx, prefix_hit=0.9)

    given = dataclasses.replace(
        TOY,
        searched=False,
        options=(),
        serving_effect=hits,
        move=registry.given_move("toy-kv-codec", "toy codec", 50) if with_move else None,
    )
    registry.register(given)
    try:
        r = api.resolve(validate(Scenario, SERVING))
        m, job, system = r.model, r.scenario.workload.serving, r.system
        base = registry.with_added(r.scenario.plan, [ToyCodec(ratio=0.5)])
        best = search_serving(m, job, base, system).best
        assert best is not None
        chain = serving_chain(m, job, base, system, best)
        toy_steps = [s for s in chain.steps if s.exchange == "toy-kv-codec"]
        assert len(toy_steps) == with_move
        if with_move:
            assert "toy codec False -> True" in toy_steps[0].sentence
        assert chain.steps[-1].score_after == pytest.approx(1.0 / best.throughput_tokens_per_s, rel=1e-9)
    finally:
        registry.unregister(given.kind)
