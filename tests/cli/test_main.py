import json
from pathlib import Path

import pytest
import yaml

from aitrinity.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_diagnose_builtin_examples(capsys):
    rc, out, err = run(capsys, "diagnose")
    assert rc == 0 and err == ""
    for name in ("llama-70b-training-h100", "trillion-param-training", "llama-70b-serving-long-context"):
        assert f"== {name}" in out
    assert "DOES NOT FIT" in out and "verdict:" in out


def test_diagnose_json_is_the_structured_result(capsys):
    rc, out, _ = run(capsys, "diagnose", "llama-70b-training-h100", "--json")
    assert rc == 0
    [d] = json.loads(out)
    assert d["binding"] == "compute"
    assert d["estimate"]["training"]["mfu"] > 0
    assert {p["phase"] for p in d["phases"]} == {"train_step"}
    assert d["estimate"]["ledger"]["params_total"] == pytest.approx(70.55e9, rel=1e-3)


def test_catalog_list_and_show(capsys):
    rc, out, _ = run(capsys, "catalog", "list", "models")
    assert rc == 0 and "llama-3.1-70b" in out
    rc, out, _ = run(capsys, "catalog", "show", "meta-llama/Llama-3.1-70B", "--json")
    data = json.loads(out)
    assert data["kind"] == "models" and data["entry"]["name"] == "llama-3.1-70b"
    assert data["derived"]["kv_bytes_per_token_bf16"][0] == 327680
    rc, out, _ = run(capsys, "catalog", "show", "nvlink-4")
    assert rc == 0 and "450 GB/s" in out
    rc, out, _ = run(capsys, "catalog", "show", "representative")
    assert rc == 0 and "(suite)" in out
    assert "    - scenario: llama-70b-serving-long-context, label: serve-70b-chat" in out  # one line per workload


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["catalog", "show", "h100-sxn"], "did you mean h100-sxm"),
        (["diagnose", "no-such-scenario"], "unknown scenario"),
        (["diagnose", "missing.yaml"], "missing.yaml"),
    ],
)
def test_errors_are_one_line_with_exit_2(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("trinity: error: ") and needle in err


def test_scenario_file_with_misspelled_model(tmp_path, capsys):
    sc = yaml.safe_load((EXAMPLES / "custom-device.yaml").read_text())
    sc["workload"]["model"] = "lama-3.1-8b"
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(sc))
    rc, _, err = run(capsys, "diagnose", str(p))
    assert rc == 2 and "workload.model" in err and "llama-3.1-8b" in err


def test_context_parallel_diagnose_and_its_bad_sizes(tmp_path, capsys):
    """A CP layout is diagnosed with its size in the header; a CP size whose chunks do not divide the sequence is
    one line naming plan.cp, exit 2."""
    sc = {
        "name": "long",
        "system": {"device": "h100-sxm", "num_devices": 64},
        "workload": {"model": "llama-3.1-8b", "training": {"seq_len": 131072, "global_batch": 8}},
        "plan": {"tp": 8, "cp": 8, "zero": 1, "sequence_parallel": True},
    }
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(sc))
    rc, out, _ = run(capsys, "diagnose", str(p))
    assert rc == 0 and "(tp 8, cp 8, pp 1, dp 1," in out
    rc, out, _ = run(capsys, "diagnose", str(p), "--json")
    [d] = json.loads(out)
    assert d["estimate"]["ledger"]["parallelism"]["cp"] == 8
    assert any(t["purpose"] == "CP K/V all-gather (ring)" for t in d["estimate"]["ledger"]["phases"][0]["traffic"])
    sc["plan"]["cp"] = 3
    sc["system"]["num_devices"] = 24
    p.write_text(yaml.safe_dump(sc))
    rc, out, err = run(capsys, "diagnose", str(p))
    assert rc == 2 and out == "" and err.count("\n") == 1 and "plan.cp" in err and "131072" in err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2


def test_replay_command(capsys):
    trace = EXAMPLES.parent / "data" / "traces" / "mooncake_conversation_trace.jsonl"
    assert main(["replay", str(trace), "--capacity", "3M,unbounded", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [round(r["token_hit_rate"], 3) for r in rows] == [0.143, 0.373]
    assert main(["replay", str(trace), "--capacity", "lots"]) == 2
    assert "count" in capsys.readouterr().err


def _small_trace(tmp_path):
    lines = []
    for i in range(60):
        ids = list(range(i % 5 * 10, i % 5 * 10 + 1 + i % 7))
        lines.append(
            json.dumps({"timestamp": i * 500, "input_length": 512 * len(ids) + 7, "output_length": 5, "hash_ids": ids})
        )
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_kv_replay_json_carries_rate_flops_and_bytes_per_tier(tmp_path, capsys):
    trace = _small_trace(tmp_path)
    assert main(["kv", "replay", str(trace), "--model", "llama-3.1-8b", "--capacity", "20000", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert 0 < r["token_hit_rate"] < 1 and r["prefill_flops_saved"] > 0
    assert r["capacity_tokens"] == 39 * 512 and set(r["bytes_served"]) == {"cache"}
    # bytes with a unit: 39 blocks of 8B KV (128 KiB per token, 64 MiB per block)
    assert main(["kv", "replay", str(trace), "--model", "llama-3.1-8b", "--capacity", "2496MiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hit_tokens"] == r["hit_tokens"]
    assert main(["kv", "replay", str(trace), "--tiers", "host-dram=1GiB,nvme-gen4", "--policy", "cost", "--json"]) == 0
    t = json.loads(capsys.readouterr().out)
    assert [x["name"] for x in t["tiers"]] == ["host-dram", "nvme-gen4"] and t["policy"] == "cost"
    assert main(["kv", "replay", str(trace), "--capacity", "1M,unbounded", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "token hit rate" in out and "unbounded" in out


def test_kv_plan_and_its_errors(tmp_path, capsys):
    trace = _small_trace(tmp_path)
    assert main(["kv", "plan", str(trace), "--target", "0.5", "--tiers", "host-dram=2GiB,nvme-gen4", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["allocation"]["token_hit_rate"] >= 0.5 and p["curve"]
    assert main(["kv", "plan", str(trace), "--target", "0.99"]) == 2
    assert "unbounded" in capsys.readouterr().err
    assert main(["kv", "replay", str(trace), "--tiers", "no-such-tier"]) == 2
    assert "no-such-tier" in capsys.readouterr().err
    assert main(["kv", "replay", str(trace), "--capacity", "1M", "--tiers", "host-dram"]) == 2


@pytest.mark.multiproc
def test_train_demo_json_and_errors(capsys):
    pytest.importorskip("torch")
    args = ["train-demo", "--compressor", "int8", "--steps", "3", "--hidden", "32", "--task", "generated", "--quiet"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        out["steps"] == 3
        and len(out["records"]) == 3
        and out["stats"]["by_method"] == {"int8": out["stats"]["buckets"]}
    )
    assert main(args) == 0
    assert "test accuracy" in capsys.readouterr().out
    assert main(["train-demo", "--compressor", "gzip"]) == 2
    assert "--compressor" in capsys.readouterr().err


def test_simulate_commands(capsys, tmp_path, monkeypatch):
    assert main(["simulate", "training-link", "--steps", "300", "--quiet", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows][-2:] == ["adaptive", "oracle"]
    trace = _small_trace(tmp_path)
    assert main(["simulate", "prefill-cluster", "--trace", str(trace), "--instances", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "local" in out and "global" in out
    monkeypatch.chdir(tmp_path)  # outside a checkout the built-in trace (package data) is the default
    assert main(["simulate", "prefill-cluster", "--instances", "2", "--quiet"]) == 0
    assert "mooncake_conversation_trace.jsonl (built in): 12,031 requests" in capsys.readouterr().out
    monkeypatch.undo()
    assert main(["simulate", "prefill-cluster", "--trace", str(trace), "--cache", "both", "--quiet"]) == 0
    assert "global" in capsys.readouterr().out
    faster = ["--trace", str(trace), "--rate-scale", "4", "--router", "least-loaded", "--ttft-slo", "60"]
    assert main(["simulate", "prefill-cluster", *faster, "--cache", "local,pool", "--quiet", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["cache"] for r in runs] == ["local", "pool"] and {r["rate_scale"] for r in runs} == {4.0}
    assert main(["simulate", "prefill-cluster", "--trace", str(trace), "--cache", "shared", "--quiet"]) == 2
    assert "--cache" in capsys.readouterr().err
    for bad in (["--rate-scale", "0"], ["--router", "random"]):
        with pytest.raises(SystemExit) as e:
            main(["simulate", "prefill-cluster", "--trace", str(trace), *bad, "--quiet"])
        assert e.value.code == 2 and bad[0] in capsys.readouterr().err
    assert (
        main(
            [
                "simulate",
                "serving",
                "--trace",
                str(trace),
                "--model",
                "llama-3.1-8b",
                "--instances",
                "2",
                "--quiet",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["finished"] + sum(r["rejected"].values()) == r["requests"] == 60


def test_plan_json_is_deterministic_and_timings_go_to_stderr(capsys):
    args = ["plan", "llama-70b-serving-long-context", "--top", "2", "--json"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main([*args, "--timings"]) == 0
    second = capsys.readouterr()
    assert first == second.out  # byte-identical JSON: no elapsed time or rate inside
    assert "plans in" in second.err and "/s)" in second.err


def test_an_objective_without_its_figure_is_one_line(capsys):
    """--objective cost on a device the catalog has no price for, energy on one without a published power: exit 2
    naming the figure and how to give it (it used to report no feasible plan)."""
    scenario = str(EXAMPLES / "serving-exchanges.yaml")
    for argv, needle in (
        (["--set", "system.device=h200", "--objective", "cost"], "system.price_per_device_hour"),
        (["--set", "system.device=tpu-v6e", "--objective", "energy"], "system.power_per_device"),
    ):
        rc, out, err = run(capsys, "plan", scenario, *argv)
        assert rc == 2 and out == "" and err.count("\n") == 1 and needle in err, err
    rc, out, _ = run(
        capsys,
        "plan",
        scenario,
        "--set",
        "system.device=tpu-v6e",
        "--set",
        "system.power_per_device=300W",
        "--objective",
        "energy",
        "--json",
    )
    assert rc == 0 and json.loads(out)


LEAVE = """
import atexit, sys, threading, time
from aitrinity.cli.main import leave
atexit.register(lambda: print("exit handler ran", file=sys.stderr))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished", flush=True))).start()
print("x" * 1_000_000)  # more than a pipe holds: still in the buffer when leave() starts
leave(3)
"""


@pytest.mark.parametrize("case", ["alone", "thread"])
def test_leave_flushes_the_output_runs_the_exit_handlers_and_keeps_the_code(case):
    """The console script leaves with ``os._exit`` (no module teardown): the buffered output, the ``atexit``
    handlers and the exit code all survive it, and a running thread is waited for (a plain exit then)."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", LEAVE, case], capture_output=True, text=True, timeout=120)
    assert p.returncode == 3
    assert "x" * 1_000_000 in p.stdout
    assert "exit handler ran" in p.stderr
    assert ("thread finished" in p.stdout) == (case == "thread")
