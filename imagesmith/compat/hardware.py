"""GPUs (names, families, vGPU profiles), architecture families and a wheel's arch coverage of a GPU."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

from imagesmith.compat.drivers import (
    DriverVersion,
    _branches,
    parse_driver,
)
from imagesmith.compat.tables import (
    TABLES,
    DataError,
    _field,
    _rows,
    nearest,
)
from imagesmith.compat.torchwheels import (
    _ARCH_RE,
)
from imagesmith.errors import ConfigError, Fault

# ------------------------------------------------------------------------------------------------------------
# GPUs


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """A GPU model. ``cc`` is the compute capability (``"8.0"``); ``memory_gib`` = nvidia-smi MiB / 1024."""

    key: str
    name: str
    cc: str
    memory_gib: float
    tdp_w: int | None
    smi_names: tuple[str, ...]
    source: str
    memory_mib: int = 0
    form_factor: str = ""
    segment: Literal["datacenter", "workstation", "consumer"] = "datacenter"
    family: str = ""
    #: the first driver that drives this GPU at all: the row's own ``min_driver`` where NVIDIA names one for
    #: the board, else its architecture's ``first_driver`` (``[[arch]]`` in gpus.toml); None for a model of no
    #: known architecture
    min_driver: DriverVersion | None = None
    #: where ``min_driver`` comes from ("derived: …" when inferred from the first CUDA toolkit of the arch)
    min_driver_source: str = ""
    verified: bool = True
    #: the vGPU profile name nvidia-smi printed in a vGPU guest ("GRID A100-40C"); this Gpu is then the
    #: physical model the profile slices ("" on bare metal)
    vgpu: str = ""
    #: True for a model not in gpus.toml, built from the compute capability nvidia-smi reported
    adhoc: bool = False
    #: the CPU of the hosts this GPU comes in (GH200/GB200/GB300/GB10: aarch64, so linux/arm64 images only)
    host_arch: Literal["x86_64", "aarch64"] = "x86_64"
    #: the board's row of NVIDIA's driver table (imagesmith/data/driver_table.toml), where that gives a first
    #: driver (boards new since 515.43.04); None otherwise
    board: BoardFloor | None = None
    #: the MIG profile the name came with ("MIG 1g.5gb"); this Gpu is then the parent board ("" otherwise)
    mig: str = ""

    @property
    def sm(self) -> str:
        """``sm_80`` for cc 8.0."""
        return "sm_" + self.cc.replace(".", "")


@dataclass(frozen=True, kw_only=True)
class BoardFloor:
    """A board's row of imagesmith/data/driver_table.toml: the first driver whose table of released products
    (NVIDIA's g_nv_name_released.h) holds its PCI ids, the release before it, and the later releases whose
    table does not hold them (``absent_from``)."""

    name: str
    first_driver: DriverVersion
    previous_driver: DriverVersion
    absent_from: frozenset[DriverVersion]
    last_driver: DriverVersion | None
    pci_ids: tuple[str, ...]
    source: str


@functools.cache
def board_floors() -> Mapping[str, BoardFloor]:
    """The boards of driver_table.toml that have a first driver (``predates_table`` rows left out), by
    case-folded name."""
    name = "driver_table.toml"
    out: dict[str, BoardFloor] = {}
    for row in _rows(name, "board"):
        if row.get("predates_table", False):
            continue
        board = _field(name, "board", row, "name", str)
        try:
            got = BoardFloor(
                name=board,
                first_driver=parse_driver(_field(name, "board", row, "first_driver", str)),
                previous_driver=parse_driver(_field(name, "board", row, "previous_driver", str)),
                absent_from=frozenset(parse_driver(t) for t in row.get("absent_from", ())),
                last_driver=parse_driver(row["last_driver"]) if row.get("last_driver") else None,
                pci_ids=tuple(_field(name, "board", row, "pci_ids", list)),
                source=row["source"],
            )
        except ConfigError as exc:
            raise DataError(f"imagesmith/data/{name}: board {board}: {exc.text}") from None
        twin = out.get(board.casefold())
        out[board.casefold()] = got if twin is None else _merged(twin, got)
    return MappingProxyType(out)


def _holds(b: BoardFloor, t: DriverVersion) -> bool:
    return t >= b.first_driver and t not in b.absent_from and (b.last_driver is None or t <= b.last_driver)


def _merged(a: BoardFloor, b: BoardFloor) -> BoardFloor:
    """One row for two spellings of one name that differ only in case ("RTX 5090 D v2" / "RTX 5090 D V2"):
    imagesmith matches names case-insensitively, so a release holding either holds the board."""
    first, other = (a, b) if a.first_driver <= b.first_driver else (b, a)
    last = None if a.last_driver is None or b.last_driver is None else max(a.last_driver, b.last_driver)
    absent = frozenset(
        t
        for t in _table_releases()
        if t >= first.first_driver and (last is None or t <= last) and not (_holds(a, t) or _holds(b, t))
    )
    return replace(
        first,
        absent_from=absent,
        last_driver=last,
        pci_ids=tuple(sorted({*a.pci_ids, *b.pci_ids})),
        source=f"{first.source}; as {other.name!r}: {other.source}",
    )


@functools.cache
def _table_releases() -> tuple[DriverVersion, ...]:
    """The in-order release tags driver_table.toml was derived from (read, less the skipped ones)."""
    data = TABLES.load("driver_table.toml")
    skipped = set(data.get("tags_skipped", ()))
    return tuple(sorted(parse_driver(t) for t in data.get("tags_read", ()) if t not in skipped))


def _board_of(names: Sequence[str]) -> BoardFloor | None:
    """The earliest-driven driver-table row among *names* (a GPU's name and nvidia-smi names)."""
    rows = [b for n in names if (b := board_floors().get(n.casefold())) is not None]
    return min(rows, key=lambda b: b.first_driver) if rows else None


def board_fix(g: Gpu, drv: DriverVersion) -> DriverVersion | None:
    """The first release read after *drv* whose driver table holds *g* (None without a table row)."""
    b = g.board
    if b is None:
        return None
    return next((t for t in _table_releases() if t > drv and _holds(b, t)), None)


def board_gap(g: Gpu, drv: DriverVersion) -> str | None:
    """Why NVIDIA's driver table says *drv* does not know *g* although it is past the first driver: *drv* is a
    release whose table lacks the board (``absent_from``), or a release not read whose branch has no read
    release holding it. None when the table has no such word (or no row for *g*)."""
    b = g.board
    if b is None or drv < b.first_driver or drv == g.min_driver:
        # the floor itself is never refused: a documented floor is NVIDIA naming that release for the board
        # (H100 PCIe: NVIDIA AI Enterprise's 520.61.05, a release whose table lacks it)
        return None
    if b.last_driver is not None and drv > b.last_driver:
        return None
    later = board_fix(g, drv)
    use = (
        f": use ≥ {later}"
        if later is not None and later.branch == drv.branch
        else (f": use a driver of a branch that holds it (≥ {later})" if later is not None else "")
    )
    if drv in b.absent_from:
        return f"driver {drv}'s table of released products does not hold {b.name} ({b.source}){use}"
    if drv in _table_releases():
        return None
    branch = [t for t in _table_releases() if t.branch == drv.branch and b.first_driver <= t]
    if b.last_driver is not None:
        branch = [t for t in branch if t <= b.last_driver]
    if branch and all(t in b.absent_from for t in branch):
        return (
            f"no R{drv.branch} driver whose table was read holds {b.name} "
            f"({', '.join(str(t) for t in branch)}; {b.source}){use}"
        )
    return None


@functools.cache
def gpus() -> tuple[Gpu, ...]:
    """Every GPU model in the data, in file order."""
    name = "gpus.toml"
    out = []
    seen: set[str] = set()
    for row in _rows(name, "gpu"):
        key = _field(name, "gpu", row, "key", str)
        if key in seen:
            raise DataError(f"imagesmith/data/{name}: duplicate gpu key {key}")
        seen.add(key)
        cc = _field(name, "gpu", row, "cc", str)
        if not re.match(r"^[0-9]{1,2}\.[0-9]$", cc):
            raise DataError(f"imagesmith/data/{name}: gpu {key}: cc {cc!r} is not M.m")
        mib = int(_field(name, "gpu", row, "memory_mib", int))
        segment = row.get("segment", "datacenter")
        if segment not in ("datacenter", "workstation", "consumer"):
            raise DataError(f"imagesmith/data/{name}: gpu {key}: unknown segment {segment!r}")
        md = row.get("min_driver")
        md_source = row.get("min_driver_source")
        if md is not None and (
            not isinstance(md, str) or not isinstance(md_source, str) or not md_source.strip()
        ):
            raise DataError(
                f"imagesmith/data/{name}: gpu {key}: `min_driver` needs a driver version and a "
                "`min_driver_source` saying where it comes from"
            )
        if md is None:
            arch = _arch_of(cc)
            if arch is None:
                raise DataError(
                    f"imagesmith/data/{name}: gpu {key}: no [[arch]] row covers compute capability {cc}, so "
                    "its first driver is unknown: add one (first_driver and its source) or give the row "
                    "a min_driver"
                )
            floor, md_source = arch.first_driver, f"{arch.name}: {arch.first_driver_source}"
        else:
            floor = parse_driver(md)
        board = _board_of(
            [_field(name, "gpu", row, "name", str), *_field(name, "gpu", row, "smi_names", list)]
        )
        if board is not None:
            documented = md is not None and not str(md_source).startswith("derived:")
            if documented and floor > board.first_driver:
                md_source = (
                    f"{md_source} (later than NVIDIA's driver table, which holds it from "
                    f"{board.first_driver}: {board.source}; the later one is the floor)"
                )
            else:
                was = (
                    f"; the documented floor {floor} ({md_source}) is not later"
                    if documented
                    else f"; replaces {floor}, derived from its architecture's first toolkit"
                )
                floor, md_source = board.first_driver, f"{board.source}{was}"
        host_arch = row.get("host_arch", "x86_64")
        if host_arch not in ("x86_64", "aarch64"):
            raise DataError(f"imagesmith/data/{name}: gpu {key}: unknown host_arch {host_arch!r}")
        out.append(
            Gpu(
                key=key,
                name=_field(name, "gpu", row, "name", str),
                cc=cc,
                memory_gib=round(mib / 1024, 1),
                tdp_w=row.get("tdp_w") if isinstance(row.get("tdp_w"), int) else None,
                smi_names=tuple(_field(name, "gpu", row, "smi_names", list)),
                source=row["source"],
                memory_mib=mib,
                form_factor=str(row.get("form_factor", "")),
                segment=segment,
                family=str(row.get("family", key)),
                min_driver=floor,
                min_driver_source=str(md_source),
                verified=bool(row.get("verified", True)),
                host_arch=host_arch,
                board=board,
            )
        )
    return tuple(out)


@functools.cache
def _families() -> Mapping[str, str]:
    name = "gpus.toml"
    keys = {g.key for g in gpus()}
    out = {}
    for row in _rows(name, "family"):
        fam = _field(name, "family", row, "key", str)
        default = _field(name, "family", row, "default", str)
        if default not in keys:
            raise DataError(f"imagesmith/data/{name}: family {fam}: default {default} is not a gpu key")
        out[fam] = default
    for g in gpus():
        if g.family not in out:
            guess = nearest(g.family, out)
            raise DataError(
                f"imagesmith/data/{name}: gpu {g.key}: family {g.family!r} has no [[family]] row"
                + (f" (did you mean {guess}?)" if guess else "")
                + f"; add [[family]] key = {g.family!r} with its default SKU, or name a known family"
            )
    return MappingProxyType(out)


def _alnum(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.casefold())


_BRAND_WORDS = re.compile(r"\b(nvidia|tesla|geforce)\b", re.IGNORECASE)


@functools.cache
def _name_index() -> Mapping[str, tuple[str, ...]]:
    index: dict[str, list[str]] = {}

    def add(alias: str, key: str) -> None:
        for form in {_alnum(alias), _alnum(_BRAND_WORDS.sub(" ", alias))}:
            if form and key not in index.setdefault(form, []):
                index[form].append(key)

    for g in gpus():
        add(g.key, g.key)
        add(g.name, g.key)
        for smi in g.smi_names:
            add(smi, g.key)
    return MappingProxyType({k: tuple(v) for k, v in index.items()})


def gpu_family(family: str) -> tuple[Gpu, ...]:
    """All models of a family (``a100`` → the A100 40/80 GB PCIe/SXM4 SKUs)."""
    members = tuple(g for g in gpus() if g.family == family.strip().casefold())
    if not members:
        guess = nearest(family, [f for f in _families() if f == nearest_gpu(family)]) if family else None
        raise ConfigError(
            f"unknown GPU family {family!r}" + (f" did you mean {guess}?" if guess else ""),
            hint=f"families: {', '.join(sorted(_families()))}",
            fault=Fault.UNKNOWN_GPU,
        )
    return members


def gpu_candidates(text: str) -> tuple[Gpu, ...]:
    """Every model *text* may mean: key, family key, full or truncated nvidia-smi name (any case)."""
    by_key = {g.key: g for g in gpus()}
    raw = " ".join(text.split())
    folded = raw.casefold()
    if folded in by_key:
        return (by_key[folded],)
    if folded in _families():
        return (by_key[_families()[folded]],)
    if raw.endswith(("...", "…")):
        prefix = raw.rstrip(".…").casefold()
        if not prefix:
            return ()
        return tuple(g for g in gpus() if any(s.casefold().startswith(prefix) for s in g.smi_names))
    # every row with that exact name: the H20 96 GB and 141 GB boards both print "NVIDIA H20" (memory tells)
    exact = tuple(
        g for g in gpus() if folded == g.name.casefold() or folded in (s.casefold() for s in g.smi_names)
    )
    if exact:
        return exact
    keys = _name_index().get(_alnum(raw)) or _name_index().get(_alnum(_BRAND_WORDS.sub(" ", raw))) or ()
    return tuple(by_key[k] for k in keys)


def gpu(key_or_smi_name: str, *, memory_mib: int | None = None, driver: DriverVersion | None = None) -> Gpu:
    """Resolve a key (``h100-sxm``), a family key (``a100`` → its ``default`` SKU) or a full or truncated
    nvidia-smi name, case-insensitively.

    A truncated name of nvidia-smi's default table (``NVIDIA A100-SXM...``) can fit several SKUs: *memory_mib*
    (memory.total as nvidia-smi reports it) picks the one within 3 %; SKUs left over that are of one family
    and one compute capability resolve to the family's default. Anything else still ambiguous, or unknown, is
    a :class:`ConfigError` (unknown ones name the nearest known). *driver* (the host's, from the same
    nvidia-smi output) rules out SKUs it cannot drive (a ``min_driver`` above it).
    """
    if not isinstance(key_or_smi_name, str) or not key_or_smi_name.strip():
        raise ConfigError("empty GPU name", hint="give a key such as h100-sxm or the name nvidia-smi prints")
    found = gpu_candidates(key_or_smi_name)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        if memory_mib is not None:
            # older drivers report a little less (A100 80GB: 81251 vs 81920 MiB); SKUs whose memory differs by
            # less than that (RTX 3090 24576 vs RTX 4090 24564 MiB) stay ambiguous
            close = tuple(g for g in found if abs(g.memory_mib - memory_mib) <= 0.03 * g.memory_mib)
            if len(close) == 1:
                return close[0]
            found = close or found
        if driver is not None:
            drivable = tuple(g for g in found if g.min_driver is None or g.min_driver <= driver)
            if len(drivable) == 1:
                return drivable[0]
            found = drivable or found
        families = {g.family for g in found}
        ccs = {g.cc for g in found}
        if len(families) == 1 and len(ccs) == 1:
            default = _families().get(next(iter(families)))
            chosen = [g for g in found if g.key == default]
            if chosen:
                return chosen[0]
        cut = key_or_smi_name.rstrip().endswith("...")
        raise ConfigError(
            f"GPU name {key_or_smi_name!r} is ambiguous: it fits {', '.join(g.key for g in found)}"
            + (" (nvidia-smi's narrow table of drivers up to R525 cuts names short)" if cut else ""),
            hint="save the full names and give that file: nvidia-smi --query-gpu=index,name,memory.total,"
            "driver_version --format=csv > smi.csv"
            if cut
            else "give the key, or the full name (nvidia-smi --query-gpu=name,memory.total --format=csv)",
        )
    sliced = vgpu(key_or_smi_name)
    if sliced is not None:
        return sliced
    mig = _MIG.match(" ".join(key_or_smi_name.split()))
    if mig is not None:
        parent = gpu(mig.group("parent"), driver=driver)  # a slice's memory is not the board's
        return replace(parent, mig=f"MIG {mig.group('profile')}")
    guess = nearest_gpu(key_or_smi_name)
    profile = _VGPU.match(" ".join(key_or_smi_name.split()))
    board = f" (a vGPU profile of {profile.group('board')}, not a known board)" if profile else ""
    raise ConfigError(
        f"unknown GPU {key_or_smi_name!r}{board}" + (f" did you mean {guess}?" if guess else ""),
        hint=f"known keys: {', '.join(g.key for g in gpus())} (add new models to imagesmith/data/gpus.toml)",
        fault=Fault.UNKNOWN_GPU,
    )


def gpu_or_adhoc(
    name: str,
    *,
    memory_mib: int | None = None,
    compute_cap: str | None = None,
    driver: DriverVersion | None = None,
) -> Gpu:
    """:func:`gpu`, or, for a name not in gpus.toml whose compute capability nvidia-smi reported
    (``--query-gpu=…,compute_cap``), an ad hoc model of that capability (``adhoc`` is True; treated as a
    consumer GPU: no forward compatibility is promised for it).
    """
    try:
        return gpu(name, memory_mib=memory_mib, driver=driver)
    except ConfigError:
        if compute_cap is None or not re.fullmatch(r"[0-9]{1,2}\.[0-9]", compute_cap.strip(), re.ASCII):
            raise
    newest = max((g.cc for g in gpus()), key=_parse_cc)
    if _parse_cc(compute_cap.strip())[0] > _parse_cc(newest)[0] + 1:
        raise ConfigError(
            f"GPU {name!r}: compute capability {compute_cap.strip()} as nvidia-smi reported it: no NVIDIA "
            f"architecture has it (the newest imagesmith knows is {newest}, sm_{newest.replace('.', '')})",
            hint="check the capture (nvidia-smi --query-gpu=name,compute_cap --format=csv), or give the GPU "
            "with --gpu KEY",
        )
    return Gpu(
        key=" ".join(name.split()).casefold(),
        name=" ".join(name.split()),
        cc=compute_cap.strip(),
        memory_gib=round((memory_mib or 0) / 1024, 1),
        tdp_w=None,
        smi_names=(name,),
        source="nvidia-smi compute_cap (model not in imagesmith/data/gpus.toml)",
        memory_mib=memory_mib or 0,
        segment="consumer",
        adhoc=True,
        board=_board_of([name]),
    )


# a MIG device as CUDA names it (cudaGetDeviceProperties, torch.cuda.get_device_name) and nvidia-smi -L lists
# it:
# the parent board's name, then "MIG" and the GPU instance profile ("NVIDIA A100-SXM4-40GB MIG 1g.5gb",
# "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", a compute instance of one: "... MIG 1c.3g.40gb")
_MIG = re.compile(
    r"^(?P<parent>.+?) MIG (?P<profile>(?:[0-9]+c\.)?[0-9]+g\.[0-9]+gb(?:\+[a-z0-9]+)*)$",
    re.IGNORECASE | re.ASCII,
)

# vGPU profiles as a guest's nvidia-smi names them: "GRID A100-40C", "GRID T4-16Q", "GRID A100D-80C",
# "GRID A100-4-20C" (MIG-backed: 4 compute slices, 20 GB), "NVIDIA H100XM-80C", "NVIDIA L40S-48Q",
# "GRID M60-2B4":
# physical board, an optional board-variant suffix (D, X, XM, DX, L, S: memory/form variants of one chip),
# frame buffer in GB and the profile series (A apps, B desktops, C compute, Q workstation)
_VGPU = re.compile(
    r"^(?:(?:NVIDIA|GRID|Tesla)\s+)+(?P<board>[A-Z]+[0-9]+[A-Z]*?)(?:-(?P<slices>[0-9])(?=-))?-(?P<fb>[0-9]{1,3})"
    r"(?P<series>[ABCQ])[0-9]?$",
    re.IGNORECASE,
)
_BOARD_SUFFIXES = ("XM", "DX", "D", "X", "L")


def vgpu(name: str) -> Gpu | None:
    """The physical model behind a vGPU profile name (``GRID A100-40C`` → the A100 family's default SKU,
    with ``vgpu`` set to the profile), or None when *name* is not a vGPU profile of a known model.

    Only the compute capability matters to imagesmith's verdicts: a profile resolves when the family it names
    has one compute capability.
    """
    m = _VGPU.match(" ".join(name.split()))
    if m is None:
        return None
    board = m.group("board").upper()
    tries = [board] + [board[: -len(s)] for s in _BOARD_SUFFIXES if board.endswith(s) and len(board) > len(s)]
    for attempt in tries:
        found = next((f for w in ("", "NVIDIA ", "Tesla ") if (f := gpu_candidates(w + attempt))), ())
        if not found:
            continue
        families = {g.family for g in found}
        if len(families) != 1 or len({g.cc for g in found}) != 1:
            continue
        family = next(iter(families))
        by_key = {g.key: g for g in gpus()}
        physical = by_key.get(_families().get(family, ""), found[0])
        if len({g.cc for g in gpus() if g.family == family}) != 1:
            physical = found[0]
        return replace(physical, vgpu=" ".join(name.split()))
    return None


_MODEL_TOKEN = re.compile(r"^(?P<letters>[a-z]*)(?P<digits>[0-9]+)(?P<suffix>[a-z0-9]*)$")
_SERIES_WORDS = {"rtx", "gtx", "quadro", "titan", "pro"}


def _model(text: str) -> tuple[str, str] | None:
    """(letters, digits) of the model a GPU name or key is about: "NVIDIA GeForce RTX 2080 Ti" →
    ("rtx", "2080"), "Tesla V100-SXM2-32GB" → ("v", "100"), "rtx-a6000" → ("rtxa", "6000")."""
    words = [w for w in re.split(r"[^0-9a-z]+", _BRAND_WORDS.sub(" ", text.casefold())) if w and w != "grid"]
    for i, word in enumerate(words):
        m = _MODEL_TOKEN.match(word)
        if m is None:
            continue
        series = "".join(w for w in words[:i] if w in _SERIES_WORDS)
        return series + m.group("letters"), m.group("digits")
    return None


def _digits_typo(a: str, b: str) -> bool:
    """*a* and *b* are equal or one typo apart that does not make another model number: one digit doubled or
    dropped (h1000 / h100), or two neighbours swapped (4009 / 4090). A different digit (3070 / 3090) is
    another model, not a typo."""
    if a == b:
        return True
    if abs(len(a) - len(b)) == 1:
        short, long = sorted((a, b), key=len)
        return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        i = diff[0] if len(diff) == 2 and diff[1] == diff[0] + 1 else -1
        return i >= 0 and a[i] == b[i + 1] and a[i + 1] == b[i]
    return False


def nearest_gpu(text: str) -> str | None:
    """A "did you mean" answer for an unknown GPU: a known key, name or family of the same model series and
    number (or one typo of it), the closest spelled; None rather than another model ("RTX 2080 Ti" never
    suggests "RTX 5090 D", "NVIDIA Foo" suggests nothing)."""
    wanted = _model(text)
    if wanted is None:
        return None
    choices = [g.key for g in gpus()] + [s for g in gpus() for s in g.smi_names] + list(_families())
    fitting = []
    for choice in dict.fromkeys(choices):
        got = _model(choice)
        if got is not None and got[0] == wanted[0] and _digits_typo(got[1], wanted[1]):
            fitting.append(choice)
    return nearest(text, fitting) or (
        max(fitting, key=lambda c: difflib.SequenceMatcher(None, text.casefold(), c.casefold()).ratio())
        if fitting
        else None
    )


_lookup_gpu = gpu  # verdict() has a parameter named ``gpu``


@dataclass(frozen=True, kw_only=True)
class ArchFamily:
    """GPUs of compute capability ``cc_min`` … ``cc_max`` (an ``[[arch]]`` row of gpus.toml): the first driver
    that drives them at all, and, for an architecture whose support ended, its last driver branch (R580) and
    last CUDA toolkit major (``12.x``).
    """

    name: str
    cc_min: tuple[int, int]
    cc_max: tuple[int, int]
    first_toolkit: str
    first_driver: DriverVersion
    first_driver_source: str
    source: str
    last_branch: int | None = None
    last_toolkit: str | None = None  # "12.x"

    def covers(self, cc: str) -> bool:
        return self.cc_min <= _parse_cc(cc) <= self.cc_max

    @property
    def last_cuda_major(self) -> int | None:
        """12 for ``12.x``: no CUDA toolkit of a newer major targets these GPUs."""
        return None if self.last_toolkit is None else int(self.last_toolkit.split(".")[0])


@functools.cache
def arch_families() -> tuple[ArchFamily, ...]:
    """Every GPU architecture row of ``gpus.toml`` (``[[arch]]``), Kepler … Blackwell."""
    name = "gpus.toml"
    out: list[ArchFamily] = []
    for row in _rows(name, "arch"):
        arch = _field(name, "arch", row, "name", str)
        bounds = []
        for key in ("cc_min", "cc_max"):
            cc = _field(name, "arch", row, key, str)
            if not re.match(r"^[0-9]{1,2}\.[0-9]$", cc):
                raise DataError(f"imagesmith/data/{name}: [[arch]] {arch}: {key} {cc!r} is not M.m")
            bounds.append(_parse_cc(cc))
        if bounds[0] > bounds[1]:
            raise DataError(f"imagesmith/data/{name}: [[arch]] {arch}: cc_min is above cc_max")
        if any(a.cc_min <= bounds[1] and bounds[0] <= a.cc_max for a in out):
            raise DataError(
                f"imagesmith/data/{name}: [[arch]] {arch}: its compute capabilities overlap a row above"
            )
        first_source = _field(name, "arch", row, "first_driver_source", str)
        if not first_source.strip():
            raise DataError(f"imagesmith/data/{name}: [[arch]] {arch}: empty `first_driver_source`")
        last_branch = row.get("last_branch")
        last_toolkit = row.get("last_toolkit")
        if (last_branch is None) != (last_toolkit is None) or (
            last_branch is not None
            and (not isinstance(last_branch, int) or not re.fullmatch(r"[0-9]{1,2}\.x", str(last_toolkit)))
        ):
            raise DataError(
                f"imagesmith/data/{name}: [[arch]] {arch}: `last_branch` (an integer such as 580) and "
                '`last_toolkit` ("12.x") go together'
            )
        if last_branch is not None and last_branch not in _branches():
            raise DataError(
                f"imagesmith/data/{name}: [[arch]] {arch}: last_branch {last_branch} has no [[branch]] row "
                "in imagesmith/data/cuda.toml"
            )
        out.append(
            ArchFamily(
                name=arch,
                cc_min=bounds[0],
                cc_max=bounds[1],
                first_toolkit=_field(name, "arch", row, "first_toolkit", str),
                first_driver=parse_driver(_field(name, "arch", row, "first_driver", str)),
                first_driver_source=first_source,
                source=row["source"],
                last_branch=last_branch,
                last_toolkit=last_toolkit,
            )
        )
    return tuple(out)


def _arch_of(cc: str) -> ArchFamily | None:
    try:
        return next((a for a in arch_families() if a.covers(cc)), None)
    except ConfigError:  # a compute capability that is no M.m: no architecture
        return None


def gpu_arch(g: Gpu | str) -> ArchFamily | None:
    """The architecture row of *g* (H100 → Hopper), or None for a compute capability no row covers."""
    model = g if isinstance(g, Gpu) else _lookup_gpu(g)
    return _arch_of(model.cc)


def gpu_last_branch(g: Gpu | str) -> ArchFamily | None:
    """The architecture row capping *g*'s driver branch (V100 → Volta, R580), or None."""
    arch = gpu_arch(g)
    return arch if arch is not None and arch.last_branch is not None else None


def gpu_min_driver(g: Gpu | str) -> tuple[DriverVersion, str] | None:
    """(the first driver that drives *g* at all, where that comes from): the GPU row's own ``min_driver``, or
    for a model not in the table (ad hoc, from nvidia-smi's compute_cap) its architecture's first driver."""
    model = g if isinstance(g, Gpu) else _lookup_gpu(g)
    if model.min_driver is not None:
        return model.min_driver, model.min_driver_source
    if model.board is not None:
        return model.board.first_driver, model.board.source
    arch = _arch_of(model.cc)
    if arch is None:
        return None
    return arch.first_driver, f"{arch.name}: {arch.first_driver_source}"


def gpu_warnings(g: Gpu | str) -> tuple[str, ...]:
    """Warnings about the GPU model itself: its last driver branch caps the CUDA it can ever run."""
    model = g if isinstance(g, Gpu) else _lookup_gpu(g)
    out: list[str] = []
    if model.vgpu:
        out.append(
            f"{model.vgpu} is a vGPU profile: a slice of a physical {model.name} ({model.sm}) shared through "
            "NVIDIA vGPU; judged as that GPU. The guest driver must be the one paired with the host's vGPU "
            "manager, and a slice has less memory and compute than the whole board"
        )
    if model.mig:
        out.append(
            f"{model.name} {model.mig} is a MIG device: one slice of a {model.name} ({model.sm}), judged as "
            "that GPU; a process sees one slice, with a fraction of the GPU's memory and compute, and slices "
            "have no NVLink/P2P, so multi-GPU (NCCL) training and jobs sized for the whole GPU fail or "
            "crawl — `imagesmith validate` fails test_mig on such a host; fix: ask for whole GPUs, or have "
            "the host admin disable MIG (nvidia-smi -i N -mig 0, then a GPU reset)"
        )
    if model.adhoc:
        out.append(
            f"{model.name} is not in imagesmith's GPU table (imagesmith/data/gpus.toml): judged only by the "
            f"compute capability nvidia-smi reported ({model.cc}, {model.sm}); add the model there for "
            "checked data"
        )
    arch = gpu_last_branch(model)
    if arch is not None:
        out.append(
            f"{model.name} ({arch.name}, {model.sm}): R{arch.last_branch} is NVIDIA's last driver branch for "
            f"{arch.name} GPUs and CUDA {arch.last_toolkit} their last CUDA toolkit: no newer driver or CUDA "
            "toolkit will run on it"
        )
    return tuple(out)


# ------------------------------------------------------------------------------------------------------------
# arch coverage


@dataclass(frozen=True, kw_only=True)
class ArchCoverage:
    """How a wheel's compiled architectures cover a GPU. ``kernel``: the arch used (``sm_86``,
    ``compute_120``).
    """

    kind: Literal["native", "binary-compatible", "ptx", "none"]
    detail: str
    kernel: str | None = None


def _parse_arch(entry: str) -> tuple[int, int, bool, bool]:
    match = _ARCH_RE.match(entry.strip())
    if match is None:
        raise ConfigError(
            f"{entry!r} is not a TORCH_CUDA_ARCH_LIST entry",
            hint="entries look like 8.0, 8.6 or 12.0+PTX",
        )
    major, minor, specific, ptx = match.groups()
    return int(major), int(minor), bool(specific), bool(ptx)


def _parse_cc(cc: str) -> tuple[int, int]:
    match = re.match(r"^\s*(?:sm_)?([0-9]{1,2})\.?([0-9])\s*$", cc)
    if match is None:
        raise ConfigError(f"{cc!r} is not a compute capability", hint="write it as M.m, e.g. 8.0 or 12.0")
    return int(match.group(1)), int(match.group(2))


def torch_arch_names(arch_list: Sequence[str]) -> list[str]:
    """What ``torch.cuda.get_arch_list()`` lists for a TORCH_CUDA_ARCH_LIST: ``sm_XY`` each, ``compute_XY``
    for PTX.
    """
    sms, ptx = [], []
    for entry in arch_list:
        major, minor, specific, has_ptx = _parse_arch(entry)
        sms.append(f"sm_{major}{minor}{'a' if specific else ''}")
        if has_ptx:
            ptx.append(f"compute_{major}{minor}")
    return sms + ptx


def arch_coverage(arch_list: Sequence[str], cc: str) -> ArchCoverage:
    """Coverage of a GPU of compute capability *cc* (``"8.9"``) by a wheel built for *arch_list*.

    SASS for the same M.m → native; SASS for M.n, n < m → binary-compatible (the newest such is used); PTX for
    any ≤ M.m → ptx (JIT-compiled by the driver at first start, needs a driver ≥ the wheel's toolkit); else
    none, with torch's own wording. Arch-specific targets (``9.0a``) count only for exactly that GPU.
    """
    major, minor = _parse_cc(cc)
    sm = f"sm_{major}{minor}"
    parsed = [_parse_arch(e) for e in arch_list]
    if any(m == major and n == minor for m, n, _, _ in parsed):
        return ArchCoverage(kind="native", detail=f"the wheel carries native SASS for {sm}", kernel=sm)
    lower = sorted({n for m, n, specific, _ in parsed if m == major and n < minor and not specific})
    if lower:
        used = f"sm_{major}{lower[-1]}"
        return ArchCoverage(
            kind="binary-compatible",
            detail=f"no {sm} SASS in the wheel; the GPU runs its {used} SASS "
            f"(same major {major}, lower minor: binary-compatible)",
            kernel=used,
        )
    ptx = sorted((m, n) for m, n, _, has_ptx in parsed if has_ptx and (m, n) <= (major, minor))
    if ptx:
        used = f"compute_{ptx[-1][0]}{ptx[-1][1]}"
        return ArchCoverage(
            kind="ptx",
            detail=f"no SASS usable on {sm}; the driver JIT-compiles the wheel's {used} PTX: slow first "
            "start (minutes; cached in ~/.nv/ComputeCache, raise CUDA_CACHE_MAXSIZE to keep it) and the "
            "driver must be at least as new as the wheel's CUDA toolkit",
            kernel=used,
        )
    names = " ".join(torch_arch_names(arch_list))
    return ArchCoverage(
        kind="none",
        detail=f"{sm} is not compatible with the current PyTorch installation. "
        f"The current PyTorch install supports CUDA capabilities {names}.",
    )
