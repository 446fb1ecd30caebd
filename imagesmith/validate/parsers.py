"""Pure parsers for what a GPU host prints: ``nvidia-smi topo -m``, ``nvidia-smi topo -p2p n`` and nccl-tests
logs.

Every parser either returns a complete frozen result or raises :class:`imagesmith.errors.ParseError` naming
the
line that is wrong. Nothing here guesses: a truncated nccl-tests log (no footer), a row with the wrong number
of
columns or an unknown link type is an error, never a silently shorter table.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from imagesmith.errors import ParseError
from imagesmith.inputs import is_decimal, is_digits

# ----------------------------------------------------------------------------------------------------------
# -----
# nvidia-smi topo -m

#: link kinds of ``nvidia-smi topo -m`` (legend of current drivers; ``SOC`` is the old name of ``SYS``).
PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
_LINK_RE = re.compile(r"^(X|NV[1-9][0-9]*|PIX|PXB|PHB|NODE|SYS|SOC)$")
_DEVICE_RE = re.compile(r"^(GPU[0-9]+|NIC[0-9]+|mlx[0-9]+_[0-9]+)$")


@dataclass(frozen=True, kw_only=True)
class TopoMatrix:
    """The connection matrix: ``links[(a, b)]`` is the cell of row *a*, column *b* (``X``, ``NV18``, ``SYS``
    …).
    """

    devices: tuple[str, ...]
    links: dict[tuple[str, str], str]
    cpu_affinity: dict[str, str]
    numa_affinity: dict[str, str]
    gpu_numa_id: dict[str, str]
    nic_names: dict[str, str]

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if not d.startswith("GPU"))

    def gpu_pairs(self) -> list[tuple[str, str, str]]:
        """Every unordered GPU pair with its link, e.g. ``("GPU0", "GPU1", "NV18")``."""
        gpus = self.gpus
        return [(a, b, self.links[(a, b)]) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]

    @staticmethod
    def nvlink_count(link: str) -> int | None:
        """``NV18`` → 18; a PCIe path → None."""
        return int(link[2:]) if link.startswith("NV") else None


_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """nvidia-smi 580 underlines the header of `topo -m`/`topo -p2p` with ANSI escapes even into a pipe."""
    return _ANSI_RE.sub("", text)


def _split_cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("\t")]


def parse_topo_matrix(text: str, *, source: str = "nvidia-smi topo -m") -> TopoMatrix:
    """Parse ``nvidia-smi topo -m``. Columns: GPUs, NICs, then ``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA
    ID``.
    """
    lines = strip_ansi(text).splitlines()
    header_idx = next(
        (i for i, ln in enumerate(lines) if "GPU0" in _split_cells(ln) and _split_cells(ln)[0] == ""),
        None,
    )
    if header_idx is None:
        raise ParseError(
            f"{source}: no header row with a GPU0 column — this is not `nvidia-smi topo -m` output",
            hint="run `nvidia-smi topo -m` on the host; if it prints an error, the driver is not working",
        )
    header = [c for c in _split_cells(lines[header_idx]) if c]
    devices = tuple(c for c in header if _DEVICE_RE.match(c))
    extras = [c for c in header if not _DEVICE_RE.match(c)]
    if not devices or header[: len(devices)] != list(devices):
        raise ParseError(
            f"{source}: header row {header_idx + 1} has no device columns first: {lines[header_idx]!r}"
        )
    links: dict[tuple[str, str], str] = {}
    extra_values: dict[str, dict[str, str]] = {e: {} for e in extras}
    seen_rows: list[str] = []
    for n, line in enumerate(lines[header_idx + 1 :], start=header_idx + 2):
        if not line.strip():
            if seen_rows:
                break
            continue
        cells = _split_cells(line)
        name = cells[0]
        if not _DEVICE_RE.match(name):
            if name.startswith("Legend"):
                break
            raise ParseError(f"{source}: line {n} is not a matrix row: {line!r}")
        values = [c for c in cells[1:] if c]
        if len(values) < len(devices):
            raise ParseError(
                f"{source}: line {n} ({name}) has {len(values)} cells, expected at least {len(devices)}: "
                f"{line!r}"
            )
        for col, cell in zip(devices, values[: len(devices)], strict=True):
            if not _LINK_RE.match(cell):
                raise ParseError(f"{source}: line {n}: unknown link type {cell!r} between {name} and {col}")
            links[(name, col)] = cell
        if name.startswith("GPU"):
            rest = values[len(devices) :]
            for key, value in zip(extras, rest, strict=False):
                extra_values[key][name] = value
        seen_rows.append(name)
    missing = [d for d in devices if d not in seen_rows]
    if missing:
        raise ParseError(f"{source}: matrix rows missing for {', '.join(missing)} (output truncated?)")
    for a in devices:
        if links[(a, a)] != "X":
            raise ParseError(f"{source}: the diagonal cell of {a} is {links[(a, a)]!r}, expected 'X'")
    # a path is the same both ways: a matrix that disagrees with itself is garbled (the weakest link is read
    # from one half of it)
    for i, a in enumerate(devices):
        for b in devices[i + 1 :]:
            if links[(a, b)] != links[(b, a)]:
                raise ParseError(
                    f"{source}: {a}→{b} is {links[(a, b)]!r} but {b}→{a} is {links[(b, a)]!r}: the matrix "
                    "is not symmetric (garbled output)",
                    hint="run `nvidia-smi topo -m` on the host again; a matrix that disagrees with itself "
                    "cannot say which link joins the GPUs",
                )
    nic_names: dict[str, str] = {}
    for line in lines:
        m = re.match(r"^\s*(NIC[0-9]+):\s*(\S+)\s*$", line)
        if m:
            nic_names[m.group(1)] = m.group(2)
    return TopoMatrix(
        devices=devices,
        links=links,
        cpu_affinity=extra_values.get("CPU Affinity", {}),
        numa_affinity=extra_values.get("NUMA Affinity", {}),
        gpu_numa_id=extra_values.get("GPU NUMA ID", {}),
        nic_names=nic_names,
    )


# ----------------------------------------------------------------------------------------------------------
# -----
# nvidia-smi topo -p2p <r|w|n|a|p>

P2P_STATUS = {
    "X": "self",
    "OK": "status ok",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DR": "disabled by regkey",
    "U": "unknown",
}


@dataclass(frozen=True, kw_only=True)
class P2PMatrix:
    gpus: tuple[str, ...]
    status: dict[tuple[str, str], str]

    def not_ok(self) -> list[tuple[str, str, str]]:
        return [(a, b, s) for (a, b), s in sorted(self.status.items()) if a != b and s != "OK"]


def parse_topo_p2p(text: str, *, source: str = "nvidia-smi topo -p2p n") -> P2PMatrix:
    lines = strip_ansi(text).splitlines()
    header_idx = next(
        (
            i
            for i, ln in enumerate(lines)
            if ln.split() and all(re.match(r"^GPU[0-9]+$", t) for t in ln.split())
        ),
        None,
    )
    if header_idx is None:
        raise ParseError(
            f"{source}: no header row of GPU columns — this is not `nvidia-smi topo -p2p` output"
        )
    gpus = tuple(lines[header_idx].split())
    status: dict[tuple[str, str], str] = {}
    rows: list[str] = []
    for n, line in enumerate(lines[header_idx + 1 :], start=header_idx + 2):
        parts = line.split()
        if not parts:
            if rows:
                break
            continue
        if parts[0] == "Legend:":
            break
        if not re.match(r"^GPU[0-9]+$", parts[0]):
            raise ParseError(f"{source}: line {n} is not a matrix row: {line!r}")
        if len(parts) != len(gpus) + 1:
            raise ParseError(
                f"{source}: line {n} ({parts[0]}) has {len(parts) - 1} cells, expected {len(gpus)}"
            )
        for col, cell in zip(gpus, parts[1:], strict=True):
            if cell not in P2P_STATUS:
                raise ParseError(
                    f"{source}: line {n}: unknown P2P status {cell!r} between {parts[0]} and {col}"
                )
            status[(parts[0], col)] = cell
        rows.append(parts[0])
    if sorted(rows) != sorted(gpus):
        raise ParseError(f"{source}: expected rows for {', '.join(gpus)}, found {', '.join(rows) or 'none'}")
    return P2PMatrix(gpus=gpus, status=status)


# ----------------------------------------------------------------------------------------------------------
# -----
# nccl-tests (all_reduce_perf and friends)


@dataclass(frozen=True, kw_only=True)
class NcclRow:
    size: int
    count: int
    type: str
    redop: str
    time_oop_us: float
    algbw_oop: float
    busbw_oop: float
    wrong_oop: int | None
    time_ip_us: float
    algbw_ip: float
    busbw_ip: float
    wrong_ip: int | None

    @property
    def busbw(self) -> float:
        """The better of out-of-place and in-place bus bandwidth (GB/s), as nccl-tests averages both."""
        return max(self.busbw_oop, self.busbw_ip)


@dataclass(frozen=True, kw_only=True)
class NcclResult:
    collective: str | None
    tests_version: str | None
    nccl_library: int | None
    nccl_headers: int | None
    n_gpus: int | None
    devices: tuple[str, ...]
    rows: tuple[NcclRow, ...]
    oob_count: int
    oob_ok: bool
    avg_busbw: float
    warnings: tuple[str, ...]
    failures: tuple[str, ...]

    def wrong_rows(self) -> list[NcclRow]:
        return [r for r in self.rows if (r.wrong_oop or 0) != 0 or (r.wrong_ip or 0) != 0]

    @property
    def max_size_busbw(self) -> float:
        return self.rows[-1].busbw


_NUM = r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*([0-9]+)\s*(OK|FAILED)\s*$")
_AVG_RE = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*({_NUM})\s*(OK|FAILED)?\s*$")
_VERSION_RE = re.compile(
    r"^#\s*nccl-tests version (\S+)(?: nccl-headers=([0-9]+))?(?: nccl-library=([0-9]+))?"
)
_START_RE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_NGPUS_RE = re.compile(r"^#\s*nThread\s+[0-9]+\s+nGpus\s+([0-9]+)")
_RANK_RE = re.compile(
    r"^#\s+Rank\s+[0-9]+\s+Group\s+[0-9]+\s+Pid\s+[0-9]+\s+on\s+\S+\s+device\s+[0-9]+\s+\[[^\]]*\]\s+(.+?)\s*$"
)
_COLUMNS_RE = re.compile(r"^#\s+size\s+count\s+type\s+redop")


def _wrong(value: str, line_no: int, source: str) -> int | None:
    if value == "N/A":
        return None
    if not is_digits(value):
        raise ParseError(f"{source}: line {line_no}: #wrong column is {value!r}, expected a count or N/A")
    return int(value)


def _float(value: str, what: str, line_no: int, source: str) -> float:
    lowered = value.strip().lower()
    if not is_decimal(value) and lowered.lstrip("+-") not in ("nan", "inf", "infinity"):
        raise ParseError(f"{source}: line {line_no}: {what} is {value!r}, not a number")
    number = float(lowered)
    if not math.isfinite(number) or number < 0:
        # nccl-tests prints nan/inf when a timing went wrong (a crashed or preempted collective): a
        # bandwidth that cannot be compared must never pass a floor
        raise ParseError(
            f"{source}: line {line_no}: {what} is {value!r}, not a measured figure",
            hint="the collective's timing is broken (a crash, an overflow or a stalled GPU): rerun "
            "all_reduce_perf by hand and read dmesg for Xid errors",
        )
    return number


def parse_nccl_log(text: str, *, source: str = "nccl-tests log") -> NcclResult:
    """Parse one nccl-tests run. A log without the column header, the rows or the footer raises."""
    collective = version = None
    nccl_library = nccl_headers = n_gpus = None
    devices: list[str] = []
    rows: list[NcclRow] = []
    warnings: list[str] = []
    failures: list[str] = []
    oob: tuple[int, bool] | None = None
    avg: float | None = None
    in_table = False
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if "NCCL WARN" in line:
            warnings.append(line.strip())
            continue
        if (
            "Test NCCL failure" in line
            or "Test CUDA failure" in line
            or "Test failure" in line
            or "Invalid number of GPUs" in line
        ):
            failures.append(line.strip())
            continue
        if line.lstrip().startswith("#"):
            if m := _VERSION_RE.match(line):
                version = m.group(1)
                nccl_headers = int(m.group(2)) if m.group(2) else None
                nccl_library = int(m.group(3)) if m.group(3) else None
            elif m := _START_RE.match(line):
                collective = m.group(1)
            elif m := _NGPUS_RE.match(line):
                n_gpus = int(m.group(1))
            elif m := _RANK_RE.match(line):
                devices.append(m.group(1))
            elif _COLUMNS_RE.match(line):
                in_table = True
            elif m := _OOB_RE.match(line):
                oob = (int(m.group(1)), m.group(2) == "OK")
                in_table = False
            elif m := _AVG_RE.match(line):
                avg = float(m.group(1))
            continue
        if " NCCL INFO " in line or line.startswith("NCCL "):
            continue
        if not in_table:
            # Programs print things before the table (e.g. CUDA/NCCL banners); after the footer
            # nothing may follow
            if oob is not None:
                raise ParseError(f"{source}: line {n}: unexpected text after the footer: {line!r}")
            continue
        parts = line.split()
        if len(parts) != 13:
            raise ParseError(
                f"{source}: line {n}: a data row has {len(parts)} columns, expected 13 "
                f"(size count type redop root time algbw busbw #wrong time algbw busbw #wrong): {line!r}",
                hint="the log is corrupted or was written by an unknown nccl-tests version; rerun the test",
            )
        if not is_digits(parts[0]) or not is_digits(parts[1]):
            raise ParseError(f"{source}: line {n}: size/count are not integers: {line!r}")
        row = NcclRow(
            size=int(parts[0]),
            count=int(parts[1]),
            type=parts[2],
            redop=parts[3],
            time_oop_us=_float(parts[5], "time", n, source),
            algbw_oop=_float(parts[6], "algbw", n, source),
            busbw_oop=_float(parts[7], "busbw", n, source),
            wrong_oop=_wrong(parts[8], n, source),
            time_ip_us=_float(parts[9], "time", n, source),
            algbw_ip=_float(parts[10], "algbw", n, source),
            busbw_ip=_float(parts[11], "busbw", n, source),
            wrong_ip=_wrong(parts[12], n, source),
        )
        if rows and row.size <= rows[-1].size:
            raise ParseError(f"{source}: line {n}: size {row.size} does not grow after {rows[-1].size}")
        rows.append(row)
    if failures:
        low = failures[0].lower()
        if "out of memory" in low:
            hint = (
                "the GPUs had no room for the test's buffers: another process holds their memory "
                "(nvidia-smi lists it): stop it, or ask for a machine whose GPUs are free"
            )
        elif "invalid number of gpus" in low or "no cuda-capable device" in low or "invalid device" in low:
            hint = (
                "the test could not see every GPU nvidia-smi lists: unset CUDA_VISIBLE_DEVICES (or "
                "NVIDIA_VISIBLE_DEVICES in a container) so that all of them are visible"
            )
        else:
            hint = "read the NCCL/CUDA error in the log; run with NCCL_DEBUG=INFO for the cause"
        raise ParseError(f"{source}: the test aborted: {failures[0]}", hint=hint)
    if not rows:
        raise ParseError(
            f"{source}: no result rows — the log is truncated or the test never ran",
            hint="look at the end of the raw log for the error; rerun all_reduce_perf by hand",
        )
    if oob is None or avg is None:
        raise ParseError(
            f"{source}: the footer ('# Out of bounds values' and '# Avg bus bandwidth') is missing after "
            f"{len(rows)} rows — the run was cut short (crash, timeout, killed) or the log is truncated",
            hint="rerun the test; if it stops at the same size, that size hangs or crashes",
        )
    return NcclResult(
        collective=collective,
        tests_version=version,
        nccl_library=nccl_library,
        nccl_headers=nccl_headers,
        n_gpus=n_gpus,
        devices=tuple(devices),
        rows=tuple(rows),
        oob_count=oob[0],
        oob_ok=oob[1],
        avg_busbw=avg,
        warnings=tuple(warnings),
        failures=tuple(failures),
    )


# ----------------------------------------------------------------------------------------------------------
# -----
# sizes ("8g", "64m", "1073741824")

_SIZE_RE = re.compile(r"^\s*([0-9]{1,19}(?:\.[0-9]{1,9})?)\s*([kmgt]?)(i?b?)?\s*$", re.IGNORECASE | re.ASCII)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str, *, what: str = "size") -> int:
    """Docker-style sizes: ``64m``, ``8g``, ``1GiB``, bytes. Binary units, like ``docker run --shm-size``."""
    m = _SIZE_RE.match(text)
    if not m:
        from imagesmith.errors import ConfigError

        shown = text if len(text) <= 40 else f"{text[:20]}… ({len(text)} characters)"
        raise ConfigError(f"{what}: {shown!r} is not a size", hint="write it like 64m, 8g or 1073741824")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_bytes(n: int) -> str:
    for unit, div in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= div:
            return f"{n / div:.1f} {unit}" if n % div else f"{n // div} {unit}"
    return f"{n} B"


# ----------------------------------------------------------------------------------------------------------
# -----
# the kernel log: NVIDIA Xid events

#: Xid codes that mean the hardware (or the driver's hold on it) is degraded, from NVIDIA's Xid catalog: ECC
#: double-bit/uncontained errors and failed remapping (48, 63, 64, 92, 94, 95, 140), the GPU fallen off the
#: bus or needing a reset (79, 154), NVLink/C2C/NVSwitch link errors (74, 121, 144–150), GSP and
#: micro-controller failures (61, 62, 119, 120, 143). Other codes (13 graphics exception, 31 MMU fault,
#: 43 a stopped channel, 45 a killed context …) are usually an application's own error: a warning.
HARDWARE_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement / row remapping event",
    64: "ECC page retirement / row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link error",
    140: "unrecovered ECC error",
    143: "GPU initialization failure",
    144: "NVLink error",
    145: "NVLink error",
    146: "NVLink error",
    147: "NVLink error",
    148: "NVLink error",
    149: "NVLink error",
    150: "NVLink error",
    154: "GPU recovery action: reset or reboot needed",
}
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9A-Fa-f])?\)"
    r":\s*(?P<code>[0-9]+)\s*,?\s*(?P<rest>.*)$"
)


_SXID_RE = re.compile(
    r"SXid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9A-Fa-f])?\)"
    r":\s*(?P<code>[0-9]+)\s*,\s*(?P<rest>.*)$"
)


@dataclass(frozen=True, kw_only=True)
class XidEvent:
    bus: str  #: ``0000:3b:00`` as the kernel prints it
    code: int
    text: str  #: the rest of the line
    #: an NVSwitch's SXid (``nvidia-nvswitch0: SXid (PCI:…): 20034, Fatal, Link 30 …``), not a GPU's Xid
    switch: bool = False

    @property
    def hardware(self) -> bool:
        if self.switch:  # the fabric manager's words: "Fatal" errors take NVLinks down, "Non-fatal" recover
            return self.text.lower().startswith("fatal")
        return self.code in HARDWARE_XIDS

    @property
    def meaning(self) -> str:
        if self.switch:
            return "fatal NVSwitch error" if self.hardware else "non-fatal NVSwitch error"
        return HARDWARE_XIDS.get(self.code, "usually an application error")

    @property
    def label(self) -> str:
        return f"{'SXid' if self.switch else 'Xid'} {self.code} ({self.meaning})"

    def matches(self, bus_id: str | None) -> bool:
        """Whether nvidia-smi's ``00000000:3B:00.0`` is this event's GPU (the bus and device, any domain
        width)."""
        if not bus_id:
            return False
        mine = self.bus.lower().split(":")[-2:]
        theirs = bus_id.lower().split(".")[0].split(":")[-2:]
        return mine == theirs


def parse_xid(text: str) -> list[XidEvent]:
    """Every ``NVRM: Xid (PCI:0000:3b:00): 79, pid=…, GPU has fallen off the bus.`` line of a kernel log
    (dmesg or journalctl -k), and every NVSwitch ``SXid (PCI:0000:05:00.0): 20034, Fatal, …`` line; other
    lines are ignored."""
    events = []
    for line in text.splitlines():
        m = _XID_RE.search(line)
        switch = m is None
        m = m or _SXID_RE.search(line)
        if m:
            events.append(
                XidEvent(
                    bus=m.group("bus"), code=int(m.group("code")), text=m.group("rest").strip(), switch=switch
                )
            )
    return events


# ----------------------------------------------------------------------------------------------------------
# -----
# nvidia-smi nvlink -s

_NVLINK_GPU_RE = re.compile(r"^GPU (?P<index>[0-9]+): (?P<name>.+?)(?: \(UUID: [^)]*\))?\s*$")
_NVLINK_LINK_RE = re.compile(r"^\s+Link (?P<link>[0-9]+): (?P<state>.+?)\s*$")


@dataclass(frozen=True, kw_only=True)
class NvlinkState:
    index: int
    name: str
    active: tuple[int, ...]  #: links with a speed (``Link 0: 26.562 GB/s``)
    inactive: tuple[int, ...]  #: ``Link 3: <inactive>``


def parse_nvlink_status(text: str, *, source: str = "nvidia-smi nvlink -s") -> list[NvlinkState]:
    """Parse ``nvidia-smi nvlink -s``: a ``GPU i: NAME (UUID: …)`` line per GPU, then one ``Link n: …`` line
    per NVLink (a speed, or ``<inactive>``). A GPU without NVLink has no link lines; a single-GPU PCIe host
    prints nothing."""
    states: list[NvlinkState] = []
    current: tuple[int, str] | None = None
    active: list[int] = []
    inactive: list[int] = []

    def flush() -> None:
        if current is not None:
            states.append(
                NvlinkState(index=current[0], name=current[1], active=tuple(active), inactive=tuple(inactive))
            )

    for n, line in enumerate(strip_ansi(text).splitlines(), start=1):
        if not line.strip():
            continue
        if m := _NVLINK_GPU_RE.match(line):
            flush()
            current, active, inactive = (int(m.group("index")), m.group("name")), [], []
            continue
        link = _NVLINK_LINK_RE.match(line)
        if link is None or current is None:
            raise ParseError(
                f"{source}: line {n} is neither a GPU nor a link line: {line.strip()!r}",
                hint="run `nvidia-smi nvlink -s` by hand: it prints 'GPU 0: …' and '\\t Link 0: 26.562 GB/s'",
            )
        state = link.group("state").lower()
        if "inactive" in state or "down" in state or "disabled" in state:
            inactive.append(int(link.group("link")))
        elif re.search(r"[0-9]", state):
            active.append(int(link.group("link")))
        else:
            raise ParseError(f"{source}: line {n}: unknown link state {link.group('state')!r}")
    flush()
    return states
