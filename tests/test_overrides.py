import pytest

from aitrinity import api
from aitrinity.cli.main import main
from aitrinity.errors import SpecError, UnknownNameError

BASE = "llama-70b-training-h100"


def test_scenario_fields_and_shorthands():
    r = api.resolve(BASE, overrides=["gpus=512", "plan.zero=2", "workload.training.global_batch=1024"])
    assert r.system.num_devices == 512
    assert r.scenario.plan.zero == 2 and r.scenario.workload.training.global_batch == 1024
    assert r.scenario.plan.tp == 8  # untouched fields stay


def test_another_model_on_the_same_system_and_plan():
    r = api.resolve("llama-70b-serving-long-context", overrides=["model=qwen3-30b-a3b"])
    assert r.model.name == "qwen3-30b-a3b" and r.scenario.plan.tp == 8 and r.system.num_devices == 8
    with pytest.raises(UnknownNameError, match=r"workload\.model: unknown model 'no-such-model'"):
        api.resolve(BASE, overrides=["model=no-such-model"])


def test_link_by_bandwidth_or_by_name():
    r = api.resolve(BASE, overrides=["link=100Gbit/s"])
    assert r.system.inter_node_link.bandwidth_Bps == pytest.approx(12.5e9)
    assert r.system.inter_node_link.name == "ethernet-100g"  # the scenario's link, at the new rate
    r = api.resolve(BASE, overrides=["link=ethernet-25g"])
    assert r.system.inter_node_link.name == "ethernet-25g"


def test_hardware_overrides_move_the_estimate_the_right_way():
    base = api.diagnose(BASE).estimate.training.step_time_s
    slow = api.diagnose(BASE, ["flops_scale=0.5"]).estimate.training.step_time_s
    # compute-bound: half the FLOP/s slows the GEMMs and attention twofold; collectives, memory-bound
    # kernels and the pipeline sends keep their time, so the step takes well over 1.5x, under 2x
    assert 1.5 * base < slow < 2.0 * base
    fat = api.diagnose("trillion-param-training", ["hbm_capacity=400GiB"])
    assert fat.capacity.fits


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("plan.tp=3", "plan.tp"),
        ("nonsense=1", "--set"),
        ("gpus", "--set"),
        ("hbm_bandwidth=fast", "hbm_bandwidth"),
        ("plan.colour=red", "plan.colour"),
        ("flops_scale=0", "flops_scale"),
    ],
)
def test_bad_overrides_name_the_key(override, field):
    with pytest.raises(SpecError) as e:
        api.diagnose(BASE, [override])
    assert field in str(e.value) and "\n" not in str(e.value)


def test_cli_set_flag(capsys):
    assert main(["diagnose", BASE, "--set", "gpus=512", "--json"]) == 0
    assert '"num_devices": 512' in capsys.readouterr().out
    assert main(["diagnose", BASE, "--set", "plan.tp=3"]) == 2
    assert capsys.readouterr().err.startswith("trinity: error: plan.tp")


def test_relative_hardware_values():
    r0 = api.resolve(BASE)
    r = api.resolve(BASE, overrides=["hbm_bandwidth=x0.5", "intra_node_bandwidth=*2", "price=+50%", "flops=×1.5"])
    assert r.system.device.memory_bandwidth_Bps == pytest.approx(r0.system.device.memory_bandwidth_Bps / 2)
    assert r.system.intra_node_link.bandwidth_Bps == pytest.approx(2 * r0.system.intra_node_link.bandwidth_Bps)
    assert r.system.price_per_hour_usd == pytest.approx(1.5 * r0.system.price_per_hour_usd)
    assert r.system.device.peak_flops["bf16"] == pytest.approx(1.5 * r0.system.device.peak_flops["bf16"])
    r = api.resolve(BASE, overrides=["host_capacity=-25%", "power=800W", "price=$4/h"])
    assert r.system.host_memory.capacity_bytes == pytest.approx(0.75 * r0.system.host_memory.capacity_bytes)
    assert r.system.power_W == 800 and r.system.price_per_hour_usd == 4


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("flops=5", "flops"),  # relative only
        ("hbm_capacity=x0", "hbm_capacity"),
        ("hbm_capacity=-100%", "hbm_capacity"),
        ("hbm_capacity=xfast", "hbm_capacity"),
    ],
)
def test_bad_relative_values_name_the_key(override, field):
    with pytest.raises(SpecError) as e:
        api.resolve(BASE, overrides=[override])
    assert e.value.field == field


def test_a_quantity_the_system_lacks_is_refused():
    with pytest.raises(SpecError, match="host memory"):
        api.resolve("trillion-param-training", overrides=["host_capacity=x2"])


@pytest.mark.parametrize(
    "override, field",
    [
        ("link=0Gbit/s", "inter_node_bandwidth"),
        ("link=-5Gbit/s", "inter_node_bandwidth"),
        ("hbm_bandwidth=0", "hbm_bandwidth"),
        ("hbm_capacity=-80GiB", "hbm_capacity"),
        ("flops_scale=nan", "flops_scale"),
        ("flops=xinf", "flops"),
        ("workload.training.total_tokens=.inf", "total_tokens"),
        ("workload.training.total_tokens=.nan", "total_tokens"),
    ],
)
def test_zero_negative_and_nonfinite_quantities_are_refused_naming_the_field(override, field):
    from aitrinity import api
    from aitrinity.errors import SpecError

    with pytest.raises(SpecError) as err:
        api.diagnose("llama-70b-training-h100", [override])
    assert field in str(err.value)


def test_a_zero_uplink_is_refused_on_edge_scenarios():
    from aitrinity import api
    from aitrinity.errors import SpecError

    with pytest.raises(SpecError, match="uplink"):
        api.diagnose("camera-analytics-edge", ["uplink=0Mbit/s"])


def test_an_entry_of_a_list_is_set_by_its_index_and_a_bad_index_is_one_line():
    from aitrinity import api
    from aitrinity.errors import SpecError

    path = "examples/training-exchanges.yaml"
    d = api.diagnose(path, ["plan.exchanges.1.steps_factor=1.5"])
    local = next(x for x in d.exchanges if x.kind == "local-sgd")
    assert local.steps_factor == 1.5 and "1.5x assumed" in local.sentence
    for bad, expected in (
        ("plan.exchanges.7.steps_factor=2", "an entry index 0-2"),
        ("plan.exchanges.x.steps_factor=2", "an entry index 0-2"),
        ("plan.exchanges.1=2", "a field of one entry"),
        ("plan.exchanges.1.steps_factor=0.5", ">= 1"),
    ):
        with pytest.raises(SpecError, match=expected):
            api.diagnose(path, [bad])
