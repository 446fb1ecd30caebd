"""A plan cell with one field changed, by the field's flat (wire) name, whichever record holds it."""

from __future__ import annotations

from dataclasses import Field, fields, replace
from typing import Any

from imagesmith.model import Bases, Cell, CellLock, Hardware, Publish, Runtime, Toolkit, TorchStack

#: the cell's records by attribute name
RECORDS: dict[str, type[Any]] = {
    "stack": TorchStack,
    "runtime": Runtime,
    "bases": Bases,
    "toolkit": Toolkit,
    "lock": CellLock,
    "hardware": Hardware,
    "publish": Publish,
}


def leaf_fields() -> list[Field[Any]]:
    """The fields of a cell's identity and of each of its records (what ``Cell.leaves`` walks)."""
    out = [f for f in fields(Cell) if f.name not in RECORDS]
    for record in RECORDS.values():
        out += fields(record)
    return out


def with_field(cell: Cell, field: str, value: object) -> Cell:
    """*cell* with its field *field* (``venv``, ``base_image``, ``flavor``, …) set to *value*, of any type."""
    for attr, record in RECORDS.items():
        if field in {f.name for f in fields(record)}:
            changes: dict[str, Any] = {attr: replace(getattr(cell, attr), **{field: value})}
            return replace(cell, **changes)
    flat: dict[str, Any] = {field: value}
    return replace(cell, **flat)
