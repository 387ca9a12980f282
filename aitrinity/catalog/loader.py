"""Lazy, validated catalog of devices, links, memory tiers, models and scenarios.

Entries are YAML files under ``data/<kind>/<name>.yaml``; a file is read only
when its entry is asked for. Names are lowercase with hyphens; an entry's
``aliases`` and (for models) ``hf_ids`` resolve to it case-insensitively.
Anywhere a name is accepted, a path to a user YAML file (or, for models, a
local Hugging Face ``config.json``) is accepted too.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel

from aitrinity.errors import SpecError, UnknownNameError
from aitrinity.spec._base import validate
from aitrinity.spec.edge import DnnSpec, EdgeScenario
from aitrinity.spec.hardware import DeviceSpec, LinkSpec, MemoryTierSpec
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Scenario, System, SystemInput
from aitrinity.spec.suite import Suite

Kind = Literal["devices", "links", "tiers", "models", "dnns", "scenarios", "suites"]
KINDS: tuple[Kind, ...] = ("devices", "links", "tiers", "models", "dnns", "scenarios", "suites")
_TYPES: dict[str, type[BaseModel]] = {
    "devices": DeviceSpec,
    "dnns": DnnSpec,
    "links": LinkSpec,
    "tiers": MemoryTierSpec,
    "models": ModelSpec,
    "scenarios": Scenario,
    "suites": Suite,
}
_SINGULAR = {
    "devices": "device",
    "links": "link",
    "tiers": "memory tier",
    "models": "model",
    "dnns": "DNN",
    "scenarios": "scenario",
    "suites": "workload suite",
}
DATA = Path(__file__).with_name("data")
T = TypeVar("T", bound=BaseModel)

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


MAX_YAML_NODES = 1_000_000
"""Largest document a file may expand to: anchors and aliases are allowed, a 'billion laughs' is not."""


def _expanded_nodes(doc: Any) -> int:
    """Nodes of ``doc`` with every alias expanded, counted on the shared structure (linear in its size)."""
    memo: dict[int, int] = {}

    def size(x: Any) -> int:
        if not isinstance(x, dict | list):
            return 1
        key = id(x)
        if key not in memo:
            memo[key] = 0  # a cycle (a recursive alias) counts once
            items = x.values() if isinstance(x, dict) else x
            memo[key] = min(1 + sum(size(v) for v in items), MAX_YAML_NODES + 1)
        return memo[key]

    return size(doc)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file, turning I/O, encoding and syntax errors and alias bombs into one-line SpecErrors."""
    try:
        raw = path.read_bytes()
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the name
        raise SpecError.at(path, f"cannot read the file ({getattr(e, 'strerror', None) or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError.at(path, f"not UTF-8 text (byte {e.start})") from None
    try:
        doc = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise SpecError.at(path, f"not valid YAML (syntax error{at})") from None
    if _expanded_nodes(doc) > MAX_YAML_NODES:
        raise SpecError.at(path, f"expands to over {MAX_YAML_NODES:,} nodes through aliases (refused)")
    return doc


def names(kind: Kind) -> list[str]:
    """Canonical names of one kind, sorted (a directory listing; no file is parsed)."""
    return sorted(p.stem for p in (DATA / kind).glob("*.yaml"))


def _check_kind(kind: str) -> None:
    if kind not in _TYPES:
        raise UnknownNameError("catalog kind", kind, KINDS)


@functools.cache
def _alias_index(kind: str) -> dict[str, str]:
    """alias / HF id (lower-case) -> canonical name; parses every file of the kind once."""
    index: dict[str, str] = {}
    for name in names(kind):  # type: ignore[arg-type]
        raw = read_yaml(DATA / kind / f"{name}.yaml") or {}
        for alias in [*raw.get("aliases", []), *raw.get("hf_ids", [])]:
            index[str(alias).lower()] = name
    return index


def canonical(kind: Kind, name: str) -> str:
    """The canonical entry name for a name, alias or Hugging Face id."""
    _check_kind(kind)
    key = name.strip().lower()
    if "/" not in key and is_file(DATA / kind / f"{key}.yaml"):
        return key
    index = _alias_index(kind)
    if key in index:
        return index[key]
    raise UnknownNameError(_SINGULAR[kind], name, [*names(kind), *index])


def _type(kind: str, data: Any) -> type[BaseModel]:
    """The spec type of a file of ``kind``: a scenario whose workload has an ``edge`` job is an edge scenario."""
    workload = data.get("workload") if isinstance(data, dict) else None
    if kind == "scenarios" and isinstance(workload, dict) and "edge" in workload:
        return EdgeScenario
    return _TYPES[kind]


@functools.cache
def _load_entry(kind: str, name: str) -> BaseModel:
    path = DATA / kind / f"{name}.yaml"
    data = read_yaml(path)
    spec = validate(_type(kind, data), data, source=f"catalog {kind}/{name}.yaml")
    if getattr(spec, "name", name) != name:
        raise SpecError(
            "name", getattr(spec, "name", None), f"{name!r} (the file name)", source=f"catalog {kind}/{name}.yaml"
        )
    return spec


def _is_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml", ".json")) or ("/" in ref and _exists(ref))


def is_file(ref: str | Path) -> bool:
    """Whether ``ref`` names a file; a name the OS cannot look up (NUL byte, too long) does not."""
    try:
        return Path(ref).is_file()
    except (OSError, ValueError):
        return False


def _exists(ref: str) -> bool:
    """Whether a file is there; a name the OS cannot even look up (NUL byte, too long) is not."""
    try:
        return Path(ref).exists()
    except (OSError, ValueError):
        return False


def hf_config_model(path: Path, name: str | None = None) -> ModelSpec:
    """A model from a Hugging Face ``config.json``, named ``name`` or else after its ``_name_or_path`` or folder."""
    from aitrinity.catalog.hf import from_hf_config

    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SpecError.at(path, f"not a readable JSON config ({e.__class__.__name__})") from None
    if not isinstance(cfg, dict):
        raise SpecError.at(path, f"expected a JSON object, got {type(cfg).__name__}")
    if name is None:
        name = str(cfg.get("_name_or_path") or path.parent.name or path.stem).split("/")[-1].lower()
    return from_hf_config(cfg, name, str(path))


def load_file(kind: Kind, path: str | Path, cls: type[T]) -> T:
    p = Path(path)
    if not is_file(p):
        raise SpecError.at(path, f"no such {_SINGULAR[kind]} file")
    if kind == "models" and p.suffix == ".json":
        return hf_config_model(p)  # type: ignore[return-value]
    data = read_yaml(p)
    if not isinstance(data, dict):  # said by its type: the file's text is not echoed back
        got = "an empty file" if data is None else f"a YAML {type(data).__name__}"
        raise SpecError.at(path, f"not a {_SINGULAR[kind]} file: expected a YAML mapping of its fields, got {got}")
    return validate(_type(kind, data) if cls is Scenario else cls, data, source=str(path))  # type: ignore[return-value]


def get(kind: Kind, ref: str, cls: type[T], base: Path | None = None) -> T:
    """An entry by name, alias, HF id, or file path (relative paths: against ``base`` first)."""
    if _is_path(ref):
        if base is not None and not Path(ref).is_absolute() and is_file(base / ref):
            return load_file(kind, base / ref, cls)
        return load_file(kind, ref, cls)
    spec = _load_entry(kind, canonical(kind, ref))
    assert isinstance(spec, cls)
    return spec


def device(ref: str, base: Path | None = None) -> DeviceSpec:
    return get("devices", ref, DeviceSpec, base)


def link(ref: str, base: Path | None = None) -> LinkSpec:
    return get("links", ref, LinkSpec, base)


def tier(ref: str, base: Path | None = None) -> MemoryTierSpec:
    return get("tiers", ref, MemoryTierSpec, base)


def model(ref: str, base: Path | None = None) -> ModelSpec:
    """A model by catalog name, alias, Hugging Face id or file; else, with the ``[silicon]`` extra, one read from the
    ``config.json`` aiconfigurator-core ships for that Hugging Face id (its ``source`` names the file): the package
    knows more models than the catalog (``tools/model_coverage.py``)."""
    try:
        return get("models", ref, ModelSpec, base)
    except UnknownNameError:
        shipped = _shipped_model(ref.strip())
        if shipped is None:
            raise
        return shipped


@functools.cache
def _shipped_model(hf_id: str) -> ModelSpec | None:
    from aitrinity.catalog.kernel_tables import shipped_model_config

    path = shipped_model_config(hf_id)
    return None if path is None else hf_config_model(path, hf_id.split("/")[-1].lower())


def dnn(ref: str, base: Path | None = None) -> DnnSpec:
    return get("dnns", ref, DnnSpec, base)


def scenario(ref: str, base: Path | None = None) -> Scenario | EdgeScenario:
    if _is_path(ref):
        return load_file("scenarios", ref, Scenario)
    spec = _load_entry("scenarios", canonical("scenarios", ref))
    assert isinstance(spec, Scenario | EdgeScenario)
    return spec


def suite(ref: str | Path) -> Suite:
    """A built-in workload suite by name, or a suite file."""
    r = str(ref)
    if _is_path(r) or is_file(r):
        return load_file("suites", r, Suite)
    return get("suites", r, Suite)


def entry(ref: str) -> tuple[Kind, BaseModel]:
    """Find ``ref`` in any kind (for ``trinity catalog show``); a file is read as whichever kind it validates as."""
    if _is_path(ref):
        first: SpecError | None = None
        for kind in KINDS:
            try:
                return kind, load_file(kind, ref, _TYPES[kind])
            except SpecError as e:
                first = first or e
        assert first is not None
        raise first
    for kind in KINDS:
        try:
            return kind, _load_entry(kind, canonical(kind, ref))
        except UnknownNameError:
            continue
    every = [n for k in KINDS for n in names(k)]
    raise UnknownNameError("catalog entry", ref, every)


def resolve_system(s: SystemInput, base: Path | None = None) -> System:
    """Names -> specs. Links and the node size the scenario leaves out default to the device's typical platform."""
    dev = _field("system.device", lambda: device(s.device, base))
    intra = _field("system.intra_node_link", lambda: link(s.intra_node_link or dev.typical_intra_node_link, base))
    inter = _field("system.inter_node_link", lambda: link(s.inter_node_link or dev.typical_inter_node_link, base))
    host_link = _field("system.host_link", lambda: link(s.host_link or dev.typical_host_link, base))
    tiers: dict[str, MemoryTierSpec | None] = {}
    for field in ("host_memory", "storage", "remote_pool"):
        ref = getattr(s, field)
        tiers[field] = _field(f"system.{field}", functools.partial(tier, ref, base)) if ref else None
    return validate(
        System,
        {
            "device": dev,
            "num_devices": s.num_devices,
            "devices_per_node": s.devices_per_node or dev.typical_devices_per_node,
            "devices_per_host": _devices_per_host(s, dev),
            "intra_node_link": intra,
            "inter_node_link": inter,
            "host_link": host_link,
            **tiers,
            "overlap": s.overlap,
            "overlap_fraction": s.overlap_fraction,
            "comm_sm_share": s.comm_sm_share,
            "usable_memory_fraction": s.usable_memory_fraction,
            "price_per_device_hour_usd": s.price_per_device_hour,
            "power_per_device_W": s.power_per_device,
            "efficiency": s.efficiency,
            "engine": s.engine,
            "engine_version": s.engine_version,
        },
        "system",
    )


def _devices_per_host(s: SystemInput, dev: DeviceSpec) -> int | None:
    """The scenario's, else the device's where its host is smaller than the node the scenario gives (a scenario
    that makes the node a host -- ``devices_per_node: 8`` on a TPU -- keeps it one)."""
    if s.devices_per_host is not None:
        return s.devices_per_host  # (System refuses one above the node)
    node = s.devices_per_node or dev.typical_devices_per_node
    typical = dev.typical_devices_per_host
    return typical if typical is not None and typical < node else None


def _field(field: str, fn: Callable[[], T]) -> T:
    """Run a lookup, naming the scenario field in an unknown-name error."""
    try:
        return fn()
    except UnknownNameError as e:
        raise e.at(field) from None


def load_scenario(path: str | Path) -> Scenario | EdgeScenario:
    """A user scenario file, or a built-in scenario by name (an edge scenario when its workload is ``edge``)."""
    ref = str(path)
    if _is_path(ref) or is_file(ref):
        return load_file("scenarios", ref, Scenario)
    return scenario(ref)
