"""Serving at a fixed concurrency through api.diagnose: the operator model inside the Estimate contract."""

import json

import pytest

from aitrinity import api
from aitrinity.cli.main import main
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Scenario


def _scenario(**serving):
    job = {"prompt_tokens": 1024, "output_tokens": 256, "batch": 2, **serving}
    return validate(
        Scenario,
        {
            "name": "s",
            "system": {"device": "h100-sxm", "num_devices": 8, "engine": "vllm"},
            "workload": {"model": "llama-3.1-8b", "serving": job},
            "plan": {"tp": 8},
        },
    )


def test_small_batch_decode_is_bound_by_launch_and_collective_latency():
    d = api.diagnose(_scenario())
    dec = d.phases[1]
    assert dec.binding == "latency:launch" and dec.binding_kind == "latency"
    assert dec.binding_label == "operator launch / collective latency"
    ops = {o.operator for o in d.estimate.phase("decode_step").operators}
    assert {"gemm", "attention", "communication", "elementwise", "engine"} <= ops
    assert d.estimate.serving.mode == "concurrency"
    assert all(0 <= u.utilization <= 1 + 1e-9 for p in d.phases for u in p.uses)


def test_a_large_batch_decode_is_bound_by_a_bandwidth_not_by_launches():
    d = api.diagnose(_scenario(batch=256, prompt_tokens=8192, output_tokens=1024))
    assert d.phases[1].binding_kind != "latency"


def test_metrics_follow_littles_law():
    est = api.estimate(api.resolve(_scenario(batch=16)))
    s = est.serving
    assert s.request_latency_s == pytest.approx(s.ttft_s + 255 * s.tpot_s)
    assert s.output_tokens_per_s == pytest.approx(16 * 256 / s.request_latency_s)
    assert est.phase("prefill").time_s == s.ttft_s and est.phase("decode_step").time_s == s.tpot_s


def test_static_mode_keeps_the_phase_roofline():
    est = api.estimate(api.resolve(_scenario(mode="static")))
    assert est.serving.mode == "static" and est.kernels is None
    assert all(not p.operators for p in est.phases)


def test_kv_offload_streams_bound_the_step_when_the_link_is_slow():
    sc = _scenario(batch=24, prompt_tokens=1, output_tokens=724)
    sc = sc.model_copy(
        update={
            "system": sc.system.model_copy(update={"host_memory": "host-dram", "num_devices": 1}),
            "plan": sc.plan.model_copy(update={"tp": 1}),
        }
    )
    data = sc.model_dump(mode="json", exclude_unset=True)
    data["plan"]["exchanges"] = [{"kind": "kv-offload", "tier": "host", "fraction": 0.5}]
    d = api.diagnose(validate(Scenario, data))
    for p in d.phases:
        assert all(0 <= u.utilization <= 1 + 1e-9 for u in p.uses)
        assert p.time_s >= max(u.time_s for u in p.uses)


def test_an_engine_version_without_tables_is_said_on_stderr_and_in_json(capsys, tmp_path):
    import yaml

    data = _scenario().model_dump(mode="json", exclude_unset=True)
    data["system"]["engine_version"] = "0.1.0"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["diagnose", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    [d] = json.loads(captured.out)
    assert captured.err.strip() == "trinity: s: no vllm 0.1.0 tables for h100-sxm: using 0.24.0"
    assert d["estimate"]["kernels"].startswith("table h100_sxm/vllm/")
    assert any("no vllm 0.1.0 tables" in n for n in d["estimate"]["notes"])
    assert main(["diagnose", str(path)]) == 0
    assert "note: no vllm 0.1.0 tables" in capsys.readouterr().out


def test_moe_routing_skew_slows_wide_expert_parallel_serving_and_leaves_dense_models_alone():
    """workload.serving.moe_routing: with power-law expert popularity the hottest EP rank carries more than the mean,
    by the measured fused-MoE ratio (ROUTING_SKEW), so DeepSeek-V3 at EP 8 decodes 64 clients more slowly than with
    balanced routing; a dense model has no experts to skew."""

    def tpot(model, routing, **plan):
        sc = validate(
            Scenario,
            {
                "name": "s",
                "system": {"device": "h200", "num_devices": 8},
                "workload": {
                    "model": model,
                    "serving": {"prompt_tokens": 1024, "output_tokens": 256, "batch": 64, "moe_routing": routing},
                },
                "plan": {"tp": 1, "weight_dtype": "fp8", "compute_dtype": "fp8", **plan},
            },
        )
        return api.diagnose(sc).estimate.serving.tpot_s

    balanced, skewed = tpot("deepseek-v3", "balanced", ep=8), tpot("deepseek-v3", "power_law_1.2", ep=8)
    assert skewed > balanced
    assert tpot("llama-3.1-8b", "balanced") == tpot("llama-3.1-8b", "power_law_1.2")


def _kv_bound(engine: str, prompt_tokens: int, output_tokens: int, clients: int = 64):
    """Llama-3.1-70B fp8 on two H100s at 64 clients: the layout of the development run past its KV slots."""
    return validate(
        Scenario,
        {
            "name": "kv-bound",
            "system": {"device": "h100-sxm", "num_devices": 2, "engine": engine},
            "workload": {
                "model": "llama-3.1-70b",
                "serving": {"prompt_tokens": prompt_tokens, "output_tokens": output_tokens, "batch": clients},
            },
            "plan": {"tp": 2, "weight_dtype": "fp8"},
        },
    )


def test_a_preempting_engine_past_its_kv_slots_with_long_outputs_says_the_wait_is_misplaced():
    """docs/silicon.md, "More clients than KV slots on an engine that preempts": the analytic wait sits before the
    first token; vLLM's recompute preemption moves part of it after, where outputs are at least half as long as prompts.
    The note names it and the simulator command that replays the scenario's replica; prompt-heavy runs (where the
    two models agree), TensorRT-LLM (no preemption) and a run within its slots get no note."""
    from aitrinity.cli.main import _parser
    from aitrinity.cost.estimate import PREEMPTION_NOTE

    def flagged(est):
        return [n for n in est.notes if n.startswith(PREEMPTION_NOTE)]

    est = api.estimate(api.resolve(_kv_bound("vllm", 1024, 8192)))
    assert est.serving.ttft_s > 10.0  # clients wait for KV slots
    (note,) = flagged(est)
    command = note.split(": trinity ", 1)[1].split()
    args = _parser().parse_args(command)
    assert (args.model, args.device, args.engine, args.dtype) == ("llama-3.1-70b", "h100-sxm", "vllm", "fp8")
    assert (args.tp, args.concurrency, args.isl, args.osl) == (2, 64, 1024, 8192)
    assert not flagged(api.estimate(api.resolve(_kv_bound("vllm", 8192, 1024))))
    trt = api.estimate(api.resolve(_kv_bound("trtllm", 1024, 8192)))
    assert trt.serving.ttft_s > 10.0 and not flagged(trt)
    fits = api.estimate(api.resolve(_kv_bound("vllm", 1024, 8192, clients=8)))
    assert fits.phase("prefill").time_s < 1.0 and not flagged(fits)
