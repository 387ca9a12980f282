"""trinity plan --scenarios DIR: the best plan of every scenario file, one table per kind; bad input in one line."""

import json
import shutil


def test_every_scenario_file_gets_its_best_plan(capsys):
    from aitrinity.cli.main import main

    assert main(["plan", "--scenarios", "examples"]) == 0
    out = capsys.readouterr().out
    for title in ("best training plans:", "best serving plans:", "best edge plans:"):
        assert title in out
    files = ("training-exchanges.yaml", "serving-exchanges.yaml", "edge-phone-wifi.yaml", "custom-device.yaml")
    files += ("long-context-training.yaml", "long-context-serving.yaml")
    deepseek = ("deepseek-r1-h200.yaml", "deepseek-r1-gb200-nvl72.yaml", "deepseek-r1-gb200-nvl72-disaggregated.yaml")
    for name in (*files, *deepseek):
        assert name in out
    assert main(["plan", "--scenarios", "examples", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["file"] for d in data] == sorted(d["file"] for d in data) and len(data) == 9
    assert {d["kind"] for d in data} == {"training", "serving", "edge"}


def test_bad_scenario_folders_and_mixed_arguments_are_one_line_errors(tmp_path, capsys):
    from aitrinity.cli.main import main

    cases = [
        ["plan", "--scenarios", str(tmp_path / "missing")],  # no such folder
        ["plan", "--scenarios", str(tmp_path)],  # no scenario file in it
        ["plan", "llama-70b-training-h100", "--scenarios", "examples"],  # both
        ["plan"],  # neither
    ]
    for args in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, (args, err)
    shutil.copy("examples/training-exchanges.yaml", tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text("workload: {model: no-such-model}\n")
    assert main(["plan", "--scenarios", str(tmp_path)]) == 2  # a bad file is named
    assert "b.yaml" in capsys.readouterr().err
