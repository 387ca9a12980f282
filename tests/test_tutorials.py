"""The tutorials show real output: every deterministic console block is re-run and must match."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("tutorials", ROOT / "tools" / "tutorials.py")
tutorials = importlib.util.module_from_spec(spec)
sys.modules["tutorials"] = tutorials
spec.loader.exec_module(tutorials)

FILES = sorted((ROOT / "docs" / "tutorials").glob("*.md"))


def test_there_is_a_tutorial_per_representative_system():
    assert {f.stem for f in FILES} >= {"edge-cloud", "distributed-training", "serving"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_tutorial_outputs_are_current(path):
    assert tutorials.check(path) == []


def test_every_block_has_commands_and_the_measured_ones_ran():
    for f in FILES:
        found = tutorials.blocks(f.read_text())
        assert found, f.name
        for _, m in found:
            steps = tutorials.steps(m.group(2))
            assert steps and all(s.output.strip() for s in steps), (f.name, [s.command for s in steps])


def test_check_reports_a_drifted_output(tmp_path):
    doc = tmp_path / "t.md"
    doc.write_text("```console\n$ echo hello\ngoodbye\n```\n")
    problems = tutorials.check(doc)
    assert len(problems) == 1 and "+hello" in problems[0] and "-goodbye" in problems[0]
    doc.write_text(tutorials.update(doc, measured=False))
    assert tutorials.check(doc) == []
