"""Sweeps on Ray (``--ray``): the local pool's results, byte for byte; a missing Ray or a failing job in one line."""

import json
import sys

import pytest

from aitrinity.cli.main import main

ray = pytest.importorskip("ray", reason="Ray is an extra: pip install -e '.[ray]'")

SWEEP = ["simulate", "sweep", "--seeds", "0-1", "--steps", "200", "--duration", "20", "--quiet", "--json"]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray of 2 CPUs for the module (each run_sweep would start and stop its own: seconds each)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_gives_the_local_pools_json_byte_for_byte(local_ray, capsys):
    assert main([*SWEEP, "--workers", "2"]) == 0
    local = capsys.readouterr().out
    assert main([*SWEEP, "--ray"]) == 0
    on_ray = capsys.readouterr().out
    assert on_ray == local
    results = json.loads(local)
    assert len(results) > 20 and {r["scenario"] for r in results} == {"training-link", "edge-stream"}


def test_jobs_are_cut_into_tasks_and_come_back_in_order(local_ray):
    from aitrinity import ray_backend

    jobs = [
        {"scenario": "training-link", "policy": p, "seed": s, "steps": 50}
        for p in ("adaptive", "oracle")
        for s in range(12)
    ]
    seen: list[int] = []
    out = ray_backend.run_sweep(jobs, progress=lambda done, total: seen.append(done))
    assert [(r["policy"], r["seed"]) for r in out] == [(j["policy"], j["seed"]) for j in jobs]
    assert seen == list(range(1, len(jobs) + 1))  # progress per finished job, whatever the task order


def test_a_failing_job_is_named_with_its_scenario_and_policy(local_ray):
    from aitrinity import ray_backend
    from aitrinity.errors import SpecError

    jobs = [
        {"scenario": "training-link", "policy": "adaptive", "steps": 50},
        {"scenario": "training-link", "policy": "static:no-such-method", "steps": 50},
    ]
    with pytest.raises(SpecError, match=r"sweep job 1 \(training-link, static:no-such-method\)"):
        ray_backend.run_sweep(jobs)


def test_without_ray_the_cli_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert main([*SWEEP, "--ray"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'aitrinity[ray]'" in err[0]


def test_plan_sweep_on_ray_prints_what_the_local_loop_prints(local_ray, capsys):
    sweep = ["plan", "llama-70b-training-h100", "--sweep", "link=25Gbit/s,400Gbit/s"]
    for extra in ([], ["--json"]):
        assert main([*sweep, *extra]) == 0
        local = capsys.readouterr().out
        assert main([*sweep, *extra, "--ray"]) == 0
        assert capsys.readouterr().out == local
    # a value that fails is named, in one line
    assert main(["plan", "llama-70b-training-h100", "--sweep", "link=no-such-link", "--ray"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sweep job 0 (llama-70b-training-h100, link=no-such-link)" in err[0]


def test_hardware_compare_on_ray_prints_what_the_local_run_prints(local_ray, capsys):
    compare = ["hardware", "compare", "h100-sxm", "h200:hbm_capacity=+50%", "--suite", "tests/data/small-suite.yaml"]
    for extra in (["--quiet"], ["--quiet", "--json"]):
        assert main([*compare, *extra]) == 0
        local = capsys.readouterr().out
        assert main([*compare, *extra, "--ray"]) == 0
        assert capsys.readouterr().out == local


def test_plan_scenarios_on_ray_prints_what_the_local_loop_prints(local_ray, capsys):
    for extra in ([], ["--json"]):
        assert main(["plan", "--scenarios", "examples", *extra]) == 0
        local = capsys.readouterr().out
        assert main(["plan", "--scenarios", "examples", *extra, "--ray"]) == 0
        assert capsys.readouterr().out == local
