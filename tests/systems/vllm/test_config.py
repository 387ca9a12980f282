"""The connector's JSON settings: checked field by field, one line naming the field."""

from __future__ import annotations

import pytest

from aitrinity.systems.kvcache.keys import Keyer
from aitrinity.systems.vllm import transfer_config
from aitrinity.systems.vllm.config import ConfigError, ConnectorConfig


def test_transfer_config_plugs_the_connector_and_recomputes_failed_loads(tmp_path) -> None:
    tc = transfer_config([{"kind": "memory", "capacity_bytes": 1e9}, {"kind": "disk", "path": str(tmp_path)}], salt="t")
    assert tc["kv_connector"] == "TrinityKVConnector"
    assert tc["kv_connector_module_path"] == "aitrinity.systems.vllm.connector"
    assert tc["kv_load_failure_policy"] == "recompute"
    cfg = ConnectorConfig.parse(tc["kv_connector_extra_config"])
    assert cfg.to_json() == tc["kv_connector_extra_config"]
    assert [t.label for t in cfg.tiers] == ["memory", "disk"]
    store = cfg.open(Keyer.of("t", 16))
    assert [t.tier.name for t in store.tiers] == ["memory", "disk"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({}, "tiers"),
        ({"tiers": []}, "tiers"),
        ({"tiers": [{"kind": "tape"}]}, "tiers[0].kind"),
        ({"tiers": [{"kind": "memory"}]}, "tiers[0].capacity_bytes"),
        ({"tiers": [{"kind": "memory", "capacity_bytes": -1}]}, "tiers[0].capacity_bytes"),
        ({"tiers": [{"kind": "disk"}]}, "tiers[0].path"),
        ({"tiers": [{"kind": "redis", "url": "http://x"}]}, "tiers[0].url"),
        ({"tiers": [{"kind": "disk", "path": "/a"}, {"kind": "disk", "path": "/b"}]}, "names must differ"),
        ({"tiers": [{"kind": "disk", "path": "/a", "size": 3}]}, "unknown field"),
        ({"tiers": [{"kind": "disk", "path": "/a"}], "write": "sideways"}, "write"),
        ({"tiers": [{"kind": "disk", "path": "/a"}], "color": 1}, "unknown field"),
    ],
)
def test_bad_settings_name_the_field(extra: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        ConnectorConfig.parse(extra)
