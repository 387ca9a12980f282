"""The import graph follows DESIGN.md's layers: arrows point down only, and the pure core does no I/O.

Every import of an ``aitrinity`` module -- at module level or inside a function -- must go to the same
layer or one below. A new top-level module or package must be placed in :data:`LAYERS` first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "aitrinity"

LAYERS: list[tuple[str, ...]] = [
    ("units", "errors", "py"),
    ("spec", "catalog"),
    ("cost",),
    ("plan",),
    ("control",),
    ("systems",),
    ("sim",),
    # the front door: resolves names, reads files, applies overrides, orchestrates sweeps
    (
        "api",
        "edge",
        "hardware",
        "overrides",
        "ray_backend",
        "silicon",
        "sweep",
        "validate_serving",
        "validate_training",
    ),
    ("cli", "report", "ui"),
    ("__init__",),
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}

PURE = ("spec", "cost", "plan")
"""No I/O, no processes, no torch: DESIGN's 'pure functions' layers."""
IMPURE_MODULES = {"os", "pathlib", "subprocess", "socket", "io", "shutil", "tempfile", "torch", "redis", "ray"}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for f in sorted(PACKAGE.rglob("*.py")):
        rel = f.relative_to(PACKAGE).with_suffix("")
        parts = rel.parts[:-1] if rel.parts[-1] == "__init__" and len(rel.parts) > 1 else rel.parts
        out.append((".".join(parts), f))
    return out


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "aitrinity":
                names += [f"aitrinity.{a.name}" for a in node.names]
            else:
                names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def _top(dotted: str) -> str:
    return dotted.split(".")[0]


MODULES = _modules()


def test_every_top_level_module_has_a_layer():
    tops = {_top(m) for m, _ in MODULES}
    assert tops <= set(LEVEL), f"place these in tests/test_layers.py LAYERS: {sorted(tops - set(LEVEL))}"


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_imports_point_down(module, path):
    here = LEVEL[_top(module)]
    up = []
    for name in _imports(path):
        if not name.startswith("aitrinity.") or name == "aitrinity.__version__":
            continue
        target = _top(name.removeprefix("aitrinity."))
        if LEVEL.get(target, -1) > here:
            up.append(name)
    assert not up, f"{module} imports from a higher layer: {up}"


@pytest.mark.parametrize(
    ("module", "path"), [(m, p) for m, p in MODULES if _top(m) in PURE], ids=[m for m, _ in MODULES if _top(m) in PURE]
)
def test_the_pure_core_does_no_io(module, path):
    bad = sorted({n for n in _imports(path) if n.split(".")[0] in IMPURE_MODULES})
    assert not bad, f"{module} imports {bad}"
