"""Exact-state tests of the exchanges' effects on the ledgers."""

import pytest

from aitrinity import catalog
from aitrinity.cost.flops import causal_score_flops, token_flops
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.cost.params import count, weight_matrices
from aitrinity.cost.serving import max_batch, serving_ledger
from aitrinity.cost.training import training_ledger
from aitrinity.errors import SpecError
from aitrinity.spec._base import validate
from aitrinity.spec.scenario import Plan, ServingJob, TrainingJob
from tests.conftest import make_system

L8B = catalog.model("llama-3.1-8b")
JOB = TrainingJob(seq_len=4096, global_batch=64)


def _plan(*exchanges, **kw):
    return validate(Plan, {**kw, "exchanges": list(exchanges)}, "plan")


def _train(plan, n=16, **sys_kw):
    return training_ledger("t", L8B, JOB, plan, make_system(n=n, **sys_kw))


def _dp(ledger):
    [t] = [t for t in ledger.phases[0].traffic if t.purpose.startswith("DP gradient")]
    return t


PSI = count(L8B).total
N = 16


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("int8", 2 * (N - 1) / N * PSI * (1 + 4 / 2048)),  # quantized all-reduce
        ("topk", (N - 1) * PSI * 0.01 * (2 + 4)),  # gathered values + int32 indices
        ("sign", (N - 1) * PSI * (1 / 8 + 4 / 2048)),  # gathered sign bits + scales
    ],
)
def test_gradient_compression_bytes_on_the_wire(method, expected):
    led = _train(_plan({"kind": "gradient-compression", "method": method}, zero=1))
    assert _dp(led).bytes_per_device == pytest.approx(expected, rel=1e-9)


def test_powersgd_sends_the_rank_r_factors():
    r = 4
    led = _train(_plan({"kind": "gradient-compression", "method": "powersgd", "rank": r}, zero=1))
    mats = weight_matrices(L8B)
    elems = sum(a * b * k for a, b, k in mats)
    factors = sum(r * (a + b) * k for a, b, k in mats)
    assert _dp(led).bytes_per_device == pytest.approx(2 * (N - 1) / N * PSI * 2 * factors / elems, rel=1e-9)
    assert led.phases[0].flops.exchange == pytest.approx(sum(4 * a * b * r * k for a, b, k in mats) * PSI / elems)


def test_error_feedback_buffer_and_local_sgd():
    led = _train(
        _plan(
            {"kind": "gradient-compression", "method": "topk", "density": 0.05},
            {"kind": "local-sgd", "period": 8},
            zero=1,
        )
    )
    buffers = [i for i in led.memory if i.category == "buffers"]
    assert buffers[0].bytes == pytest.approx(2 * PSI)  # a bf16 residual per parameter
    assert _dp(led).bytes_per_device == pytest.approx((N - 1) * PSI * 0.05 * 6 / 8)
    plain = _dp(_train(_plan(zero=1))).bytes_per_device
    local = _dp(_train(_plan({"kind": "local-sgd", "period": 4}, zero=1))).bytes_per_device
    assert local == pytest.approx(plain / 4)


def test_optimizer_offload_moves_states_and_the_update_to_the_host():
    base = _train(_plan(zero=1), host_memory="host-dram")
    off = _train(_plan({"kind": "optimizer-offload"}, zero=1), host_memory="host-dram")
    opt = {i.tier: i.bytes for i in off.memory if i.category == "optimizer"}
    assert set(opt) == {"host"} and opt["host"] == pytest.approx(12 * PSI / N)
    [host] = [t for t in off.phases[0].traffic if t.channel == "host"]
    assert host.bytes_per_device == pytest.approx(PSI * (2 + 2))
    saved = base.phases[0].hbm_bytes - off.phases[0].hbm_bytes
    assert saved == pytest.approx(2 * 12 * PSI / N + 2 * PSI + 2 * PSI)


def test_activation_offload_splits_the_activations():
    base = _train(_plan(zero=1), host_memory="host-dram")
    off = _train(_plan({"kind": "activation-offload", "fraction": 0.75}, zero=1), host_memory="host-dram")
    acts = {i.tier: i.bytes for i in off.memory if i.category == "activations"}
    total = next(i.bytes for i in base.memory if i.category == "activations")
    assert acts["hbm"] == pytest.approx(0.25 * total) and acts["host"] == pytest.approx(0.75 * total)


M70 = catalog.model("llama-3.1-70b")
SJOB = ServingJob(prompt_tokens=8192, output_tokens=512, batch=16)


def _serve(plan, job=SJOB):
    return serving_ledger(
        "s", M70, job, plan, make_system(n=8, host_memory="host-dram", storage="nvme-gen4", remote_pool="remote-pool")
    )


def test_kv_offload_streams_the_offloaded_kv_every_decode_step():
    base = _serve(_plan(tp=8))
    off = _serve(_plan({"kind": "kv-offload", "tier": "host", "fraction": 0.25}, tp=8))
    kv = {i.tier: i.bytes for i in off.memory if i.category == "kv_cache"}
    kv_base = next(i.bytes for i in base.memory if i.category == "kv_cache")
    assert kv["hbm"] == pytest.approx(0.75 * kv_base) and kv["host"] == pytest.approx(0.25 * kv_base)
    [stream] = [t for t in off.phase("decode_step").traffic if t.channel == "host"]
    per_tok = kv_bytes_per_token(M70, "bf16") / 8
    assert stream.bytes_per_device == pytest.approx(0.25 * 16 * (8192 + 256 + 1) * per_tok)


def test_kv_offload_raises_the_largest_batch_until_the_tier_is_full():
    system = make_system(n=8, host_memory="host-dram")
    job = ServingJob(prompt_tokens=8192, output_tokens=512, batch="max")
    plain = max_batch(M70, _plan(tp=8), system, job)
    half = max_batch(M70, _plan({"kind": "kv-offload", "fraction": 0.5}, tp=8), system, job)
    assert half > plain
    per_seq = (8192 + 512) * kv_bytes_per_token(M70, "bf16") / 8
    host_share = system.tier_capacity_per_device("host")
    assert half * 0.5 * per_seq <= host_share


def test_prefix_cache_skips_the_cached_tokens_and_loads_their_kv():
    h = 0.75
    led = _serve(_plan({"kind": "prefix-cache", "hit_rate": h, "tier": "remote"}, tp=8))
    cached, new = int(h * 8192), 8192 - int(h * 8192)
    expected = 16 * (new * token_flops(M70).dense + causal_score_flops(M70, cached, new))
    assert led.phase("prefill").flops.model_total == pytest.approx(expected)
    [load] = [t for t in led.phase("prefill").traffic if t.purpose == "prefix KV load"]
    assert load.channel == "remote"
    assert load.bytes_per_device == pytest.approx(16 * cached * kv_bytes_per_token(M70, "bf16") / 8)


def test_kv_compression_shrinks_kv_on_the_wire():
    plain = _serve(_plan({"kind": "prefix-cache", "hit_rate": 0.5, "tier": "host"}, tp=8))
    packed = _serve(
        _plan({"kind": "prefix-cache", "hit_rate": 0.5, "tier": "host"}, {"kind": "kv-compression", "bits": 4}, tp=8)
    )

    def load(led):
        return next(t.bytes_per_device for t in led.phase("prefill").traffic if t.purpose == "prefix KV load")

    assert load(packed) == pytest.approx(load(plain) * 4 / 16)


def test_quantization_changes_only_its_own_bytes():
    base = {i.category: i.bytes for i in _serve(_plan(tp=8)).memory}
    wq = {i.category: i.bytes for i in _serve(_plan({"kind": "weight-quantization", "dtype": "int4"}, tp=8)).memory}
    kq = {i.category: i.bytes for i in _serve(_plan({"kind": "kv-quantization", "dtype": "fp8"}, tp=8)).memory}
    assert wq["weights"] == pytest.approx(base["weights"] / 4) and wq["kv_cache"] == base["kv_cache"]
    assert kq["kv_cache"] == pytest.approx(base["kv_cache"] / 2) and kq["weights"] == base["weights"]


def test_weight_streaming_keeps_a_fraction_off_device():
    led = _serve(_plan({"kind": "weight-streaming", "tier": "host", "fraction": 0.5}, tp=8))
    w = {i.tier: i.bytes for i in led.memory if i.category == "weights"}
    assert w["hbm"] == pytest.approx(w["host"])
    [stream] = [t for t in led.phase("decode_step").traffic if t.purpose == "weight streaming"]
    assert stream.bytes_per_device == pytest.approx(w["host"])


@pytest.mark.parametrize(
    ("exchanges", "kw", "field"),
    [
        ([{"kind": "gradient-compression", "method": "topk", "density": 0.9}], {}, "density"),
        ([{"kind": "local-sgd", "period": 1}], {}, "period"),
        ([{"kind": "prefix-cache", "hit_rate": 1.0}], {}, "hit_rate"),
        ([{"kind": "teleport"}], {}, "plan.exchanges.0"),
    ],
)
def test_values_outside_their_range_are_errors_never_clamped(exchanges, kw, field):
    with pytest.raises(SpecError) as e:
        _plan(*exchanges, **kw)
    assert field in e.value.field


@pytest.mark.parametrize(
    ("exchanges", "kw", "training", "field", "reason"),
    [
        ([{"kind": "kv-offload"}], {}, True, "plan.exchanges.0", "for training"),
        ([{"kind": "local-sgd", "period": 4}], {}, False, "plan.exchanges.0", "for serving"),
        ([{"kind": "gradient-compression", "method": "bf16"}], {}, True, "method", "changes nothing"),
        ([{"kind": "gradient-compression", "method": "topk"}], {"zero": 2}, True, "method", "ZeRO-2/3"),
        ([{"kind": "local-sgd", "period": 4}], {"zero": 3}, True, "plan.exchanges.0", "ZeRO-3"),
        (
            [{"kind": "local-sgd", "period": 4}, {"kind": "local-sgd", "period": 8}],
            {},
            True,
            "plan.exchanges.1",
            "at most once",
        ),
        ([{"kind": "kv-compression"}], {}, False, "plan.exchanges.0", "nothing to compress"),
        ([{"kind": "kv-quantization", "dtype": "fp8"}], {"kv_dtype": "fp8"}, False, "dtype", "fewer bytes"),
        ([{"kind": "kv-offload", "tier": "ssd"}], {}, False, "system.storage", "ssd tier"),
    ],
)
def test_incompatible_exchanges_are_rejected_with_a_reason(exchanges, kw, training, field, reason):
    plan = _plan(*exchanges, **kw)
    with pytest.raises(SpecError) as e:
        if training:
            _train(plan)
        else:
            serving_ledger("s", M70, SJOB, plan.model_copy(update={"tp": 8}), make_system(n=8, host_memory="host-dram"))
    assert field in e.value.field and reason in str(e.value)
