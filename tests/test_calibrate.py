"""`trinity calibrate --quick` on this machine: a profile the catalog accepts, used to price scenarios."""

import pytest
import yaml

from aitrinity import api, catalog
from aitrinity.cli.main import main
from aitrinity.systems.calibrate import fit_half_rows


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "me.yaml"
    assert main(["calibrate", "--quick", "-o", str(path), "--name", "this-machine"]) == 0
    return path


def test_profile_is_a_catalog_device_with_its_measurements(profile):
    dev = catalog.device(str(profile))
    assert dev.name == "this-machine" and dev.kind == "cpu"
    assert dev.peak_flops["fp32"] > 1e9 and dev.memory_bandwidth_Bps > 1e9
    quantities = {m.quantity for m in dev.measured}
    assert {
        "memory copy",
        "memory triad",
        "disk sequential write",
        "disk sequential read",
        "loopback TCP",
        "codec int8 quantize",
        "codec top-1% select",
    } <= quantities
    assert any(q.startswith("matmul fp32 m=") for q in quantities)
    assert all(m.measured_at and m.method for m in dev.measured)


def test_halved_flops_profile_doubles_compute_bound_time_only(profile, tmp_path):
    data = yaml.safe_load(profile.read_text())
    data["name"] = "half-machine"
    data["peak_flops"] = {k: v / 2 for k, v in data["peak_flops"].items()}
    half = tmp_path / "half.yaml"
    half.write_text(yaml.safe_dump(data))

    train = [
        "system.num_devices=8",
        "plan.tp=1",
        "plan.pp=1",
        "plan.zero=3",
        "plan.sequence_parallel=false",
        "workload.model=llama-3.1-8b",
        "workload.training.global_batch=8",
        "workload.training.seq_len=512",  # compute above the memory traffic on a CPU profile
        "system.host_memory=null",
        "plan.recompute=full",
    ]

    def step(device, *extra):
        d = api.diagnose("llama-70b-training-h100", [f"system.device={device}", *train, *extra])
        return d.estimate.phase("train_step")

    def compute(ph):
        return next(r.time_s for r in ph.resources if r.kind == "compute")

    # compute-bound: everything inside one 8-device node
    c1, c2 = step(profile, "system.devices_per_node=8"), step(half, "system.devices_per_node=8")
    assert max(c1.resources, key=lambda r: r.time_s).kind == "compute"
    assert compute(c2) == pytest.approx(2 * compute(c1))
    assert c2.time_s == pytest.approx(2 * c1.time_s, rel=0.02)
    # bandwidth-bound: one device per node, gradients over a link slow enough for this machine's measured
    # FLOP/s -- a rate derived from the profile, so a slow or loaded machine gets a slower link, not a failure
    probe = step(profile, "system.devices_per_node=1", "link=100Mbit/s")
    link_s = max(r.time_s for r in probe.resources if r.kind == "link")
    mbit = 100 * min(1.0, link_s / (20 * compute(probe)))  # the link's time >= 20x the compute's
    b1 = step(profile, "system.devices_per_node=1", f"link={mbit:.6g}Mbit/s")
    b2 = step(half, "system.devices_per_node=1", f"link={mbit:.6g}Mbit/s")
    assert max(b1.resources, key=lambda r: r.time_s).kind == "link"
    assert compute(b2) == pytest.approx(2 * compute(b1))
    assert b2.time_s == pytest.approx(b1.time_s)


def test_efficiency_curve_fit():
    peak = 100.0
    curve = {m: peak * m / (m + 32.0) for m in (16, 64, 256, 1024, 4096)}
    fitted_peak, half = fit_half_rows(curve)
    assert fitted_peak == pytest.approx(peak, rel=1e-9)
    assert half == pytest.approx(32.0, rel=1e-9)
    flat = {m: 5.0 for m in (16, 64, 256)}
    assert fit_half_rows(flat) == pytest.approx((5.0, 0.0))


def test_threads_profile_says_so_and_restores_torch(tmp_path):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    path = tmp_path / "one.yaml"
    assert main(["calibrate", "--quick", "--threads", "1", "-o", str(path), "--quiet"]) == 0
    dev = catalog.device(str(path))
    assert "torch on 1 thread(s)" in dev.source
    streaming = {m.quantity: m.value for m in dev.measured if m.quantity.startswith("weight streaming")}
    assert set(streaming) == {"weight streaming", "weight streaming bf16"} and min(streaming.values()) > 1e8
    assert torch.get_num_threads() == before


def test_threads_must_be_positive(capsys):
    assert main(["calibrate", "--quick", "--threads", "0"]) != 0
    assert "--threads" in capsys.readouterr().err


def test_a_profile_as_a_model_in_another_dtype_sees_it():
    """The profile's memory efficiency is fp32's weight streaming; a bf16 model's decode streams at the bf16
    measurement's rate (when the profile has one), an fp32 model's at fp32's; without the measurement, as is."""
    from aitrinity.spec.hardware import Measurement
    from aitrinity.systems.calibrate import as_served

    dev = catalog.device("h100-sxm")
    bw = dev.memory_bandwidth_Bps

    def m(q: str, v: float) -> Measurement:
        return Measurement(quantity=q, value=v, unit="B/s", method="test", measured_at="now")

    prof = dev.model_copy(update={"measured": [m("weight streaming", 0.2 * bw), m("weight streaming bf16", 0.4 * bw)]})
    assert as_served(prof, "bf16").efficiency.memory == pytest.approx(0.4)
    assert as_served(prof, "fp32").efficiency.memory == pytest.approx(0.2)
    assert as_served(prof, "fp16") is prof and as_served(dev, "bf16") is dev
