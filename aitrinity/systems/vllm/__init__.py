"""aitrinity inside vLLM: the tiered KV store as a KV connector (optional extra ``[vllm]``).

``transfer_config(tiers=...)`` gives the ``kv_transfer_config`` that plugs
``connector.TrinityKVConnector`` into ``vllm.LLM`` or ``vllm serve``;
``tiny_model`` writes a small local model (random weights, word-level
tokenizer) that vLLM loads with nothing downloaded. Only ``connector``
imports vLLM.
"""

from __future__ import annotations

from typing import Any

from aitrinity.systems.vllm.config import ConfigError, ConnectorConfig

CONNECTOR = "TrinityKVConnector"
MODULE = "aitrinity.systems.vllm.connector"


def transfer_config(
    tiers: list[dict[str, Any]], salt: str = "", write: str = "back", engine_id: str | None = None
) -> dict[str, Any]:
    """``kv_transfer_config`` for vLLM (a dict: ``LLM(kv_transfer_config=...)`` or ``--kv-transfer-config`` JSON).

    The settings are checked here first (``ConfigError`` names a bad field).
    A block that cannot be loaded is recomputed (``kv_load_failure_policy``).
    """
    cfg = ConnectorConfig.parse({"tiers": tiers, "salt": salt, "write": write})
    out: dict[str, Any] = {
        "kv_connector": CONNECTOR,
        "kv_connector_module_path": MODULE,
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": cfg.to_json(),
    }
    if engine_id is not None:
        out["engine_id"] = engine_id
    return out


__all__ = ["CONNECTOR", "MODULE", "ConfigError", "ConnectorConfig", "transfer_config"]
