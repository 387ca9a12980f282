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

from typing import Literal

from aitrinity.cost.ledger import Channel, Traffic
from aitrinity.spec.scenario import System

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
