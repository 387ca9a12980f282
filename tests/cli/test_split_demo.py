"""trinity split-demo end to end (small), and its input errors."""

import json

import pytest

from aitrinity.cli.main import main

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("safetensors")


@pytest.mark.multiproc
def test_split_demo_json(capsys):
    argv = ["split-demo", "--epochs", "1", "--frames", "8", "--fps", "0", "--rate", "50"]
    assert main([*argv, "--policy", "local,0:raw,adaptive", "--json", "--quiet"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [x["policy"] for x in r["runs"]] == ["local", "0:raw", "adaptive"]
    assert all(x["frames"] == 8 and x["fell_back"] == 0 for x in r["runs"])
    assert r["runs"][0]["bytes_sent"] == 0 and r["runs"][1]["bytes_sent"] == 8 * (40 + 16 + 4096)
    assert "slower than this CPU" in r["emulation"]


@pytest.mark.parametrize(
    "args, field",
    [
        (["--policy", "7:zip"], "--policy"),
        (["--frames", "0"], "--frames"),
        (["--rate", "-1"], "--rate"),
        (["--rate", "5", "--trace", "x.csv"], "--rate"),
        (["--trace", "no-such-trace.csv"], "no-such-trace.csv"),
    ],
)
def test_split_demo_input_errors(capsys, args, field):
    assert main(["split-demo", *args]) == 2
    assert field in capsys.readouterr().err
