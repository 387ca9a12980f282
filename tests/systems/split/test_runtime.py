"""Device and server as two processes over TCP: exact bytes on the wire, identical results, no frame lost when
the server dies, malformed input logged and survived, the adaptive policy following the link."""

import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn", reason="the digits frames ship with scikit-learn (pip install -e '.[dev]')")
pytest.importorskip("safetensors")

from aitrinity.cost.edge import Choices, message_bytes, payload_bytes  # noqa: E402
from aitrinity.systems.split import digits, protocol  # noqa: E402
from aitrinity.systems.split.device import AdaptiveSplit, SplitDevice, node_times, stream  # noqa: E402
from aitrinity.systems.split.launch import server_process  # noqa: E402
from aitrinity.systems.split.shaper import TokenBucket  # noqa: E402
from aitrinity.systems.split.torch_dnn import run  # noqa: E402

pytestmark = pytest.mark.multiproc


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.set_num_threads(1)
    table, nodes = digits.train(epochs=3)
    path = tmp_path_factory.mktemp("w") / "digits.safetensors"
    digits.save(nodes, path)
    _, _, xte, yte = digits.frames()
    return table, nodes, path, xte[:40], yte[:40]


@pytest.fixture(scope="module")
def server(trained):
    with server_process(trained[2]) as (proc, port):
        yield proc, port


def local_labels(nodes, frames):
    with torch.no_grad():
        return [int(run(nodes, digits.to_input(f[None])).argmax()) for f in frames]


@pytest.mark.parametrize("policy", ["0:raw", "2:fp32", "4:int8", "5:int4"])
def test_bytes_on_the_wire_are_the_predicted_bytes_and_fp32_results_are_exact(trained, server, policy):
    table, nodes, _, x, y = trained
    dev = SplitDevice(table, nodes, ("127.0.0.1", server[1]))
    res = stream(dev, x, y, policy)
    k, _, codec = policy.partition(":")
    shape = (1, *(table.input_shape if k == "0" else table.layers[int(k) - 1].out_shape))
    per_frame = message_bytes(payload_bytes(int(np.prod(shape)), codec), len(shape))
    assert res.fell_back == 0 and not dev.errors
    assert dev.bytes_sent == per_frame * len(x)
    assert all(r.uplink_bytes == per_frame for r in res.records)
    if codec in ("raw", "fp32"):
        assert [r.label for r in res.records] == local_labels(nodes, x)
    dev.sock.close()


def test_killing_the_server_mid_stream_loses_no_result(trained):
    table, nodes, path, x, y = trained
    with server_process(path) as (proc, port):
        dev = SplitDevice(table, nodes, ("127.0.0.1", port), retry_s=60)

        def kill(i, _r):
            if i == 9:
                proc.kill()
                proc.wait()

        res = stream(dev, x, y, "3:int8", on_frame=kill)
    assert res.frames == len(x) == len(res.records)
    assert res.fell_back >= 1 and dev.errors
    assert [r.frame_id for r in res.records] == list(range(len(x)))
    tail = res.records[10:]
    assert all(r.uplink_bytes == 0 for r in tail)  # all local after the failure
    assert [r.label for r in tail] == local_labels(nodes, x[10:])


def _send_raw(port, data):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        try:
            return protocol.recv(s)
        except protocol.ProtocolError:
            return None


def test_malformed_input_is_logged_answered_and_survived(trained):
    table, nodes, path, x, y = trained
    with server_process(path) as (proc, port):
        good = protocol.pack(protocol.Message(protocol.FRAME, 1, 0, "raw", "none", (1, 1, 64, 64), bytes(4096)))
        bad = [
            b"garbage" * 10,
            good[:30],  # truncated header
            good[:-100],  # truncated payload
            good[:-1] + bytes([good[-1] ^ 0xFF]),  # checksum
            protocol.pack(protocol.Message(protocol.FRAME, 1, 9, "fp32", "none", (1, 3), bytes(12))),  # bad split
            protocol.pack(protocol.Message(protocol.FRAME, 1, 2, "fp32", "none", (1, 3), bytes(12))),  # bad shape
            protocol.pack(protocol.Message(protocol.RESULT, 1, 0, "raw", "none", (12,), bytes(12))),  # wrong type
        ]
        replies = [_send_raw(port, b) for b in bad]
        errors = [r for r in replies if r is not None]
        assert errors and all(r.kind == protocol.ERROR for r in errors)
        dev = SplitDevice(table, nodes, ("127.0.0.1", port))
        res = stream(dev, x[:5], y[:5], "0:raw")
        assert res.fell_back == 0 and proc.poll() is None
        dev.sock.close()
        proc.kill()
        log = proc.communicate()[1]
    assert log.count("rejected a message") == len(bad)
    for reason in ("bad magic", "truncated", "checksum", "split 9", "shape", "unexpected result"):
        assert reason in log, reason


def test_adaptive_split_follows_the_link(trained, server):
    table, nodes, _, x, y = trained
    srv = node_times(nodes, table, repeats=10)
    dev_s = [t * 20 for t in srv]
    slow_until = 1.5  # seconds: 0.3 Mbit/s, then 50 Mbit/s
    rate = TokenBucket(lambda t: 0.3e6 / 8 if t < slow_until else 50e6 / 8)
    dev = SplitDevice(table, nodes, ("127.0.0.1", server[1]), rate, slowdown=20)
    policy = AdaptiveSplit(table, dev_s, srv, Choices(codecs=("fp32", "int8"), accuracy_drop={"int8": 0.0}), 50e6 / 8)
    frames = np.concatenate([x, x, x])[:100]
    labels = np.concatenate([y, y, y])[:100]
    res = stream(dev, frames, labels, policy, fps=25, probe_every=5)
    assert res.fell_back == 0
    early = res.records[5:30]
    late = res.records[-20:]
    assert sum(r.uplink_bytes < 1000 for r in early) >= 15  # slow link: (nearly) local
    assert sum(r.split == 0 for r in late) >= 15  # fast link again: ship the frame
    assert any("->" in d for d in res.decisions)
    up = policy.rates()  # its telemetry: the uplink it predicts with
    assert up.links_Bps["uplink"] == policy.bandwidth_Bps and up.latency_s["uplink"] == policy.base_rtt_s / 2
    dev.sock.close()
