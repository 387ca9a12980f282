"""The vectorized search returns what a brute-force loop over the scalar ledger returns."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitrinity import catalog
from aitrinity.cost.estimate import price_training_ledger
from aitrinity.cost.training import training_ledger
from aitrinity.errors import SpecError
from aitrinity.plan.rows import first_largest, pareto_indices, quantize, rank
from aitrinity.plan.search import Space, complexity, evaluate, search_training
from aitrinity.plan.vector_training import COMPRESSION, RECOMPUTE
from aitrinity.spec.scenario import Plan, TrainingJob
from tests.conftest import make_system

SMALL = Space.of({"micro-batch": (1, 2), "zero": (0, 1, 3), "virtual-stages": (1, 2), "activation-offload": (0.0, 1.0)})


def _brute(m, job, base, system, space, objective):
    """Every candidate through the scalar ledger, one at a time."""
    t = evaluate(m, job, base, system, space)
    out = []
    r = t.rows
    for i in range(len(r.zero)):
        ex = []
        if r.compression[i]:
            ex.append({"kind": "gradient-compression", "method": COMPRESSION[r.compression[i]], "rank": 4})
        if r.optimizer_offload[i]:
            ex.append({"kind": "optimizer-offload"})
        if r.activation_offload[i]:
            ex.append({"kind": "activation-offload", "fraction": float(r.activation_offload[i])})
        try:
            plan = Plan.model_validate(
                {
                    **base.model_dump(),
                    "tp": int(t.tp[i]),
                    "pp": int(t.pp[i]),
                    "ep": int(t.ep[i]),
                    "cp": int(t.cp[i]),
                    "micro_batch": int(r.micro_batch[i]),
                    "zero": int(r.zero[i]),
                    "recompute": RECOMPUTE[r.recompute[i]],
                    "sequence_parallel": bool(r.sequence_parallel[i]),
                    "exchanges": ex,
                    "virtual_stages": int(r.virtual_stages[i]),
                }
            )
            est = price_training_ledger(training_ledger("b", m, job, plan, system), m, plan, system)
        except SpecError:
            out.append(None)
            continue
        ok = est.memory.fits and all(x.fits for x in est.lower_tiers)
        tokens = job.global_batch * job.seq_len
        value = {
            "time": est.training.step_time_s,
            "cost": est.training.usd_per_step / tokens,
            "energy": est.training.joules_per_step / tokens,
        }[objective]
        out.append((value, est.memory.used_bytes) if ok else None)
    return t, out


CASES = {
    "dense": ("llama-3.1-8b", 4, TrainingJob(seq_len=4096, global_batch=32), SMALL),
    # a MoE model: the expert-parallel degree is searched too (1, 2, 4, 8 where dp allows)
    "moe": (
        "mixtral-8x7b",
        8,
        TrainingJob(seq_len=2048, global_batch=16),
        Space.of({"micro-batch": (1,), "zero": (1, 3)}),
    ),
    # a long sequence: context parallelism is searched too (cp 1, 2, 4: each rank keeps >= 8,192 tokens)
    "long": (
        "llama-3.1-8b",
        16,
        TrainingJob(seq_len=32768, global_batch=8),
        Space.of({"micro-batch": (1,), "zero": (0, 1), "virtual-stages": (1,), "activation-offload": (0.0,)}),
    ),
}


@pytest.mark.parametrize("case", ["dense", "moe", "long"])
@pytest.mark.parametrize("objective", ["time", "cost"])
def test_search_equals_brute_force(objective, case):
    name, n, job, space = CASES[case]
    m = catalog.model(name)
    system = make_system(n=n, host_memory="host-dram", inter_node_link="ethernet-25g")
    res = search_training(m, job, Plan(), system, objective, space=space)
    t, brute = _brute(m, job, Plan(), system, space, objective)
    if case == "moe":
        assert set(t.ep.tolist()) == {1, 2, 4, 8}
    assert set(t.cp.tolist()) == ({1, 2, 4} if case == "long" else {1})
    feasible = [i for i, v in enumerate(brute) if v is not None]
    assert res.feasible == len(feasible) and res.evaluated == len(brute)
    simple = complexity(t.rows) + (t.cp > 1)
    key = {
        i: (quantize(np.array(brute[i][0]))[()], int(simple[i]), quantize(np.array(brute[i][1]))[()], i)
        for i in feasible
    }
    best = min(feasible, key=key.__getitem__)
    b = res.best
    assert (
        b.tp,
        b.pp,
        b.ep,
        b.cp,
        b.micro_batch,
        b.zero,
        b.recompute,
        b.sequence_parallel,
        b.compression,
        b.optimizer_offload,
        b.virtual_stages,
        b.activation_offload,
    ) == (
        int(t.tp[best]),
        int(t.pp[best]),
        int(t.ep[best]),
        int(t.cp[best]),
        int(t.rows.micro_batch[best]),
        int(t.rows.zero[best]),
        RECOMPUTE[t.rows.recompute[best]],
        bool(t.rows.sequence_parallel[best]),
        COMPRESSION[t.rows.compression[best]],
        bool(t.rows.optimizer_offload[best]),
        int(t.rows.virtual_stages[best]),
        float(t.rows.activation_offload[best]),
    )
    assert b.step_time_s == pytest.approx(res.top[0].step_time_s)


def test_every_returned_plan_is_feasible_under_the_scalar_model():
    m = catalog.model("llama-3.1-70b")
    job = TrainingJob(seq_len=4096, global_batch=256)
    system = make_system(n=64, host_memory="host-dram")
    res = search_training(m, job, Plan(), system, top=10)
    assert res.best is not None and res.feasible > 0
    for choice in [*res.top, *res.pareto]:
        plan = choice.plan(Plan())
        est = price_training_ledger(training_ledger("p", m, job, plan, system), m, plan, system)
        assert est.memory.fits and all(x.fits for x in est.lower_tiers)
        assert est.training.step_time_s == pytest.approx(choice.step_time_s, rel=1e-9)


def test_pareto_front_is_non_dominated_and_complete():
    rng = np.random.default_rng(0)
    pts = rng.integers(0, 6, size=(300, 3)).astype(float)
    front = set(pareto_indices(pts))
    for i in range(len(pts)):
        dominated = any(np.all(pts[j] <= pts[i]) and np.any(pts[j] < pts[i]) for j in range(len(pts)))
        if dominated:
            assert i not in front
    # every non-dominated distinct point is represented
    for i in range(len(pts)):
        if not any(np.all(pts[j] <= pts[i]) and np.any(pts[j] < pts[i]) for j in range(len(pts))):
            assert any(np.all(pts[j] == pts[i]) for j in front)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(1, 400),
    cols=st.integers(1, 5),
    values=st.integers(1, 8),
    work=st.sampled_from([1, 50, 50_000]),
    strike_first=st.sampled_from([0, 50, 10_000]),
    seed=st.integers(0, 2**32 - 1),
)
def test_pareto_front_is_exactly_the_first_of_each_non_dominated_point(rows, cols, values, work, strike_first, seed):
    """Brute force: a row is on the front iff nothing dominates it and no earlier row equals it (many ties and
    duplicates with few distinct values; ``work`` from one head a pass to large blocks; the strictly dominated rows
    struck out first or not)."""
    rng = np.random.default_rng(seed)
    pts = rng.integers(0, values, size=(rows, cols)).astype(float) * rng.choice([1.0, 1e-9, 3e12])
    le = np.all(pts[None, :, :] <= pts[:, None, :], axis=2)  # [i, j]: j <= i everywhere
    eq = np.all(pts[None, :, :] == pts[:, None, :], axis=2)
    dominated = np.any(le & ~eq, axis=1)
    earlier_equal = np.any(np.tril(eq, -1), axis=1)
    assert pareto_indices(pts, work, strike_first) == [
        i for i in range(rows) if not dominated[i] and not earlier_equal[i]
    ]


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(0, 300),
    scale=st.sampled_from([1.0, 1e-9, 3e12]),
    values=st.integers(1, 6),
    most=st.sampled_from([3, 63, 64, 200]),
    signs=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_rank_orders_by_quantized_score_then_techniques_then_memory(rows, scale, values, most, signs, seed):
    """The ranking is ``np.lexsort`` over the quantized score, the technique count and the quantized memory, ties in
    candidate order -- with the first two packed into one key and without (a negative score, 64 or more techniques);
    scores with ties, zeros, values that differ below the quantization and in its last bit."""
    rng = np.random.default_rng(seed)
    score = rng.integers(0, values, rows) * scale * (1 + rng.choice([0.0, 1e-12, 2.0**-29, 1e-3], rows))
    if signs:
        score = score * rng.choice([-1.0, 1.0], rows)
    hbm = rng.integers(0, values, rows) * 2.0**30 * (1 + rng.choice([0.0, 1e-12], rows))
    simple = rng.integers(0, most, rows)
    assert rank(score, hbm, simple).tolist() == np.lexsort((quantize(hbm), simple, quantize(score))).tolist()


def test_infeasible_candidates_are_counted_by_the_constraint_they_failed():
    m = catalog.model("llama-3.1-70b")
    res = search_training(m, TrainingJob(seq_len=4096, global_batch=64), Plan(), make_system(n=8), space=SMALL)
    reasons = {r.reason: r.count for r in res.infeasible}
    assert reasons["device memory"] > 0
    assert sum(reasons.values()) + res.feasible == res.evaluated


def test_search_is_deterministic():
    m = catalog.model("llama-3.1-8b")
    job = TrainingJob(seq_len=4096, global_batch=32)
    system = make_system(n=8, host_memory="host-dram")
    a = search_training(m, job, Plan(), system, space=SMALL)
    b = search_training(m, job, Plan(), system, space=SMALL)
    assert a == b  # results carry no wall-clock fields: the same search gives the same data


def test_tensor_parallel_stays_inside_a_node():
    """The planner places TP inside one node / NVLink domain, as `diagnose` requires (issue 19): on 4 nodes of 4
    devices, 70B's heads would allow TP 8 to 64, none is tried, and every layout it returns prices."""
    from aitrinity.plan.search import layouts

    m = catalog.model("llama-3.1-70b")
    system = make_system(n=16, per_node=4)
    found = layouts(m, system, 1)
    assert {tp for tp, _ in found} == {1, 2, 4}
    job = TrainingJob(seq_len=2048, global_batch=64)
    res = search_training(m, job, Plan(), system, top=3, pareto=False)
    assert res.best is not None and res.best.tp <= 4
    with pytest.raises(SpecError, match="devices_per_node"):
        training_ledger("s", m, job, Plan(tp=8), system)


def test_uneven_pipelines_are_searched_and_interleaving_needs_a_pipeline():
    """Llama-3.1-405B's 126 layers on 16 stages (Meta's layout) is a candidate, as `diagnose` accepts it; an uneven
    layout's rows price as the one-plan path does; virtual stages on pp 1 are infeasible."""
    from aitrinity.plan.search import layouts

    assert (8, 16) in layouts(catalog.model("llama-3.1-405b"), make_system(n=8192), 1)
    m = catalog.model("llama-3.1-8b")  # 32 layers: pp 3 holds 10, 11, 11... (cost.training.stage_bounds)
    job = TrainingJob(seq_len=2048, global_batch=48)
    system = make_system(n=24)
    space = Space.of({"micro-batch": (1,), "zero": (1,), "virtual-stages": (1, 2), "activation-offload": (0.0,)})
    res = search_training(m, job, Plan(), system, space=space, top=500, pareto=False)
    assert all(c.virtual_stages == 1 for c in res.top if c.pp == 1)
    reasons = {r.reason: r.count for r in res.infeasible}
    assert reasons["virtual stages without a pipeline, or more chunks than layers (+ embedding and loss)"] > 0
    uneven = next(c for c in res.top if c.pp == 3)
    plan = uneven.plan(Plan())
    est = price_training_ledger(training_ledger("p", m, job, plan, system), m, plan, system)
    assert est.training.step_time_s == pytest.approx(uneven.step_time_s, rel=1e-9)


def test_context_parallelism_is_searched_where_a_long_sequence_needs_it():
    """128k tokens of Llama-3.1-8B on 64 H100s: no plan without CP fits in this space (no recomputation, no offload),
    the best plan splits the sequence, and its one-plan price is the search's."""
    m = catalog.model("llama-3.1-8b")
    job = TrainingJob(seq_len=131072, global_batch=8)
    system = make_system(n=64)
    space = Space.of({"micro-batch": (1,), "zero": (1,), "virtual-stages": (1,), "activation-offload": (0.0,)})
    t = evaluate(m, job, Plan(), system, space)
    fits = t.priced.feasible & (t.rows.recompute == 0)
    assert fits.any() and not (fits & (t.cp == 1)).any()
    res = search_training(m, job, Plan(), system, space=space)
    assert res.best is not None and res.best.cp > 1 and f"cp{res.best.cp}" in res.best.layout
    plan = res.best.plan(Plan())
    assert plan.cp == res.best.cp
    est = price_training_ledger(training_ledger("p", m, job, plan, system), m, plan, system)
    assert est.training.step_time_s == pytest.approx(res.best.step_time_s, rel=1e-9)


def test_short_sequences_search_no_context_parallelism():
    from aitrinity.plan.search import context_degrees

    m = catalog.model("llama-3.1-8b")
    assert context_degrees(m, TrainingJob(seq_len=8192, global_batch=8), Plan(), 64, 8) == [1]
    assert context_degrees(m, TrainingJob(seq_len=8192, global_batch=8), Plan(cp=2), 64, 8) == [1, 2]
    assert context_degrees(m, TrainingJob(seq_len=131072, global_batch=8), Plan(), 64, 8) == [1, 2, 4, 8, 16]
    ulysses = Plan(cp_method="ulysses")  # 32 heads / tp 8 = 4 per rank: cp up to 4
    assert context_degrees(m, TrainingJob(seq_len=131072, global_batch=8), ulysses, 64, 8) == [1, 2, 4]


def test_each_technique_module_declares_its_column_of_the_grid():
    """The grid's dimensions come from the technique modules (no column the search names itself): every column of
    the rows is one registered technique's, a space overrides any of them by kind -- a categorical one too, spelled
    as results spell it -- and refuses a kind that is none of them; each choice is spelled by its modules' labels."""
    from aitrinity.cost.training import Rows
    from aitrinity.plan import registry
    from aitrinity.plan.search import dimensions

    kinds = {kind for kind, _ in dimensions()}
    assert [d.column for _, d in dimensions()] == list(Rows.__dataclass_fields__)
    assert kinds == {k for k, _ in registry.dimensions()} >= {"zero", "recompute", "gradient-compression"}
    with pytest.raises(ValueError, match="not a dimension of the training search: warp-drive"):
        Space.of({"warp-drive": (1,)})
    for bad, why in [
        ({"zero": (1, 7)}, "zero: 7 is not a value it takes"),
        ({"micro-batch": (0,)}, "greater than 0"),
        ({"recompute": ("sometimes",)}, "not one of .'none', 'selective', 'full'."),
        ({"activation-offload": (2.0,)}, "less than or equal to 1"),
        ({"zero": ()}, "zero: no values to try"),
    ]:
        with pytest.raises(ValueError, match=why):
            Space.of(bad)

    m = catalog.model("llama-3.1-8b")
    job = TrainingJob(seq_len=2048, global_batch=64)
    only = Space.of({"recompute": ("full",), "gradient-compression": ("none", "int8"), "micro-batch": (2,)})
    t = evaluate(m, job, Plan(), make_system(n=16, host_memory="host-dram"), only)
    assert set(t.rows.recompute.tolist()) == {RECOMPUTE.index("full")}
    assert set(t.rows.compression.tolist()) == {0, 1} and set(t.rows.micro_batch.tolist()) == {2}
    assert set(t.rows.optimizer_offload.tolist()) == {False, True}  # host memory: its own values
    t = evaluate(m, job, Plan(), make_system(n=16), only)
    assert set(t.rows.optimizer_offload.tolist()) == {False} and set(t.rows.activation_offload.tolist()) == {0.0}

    res = search_training(m, job, Plan(), make_system(n=16, host_memory="host-dram"), space=only, top=200, pareto=False)
    c = next(c for c in res.top if c.compression == "int8" and c.zero == 1)
    assert c.techniques.split() == ["mb2", "ZeRO-1", "rc:full", *(["SP"] if c.sequence_parallel else []), "int8"] + (
        ["opt-offload"] if c.optimizer_offload else []
    ) + ([f"act-offload {c.activation_offload:g}"] if c.activation_offload else [])


def test_first_largest_is_argmax_over_the_stacked_columns():
    """Ties (small integers) go to the first column, as ``np.argmax`` gives them."""
    rng = np.random.default_rng(7)
    cols = [rng.integers(0, 4, 500).astype(np.float64) for _ in range(6)]
    assert np.array_equal(first_largest(cols), np.argmax(np.stack(cols), axis=0))
    assert np.array_equal(first_largest(cols[:1]), np.zeros(500))
