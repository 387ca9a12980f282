"""How many devices a workload needs before it fits in device memory.

Training: the plan's tp, cp, pp, ep, ZeRO stage and exchanges are kept and the
data-parallel degree grows (ZeRO shards states over it; fewer micro-batches per
replica mean fewer in flight). Peak memory never grows with dp, so a doubling
search followed by bisection finds the smallest dp. The global batch is rounded
to a multiple of the new dp: the answer is a capacity bound, not a runnable plan.

Serving: the smallest replica ``tp x pp`` (tp a valid divisor of the heads, pp
of the layers) that holds the weights and the batch's KV cache -- at fixed
concurrency, one request's (the other clients wait for a slot).
"""

from __future__ import annotations

from aitrinity.cost.serving import max_batch
from aitrinity.cost.training import training_ledger
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, ServingJob, System, TrainingJob

MAX_DP = 1 << 20


def min_devices_training(m: ModelSpec, job: TrainingJob, plan: Plan, system: System) -> int | None:
    usable = system.usable_memory_bytes
    step = plan.ep
    per_replica = plan.tp * plan.cp * plan.pp

    def fits(dp: int) -> bool:
        # the whole ledger (exchanges included), with a global batch rounded to the new dp
        sized = system.model_copy(update={"num_devices": per_replica * dp})
        batch = dp * plan.micro_batch * max(1, job.global_batch // (dp * plan.micro_batch))
        led = training_ledger(
            "capacity", m, job.model_copy(update={"global_batch": batch}), plan.model_copy(update={"dp": None}), sized
        )
        return led.memory_bytes("hbm") <= usable

    hi = step
    while not fits(hi):
        if hi > MAX_DP:
            return None
        hi *= 2
    lo = hi // 2 if hi > step else 0  # fits(hi), not fits(lo) (lo = 0 means nothing below)
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return per_replica * hi


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def min_devices_serving(m: ModelSpec, job: ServingJob, plan: Plan, system: System) -> int | None:
    waits = job.mode == "concurrency" and plan.disaggregation is None  # the other clients wait for a slot
    need = 1 if job.batch == "max" or waits else job.batch
    kv = m.kv_heads
    tps = [t for t in _divisors(m.num_attention_heads) if kv % t == 0 or t % kv == 0]
    best: int | None = None
    for tp in tps:
        for pp in _divisors(m.num_layers):
            n = tp * pp
            if best is not None and n >= best:
                break
            trial = plan.model_copy(update={"tp": tp, "pp": pp})
            if max_batch(m, trial, system, job) >= need:
                best = n
                break
    return best
