"""The server side of split inference: receive a frame's tensor, run the remaining nodes, send the result.

``python -m aitrinity.systems.split.server --weights W [--port 0]`` listens on
127.0.0.1, prints ``{"port": P}`` on stdout once it accepts, and serves each
connection in a thread. A malformed, truncated, oversized or inconsistent
message is logged with its reason on stderr, answered with an error message
where the connection still allows it, and closes that connection only; the
server keeps serving.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Callable

import torch
from torch import nn

from aitrinity.cost.dnn import LayerTable
from aitrinity.systems.split import codecs, protocol
from aitrinity.systems.split.digits import to_input
from aitrinity.systems.split.torch_dnn import run


class SplitServer:
    def __init__(
        self,
        table: LayerTable,
        nodes: nn.ModuleList,
        max_payload: int = protocol.DEFAULT_MAX_PAYLOAD,
        log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
    ) -> None:
        self.table, self.nodes, self.max_payload, self.log = table, nodes, max_payload, log
        self.rejected: dict[str, int] = {}
        self.served = 0
        self._lock = threading.Lock()

    def input_shape(self, split: int) -> tuple[int, ...]:
        return tuple(self.table.input_shape) if split == 0 else tuple(self.table.layers[split - 1].out_shape)

    def answer(self, m: protocol.Message) -> protocol.Message:
        """The reply to one well-formed message; raises ProtocolError for one that makes no sense here."""
        if m.kind == protocol.PROBE:
            return protocol.Message(protocol.PROBE_ACK, m.frame_id)
        if m.kind != protocol.FRAME:
            raise protocol.ProtocolError(f"unexpected {protocol.TYPES[m.kind]} message from a device")
        n = len(self.table.layers)
        if not 0 <= m.split < n:
            raise protocol.ProtocolError(f"split {m.split} outside 0..{n - 1}")
        want = self.input_shape(m.split)
        if m.shape != (1, *want):
            raise protocol.ProtocolError(f"shape {m.shape} at split {m.split}, expected {(1, *want)}")
        if (m.codec == "raw") != (m.split == 0):
            raise protocol.ProtocolError(f"codec {m.codec} at split {m.split} (raw is for the input frame only)")
        try:
            data = codecs.decompress(m.payload, m.lossless, m.raw_length or 0)
            x = codecs.decode(data, m.codec, m.shape)
        except (ValueError, ImportError) as e:
            raise protocol.ProtocolError(f"cannot decode: {e}") from None
        t0 = time.perf_counter()
        with torch.no_grad():
            h = to_input(x) if m.codec == "raw" else torch.from_numpy(x.copy())
            out = run(self.nodes, h, m.split)
            prob = torch.softmax(out, 1)[0]
        cls = int(prob.argmax())
        payload = protocol.RESULT_FORMAT.pack(cls, float(prob[cls]), time.perf_counter() - t0)
        return protocol.Message(protocol.RESULT, m.frame_id, m.split, "raw", "none", (len(payload),), payload)

    def handle(self, conn: socket.socket, peer: str) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                try:
                    m = protocol.recv(conn, self.max_payload)
                    reply = self.answer(m)
                except protocol.ProtocolError as e:
                    if str(e).startswith("truncated: the stream ended 0 of"):
                        return  # a clean close between messages
                    self._reject(peer, str(e))
                    with contextlib.suppress(OSError):
                        conn.sendall(protocol.pack(protocol.Message(protocol.ERROR, payload=str(e).encode()[:1000])))
                    return
                except OSError:
                    return
                try:
                    conn.sendall(protocol.pack(reply))
                except OSError:
                    return
                with self._lock:
                    self.served += 1

    def _reject(self, peer: str, reason: str) -> None:
        key = reason.split(":")[0]
        with self._lock:
            self.rejected[key] = self.rejected.get(key, 0) + 1
        self.log(f"trinity split server: rejected a message from {peer}: {reason}")

    def serve(self, listener: socket.socket, stop: threading.Event | None = None) -> None:
        listener.settimeout(0.2)
        while stop is None or not stop.is_set():
            try:
                conn, addr = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=self.handle, args=(conn, f"{addr[0]}:{addr[1]}"), daemon=True).start()


def listen(port: int = 0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The split-inference server (digits CNN).")
    ap.add_argument("--weights", required=True, help="safetensors file of the trained digits CNN")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--max-payload", type=int, default=protocol.DEFAULT_MAX_PAYLOAD)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args(argv)
    from aitrinity.systems.split.digits import load

    torch.set_num_threads(args.threads)
    table, nodes = load(args.weights)
    server = SplitServer(table, nodes, args.max_payload)
    sock = listen(args.port)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    server.serve(sock)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
