"""The fabrics ``imagesmith validate --fabric`` knows: ``imagesmith/data/fabrics.toml``, one row per fabric
(InfiniBand, RoCE, Ethernet, AWS EFA), with the network NCCL names when it runs over it, what the images carry
for it, and whether validate measures it. A fabric the images cannot run NCCL over (EFA: no libfabric, no
aws-ofi-nccl) is a row with ``supported = false``, its gap and the fix: :func:`refuse_unsupported` turns
``--fabric efa`` into one error naming them, before any node is contacted.

:data:`imagesmith.validate.nics.Fabric` (a Literal: mypy needs it spelled out), ``FABRICS`` and the report and
index schemas' fabric enums are the supported rows; tests/unit/test_fabrics.py holds them to this file.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from imagesmith.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

DATA_FILE = "imagesmith/data/fabrics.toml"
DATA_HINT = (
    "imagesmith's packaged data is broken: reinstall imagesmith (pip install --force-reinstall imagesmith), "
    "or in a checkout fix the row named in imagesmith/data/fabrics.toml"
)


@dataclass(frozen=True, kw_only=True)
class FabricRow:
    """One ``[[fabric]]`` row."""

    name: str  # the --fabric value: ib, roce, ethernet, efa
    title: str  # InfiniBand, RoCE, Ethernet, AWS Elastic Fabric Adapter
    nccl_net: str  # the network NCCL reports when it works over it: IB, Socket, AWS Libfabric
    carries: tuple[str, ...]  # what the images install for it
    supported: bool
    gap: str  # why validate refuses it (supported = false), else ""
    fix: str  # what a user can do instead (supported = false), else ""
    source: str


def _bad(where: str, problem: str) -> ConfigError:
    return ConfigError(f"{DATA_FILE}: {where}: {problem}", hint=DATA_HINT, file=DATA_FILE, field=where)


def _text(row: dict[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _bad(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
    return value.strip()


def _row(row: Any, i: int, seen: set[str]) -> FabricRow:
    where = f"fabric[{i}]"
    if not isinstance(row, dict):
        raise _bad(where, "must be a table ([[fabric]])")
    name = _text(row, "name", where)
    if not name.isascii() or not name.isalpha() or not name.islower() or name in seen:
        raise _bad(f"{where}.name", f"{name!r} is not a new lowercase fabric name")
    where = f"fabric {name}"
    carries = row.get("carries")
    if not isinstance(carries, list) or not all(isinstance(c, str) and c.strip() for c in carries):
        raise _bad(f"{where}.carries", f"must be a list of package names, got {carries!r}")
    supported = row.get("supported")
    if not isinstance(supported, bool):
        raise _bad(f"{where}.supported", f"must be true or false, got {supported!r}")
    gap = _text(row, "gap", where) if not supported else ""
    fix = _text(row, "fix", where) if not supported else ""
    if supported and ("gap" in row or "fix" in row):
        raise _bad(where, "a supported fabric has no `gap` or `fix`")
    return FabricRow(
        name=name,
        title=_text(row, "title", where),
        nccl_net=_text(row, "nccl_net", where),
        carries=tuple(c.strip() for c in carries),
        supported=supported,
        gap=gap,
        fix=fix,
        source=_text(row, "source", where),
    )


def parse(text: str) -> tuple[FabricRow, ...]:
    """The rows of a fabrics.toml text, in file order (a ConfigError naming the file and the field when
    broken)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _bad("TOML", str(exc)) from None
    if data.get("schema") != 1:
        raise _bad("schema", f"must be 1, got {data.get('schema')!r}")
    rows = data.get("fabric")
    if not isinstance(rows, list) or not rows:
        raise _bad("fabric", "no [[fabric]] rows")
    out: list[FabricRow] = []
    for i, row in enumerate(rows):
        out.append(_row(row, i, {r.name for r in out}))
    if not any(r.supported for r in out):
        raise _bad("fabric", "no row is supported = true")
    return tuple(out)


@cache
def rows() -> tuple[FabricRow, ...]:
    """``imagesmith/data/fabrics.toml``'s rows."""
    return parse(resources.files("imagesmith.data").joinpath("fabrics.toml").read_text(encoding="utf-8"))


def supported() -> tuple[str, ...]:
    """The fabrics validate measures, in file order: ``ib``, ``roce``, ``ethernet``."""
    return tuple(r.name for r in rows() if r.supported)


def titles() -> dict[str, str]:
    """Every fabric's name shown to users: ``{"ib": "InfiniBand", …, "efa": "AWS Elastic Fabric
    Adapter"}``."""
    return {r.name: r.title for r in rows()}


def refuse_unsupported(fabric: str) -> None:
    """``--fabric efa`` (a row with ``supported = false``): one ConfigError naming the gap and the fix.
    Unknown names are left to the caller's own check (its "use one of …")."""
    for row in rows():
        if row.name == fabric and not row.supported:
            raise ConfigError(
                f"--fabric {fabric} ({row.title}): not supported: {row.gap}",
                hint=f"{row.fix} ({DATA_FILE}, fabric {row.name})",
                field="--fabric",
            )
