"""Cross-node checks of a cluster, pure: are the N nodes N machines (and each GPU one GPU), which node pairs
to measure so that 64 nodes do not take 64² runs, what iperf3 measured for a pair, and the verdict on it
against the rate the NIC negotiated or the rental declared.

Machine identity (:func:`judge_identities`): the kernel's ``/proc/sys/kernel/random/boot_id`` is the machine —
one kernel, one machine (or one VM); containers on one host share it, a container cannot change it. Two nodes
with one boot_id fail, named. ``/etc/machine-id`` is recorded but only warns when two nodes share it on
different kernels (cloned VM images often do). GPU UUIDs are unique per board: one UUID on two nodes (or two
ranks) fails, named; a PCI bus id twice within one node fails (the same GPU listed twice), across nodes bus
ids repeat on every identical host and say nothing.

Pairing (:func:`ring_rounds`, :func:`second_pass`): pass 1 measures the n edges of a ring — (0,1), (1,2) …
(n-1,0) — in 2 rounds (3 for odd n) where every node is in at most one pair, all pairs of a round at once;
pass 2 re-pairs each node of a slow pair with a node that passed, so a slow node (slow with everyone) is told
apart from a slow link (both ends fine elsewhere). At most n + 2·(slow pairs) runs in all, never n².
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from imagesmith.errors import ParseError
from imagesmith.validate.nics import Finding

#: what each node runs for its identity: boot_id, machine-id, then one ``uuid, bus id`` line per GPU
IDENTITY_COMMAND = (
    "echo boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null); "
    "echo machine_id=$(cat /etc/machine-id 2>/dev/null); "
    "command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=uuid,pci.bus_id --format=csv,noheader "
    "2>/dev/null | sed 's/^/gpu=/'; true"
)
#: the fraction of the rate a TCP pair must reach (iperf3, parallel streams, each direction)
DEFAULT_MIN_RATIO = 0.7


@dataclass(frozen=True, kw_only=True)
class Identity:
    node: str
    boot_id: str
    machine_id: str = ""
    gpus: tuple[tuple[str, str], ...] = ()  # (uuid, pci bus id)


def parse_identity(node: str, text: str) -> Identity:
    """:data:`IDENTITY_COMMAND`'s output. No boot_id is a :class:`ParseError` naming the node."""
    boot, mid, gpus = "", "", []
    for line in text.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "boot_id":
            boot = value.strip()
        elif key == "machine_id":
            mid = value.strip()
        elif key == "gpu":
            uuid, _, bus = value.partition(",")
            gpus.append((uuid.strip(), bus.strip()))
    if not boot:
        raise ParseError(
            f"node {node}: no boot_id (/proc/sys/kernel/random/boot_id unreadable)",
            hint="run the identity probe on a Linux node with /proc mounted",
            host=node,
        )
    return Identity(node=node, boot_id=boot, machine_id=mid, gpus=tuple(gpus))


@dataclass
class ClusterVerdict:
    failures: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)


def _groups(pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, node in pairs:
        if key:
            out.setdefault(key, []).append(node)
    return {k: v for k, v in out.items() if len(v) > 1}


def judge_identities(ids: Sequence[Identity]) -> ClusterVerdict:
    out = ClusterVerdict()
    for boot, nodes in _groups([(i.boot_id, i.node) for i in ids]).items():
        names = " and ".join(nodes)
        out.failures.append(
            Finding(
                subject=names,
                kind="same machine",
                message=f"nodes {names} are one machine: one kernel (boot_id {boot})",
                fix="these are containers or namespaces of one host, not separate machines: ask the "
                "provider for "
                "distinct nodes, or validate them as one",
            )
        )
    by_boot = {i.node: i.boot_id for i in ids}
    for mid, nodes in _groups([(i.machine_id, i.node) for i in ids]).items():
        if len({by_boot[n] for n in nodes}) > 1:
            out.warnings.append(
                Finding(
                    subject=" and ".join(nodes),
                    kind="same machine-id",
                    message=f"nodes {' and '.join(nodes)} share /etc/machine-id {mid} on different kernels",
                    fix="usually a cloned VM image (systemd-machine-id-setup fixes it); the boot_ids differ",
                )
            )
    for uuid, nodes in _groups([(u, i.node) for i in ids for u, _bus in i.gpus]).items():
        out.failures.append(
            Finding(
                subject=uuid,
                kind="same gpu",
                message=f"GPU {uuid} is seen by {' and '.join(nodes)}: one board counted more than once",
                fix="each rank must have a GPU of its own: check CUDA_VISIBLE_DEVICES per rank and "
                "the listing",
            )
        )
    for i in ids:
        for bus, _n in _groups([(b, i.node) for _u, b in i.gpus]).items():
            out.failures.append(
                Finding(
                    subject=f"{i.node} {bus}",
                    kind="same gpu",
                    message=f"{i.node}: PCI bus id {bus} listed twice",
                    fix="one GPU is counted twice: show nvidia-smi -L to the provider",
                )
            )
    return out


#
# ------------------------------------------------------------------------------------------------------------
# pairing

Pair = tuple[str, str]


def ring_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Pass 1: the ring's edges in rounds where no node is in two pairs (2 rounds for even n, 3 for odd n ≥ 3;
    one pair for 2 nodes; none for 1). Every node is measured against both ring neighbours."""
    n = len(nodes)
    if len(set(nodes)) != n:
        raise ValueError("node names must be distinct")
    if n < 2:
        return []
    if n == 2:
        return [[(nodes[0], nodes[1])]]
    edges = [(nodes[i], nodes[(i + 1) % n]) for i in range(n)]
    if n % 2 == 0:
        return [edges[0::2], edges[1::2]]
    # odd: even-indexed edges except the last, odd-indexed edges, then the closing edge (n-1, 0) alone
    return [edges[0 : n - 1 : 2], edges[1 : n - 1 : 2], [edges[n - 1]]]


def second_pass(nodes: Sequence[str], slow: Sequence[Pair], good: Sequence[Pair]) -> list[list[Pair]]:
    """Pass 2: each node of a slow pair against a node known good (in some pair that passed and in no slow
    pair), the same good node never in two pairs of one round. No good node at all: nothing to re-pair
    (every pair is slow: the fabric itself, not a node)."""
    suspects = sorted({n for p in slow for n in p}, key=list(nodes).index)
    clean = [n for n in nodes if n not in suspects and any(n in p for p in good)]
    if not clean:
        return []
    rounds: list[list[Pair]] = []
    for k in range(0, len(suspects), len(clean)):
        batch = suspects[k : k + len(clean)]
        rounds.append([(s, clean[j]) for j, s in enumerate(batch)])
    return rounds


def blame(slow_pass1: Sequence[Pair], pass2: Mapping[Pair, bool]) -> tuple[list[str], list[Pair]]:
    """(slow nodes, slow links) from pass 2's results (pair → passed): a node slow with a good partner is a
    slow node; a slow pair of pass 1 whose two nodes both passed pass 2 is a slow link between them. A suspect
    pass 2 did not measure (no good node to pair it with) keeps its pass-1 pair as the named link."""
    slow_nodes: list[str] = []
    for (s, _g), ok in pass2.items():
        if not ok and s not in slow_nodes:
            slow_nodes.append(s)
    measured = {s for s, _g in pass2}
    links = [p for p in slow_pass1 if not any(n in slow_nodes for n in p) or not set(p) <= measured]
    return slow_nodes, links


def planned_runs(n: int, slow_pairs: int = 0) -> int:
    """At most how many pair measurements the plan makes for *n* nodes with *slow_pairs* slow ring edges (pass
    2 measures each suspect node once: two slow edges sharing a node make 3 runs, not 4)."""
    if n < 2:
        return 0
    return (1 if n == 2 else n) + 2 * slow_pairs


#
# ------------------------------------------------------------------------------------------------------------
# iperf3


@dataclass(frozen=True, kw_only=True)
class Iperf:
    """One iperf3 run: what the receiving side counted (bits/s), streams, direction."""

    gbps: float
    streams: int
    reverse: bool
    seconds: float


def parse_iperf3_json(text: str, *, source: str = "iperf3 -J") -> Iperf:
    """iperf3's ``-J`` output (``end.sum_received.bits_per_second``: what arrived, the honest figure). An
    ``error`` (connection refused, no server) is a :class:`ParseError` carrying iperf3's words (``said``)."""
    try:
        doc: Any = json.loads(text)
    except ValueError as exc:
        raise ParseError(
            f"{source}: not JSON ({exc.__class__.__name__})", hint="run iperf3 with -J"
        ) from None
    if not isinstance(doc, dict):
        raise ParseError(f"{source}: not an iperf3 JSON object")
    err = doc.get("error")
    if isinstance(err, str) and err:
        raise ParseError(
            f"{source}: iperf3 failed", said=err, hint="start `iperf3 -s` on the peer and open its port"
        )
    try:
        recv = doc["end"]["sum_received"]
        bps = float(recv["bits_per_second"])
        secs = float(recv.get("seconds", 0.0))
        start = doc["start"]
        streams = int(start["test_start"]["num_streams"])
        reverse = bool(start["test_start"].get("reverse", 0))
    except (KeyError, TypeError, ValueError):
        raise ParseError(f"{source}: no end.sum_received.bits_per_second (a cut run?)") from None
    if not math.isfinite(bps) or bps < 0:
        raise ParseError(f"{source}: bits_per_second {bps!r} is not a rate")
    return Iperf(gbps=bps / 1e9, streams=streams, reverse=reverse, seconds=secs)


def judge_pair(
    pair: Pair,
    forward_gbps: float,
    reverse_gbps: float,
    *,
    rate_gbps: float,
    basis: str,
    min_ratio: float = DEFAULT_MIN_RATIO,
) -> Finding | None:
    """None when both directions reach *min_ratio* × *rate_gbps*; else a finding naming the pair, the slow
    direction, the figure and the *basis* of the rate (``declared 10 Gb/s``, ``eth0 negotiated 100000
    Mb/s``)."""
    floor = min_ratio * rate_gbps
    a, b = pair
    low = [(d, g) for d, g in ((f"{a}→{b}", forward_gbps), (f"{b}→{a}", reverse_gbps)) if g < floor]
    if not low:
        return None
    shown = ", ".join(f"{d} {g:.2f} Gb/s" for d, g in low)
    return Finding(
        subject=f"{a}↔{b}",
        kind="pair slow",
        message=f"pair {a}↔{b}: {shown}, below {min_ratio:.0%} of {rate_gbps:g} Gb/s ({basis})",
        fix="a link measuring a fraction of its rate is a bad cable/port, a rate limit or a slower NIC than "
        "sold: run the pair again, then show the matrix to the provider",
    )
