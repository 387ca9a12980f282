"""Bad flags and files through the real entry point: exit 2 with a line or two naming the flag, never a
traceback (issue 17's reproducers, one each)."""

import subprocess
import sys

import pytest


def _run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "aitrinity.cli.main", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


@pytest.mark.parametrize(
    "args, word",
    [
        (["kv", "replay", "t.jsonl", "--kv-dtype", "int1"], "--kv-dtype"),
        (["simulate", "edge-stream", "--duration", "inf"], "--duration"),
        (["simulate", "edge-stream", "--duration", "nan"], "--duration"),
        (["simulate", "edge-stream", "--duration", "1e-9"], "--duration"),
        (["simulate", "training-link", "--seed", "-1"], "--seed"),
        (["simulate", "diurnal-serving", "--day", "nan"], "--day"),
        (["simulate", "diurnal-serving", "--period-s", "1e-9"], "--period-s"),
        (["report", "-o", "/nonexistent/dir/r.html"], "-o"),
        (["calibrate", "--quick", "-o", "/nonexistent/dir/c.yaml"], "-o"),
        (["calibrate", "--quick", "--tdp=0W"], "--tdp"),
        (["diagnose", "llama-70b-training-h100", "--set", "link=0Gbit/s"], "inter_node_bandwidth"),
        (["plan", "camera-analytics-edge", "--sweep", "uplink=1Mbit/s,0Mbit/s"], "uplink"),
        # each made the run's FLOPs, dollars or joules infinite, and --json an internal error
        (["diagnose", "llama-70b-training-h100", "--set", "workload.training.total_tokens=1e300", "--json"], "total"),
        (["diagnose", "llama-70b-training-h100", "--set", "system.power_per_device=1e300", "--json"], "power"),
        (["diagnose", "llama-70b-training-h100", "--set", "system.price_per_device_hour=-5"], "price"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args, word, tmp_path):
    p = _run(*args, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and word in p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3


def test_bad_trace_files_are_one_line(tmp_path):
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe{}")
    (tmp_path / "nan.jsonl").write_text('{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": []}\n')
    (tmp_path / "link.txt").write_text("0 100\nnan 50\n")
    for args in (
        ["kv", "replay", str(tmp_path / "bin.jsonl"), "--quiet"],
        ["kv", "replay", str(tmp_path / "nan.jsonl"), "--quiet"],
        ["simulate", "training-link", "--trace", str(tmp_path / "link.txt"), "--quiet"],
    ):
        p = _run(*args)
        assert p.returncode == 2 and "Traceback" not in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1
