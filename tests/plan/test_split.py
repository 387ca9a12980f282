"""Edge scenarios through api and CLI: the diagnosis, the plan, what-ifs, and errors that name the field."""

import json

import pytest

from aitrinity import api
from aitrinity.cli.main import main
from aitrinity.errors import SpecError, UnknownNameError
from aitrinity.plan.split import EdgeDiagnosis, EdgePlanReport


def test_the_builtin_camera_scenario_is_diagnosed():
    d = api.diagnose("camera-analytics-edge")
    assert isinstance(d, EdgeDiagnosis)
    assert d.chosen_by == "planner" and d.binding in d.utilization
    assert d.chosen.latency_s <= min(d.all_local.latency_s, d.all_offload.latency_s)
    assert d.trace_shares and sum(s.fraction_of_time for s in d.trace_shares) == pytest.approx(1.0)
    assert len(d.latency_envelope) >= 2  # the swinging uplink crosses a break-even


def test_the_uplink_what_if_moves_the_choice():
    slow = api.diagnose("camera-analytics-edge", ["uplink=0.2Mbit/s"])
    fast = api.diagnose("camera-analytics-edge", ["uplink=1Gbit/s"])
    assert isinstance(slow, EdgeDiagnosis) and isinstance(fast, EdgeDiagnosis)
    assert slow.chosen.label == "all local"
    assert fast.chosen.uplink_bytes > 0
    wifi = api.diagnose("camera-analytics-edge", ["uplink=wifi-6"])
    assert isinstance(wifi, EdgeDiagnosis) and wifi.uplink == "wifi-6"


def test_a_fixed_split_is_diagnosed_as_written():
    d = api.diagnose("camera-analytics-edge", ["plan.split=layer3_6", "plan.codec=int8"])
    assert isinstance(d, EdgeDiagnosis)
    assert d.chosen_by == "plan" and d.chosen.after == "layer3_6" and d.chosen.codec == "int8"
    with pytest.raises(UnknownNameError, match=r"plan\.split"):
        api.diagnose("camera-analytics-edge", ["plan.split=layer9"])
    with pytest.raises(SpecError, match=r"plan\.split"):
        api.diagnose("camera-analytics-edge", ["plan.split=99"])


def test_more_frames_than_the_binding_resource_carries_queue():
    d = api.diagnose("camera-analytics-edge", ["workload.edge.frames_per_s=50"])
    assert isinstance(d, EdgeDiagnosis)
    assert d.utilization[d.binding] > 1 and "frames queue" in d.sentence


def test_plan_ranks_by_the_objective():
    lat = api.plan("camera-analytics-edge", "latency", top=3)
    en = api.plan("camera-analytics-edge", "energy", top=3)
    assert isinstance(lat, EdgePlanReport) and isinstance(en, EdgePlanReport)
    assert [o.latency_s for o in lat.top] == sorted(o.latency_s for o in lat.top)
    assert [o.device_energy_J for o in en.top] == sorted(o.device_energy_J for o in en.top)
    with pytest.raises(SpecError, match="--objective"):
        api.plan("camera-analytics-edge", "throughput")


def test_edge_scenarios_are_refused_where_only_training_or_serving_make_sense():
    with pytest.raises(SpecError, match="edge"):
        api.resolve("camera-analytics-edge")


def test_cli_text_and_json(capsys):
    assert main(["diagnose", "camera-analytics-edge"]) == 0
    out = capsys.readouterr().out
    assert "best choice by uplink bandwidth" in out and "Mbit/s" in out
    assert main(["plan", "camera-analytics-edge", "--json", "--objective", "energy"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["kind"] == "edge" and rep["objective"] == "energy" and rep["best"]["split"] >= 0
    assert main(["diagnose", "camera-analytics-edge", "--set", "system.uplink=lte-uplnk"]) == 2
    assert "did you mean lte-uplink" in capsys.readouterr().err


def test_catalog_lists_dnns(capsys):
    assert main(["catalog", "list", "dnns"]) == 0
    assert "resnet-50" in capsys.readouterr().out
    assert main(["catalog", "show", "mobilenet-v2", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)["derived"]
    assert facts["params"][0] == 3504872 and facts["vs_published_params"][0] == 0


def test_a_device_without_the_dnns_dtype_or_a_power_is_named():
    """The split runs the DNN in its activation dtype on both sides and prices the device's energy: a server without
    that dtype's peak (a TPU has no fp32) names the server and the dtypes it has; a device without a published power
    names system.device_power. A server's power is never needed."""
    with pytest.raises(SpecError, match=r"system\.server.*fp32 peak.*bf16, fp16, int8"):
        api.diagnose("camera-analytics-edge", overrides=["system.server=tpu-v6e"])
    with pytest.raises(SpecError, match=r"system\.device_power.*tpu-v6e publishes no power"):
        api.diagnose("camera-analytics-edge", overrides=["system.device=tpu-v6e", "system.server=tpu-v5p"])
