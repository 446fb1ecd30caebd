"""CLI command ``schema``: the JSON Schema files of imagesmith's input files, for editors (taplo, VS Code's
Even Better TOML), written from the one schema layer (:mod:`imagesmith.schema`), committed under
docs/schemas/.
"""

from __future__ import annotations

from pathlib import Path

import typer

from imagesmith import settings
from imagesmith.commands import epilog
from imagesmith.commands.flags import SchemaCheck, SchemaOut
from imagesmith.errors import ConfigError

EPILOG = epilog(
    ["imagesmith schema", "imagesmith schema --check", "imagesmith schema --out docs/schemas"],
    ["0 = written, or (--check) current", "2 = bad flag", "4 = (--check) a schema file differs"],
)


def schema_command(out: SchemaOut = None, check: SchemaCheck = False) -> None:
    """Write (or check) the JSON Schema of each file imagesmith reads (project, matrices, index, report)."""
    from imagesmith.schemarequest import SchemaRequest, prepare, write_schemas

    request = SchemaRequest(out=out, check=check)
    result = write_schemas(request, prepare(request, default_out=_default_out), echo=typer.echo)
    typer.echo(
        f"{result.count} schema file(s) in {result.out} are current"
        if result.check
        else f"{result.count} schema file(s)"
    )


def register(app: typer.Typer) -> None:
    app.command("schema", epilog=EPILOG)(schema_command)


def _default_out() -> Path:
    """docs/schemas of the project this runs in (``-C DIR`` and ``$IMAGESMITH_PROJECT`` count, a folder
    inside the project finds its root); of the working folder only where there is no project at all."""

    from imagesmith.commands import current_project, project_option

    try:
        return current_project().root / "docs" / "schemas"
    except ConfigError:
        if project_option() is not None or settings.get("IMAGESMITH_PROJECT"):
            raise  # a project was named and is not one: say so, never write elsewhere
        return Path("docs/schemas")
