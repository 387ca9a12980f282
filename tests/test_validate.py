"""`trinity validate --quick`: every structural prediction holds on real torch modules; times are reported."""

import json

import pytest

pytest.importorskip("torch")

from aitrinity.cli.main import main


def test_validate_quick(tmp_path, capsys):
    md = tmp_path / "tables.md"
    rc = main(["validate", "--quick", "--json", "--markdown", str(md)])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0
    checked = [r for r in report["rows"] if r["tolerance"] is not None]
    assert {r["quantity"] for r in checked} == {
        "parameters",
        "forward FLOPs",
        "saved activations (one layer)",
        "KV-cache bytes",
    }
    assert all(r["ok"] for r in checked)
    timed = [r for r in report["rows"] if r["tolerance"] is None]
    assert {r["quantity"] for r in timed} == {"prefill time", "train-step time", "decode-step time"}
    assert all(r["measured"] > 0 and r["predicted"] > 0 for r in timed)
    assert report["timing_median_abs_error"] is not None
    assert "| parameters |" in md.read_text()
