"""Work on a Ray cluster (``--ray [ADDRESS]`` of ``trinity simulate sweep``, ``trinity plan --sweep``, ``trinity
plan --scenarios`` and ``trinity hardware compare``): the one module that uses Ray.

Security: Ray's task transport serializes with pickle between the processes of one Ray cluster. That is
accepted here, and only here, because a Ray cluster is a trusted boundary by Ray's own security model: a
cluster must never be reachable from untrusted networks (run it on a private network, with Ray's token
authentication on). Nothing of this project deserializes pickle from a file, a socket or a user: what this
module hands to a Ray task is the JSON text of its jobs, and what it takes back is the JSON text of their
results -- plain strings, never objects whose unpickling would run this project's code.

The jobs are those of :mod:`aitrinity.sweep` and run the functions the local paths run, named by
:data:`aitrinity.sweep.JOB_KINDS`, so the results are the local ones, in the same order. They are dealt into
about four tasks per CPU of the cluster (task t takes jobs t, t + T, ...: every task a similar mix), not one task
per job: a simulation can take milliseconds, and a Ray task costs most of one (``benchmarks/bench_sim.py --part
ray`` measures it). A task whose worker dies is retried by Ray (``max_retries``); a job that raises is reported
with its index, its scenario and its policy, override or case.

Ray is an optional extra (``pip install 'aitrinity[ray]'``), imported only when asked for.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aitrinity.errors import SpecError

TASKS_PER_CPU = 4
MAX_RETRIES = 3
"""Times Ray re-runs a task whose worker process died."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SpecError.at("--ray", "Ray is not installed: pip install 'aitrinity[ray]'") from None
    return ray


def _run_batch(kind: str, jobs_json: str) -> str:
    """A Ray task: the name of a job kind and the JSON text of its jobs in, JSON text of their results (or errors)
    out."""
    from aitrinity.sweep import JOB_KINDS

    run = JOB_KINDS[kind]
    return json.dumps([run(job) for job in json.loads(jobs_json)])


def run_sweep(
    jobs: Sequence[dict[str, Any]],
    address: str | None = None,
    cpus: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    kind: str = "simulation",
) -> list[dict[str, Any]]:
    """Run ``jobs`` of ``kind`` (:data:`aitrinity.sweep.JOB_KINDS`) on Ray: a new local instance of ``cpus`` CPUs
    (default: all) when ``address`` is None, else the cluster at ``address`` ("auto" finds a running one).
    Results in job order, as :func:`aitrinity.sweep.run_sweep` returns them."""
    n = len(jobs)
    if n == 0:
        return []
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        try:
            if address is None:
                ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            else:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, ValueError, RuntimeError) as e:
            where = address or "this machine"
            raise SpecError.at("--ray", f"cannot start or reach a Ray cluster at {where}: {e}") from None
    try:
        return _run(ray, jobs, progress, kind)
    finally:
        if started:
            ray.shutdown()


def _run(
    ray: Any, jobs: Sequence[dict[str, Any]], progress: Callable[[int, int], None] | None, kind: str
) -> list[dict[str, Any]]:
    from aitrinity.sweep import failure

    n = len(jobs)
    cpus = max(int(ray.cluster_resources().get("CPU", 1)), 1)
    tasks = min(n, TASKS_PER_CPU * cpus)
    task = ray.remote(max_retries=MAX_RETRIES)(_run_batch)
    # task t takes jobs t, t + tasks, ...: a mix of every scenario and policy, so that tasks take about as long
    pending = {task.remote(kind, json.dumps([jobs[k] for k in range(t, n, tasks)])): t for t in range(tasks)}
    results: list[dict[str, Any] | None] = [None] * n
    errors: list[tuple[int, str]] = []
    done = 0
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            first = pending.pop(ref)
            for k, out in zip(range(first, n, tasks), json.loads(ray.get(ref)), strict=True):
                if "error" in out:
                    errors.append((k, out["error"]))
                    continue
                results[k] = out
                done += 1
                if progress is not None:
                    progress(done, n)
    if errors:
        raise failure(jobs, *min(errors))
    return [r for r in results if r is not None]
