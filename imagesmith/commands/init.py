"""CLI command ``init``: scaffold a working imagesmith project. Registered on the root app by
imagesmith.cli.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from imagesmith.commands import epilog
from imagesmith.errors import ConfigError, ImagesmithError
from imagesmith.inputs import path_kind, resolved

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
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from imagesmith.project import load_project, project_name
    from imagesmith.render import matrix_dir, render_plan, write_rendered
    from imagesmith.scaffold import (
        DEFAULT_GPU,
        DEFAULT_REGISTRY,
        choose,
        default_matrix_name,
        new_folders,
        project_files,
        remove_written,
        resolve_gpus,
        write_project,
    )

    gpu_args = gpu or [DEFAULT_GPU]
    root = resolved(directory)
    kind = path_kind(root)
    if (kind is not None and kind != "a folder") or (root.exists() and not root.is_dir()):
        raise ConfigError(
            f"{root} exists and is not a folder ({kind or 'a file'})",
            hint="give a new or existing folder for the project",
        )
    if name is not None and (not name.strip() or not name.isprintable()):
        raise ConfigError(
            f"--name {name[:80]!r}: empty, or holds control characters",
            hint="give a plain name (letters, digits, . _ -), or leave --name out to use the folder's name",
        )
    proj_name = project_name(name or root.name)
    if name is not None and name != proj_name:
        raise ConfigError(
            f"--name {name[:80]!r} is not a project name (at most 64 lowercase letters, digits, '.', '_', "
            "'-': it is the registry namespace)",
            hint=f"--name {proj_name}"
            + (
                " (or leave --name out: the folder's name is used)"
                if proj_name == project_name("")  # the name of no letters
                else ""
            ),
        )
    given = [r.strip().rstrip("/") for r in registry or []]
    twice = sorted({r for r in given if given.count(r) > 1})
    if twice:
        raise ConfigError(
            f"--registry {twice[0]} is given {given.count(twice[0])} times: every image would be pushed "
            "there twice",
            hint="give each registry once",
        )
    choice = choose(resolve_gpus(gpu_args), base, driver)
    matrix_name = default_matrix_name(gpu_args)
    files = project_files(
        name=proj_name,
        gpu_args=gpu_args,
        choice=choice,
        matrix_name=matrix_name,
        registries=registry or [DEFAULT_REGISTRY],
    )
    # plan it in a scratch copy first: a project whose example plans no cell is never written
    with tempfile.TemporaryDirectory(prefix="imagesmith-init-") as scratch:
        write_project(Path(scratch), files, choice.lock)
        trial = load_project(Path(scratch) / "imagesmith.toml")
        trial_plan = build_plan(load_matrix(matrix_name, project=trial), project=trial)
        if not trial_plan.cells:
            reasons = "; ".join(f"{d.combination}: {d.reason}" for d in trial_plan.dropped)
            raise ConfigError(
                f"the example matrix for {', '.join(gpu_args)} plans no cell ({reasons}); "
                "nothing was written",
                hint="try another --gpu/--base/--driver, or report this as a bug of imagesmith's data",
            )
    _refuse_inside_project_folders(root)
    created = new_folders(
        root, [*files, f"locks/{choice.lock.filename}", f"dockerfiles/{matrix_name}/Dockerfile"]
    )
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        remove_written([], [f for f in created if not f.exists() or not any(f.iterdir())])
        raise ConfigError(
            f"{root}: cannot create the project folder: {exc.strerror or exc}",
            hint="give a folder you can write to",
        ) from None
    written = write_project(root, files, choice.lock)
    try:
        project = load_project(root / "imagesmith.toml")
        m = load_matrix(matrix_name, project=project)
        plan = build_plan(m, project=project)
        drift = write_rendered(render_plan(plan, project), [matrix_dir(m, project)]) if render else None
    except (ImagesmithError, OSError) as exc:
        # nothing half-done: a project whose dockerfiles/ could not be rendered is not left behind
        remove_written(written, created)
        if isinstance(exc, ImagesmithError):
            raise
        raise ConfigError(
            f"{root}: cannot write the project: {exc}; nothing was left behind",
            hint="choose a folder you can write to (with room for dockerfiles/)",
        ) from None
    for path in written:
        typer.echo(f"wrote   {project.rel(path)}")
    if drift is not None:
        typer.echo(f"wrote   {project.dockerfiles_rel}/{m.name}/ ({len(drift.missing)} files)")
    lock = choice.lock
    typer.echo(
        f"\nproject {proj_name} in {root}: matrix {m.name} = torch {lock.torch} {lock.variant} "
        f"(CUDA {choice.cuda}, driver >= {choice.min_driver}) py{lock.python} on {choice.base.image} "
        f"for {', '.join(g.key for g in choice.gpus)}; "
        f"{len(plan.cells)} cell(s)"
    )
    for passed in choice.passed_over:
        typer.echo(f"  passed over: {passed}")
    typer.echo(
        "next: "
        + ("" if render else "imagesmith render; ")
        + "imagesmith plan --explain; imagesmith fetch-sources; imagesmith build --push"
    )


def _refuse_inside_project_folders(root: Path) -> None:
    """A new project inside the matrices/, locks/ or dockerfiles/ folder of the project above it would
    become that project's files (its imagesmith.toml read as a matrix, its files pruned by render)."""
    from imagesmith.project import find_project_file, load_project

    if (root / "imagesmith.toml").exists():
        return  # write_project names it
    outer_file = find_project_file(root.parent)
    if outer_file is None:
        return
    try:
        outer = load_project(outer_file)
    except ImagesmithError:
        return
    for key, folder in (
        ("matrices", outer.matrices_dir),
        ("locks", outer.locks_dir),
        ("dockerfiles", outer.dockerfiles_dir),
    ):
        if root == folder or root.is_relative_to(folder):
            raise ConfigError(
                f"{root} is {'' if root == folder else 'inside '}paths.{key} ({folder}) of the project "
                f"{outer_file}: a project there would become that project's files",
                hint=f"run `imagesmith init` outside {folder}, e.g. in a folder beside {outer.root}",
            )


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("init", epilog=EPILOG)(init_command)
