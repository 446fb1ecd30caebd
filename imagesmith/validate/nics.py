"""The RDMA NICs of one node: what ``ibstat`` or the kernel's ``/sys/class/infiniband`` tree says about each
port (state, physical state, negotiated rate, link layer, RoCE GIDs), and the verdict against the fabric the
rental declared.

Pure: :data:`SYSFS_COMMAND` is what a node runs (one ``grep -H`` over the sysfs files, no rdma-core tool
needed on the host), :func:`parse_sysfs_dump` and :func:`parse_ibstat` read captures, :func:`judge_nics` gives
the verdict, so unit tests replay captures of real hosts (tests/data/validate/cluster/, each naming its
source). The sysfs files are the kernel's stable ABI (Documentation/ABI/stable/sysfs-class-infiniband):
``state`` ``4: ACTIVE``, ``phys_state`` ``5: LinkUp``, ``rate`` ``200 Gb/sec (4X HDR)``, ``link_layer``
``InfiniBand`` or ``Ethernet`` (RoCE), ``gids/N`` and ``gid_attrs/types/N`` (``IB/RoCE v1``, ``RoCE v2``).
Also GPUDirect RDMA readiness (:func:`judge_gdr`) and each GPU's nearest NIC from ``nvidia-smi topo -m``
(:func:`parse_topo`, :func:`judge_affinity`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from imagesmith.errors import ParseError
from imagesmith.inputs import is_decimal

#: the fabrics a rental may declare: InfiniBand, RoCE (RDMA over Ethernet), or plain Ethernet (TCP only)
Fabric = Literal["ib", "roce", "ethernet"]
FABRICS: tuple[Fabric, ...] = ("ib", "roce", "ethernet")

#: what a node runs: every port's state, rate, link layer and GID table in ``path:value`` lines; a node
#: without RDMA devices prints ``# no /sys/class/infiniband`` (nothing to read is an answer, not an error);
#: a file that is not there (no GID attributes on an old kernel) leaves its line out, never fails the probe
SYSFS_COMMAND = (
    "if ls /sys/class/infiniband/*/ports/*/state >/dev/null 2>&1; then "
    "grep -H . /sys/class/infiniband/*/ports/*/state /sys/class/infiniband/*/ports/*/phys_state "
    "/sys/class/infiniband/*/ports/*/rate /sys/class/infiniband/*/ports/*/link_layer "
    "/sys/class/infiniband/*/ports/*/gids/* /sys/class/infiniband/*/ports/*/gid_attrs/types/* 2>/dev/null; "
    "true; else echo '# no /sys/class/infiniband'; fi"
)
_NULL_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_SYSFS_RE = re.compile(
    r"^/sys/class/infiniband/(?P<dev>[A-Za-z0-9_.-]+)/ports/(?P<port>[0-9]{1,5})/"
    r"(?P<key>state|phys_state|rate|link_layer|gids/[0-9]{1,5}|gid_attrs/types/[0-9]{1,5}):(?P<value>.*)$",
    re.ASCII,
)
_RATE_RE = re.compile(r"^([0-9]{1,7}(?:\.[0-9]{1,6})?)\s*Gb/sec\b", re.ASCII)


@dataclass(frozen=True, kw_only=True)
class Port:
    """One port of one RDMA device (``mlx5_0`` port 1)."""

    device: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED (upper case)
    phys_state: str  # LinkUp, Polling, Disabled …
    rate_gbps: float | None
    link_layer: str  # InfiniBand or Ethernet
    roce_v2_gids: tuple[int, ...] = ()  # GID indexes of type RoCE v2 that hold an address

    @property
    def name(self) -> str:
        return f"{self.device} port {self.port}"

    @property
    def active(self) -> bool:
        """ACTIVE, and LinkUp where the capture shows the physical state (a bare `state` file does not)."""
        return self.state == "ACTIVE" and self.phys_state.lower() in ("", "linkup")


def _state_word(value: str) -> str:
    """``4: ACTIVE`` → ``ACTIVE``; ``Active`` (ibstat) → ``ACTIVE``; ``5: LinkUp`` → ``LinkUp``."""
    word = value.split(":", 1)[1] if ":" in value else value
    return word.strip()


def _rate(value: str, where: str) -> float:
    v = value.strip()
    m = _RATE_RE.match(v)
    if m:
        return float(m.group(1))
    if is_decimal(v) and len(v) <= 12:  # ibstat prints the number alone
        return float(v)
    raise ParseError(f"{where}: rate {value.strip()!r} is not '<N> Gb/sec …' or a number")


def parse_sysfs_dump(text: str, *, source: str = "sysfs dump") -> tuple[Port, ...]:
    """Ports from :data:`SYSFS_COMMAND`'s output; ``()`` for a node without RDMA devices. A port missing its
    state or link layer, or a line that is neither, is a :class:`ParseError` naming it."""
    raw: dict[tuple[str, int], dict[str, str]] = {}
    gids: dict[tuple[str, int], dict[int, str]] = {}
    types: dict[tuple[str, int], dict[int, str]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        m = _SYSFS_RE.match(line)
        if m is None:
            raise ParseError(f"{source} line {n}: not a /sys/class/infiniband port file: {line[:120]!r}")
        key = (m.group("dev"), int(m.group("port")))
        name, value = m.group("key"), m.group("value").strip()
        if name.startswith("gids/"):
            gids.setdefault(key, {})[int(name.split("/")[1])] = value
        elif name.startswith("gid_attrs/types/"):
            types.setdefault(key, {})[int(name.split("/")[2])] = value
        else:
            raw.setdefault(key, {})[name] = value
    ports = []
    for key in sorted(set(raw) | set(gids) | set(types)):
        dev, port = key
        where = f"{source}: {dev} port {port}"
        files = raw.get(key, {})
        missing = [f for f in ("state", "link_layer") if f not in files]
        if missing:
            raise ParseError(f"{where}: no {' or '.join(missing)} (a cut capture?)")
        v2 = tuple(
            i
            for i, t in sorted(types.get(key, {}).items())
            if t.strip().lower() == "roce v2" and gids.get(key, {}).get(i, _NULL_GID) != _NULL_GID
        )
        ports.append(
            Port(
                device=dev,
                port=port,
                state=_state_word(files["state"]).upper(),
                phys_state=_state_word(files.get("phys_state", "")),
                rate_gbps=_rate(files["rate"], where) if "rate" in files else None,
                link_layer=files["link_layer"],
                roce_v2_gids=v2,
            )
        )
    return tuple(ports)


_CA_RE = re.compile(r"^CA '([A-Za-z0-9_.-]+)'$", re.ASCII)
_PORT_RE = re.compile(r"^Port ([0-9]{1,5}):$", re.ASCII)


def parse_ibstat(text: str, *, source: str = "ibstat") -> tuple[Port, ...]:
    """Ports from ``ibstat`` (infiniband-diags). ibstat shows no GID table: RoCE GIDs come from sysfs only."""
    ports: list[Port] = []
    dev: str | None = None
    cur: dict[str, str] | None = None
    cur_port = 0

    def close() -> None:
        if cur is None or dev is None:
            return
        where = f"{source}: {dev} port {cur_port}"
        missing = [f for f in ("State", "Link layer") if f not in cur]
        if missing:
            raise ParseError(f"{where}: no {' or '.join(missing)} line (a cut capture?)")
        ports.append(
            Port(
                device=dev,
                port=cur_port,
                state=_state_word(cur["State"]).upper(),
                phys_state=_state_word(cur.get("Physical state", "")),
                rate_gbps=_rate(cur["Rate"], where) if "Rate" in cur else None,
                link_layer=cur["Link layer"],
            )
        )

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        ca = _CA_RE.match(line)
        if ca:
            close()
            dev, cur = ca.group(1), None
            continue
        pm = _PORT_RE.match(line)
        if pm:
            if dev is None:
                raise ParseError(f"{source} line {n}: a port before any CA line")
            close()
            cur, cur_port = {}, int(pm.group(1))
            continue
        if cur is not None and ":" in line:
            k, v = line.split(":", 1)
            cur[k.strip()] = v.strip()
    close()
    if not ports and text.strip():
        raise ParseError(f"{source}: no CA with a port in it (not ibstat output?)")
    return tuple(ports)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One thing wrong (or worth a warning) about a named subject: a node, a port, a node pair, a
    transport."""

    subject: str
    kind: str  # a short code tests and callers decide on: "port down", "rate low", "socket transport" …
    message: str
    fix: str


@dataclass
class NicVerdict:
    ports: tuple[Port, ...] = ()
    failures: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)


_LINK_LAYER = {"ib": "InfiniBand", "roce": "Ethernet"}


def judge_nics(
    node: str,
    ports: Sequence[Port],
    *,
    fabric: Fabric,
    rate_gbps: float | None = None,
    expect_ports: int | None = None,
) -> NicVerdict:
    """The RDMA ports of *node* against the declared *fabric* (and, when given, the declared per-port
    *rate_gbps* and number of ports). Plain Ethernet declares no RDMA: nothing fails for missing ports.

    For ib/roce: no port of the declared link layer fails; each such port not ACTIVE/LinkUp fails (named);
    one negotiated below the declared rate fails naming the port and both rates; a RoCE port without a RoCE v2
    GID fails (NCCL would have no routable GID: ``NCCL_IB_GID_INDEX``); fewer ports than declared fails.
    """
    out = NicVerdict(ports=tuple(ports))
    if fabric == "ethernet":
        return out
    layer = _LINK_LAYER[fabric]
    mine = [p for p in ports if p.link_layer == layer]
    others = [p for p in ports if p.link_layer != layer]
    if not mine:
        seen = ", ".join(f"{p.name} ({p.link_layer})" for p in ports) or "no RDMA device at all"
        out.failures.append(
            Finding(
                subject=node,
                kind="no rdma port",
                message=f"{node}: {fabric.upper()} was declared but the node has no {layer} RDMA port "
                f"({seen})",
                fix="check that the rental's NICs are passed into the machine/container (--device "
                "/dev/infiniband, the RDMA device plugin on Kubernetes) and that the driver (mlx5_ib) is "
                "loaded; "
                "else ask the provider",
            )
        )
        return out
    for p in others:
        out.warnings.append(
            Finding(
                subject=f"{node} {p.name}",
                kind="other link layer",
                message=f"{node} {p.name}: link layer {p.link_layer}, not the declared {layer}",
                fix="nothing to do if this port is not the training fabric",
            )
        )
    for p in mine:
        where = f"{node} {p.name}"
        if not p.active:
            out.failures.append(
                Finding(
                    subject=where,
                    kind="port down",
                    message=f"{where}: state {p.state}, physical state {p.phys_state or '?'} "
                    "(ACTIVE/LinkUp needed)",
                    fix="Polling: no cable or the switch port is down; INIT: no subnet manager has "
                    "configured the "
                    "port (opensm/UFM); ask the provider to fix the link",
                )
            )
            continue
        if rate_gbps is not None and p.rate_gbps is not None and p.rate_gbps < rate_gbps:
            out.failures.append(
                Finding(
                    subject=where,
                    kind="rate low",
                    message=f"{where}: negotiated {p.rate_gbps:g} Gb/s, {rate_gbps:g} Gb/s declared",
                    fix="a link that trained below its speed is a bad cable, transceiver or switch "
                    "port (or a "
                    "slower NIC than sold): show `ibstat` to the provider",
                )
            )
        if fabric == "roce" and not p.roce_v2_gids:
            out.failures.append(
                Finding(
                    subject=where,
                    kind="no roce v2 gid",
                    message=f"{where}: no RoCE v2 GID with an address (the GID table holds none)",
                    fix="the port's netdev needs an IP address for a RoCE v2 GID; then set "
                    "NCCL_IB_GID_INDEX to "
                    "its index",
                )
            )
    if expect_ports is not None and len(mine) < expect_ports:
        out.failures.append(
            Finding(
                subject=node,
                kind="ports missing",
                message=f"{node}: {len(mine)} {layer} port(s), {expect_ports} declared",
                fix="a missing NIC is not passed in or has failed: compare `ls "
                "/sys/class/infiniband` with the "
                "listing and ask the provider",
            )
        )
    return out


# -----------------------------------------------------------------------------------------------------------
# GPUDirect RDMA readiness

#: what a node runs: nvidia_peermem loaded, the open GPU kernel module (dma-buf), a driver at all, the kernel
GDR_COMMAND = (
    "test -d /sys/module/nvidia_peermem && echo peermem=1; "
    "grep -qi 'open kernel module' /proc/driver/nvidia/version 2>/dev/null && echo open_module=1; "
    "test -e /proc/driver/nvidia/version && echo driver=1; "
    "echo kernel=$(uname -r)"
)
#: the first Linux release with the RDMA dma-buf interface GPU memory registration through dma-buf needs
DMABUF_KERNEL = (5, 12)
_KERNEL_RE = re.compile(r"^([0-9]{1,4})\.([0-9]{1,4})", re.ASCII)


@dataclass(frozen=True, kw_only=True)
class GdrReadiness:
    driver: bool
    peermem: bool
    open_module: bool
    kernel: str

    @property
    def dmabuf(self) -> bool:
        """The open kernel module on a kernel with RDMA dma-buf: NCCL registers GPU memory without peermem."""
        m = _KERNEL_RE.match(self.kernel)
        return self.open_module and m is not None and (int(m.group(1)), int(m.group(2))) >= DMABUF_KERNEL


def parse_gdr(text: str) -> GdrReadiness:
    """:data:`GDR_COMMAND`'s output (lines it does not know are ignored)."""
    seen: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition("=")
        seen[key] = value.strip()
    return GdrReadiness(
        driver="driver" in seen,
        peermem="peermem" in seen,
        open_module="open_module" in seen,
        kernel=seen.get("kernel", ""),
    )


def judge_gdr(node: str, g: GdrReadiness) -> list[Finding]:
    """GPUDirect RDMA needs nvidia_peermem loaded or dma-buf (the open GPU kernel module on Linux ≥ 5.12);
    neither, or no NVIDIA driver at all, fails naming the node."""
    if not g.driver:
        return [
            Finding(
                subject=node,
                kind="no nvidia driver",
                message=f"{node}: no NVIDIA driver (/proc/driver/nvidia/version): GPUDirect RDMA cannot be "
                "ready",
                fix="run on the GPU node itself (or a container of it with the GPUs given)",
            )
        ]
    if g.peermem or g.dmabuf:
        return []
    why = (
        f"the open kernel module on Linux {g.kernel} (dma-buf needs 5.12 or later)"
        if g.open_module
        else "the proprietary kernel module (no dma-buf)"
    )
    return [
        Finding(
            subject=node,
            kind="no gdr path",
            message=f"{node}: GPUDirect RDMA is not ready: nvidia_peermem is not loaded and the driver is "
            f"{why}",
            fix="load nvidia_peermem (modprobe nvidia_peermem; it needs the RDMA core modules), or use the "
            "open GPU kernel module driver on a 5.12+ kernel for dma-buf; else NCCL moves GPU data through "
            "host memory",
        )
    ]


# -----------------------------------------------------------------------------------------------------------
# NIC↔GPU affinity (``nvidia-smi topo -m``)

#: what a node runs: the topology matrix, or a ``#`` line saying why there is none (no nvidia-smi, or it
#: failed: no driver); never a non-zero exit, so a node without GPUs is an answer, not a lost node
TOPO_COMMAND = (
    "if command -v nvidia-smi >/dev/null 2>&1; then "
    "nvidia-smi topo -m 2>&1 || echo '# nvidia-smi topo -m failed'; "
    "else echo '# no nvidia-smi'; fi"
)
#: the GPU↔NIC paths that keep both on one PCIe switch tree: NCCL's default ``NCCL_NET_GDR_LEVEL`` is PXB,
#: so beyond it (PHB, NODE, SYS) NCCL moves that GPU's network data through host memory, not GPUDirect RDMA
GDR_PATHS = ("PIX", "PXB")
_PATHS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC")  # nearest first; SOC: old drivers' SYS
_NV_RE = re.compile(r"^NV[0-9]{1,3}$", re.ASCII)
_GPU_RE = re.compile(r"^GPU([0-9]{1,3})$", re.ASCII)
_NICK_RE = re.compile(r"^NIC[0-9]{1,3}$", re.ASCII)
_NIC_NAME_RE = re.compile(r"^(?:mlx[0-9]_[A-Za-z0-9_]{1,40}|[a-z][A-Za-z0-9_.-]{0,40}_[0-9]{1,4})$", re.ASCII)
_ANSI_RE = re.compile(r"\x1b\[[0-9;]{0,12}m", re.ASCII)
_LEGEND_RE = re.compile(r"^\s*(NIC[0-9]{1,3}):\s*([A-Za-z0-9_.-]{1,64})\s*$", re.ASCII)


@dataclass(frozen=True, kw_only=True)
class Topology:
    """GPU rows × NIC columns of ``nvidia-smi topo -m``: ``paths[g][k]`` is GPU *g*'s path to ``nics[k]``."""

    gpus: tuple[int, ...]
    nics: tuple[str, ...]  # RDMA device names (mlx5_0) once the NIC Legend is read
    paths: tuple[tuple[str, ...], ...]


def parse_topo(text: str, *, source: str = "nvidia-smi topo -m") -> Topology | None:
    """The matrix, or None where :data:`TOPO_COMMAND` said there is none. Columns are ``NIC<k>`` named by
    the "NIC Legend" (recent drivers; a capture without any legend keeps ``NIC<k>``) or the device names
    themselves (older drivers). A cut or
    foreign capture is a :class:`ParseError` naming the field: no header, a GPU row with fewer cells than
    columns, a cell that is no topology path, a ``NIC<k>`` the legend does not name."""
    lines = [_ANSI_RE.sub("", ln).rstrip() for ln in text.splitlines()]  # the header is underlined
    if any(ln.startswith("# no nvidia-smi") or ln.startswith("# nvidia-smi topo -m failed") for ln in lines):
        return None
    header_at = next(
        (i for i, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"] and ln[:1].isspace()), None
    )
    if header_at is None:
        raise ParseError(f"{source}: no matrix header (a line of GPU0 … columns)", field="topo header")
    columns = lines[header_at].split()
    nic_at = [i for i, c in enumerate(columns) if _NICK_RE.match(c) or _NIC_NAME_RE.match(c)]
    legend = {m.group(1): m.group(2) for ln in lines if (m := _LEGEND_RE.match(ln))}
    names = []
    for i in nic_at:
        name = columns[i]
        if _NICK_RE.match(name) and legend:  # no legend at all (a quote that left it out): NIC<k> stays
            if name not in legend:
                raise ParseError(
                    f"{source}: NIC column {name} has no line in the NIC Legend (a cut capture?)",
                    field="NIC Legend",
                )
            name = legend[name]
        names.append(name)
    gpus: list[int] = []
    paths: list[tuple[str, ...]] = []
    for ln in lines[header_at + 1 :]:
        cells = ln.split()
        m = _GPU_RE.match(cells[0]) if cells else None
        if m is None:
            if cells and (cells[0].startswith("NIC") or cells[0].startswith("mlx") or cells[0] == "Legend:"):
                break  # the NIC rows and the legend follow the GPU rows
            continue
        gpu = m.group(1)
        if nic_at and len(cells) < nic_at[-1] + 2:
            raise ParseError(
                f"{source}: GPU{gpu} row has {len(cells) - 1} cells, {len(columns)} columns (a cut capture?)",
                field=f"GPU{gpu} row",
            )
        row = tuple(cells[i + 1] for i in nic_at)
        for col, cell in zip(names, row, strict=True):
            if cell not in _PATHS and not _NV_RE.match(cell):
                raise ParseError(
                    f"{source}: GPU{gpu} to {col}: {cell[:20]!r} is no topology path "
                    f"({'/'.join(_PATHS)} or NV<n>)",
                    field=f"GPU{gpu} {col}",
                )
        gpus.append(int(gpu))
        paths.append(row)
    if not gpus:
        raise ParseError(f"{source}: a header but no GPU row (a cut capture?)", field="GPU rows")
    return Topology(gpus=tuple(gpus), nics=tuple(names), paths=tuple(paths))


def topo_skip_reason(text: str) -> str:
    """Why :data:`TOPO_COMMAND` printed no matrix (for a report's "not checked")."""
    if "# no nvidia-smi" in text:
        return "no nvidia-smi on the node"
    said = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")), "")
    return f"nvidia-smi topo -m failed: {said[:160] or 'it said nothing'}"


def _rank(path: str) -> int:
    return 0 if _NV_RE.match(path) else _PATHS.index(path)


def judge_affinity(node: str, topo: Topology) -> list[Finding]:
    """With GPUDirect RDMA declared, each GPU needs a NIC at PIX or PXB (one PCIe switch tree). A GPU whose
    nearest NIC is PHB, NODE or SYS fails naming the GPU index and that NIC: NCCL's default GDR level (PXB)
    sends its network traffic through host memory, so the GPUDirect promise is not kept for it. No NIC in
    the matrix at all fails once, naming the node."""
    if not topo.nics:
        return [
            Finding(
                subject=node,
                kind="no nic in topology",
                message=f"{node}: nvidia-smi topo -m shows no NIC next to the {len(topo.gpus)} GPU(s)",
                fix="the RDMA NICs are not visible to the driver here (not passed into the container/VM?)",
            )
        ]
    out = []
    for gpu, row in zip(topo.gpus, topo.paths, strict=True):
        best = min(range(len(row)), key=lambda k: _rank(row[k]))
        if row[best] in GDR_PATHS or _NV_RE.match(row[best]):
            continue
        out.append(
            Finding(
                subject=f"{node} GPU{gpu}",
                kind="nic far from gpu",
                message=f"{node} GPU{gpu}: nearest NIC {topo.nics[best]} is {row[best]} (PIX or PXB needed "
                "for GPUDirect RDMA)",
                fix="NCCL will stage this GPU's network traffic through host memory; ask for a host whose "
                "GPUs each share a PCIe switch with a NIC (or raise NCCL_NET_GDR_LEVEL knowingly)",
            )
        )
    return out
