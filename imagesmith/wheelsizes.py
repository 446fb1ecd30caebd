"""How big each pinned wheel is: the table the layer plan (:mod:`imagesmith.layerplan`) sizes layers with.

``<locks>/wheel-sizes.toml`` sits next to the lock files and is written by ``imagesmith lock --sizes``: for
every runtime pin of every lock, the file pip picks for that lock's CPython on ``manylinux_2_28`` x86_64 (the
platform the locks are resolved for, :data:`imagesmith.lock.PYTHON_PLATFORM`) and its ``size`` as the
package index's JSON Simple API (PEP 691/700) reports it: the compressed download, about what the wheel's
layer weighs once compressed in a registry. A pin the index does not carry (a ``+cu118`` build that only the
variant's own index serves) has no row; the plan treats it as large (its own layer) and says so.

Reading is pure. :func:`collect_sizes` reads an index through a :class:`FileLister` (``imagesmith lock
--sizes`` passes :mod:`imagesmith.refresh`'s JSON Simple API client).
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from imagesmith import atomicio, inputs
from imagesmith.errors import ConfigError, UpstreamError
from imagesmith.lock import PYTHON_PLATFORM, Lock

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

SIZES_FILE: Final[str] = "wheel-sizes.toml"
#: the newest manylinux glibc the locks resolve for (x86_64-manylinux_2_28)
_GLIBC_MINOR: Final[int] = int(re.sub(r".*manylinux_2_([0-9]+)$", r"\1", PYTHON_PLATFORM))
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True, kw_only=True)
class WheelSize:
    name: str
    version: str
    python: str
    file: str
    size: int


@dataclass(frozen=True, kw_only=True)
class SizeTable:
    """``wheel-sizes.toml``: (name, version, python) → compressed wheel bytes."""

    rows: tuple[WheelSize, ...] = ()
    date: str = ""
    path: Path | None = None

    def size(self, name: str, version: str, python: str) -> int | None:
        want = (canonicalize_name(name), version, python)
        return self._index.get(want)

    @functools.cached_property
    def _index(self) -> dict[tuple[str, str, str], int]:  # built once per table, not once per look-up
        return {(r.name, r.version, r.python): r.size for r in self.rows}


def read_sizes(lock_dir: Path) -> SizeTable:
    """The size table of *lock_dir* (empty when there is none: every wheel is then of unknown size)."""
    path = lock_dir / SIZES_FILE
    if not os.path.lexists(path):
        # missing: every wheel of unknown size. One that is there but not a regular file (a folder, a FIFO,
        # a dangling link) is an error below, never "no sizes" (that would silently re-plan every layer)
        return SizeTable()
    fix = "rewrite it: imagesmith lock --sizes (where the package index is reachable)"
    return _parsed_sizes(inputs.read_user_text(path, "", hint=fix), path)


@functools.lru_cache(maxsize=16)
def _parsed_sizes(text: str, path: Path) -> SizeTable:
    """:func:`parse_sizes` once per (content, path): every plan of every matrix reads the same table."""
    return parse_sizes(text, path)


def parse_sizes(text: str, path: Path) -> SizeTable:
    """A ``wheel-sizes.toml`` of *text* (*path* names it in errors)."""
    fix = "rewrite it: imagesmith lock --sizes (where the package index is reachable)"
    data = inputs.loads_toml(text, str(path), syntax_hint=fix)
    schema = data.get("schema", 1)
    if schema != 1 or isinstance(schema, bool):
        raise ConfigError(f"{path}: schema = {schema!r}; this imagesmith reads schema 1", hint=fix)
    rows = data.get("wheels", [])
    if not isinstance(rows, list):
        raise ConfigError(f"{path}: `wheels` must be an array of tables", hint=fix)
    out: list[WheelSize] = []
    for i, row in enumerate(rows):
        where = f"{path}: wheels[{i}]"
        if not isinstance(row, dict):
            raise ConfigError(f"{where} is not a table", hint=fix)
        try:
            name, version, python, file = (str(row[k]) for k in ("name", "version", "python", "file"))
            size = row["size"]
        except KeyError as exc:
            raise ConfigError(f"{where}: missing key {exc.args[0]!r}", hint=fix) from None
        if not _NAME.match(name) or canonicalize_name(name) != name:
            raise ConfigError(f"{where}.name {name!r} is not a normalized project name", hint=fix)
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ConfigError(f"{where}.size must be a positive number of bytes, not {size!r}", hint=fix)
        if not re.fullmatch(r"3\.[0-9]+", python):
            raise ConfigError(f"{where}.python {python!r} is not X.Y", hint=fix)
        out.append(WheelSize(name=name, version=version, python=python, file=file, size=size))
    return SizeTable(rows=tuple(out), date=str(data.get("date", "")), path=path)


def preferred_tags(python: str) -> list[Tag]:
    """The wheel tags pip accepts for CPython *python* on manylinux (≤ the locks' glibc) x86_64, best
    first."""
    major, minor = (int(p) for p in python.split("."))
    platforms = [f"manylinux_2_{m}_x86_64" for m in range(_GLIBC_MINOR, 4, -1)]
    legacy = {
        "manylinux_2_17_x86_64": "manylinux2014_x86_64",
        "manylinux_2_12_x86_64": "manylinux2010_x86_64",
    }
    plats: list[str] = []
    for p in platforms:
        plats.append(p)
        if p in legacy:
            plats.append(legacy[p])
    plats.append("manylinux1_x86_64")
    return [
        *cpython_tags((major, minor), platforms=plats),
        *compatible_tags((major, minor), interpreter=f"cp{major}{minor}", platforms=plats),
    ]


def pick_file(filenames: Iterable[str], version: str, python: str) -> str | None:
    """The wheel of *version* pip would install for *python* (None: no compatible wheel)."""
    try:
        want = Version(version)
    except InvalidVersion:
        return None
    rank = {tag: i for i, tag in enumerate(preferred_tags(python))}
    best: tuple[int, str] | None = None
    for name in filenames:
        try:
            _, ver, _, tags = parse_wheel_filename(name)
        except ValueError:
            continue
        if ver != want:
            continue
        score = min((rank[t] for t in tags if t in rank), default=None)
        if score is not None and (best is None or score < best[0]):
            best = (score, name)
    return best[1] if best else None


class FileLister(Protocol):
    """What :func:`collect_sizes` needs of an index: a project's wheel files as (filename, size)."""

    def files(self, project: str) -> Sequence[tuple[str, int]]: ...


def collect_sizes(locks: Sequence[Lock], lister: FileLister) -> tuple[list[WheelSize], list[str]]:
    """Every runtime pin of *locks* sized from *lister*; returns (rows, pins the index does not carry)."""
    rows: dict[tuple[str, str, str], WheelSize] = {}
    missing: list[str] = []
    listings: dict[str, dict[str, int]] = {}
    failures: list[UpstreamError] = []
    for lock in locks:
        python = lock.key.python
        for name, version in lock.pins:
            if (name, version, python) in rows:
                continue
            if name not in listings:
                try:
                    listings[name] = dict(lister.files(name))
                except UpstreamError as exc:
                    failures.append(exc)
                    listings[name] = {}
            chosen = pick_file(listings[name], version, python)
            if chosen is None or listings[name][chosen] <= 0:
                missing.append(f"{name}=={version} (py{python})")
                continue
            rows[(name, version, python)] = WheelSize(
                name=name, version=version, python=python, file=chosen, size=listings[name][chosen]
            )
    if failures and not rows:  # the index answered nothing: an unreachable index is not "no such wheels"
        raise failures[0]
    return sorted(rows.values(), key=lambda r: (r.name, Version(r.version), r.python)), sorted(set(missing))


def sizes_toml(rows: Sequence[WheelSize], missing: Sequence[str], today: _dt.date | None = None) -> str:
    date = (today or _dt.datetime.now(_dt.timezone.utc).date()).isoformat()
    lines = [
        "# Compressed wheel sizes of every runtime pin of the locks in this folder: the file pip installs",
        f"# for the lock's CPython on {PYTHON_PLATFORM}, its `size` from the package index's JSON Simple API",
        "# (PEP 691/700). The layer plan sizes its layers with them (`imagesmith plan --explain`).",
        "# Generated by `imagesmith lock --sizes`; do not edit by hand.",
        "schema = 1",
        f'date = "{date}"',
        'source = "package index JSON Simple API (PEP 691/700 size), wheel chosen as pip would"',
    ]
    if missing:
        lines.append("# not on the index (sized as unknown, own layer): " + ", ".join(missing))
    lines.append("wheels = [")
    for r in rows:
        lines.append(
            f'  {{ name = "{r.name}", version = "{r.version}", python = "{r.python}", '
            f'size = {r.size}, file = "{r.file}" }},'
        )
    lines.append("]")
    return "\n".join(lines) + "\n"


def write_sizes(lock_dir: Path, rows: Sequence[WheelSize], missing: Sequence[str]) -> Path:
    path = lock_dir / SIZES_FILE
    text = sizes_toml(rows, missing)
    tomllib.loads(text)  # never write what we cannot read back
    atomicio.write_atomic(path, text)
    read_sizes(lock_dir)
    return path


def for_lock(table: SizeTable, lock: Lock) -> tuple[list[WheelSize], list[str]]:
    """The rows of *table* for *lock*'s runtime pins, and the pins it has no row for (as ``sizes_toml``
    lists them)."""
    by_key = {(r.name, r.version, r.python): r for r in table.rows}
    python = lock.key.python
    rows = [row for n, v in lock.pins if (row := by_key.get((canonicalize_name(n), v, python))) is not None]
    missing = [
        f"{n}=={v} (py{python})" for n, v in lock.pins if (canonicalize_name(n), v, python) not in by_key
    ]
    return sorted(rows, key=lambda r: (r.name, Version(r.version), r.python)), sorted(missing)


def merge(old: SizeTable, rows: Sequence[WheelSize]) -> list[WheelSize]:
    """*rows* plus the rows of *old* they do not replace (locks sized earlier stay sized)."""
    new: Mapping[tuple[str, str, str], WheelSize] = {(r.name, r.version, r.python): r for r in rows}
    kept = [r for r in old.rows if (r.name, r.version, r.python) not in new]
    return sorted([*kept, *new.values()], key=lambda r: (r.name, Version(r.version), r.python))


__all__ = [
    "SIZES_FILE",
    "FileLister",
    "SizeTable",
    "WheelSize",
    "collect_sizes",
    "for_lock",
    "merge",
    "parse_sizes",
    "pick_file",
    "read_sizes",
    "sizes_toml",
    "write_sizes",
]
