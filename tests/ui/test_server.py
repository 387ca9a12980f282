"""The what-if server over real HTTP on loopback: answers are the library's, errors are the CLI's."""

import contextlib
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
    assert a["error"].startswith("model: unknown model 'no-such-model'")  # the menu's names, no aliases or paths
    status, a = _post(url, {"scenario": "nope"})
    assert status == 400 and a["error"].startswith("scenario: unknown built-in scenario 'nope'")


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


# --- the attacks of a hostile web page or client (issue 17) -------------------------------------------------


def _raw(url, method, path="/api/whatif", body=None, headers=None):
    """One request with exactly these headers; (status, parsed JSON or None, raw body)."""
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for k, v in {"Host": u.netloc, **(headers or {})}.items():
        if v is not None:
            conn.putheader(k, v)
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
    if body is not None:
        conn.putheader("Content-Length", str(len(data)))
    conn.endheaders()
    if body is not None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the server refused the body unread
            conn.send(data)
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    return r.status, parsed, raw


JSON = {"Content-Type": "application/json"}
FILE_LINE = b"root:"  # the first line of /etc/passwd on every Linux


@pytest.mark.parametrize(
    "field, value",
    [
        ("scenario", "/etc/passwd"),
        ("scenario", "../../../../etc/passwd"),
        ("model", "/etc/passwd"),
        ("device", "/etc/passwd"),
        ("link", "/etc/hostname"),
        ("cache", "1TiB, trace: '/etc/passwd'"),
        ("bandwidth", "1Gbit/s\nworkload.model=/etc/passwd"),
    ],
)
def test_a_path_in_any_field_is_refused_without_reading_it(url, field, value):
    body = {"scenario": "llama-70b-serving-long-context", field: value}
    status, a, raw = _raw(url, "POST", body=body, headers=JSON)
    assert status == 400 and field in a["error"]
    assert FILE_LINE not in raw and b"localhost" not in raw


def test_a_foreign_host_is_refused_dns_rebinding(url):
    body = {"scenario": "llama-70b-training-h100"}
    for path, method in (("/api/whatif", "POST"), ("/api/options", "GET"), ("/", "GET")):
        status, a, _ = _raw(url, method, path, body if method == "POST" else None, {**JSON, "Host": "evil.example:80"})
        assert status == 421 and "evil.example" in a["error"]
    status, _, _ = _raw(url, "GET", "/api/options", headers={"Host": None})
    assert status == 421


def test_a_foreign_origin_is_refused(url):
    status, a, _ = _raw(url, "POST", body={"scenario": "x"}, headers={**JSON, "Origin": "http://evil.example"})
    assert status == 403 and "cross-origin" in a["error"]
    # the page's own origin is fine
    port = url.rsplit(":", 1)[1]
    status, _, _ = _raw(url, "GET", "/api/options", headers={"Origin": f"http://localhost:{port}"})
    assert status == 200


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None])
def test_a_body_that_is_not_declared_json_is_refused(url, ctype):
    body = json.dumps({"scenario": "llama-70b-training-h100"}).encode()
    status, a, _ = _raw(url, "POST", body=body, headers={"Content-Type": ctype})
    assert status == 415 and "application/json" in a["error"]


def test_a_huge_body_is_refused_unread(url):
    status, a, _ = _raw(url, "POST", body=b"{" + b" " * (10 * 1024 * 1024), headers=JSON)
    assert status == 413 and "at most" in a["error"]


def test_unknown_paths_and_methods_are_json_4xx(url):
    status, a, _ = _raw(url, "GET", "/etc/passwd")
    assert status == 404 and a["error"].startswith("no such page")
    status, a, _ = _raw(url, "POST", "/api/other", body={}, headers=JSON)
    assert status == 404
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
        status, a, _ = _raw(url, method, "/api/whatif", body={"scenario": "x"}, headers=JSON)
        assert status == 405 and method in a["error"]
    status, _, raw = _raw(url, "HEAD", "/")
    assert status == 200 and raw == b""


def test_zero_and_nonfinite_bandwidths_are_400_not_a_dropped_connection(url):
    for bw in ("0Gbit/s", "-5Gbit/s", "nanGbit/s", "infGbit/s", "1e999Gbit/s"):
        status, a, _ = _raw(url, "POST", body={"scenario": "llama-70b-training-h100", "bandwidth": bw}, headers=JSON)
        assert status == 400 and "bandwidth" in a["error"], bw


def test_no_traceback_reaches_the_log():
    """Malformed requests of every kind: the server answers each and logs single lines only."""
    import io
    import socket
    from contextlib import redirect_stderr

    server = make_server("127.0.0.1", 0, quiet=False)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    log = io.StringIO()
    with redirect_stderr(log):
        t.start()
        u = f"http://127.0.0.1:{server.server_address[1]}"
        for body in (b"{not json", b"[]", b'{"scenario": 5}', b"\xff\xfe", b'{"scenario": "x", "gpus": -1}'):
            assert _raw(u, "POST", body=body, headers=JSON)[0] == 400
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as s:
            s.sendall(b"GARBAGE / HTTP/1.1\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.0 405")
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as s:
            s.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
            assert b'{"error": "Bad request' in s.recv(200)  # an HTTP/0.9-style answer: no status line
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as s:
            s.sendall(b"POST /api/whatif HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")  # then hang up
        assert _raw(u, "GET", "/api/options")[0] == 200  # still serving
        server.shutdown()
        server.server_close()
    assert "Traceback" not in log.getvalue()


def test_a_non_loopback_host_is_warned_about(capsys, monkeypatch):
    from aitrinity.cli import ui as cli_ui

    def fake_make_server(host, port, quiet):
        raise OSError(98, "Address in use")  # stop before serving: only the warning is under test

    monkeypatch.setattr("aitrinity.ui.server.make_server", fake_make_server)
    import argparse

    from aitrinity.errors import SpecError

    with pytest.raises(SpecError):
        cli_ui.run(argparse.Namespace(host="0.0.0.0", port=1, quiet=True, warm=False, json=False))
    assert "not loopback" in capsys.readouterr().err
    with pytest.raises(SpecError):
        cli_ui.run(argparse.Namespace(host="127.0.0.1", port=1, quiet=True, warm=False, json=False))
    assert "not loopback" not in capsys.readouterr().err


def test_a_body_that_never_arrives_is_answered_408_and_the_connection_dropped(monkeypatch):
    """A client that declares a body and sends part of it held a handler thread for ever (no socket timeout): a
    local slowloris. The connection now times out after ``Handler.timeout`` seconds of silence."""
    import socket

    from aitrinity.ui import server as ui_server

    assert ui_server.Handler.timeout is not None and 0 < ui_server.Handler.timeout <= 60  # the default drops them too
    monkeypatch.setattr(ui_server.Handler, "timeout", 1.0)
    server = make_server("127.0.0.1", 0, quiet=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        port = server.server_address[1]
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(
                f"POST /api/whatif HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                'Content-Length: 1000\r\n\r\n{"scenario":'.encode()
            )
            reply = b""
            while chunk := s.recv(4096):  # the server answers, then closes: recv returns b""
                reply += chunk
        assert reply.startswith(b"HTTP/1.0 408") or reply.startswith(b"HTTP/1.1 408"), reply[:80]
        assert b"did not arrive within 1 s" in reply
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:  # headers never finished: dropped
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1")
            assert s.recv(4096) == b""
    finally:
        server.shutdown()
        server.server_close()
