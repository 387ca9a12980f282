"""The docs say what the code does: README commands, the scenario format, the embedded examples."""

import re
from pathlib import Path

import pytest

from aitrinity import catalog
from aitrinity.cost.diagnosis import Diagnosis
from aitrinity.spec.edge import EdgeJob, EdgePlan, EdgeSystemInput, EdgeWorkloadInput
from aitrinity.spec.scenario import Plan, ServingJob, SystemInput, TrainingJob, WorkloadInput

ROOT = Path(__file__).resolve().parents[1]


def test_readme_opens_with_exactly_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first and text.index(first.group(0)) < text.index("\n## ")
    commands = [line for line in first.group(1).splitlines() if line.strip()]
    unmatched = "torchvision torchaudio torchcodec"
    assert commands == [
        "pip install -e . && trinity diagnose",
        f"pip install -e '.[dev]' && pip uninstall -y {unmatched} && pytest -q",
    ]
    ci = (ROOT / ".ci" / "run").read_text()
    steps = [
        "python -m pip install --quiet -e '.[dev]'",
        f"python -m pip uninstall --quiet -y {unmatched}",
        "python -m pytest -q",
    ]
    assert all(s in ci for s in steps) and [ci.index(s) for s in steps] == sorted(ci.index(s) for s in steps)


def test_examples_readme_embeds_the_builtin_scenarios_verbatim():
    text = (ROOT / "examples" / "README.md").read_text()
    for name in catalog.names("scenarios"):
        body = (ROOT / "aitrinity" / "catalog" / "data" / "scenarios" / f"{name}.yaml").read_text()
        assert f"### `{name}`\n\n```yaml\n{body}```" in text, f"examples/README.md is out of date for {name}"


@pytest.mark.parametrize(
    "model",
    [SystemInput, WorkloadInput, TrainingJob, ServingJob, Plan, EdgeSystemInput, EdgeWorkloadInput, EdgeJob, EdgePlan],
)
def test_every_scenario_field_is_documented(model):
    text = (ROOT / "examples" / "README.md").read_text()
    missing = [f for f in model.model_fields if f"`{f}`" not in text]
    assert not missing, f"undocumented {model.__name__} fields: {missing}"


def test_example_files_diagnose():
    from aitrinity import api

    for path in (ROOT / "examples").glob("*.yaml"):
        d = api.diagnose(path)
        assert d.verdict if isinstance(d, Diagnosis) else d.sentence
