"""What the rental promised: the listing as a file (``imagesmith validate --listing FILE``, TOML), and the
pure judgement of each promise against what the suite measured.

A listing names only what the provider promised; every key is optional::

    [gpu]
    model = "H200"            # as --expect-gpu: tokens of nvidia-smi's name, "141GB", "SXM", "PCIe"
    count = 8
    memory = "141 GB"         # per GPU; GB (10^9) or GiB (2^30)
    interconnect = "nvlink"   # or "pcie"
    mig = false
    driver = "580"            # at least this driver version
    cuda = "13.0"             # at least this CUDA version of the driver

    [host]
    vcpu = 128
    ram = "2 TiB"

    [network]
    nic_rate = "400 Gb/s"     # per NIC, bits (Gb/s, Gbps) or bytes (GB/s) per second
    fabric = "infiniband"     # infiniband, roce, ethernet

    [storage.data]
    path = "/data"
    read = "5 GB/s"           # sequential 1 MiB
    write = "2 GB/s"
    iops = 200000             # 4 KiB random read
    free = "2 TB"             # free space you need there

    [storage.checkpoint]
    path = "/ckpt"
    write = "2 GB/s"

    [price]
    per_hour = 23.92
    currency = "USD"

Units are read strictly: a size needs a byte unit (``GB``, ``GiB``; ``Gb`` is gigabits and is refused for a
size), a rate a unit per second whose ``b``/``B`` says bits or bytes (``100 Gb/s`` is 12.5 GB/s); a bare
number or a lower-case ``gb`` is refused with the reading it may have meant. ``--expect-gpu``,
``--expect-count`` and ``--expect-nvlink`` are shorthands of ``gpu.model``, ``gpu.count`` and
``gpu.interconnect = "nvlink"``: both end in the same :class:`Listing`, which the suite judges row by row
(:func:`judge_listing`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from imagesmith import inputs, schema
from imagesmith.errors import ConfigError

#: the tolerance of a measured figure against a promised one: 10 % for throughput (fio and dd vary that much
#: run to run), 5 % for RAM (the kernel keeps a few percent of it: MemTotal is below the DIMMs' size)
RATE_TOLERANCE = 0.10
RAM_TOLERANCE = 0.05
#: a GPU's memory: nvidia-smi's MiB read as GiB or as GB, whichever is closer, within 6 % (as --expect-gpu)
GPU_MEMORY_TOLERANCE = 0.06

KEPT, BROKEN, UNMEASURED = "kept", "broken", "not measured"
FOLDERS = ("data", "checkpoint")

_SIZE_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_NUM = r"([0-9]+(?:\.[0-9]+)?)"


def _listing_error(source: str, key: str, problem: str, hint: str) -> ConfigError:
    return ConfigError(f"{source}: {key}: {problem}", hint=hint, file=source, field=key, problem=problem)


def parse_size_unit(text: str, *, source: str, key: str) -> int:
    """``"141 GB"``, ``"256 GiB"``, ``"2TiB"`` → bytes. A bit unit (``Gb``), a lower-case ``gb`` or a bare
    number is refused naming *source* and *key*."""
    s = text.strip()
    m = re.fullmatch(_NUM + r"\s*([A-Za-z]+)", s)
    if m is None:
        bare = re.fullmatch(_NUM, s) is not None
        raise _listing_error(
            source,
            key,
            f"{text!r} is not a size" + (" (a bare number: no unit)" if bare else ""),
            'write a number and a byte unit, e.g. "141 GB" (10^9 bytes) or "256 GiB" (2^30 bytes)',
        )
    number, unit = float(m.group(1)), m.group(2)
    _bounded(number, 0, 1e15, source=source, key=key, what="(the number of a size)")
    if unit.upper() in _SIZE_UNITS and (unit.upper() == "B" or unit[-1] == "B"):
        # the last letter says bytes (B) or bits (b); "GiB"/"gib": only the B matters
        return int(number * _SIZE_UNITS[unit.upper()])
    if unit.upper() in _SIZE_UNITS and unit[-1] == "b" and unit[0].isupper():
        raise _listing_error(
            source,
            key,
            f"{text!r}: {unit} is bits (a lower-case b), not bytes: sizes of memory and disks are in bytes",
            f'write "{m.group(1)} {unit[:-1].upper()}B" if bytes were meant, or '
            f'"{m.group(1)} {unit[:-1].upper()}iB" for binary units',
        )
    if unit.upper() in _SIZE_UNITS:
        raise _listing_error(
            source,
            key,
            f"{text!r}: {unit!r} is neither clearly bits nor bytes",
            f'write "{m.group(1)} {unit.upper().replace("IB", "iB")}" for bytes',
        )
    raise _listing_error(
        source,
        key,
        f"{text!r}: unknown unit {unit!r}",
        "use B, KB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2)",
    )


def parse_rate(text: str, *, source: str, key: str) -> float:
    """``"5 GB/s"``, ``"100 Gb/s"``, ``"100 Gbps"``, ``"2500 MB/s"``, ``"3 GiB/s"`` → bytes per second. The
    case of the ``b`` says bits or bytes; a unit without it (``"100G"``) or a lower-case ``gb/s`` is
    refused."""
    s = text.strip()
    m = re.fullmatch(_NUM + r"\s*([KMGT]?)(i?)([bB])(?:/s|ps)", s)
    if m is None:
        hint = (
            'write a number and a unit per second: "100 Gb/s" (gigabits, as NICs are sold) or "5 GB/s" '
            "(gigabytes, as disks are)"
        )
        low = re.fullmatch(_NUM + r"\s*([kmgt]i?)(b)(?:/s|ps)", s)
        if low is not None:
            raise _listing_error(
                source,
                key,
                f"{text!r}: {low.group(2)}{low.group(3)} is neither clearly bits nor bytes",
                f'write "{low.group(1)} {low.group(2).upper()}b/s" for bits or '
                f'"{low.group(1)} {low.group(2).upper()}B/s" for bytes',
            )
        raise _listing_error(source, key, f"{text!r} is not a rate", hint)
    number, prefix, binary, b = float(m.group(1)), m.group(2), m.group(3), m.group(4)
    _bounded(number, 0, 1e15, source=source, key=key, what="(the number of a rate)")
    scale = (
        (2 ** (10 * "KMGT".index(prefix) + 10) if binary else 10 ** (3 * "KMGT".index(prefix) + 3))
        if prefix
        else 1
    )
    if binary and not prefix:
        raise _listing_error(source, key, f"{text!r} is not a rate", 'e.g. "3 GiB/s" or "5 GB/s"')
    return number * scale / (8 if b == "b" else 1)


def format_rate(bytes_per_s: float, *, bits: bool = False) -> str:
    """A rate for the report: GB/s (disks), or Gb/s for a NIC."""
    if bits:
        return f"{bytes_per_s * 8 / 1e9:.4g} Gb/s"
    return f"{bytes_per_s / 1e9:.3g} GB/s" if bytes_per_s >= 1e9 else f"{bytes_per_s / 1e6:.3g} MB/s"


def format_size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB ({n / 1e9:.0f} GB)"


@dataclass(frozen=True, kw_only=True)
class Folder:
    """A folder the listing promises (``[storage.data]``, ``[storage.checkpoint]``): rates in bytes/s."""

    path: str
    read: float | None = None
    write: float | None = None
    iops: int | None = None
    free: int | None = None


@dataclass(frozen=True, kw_only=True)
class Listing:
    """The promises of one rental. ``origin`` maps a promise's dotted key to where it came from (the listing
    file, or the ``--expect-*`` flag that is its shorthand)."""

    gpu_model: str | None = None
    gpu_count: int | None = None
    gpu_memory: int | None = None
    interconnect: str | None = None
    mig: bool | None = None
    driver: str | None = None
    cuda: str | None = None
    vcpu: int | None = None
    ram: int | None = None
    nic_rate: float | None = None
    fabric: str | None = None
    data: Folder | None = None
    checkpoint: Folder | None = None
    price_per_hour: float | None = None
    currency: str = ""
    origin: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Listing:
        values = dict(data)
        for name in FOLDERS:
            if isinstance(values.get(name), Mapping):
                values[name] = Folder(**values[name])
        values["origin"] = dict(values.get("origin") or {})
        return cls(**values)

    def folders(self) -> list[tuple[str, Folder]]:
        return [(name, f) for name, f in (("data", self.data), ("checkpoint", self.checkpoint)) if f]

    @property
    def empty(self) -> bool:
        return not self.origin


def _version_ok(text: str) -> bool:
    return re.fullmatch(r"[0-9]+(\.[0-9]+){0,3}", text) is not None


def load_listing(path: str | Path) -> Listing:
    """Read and check a listing file: one :class:`~imagesmith.errors.ConfigError` naming the file and the key
    for an unknown key, a wrong type, a unit that is not one or an impossible value."""
    source = str(path)
    raw = inputs.read_user_text(path, "--listing", hint="give the listing TOML file (docs/validation.md)")
    text = schema.check_toml_text(raw, source)
    data = inputs.loads_toml(text, source, syntax_hint="fix the listing's TOML at that line")
    schema.LISTING.check(data, source=source)
    return listing_from_data(data, source)


def _bounded(value: float, lo: float, hi: float, *, source: str, key: str, what: str) -> None:
    if not (lo <= value <= hi) or not math.isfinite(value):
        raise _listing_error(
            source, key, f"{value:g} {what} is impossible (from {lo:g} to {hi:g})", f"give the {key} promised"
        )


def listing_from_data(data: Mapping[str, Any], source: str) -> Listing:
    """The promises of a checked listing table (:data:`imagesmith.schema.LISTING`), units read and bounds
    checked."""
    out: dict[str, Any] = {}
    origin: dict[str, str] = {}
    gpu = data.get("gpu", {})
    if "model" in gpu:
        if not gpu["model"].strip():
            raise _listing_error(
                source, "gpu.model", "empty", 'name the model, e.g. "H200" or "H100 80GB SXM"'
            )
        out["gpu_model"] = gpu["model"].strip()
    if "count" in gpu:
        _bounded(gpu["count"], 1, 1024, source=source, key="gpu.count", what="GPUs")
        out["gpu_count"] = gpu["count"]
    if "memory" in gpu:
        out["gpu_memory"] = parse_size_unit(gpu["memory"], source=source, key="gpu.memory")
        _bounded(out["gpu_memory"] / 1e9, 1, 4096, source=source, key="gpu.memory", what="GB per GPU")
    if "interconnect" in gpu:
        out["interconnect"] = gpu["interconnect"]
    if "mig" in gpu:
        out["mig"] = gpu["mig"]
    for key in ("driver", "cuda"):
        if key in gpu:
            if not _version_ok(gpu[key].strip()):
                raise _listing_error(
                    source,
                    f"gpu.{key}",
                    f"{gpu[key]!r} is not a version",
                    'write the least version promised, e.g. driver = "580" or cuda = "12.8"',
                )
            out[key] = gpu[key].strip()
    host = data.get("host", {})
    if "vcpu" in host:
        _bounded(host["vcpu"], 1, 65536, source=source, key="host.vcpu", what="vCPUs")
        out["vcpu"] = host["vcpu"]
    if "ram" in host:
        out["ram"] = parse_size_unit(host["ram"], source=source, key="host.ram")
        _bounded(out["ram"] / 2**30, 1, 64 * 1024, source=source, key="host.ram", what="GiB of RAM")
    net = data.get("network", {})
    if "nic_rate" in net:
        out["nic_rate"] = parse_rate(net["nic_rate"], source=source, key="network.nic_rate")
        _bounded(
            out["nic_rate"] * 8 / 1e9, 1, 3200, source=source, key="network.nic_rate", what="Gb/s per NIC"
        )
    if "fabric" in net:
        out["fabric"] = net["fabric"]
    for name in FOLDERS:
        table = data.get("storage", {}).get(name)
        if table is None:
            continue
        key = f"storage.{name}"
        path = table["path"]
        if not path.startswith("/") or "\x00" in path or "\n" in path:
            raise _listing_error(
                source, f"{key}.path", f"{path!r} is not an absolute path", f"give the {name} folder as /path"
            )
        values: dict[str, Any] = {"path": path}
        for rate in ("read", "write"):
            if rate in table:
                values[rate] = parse_rate(table[rate], source=source, key=f"{key}.{rate}")
                _bounded(values[rate] / 1e9, 0.001, 1000, source=source, key=f"{key}.{rate}", what="GB/s")
        if "iops" in table:
            _bounded(table["iops"], 1, 100_000_000, source=source, key=f"{key}.iops", what="IOPS")
            values["iops"] = table["iops"]
        if "free" in table:
            values["free"] = parse_size_unit(table["free"], source=source, key=f"{key}.free")
        out[name] = Folder(**values)
        origin.update({f"{key}.{k}": source for k in values if k != "path"})
    price = data.get("price", {})
    if "per_hour" in price:
        _bounded(float(price["per_hour"]), 0, 1e6, source=source, key="price.per_hour", what="per hour")
        out["price_per_hour"] = float(price["per_hour"])
        out["currency"] = price.get("currency", "")
    names = {
        "gpu_model": "gpu.model",
        "gpu_count": "gpu.count",
        "gpu_memory": "gpu.memory",
        "interconnect": "gpu.interconnect",
        "mig": "gpu.mig",
        "driver": "gpu.driver",
        "cuda": "gpu.cuda",
        "vcpu": "host.vcpu",
        "ram": "host.ram",
        "nic_rate": "network.nic_rate",
        "fabric": "network.fabric",
    }
    origin.update({dotted: source for attr, dotted in names.items() if attr in out})
    return Listing(**out, origin=origin)


def with_flags(
    listing: Listing, *, expect_gpu: str | None, expect_count: int | None, expect_nvlink: bool
) -> Listing:
    """The ``--expect-*`` flags as promises of *listing*; a flag that contradicts the file is refused."""
    changes: dict[str, Any] = {}
    origin = dict(listing.origin)
    for flag, attr, key, value in (
        ("--expect-gpu", "gpu_model", "gpu.model", expect_gpu),
        ("--expect-count", "gpu_count", "gpu.count", expect_count),
        ("--expect-nvlink", "interconnect", "gpu.interconnect", "nvlink" if expect_nvlink else None),
    ):
        if value is None:
            continue
        have = getattr(listing, attr)
        if have is not None and have != value:
            raise ConfigError(
                f"{flag} {value} contradicts {key} = {have!r} of the listing {origin.get(key)}",
                hint=f"drop {flag} (the listing says it) or fix {key} in the listing",
                file=origin.get(key),
                field=key,
            )
        changes[attr] = value
        origin.setdefault(key, flag)
    return replace(listing, **changes, origin=origin)


# ------------------------------------------------------------------------------------------------- judging
@dataclass(frozen=True, kw_only=True)
class FolderMeasure:
    """What the storage check measured in a folder (bytes/s, IOPS, bytes); None where it measured nothing."""

    path: str
    read: float | None = None
    write: float | None = None
    iops: float | None = None
    free: int | None = None
    tool: str = ""


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What the suite saw, for the promises: None where it was not measured (the row says why)."""

    gpu_names: Sequence[str] | None = None
    gpu_memory_mib: Sequence[float | None] | None = None
    gpu_mismatches: Sequence[str] = ()
    weakest_link: str | None = None
    topology_seen: bool = False
    mig_modes: Sequence[str | None] | None = None
    driver: str | None = None
    driver_cuda: str | None = None
    vcpu: int | None = None
    vcpu_basis: str = ""
    ram: int | None = None
    ram_basis: str = ""
    nic_rate: float | None = None
    nic_basis: str = ""
    fabrics: Sequence[str] | None = None
    folders: Mapping[str, FolderMeasure] = field(default_factory=dict)
    why_not: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    promise: str
    promised: str
    measured: str
    verdict: str
    source: str

    def sentence(self) -> str:
        return f"{self.promise}: promised {self.promised}, measured {self.measured}"


def _vtuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", text)[:4])


#: add one row: (key, promised, measured or None, kept or None); None: not measured
_AddRow = Callable[[str, str, str | None, bool | None], None]


def judge_listing(listing: Listing, m: Measured) -> list[Row]:
    """One row per promise of *listing*: kept, broken, or not measured (with why)."""
    rows: list[Row] = []

    def row(key: str, promised: str, measured: str | None, ok: bool | None) -> None:
        if measured is None or ok is None:
            rows.append(
                Row(
                    key,
                    promised,
                    m.why_not.get(key, "not measured here"),
                    UNMEASURED,
                    listing.origin.get(key, ""),
                )
            )
        else:
            rows.append(Row(key, promised, measured, KEPT if ok else BROKEN, listing.origin.get(key, "")))

    _gpu_rows(listing, m, row)
    _host_rows(listing, m, row)
    _storage_rows(listing, m, row)
    return rows


def _gpu_rows(listing: Listing, m: Measured, row: _AddRow) -> None:
    """The GPUs' promises: model, count, memory, interconnect, MIG."""
    names = list(m.gpu_names) if m.gpu_names is not None else None
    if listing.gpu_model is not None:
        shown = ", ".join(sorted(set(names))) if names else None
        row(
            "gpu.model",
            listing.gpu_model,
            shown and (shown + ("" if not m.gpu_mismatches else " — " + "; ".join(m.gpu_mismatches[:3]))),
            None if names is None else not m.gpu_mismatches,
        )
    if listing.gpu_count is not None:
        row(
            "gpu.count",
            str(listing.gpu_count),
            None if names is None else f"{len(names)} GPU(s)",
            None if names is None else len(names) == listing.gpu_count,
        )
    if listing.gpu_memory is not None:
        mems = [x for x in (m.gpu_memory_mib or []) if x is not None]
        if not mems:
            row("gpu.memory", format_size(listing.gpu_memory), None, None)
        else:
            want = listing.gpu_memory
            worst = min(mems)
            got = worst * 2**20
            row(
                "gpu.memory",
                f"{want / 1e9:.0f} GB ({want / 2**30:.1f} GiB) per GPU",
                f"{worst:.0f} MiB ({got / 2**30:.1f} GiB, {got / 1e9:.1f} GB) on the smallest",
                got >= want * (1 - GPU_MEMORY_TOLERANCE),
            )
    if listing.interconnect is not None:
        if not m.topology_seen:
            row("gpu.interconnect", listing.interconnect, None, None)
        elif m.weakest_link is None:
            row(
                "gpu.interconnect",
                listing.interconnect,
                "one GPU: no GPU pair, so no "
                + ("NVLink" if listing.interconnect == "nvlink" else "PCIe link between GPUs"),
                listing.interconnect != "nvlink",
            )
        else:
            nv = m.weakest_link.startswith("NV")
            row(
                "gpu.interconnect",
                listing.interconnect,
                f"weakest GPU pair {m.weakest_link}",
                nv if listing.interconnect == "nvlink" else True,
            )
    if listing.mig is not None:
        modes = m.mig_modes
        if modes is None:
            row("gpu.mig", str(listing.mig).lower(), None, None)
        else:
            on = any((x or "").lower() == "enabled" for x in modes)
            row(
                "gpu.mig",
                "enabled" if listing.mig else "disabled (whole GPUs)",
                "enabled" if on else "disabled",
                on == listing.mig,
            )


def _host_rows(listing: Listing, m: Measured, row: _AddRow) -> None:
    """The host's promises: driver and CUDA (or later), vCPUs, RAM, the NIC's rate, the fabric."""
    for key, want_v, have in (
        ("gpu.driver", listing.driver, m.driver),
        ("gpu.cuda", listing.cuda, m.driver_cuda),
    ):
        if want_v is None:
            continue
        row(key, f"{want_v} or later", have, None if have is None else _vtuple(have) >= _vtuple(want_v))
    if listing.vcpu is not None:
        row(
            "host.vcpu",
            str(listing.vcpu),
            None if m.vcpu is None else f"{m.vcpu} ({m.vcpu_basis})",
            None if m.vcpu is None else m.vcpu >= listing.vcpu,
        )
    if listing.ram is not None:
        row(
            "host.ram",
            format_size(listing.ram),
            None if m.ram is None else f"{format_size(m.ram)} ({m.ram_basis})",
            None if m.ram is None else m.ram >= listing.ram * (1 - RAM_TOLERANCE),
        )
    if listing.nic_rate is not None:
        row(
            "network.nic_rate",
            format_rate(listing.nic_rate, bits=True),
            None if m.nic_rate is None else f"{format_rate(m.nic_rate, bits=True)} ({m.nic_basis})",
            None if m.nic_rate is None else m.nic_rate >= listing.nic_rate,
        )
    if listing.fabric is not None:
        fab = m.fabrics
        row(
            "network.fabric",
            listing.fabric,
            None if fab is None else (", ".join(fab) or "none found"),
            None if fab is None else listing.fabric in fab,
        )


def _storage_rows(listing: Listing, m: Measured, row: _AddRow) -> None:
    """Each listed folder's promises: sequential read and write, random-read IOPS, free space."""
    for name, folder in listing.folders():
        seen = m.folders.get(name)
        base = f"storage.{name}"
        where = f" ({folder.path})"
        for attr, what in (("read", "sequential 1 MiB read"), ("write", "sequential 1 MiB write")):
            want_r = getattr(folder, attr)
            if want_r is None:
                continue
            got_r = getattr(seen, attr) if seen else None
            row(
                f"{base}.{attr}",
                f"{format_rate(want_r)} {what}{where}",
                None if got_r is None else f"{format_rate(got_r)} ({seen.tool if seen else ''})",
                None if got_r is None else got_r >= want_r * (1 - RATE_TOLERANCE),
            )
        if folder.iops is not None:
            got_i = seen.iops if seen else None
            row(
                f"{base}.iops",
                f"{folder.iops} 4 KiB random-read IOPS{where}",
                None if got_i is None else f"{got_i:.0f} IOPS ({seen.tool if seen else ''})",
                None if got_i is None else got_i >= folder.iops * (1 - RATE_TOLERANCE),
            )
        if folder.free is not None:
            got_f = seen.free if seen else None
            row(
                f"{base}.free",
                f"{format_size(folder.free)} free{where}",
                None if got_f is None else f"{format_size(got_f)} free",
                None if got_f is None else got_f >= folder.free,
            )
