"""The packaged TOML tables (``imagesmith/data/*.toml``): loading, row and field checks, the data error and
name suggestions."""

from __future__ import annotations

import difflib
import functools
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from imagesmith.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

DATA_HINT = (
    "imagesmith's packaged data is broken: reinstall imagesmith (pip install --force-reinstall imagesmith), "
    "or in a checkout fix the data file named"
)


class DataError(ConfigError):
    """imagesmith's own data files (``imagesmith/data/*.toml``) are wrong: a packaging or editing bug."""

    def __init__(self, message: str, *, hint: str | None = None, **fields: Any) -> None:
        super().__init__(message, hint=hint or DATA_HINT, **fields)


_PACKAGE = "imagesmith"

# ------------------------------------------------------------------------------------------------------------
# helpers


def nearest(value: str, choices: Iterable[str]) -> str | None:
    """The choice spelled most like *value* (case-insensitive, :mod:`difflib`), or None when nothing is close.

    Meant for "did you mean …?" messages.
    """
    options = list(dict.fromkeys(choices))
    if not options:
        return None
    folded: dict[str, str] = {}
    for option in options:
        folded.setdefault(option.casefold(), option)
    if value.casefold() in folded:
        return folded[value.casefold()]
    hits = difflib.get_close_matches(value.casefold(), list(folded), n=1, cutoff=0.5)
    return folded[hits[0]] if hits else None


def _did_you_mean(value: str, choices: Iterable[str]) -> str:
    guess = nearest(value, choices)
    return f"did you mean {guess}?" if guess else ""


# ------------------------------------------------------------------------------------------------------------
# data loading


@functools.cache
def _load(name: str) -> dict[str, Any]:
    text = resources.files(_PACKAGE).joinpath("data").joinpath(name).read_text(encoding="utf-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # a packaging bug, but say where
        raise DataError(f"imagesmith/data/{name}: invalid TOML: {exc}") from None


@dataclass
class Tables:
    """Where compat reads its packaged tables from: every reader calls ``TABLES.load``, the one seam a test
    swaps (``monkeypatch.setattr(tables.TABLES, "load", fake)``) to plant a broken or edited table."""

    load: Callable[[str], dict[str, Any]]


TABLES = Tables(load=_load)


def _rows(name: str, table: str) -> list[dict[str, Any]]:
    data = TABLES.load(name)
    rows = data.get(table)
    if not isinstance(rows, list) or not rows:
        raise DataError(f"imagesmith/data/{name}: no [[{table}]] rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("source"), str) or not row["source"].strip():
            raise DataError(f"imagesmith/data/{name}: [[{table}]] row {i + 1} has no `source`")
    return rows


def _field(name: str, table: str, row: Mapping[str, Any], key: str, kind: type) -> Any:
    value = row.get(key)
    if not isinstance(value, kind):
        ident = row.get("version") or row.get("key") or row.get("name") or row.get("branch") or "?"
        raise DataError(
            f"imagesmith/data/{name}: [[{table}]] {ident}: `{key}` must be a {kind.__name__}, got {value!r}"
        )
    return value
