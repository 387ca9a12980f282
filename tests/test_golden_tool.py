"""tools/golden.py's comparison: it must see every moved number, renamed key and resized list."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.golden import commands, differences


def test_equal_trees_have_no_differences():
    doc = {"a": [1.0, {"b": "x", "c": 2}], "d": None, "e": True}
    assert list(differences(doc, doc, 1e-9)) == []
    assert list(differences({"t": 1.0}, {"t": 1.0 + 1e-12}, 1e-9)) == []  # within the tolerance


def test_every_kind_of_change_is_reported_with_its_path():
    before = {"phases": [{"time_s": 1.0, "binding": "compute"}], "gone": 1, "items": [1, 2]}
    after = {"phases": [{"time_s": 1.1, "binding": "link"}], "new": 1, "items": [1, 2, 3]}
    got = list(differences(before, after, 1e-9))
    assert ".phases[0].time_s: 1.0 -> 1.1" in got
    assert any(d.startswith(".phases[0].binding:") for d in got)
    assert ".gone: only before" in got and ".new: only after" in got
    assert ".items: 2 items before, 3 after" in got


def test_the_commands_cover_every_example_and_built_in():
    argvs = [" ".join(a) for _, a in commands()]
    assert any(a.startswith("diagnose examples/") for a in argvs)
    assert "plan llama-70b-training-h100 --top 3" in argvs and any(a.startswith("report ") for a in argvs)


def test_added_fields_can_be_allowed_but_removed_ones_and_moved_numbers_cannot():
    before = {"rows": [{"t": 1.0}], "gone": 1}
    after = {"rows": [{"t": 2.0, "accuracy_drop": 0.0}], "new": {"x": 1}}
    got = list(differences(before, after, 1e-9, added_ok=True))
    assert got == [".gone: only before", ".rows[0].t: 1.0 -> 2.0"]
