"""The what-if server over real HTTP on loopback: answers are the library's, errors are the CLI's."""

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from aitrinity import api
from aitrinity.ui import whatif
from aitrinity.ui.server import make_server


@pytest.fixture(scope="module")
def url():
    server = make_server("127.0.0.1", 0, quiet=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _post(url, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + "/api/whatif", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_page_and_options_are_served(url):
    with urllib.request.urlopen(url + "/", timeout=10) as r:
        assert r.status == 200 and b"trinity what-if" in r.read()
    with urllib.request.urlopen(url + "/api/options", timeout=10) as r:
        opts = json.loads(r.read())
    assert set(opts["scenarios"]) == set(api.builtin_scenarios())
    assert "llama-3.1-70b" in opts["models"] and "h100-sxm" in opts["devices"]


def test_an_answer_is_the_library_diagnosis_and_plan(url):
    status, a = _post(url, {"scenario": "llama-70b-training-h100", "gpus": 512, "bandwidth": "25Gbit/s"})
    assert status == 200
    sets = ["gpus=512", "inter_node_bandwidth=25Gbit/s"]
    assert a["overrides"] == sets
    d = api.diagnose("llama-70b-training-h100", sets)
    rep = api.plan("llama-70b-training-h100", None, 1, sets)
    assert a["verdict"] == d.verdict
    assert a["best"] == rep.search.best.label
    assert a["chain"] == [s.sentence for s in rep.chain.steps]
    assert {"utilization", "roofline", "chain"} <= set(a["charts"])


def _cli_error(*args):
    p = subprocess.run([sys.executable, "-m", "aitrinity.cli.main", *args], capture_output=True, text=True)
    assert p.returncode == 2
    return p.stderr.strip().removeprefix("trinity: error: ")


def test_bad_input_gets_the_cli_message(url):
    status, a = _post(url, {"scenario": "llama-70b-serving-long-context", "context": 131072})
    assert status == 400
    assert a["error"] == _cli_error(
        "diagnose", "llama-70b-serving-long-context", "--set", "workload.serving.prompt_tokens=131072"
    )
    status, a = _post(url, {"scenario": "llama-70b-training-h100", "model": "no-such-model"})
    assert status == 400
    assert a["error"] == _cli_error("diagnose", "llama-70b-training-h100", "--set", "workload.model=no-such-model")
    status, a = _post(url, {"scenario": "nope"})
    assert status == 400 and a["error"] == _cli_error("diagnose", "nope")


@pytest.mark.parametrize(
    "body, word",
    [(b"{not json", "json"), (b'{"scenario": "x", "gpus": "many"}', "gpus"), (b'{"scenario": "x", "rm": 1}', "rm")],
)
def test_malformed_forms_are_refused_with_the_field(url, body, word):
    status, a = _post(url, body)
    assert status == 400 and word in a["error"].lower()


def test_edge_and_cache_controls_map_to_the_cli_keys():
    assert whatif.overrides(whatif.Form(scenario="s", link="5g-uplink", bandwidth="3Mbit/s"), "edge") == [
        "system.uplink=5g-uplink",
        "uplink=3Mbit/s",
    ]
    sets = whatif.overrides(whatif.Form(scenario="s", batch=8, context=4096, cache="none"), "serving")
    assert sets == ["workload.serving.batch=8", "workload.serving.prompt_tokens=4096", "plan.exchanges=[]"]
