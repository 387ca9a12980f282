"""The connector's settings, as plain JSON in vLLM's ``kv_connector_extra_config``.

``{"tiers": [{"kind": "memory", "capacity_bytes": 2e9},
             {"kind": "disk", "path": "/var/cache/kv", "capacity_bytes": 50e9},
             {"kind": "redis", "url": "redis://127.0.0.1:6379/0"}],
   "salt": "tenant-a", "write": "back"}``

Tiers are listed fastest first (``systems.kvcache.store``). Every field is
checked here, so a bad setting stops the engine at start-up with one line
naming the field instead of failing on the first request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from aitrinity.systems.kvcache.keys import Keyer
from aitrinity.systems.kvcache.store import KVStore, TierConfig
from aitrinity.systems.kvcache.tiers import DiskTier, MemoryTier, RedisTier, Tier

KINDS = ("memory", "disk", "redis")


class ConfigError(ValueError):
    """A bad ``kv_connector_extra_config``: the message names the field."""


@dataclass(frozen=True)
class TierSpec:
    kind: Literal["memory", "disk", "redis"]
    capacity_bytes: int | None = None
    path: str | None = None
    url: str | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        return self.name or self.kind


@dataclass(frozen=True)
class ConnectorConfig:
    tiers: tuple[TierSpec, ...]
    salt: str = ""
    write: Literal["back", "through"] = "back"

    @classmethod
    def parse(cls, extra: Mapping[str, Any]) -> ConnectorConfig:
        unknown = set(extra) - {"tiers", "salt", "write"}
        if unknown:
            raise ConfigError(f"kv_connector_extra_config: unknown field(s) {sorted(unknown)}")
        raw = extra.get("tiers")
        if not isinstance(raw, list) or not raw:
            raise ConfigError("kv_connector_extra_config.tiers: a non-empty list of tiers, fastest first")
        tiers = tuple(_tier(i, t) for i, t in enumerate(raw))
        labels = [t.label for t in tiers]
        if len(set(labels)) != len(labels):
            raise ConfigError(f"kv_connector_extra_config.tiers: names must differ ({labels}); give each a 'name'")
        salt = extra.get("salt", "")
        if not isinstance(salt, str):
            raise ConfigError("kv_connector_extra_config.salt: a string")
        write = extra.get("write", "back")
        if write not in ("back", "through"):
            raise ConfigError("kv_connector_extra_config.write: 'back' or 'through'")
        return cls(tiers, salt, write)

    def to_json(self) -> dict[str, Any]:
        tiers = []
        for t in self.tiers:
            d: dict[str, Any] = {"kind": t.kind}
            for k in ("capacity_bytes", "path", "url", "name"):
                v = getattr(t, k)
                if v is not None:
                    d[k] = v
            tiers.append(d)
        return {"tiers": tiers, "salt": self.salt, "write": self.write}

    def open(self, keyer: Keyer) -> KVStore:
        """The store over these tiers, namespaced by ``keyer`` (model, dtype, layout, salt)."""
        return KVStore([TierConfig(_open(t, keyer.namespace), t.capacity_bytes) for t in self.tiers], self.write)


def _tier(i: int, t: Any) -> TierSpec:
    where = f"kv_connector_extra_config.tiers[{i}]"
    if not isinstance(t, Mapping):
        raise ConfigError(f"{where}: an object with a 'kind'")
    unknown = set(t) - {"kind", "capacity_bytes", "path", "url", "name"}
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
    kind = t.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind: one of {', '.join(KINDS)} (got {kind!r})")
    cap = t.get("capacity_bytes")
    if cap is not None:
        if isinstance(cap, bool) or not isinstance(cap, int | float) or cap <= 0:
            raise ConfigError(f"{where}.capacity_bytes: a positive number of bytes")
        cap = int(cap)
    path, url, name = t.get("path"), t.get("url"), t.get("name")
    if kind == "disk" and not (isinstance(path, str) and path):
        raise ConfigError(f"{where}.path: the disk tier's directory")
    if kind == "redis" and not (isinstance(url, str) and url.startswith(("redis://", "rediss://", "unix://"))):
        raise ConfigError(f"{where}.url: a redis:// URL")
    if kind == "memory" and cap is None:
        raise ConfigError(f"{where}.capacity_bytes: a memory tier needs a capacity")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"{where}.name: a string")
    return TierSpec(kind, cap, path, url, name)


def _open(t: TierSpec, namespace: str) -> Tier:
    if t.kind == "memory":
        return MemoryTier(t.label)
    if t.kind == "disk":
        assert t.path is not None
        return DiskTier(t.path, namespace, t.label)
    assert t.url is not None
    return RedisTier(t.url, namespace, t.label)
