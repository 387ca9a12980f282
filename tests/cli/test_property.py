"""Random valid and invalid scenarios through the CLI entry point.

Valid ones must exit 0 with a diagnosis (not fitting in memory is a valid
answer); invalid ones must exit 2 with exactly one line on stderr that names
the offending field -- never a traceback.
"""

from __future__ import annotations

import copy
import io
import os
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aitrinity import catalog
from aitrinity.cli.main import main

MODELS = ["llama-3.1-8b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "opt-13b", "llama-2-13b"]
# training and serving scenarios run in bf16: the edge devices (fp32-only SoCs and boards) are for edge scenarios
DEVICES = [n for n in catalog.names("devices") if catalog.device(n).tier != "device"]


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


@st.composite
def valid_scenarios(draw: Any) -> dict[str, Any]:
    name = draw(st.sampled_from(MODELS))
    m = catalog.model(name)
    tps = [t for t in _divisors(m.num_attention_heads, 16) if m.kv_heads % t == 0 or t % m.kv_heads == 0]
    tp = draw(st.sampled_from(tps))
    pp = draw(st.sampled_from(_divisors(m.num_layers, 4)))
    dp = draw(st.integers(1, 4))
    system = {
        "device": draw(st.sampled_from(DEVICES)),
        "num_devices": tp * pp * dp,
        "devices_per_node": draw(st.sampled_from([d for d in (1, 2, 4, 8, 16) if d >= tp])),  # TP inside a node
        "overlap": draw(st.sampled_from(["max", "sum", "partial"])),
        "host_memory": "host-dram",
    }
    plan: dict[str, Any] = {"tp": tp, "pp": pp}
    if m.moe:
        plan["ep"] = draw(st.sampled_from([e for e in (1, 2, 4) if dp % e == 0]))
    if draw(st.booleans()):
        mb = draw(st.integers(1, 2))
        plan.update(
            micro_batch=mb,
            zero=draw(st.integers(0, 3)),
            recompute=draw(st.sampled_from(["none", "selective", "full"])),
            sequence_parallel=tp > 1 and draw(st.booleans()),
            flash_attention=draw(st.booleans()),
        )
        job = {
            "training": {
                "seq_len": draw(st.integers(16, min(8192, m.max_seq_len))),
                "global_batch": dp * mb * draw(st.integers(1, 8)),
            }
        }
        options = [{"kind": "gradient-compression", "method": "int8"}, {"kind": "activation-offload", "fraction": 0.5}]
        if plan["zero"] < 3:
            options += [{"kind": "local-sgd", "period": 4}, {"kind": "optimizer-offload"}]
        plan["exchanges"] = draw(st.lists(st.sampled_from(options), unique_by=lambda x: x["kind"], max_size=3))
    else:
        prompt = draw(st.integers(1, min(4096, m.max_seq_len - 1)))
        output = draw(st.integers(1, min(1024, m.max_seq_len - prompt)))
        job = {
            "serving": {
                "prompt_tokens": prompt,
                "output_tokens": output,
                "batch": draw(st.one_of(st.integers(1, 64), st.just("max"))),
            }
        }
        options = [
            {"kind": "kv-offload", "tier": "host", "fraction": 0.5},
            {"kind": "prefix-cache", "hit_rate": 0.5, "tier": "hbm"},
            {"kind": "kv-quantization", "dtype": "fp8"},
            {"kind": "weight-quantization", "dtype": "int8"},
        ]
        plan["exchanges"] = draw(st.lists(st.sampled_from(options), unique_by=lambda x: x["kind"], max_size=3))
    return {"name": "random", "system": system, "workload": {"model": name, **job}, "plan": plan}


def _mutations(sc: dict[str, Any]) -> list[tuple[str, Any]]:
    """(field expected in the error, function that breaks the scenario)."""

    def setter(path: list[str], value: Any) -> Any:
        def f(d: dict[str, Any]) -> None:
            for k in path[:-1]:
                d = d.setdefault(k, {})
            d[path[-1]] = value

        return f

    def deleter(path: list[str]) -> Any:
        def f(d: dict[str, Any]) -> None:
            for k in path[:-1]:
                d = d[k]
            del d[path[-1]]

        return f

    job = "training" if "training" in sc["workload"] else "serving"
    m = catalog.model(sc["workload"]["model"])
    plan = sc["plan"]
    out = [
        ("plan.exchanges.0", setter(["plan", "exchanges"], [{"kind": "local-sgd", "period": 0}])),
        ("workload.model", setter(["workload", "model"], sc["workload"]["model"] + "-xl")),
        ("system.device", setter(["system", "device"], sc["system"]["device"][:-1] + "q")),
        ("system.num_devices", setter(["system", "num_devices"], -sc["system"]["num_devices"])),
        ("system.device", deleter(["system", "device"])),
        ("workload.model", deleter(["workload", "model"])),
        ("plan.colour", setter(["plan", "colour"], "blue")),
        ("system.price_per_device_hour", setter(["system", "price_per_device_hour"], "cheap")),
        ("plan.tp", setter(["plan", "tp"], m.num_attention_heads + 1)),
        ("plan.zero", setter(["plan", "zero"], 4)),
    ]
    if job == "training":
        out.append(("workload.training.seq_len", setter(["workload", "training", "seq_len"], -5)))
    else:
        out.append(("workload.serving.prompt_tokens", setter(["workload", "serving", "prompt_tokens"], 0)))
    if plan["tp"] * plan["pp"] > 1:
        out.append(("system.num_devices", setter(["system", "num_devices"], sc["system"]["num_devices"] + 1)))
    return out


def _run(scenario: dict[str, Any]) -> tuple[int, str, str]:
    fd, path = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(scenario, f)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(["diagnose", path, "--json"])
        return rc, out.getvalue(), err.getvalue()
    finally:
        os.unlink(path)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(valid_scenarios())
def test_valid_scenarios_are_diagnosed(sc):
    rc, out, err = _run(sc)
    assert rc == 0, err
    [d] = yaml.safe_load(out)  # JSON is YAML
    # stderr holds only the estimate's notes (kernel fallbacks, model caveats such as preemption), each in the JSON too
    assert err.splitlines() == [f"trinity: {sc['name']}: {n}" for n in d["estimate"]["notes"]]
    assert d["binding"]
    for ph in d["phases"]:
        assert ph["time_s"] > 0
        assert all(0 <= u["utilization"] <= 1 + 1e-9 for u in ph["uses"])


@SETTINGS
@given(valid_scenarios(), st.data())
def test_invalid_scenarios_get_one_line_naming_the_field(sc, data):
    field, mutate = data.draw(st.sampled_from(_mutations(sc)))
    broken = copy.deepcopy(sc)
    mutate(broken)
    rc, out, err = _run(broken)
    assert rc == 2, (field, out[:200])
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("trinity: error: "), err
    assert "Traceback" not in err
    assert field in err, (field, err)
