"""The one pricing of training steps: rows priced together are each priced as a batch of one, and the operator model's
step beside collectives that hold SMs."""

import itertools

import numpy as np
import pytest

from aitrinity import catalog
from aitrinity.cost.effects import grad_sync
from aitrinity.cost.kernels import roofline
from aitrinity.cost.train_operators import ClassTimes, StepTimes
from aitrinity.cost.training import Rows, columns, layout_constants
from aitrinity.cost.training_pricing import CHANNELS, TrainingRows, gpu_training_step, price_columns
from aitrinity.spec.exchanges import GradientCompression
from aitrinity.spec.scenario import Plan, TrainingJob
from tests.conftest import make_system


def _one(rows: Rows, i: int) -> Rows:
    return Rows(*(getattr(rows, f)[i : i + 1] for f in Rows.__dataclass_fields__))


@pytest.mark.parametrize("gpu", [True, False], ids=["operator-model", "roofline"])
def test_rows_priced_together_are_each_priced_alone(gpu):
    """Every field of the price of a row among 96 equals the price of that row alone: nothing a row gets depends on
    the others (the operator model times each distinct micro-batch once and scatters it back)."""
    m = catalog.model("mixtral-8x7b")
    job = TrainingJob(seq_len=4096, global_batch=64)
    base = Plan(ep=4)
    system = make_system(n=32, per_node=8, host_memory="host-dram", overlap="partial", comm_sm_share=0.15)
    kernels = roofline(system.device) if gpu else None
    syncs = [
        grad_sync(m, base),
        grad_sync(
            m, base.model_copy(update={"exchanges": [GradientCompression(kind="gradient-compression", method="int8")]})
        ),
    ]
    grid = list(itertools.product([1, 2], range(3), range(3), [False, True], range(2), [False, True], [1, 2], [0.0]))
    rows = Rows.from_grid(grid)
    L = layout_constants(m, job, base, 2, 2, 8)

    def price(r):
        return price_columns(
            TrainingRows(m, job.seq_len, base, system, (2, 2), r, columns(m, job, base, L, r, syncs)), kernels
        )

    together = price(rows)
    for i in range(0, len(grid), 7):
        row = _one(rows, i)
        alone = price(row)
        for name, a, b in [("step", together.step_s, alone.step_s), ("latency", together.latency_s, alone.latency_s)]:
            assert a[i] == pytest.approx(b[0], rel=1e-12), (name, grid[i])
        for a, b in zip(together.resources, alone.resources, strict=True):
            assert a[i] == pytest.approx(b[0], rel=1e-12, abs=1e-15), grid[i]
    assert set(together.links_s) == set(CHANNELS)
    assert (together.latency_s > 0).any() == gpu  # the phase roofline has no launch resource
    assert np.all(together.step_s >= np.max(np.stack(together.resources), axis=0) * (1 - 1e-12))


@pytest.mark.parametrize(
    ("overlap", "comm", "lent", "time"),
    [
        ("max", 1.0, 0.15, 2.15),  # max(B + s·C, C, copy) = max(2.15, 1, 0.5)
        ("max", 4.0, 0.6, 4.0),  # the collective outlasts the slowed GPU work: max(2.6, 4, 0.5)
        ("partial", 1.0, 0.075, 2.075 + 0.5 * 1.5),  # s·f·C; then hi + (1 - f)·(total - hi)
        ("sum", 1.0, 0.0, 3.5),  # nothing runs beside the collective
    ],
)
def test_overlapped_collectives_holding_sms_slow_the_gpu_work_beside_them(overlap, comm, lent, time):
    """``system.comm_sm_share`` s = 0.15: a collective of C seconds overlapped with B = 2 s of GPU work holds s of the
    SMs while it runs (DeepSeek-V3's all-to-all kernels: 20 of 132 SMs); a 0.5 s host-link copy runs on the copy
    engines and holds none."""
    st = StepTimes(ClassTimes(0.5, 0.0, 0.0, 0.0), 4.0, 0.0, 0.0, 0.0)  # 4 micro-batches of 0.5 s of GEMMs
    system = make_system(n=16, overlap=overlap, comm_sm_share=0.15)
    step = gpu_training_step(st, 0.0, [], [comm, 0.5], system, [True, False])
    assert float(step.sm_share_s) == pytest.approx(lent)
    assert float(step.time_s) == pytest.approx(time)
    # marked as copies, the same streams hold no SMs: the step of a system without the share
    plain = gpu_training_step(st, 0.0, [], [comm, 0.5], make_system(n=16, overlap=overlap), [True, False])
    copies = gpu_training_step(st, 0.0, [], [comm, 0.5], system, [False, False])
    without = max(2.0, comm) if overlap == "max" else time - lent
    assert float(copies.time_s) == float(plain.time_s) == pytest.approx(without)


@pytest.mark.parametrize("device", ["h100-sxm", "tpu-v5p"])
def test_training_estimate_is_the_ledger_priced_with_its_columns_computed_once(device, monkeypatch):
    """``training_estimate`` prices the ledger as ``price_training_ledger(training_ledger(...))`` does, field for
    field, for plans of several layouts and exchanges, and builds the plan's columns once for both."""
    from aitrinity.cost import training
    from aitrinity.cost.estimate import price_training_ledger, training_estimate
    from aitrinity.cost.training import training_ledger

    m = catalog.model("llama-2-7b")
    job = TrainingJob(seq_len=2048, global_batch=64)
    system = make_system(device, n=16, per_node=8 if device == "h100-sxm" else 4, host_memory="host-dram")
    plans = [
        Plan(),
        Plan(tp=2, pp=2, zero=1, recompute="selective", micro_batch=2),
        Plan(tp=4, zero=3, sequence_parallel=True, grad_dtype="fp32"),
        Plan(pp=4, virtual_stages=2, exchanges=[GradientCompression(kind="gradient-compression", method="int8")]),
    ]
    built = []
    real = training.plan_columns
    monkeypatch.setattr(training, "plan_columns", lambda *a: built.append(a[2]) or real(*a))
    for plan in plans:
        built.clear()
        once = training_estimate("t", m, job, plan, system)
        assert built == [plan]
        monkeypatch.setattr(training, "plan_columns", real)
        twice = price_training_ledger(training_ledger("t", m, job, plan, system), m, plan, system)
        monkeypatch.setattr(training, "plan_columns", lambda *a: built.append(a[2]) or real(*a))
        assert once.model_dump() == twice.model_dump(), plan
