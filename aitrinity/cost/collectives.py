"""Collective communication under the α-β model, and which link a group crosses.

Bytes each rank sends for a payload of S bytes over n ranks (Thakur, Rabenseifner
& Gropp 2005, "Optimization of Collective Communication Operations in MPICH";
Patarasuk & Yuan 2009 for the bandwidth-optimal ring):

==================  ====================  ==========
collective          bytes sent per rank   steps (α)
==================  ====================  ==========
all-reduce (ring)   2(n-1)/n · S          2(n-1)
all-gather          (n-1)/n · S           n-1
reduce-scatter      (n-1)/n · S           n-1
all-to-all          (n-1)/n · S           n-1
point-to-point      S                     1
==================  ====================  ==========

Here S is the full (unsharded) payload for all-gather / reduce-scatter and
the per-rank send buffer for all-to-all. Rank placement follows Megatron-LM's
default order ``tp-ep-dp-pp`` (TP ranks adjacent, PP outermost): a group of
``size`` ranks at ``stride`` stays inside a node of ``devices_per_node``
devices iff ``stride * size <= devices_per_node``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from aitrinity.cost.ledger import Channel, Traffic
from aitrinity.spec.scenario import System

F = NDArray[np.float64]

Collective = Literal["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p"]


def bytes_sent(kind: Collective, payload: float, n: int) -> float:
    """Bytes one rank sends for ``kind`` over ``n`` ranks (table above)."""
    if n <= 1 and kind != "p2p":
        return 0.0
    if kind == "all-reduce":
        return 2.0 * (n - 1) / n * payload
    if kind == "p2p":
        return payload
    return (n - 1) / n * payload


def steps(kind: Collective, n: int) -> int:
    """Latency terms (α) of one collective."""
    if kind == "p2p":
        return 1
    if n <= 1:
        return 0
    return 2 * (n - 1) if kind == "all-reduce" else n - 1


def crosses_nodes(stride: int, size: int, devices_per_node: int) -> bool:
    """Whether a group of ``size`` ranks spaced ``stride`` apart spans more than one node."""
    return stride * size > devices_per_node


def traffic(
    purpose: str, kind: Collective, payload: float, n: int, times: float, stride: int, system: System
) -> Traffic | None:
    """``times`` repetitions of one collective over ``n`` ranks spaced ``stride`` apart, on the link it crosses.

    None when the group has a single rank (nothing moves).
    """
    if n <= 1 and kind != "p2p":
        return None
    crosses = crosses_nodes(stride, n if kind != "p2p" else 2, system.devices_per_node)
    link = system.inter_node_link if crosses and system.inter_node_link else system.intra_node_link
    return Traffic(
        purpose=purpose,
        collective=kind,
        channel="inter_node" if link is system.inter_node_link else "intra_node",
        link=link.name,
        group_size=n,
        bytes_per_device=times * bytes_sent(kind, payload, n),
        messages=times * steps(kind, n),
    )


def transfer(purpose: str, channel: Channel, nbytes: float, messages: float) -> Traffic:
    """A point-to-point stream between a device and a memory tier (offload, streaming, cache loads)."""
    return Traffic(
        purpose=purpose,
        collective="p2p",
        channel=channel,
        link=channel,
        group_size=1,
        bytes_per_device=nbytes,
        messages=messages,
    )


@dataclass(frozen=True)
class Stream:
    """One traffic item of many rows (candidate plans) at once: a collective repeated ``times`` over ``group``
    ranks ``stride`` apart, or (with ``tier``) a transfer of ``payload`` bytes in ``times`` messages between a
    device and a memory tier. ``payload`` and ``times`` are zero where a row has none; ``present`` says which
    rows have it (a one-plan ledger lists the item only then)."""

    purpose: str
    kind: Collective
    payload: F
    times: F
    present: NDArray[np.bool_]
    group: int = 1
    stride: int = 1
    tier: Channel | None = None
    timed: bool = False
    """The operator model times it itself (TP collectives, pipeline sends)."""
    method: bool = False
    """Its purpose names the row's gradient compressor."""

    def channel(self, system: System) -> Channel | None:
        """The channel it moves on (None: a single rank, nothing moves)."""
        if self.tier is not None:
            return self.tier
        if self.group <= 1 and self.kind != "p2p":
            return None
        crosses = crosses_nodes(self.stride, self.group if self.kind != "p2p" else 2, system.devices_per_node)
        return "inter_node" if crosses and system.inter_node_link else "intra_node"

    def traffic(self, i: int, system: System, purpose: str | None = None) -> Traffic | None:
        """Row ``i``'s item as the ledger lists it (None where it has none)."""
        if not self.present[i]:
            return None
        label = purpose or self.purpose
        if self.tier is not None:
            return transfer(label, self.tier, float(self.payload[i]), float(self.times[i]))
        return traffic(label, self.kind, float(self.payload[i]), self.group, float(self.times[i]), self.stride, system)

    def sent(self) -> tuple[F, F]:
        """(bytes, messages) per row on its channel."""
        if self.tier is not None:
            return self.payload, self.times
        return self.times * bytes_sent(self.kind, 1.0, self.group) * self.payload, self.times * steps(
            self.kind, self.group
        )


def channel_totals(streams: list[Stream], system: System, n: int) -> tuple[dict[str, F], dict[str, F]]:
    """Bytes and messages per channel of ``n`` rows, summed over their streams in order."""
    nbytes: dict[str, F] = {}
    msgs: dict[str, F] = {}
    for x in streams:
        ch = x.channel(system)
        if ch is None:
            continue
        b, m = x.sent()
        if ch in nbytes:
            nbytes[ch], msgs[ch] = nbytes[ch] + b, msgs[ch] + m
        else:  # (0 + x is x: no zeros to add)
            nbytes[ch], msgs[ch] = np.broadcast_to(b, (n,)), np.broadcast_to(m, (n,))
    return nbytes, msgs
