"""Which transport NCCL really used across nodes, read from its ``NCCL_DEBUG=INFO`` log, and the verdict
against the fabric the rental declared: the "cross-node traffic went over plain Ethernet" trap named.

Pure: :func:`parse_nccl_transport` reads a log (any mix of ranks and nodes, as mpirun/torchrun/srun interleave
them), :func:`judge_transport` gives the verdict. What the log says, by NCCL's own words
(src/transport/net.cc, src/transport/net_ib.cc, src/misc/ibvsymbols.cc):

- ``Failed to open libibverbs.so[.1]``: the verbs library is not in the image: NCCL cannot use IB/RoCE at all;
- ``NET/IB : No device found.``: the library loaded, the node shows NCCL no RDMA device;
- ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB …``: the RDMA ports NCCL took, with their link layer;
- ``Using network IB`` / ``Using network Socket`` / a plugin's name (``IBext_v8``, ``AWS Libfabric``);
- ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA``: one cross-node channel and its transport, with
  ``GDRDMA`` when GPUDirect RDMA is on (``via P2P/…`` and ``via SHM/…`` are inside one node and not judged
  here).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from imagesmith.validate.nics import Fabric, Finding

_VERBS_MISSING = re.compile(r"Failed to open libibverbs\.so", re.ASCII)
_IB_NO_DEVICE = re.compile(r"NET/IB ?: ?No device found", re.ASCII)
_IB_USING = re.compile(r"NET/IB ?: ?Using (.*?)(?:;|$)", re.ASCII)
_IB_DEV = re.compile(r"\[[0-9]{1,5}\]([A-Za-z0-9_.-]+):([0-9]{1,5})/(IB|RoCE)", re.ASCII)
_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.ASCII)
# "via NET/IB/0/GDRDMA", "via NET/Socket/0", "via NET/IBext_v8/2", "via NET/AWS Libfabric/1/GDRDMA/Shared"
_NET_CHANNEL = re.compile(
    r"\bvia NET/(?P<net>.+?)/(?P<dev>[0-9]{1,5})(?P<flags>(?:/[A-Za-z]+)*)(?:\s|$)", re.ASCII
)

Verbs = Literal["missing", "no device", "loaded"]


@dataclass(frozen=True, kw_only=True)
class IbDevice:
    name: str
    port: int
    layer: str  # IB or RoCE, as NCCL prints it


@dataclass
class NcclTransport:
    """What one NCCL_DEBUG=INFO log says about the network (across all ranks in it)."""

    verbs: Verbs | None = None  # None: the log says nothing of libibverbs
    ib_devices: tuple[IbDevice, ...] = ()
    networks: tuple[str, ...] = ()  # "Using network X", in the order first seen
    channels: Counter[tuple[str, bool]] = field(default_factory=Counter)  # (net, GDRDMA) → channel lines

    @property
    def nets_used(self) -> tuple[str, ...]:
        """Every network a cross-node channel went over (``IB``, ``Socket``, ``IBext_v8`` …), sorted."""
        return tuple(sorted({net for net, _ in self.channels}))


def parse_nccl_transport(text: str) -> NcclTransport:
    out = NcclTransport()
    devices: dict[tuple[str, int], IbDevice] = {}
    networks: list[str] = []
    for line in text.splitlines():
        if line.startswith("#") or ("NCCL" not in line and "via NET/" not in line):
            continue  # nccl-tests' own "#" lines (and a fixture's) say nothing of the transport
        if _VERBS_MISSING.search(line):
            out.verbs = "missing"
        elif _IB_NO_DEVICE.search(line) and out.verbs != "missing":
            out.verbs = "no device"
        m = _IB_USING.search(line)
        # NCCL 2.28 prints "NET/IB : Using [RO]; OOB eth0:…" after "No device found": a Using line that names
        # no device says nothing new
        found = list(_IB_DEV.finditer(m.group(1))) if m else []
        if found and out.verbs != "missing":
            out.verbs = "loaded"
        for d in found:
            key = (d.group(1), int(d.group(2)))
            devices.setdefault(key, IbDevice(name=key[0], port=key[1], layer=d.group(3)))
        n = _USING_NETWORK.search(line)
        if n and n.group(1) not in networks:
            networks.append(n.group(1))
        for c in _NET_CHANNEL.finditer(line):
            flags = c.group("flags").split("/")
            out.channels[(c.group("net"), "GDRDMA" in flags)] += 1
    out.ib_devices = tuple(devices[k] for k in sorted(devices))
    out.networks = tuple(networks)
    return out


def _is_rdma(net: str) -> bool:
    """NCCL's own IB transport and the IB plugins (``IBext``, ``IBext_v8``: HPC-X/SHARP) carry IB and RoCE."""
    return net == "IB" or net.startswith("IBext")


_WHY_SOCKET = {
    "missing": "NCCL could not load libibverbs (`Failed to open libibverbs.so[.1]`): the image has no "
    "rdma-core "
    "userspace",
    "no device": "libibverbs loaded but NCCL saw no RDMA device (`NET/IB : No device found`)",
}
_FIX_SOCKET = {
    "missing": "use an image with libibverbs1 and ibverbs-providers (imagesmith's images carry them), or "
    "install "
    "them; then run again",
    "no device": "pass the RDMA devices into the container (--device /dev/infiniband, --cap-add IPC_LOCK, "
    "--ulimit memlock=-1; the RDMA device plugin on Kubernetes) and check `ibv_devinfo` on the node",
}
_FIX_SOCKET_DEFAULT = (
    "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read why NET/IB was not chosen; "
    "NCCL_IB_DISABLE=1 or "
    "NCCL_NET=Socket in the environment forces sockets"
)


@dataclass
class TransportVerdict:
    transport: NcclTransport
    failures: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)


def judge_transport(log: NcclTransport, *, fabric: Fabric, expect_gdr: bool = False) -> TransportVerdict:
    """NCCL's cross-node transport against the declared *fabric*.

    ib/roce: any cross-node channel over ``NET/Socket`` (or ``Using network Socket``) fails, naming the
    transport, how many channels and why NCCL fell back (the verbs library missing, no device); a non-IB
    network (a plugin) fails naming it; no cross-node channel in the log at all fails (NCCL_DEBUG=INFO was not
    set, or the run never left one node). With *expect_gdr*, an IB channel without ``GDRDMA`` fails.
    ethernet: sockets are what was sold; the log must still show cross-node channels.
    """
    out = TransportVerdict(transport=log)
    if not log.channels:
        out.failures.append(
            Finding(
                subject="NCCL transport",
                kind="no net channel",
                message="the NCCL log shows no cross-node channel (`via NET/…`): the transport "
                "cannot be named",
                fix="run the cross-node collective with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET, "
                "across at "
                "least two nodes",
            )
        )
        return out
    if fabric == "ethernet":
        return out
    counts: Counter[str] = Counter()
    for (net, _gdr), n in log.channels.items():
        counts[net] += n
    socket = counts.get("Socket", 0) or (1 if "Socket" in log.networks else 0)
    if socket:
        why = _WHY_SOCKET.get(log.verbs or "", "")
        out.failures.append(
            Finding(
                subject="NET/Socket",
                kind="socket transport",
                message=f"NCCL sent cross-node traffic over NET/Socket (TCP; {counts.get('Socket', 0)} "
                f"channel line(s)) where {fabric.upper()} was declared" + (f": {why}" if why else ""),
                fix=_FIX_SOCKET.get(log.verbs or "", _FIX_SOCKET_DEFAULT),
            )
        )
    for net in sorted(counts):
        if net != "Socket" and not _is_rdma(net):
            out.failures.append(
                Finding(
                    subject=f"NET/{net}",
                    kind="other transport",
                    message=f"NCCL used NET/{net} ({counts[net]} channel line(s)) where {fabric.upper()} was "
                    "declared",
                    fix="a network plugin took over: check NCCL_NET and the plugin NCCL loaded (`NET/Plugin` "
                    "lines)",
                )
            )
    want = "RoCE" if fabric == "roce" else "IB"
    off = [d for d in log.ib_devices if d.layer != want]
    if off:
        out.warnings.append(
            Finding(
                subject="NET/IB",
                kind="other link layer",
                message=f"NCCL's RDMA ports are {', '.join(f'{d.name}:{d.port}/{d.layer}' for d in off)}, "
                f"not {want} as declared",
                fix="nothing to do if the speed is right; else compare the listing with `ibstat`",
            )
        )
    if expect_gdr:
        plain = sum(n for (net, gdr), n in log.channels.items() if _is_rdma(net) and not gdr)
        if plain:
            out.failures.append(
                Finding(
                    subject="GPUDirect RDMA",
                    kind="no gdr",
                    message=f"{plain} IB channel line(s) without GDRDMA: GPU memory goes through host memory",
                    fix="load nvidia_peermem (or use the open kernel module's dma-buf: "
                    "NCCL_DMABUF_ENABLE=1) and "
                    "check NCCL_NET_GDR_LEVEL; the NIC and GPU must share a PCIe switch for PIX/PXB",
                )
            )
    return out
