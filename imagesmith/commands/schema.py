"""CLI command ``schema``: the JSON Schema files of imagesmith's input files, for editors (taplo, VS Code's
Even Better TOML), written from the one schema layer (:mod:`imagesmith.schema`), committed under
docs/schemas/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from imagesmith import settings
from imagesmith.commands import epilog
from imagesmith.errors import ConfigError, RenderError
from imagesmith.inputs import folder_problem

EPILOG = epilog(
    ["imagesmith schema", "imagesmith schema --check", "imagesmith schema --out docs/schemas"],
    ["0 = written, or (--check) current", "2 = bad flag", "4 = (--check) a schema file differs"],
)


def schema_command(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder for the *.schema.json files (default: docs/schemas of the project: -C DIR, "
            "$IMAGESMITH_PROJECT or the imagesmith.toml above; outside a project, of the working folder).",
            show_default=False,
        ),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Write nothing; fail when a file differs.")] = False,
) -> None:
    """Write (or check) the JSON Schema of each file imagesmith reads (project, matrices, index, report)."""
    from imagesmith.schema import SCHEMAS

    if out is None:
        out = _default_out()
    elif problem := folder_problem(out, may_be_missing=True):
        raise ConfigError(f"--out {out}: {problem}", hint="give a folder (it is made when missing)")

    differing: list[str] = []
    for s in SCHEMAS:
        path = out / f"{s.file_name}.schema.json"
        text = json.dumps(s.json_schema(), indent=2, sort_keys=False) + "\n"
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        if check:
            differing.append(str(path))
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"--out {out}: cannot write {path.name} there ({exc.strerror or exc})",
                hint="give a folder you can write to (default docs/schemas)",
            ) from None
        typer.echo(f"wrote   {path}")
    if differing:
        raise RenderError(
            "JSON Schema files differ from imagesmith.schema: " + ", ".join(differing),
            hint=f"run `imagesmith schema --out {out}` and commit them",
        )
    typer.echo(
        f"{len(SCHEMAS)} schema file(s) in {out} are current" if check else f"{len(SCHEMAS)} schema file(s)"
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
