"""Sweeps of scenarios x seeds x policies on a local pool of worker processes (JSON in, JSON out; no pickle).

Part of the front door (DESIGN: it orchestrates sweeps and resolves scenario names through the api).

Each job is a JSON object (``scenario``, ``policy``, ``seed`` and the
scenario's options); :func:`run_sweep` starts up to ``workers`` child
processes (``python -m aitrinity.sweep``), hands each a slice of the jobs
on stdin and reads one JSON result per job from its stdout, so nothing is
pickled across the process boundary. Results come back in job order; a job
that fails is reported with its index and the worker's message.

Scenarios with policies: ``training-link`` (``sim.training``: objective = time
to finish, s) and ``edge-stream`` (``sim.edge`` on an edge scenario: objective =
mean frame latency, s).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

from aitrinity.errors import SpecError

SCENARIOS = ("training-link", "edge-stream")


def policies(scenario: str, edge: str = "camera-analytics-edge") -> list[str]:
    """Every policy of a scenario: its static plans, adaptive and oracle."""
    if scenario == "training-link":
        from aitrinity.sim.training import TrainingJob

        return [f"static:{m}" for m in TrainingJob().methods] + ["adaptive", "oracle"]
    if scenario == "edge-stream":
        return [f"static:{o.label}" for o in _edge_options(edge) if o.allowed] + ["adaptive", "oracle"]
    raise SpecError("scenario", scenario, f"one of {', '.join(SCENARIOS)}")


def _edge_options(edge: str) -> list[Any]:
    from aitrinity import api
    from aitrinity.edge import resolve
    from aitrinity.spec.edge import EdgeScenario

    s, base = api.load(edge)
    if not isinstance(s, EdgeScenario):
        raise SpecError("edge", edge, "an edge scenario")
    return resolve(s, base).options()


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """One job in this process: the objective and the switches of one policy on one seed."""
    scenario, policy, seed = job["scenario"], job["policy"], int(job.get("seed", 0))
    if scenario == "training-link":
        from aitrinity.catalog.traces import load_link_trace
        from aitrinity.sim.training import DEGRADING, TrainingJob, simulate_training
        from aitrinity.spec.traces import LinkTrace

        link = load_link_trace(job["trace"]) if job.get("trace") else DEGRADING
        r = simulate_training(TrainingJob(steps=int(job.get("steps", 2000))), link, policy, seed=seed)
        return {**job, "objective": r.total_s, "unit": "s to finish", "switches": r.switches}
    if scenario == "edge-stream":
        from aitrinity import api
        from aitrinity.catalog.traces import load_link_trace
        from aitrinity.edge import resolve
        from aitrinity.sim.edge import EdgeStream, simulate_edge
        from aitrinity.spec.traces import LinkTrace

        s, base = api.load(job.get("edge", "camera-analytics-edge"))
        inp = resolve(s, base)  # type: ignore[arg-type]
        if job.get("trace"):
            link = load_link_trace(job["trace"])
        else:
            link = LinkTrace(tuple(t for t, _ in inp.trace), tuple(b for _, b in inp.trace))
        stream = EdgeStream(fps=inp.scenario.workload.edge.frames_per_s, duration_s=float(job.get("duration", 200)))
        e = simulate_edge(inp.options(), link, policy, stream, seed=seed)
        return {**job, "objective": e.mean_latency_s, "unit": "s mean frame latency", "switches": e.switches}
    raise SpecError("scenario", scenario, f"one of {', '.join(SCENARIOS)}")


def run_sweep(
    jobs: Sequence[dict[str, Any]], workers: int | None = None, progress: Callable[[int, int], None] | None = None
) -> list[dict[str, Any]]:
    """Run ``jobs`` on ``workers`` child processes (default: the CPUs this process may use)."""
    n = len(jobs)
    if n == 0:
        return []
    w = max(1, min(workers or len(os.sched_getaffinity(0)), n))
    results: list[dict[str, Any] | None] = [None] * n
    errors: list[tuple[int, str]] = []
    lock = threading.Lock()
    done = [0]

    def collect(p: subprocess.Popen[str], idx: list[int]) -> None:
        """Read one worker's results as they come (every pipe drained at once: no worker blocks on a full pipe)."""
        assert p.stdout is not None
        for k, line in zip(idx, p.stdout, strict=False):
            out = json.loads(line)
            with lock:
                if "error" in out:
                    errors.append((k, out["error"]))
                    continue
                results[k] = out
                done[0] += 1
                if progress is not None:
                    progress(done[0], n)

    with contextlib.ExitStack() as stack:
        procs = []
        for k in range(w):
            idx = list(range(k, n, w))
            log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))  # a file: a chatty worker never blocks
            p = subprocess.Popen(
                [sys.executable, "-m", "aitrinity.sweep"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
            assert p.stdin is not None
            p.stdin.write(json.dumps([jobs[i] for i in idx]))  # the worker reads it all before it writes
            p.stdin.close()
            procs.append((p, idx, log))
        readers = [threading.Thread(target=collect, args=(p, idx)) for p, idx, _ in procs]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        for p, _, log in procs:
            if p.wait() != 0:
                log.seek(0)
                raise RuntimeError(f"a sweep worker failed: {log.read().strip()[-1000:]}")
    if errors:
        raise failure(jobs, *min(errors))
    missing = [k for k, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"sweep jobs {missing[:10]} returned nothing")
    return [r for r in results if r is not None]


def main() -> int:
    """Worker: a JSON list of jobs on stdin, one JSON result (or ``{"error": ...}``) per line on stdout."""

    for job in json.loads(sys.stdin.read()):
        print(json.dumps(run_or_error(job)), flush=True)
    return 0


Job = Callable[[dict[str, Any]], dict[str, Any]]


def or_error(run: Job) -> Job:
    """``run``, answering ``{"error": ...}`` with the reason when the job raises (the sweep reports which job)."""

    def guarded(job: dict[str, Any]) -> dict[str, Any]:
        from aitrinity.errors import TrinityError

        try:
            return run(job)
        except (TrinityError, ValueError, KeyError) as e:
            return {"error": f"{e.__class__.__name__}: {e}"}

    return guarded


run_or_error = or_error(run_job)
"""A simulation job, or its error."""


def plan_point(job: dict[str, Any]) -> dict[str, Any]:
    """One value of ``trinity plan --sweep`` or one file of ``--scenarios``: ``api.plan`` of the job's scenario (a
    catalog name or a file every worker can read) with its overrides; the report as JSON (``kind`` names its
    class)."""
    from aitrinity import api

    rep = api.plan(
        job["scenario"],
        job.get("objective"),
        1,
        job.get("overrides", []),
        job.get("start", "naive"),
        job.get("ttft_slo"),
        job.get("tpot_slo"),
    )
    return {"kind": type(rep).__name__, "report": rep.model_dump(mode="json")}


def hardware_case(job: dict[str, Any]) -> dict[str, Any]:
    """One case of ``trinity hardware compare`` (:func:`aitrinity.hardware.hardware_case`)."""
    from aitrinity.hardware import hardware_case as run

    return run(job)


JOB_KINDS: dict[str, Job] = {
    "simulation": run_or_error,
    "plan": or_error(plan_point),
    "hardware": or_error(hardware_case),
}
"""What a worker can run, by name (each answers its result or its error): a sweep job's kind travels as this plain
string, never as code."""


def failure(jobs: Sequence[dict[str, Any]], k: int, error: str) -> SpecError:
    """The error a sweep raises for job ``k``: which job (scenario, policy or overrides) and why."""
    what = jobs[k].get("policy") or ", ".join(jobs[k].get("overrides", [])) or f"case {jobs[k].get('case')}"
    return SpecError.at(f"sweep job {k} ({jobs[k].get('scenario')}, {what})", error)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
