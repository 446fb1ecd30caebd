"""The schema command's layer between its flags and the schema layer (issue 31): one typed request
(:class:`SchemaRequest`, what ``imagesmith schema`` was given), the rules of the flags in one place
(:func:`prepare`: a bad ``--out`` is one ``ConfigError`` naming the flag — its ``field`` — before anything is
written), the run (:func:`write_schemas`: each schema file written, or with ``--check`` compared) and one
typed result (:class:`SchemaResult`) the command prints.

What only the command may know — the folder of the project it runs in (``-C DIR``,
``$IMAGESMITH_PROJECT``), the default of ``--out`` — it hands in as a function (``default_out``); a run says
which files it writes line by line through ``echo`` (the command's ``typer.echo``). Nothing heavy is
imported at module level: ``imagesmith --help`` loads this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagesmith.errors import ConfigError, RenderError

#: () → the folder the schema files go into without ``--out`` (the project's docs/schemas)
DefaultOut = Callable[[], Path]


#: how a run says what it does: a line (the command's ``typer.echo``)
Echo = Callable[[str], Any]


def _silent(message: str) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class SchemaRequest:
    """What ``imagesmith schema`` was given: its flags as typed values (no ``--out``: the project's
    docs/schemas)."""

    out: Path | None = None
    check: bool = False


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A request the rules accepted: the folder of the schema files."""

    out: Path


@dataclass(frozen=True, kw_only=True)
class SchemaResult:
    """What a run did: the folder, how many schema files there are, which were written (``--check``:
    none; a file that differs is its ``RenderError``)."""

    out: Path
    check: bool
    count: int
    written: Sequence[Path] = ()


def prepare(request: SchemaRequest, *, default_out: DefaultOut) -> Prepared:
    """The rules of the flags: ``--out`` a folder or nothing yet (made when missing); without it the
    folder *default_out* gives."""
    from imagesmith.inputs import folder_problem

    out = request.out
    if out is None:
        return Prepared(out=default_out())
    if problem := folder_problem(out, may_be_missing=True):
        raise ConfigError(
            f"--out {out}: {problem}", hint="give a folder (it is made when missing)", field="--out"
        )
    return Prepared(out=out)


def write_schemas(request: SchemaRequest, p: Prepared, *, echo: Echo = _silent) -> SchemaResult:
    """Write each schema file of :mod:`imagesmith.schema` into *p*'s folder where it differs (*echo* told of
    each); with ``--check`` write nothing and raise a ``RenderError`` naming the files that differ."""
    import json

    from imagesmith.schema import SCHEMAS

    out = p.out
    differing: list[str] = []
    written: list[Path] = []
    for s in SCHEMAS:
        path = out / f"{s.file_name}.schema.json"
        text = json.dumps(s.json_schema(), indent=2, sort_keys=False) + "\n"
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        if request.check:
            differing.append(str(path))
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"--out {out}: cannot write {path.name} there ({exc.strerror or exc})",
                hint="give a folder you can write to (default docs/schemas)",
                field="--out",
            ) from None
        echo(f"wrote   {path}")
        written.append(path)
    if differing:
        raise RenderError(
            "JSON Schema files differ from imagesmith.schema: " + ", ".join(differing),
            hint=f"run `imagesmith schema --out {out}` and commit them",
        )
    return SchemaResult(out=out, check=request.check, count=len(SCHEMAS), written=tuple(written))
