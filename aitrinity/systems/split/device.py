"""The device side of split inference: run nodes 0..k-1, code the tensor, ship it, or fall back to local.

:class:`SplitDevice` processes one frame at a time over one TCP connection
(paced by a :class:`~aitrinity.systems.split.shaper.TokenBucket` when given).
If the server or the link fails -- refused, reset, timed out, an error reply
-- the device finishes that frame itself (no frame's result is lost), keeps
serving all-local, and tries to reconnect every ``retry_s``.

``slowdown`` emulates a device that many times slower than this CPU: after
running its nodes for real it waits ``(slowdown - 1)`` times the time they
took (the server runs at this CPU's speed). The emulation is stated in every
result that uses it.

:class:`AdaptiveSplit` is the policy: it keeps an estimate of the uplink
(bandwidth from each upload, base round trip from probes), predicts every
allowed split x codec with :func:`aitrinity.cost.edge.split_options` on the
calibrated node times, and lets the :class:`~aitrinity.control.Controller`
switch (margin, patience). While all-local it probes the link every
``probe_every`` frames so it notices when the link recovers.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from aitrinity.control import Controller, Rates
from aitrinity.cost.dnn import LayerTable
from aitrinity.cost.edge import MESSAGE_FIXED_BYTES, Choices, Processor, SplitOption, Uplink, split_options
from aitrinity.systems.split import codecs, protocol
from aitrinity.systems.split.digits import to_input
from aitrinity.systems.split.shaper import TokenBucket
from aitrinity.systems.split.torch_dnn import run

RESULT_BYTES = protocol.RESULT_FORMAT.size


@dataclass(frozen=True)
class FrameRecord:
    frame_id: int
    split: int
    codec: str
    latency_s: float
    uplink_bytes: int
    label: int
    fell_back: bool
    upload_s: float | None
    """Time from the first byte sent to the result, less the server's compute (None when local)."""


@dataclass
class SplitDevice:
    table: LayerTable
    nodes: nn.ModuleList
    address: tuple[str, int] | None
    shaper: TokenBucket | None = None
    slowdown: float = 1.0
    timeout_s: float = 2.0
    retry_s: float = 1.0
    sock: socket.socket | None = None
    down_since: float | None = None
    errors: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    """Every byte handed to the socket (frames and probes)."""

    @property
    def n(self) -> int:
        return len(self.table.layers)

    def connected(self) -> bool:
        """Whether a connection is up; reconnects when ``retry_s`` has passed since the last failure."""
        if self.sock is not None:
            return True
        if self.address is None:
            return False
        if self.down_since is not None and time.monotonic() - self.down_since < self.retry_s:
            return False
        try:
            s = socket.create_connection(self.address, timeout=self.timeout_s)
        except OSError as e:
            self._down(f"connect: {e}")
            return False
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(self.timeout_s)
        self.sock, self.down_since = s, None
        return True

    def _down(self, why: str) -> None:
        self.errors.append(why)
        if self.sock is not None:
            self.sock.close()
        self.sock, self.down_since = None, time.monotonic()

    def _device_run(self, h: torch.Tensor, start: int, stop: int | None) -> torch.Tensor:
        t0 = time.perf_counter()
        with torch.no_grad():
            out = run(self.nodes, h, start, stop)
        if self.slowdown > 1:
            time.sleep((self.slowdown - 1) * (time.perf_counter() - t0))
        return out

    def _send(self, data: bytes) -> None:
        assert self.sock is not None
        self.bytes_sent += len(data)
        if self.shaper is not None:
            self.shaper.sendall(self.sock, data)
        else:
            self.sock.sendall(data)

    def _exchange(self, msg: protocol.Message) -> tuple[protocol.Message, float]:
        """Send, wait for the reply; (reply, seconds from first byte to reply). Raises OSError on failure."""
        data = protocol.pack(msg)
        t0 = time.perf_counter()
        self._send(data)
        assert self.sock is not None
        try:
            reply = protocol.recv(self.sock)
        except protocol.ProtocolError as e:
            raise OSError(f"reply: {e}") from None
        if reply.kind == protocol.ERROR:
            raise OSError(f"server error: {reply.payload.decode(errors='replace')}")
        return reply, time.perf_counter() - t0

    def probe(self, nbytes: int) -> tuple[float, int] | None:
        """Round trip of a probe carrying ``nbytes`` (None when the link is down)."""
        if not self.connected():
            return None
        try:
            _, rtt = self._exchange(protocol.Message(protocol.PROBE, payload=bytes(nbytes)))
        except OSError as e:
            self._down(f"probe: {e}")
            return None
        return rtt, MESSAGE_FIXED_BYTES + nbytes

    def infer(self, frame_id: int, frame: np.ndarray, split: int, codec: str, lossless: str = "none") -> FrameRecord:
        """One uint8 frame (C, H, W) through the split; always returns a result."""
        t0 = time.perf_counter()
        h = to_input(frame[None])
        if split > 0:
            h = self._device_run(h, 0, split)
        if split >= self.n or not self.connected():
            out = self._device_run(h, split, None) if split < self.n else h
            return self._record(frame_id, split if split >= self.n else self.n, "local", t0, 0, out, split < self.n)
        if split == 0:
            x, c = frame[None], "raw"
        else:
            x, c = h.numpy(), codec
        raw = codecs.encode(x, c)
        payload = codecs.compress(raw, lossless)
        msg = protocol.Message(protocol.FRAME, frame_id, split, c, lossless, tuple(x.shape), payload, len(raw))
        try:
            reply, rtt = self._exchange(msg)
            cls, _score, server_s = protocol.RESULT_FORMAT.unpack(reply.payload)
        except (OSError, ValueError) as e:  # struct.error is a ValueError
            self._down(f"frame {frame_id}: {e}")
            out = self._device_run(h if split else to_input(frame[None]), split, None)
            return self._record(frame_id, split, codec, t0, 0, out, True)
        lat = time.perf_counter() - t0
        up = MESSAGE_FIXED_BYTES + 4 * len(msg.shape) + len(payload)
        return FrameRecord(frame_id, split, c, lat, up, int(cls), False, max(rtt - server_s, 0.0))

    def _record(
        self, frame_id: int, split: int, codec: str, t0: float, up: int, out: torch.Tensor, fell_back: bool
    ) -> FrameRecord:
        return FrameRecord(
            frame_id, split, codec, time.perf_counter() - t0, up, int(out.argmax(1).item()), fell_back, None
        )


def node_times(nodes: nn.ModuleList, table: LayerTable, repeats: int = 30, gap_s: float = 0.01) -> list[float]:
    """Median seconds of each node on this CPU, batch 1, measured as frames run: one frame through every
    node, then a pause of ``gap_s`` (between frames caches cool down; a tight loop would under-predict)."""
    per: list[list[float]] = [[] for _ in nodes]
    with torch.no_grad():
        for r in range(repeats + 2):
            x = torch.rand(1, *table.input_shape)
            for i, m in enumerate(nodes):
                t0 = time.perf_counter()
                x = m(x)
                if r >= 2:
                    per[i].append(time.perf_counter() - t0)
            time.sleep(gap_s)
    return [statistics.median(ts) for ts in per]


def calibrated_options(
    table: LayerTable,
    device_s: Sequence[float],
    server_s: Sequence[float],
    bandwidth_Bps: float,
    latency_s: float,
    choices: Choices,
    burst_bytes: float = 0.0,
) -> list[SplitOption]:
    """Every split x codec priced by the cost model on measured node times and a link estimate
    (``latency_s`` each way, so a round trip adds twice that)."""
    dev = Processor("device (calibrated)", 1.0, 1e12)
    srv = Processor("server (calibrated)", 1.0, 1e12)
    up = Uplink("measured uplink", bandwidth_Bps, latency_s, burst_bytes=burst_bytes)
    return split_options(
        table, dev, srv, up, choices, result_bytes=RESULT_BYTES, device_times=device_s, server_times=server_s
    )


@dataclass
class AdaptiveSplit:
    """The Controller choosing split x codec from live telemetry."""

    table: LayerTable
    device_s: Sequence[float]
    server_s: Sequence[float]
    choices: Choices
    bandwidth_Bps: float
    base_rtt_s: float = 1e-3
    alpha: float = 1.0
    """Weight of the newest bandwidth sample (1: the last upload alone -- a collapsing link is noticed on the
    next frame; lower values smooth noisy links at the price of switching later)."""
    min_sample_bytes: int = 1024
    """Uploads smaller than this say more about latency than bandwidth: they do not update the estimate."""
    margin: float = 0.1
    patience: int = 2
    controller: Controller = field(init=False)
    _options: dict[str, SplitOption] = field(init=False)

    def __post_init__(self) -> None:
        opts = self._price()
        start = min(opts.values(), key=lambda o: o.latency_s)
        self.controller = Controller(list(opts), start.label, margin=self.margin, patience=self.patience)

    def _price(self) -> dict[str, SplitOption]:
        opts = calibrated_options(
            self.table, self.device_s, self.server_s, self.bandwidth_Bps, self.base_rtt_s / 2, self.choices
        )
        self._options = {o.label: o for o in opts if o.allowed}
        return self._options

    @property
    def current(self) -> SplitOption:
        return self._options[self.controller.current]

    def observe_upload(self, nbytes: int, upload_s: float) -> None:
        """One upload of ``nbytes`` took ``upload_s`` (first byte to result, less server compute)."""
        if nbytes < self.min_sample_bytes:
            return
        sample = nbytes / max(upload_s - self.base_rtt_s, 1e-6)
        self.bandwidth_Bps = self.alpha * sample + (1 - self.alpha) * self.bandwidth_Bps

    def rates(self) -> Rates:
        """The uplink as now estimated (bandwidth, one-way latency), as the Controller's telemetry."""
        return Rates(links_Bps={"uplink": self.bandwidth_Bps}, latency_s={"uplink": self.base_rtt_s / 2})

    def observe_base_rtt(self, rtt_s: float) -> None:
        self.base_rtt_s = min(self.base_rtt_s, rtt_s) if self.base_rtt_s else rtt_s

    def decide(self) -> SplitOption:
        opts = self._price()
        self.controller.decide(lambda label: opts[label].latency_s)
        return self.current

    def force_local(self) -> SplitOption:
        local = next(o for o in self._options.values() if o.uplink_bytes == 0)
        self.controller.current = local.label
        return local


@dataclass(frozen=True)
class StreamResult:
    policy: str
    frames: int
    mean_latency_s: float
    p95_latency_s: float
    accuracy: float
    fell_back: int
    records: list[FrameRecord]
    decisions: list[str]
    errors: list[str]


def _choose(
    device: SplitDevice, policy: str | AdaptiveSplit, i: int, period: int, decisions: list[str]
) -> tuple[int, str, str]:
    """Frame ``i``'s split, codec and lossless stage: the static policy's, or the adaptive one's (all local while the
    link is down; a decision every ``period`` frames, logged in ``decisions`` when it switches)."""
    if isinstance(policy, AdaptiveSplit):
        if not device.connected() and policy.current.uplink_bytes:
            policy.force_local()
            decisions.append(f"frame {i}: link down -> all local")
        elif i and i % period == 0:
            before = policy.controller.current
            policy.decide()
            if policy.controller.current != before:
                decisions.append(f"frame {i}: {before} -> {policy.controller.current}")
        o = policy.current
        return o.split, o.codec, o.lossless
    if policy == "local":
        return device.n, "local", "none"
    k, _, codec = policy.partition(":")
    return int(k), codec, "none"


def _observe(device: SplitDevice, policy: AdaptiveSplit, r: FrameRecord, probe_bytes: int) -> None:
    """What the frame's upload told the adaptive policy; with ``probe_bytes``, a frame that sent (nearly) nothing
    leaves the link unmeasured, so probe it between frames."""
    if r.upload_s is not None:
        policy.observe_upload(r.uplink_bytes, r.upload_s)
    if probe_bytes and r.uplink_bytes < probe_bytes and device.connected():
        small = device.probe(0)
        big = device.probe(probe_bytes)
        if small and big:
            policy.observe_base_rtt(small[0])
            policy.observe_upload(big[1], big[0])


def stream(
    device: SplitDevice,
    frames: Sequence[np.ndarray],
    labels: Sequence[int] | np.ndarray,
    policy: str | AdaptiveSplit,
    fps: float | None = None,
    period: int = 5,
    probe_every: int = 10,
    probe_bytes: int = 2048,
    on_frame: Callable[[int, FrameRecord], None] | None = None,
    gap_s: float = 0.0,
) -> StreamResult:
    """Run ``frames`` through ``device`` under a static ``split:codec`` / ``local`` policy or an AdaptiveSplit.

    With ``fps`` frames arrive on a clock (a frame's latency counts from its arrival, so falling behind
    shows up as queueing); without, each frame arrives ``gap_s`` after the previous one finished (a camera
    that waits for each result: the link idles between frames, as it does at a frame rate, without queueing).
    """
    records: list[FrameRecord] = []
    decisions: list[str] = []
    t_start = time.perf_counter()
    for i, frame in enumerate(frames):
        if not fps and gap_s > 0:
            time.sleep(gap_s)
        arrival = t_start + i / fps if fps else time.perf_counter()
        wait = arrival - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        split, codec, ll = _choose(device, policy, i, period, decisions)
        r = device.infer(i, frame, split, codec if codec != "raw" else "fp32", ll)
        queued = time.perf_counter() - arrival - r.latency_s if fps else 0.0
        r = FrameRecord(
            r.frame_id,
            r.split,
            r.codec,
            r.latency_s + max(queued, 0.0),
            r.uplink_bytes,
            r.label,
            r.fell_back,
            r.upload_s,
        )
        records.append(r)
        if on_frame is not None:
            on_frame(i, r)
        if isinstance(policy, AdaptiveSplit):
            _observe(device, policy, r, probe_bytes if i % probe_every == 0 else 0)
    lat = sorted(r.latency_s for r in records)
    return StreamResult(
        policy=policy if isinstance(policy, str) else "adaptive",
        frames=len(records),
        mean_latency_s=statistics.fmean(lat),
        p95_latency_s=lat[min(len(lat) - 1, int(0.95 * len(lat)))],
        accuracy=float(np.mean([r.label == int(y) for r, y in zip(records, labels, strict=True)])),
        fell_back=sum(r.fell_back for r in records),
        records=records,
        decisions=decisions,
        errors=list(device.errors),
    )


@dataclass(frozen=True)
class LinkFit:
    """The uplink as measured with probes: round trip of an empty probe, and a token-bucket α-β fit
    ``rtt(bytes) = base_rtt_s + max(bytes - burst_bytes, 0) / bandwidth_Bps``."""

    base_rtt_s: float
    bandwidth_Bps: float
    burst_bytes: float
    samples: list[tuple[int, float]]


def calibrate_link(device: SplitDevice, sizes: Sequence[int], repeats: int = 7, gap_s: float = 0.02) -> LinkFit:
    """Probe round trips for each payload size (median of ``repeats``), least-squares fit of the excess over
    the empty probe against message bytes. Raises OSError when the server cannot be reached."""

    def median_rtt(n: int) -> float:
        ts = []
        for _ in range(repeats):
            time.sleep(gap_s)  # let the link go idle, as it does between frames
            r = device.probe(n)
            if r is None:
                raise OSError(f"link calibration: the server is unreachable ({device.errors[-1:]})")
            ts.append(r[0])
        return statistics.median(ts)

    base = median_rtt(0)
    pts = [(MESSAGE_FIXED_BYTES + n, median_rtt(n) - base) for n in sizes]
    xs = np.array([p[0] for p in pts], float)
    ys = np.array([p[1] for p in pts], float)
    slope, icpt = np.polyfit(xs, ys, 1)
    bw = 1.0 / max(float(slope), 1e-15)
    return LinkFit(base, bw, max(-float(icpt) * bw, 0.0), [(int(x), float(y) + base) for x, y in pts])
