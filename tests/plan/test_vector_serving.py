"""The planner's serving rows are the one-plan estimate (ledger + price_serving_ledger) on every row of small spaces:
the operator model's steady state at fixed concurrency, and the static-batch roofline. Both price with
:mod:`aitrinity.cost.serving_pricing`; what this checks is the rest -- a row's columns among many equal a batch of
one's, the steady states the planner shares across layouts, and the feasibility columns against the memory checks."""

import itertools

import numpy as np
import pytest

from aitrinity import catalog
from aitrinity.cost.estimate import price_serving_ledger
from aitrinity.cost.serving import serving_ledger
from aitrinity.errors import SpecError
from aitrinity.plan.vector_serving import KV_DTYPES, WEIGHT_DTYPES, ServingRows, price_rows, row_plan
from aitrinity.spec._base import validate
from aitrinity.spec.hardware import Efficiency
from aitrinity.spec.scenario import Plan, ServingJob
from tests.conftest import make_system

CASES = [
    ("llama-3.1-70b", 8, 8, 1, ServingJob(prompt_tokens=8192, output_tokens=512), {}, {"host_memory": "host-dram"}),
    (
        "mixtral-8x7b",
        8,
        4,
        2,
        ServingJob(prompt_tokens=2048, output_tokens=256),
        {"ep": 1},
        {"host_memory": "host-dram", "per_node": 4, "overlap": "partial"},
    ),
    (
        "llama-3.1-8b",
        2,
        1,
        1,
        ServingJob(prompt_tokens=4096, output_tokens=128),
        {
            "exchanges": [
                {"kind": "prefix-cache", "hit_rate": 0.6, "tier": "remote"},
                {"kind": "kv-compression", "bits": 4},
            ]
        },
        {"host_memory": "host-dram", "remote_pool": "remote-pool", "overlap": "sum"},
    ),
    ("deepseek-v3", 8, 8, 1, ServingJob(prompt_tokens=1024, output_tokens=64), {}, {}),
    (
        "llama-3.1-70b",
        8,
        4,
        2,
        ServingJob(prompt_tokens=8192, output_tokens=256),
        {"exchanges": [{"kind": "prefix-cache", "hit_rate": 0.3, "tier": "host", "capacity": "600 GiB"}]},
        {"host_memory": "host-dram"},
    ),
    (  # DeepSeek-V3's multi-token prediction: one draft token from one MoE block, 85% accepted
        "deepseek-v3",
        16,
        8,
        2,
        ServingJob(prompt_tokens=1024, output_tokens=128),
        {"exchanges": [{"kind": "speculative-decoding", "draft_tokens": 1, "acceptance": 0.85}]},
        {"host_memory": "host-dram"},
    ),
    (
        "llama-3.1-8b",
        2,
        1,
        1,
        ServingJob(prompt_tokens=2048, output_tokens=256),
        {"exchanges": [{"kind": "speculative-decoding", "draft_tokens": 4, "acceptance": 0.7, "draft_layers": 2}]},
        {"host_memory": "host-dram", "overlap": "sum"},
    ),
    (  # a draft's operators dispatched per output token: a static batch's decode pays (1 + k x share) / E of them
        "llama-3.1-8b",
        2,
        1,
        1,
        ServingJob(prompt_tokens=2048, output_tokens=256),
        {"exchanges": [{"kind": "speculative-decoding", "draft_tokens": 3, "acceptance": 0.7, "draft_layers": 4}]},
        {"efficiency": Efficiency(compute=0.6, memory=0.8, op_overhead_s=2e-5)},
    ),
    (  # an fp32 model: its attention and LM head at the fp32 peak, quantized KV rows' attention at bf16's
        "llama-3.1-8b",
        2,
        1,
        1,
        ServingJob(prompt_tokens=2048, output_tokens=128),
        {"compute_dtype": "fp32"},
        {"host_memory": "host-dram"},
    ),
    (  # context parallelism: the 32k prompts split over 2 groups of tp 8 on two nodes, the KV sharded
        "llama-3.1-70b",
        16,
        8,
        1,
        ServingJob(prompt_tokens=32768, output_tokens=256),
        {"cp": 2},
        {"host_memory": "host-dram"},
    ),
]


@pytest.mark.parametrize("mode", ["concurrency", "static"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-tp{c[2]}-pp{c[3]}")
def test_every_row_is_the_one_plan_estimate(case, mode):
    name, n, tp, pp, job, plan_kw, sys_kw = case
    job = job.model_copy(update={"mode": mode})
    m = catalog.model(name)
    system = make_system(n=n, **sys_kw)
    base = validate(Plan, plan_kw)
    grid = list(itertools.product([1, 3, 16, 64], [0.0, 0.5], range(len(WEIGHT_DTYPES)), range(len(KV_DTYPES))))
    cols = list(zip(*grid, strict=True))
    rows = ServingRows(
        batch=np.array(cols[0]),
        kv_offload=np.array(cols[1], dtype=float),
        weight_dtype=np.array(cols[2]),
        kv_dtype=np.array(cols[3]),
        tp=np.full(len(grid), tp),
        pp=np.full(len(grid), pp),
        ep=np.full(len(grid), base.ep),
        cp=np.full(len(grid), base.cp),
    )
    got = price_rows(m, job, base, system, rows)
    checked = 0
    for i, (b, f, wq, kq) in enumerate(grid):
        plan = row_plan(
            base, tp, pp, {"kv-offload": f, "weight-quantization": WEIGHT_DTYPES[wq], "kv-quantization": KV_DTYPES[kq]}
        )
        try:
            led = serving_ledger("s", m, job.model_copy(update={"batch": b}), plan, system)
        except SpecError:
            assert not got.feasible[i], grid[i]
            continue
        est = price_serving_ledger(led, m, plan, job.model_copy(update={"batch": b}), system)
        assert est.serving.mode == mode
        fits = est.memory.fits and all(t.fits for t in est.lower_tiers)
        assert bool(got.feasible[i]) == fits, (grid[i], got.reason[i])
        if mode == "concurrency" and not fits:  # a row that cannot run is not priced at fixed concurrency
            assert np.isnan(got.ttft_s[i]) or got.reason[i] in (5, 6), grid[i]
            continue
        assert got.ttft_s[i] == pytest.approx(est.serving.ttft_s, rel=1e-9), grid[i]
        assert got.tpot_s[i] == pytest.approx(est.serving.tpot_s, rel=1e-9), grid[i]
        assert got.hbm_bytes[i] == pytest.approx(led.memory_bytes("hbm"), rel=1e-9), grid[i]
        assert got.tokens_per_s[i] == pytest.approx(est.serving.output_tokens_per_s, rel=1e-9)
        assert got.throughput_tokens_per_s[i] == pytest.approx(est.serving.throughput_tokens_per_s, rel=1e-9)
        fits = est.memory.fits and all(t.fits for t in est.lower_tiers)
        assert bool(got.feasible[i]) == fits, (grid[i], got.reason[i])
        checked += 1
    assert checked > (20 if mode == "static" else 10)  # at fixed concurrency only rows that fit are priced


@pytest.mark.parametrize("mode", ["concurrency", "static"])
def test_layouts_priced_in_one_call_equal_each_alone(mode):
    """Rows of many layouts (TP inside and across nodes, PP across nodes, EP) in one call give exactly what one
    call per layout gives: a row's layout is its own, whatever its neighbours'."""
    m = catalog.model("mixtral-8x7b")
    system = make_system(n=8, host_memory="host-dram", per_node=4, overlap="partial")
    job = ServingJob(prompt_tokens=2048, output_tokens=256, mode=mode)
    base = validate(Plan, {})
    layouts = [(1, 1, 1), (2, 1, 2), (4, 2, 1), (8, 1, 1), (8, 1, 4), (2, 4, 1), (1, 8, 1)]
    grid = list(itertools.product([1, 16, 256], [0.0, 0.5], range(len(WEIGHT_DTYPES)), range(len(KV_DTYPES))))
    cols = [np.array(c) for c in zip(*grid, strict=True)]

    def rows(lays: list[tuple[int, int, int]]) -> ServingRows:
        lay = np.repeat(np.array(lays), len(grid), axis=0)
        k = len(lays)
        return ServingRows(
            np.tile(cols[0], k),
            np.tile(cols[1].astype(float), k),
            np.tile(cols[2], k),
            np.tile(cols[3], k),
            lay[:, 0],
            lay[:, 1],
            lay[:, 2],
        )

    together = price_rows(m, job, base, system, rows(layouts))
    alone = [price_rows(m, job, base, system, rows([lay])) for lay in layouts]
    assert together.feasible.any()
    for field in type(together).__dataclass_fields__:
        want = np.concatenate([getattr(a, field) for a in alone])
        assert np.array_equal(getattr(together, field), want, equal_nan=want.dtype.kind == "f"), field


def test_steady_states_of_several_context_parallel_degrees_in_one_call_equal_each_alone():
    """The serving search answers the steady states of every context-parallel degree in one call
    (:func:`answer_steady`): each request's rows get exactly what answering it alone gives."""
    from aitrinity.cost.concurrency import steady_state
    from aitrinity.cost.kernels import KV, WEIGHTS, Dtypes, MixedKernels, roofline
    from aitrinity.cost.operators import Layout, ScaleOut
    from aitrinity.plan.vector_serving import answer_steady, price_rows_deferred

    m = catalog.model("llama-3.1-70b")
    system = make_system(n=8, per_node=8)
    job = ServingJob(prompt_tokens=32768, output_tokens=256)
    k = roofline(system.device)
    requests = []
    for tp, cp in ((8, 1), (4, 2), (2, 4), (4, 1)):
        base = validate(Plan, {"cp": cp})
        n = 3 * len(WEIGHT_DTYPES)
        rows = ServingRows(
            np.repeat(np.array([1, 4, 16]), len(WEIGHT_DTYPES)),
            np.zeros(n),
            np.tile(np.arange(len(WEIGHT_DTYPES)), 3),
            np.zeros(n, dtype=np.int64),
            np.full(n, tp),
            np.ones(n, dtype=np.int64),
            np.ones(n, dtype=np.int64),
            np.full(n, cp),
        )
        request, _ = price_rows_deferred(m, job, base, system, rows)
        assert request is not None and len(request.keys)
        requests.append(request)
    together = answer_steady(m, k, system, job, requests)
    nw, nk = len(WEIGHT_DTYPES), len(KV_DTYPES)
    for r, answer in zip(requests, together, strict=True):  # each against the operator model at its own degree
        wd, kd = (
            Dtypes((r.weights_dtype, *WEIGHT_DTYPES[1:]), r.keys // nk % nw),
            Dtypes((r.cache_dtype, *KV_DTYPES[1:]), r.keys % nk),
        )
        lay = Layout(r.tp, r.ep, WEIGHTS, KV, system.engine, scale_out=ScaleOut.of(system), cp=r.cp)
        ss = steady_state(m, MixedKernels(k, wd, kd), lay, r.keys // (nk * nw), job.prompt_tokens, job.output_tokens)
        assert np.array_equal(answer.ttft_s, ss.ttft_s)
        assert np.array_equal(answer.tpot_s, ss.tpot_s)
    assert not np.array_equal(together[1].ttft_s, together[3].ttft_s)  # tp 4 with and without CP
