"""Sweeps on worker processes: the same results as in-process runs, in job order; failures named."""

import pytest

from aitrinity.errors import SpecError
from aitrinity.sweep import policies, run_job, run_sweep

pytestmark = pytest.mark.multiproc


def test_a_sweep_on_two_workers_equals_running_the_jobs_here():
    jobs = [
        {"scenario": "training-link", "policy": p, "seed": s, "steps": 300}
        for p in ("static:none", "adaptive", "oracle")
        for s in (0, 1)
    ]
    jobs += [{"scenario": "edge-stream", "policy": p, "seed": 0, "duration": 60} for p in ("adaptive", "oracle")]
    seen = []
    out = run_sweep(jobs, workers=2, progress=lambda done, n: seen.append((done, n)))
    assert out == [run_job(j) for j in jobs]
    assert seen[-1] == (len(jobs), len(jobs))


def test_policies_and_a_failing_job_is_named():
    assert policies("training-link")[-2:] == ["adaptive", "oracle"]
    assert "static:all local" in policies("edge-stream")
    with pytest.raises(SpecError, match="sweep job 1"):
        run_sweep(
            [
                {"scenario": "training-link", "policy": "adaptive", "steps": 50},
                {"scenario": "training-link", "policy": "x"},
            ],
            workers=1,
        )


def test_the_sweep_command(capsys):
    from aitrinity.cli.main import main

    args = ["simulate", "sweep", "--sweep", "training-link", "--steps", "100", "--seeds", "0-1", "--workers", "2"]
    assert main([*args, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "adaptive" in out and "oracle" in out and "static:" in out
    assert main(["simulate", "sweep", "--seeds", "3-x"]) == 2
    assert "--seeds" in capsys.readouterr().err
