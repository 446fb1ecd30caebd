"""NVIDIA's table of released products across driver release tags: every board's first driver.

NVIDIA/open-gpu-kernel-modules holds, at every release tag from 515.43.04 on, ``src/nvidia/generated/
g_nv_name_released.h``: the driver's table of released products (PCI device id, subsystem id and vendor → the
name nvidia-smi prints). A board's first driver is the first release tag whose table names it. This module
reads a local clone of that repository with git (``refresh-compat --boards DIR``), derives the rows of
imagesmith/data/driver_table.toml and diffs them against the committed ones. Only derived facts are kept:
the board's name, its PCI ids, the first tag naming it and the tag before it.

Tags out of order are skipped: a tag published after a higher-numbered line of its own branch had come out
(the Vulkan developer-beta lines 525.47.x, 535.43.x, 550.40.x, 570.123.x, 580.94.x …, built from later source
than their number says, and late respins of an older line). A tag's version then says nothing about what its
table knows, so it is never a board's first driver; the next in-order tag that names the board is.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from imagesmith.errors import ConfigError

REPOSITORY = "NVIDIA/open-gpu-kernel-modules"
HEADER_PATH = "src/nvidia/generated/g_nv_name_released.h"
#: the first release tag of the repository: a board it already names may be older, so its first listing there
#: is no first driver (such boards keep their documented floors)
BASE_TAG = "515.43.04"
DATA_NAME = "driver_table.toml"

_TAG = re.compile(r"^[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?$", re.ASCII)
_ARRAY = re.compile(r"sChipsReleased\s*\[\s*\]\s*=\s*\{(?P<body>.*?)\n\s*\}\s*;", re.DOTALL)
_ENTRY = re.compile(
    r'\{\s*0x(?P<dev>[0-9A-Fa-f]{4}),\s*0x(?P<sub>[0-9A-Fa-f]{4}),\s*0x(?P<ven>[0-9A-Fa-f]{4}),\s*"(?P<name>[^"]*)"\s*\}',
    re.ASCII,
)
# names in the table that are not a board a renter's nvidia-smi prints: vGPU profiles ("NVIDIA H100-80C",
# "GRID A100-4-20C", "NVIDIA RTX 6000 Ada-12Q"), placeholders ("NVIDIA GPU 27B8-172F", "(null)"), notebook,
# embedded, automotive and mining parts
_PROFILE = re.compile(r"-[0-9]+(?:-[0-9]+)?(?:[ABCQ][0-9]?|CME)?$", re.ASCII)
_NOT_A_BOARD = re.compile(
    r"^GRID |^NVIDIA GPU[- ]|\(null\)|Laptop|Embedded|Mobile|with Max-Q|\bMX[0-9]|\bCMP\b|DRIVE|Jetson|"
    r"Graphics Device",
    re.ASCII,
)

Segment = Literal["datacenter", "workstation", "consumer"]


@dataclass(frozen=True)
class Entry:
    device: int
    subsystem: int
    name: str

    @property
    def pci_id(self) -> str:
        """``27b8:16ca`` (device:subsystem; subsystem ``0000``: any board of that device id)."""
        return f"{self.device:04x}:{self.subsystem:04x}"


@dataclass(frozen=True)
class Release:
    tag: str
    #: the tagged commit's committer time (seconds since the epoch): the order releases came out in
    time: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Board:
    """One row of driver_table.toml."""

    name: str
    segment: Segment
    pci_ids: tuple[str, ...]
    first_driver: str
    #: the in-order tag just before ``first_driver`` (its table does not name the board)
    previous_driver: str
    #: in-order tags after ``first_driver`` (up to the last naming it) whose table holds none of its PCI ids
    absent_from: tuple[str, ...] = ()
    #: the last tag holding its PCI ids, where the newest tag read no longer does ("" = still listed)
    last_driver: str = ""
    #: the board's device id was already in the first tag's table (under another name): its first listing is
    #: then no first driver
    predates_table: bool = False

    @property
    def source(self) -> str:
        before = f"; absent from {self.previous_driver}" if self.previous_driver else ""
        older = (
            f"; its device id is already in {BASE_TAG}'s table, so this is when the name was added, not the "
            "board's first driver"
            if self.predates_table
            else ""
        )
        holes = f"; not in {', '.join(self.absent_from)} either" if self.absent_from else ""
        gone = f"; no longer listed after {self.last_driver}" if self.last_driver else ""
        return (
            f"{REPOSITORY} tag {self.first_driver}, {HEADER_PATH}: the first in-order release tag whose "
            f"table holds its PCI ids{before}{holes}{gone}{older}"
        )


@dataclass(frozen=True)
class Table:
    """Everything derived from a clone: the rows, and which tags were read and skipped."""

    boards: tuple[Board, ...]
    tags_read: tuple[str, ...]
    tags_skipped: tuple[str, ...]


def version_key(tag: str) -> tuple[int, ...]:
    return tuple(int(p) for p in tag.split("."))


def parse_header(text: str, *, where: str) -> tuple[Entry, ...]:
    """The entries of the ``sChipsReleased`` array in a g_nv_name_released.h *text*."""
    m = _ARRAY.search(text)
    if m is None:
        raise ConfigError(
            f"{where}: no sChipsReleased[] table in it",
            hint=f"give a clone of {REPOSITORY} (git clone https://github.com/{REPOSITORY})",
            file=where,
        )
    return tuple(
        Entry(device=int(e["dev"], 16), subsystem=int(e["sub"], 16), name=e["name"])
        for e in _ENTRY.finditer(m.group("body"))
    )


def out_of_order(releases: Sequence[Release]) -> frozenset[str]:
    """Tags published after a higher-numbered line (branch.minor) of their branch had come out, in lines of
    two tags or more (a one-tag line such as 520.56.06 is a release of its own)."""
    lines: dict[tuple[int, int], list[Release]] = {}
    for r in releases:
        v = version_key(r.tag)
        lines.setdefault((v[0], v[1]), []).append(r)
    skip: set[str] = set()
    for (branch, minor), members in lines.items():
        higher = [m[0].time for (b, n), m in lines.items() if b == branch and n > minor]
        if len(members) < 2 or not higher:
            continue
        first_higher = min(higher)
        skip.update(r.tag for r in members if r.time > first_higher)
    return frozenset(skip)


def is_board(name: str) -> bool:
    return bool(name.strip()) and not _NOT_A_BOARD.search(name) and not _PROFILE.search(name)


def segment_of(name: str) -> Segment:
    """By name only (the table has no segment): GeForce/TITAN consumer, RTX/Quadro/T-series workstation boards
    except Server Editions, everything else data center."""
    if re.search(r"GeForce|TITAN", name):
        return "consumer"
    if "Server Edition" not in name and re.search(r"^(?:NVIDIA )?(?:RTX|Quadro|T[0-9]{3,4}\b)", name):
        return "workstation"
    return "datacenter"


def derive(releases: Sequence[Release], also: Iterable[str] = ()) -> Table:
    """Every board named after :data:`BASE_TAG` (and every name in *also* the table holds), with its first
    in-order tag."""
    ordered = sorted(releases, key=lambda r: version_key(r.tag))
    if not ordered or ordered[0].tag != BASE_TAG:
        lowest = ordered[0].tag if ordered else "none"
        raise ConfigError(
            f"the clone's first release tag is {lowest}, not {BASE_TAG}: not a full clone of {REPOSITORY}",
            hint=f"clone it with its tags: git clone https://github.com/{REPOSITORY}",
        )
    skipped = out_of_order(ordered)
    kept = [r for r in ordered if r.tag not in skipped]
    base_devices = {e.device for e in kept[0].entries}
    base_names = {e.name for e in kept[0].entries}
    wanted = set(also)
    ids: dict[str, set[tuple[int, int]]] = {}
    for r in kept:
        for e in r.entries:
            ids.setdefault(e.name, set()).add((e.device, e.subsystem))
    held = [{(e.device, e.subsystem) for e in r.entries} for r in kept]
    boards = []
    for name in sorted(ids):
        if name in base_names or not (is_board(name) or name in wanted):
            continue
        mine = ids[name]
        knows = [bool(mine & h) for h in held]
        first = knows.index(True)
        last = len(knows) - 1 - knows[::-1].index(True)
        boards.append(
            Board(
                name=name,
                segment=segment_of(name),
                pci_ids=tuple(sorted(f"{d:04x}:{s:04x}" for d, s in mine)),
                first_driver=kept[first].tag,
                previous_driver=kept[first - 1].tag if first else "",
                absent_from=tuple(kept[i].tag for i in range(first, last + 1) if not knows[i]),
                last_driver="" if last == len(kept) - 1 else kept[last].tag,
                predates_table=any(d in base_devices for d, _ in mine),
            )
        )
    return Table(
        boards=tuple(boards),
        tags_read=tuple(r.tag for r in ordered),
        tags_skipped=tuple(r.tag for r in ordered if r.tag in skipped),
    )


# ------------------------------------------------------------------------------------------------------------
# a clone, read with git


def _git(repo: Path, *args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", "--git-dir", str(repo), *args], capture_output=True, text=True, timeout=120, check=False
        )
    except FileNotFoundError:
        raise ConfigError("git is not installed", hint="install git (apt-get install git)") from None
    if proc.returncode != 0:
        raise ConfigError(
            f"{repo}: git {' '.join(args[:2])} failed: {proc.stderr.strip().splitlines()[-1:] or ['?']}",
            hint=f"give a clone of {REPOSITORY} with its tags (git clone https://github.com/{REPOSITORY})",
            file=str(repo),
            said=proc.stderr.strip() or None,
        )
    return proc.stdout


def git_dir(path: Path) -> Path:
    """The git directory of a clone at *path* (a work tree, or a bare/mirror git dir)."""
    if (path / ".git").exists():
        return path / ".git"
    if (path / "HEAD").is_file() and (path / "objects").is_dir():
        return path
    raise ConfigError(
        f"{path}: not a git clone",
        hint=f"give a clone of {REPOSITORY} with its tags (git clone https://github.com/{REPOSITORY})",
        file=str(path),
    )


def read_clone(path: Path) -> list[Release]:
    """Every release tag of the clone at *path* (tags like 535.104.05) with its table."""
    repo = git_dir(path)
    tags = [t for t in _git(repo, "tag", "--list").split() if _TAG.match(t)]
    if not tags:
        raise ConfigError(
            f"{path}: no release tags (515.43.04 …) in it",
            hint=f"clone it with its tags: git clone https://github.com/{REPOSITORY}",
            file=str(path),
        )
    times = {}
    for line in _git(
        repo,
        "for-each-ref",
        "--format=%(refname:short) %(*committerdate:unix) %(committerdate:unix)",
        "refs/tags",
    ).splitlines():
        parts = line.split()
        if len(parts) >= 2 and _TAG.match(parts[0]):
            times[parts[0]] = int(parts[1])
    out = []
    for tag in tags:
        text = _git(repo, "show", f"{tag}:{HEADER_PATH}")
        out.append(
            Release(tag=tag, time=times[tag], entries=parse_header(text, where=f"{tag}:{HEADER_PATH}"))
        )
    return out


# ------------------------------------------------------------------------------------------------------------
# the data file


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(items: Sequence[str], indent: str = "    ") -> str:
    if not items:
        return "[]"
    return "[\n" + "".join(f"{indent}{_q(i)},\n" for i in items) + "]"


HEADER = f"""\
# Every board's first driver, derived from NVIDIA's own table of released products: {HEADER_PATH} of
# {REPOSITORY} at every release tag (the driver's PCI id → name table; below the first tag naming a
# board, that driver's nvidia-smi cannot name it). Generated by
# `imagesmith refresh-compat --boards CLONE --write` from a clone; edit nothing here by hand (the weekly
# workflow diffs it). Only derived facts: name, PCI ids (device:subsystem, 0000 = any), the first tag whose
# table holds them, the in-order tag before it, later tags lacking them (`absent_from`).
#
# Rows: every name first listed after {BASE_TAG} that is a board (not a vGPU profile, placeholder, notebook or
# embedded part), plus the names imagesmith/data/gpus.toml uses. `predates_table = true`: the device id was
# already in {BASE_TAG}'s table under another name, so the first listing is no first driver. `segment` is
# by name only. Tags out of order (Vulkan developer betas, late respins: `tags_skipped`) are never a first
# driver.
# imagesmith.compat takes a board's floor from here (the later of this and a documented floor in gpus.toml).
"""


def render_toml(table: Table) -> str:
    out = [HEADER, "schema = 1", f"repository = {_q(REPOSITORY)}", f"path = {_q(HEADER_PATH)}"]
    out.append(f"tags_read = {_list(table.tags_read)}")
    out.append(f"tags_skipped = {_list(table.tags_skipped)}")
    for b in table.boards:
        out.append("")
        out.append("[[board]]")
        out.append(f"name = {_q(b.name)}")
        out.append(f"segment = {_q(b.segment)}")
        out.append("pci_ids = [" + ", ".join(_q(p) for p in b.pci_ids) + "]")
        out.append(f"first_driver = {_q(b.first_driver)}")
        out.append(f"previous_driver = {_q(b.previous_driver)}")
        if b.absent_from:
            out.append("absent_from = [" + ", ".join(_q(t) for t in b.absent_from) + "]")
        if b.last_driver:
            out.append(f"last_driver = {_q(b.last_driver)}")
        if b.predates_table:
            out.append("predates_table = true")
        out.append(f"source = {_q(b.source)}")
    return "\n".join(out) + "\n"


def boards_from_data(data: Mapping[str, Any]) -> Table:
    """The committed rows (the parsed driver_table.toml) as a :class:`Table`."""
    rows = data.get("board") or []
    return Table(
        boards=tuple(
            Board(
                name=r["name"],
                segment=r["segment"],
                pci_ids=tuple(r["pci_ids"]),
                first_driver=r["first_driver"],
                previous_driver=r["previous_driver"],
                absent_from=tuple(r.get("absent_from", ())),
                last_driver=str(r.get("last_driver", "")),
                predates_table=bool(r.get("predates_table", False)),
            )
            for r in rows
        ),
        tags_read=tuple(data.get("tags_read") or ()),
        tags_skipped=tuple(data.get("tags_skipped") or ()),
    )


@dataclass(frozen=True)
class Difference:
    """One field where the clone and the data disagree (``board`` = "" for the tag lists)."""

    board: str
    field: str
    data: str
    clone: str

    def to_json(self) -> dict[str, str]:
        return {"board": self.board, "field": self.field, "data": self.data, "clone": self.clone}


def compare(data: Table, clone: Table) -> list[Difference]:
    out = []
    for name in ("tags_read", "tags_skipped"):
        have, got = set(getattr(data, name)), set(getattr(clone, name))
        if have != got:
            extra = sorted(got - have, key=version_key)
            gone = sorted(have - got, key=version_key)
            out.append(
                Difference(
                    "",
                    name,
                    "only here: " + (", ".join(gone) or "-"),
                    "only there: " + (", ".join(extra) or "-"),
                )
            )
    have_b = {b.name: b for b in data.boards}
    got_b = {b.name: b for b in clone.boards}
    for name in sorted(set(have_b) | set(got_b)):
        a, b = have_b.get(name), got_b.get(name)
        if a is None or b is None:
            out.append(Difference(name, "row", "present" if a else "-", "present" if b else "-"))
            continue
        for f in (
            "first_driver",
            "previous_driver",
            "absent_from",
            "last_driver",
            "pci_ids",
            "predates_table",
            "segment",
        ):
            x, y = getattr(a, f), getattr(b, f)
            if x != y:
                fmt = (lambda v: ", ".join(v)) if f in ("pci_ids", "absent_from") else str
                out.append(Difference(name, f, fmt(x), fmt(y)))
    return out
