"""Pure parsers for ``nvidia-smi`` output: the default table, ``--query-gpu=…
--format=csv[,noheader][,nounits]`` and ``-L``.

No I/O: callers pass the text and a ``source`` (file name or host) that every :class:`ParseError` names.

Formats handled (see tests/data/nvsmi/ for captures):

* default table, header ``| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |``, the
  R610 header ``| NVIDIA-SMI 610.43.02   KMD Version: 610.43.02   CUDA UMD Version: 13.3 |``, both the narrow
  (≤ R525, names cut to ``NVIDIA A100-SXM...``) and the wide (R530+) GPU table;
* ``--query-gpu`` CSV with the header line (field names and units are read from it) or, with ``fields=``
  given, without it; ``[N/A]`` / ``[Not Supported]`` become None;
* ``-L``: ``GPU 0: NVIDIA H200 (UUID: GPU-…)`` with optional ``MIG …`` device lines.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from imagesmith.compat import DriverVersion
from imagesmith.errors import ConfigError, Fault, ParseError
from imagesmith.inputs import is_digits, parse_int

__all__ = [
    "SmiGpu",
    "SmiReport",
    "parse",
    "parse_list",
    "parse_query_csv",
    "parse_table",
]


@dataclass(frozen=True, kw_only=True)
class SmiGpu:
    """One GPU as nvidia-smi showed it — the one type for an observed GPU (compat, pick, validation, the
    validation report). Fields a format does not show are None.

    ``name`` is exactly what was printed (``truncated`` is True for ``NVIDIA A100-SXM...``); ``memory_mib`` is
    the total memory; ``mig_mode`` is ``"Enabled"``/``"Disabled"`` where shown; ``mig_devices`` are the MIG
    profiles ``-L`` lists under the GPU.
    """

    index: int
    name: str
    truncated: bool = False
    memory_mib: int | None = None
    bus_id: str | None = None
    mig_mode: str | None = None
    uuid: str | None = None
    compute_cap: str | None = None
    mig_devices: tuple[str, ...] = ()
    # what validation also reads (nvidia-smi --query-gpu): the driver, ECC and power limits
    driver: str = ""
    ecc_mode: str | None = None
    ecc_uncorrected: int | None = None
    power_limit_w: float | None = None
    power_default_w: float | None = None
    power_max_w: float | None = None
    # memory health: pages waiting to be retired (before Ampere) / rows waiting to be remapped (Ampere on),
    # and a remapping that failed ("Yes"/"No" as nvidia-smi prints them; None where not reported)
    retired_pages_pending: str | None = None
    remapped_rows_pending: str | None = None
    remapped_rows_failure: str | None = None


@dataclass(frozen=True, kw_only=True)
class SmiReport:
    """What one nvidia-smi output says: driver, the "CUDA Version" of its header (None where not shown) and
    GPUs.
    """

    source: str
    format: Literal["table", "csv", "list"]
    driver: DriverVersion | None
    cuda_version: str | None
    gpus: tuple[SmiGpu, ...]


_DRIVER_FAIL = re.compile(r"NVIDIA-SMI has failed because (.*)", re.IGNORECASE)
_NO_DEVICES = re.compile(r"^\s*No devices were found\s*$", re.MULTILINE)

_HEADER = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD)\s+Version:\s*(?P<driver>\S+)\s+"
    r"CUDA(?:\s+UMD)?\s+Version:\s*(?P<cuda>\S+)",
    re.ASCII,
)
_ROW1 = re.compile(
    r"^\|\s*(?P<index>[0-9]+)\s+(?P<name>.+?)\s+(?P<persist>On|Off|N/A|WDDM|TCC)\s*\|\s*"
    r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+(?P<disp>On|Off|N/A)\s*\|",
    re.ASCII,
)
_MEM = re.compile(r"(?P<used>[0-9]+)\s*MiB\s*/\s*(?P<total>[0-9]+)\s*MiB", re.ASCII)
# what the memory cell shows instead of "used / total" (MIG mode on R535+ prints N/A there)
_NO_MEMORY = {"N/A", "[N/A]", "Unknown Error", "ERR!"}
_CUDA_XY = re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}$", re.ASCII)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _clean(text: str) -> str:
    """Drop what terminals and Windows editors add: ANSI escapes (nvidia-smi 580 underlines some headers even
    into a pipe), a byte-order mark, CR line ends."""
    return _ANSI.sub("", text).lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _fail(source: str, what: str, expected: str) -> ParseError:
    return ParseError(f"{source}: {what}", hint=f"expected {expected}")


#: nvidia-smi's words for a GPU it cannot reach any more (fallen off the bus, Xid 79), with the PCI address
_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_LOST_GPU = re.compile(
    rf"Unable to determine the device handle for (?:GPU|gpu)\s*(?P<bus>{_BUS})\s*:\s*(?P<why>.*)"
    rf"|GPU\s+(?P<bus2>{_BUS})\s*:\s*(?P<why2>GPU is lost.*)"
)
_NVML_FAIL = re.compile(r"Failed to initialize NVML:\s*(?P<why>.*)", re.IGNORECASE)
_LOST_HINT = (
    "that GPU has fallen off the bus or hung (dmesg shows Xid 79/Xid 154 for it): the host needs a reboot, "
    "or the GPU a replacement — ask the provider for another machine; do not train on this one"
)


def known_failure(text: str, source: str) -> ParseError | None:
    """The error nvidia-smi printed instead of (or among) its output, explained, or None: a broken driver, a
    lost GPU, NVML that does not start, no devices. Callers raise it; the validation suite fails the GPU
    checks with it."""
    lost = [m for m in _LOST_GPU.finditer(text)]
    if lost:
        where = ", ".join(
            f"{m.group('bus') or m.group('bus2')} ({(m.group('why') or m.group('why2') or '').strip()})"
            for m in lost
        )
        return ParseError(f"{source}: nvidia-smi cannot reach the GPU at {where}", hint=_LOST_HINT)
    failed = _DRIVER_FAIL.search(text)
    if failed:
        return ParseError(
            f"{source}: nvidia-smi could not talk to the driver: {failed.group(0).strip()}",
            hint="this host has no working NVIDIA driver: install or load it "
            "(nvidia-smi must work on the host)",
        )
    nvml = _NVML_FAIL.search(text)
    if nvml:
        said = nvml.group("why").strip()  # nvidia-smi's own words
        if "mismatch" in said.lower():
            hint = (
                "the NVIDIA driver was upgraded but the old kernel module is still loaded: reboot the host "
                "(or reload the nvidia kernel modules)"
            )
        elif "insufficient permissions" in said.lower():
            hint = "run it as a user that may open /dev/nvidia* (the video group, or root)"
        else:
            hint = (
                "NVML cannot reach the GPUs: in a container, the systemd cgroup driver took its device "
                "access away after a daemon-reload (restart the container; nvidia-ctk system "
                "create-dev-char-symlinks fixes it for good); on a host, reload the driver or reboot"
            )
        return ParseError(f"{source}: nvidia-smi failed: {nvml.group(0).strip()}", hint=hint)
    if _NO_DEVICES.search(text):
        return ParseError(
            f"{source}: nvidia-smi found no GPUs ('No devices were found')",
            hint="check that the GPUs are visible to this host or container "
            "(--gpus / NVIDIA_VISIBLE_DEVICES)",
            fault=Fault.NO_DEVICES,
        )
    return None


def _check_failures(text: str, source: str) -> None:
    problem = known_failure(text, source)
    if problem is not None:
        raise problem


def _int(text: str, what: str, source: str) -> int:
    """A number nvidia-smi printed (an index, MiB): ASCII digits, bounded before ``int()``."""
    try:
        return parse_int(text, f"{source}: {what}", hint="")
    except ConfigError as exc:
        raise ParseError(
            exc.message, hint="save the output of nvidia-smi again: no GPU shows such a number"
        ) from None


def _driver(value: str, source: str) -> DriverVersion:
    try:
        return DriverVersion.parse(value)
    except ConfigError:
        raise ParseError(
            f"{source}: {value!r} is not a driver version",
            hint="expected a driver version such as 535.104.05",
        ) from None


def _cuda(value: str, source: str) -> str | None:
    if value.upper() == "N/A":
        return None
    if not _CUDA_XY.match(value):
        raise _fail(
            source, f"{value!r} is not a CUDA version", "'CUDA Version: X.Y' in the nvidia-smi header"
        )
    return value


def parse_table(text: str, source: str = "<nvidia-smi>") -> SmiReport:
    """Parse the default ``nvidia-smi`` output (header + GPU table)."""
    text = _clean(text)
    _check_failures(text, source)
    header = _HEADER.search(text)
    if header is None:
        raise _fail(
            source,
            "not nvidia-smi default output: no header line",
            "a line like '| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |' "
            "(R610+: '| NVIDIA-SMI 610.43.02   KMD Version: 610.43.02   CUDA UMD Version: 13.3 |')",
        )
    headers = list(_HEADER.finditer(text))
    if len(headers) > 1:
        shown = "; ".join(
            f"line {text.count(chr(10), 0, h.start()) + 1}: driver {h.group('driver')}" for h in headers
        )
        raise ParseError(
            f"{source}: holds {len(headers)} nvidia-smi outputs ({shown}): one file is one host's output, "
            "and an image picked for the first host may not run on the others",
            hint="save each host's nvidia-smi to a file of its own and give one file per run",
        )
    driver = _driver(header.group("driver"), source)
    cuda = _cuda(header.group("cuda"), source)

    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|====")), None)
    if start is None:
        raise _fail(source, "no GPU table after the header", "the '|=====…' line that opens the GPU table")
    records: list[list[str]] = []
    current: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            current.append(line)
        elif line.startswith("+"):
            if current:
                records.append(current)
                current = []
        else:
            break
    if current:
        # every GPU's rows end with a '+----' line: rows without it are the end of a file cut short, where
        # more GPUs may have followed (an 8-GPU host read as 1)
        first = _ROW1.match(current[0])
        raise ParseError(
            f"{source}: the GPU table stops at GPU "
            f"{first.group('index') if first else '?'} without its closing '+----' line, so the output was "
            "cut short: the host may have more GPUs than this shows",
            hint="save the complete output again (nvidia-smi > FILE), then retry",
        )

    gpus: list[SmiGpu] = []
    for record in records:
        row = _ROW1.match(record[0])
        if row is None:
            raise _fail(
                source,
                f"cannot read GPU row {record[0].strip()!r}",
                "'|   0  NVIDIA H100 80GB HBM3   On  |   00000000:18:00.0 Off |   0 |'",
            )
        if len(record) < 2:
            raise _fail(
                source,
                f"GPU {row.group('index')}: the line with temperature, power and memory is missing",
                "'| N/A   33C    P0   116W /  700W |   0MiB / 143771MiB | …' under the GPU row",
            )
        cells = record[1].strip().strip("|").split("|")
        memory = _MEM.search(cells[1]) if len(cells) > 1 else None
        if memory is None and not (len(cells) > 1 and cells[1].strip() in _NO_MEMORY):
            raise _fail(
                source,
                f"GPU {row.group('index')}: no memory usage in {record[1].strip()!r}",
                "'… |   4MiB /  81559MiB | …' on the line under the GPU row",
            )
        mig = None
        if len(record) > 2:
            last = record[2].rstrip().rstrip("|").split("|")[-1].strip()
            if last in ("Enabled", "Disabled"):
                mig = last
        name = row.group("name").strip()
        index = _int(row.group("index"), f"GPU row {record[0].strip()[:60]!r}: index", source)
        gpus.append(
            SmiGpu(
                index=index,
                name=name,
                truncated=name.endswith("..."),
                memory_mib=_int(memory.group("total"), f"GPU {index}: memory total", source)
                if memory
                else None,
                bus_id=row.group("bus"),
                mig_mode=mig,
            )
        )
    if not gpus:
        raise _fail(source, "the GPU table is empty", "at least one GPU row under the '|=====…' line")
    indexes = [g.index for g in gpus]
    if len(set(indexes)) != len(indexes):
        twice = sorted({i for i in indexes if indexes.count(i) > 1})
        raise ParseError(
            f"{source}: GPU {', '.join(map(str, twice))} appears more than once in the GPU table: rows of "
            "two hosts' outputs pasted together, and an image picked for one may not run on the other",
            hint="save each host's nvidia-smi to a file of its own and give one file per run",
        )
    return SmiReport(source=source, format="table", driver=driver, cuda_version=cuda, gpus=tuple(gpus))


_FIELD_ALIASES = {
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
    "pci.bus_id": "pci.bus_id",
    "memory.total": "memory.total",
    "driver_version": "driver_version",
    "compute_cap": "compute_cap",
    "mig.mode.current": "mig.mode.current",
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
}
_MISSING = {"[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", ""}


def _field_name(header: str) -> str:
    bare = re.sub(r"\s*\[[^\]]*\]\s*$", "", header.strip())
    return _FIELD_ALIASES.get(bare, bare)


def parse_query_csv(
    text: str, source: str = "<nvidia-smi>", fields: Sequence[str] | None = None
) -> SmiReport:
    """Parse ``nvidia-smi --query-gpu=… --format=csv[,noheader][,nounits]``.

    With a header line the fields are read from it; for ``noheader`` output pass the ``--query-gpu`` field
    list as *fields*. ``name`` and ``index`` (or a row order) are required; driver comes from
    ``driver_version`` when queried.
    """
    text = _clean(text)
    _check_failures(text, source)
    rows = [
        r for r in csv.reader(io.StringIO(text.strip()), skipinitialspace=True) if any(c.strip() for c in r)
    ]
    if not rows:
        raise _fail(source, "empty output", "nvidia-smi --query-gpu=index,name,... --format=csv output")
    if fields is None:
        names = [_field_name(h) for h in rows[0]]
        if "name" not in names:
            raise _fail(
                source,
                f"not a --query-gpu CSV with a header: first line {','.join(rows[0])!r}",
                "a header like 'index, name, memory.total [MiB], driver_version' (or pass the field list for "
                "--format=csv,noheader output)",
            )
        body = rows[1:]
    else:
        names = [_field_name(f) for f in fields]
        body = rows
        if "name" not in names:
            raise _fail(source, "the field list has no 'name'", "--query-gpu fields that include name")
    if not body:
        raise _fail(source, "no GPU rows under the header", "one CSV line per GPU")

    drivers: set[str] = set()
    gpus: list[SmiGpu] = []
    for lineno, raw in enumerate(body, start=2 if fields is None else 1):
        if len(raw) != len(names):
            raise _fail(
                source,
                f"line {lineno}: {len(raw)} values for {len(names)} fields ({', '.join(names)})",
                "one value per --query-gpu field, comma-separated",
            )
        values = {k: (None if v.strip() in _MISSING else v.strip()) for k, v in zip(names, raw, strict=True)}
        name = values.get("name")
        if not name:
            raise _fail(source, f"line {lineno}: no GPU name", "a GPU name such as 'NVIDIA H100 80GB HBM3'")
        index_text = values.get("index")
        if index_text is not None and not is_digits(index_text):
            raise _fail(source, f"line {lineno}: index {index_text!r} is not a number", "0, 1, 2, …")
        index = _int(index_text, f"line {lineno}: index", source) if index_text is not None else len(gpus)
        memory = values.get("memory.total")
        memory_mib = None
        if memory is not None:
            m = re.fullmatch(r"([0-9]+)(?:\s*MiB)?", memory, re.ASCII)
            if m is None:
                raise _fail(
                    source, f"line {lineno}: memory.total {memory!r}", "'81920 MiB' or (nounits) '81920'"
                )
            memory_mib = _int(m.group(1), f"line {lineno}: memory.total", source)
        cap = values.get("compute_cap")
        if cap is not None and not re.fullmatch(r"[0-9]{1,2}\.[0-9]", cap, re.ASCII):
            raise _fail(source, f"line {lineno}: compute_cap {cap!r}", "a compute capability such as 9.0")
        if values.get("driver_version"):
            drivers.add(str(values["driver_version"]))
        gpus.append(
            SmiGpu(
                index=index,
                name=name,
                memory_mib=memory_mib,
                bus_id=values.get("pci.bus_id"),
                mig_mode=values.get("mig.mode.current"),
                uuid=values.get("uuid"),
                compute_cap=cap,
            )
        )
    if len(drivers) > 1:
        raise _fail(
            source, f"rows disagree on the driver version: {', '.join(sorted(drivers))}", "one host's output"
        )
    driver = _driver(drivers.pop(), source) if drivers else None
    return SmiReport(source=source, format="csv", driver=driver, cuda_version=None, gpus=tuple(gpus))


_LIST_GPU = re.compile(
    r"^GPU (?P<index>[0-9]+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[0-9A-Fa-f-]+)\)\s*$", re.ASCII
)
_LIST_MIG = re.compile(
    r"^\s+MIG (?P<profile>\S+)\s+Device\s+[0-9]+: \(UUID: (?P<uuid>MIG-\S+)\)\s*$", re.ASCII
)


def parse_list(text: str, source: str = "<nvidia-smi>") -> SmiReport:
    """Parse ``nvidia-smi -L``. It shows no driver or CUDA version (both None)."""
    text = _clean(text)
    _check_failures(text, source)
    gpus: list[SmiGpu] = []
    migs: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        gpu_line = _LIST_GPU.match(line)
        if gpu_line:
            if gpus and migs:
                gpus[-1] = _with_migs(gpus[-1], migs)
            migs = []
            gpus.append(
                SmiGpu(
                    index=_int(gpu_line.group("index"), f"line {lineno}: GPU index", source),
                    name=gpu_line.group("name"),
                    uuid=gpu_line.group("uuid"),
                )
            )
            continue
        mig_line = _LIST_MIG.match(line)
        if mig_line and gpus:
            migs.append(mig_line.group("profile"))
            continue
        raise _fail(
            source,
            f"line {lineno}: cannot read {line.strip()!r}",
            "nvidia-smi -L lines like 'GPU 0: NVIDIA H200 (UUID: GPU-…)'",
        )
    if gpus and migs:
        gpus[-1] = _with_migs(gpus[-1], migs)
    if not gpus:
        raise _fail(source, "no GPU lines", "nvidia-smi -L lines like 'GPU 0: NVIDIA H200 (UUID: GPU-…)'")
    return SmiReport(source=source, format="list", driver=None, cuda_version=None, gpus=tuple(gpus))


def _with_migs(g: SmiGpu, migs: list[str]) -> SmiGpu:
    return SmiGpu(
        index=g.index,
        name=g.name,
        truncated=g.truncated,
        memory_mib=g.memory_mib,
        bus_id=g.bus_id,
        mig_mode="Enabled",
        uuid=g.uuid,
        compute_cap=g.compute_cap,
        mig_devices=tuple(migs),
    )


def parse(text: str, source: str = "<nvidia-smi>") -> SmiReport:
    """Detect the format (default table, ``--query-gpu`` CSV with header, ``-L``) and parse it."""
    if isinstance(text, str):
        text = _clean(text)
    if not isinstance(text, str) or not text.strip():
        raise _fail(
            source,
            "empty",
            "the output of nvidia-smi, nvidia-smi -L or nvidia-smi --query-gpu=… --format=csv",
        )
    _check_failures(text, source)
    binary = sum(1 for c in text[:4096] if not (c.isprintable() or c in "\n\t"))
    if binary > 4:
        raise _fail(
            source,
            f"not text ({binary} control or binary characters in its first 4096): not nvidia-smi output",
            "the output of nvidia-smi saved as text (nvidia-smi > FILE)",
        )
    try:
        return _parse_detected(text, source)
    except ParseError as exc:
        first = text.strip().splitlines()[0]
        looks_like_smi = (
            "NVIDIA-SMI" in text
            or _LIST_GPU.match(first) is not None
            or "name" in (_field_name(h) for h in first.split(","))
        )
        if text.endswith("\n") or not looks_like_smi:
            raise
        # every nvidia-smi output ends with a newline: one that stops mid-line was cut short, which is
        # the likelier reason for whatever looked wrong in its last line
        raise ParseError(
            f"{exc.message} — the output ends mid-line, so it was cut short",
            hint="save the complete output again (nvidia-smi … > FILE), then retry",
        ) from None


_QUERY_TEXT = re.compile(r"^=+\s*NVSMI LOG\s*=+\s*$|^\s*Attached GPUs\s*:", re.MULTILINE)


def _parse_detected(text: str, source: str) -> SmiReport:
    if _QUERY_TEXT.search(text):
        raise _fail(
            source,
            "this is `nvidia-smi -q` text, which imagesmith does not read",
            "the default output of nvidia-smi (nvidia-smi > FILE), or nvidia-smi "
            "--query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv",
        )
    if "NVIDIA-SMI" in text:
        return parse_table(text, source)
    first = text.strip().splitlines()[0]
    if _LIST_GPU.match(first):
        return parse_list(text, source)
    if "," in first and "name" in (_field_name(h) for h in first.split(",")):
        return parse_query_csv(text, source)
    if "<nvidia_smi_log" in text or first.startswith("<?xml"):
        raise _fail(
            source,
            "this is `nvidia-smi -q -x` XML, which imagesmith does not read",
            "the default output of nvidia-smi (nvidia-smi > FILE), or nvidia-smi "
            "--query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv",
        )
    if first.count(",") >= 1 and "|" not in first and "<" not in first:
        raise _fail(
            source,
            "looks like --query-gpu CSV without its header line (--format=csv,noheader): the field "
            "order is unknown",
            "the same command with --format=csv (keep the header line), e.g. nvidia-smi "
            "--query-gpu=index,name,memory.total,driver_version --format=csv",
        )
    raise _fail(
        source,
        "not nvidia-smi output",
        "the default output of nvidia-smi, nvidia-smi -L, or nvidia-smi --query-gpu=index,name,memory.total,"
        "driver_version --format=csv (with its header line)",
    )
