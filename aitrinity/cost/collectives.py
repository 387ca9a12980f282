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
default order ``tp-cp-ep-dp-pp`` (TP ranks adjacent, then context-parallel ones, PP outermost): a group of
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
Ints = NDArray[np.int64]

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
    rows have it (a one-plan ledger lists the item only then). ``group`` and ``stride`` are one for all rows, or
    one per row (candidates of different layouts): each row's collective then moves on the link its own group
    crosses (:meth:`sent_by_channel`)."""

    purpose: str
    kind: Collective
    payload: F
    times: F
    present: NDArray[np.bool_]
    group: int | Ints = 1
    stride: int | Ints = 1
    tier: Channel | None = None
    timed: bool = False
    """The operator model times it itself (TP collectives, pipeline sends)."""
    method: bool = False
    """Its purpose names the row's gradient compressor."""

    def channel(self, system: System) -> Channel | None:
        """The channel it moves on (None: a single rank, nothing moves); a stream of one group for all rows."""
        if self.tier is not None:
            return self.tier
        assert isinstance(self.group, int) and isinstance(self.stride, int), "per-row groups: sent_by_channel"
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
        group = self.group if isinstance(self.group, int) else int(self.group[i])
        stride = self.stride if isinstance(self.stride, int) else int(self.stride[i])
        return traffic(label, self.kind, float(self.payload[i]), group, float(self.times[i]), stride, system)

    def sent(self) -> tuple[F, F]:
        """(bytes, messages) per row on its channel; a stream of one group for all rows."""
        if self.tier is not None:
            return self.payload, self.times
        assert isinstance(self.group, int), "per-row groups: sent_by_channel"
        return self.times * bytes_sent(self.kind, 1.0, self.group) * self.payload, self.times * steps(
            self.kind, self.group
        )

    def sent_by_channel(self, system: System) -> list[tuple[Channel, F, F]]:
        """(channel, bytes, messages) per row for each channel it moves on: :meth:`channel` and :meth:`sent`, or
        for per-row groups the same row by row (a row whose group is on another channel, or is one rank, counts zero
        on this one)."""
        if self.tier is not None or (isinstance(self.group, int) and isinstance(self.stride, int)):
            ch = self.channel(system)
            return [] if ch is None else [(ch, *self.sent())]
        g = np.asarray(self.group, dtype=np.float64)
        size: float | F
        if self.kind == "p2p":  # every row sends its payload once, to the next rank
            moves, size = np.ones(np.shape(g), dtype=np.bool_), 2.0
            b, m = self.times * self.payload, self.times
        else:  # the module doc's table, row by row (one rank: (g - 1) = 0 bytes and steps)
            moves, size = g > 1, g
            factor = 2.0 if self.kind == "all-reduce" else 1.0
            b, m = self.times * (factor * (g - 1.0) / g) * self.payload, self.times * (factor * (g - 1.0))
        out: list[tuple[Channel, F, F]] = []
        crosses = np.asarray(self.stride) * size > system.devices_per_node
        if system.inter_node_link is None or not crosses.any():
            return [("intra_node", b, m)] if moves.any() else []
        inside = moves & ~crosses
        if inside.any():
            out.append(("intra_node", np.where(inside, b, 0.0), np.where(inside, m, 0.0)))
        if (moves & crosses).any():
            out.append(("inter_node", np.where(crosses, b, 0.0), np.where(crosses, m, 0.0)))
        return out


def channel_totals(streams: list[Stream], system: System, n: int) -> tuple[dict[str, F], dict[str, F]]:
    """Bytes and messages per channel of ``n`` rows, summed over their streams in order."""
    nbytes: dict[str, F] = {}
    msgs: dict[str, F] = {}
    for x in streams:
        for ch, b, m in x.sent_by_channel(system):
            if ch in nbytes:
                nbytes[ch], msgs[ch] = nbytes[ch] + b, msgs[ch] + m
            else:  # (0 + x is x: no zeros to add)
                nbytes[ch], msgs[ch] = np.broadcast_to(b, (n,)), np.broadcast_to(m, (n,))
    return nbytes, msgs
