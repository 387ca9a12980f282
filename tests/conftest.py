from __future__ import annotations

import pytest

from aitrinity import catalog
from aitrinity.catalog.loader import resolve_system
from aitrinity.spec.scenario import System, SystemInput


def make_system(device: str = "h100-sxm", n: int = 8, per_node: int = 8, **kw: object) -> System:
    return resolve_system(SystemInput(device=device, num_devices=n, devices_per_node=per_node, **kw))


@pytest.fixture
def h100_node() -> System:
    return make_system()


@pytest.fixture
def gpt3():
    return catalog.model("gpt-3-175b")
