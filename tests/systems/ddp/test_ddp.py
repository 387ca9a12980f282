"""Real 2-rank gloo runs: bytes per step equal the formula, NaN safety, bit-identical resume, the adaptive hook."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn", reason="the digits task ships with scikit-learn (pip install -e '.[dev]')")

from aitrinity.cost.grad_compression import METHODS, message
from aitrinity.systems import netns
from aitrinity.systems.ddp.launch import run_workers

pytestmark = pytest.mark.multiproc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    ck = tmp_path_factory.mktemp("ckpt")
    plain = [{"method": m, "steps": 3, "density": 0.02, "hidden": 64} for m in METHODS]
    nan = [{"method": "topk", "steps": 6, "hidden": 64, "inject_nan_at": 3}]
    psgd = [{"method": "powersgd", "steps": 4, "hidden": 64}]
    cast = [{"method": m, "steps": 3, "density": 0.02, "hidden": 64, "cast": c} for m, c in CASTS]
    resume = []
    for m in ("topk", "sign", "int8"):
        (ck / m).mkdir()
        d = str(ck / m)
        resume += [
            {"method": m, "steps": 10, "hidden": 64, "checkpoint_at": 5, "checkpoint_dir": d, "record_steps": False},
            {"method": m, "steps": 10, "hidden": 64, "resume": True, "checkpoint_dir": d, "record_steps": False},
        ]
    return run_workers([*plain, *nan, *resume, *psgd, *cast], world=2, task="digits")


CASTS = [("none", "fp16"), ("topk", "fp16"), ("topk", "bf16"), ("int8", "fp16"), ("sign", "bf16"), ("powersgd", "fp16")]


def test_bytes_per_step_equal_the_formula(runs):
    for rank in (0, 1):
        for r in runs[rank][: len(METHODS)]:
            for rec in r["records"]:
                want = sum(message(r["method"], n, 2, density=0.02).payload_bytes for n in rec["buckets"])
                assert rec["payload_bytes"] == want, (r["method"], rec)
                sent = sum(message(r["method"], n, 2, density=0.02).sent_bytes(2) for n in rec["buckets"])
                assert rec["sent_bytes"] == pytest.approx(sent)


def test_powersgd_wraps_pytorch_and_its_bytes_follow_the_formula(runs):
    from aitrinity.cost.grad_compression import powersgd_message

    shapes = [(64, 64), (64,), (64, 64), (64,), (10, 64), (10,)]  # the MLP: 64 features, hidden 64, 10 classes
    for rank in (0, 1):
        r = runs[rank][-1 - len(CASTS)]
        assert r["method"] == "powersgd" and r["records"][0]["buckets"] == [8970]
        # PyTorch's powerSGD_hook all-reduces plainly until start_powerSGD_iter (2, its minimum)
        assert [x["payload_bytes"] for x in r["records"][:2]] == [8970 * 4] * 2
        for rec in r["records"][2:]:
            assert rec["payload_bytes"] == powersgd_message(shapes, 2, rank=4).payload_bytes == 1458 * 4


def test_hooks_compose_with_pytorchs_cast_wrappers(runs):
    """fp16/bf16 wrappers around our hook and PyTorch's PowerSGD: half-precision values, exact bytes, trained."""
    for rank in (0, 1):
        for (method, cast), r in zip(CASTS, runs[rank][-len(CASTS) :], strict=True):
            assert (r["method"], r["cast"]) == (method, cast)
            assert r["params_finite"] and r["records"][-1]["loss"] < r["records"][0]["loss"] * 1.5
            for rec in r["records"]:
                if method == "powersgd":
                    want = [8970 * 2] if rec["step"] < 2 else [1458 * 2]
                else:
                    want = [message(method, n, 2, grad_bytes=2, density=0.02).payload_bytes for n in rec["buckets"]]
                assert rec["payload_bytes"] == sum(want), (method, cast, rec)
    plain_topk = runs[0][METHODS.index("topk")]["records"][0]["payload_bytes"]
    assert runs[0][-len(CASTS) + 1]["records"][0]["payload_bytes"] * 8 == plain_topk * 6  # k(2+4) vs k(4+4)


def test_every_method_keeps_ranks_identical(runs):
    for a, b in zip(runs[0], runs[1], strict=True):
        assert a["params_digest"] == b["params_digest"], a["method"]


def test_a_nonfinite_gradient_is_reported_not_spread(runs):
    i = len(METHODS)
    r0, r1 = runs[0][i], runs[1][i]
    assert r0["stats"]["nonfinite_elements"] == 64 and r1["stats"]["nonfinite_elements"] == 0
    assert [x["nonfinite"] for x in r0["records"]] == [False, False, True, False, False, False]
    assert [x["nonfinite"] for x in r1["records"]] == [False, False, True, False, False, False]
    assert r0["skipped_steps"] == r1["skipped_steps"] == 1  # every rank skipped that step
    assert r0["params_finite"] and r1["params_finite"] and r0["params_digest"] == r1["params_digest"]


def test_resume_from_checkpoint_is_bit_identical(runs):
    i = len(METHODS) + 1
    for rank in (0, 1):
        rs = runs[rank][i:]
        for straight, resumed in ((rs[0], rs[1]), (rs[2], rs[3]), (rs[4], rs[5])):
            assert straight["params_digest"] == resumed["params_digest"], straight["method"]


@pytest.mark.skipif(netns.unavailable() is not None, reason=f"shaped link: {netns.unavailable()}")
def test_adaptive_hook_compresses_on_a_slow_link():
    res = run_workers([{"method": "auto", "steps": 6, "hidden": 512}], world=2, task="digits", link="100mbit")
    recs = res[0][0]["records"]
    decisions = [x["decision"] for x in recs if "decision" in x]
    assert decisions[0]["predicted_s"]["none"] > 2 * min(decisions[0]["predicted_s"].values())
    assert recs[0]["method"] == "none" and recs[-1]["method"] in ("topk", "sign", "int8")
    assert [x["method"] for x in res[1][0]["records"]] == [x["method"] for x in recs]  # ranks switch together


def test_a_rank_that_wrote_its_results_and_died_in_teardown_counts(tmp_path, monkeypatch):
    """gloo sometimes aborts a finished rank at interpreter exit; its results file is whole, so it counts."""
    import stat
    import sys

    from aitrinity.systems.ddp import launch

    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        # argv: -m aitrinity.systems.ddp.worker CONFIG; write the results, then die the way gloo's teardown does
        f'{sys.executable} -c "import json,sys; c=json.load(open(sys.argv[1])); '
        "open(c['out'],'w').write(json.dumps([{'rank': c['rank']}]))\" \"$3\"\n"
        'test "$(basename "$3")" = cfg1.json && '
        '{ echo "terminate called without an active exception" >&2; exit 134; }\n'
        "exit 0\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(launch.sys, "executable", str(fake))
    assert launch.run_workers([{}], world=2) == [[{"rank": 0}], [{"rank": 1}]]
    # a rank that died before writing anything is still an error
    fake.write_text('#!/bin/sh\necho "boom" >&2\nexit 1\n')
    with pytest.raises(launch.WorkerError, match="boom"):
        launch.run_workers([{}], world=2)
