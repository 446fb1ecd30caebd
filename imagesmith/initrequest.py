"""The init command's layer between its flags and the scaffold (issue 31): one typed request
(:class:`InitRequest`, what ``imagesmith init`` was given), the rules of the flags in one place
(:func:`prepare`: every bad value is one ``ConfigError`` naming the flag, in a fixed order, before anything
is written — the example matrix is planned in a scratch copy first), the run (:func:`init`: the project
written, its dockerfiles/ rendered, or nothing left behind) and one typed result (:class:`InitResult`) the
command prints. Nothing heavy is imported at module level: ``imagesmith --help`` loads this.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagesmith.errors import ConfigError, ImagesmithError
from imagesmith.inputs import path_kind, resolved

if TYPE_CHECKING:
    from imagesmith.project import Project
    from imagesmith.scaffold import Choice


@dataclass(frozen=True, kw_only=True)
class InitRequest:
    """What ``imagesmith init`` was given: its argument and flags as typed values (the defaults are the
    flags'; no ``--gpu`` is the default GPU, no ``--registry`` the default registry)."""

    directory: Path = Path()
    gpu: Sequence[str] = ()
    name: str | None = None
    base: str | None = None
    driver: str | None = None
    registry: Sequence[str] = ()
    render: bool = True


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A request the rules accepted: the project root and name, what the example matrix builds, and the
    files to write (a scratch copy of them planned at least one cell)."""

    root: Path
    name: str
    gpu_args: Sequence[str]
    choice: Choice
    matrix_name: str
    files: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class InitResult:
    """What was written: the files (and the rendered dockerfiles/ of the matrix), the cells it plans."""

    project: Project
    written: Sequence[Path]
    matrix_name: str
    cells: int
    #: the files rendered into dockerfiles/<matrix>/ (None: ``--no-render``)
    rendered: int | None


def prepare(request: InitRequest) -> Prepared:
    """The rules of the flags, in one place and in this order: DIRECTORY (a folder, or nothing yet),
    ``--name``, ``--registry`` given twice, ``--gpu``/``--base``/``--driver`` (a reference lock for them),
    the example matrix planning a cell (in a scratch copy), DIRECTORY outside the project folders of a project
    above it."""
    from imagesmith.scaffold import (
        DEFAULT_GPU,
        DEFAULT_REGISTRY,
        choose,
        default_matrix_name,
        project_files,
        resolve_gpus,
    )

    r = request
    gpu_args = list(r.gpu) or [DEFAULT_GPU]
    root = resolved(r.directory)
    kind = path_kind(root)
    if (kind is not None and kind != "a folder") or (root.exists() and not root.is_dir()):
        raise ConfigError(
            f"{root} exists and is not a folder ({kind or 'a file'})",
            hint="give a new or existing folder for the project",
            field="DIRECTORY",
        )
    proj_name = _name_rules(r.name, root)
    _registry_rules(r.registry)
    choice = choose(resolve_gpus(gpu_args), r.base, r.driver)
    matrix_name = default_matrix_name(gpu_args)
    files = project_files(
        name=proj_name,
        gpu_args=gpu_args,
        choice=choice,
        matrix_name=matrix_name,
        registries=list(r.registry) or [DEFAULT_REGISTRY],
    )
    _plans_a_cell(files, choice, matrix_name, gpu_args)
    _refuse_inside_project_folders(root)
    return Prepared(
        root=root, name=proj_name, gpu_args=gpu_args, choice=choice, matrix_name=matrix_name, files=files
    )


def _name_rules(name: str | None, root: Path) -> str:
    """``--name`` (else the folder's name) → the project's name; a given one must be one already."""
    from imagesmith.project import project_name

    if name is not None and (not name.strip() or not name.isprintable()):
        raise ConfigError(
            f"--name {name[:80]!r}: empty, or holds control characters",
            hint="give a plain name (letters, digits, . _ -), or leave --name out to use the folder's name",
            field="--name",
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
            field="--name",
        )
    return proj_name


def _registry_rules(registry: Sequence[str]) -> None:
    """``--registry``: each once (every image would be pushed twice to one given twice)."""
    given = [r.strip().rstrip("/") for r in registry]
    twice = sorted({r for r in given if given.count(r) > 1})
    if twice:
        raise ConfigError(
            f"--registry {twice[0]} is given {given.count(twice[0])} times: every image would be pushed "
            "there twice",
            hint="give each registry once",
            field="--registry",
        )


def _plans_a_cell(files: dict[str, str], choice: Choice, matrix_name: str, gpu_args: Sequence[str]) -> None:
    """Plan the project in a scratch copy first: a project whose example plans no cell is never written."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from imagesmith.project import load_project
    from imagesmith.scaffold import write_project

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
                field="--gpu",
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
                field="DIRECTORY",
            )


def init(request: InitRequest, p: Prepared) -> InitResult:
    """Write the project *p* describes under its root, and (unless ``--no-render``) render its dockerfiles/;
    on an error nothing it wrote or created is left behind."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from imagesmith.project import load_project
    from imagesmith.render import matrix_dir, render_plan, write_rendered
    from imagesmith.scaffold import new_folders, remove_written, write_project

    root, choice = p.root, p.choice
    created = new_folders(
        root, [*p.files, f"locks/{choice.lock.filename}", f"dockerfiles/{p.matrix_name}/Dockerfile"]
    )
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        remove_written([], [f for f in created if not f.exists() or not any(f.iterdir())])
        raise ConfigError(
            f"{root}: cannot create the project folder: {exc.strerror or exc}",
            hint="give a folder you can write to",
        ) from None
    written = write_project(root, p.files, choice.lock)
    try:
        project = load_project(root / "imagesmith.toml")
        m = load_matrix(p.matrix_name, project=project)
        plan = build_plan(m, project=project)
        drift = (
            write_rendered(render_plan(plan, project), [matrix_dir(m, project)]) if request.render else None
        )
    except (ImagesmithError, OSError) as exc:
        # nothing half-done: a project whose dockerfiles/ could not be rendered is not left behind
        remove_written(written, created)
        if isinstance(exc, ImagesmithError):
            raise
        raise ConfigError(
            f"{root}: cannot write the project: {exc}; nothing was left behind",
            hint="choose a folder you can write to (with room for dockerfiles/)",
        ) from None
    return InitResult(
        project=project,
        written=tuple(written),
        matrix_name=m.name,
        cells=len(plan.cells),
        rendered=len(drift.missing) if drift is not None else None,
    )
