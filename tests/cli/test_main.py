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
