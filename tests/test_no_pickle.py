"""No pickle (nor torch.load, marshal or shelve) anywhere in the package: data that crosses a boundary is raw
bytes with a header, JSON or YAML, checksummed where it is stored."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "aitrinity"
BANNED_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}


def test_no_module_imports_or_calls_a_deserialiser():
    found = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [f"{path}: import {a.name}" for a in node.names if a.name.split(".")[0] in BANNED_MODULES]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in BANNED_MODULES:
                found.append(f"{path}: from {node.module}")
            elif isinstance(node, ast.Attribute) and node.attr == "load" and getattr(node.value, "id", "") == "torch":
                found.append(f"{path}:{node.lineno}: torch.load")
    assert not found, found
