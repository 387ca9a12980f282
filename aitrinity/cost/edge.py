"""Split inference between a device and a server: the per-frame ledger of each split x codec (pure).

Split point ``k`` runs chain nodes ``0..k-1`` on the device and ``k..N-1`` on
the server (Neurosurgeon, Kang et al. ASPLOS'17, Section 4). ``k = 0`` ships the
raw input (only lossless coding applies to a camera frame); ``k = N`` runs all
locally and ships nothing. What crosses the uplink is the tensor after node
``k-1``, coded:

- ``fp32`` 4 bytes an element, ``fp16`` 2;
- ``int8`` / ``int4``: per-tensor affine quantization, 8 bytes of header
  (minimum and scale, float32) + 1 byte / half a byte an element (two 4-bit
  codes a byte, the first in the low nibble);
- ``zstd`` / ``lz4`` on top: data-dependent, so only with a measured ratio.

The payload rides in one message of :func:`message_bytes` (the split
runtime's protocol header + shape), so predicted bytes equal the bytes written
to the socket.

Time of a node on a processor: roofline ``max(FLOPs / FLOP/s, bytes / memory
bandwidth)`` with bytes = weights + input + output at the activation dtype
(batch 1: the fully connected layers are memory bound). Coding time: the
tensor streamed twice through memory (read fp32, write the code). Link: α-β,
``latency + bytes / bandwidth`` (a token-bucket link: less its burst, see
:class:`Uplink`). Frame latency = device + encode + uplink + server + decode +
downlink.

Device energy per frame = busy power x (compute + coding) + radio energy of
the upload (Huang et al. MobiSys'12 power model, :class:`RadioModel`) + idle
power x the time spent waiting (upload without a radio model, server,
downlink). Both latency and energy are ``a + b / B`` in the uplink bandwidth
``B``, so the best choice as a function of ``B`` is a lower envelope of lines
in ``1/B`` and the break-even bandwidths are where neighbours on it cross.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aitrinity.cost.dnn import LayerTable
from aitrinity.cost.ledger import Result

QUANT_HEADER_BYTES = 8
"""int8 / int4 payloads start with the tensor's minimum and scale as little-endian float32."""
MESSAGE_FIXED_BYTES = 40
"""The split protocol's header (magic, version, type, codec, lossless, ndim, frame id, split, payload length,
raw length, checksum) before the shape; :mod:`aitrinity.systems.split.protocol` packs exactly this."""
LOSSLESS_BPS = {"none": math.inf, "zstd": 400e6, "lz4": 1.5e9}
"""Compression speed assumed for planning (single core, level 1 / default), of the order this machine's
``trinity calibrate`` measures; the split runtime replaces it with what it measures."""


def payload_bytes(elems: int, codec: str) -> int:
    """Exact size of a coded tensor of ``elems`` elements (before lossless compression)."""
    if codec == "fp32":
        return 4 * elems
    if codec == "fp16":
        return 2 * elems
    if codec == "int8":
        return QUANT_HEADER_BYTES + elems
    if codec == "int4":
        return QUANT_HEADER_BYTES + (elems + 1) // 2
    if codec == "raw":
        return elems
    raise ValueError(f"unknown codec {codec!r}: fp32, fp16, int8, int4 or raw (an uint8 input)")


def message_bytes(payload: int, ndim: int) -> int:
    """Bytes of one protocol message carrying ``payload`` bytes of a tensor with ``ndim`` dimensions."""
    return MESSAGE_FIXED_BYTES + 4 * ndim + payload


@dataclass(frozen=True)
class Processor:
    """A device or server as the split model sees it (achievable rates)."""

    name: str
    flops_per_s: float
    mem_Bps: float
    busy_W: float = 0.0
    idle_W: float = 0.0


@dataclass(frozen=True)
class Uplink:
    name: str
    bandwidth_Bps: float
    latency_s: float
    tx_base_W: float | None = None
    """Radio power model (None: no published model; the device idles while it sends)."""
    tx_W_per_Mbps: float = 0.0
    burst_bytes: float = 0.0
    """A token-bucket link (``tc tbf``) lets the first ``burst_bytes`` of a message after an idle spell pass at
    line rate: only ``max(bytes - burst_bytes, 0)`` are paced at ``bandwidth_Bps``. 0 for a plain α-β link."""


def node_seconds(flops: float, moved_bytes: float, p: Processor) -> float:
    return max(flops / p.flops_per_s, moved_bytes / p.mem_Bps)


def node_times(table: LayerTable, p: Processor, weight_bytes: float = 4.0) -> list[float]:
    """Roofline time of every chain node on ``p`` (weights at ``weight_bytes`` each)."""
    act = 4 if table.activation_dtype == "fp32" else 2
    prev = math.prod(table.input_shape) * act
    out = []
    for x in table.layers:
        out.append(node_seconds(x.flops, x.params * weight_bytes + prev + x.out_bytes, p))
        prev = x.out_bytes
    return out


class SplitOption(Result):
    """One split x codec for one frame: the ledger and its price at the nominal uplink."""

    split: int
    after: str
    """The node the device stops after ('input': ship the raw frame; the last node: all local)."""
    codec: str
    lossless: str
    device_flops: float
    server_flops: float
    uplink_bytes: int
    paced_bytes: float
    """The uplink bytes paced at the link's bandwidth (all of them, less a token bucket's burst)."""
    downlink_bytes: int
    device_s: float
    coding_s: float
    """Encode on the device + decode on the server."""
    server_s: float
    link_s: float
    """Uplink + downlink at the nominal bandwidth (latency included)."""
    latency_s: float
    device_energy_J: float
    latency_fixed_s: float
    """Latency = latency_fixed_s + uplink_bytes / B for uplink bandwidth B."""
    energy_fixed_J: float
    energy_J_per_byte_s: float
    """Energy = energy_fixed_J + energy_J_per_byte_s x uplink_bytes / B."""
    accuracy_drop: float | None
    allowed: bool
    why_not: str | None = None

    @property
    def label(self) -> str:
        if self.uplink_bytes == 0:
            return "all local"
        coded = self.codec + ("" if self.lossless == "none" else f"+{self.lossless}")
        return f"after {self.after}, {coded}" if self.split else f"raw input, {coded}"

    def latency_at(self, bandwidth_Bps: float) -> float:
        return self.latency_fixed_s + self.paced_bytes / bandwidth_Bps

    def energy_at(self, bandwidth_Bps: float) -> float:
        return self.energy_fixed_J + self.energy_J_per_byte_s * self.paced_bytes / bandwidth_Bps


@dataclass(frozen=True)
class Choices:
    """What the plan may pick from and the accuracy constraint on it."""

    codecs: Sequence[str] = ("fp32", "fp16", "int8", "int4")
    lossless: Sequence[str] = ("none",)
    lossless_ratio: Mapping[str, float] | None = None
    accuracy_drop: Mapping[str, float] | None = None
    """Measured accuracy lost, keyed ``codec`` or ``split:codec`` (split index or node name)."""
    max_accuracy_drop: float = 0.01


def _drop(c: Choices, k: int, name: str, codec: str) -> float | None:
    if codec in ("fp32", "raw", "local"):
        return 0.0  # exact: the server sees the very tensor the device computed
    table = c.accuracy_drop or {}
    for key in (f"{k}:{codec}", f"{name}:{codec}", codec):
        if key in table:
            return table[key]
    return None


def split_options(
    table: LayerTable,
    device: Processor,
    server: Processor,
    uplink: Uplink,
    choices: Choices = Choices(),
    *,
    result_bytes: int = 8,
    downlink_Bps: float | None = None,
    downlink_latency_s: float | None = None,
    device_times: Sequence[float] | None = None,
    server_times: Sequence[float] | None = None,
) -> list[SplitOption]:
    """Every split x codec x lossless coder, priced at the uplink's nominal bandwidth.

    ``device_times`` / ``server_times``: measured seconds per node (a calibration) instead of the roofline.
    """
    n = len(table.layers)
    dev_t = list(device_times) if device_times is not None else node_times(table, device)
    srv_t = list(server_times) if server_times is not None else node_times(table, server)
    if len(dev_t) != n or len(srv_t) != n:
        raise ValueError(f"node times for {len(dev_t)} / {len(srv_t)} nodes, the table has {n}")
    setting = _Setting(
        table,
        dev_t,
        srv_t,
        device,
        server,
        uplink,
        choices,
        dict(choices.lossless_ratio or {}),
        result_bytes,
        downlink_Bps or uplink.bandwidth_Bps,
        uplink.latency_s if downlink_latency_s is None else downlink_latency_s,
    )
    out: list[SplitOption] = []
    for k in range(n + 1):
        name = "input" if k == 0 else table.layers[k - 1].name
        if k == n:
            codecs: Sequence[str] = ("local",)
        elif k == 0:
            codecs = ("raw",)
        else:
            codecs = choices.codecs
        shape = table.input_shape if k == 0 else table.layers[k - 1].out_shape
        cut = _Cut(k, name, math.prod(shape), len(shape))
        for codec in codecs:
            for ll in ("none",) if k == n else choices.lossless:
                out.append(_option(setting, cut, codec, ll))
    return out


@dataclass(frozen=True)
class _Setting:
    """What every option of one network on one device / uplink / server shares."""

    table: LayerTable
    dev_t: list[float]
    """Seconds per node on the device (roofline or measured)."""
    srv_t: list[float]
    device: Processor
    server: Processor
    uplink: Uplink
    choices: Choices
    ratios: dict[str, float]
    """Measured lossless-coder ratios."""
    result_bytes: int
    down_Bps: float
    down_latency_s: float


@dataclass(frozen=True)
class _Cut:
    """Where the network is split: after node ``k`` (0: the input, ``n``: all local), its tensor's size."""

    k: int
    name: str
    elems: int
    ndim: int


def _wire(st: _Setting, elems: int, ndim: int, codec: str, ll: str) -> tuple[int, int, float]:
    """A split's message bytes up (the cut's tensor in ``codec``, then the lossless coder ``ll`` at its measured
    ratio) and down (the result), and the seconds coding them takes on both sides."""
    raw = payload_bytes(elems, codec)
    payload = math.ceil(raw * st.ratios.get(ll, 1.0)) if ll != "none" else raw
    up = message_bytes(payload, ndim)
    down = message_bytes(st.result_bytes, 1)
    # encode: read the fp32 tensor, write the code; decode on the server: the reverse
    streamed = 0.0 if codec in ("fp32", "raw") else 4.0 * elems + raw
    coding = streamed / st.device.mem_Bps + streamed / st.server.mem_Bps
    if ll != "none":
        coding += raw / LOSSLESS_BPS[ll] + raw / (2 * LOSSLESS_BPS[ll])  # decompression about twice as fast
    return up, down, coding


def _option(st: _Setting, cut: _Cut, codec: str, ll: str) -> SplitOption:
    """One split x codec x lossless coder: bytes each way, the time of every stage, device energy, accuracy."""
    table, dev_t, srv_t = st.table, st.dev_t, st.srv_t
    device, uplink, choices = st.device, st.uplink, st.choices
    k, name, elems, ndim = cut.k, cut.name, cut.elems, cut.ndim
    n = len(table.layers)
    local = k == n
    why: str | None = None
    if local:
        up = down = 0
        coding = 0.0
    else:
        up, down, coding = _wire(st, elems, ndim, codec, ll)
        if ll != "none" and ll not in st.ratios:
            why = f"no measured {ll} ratio"
    dev_s = sum(dev_t[:k])
    srv_s = sum(srv_t[k:])
    up_fixed = 0.0 if local else uplink.latency_s
    down_s = 0.0 if local else st.down_latency_s + down / st.down_Bps
    fixed = dev_s + coding + up_fixed + srv_s + down_s
    B = uplink.bandwidth_Bps
    paced = max(up - uplink.burst_bytes, 0.0)
    # device energy: busy while computing and coding, radio (or idle) while sending, idle while waiting
    busy = dev_s + (coding / 2 if not local else 0.0)
    wait = up_fixed + srv_s + down_s + (coding / 2 if not local else 0.0)
    if uplink.tx_base_W is not None:
        send_W = uplink.tx_base_W
        e_fixed = device.busy_W * busy + device.idle_W * wait + uplink.tx_W_per_Mbps * up * 8 / 1e6
    else:
        send_W = device.idle_W
        e_fixed = device.busy_W * busy + device.idle_W * wait
    drop = 0.0 if local else _drop(choices, k, name, codec)
    if why is None and drop is None:
        why = f"no measured accuracy for {codec} at this split"
    elif why is None and drop is not None and drop > choices.max_accuracy_drop:
        why = f"{codec} loses {drop:.1%} accuracy here, above the {choices.max_accuracy_drop:.1%} budget"
    return SplitOption(
        split=k,
        after=name,
        codec=codec,
        lossless=ll,
        device_flops=sum(x.flops for x in table.layers[:k]),
        server_flops=sum(x.flops for x in table.layers[k:]),
        uplink_bytes=up,
        paced_bytes=paced,
        downlink_bytes=down,
        device_s=dev_s,
        coding_s=coding,
        server_s=srv_s,
        link_s=(up_fixed + paced / B if not local else 0.0) + down_s,
        latency_s=fixed + paced / B,
        device_energy_J=e_fixed + send_W * paced / B,
        latency_fixed_s=fixed,
        energy_fixed_J=e_fixed,
        energy_J_per_byte_s=send_W,
        accuracy_drop=drop,
        allowed=why is None,
        why_not=why,
    )


def best(options: Sequence[SplitOption], bandwidth_Bps: float, objective: str = "latency") -> SplitOption:
    """The allowed option with the least latency (or device energy) at ``bandwidth_Bps``; ties: fewer bytes."""
    ok = [o for o in options if o.allowed]
    if not ok:
        raise ValueError("no split option is allowed (every codec is above the accuracy budget?)")

    def rank(o: SplitOption) -> tuple[float, int, int]:
        cost = o.latency_at(bandwidth_Bps) if objective == "latency" else o.energy_at(bandwidth_Bps)
        return cost, o.uplink_bytes, o.split

    return min(ok, key=rank)


class Segment(Result):
    """Over uplink bandwidths [low_Bps, high_Bps), ``choice`` is the best."""

    low_Bps: float
    high_Bps: float
    choice: str
    split: int
    codec: str
    lossless: str


def envelope(
    options: Sequence[SplitOption], objective: str = "latency", low_Bps: float = 1e4, high_Bps: float = 1e11
) -> list[Segment]:
    """The best choice as a function of uplink bandwidth, and where it changes (the break-even bandwidths).

    Each option is ``a + b / B``; between two options' crossing points the order is fixed, so evaluating
    the best once inside every interval between consecutive crossings is exact.
    """
    ok = [o for o in options if o.allowed]
    if not ok:
        return []

    def coef(o: SplitOption) -> tuple[float, float]:
        if objective == "latency":
            return o.latency_fixed_s, o.paced_bytes
        return o.energy_fixed_J, o.energy_J_per_byte_s * o.paced_bytes

    cuts = {low_Bps, high_Bps}
    lines = sorted({coef(o) for o in ok})
    for i, (a1, b1) in enumerate(lines):
        for a2, b2 in lines[i + 1 :]:
            if b1 != b2 and (a2 - a1) * (b1 - b2) > 0:  # they cross at x = 1/B > 0
                B = (b1 - b2) / (a2 - a1)
                if low_Bps < B < high_Bps:
                    cuts.add(B)
    edges = sorted(cuts)
    mids = np.sqrt(np.array(edges[:-1]) * np.array(edges[1:]))
    # best() at every interval at once: ties broken by (uplink bytes, split) as best() does, because
    # argmin returns the first minimum of options stably sorted by that key
    ranked = sorted(ok, key=lambda o: (o.uplink_bytes, o.split))
    fixed = np.array([coef(o)[0] for o in ranked])
    per_byte = np.array([coef(o)[1] for o in ranked])  # the same products latency_at / energy_at form
    cost = fixed[None, :] + per_byte[None, :] / mids[:, None]
    winners = np.argmin(cost, axis=1)
    segs: list[Segment] = []
    for (lo, hi), w in zip(itertools.pairwise(edges), winners, strict=True):
        o = ranked[int(w)]
        if segs and segs[-1].split == o.split and segs[-1].codec == o.codec and segs[-1].lossless == o.lossless:
            segs[-1] = segs[-1].model_copy(update={"high_Bps": hi})
        else:
            segs.append(
                Segment(low_Bps=lo, high_Bps=hi, choice=o.label, split=o.split, codec=o.codec, lossless=o.lossless)
            )
    return segs
