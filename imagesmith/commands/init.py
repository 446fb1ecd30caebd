"""CLI command ``init``: scaffold a working imagesmith project. Registered on the root app by
imagesmith.cli.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imagesmith.commands import epilog

EPILOG = epilog(
    [
        "imagesmith init myproject",
        "imagesmith init myproject --gpu a100 --gpu h100 --registry ghcr.io/me --driver 535.104.05",
    ],
    [
        "0 = project written",
        "2 = bad flag (unknown GPU, base or driver; the folder is a file), "
        "or the example matrix would plan no cell (nothing written)",
    ],
)


def init_command(
    directory: Annotated[
        Path, typer.Argument(help="Project root to create (default: the current folder).")
    ] = Path(),
    gpu: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu",
            help="GPU family (a100, h100, h200, rtx4090, …: every SKU of it) or one model; repeatable. "
            "Default: h200.",
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Project name (default: the folder's name).")
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            "--base", help="OS base image (debian:bookworm, ubuntu:22.04, ubuntu:24.04). Default: chosen."
        ),
    ] = None,
    driver: Annotated[
        str | None,
        typer.Option(
            "--driver",
            help="Oldest host driver the images must run on (e.g. 535.104.05): "
            "picks a CUDA release that driver runs.",
        ),
    ] = None,
    registry: Annotated[
        list[str] | None,
        typer.Option(
            "--registry",
            help="Where the example matrix pushes: HOST or HOST/NAMESPACE (http://HOST… for a plain-HTTP "
            "registry); repeatable: pushed once to the first, copied to the others. "
            "Default: http://127.0.0.1:5000.",
        ),
    ] = None,
    render: Annotated[
        bool, typer.Option("--render/--no-render", help="Also render dockerfiles/ (default: yes).")
    ] = True,
) -> None:
    """Create an imagesmith project: imagesmith.toml, an example matrix for the GPUs asked for, registries,
    locks, a CI workflow, and (by default) its rendered dockerfiles/.
    """
    from imagesmith.initrequest import InitRequest, init, prepare

    request = InitRequest(
        directory=directory,
        gpu=tuple(gpu or ()),
        name=name,
        base=base,
        driver=driver,
        registry=tuple(registry or ()),
        render=render,
    )
    prepared = prepare(request)
    result = init(request, prepared)
    project = result.project
    for path in result.written:
        typer.echo(f"wrote   {project.rel(path)}")
    if result.rendered is not None:
        typer.echo(f"wrote   {project.dockerfiles_rel}/{result.matrix_name}/ ({result.rendered} files)")
    choice = prepared.choice
    lock = choice.lock
    typer.echo(
        f"\nproject {prepared.name} in {prepared.root}: matrix {result.matrix_name} = torch {lock.torch} "
        f"{lock.variant} (CUDA {choice.cuda}, driver >= {choice.min_driver}) py{lock.python} on "
        f"{choice.base.image} for {', '.join(g.key for g in choice.gpus)}; {result.cells} cell(s)"
    )
    for passed in choice.passed_over:
        typer.echo(f"  passed over: {passed}")
    typer.echo(
        "next: "
        + ("" if render else "imagesmith render; ")
        + "imagesmith plan --explain; imagesmith fetch-sources; imagesmith build --push"
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("init", epilog=EPILOG)(init_command)
