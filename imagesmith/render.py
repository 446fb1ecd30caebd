"""Render a plan's cells into build contexts under ``<project dockerfiles>/<matrix>/<cell-id>/``.

The files of a cell come from :func:`imagesmith.templating.render_cell_files` (pure); this module puts them
on disk (:func:`write_rendered`) and compares them with what is there (:func:`check_rendered`). Files the
build step puts into ``sources/`` and ``wheels/`` are not part of the rendering and are ignored
by ``--check``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagesmith import atomicio
from imagesmith.errors import RenderError
from imagesmith.matrix import Matrix
from imagesmith.model import BuildPlan
from imagesmith.templating import (
    FILLED_AT_BUILD,
    HEADER,
    TEMPLATES_PACKAGE,
    _environment,
    render_cell_files,
    site_packages,
)

if TYPE_CHECKING:
    from imagesmith.project import Project


#: the package's templates folder (read through importlib.resources by jinja2's PackageLoader)
def render_plan(plan: BuildPlan, project: Project) -> dict[Path, str]:
    """Every file of every cell of *plan*, keyed by absolute path under *project*'s root."""
    out: dict[Path, str] = {}
    for cell in plan.cells:
        for rel, text in render_cell_files(cell).items():
            out[project.path(cell.publish.context) / rel] = text
    return out


@dataclass(frozen=True, kw_only=True)
class Drift:
    missing: tuple[Path, ...]
    differing: tuple[Path, ...]
    extra: tuple[Path, ...]

    @property
    def clean(self) -> bool:
        return not (self.missing or self.differing or self.extra)


def _existing_files(matrix_dirs: Iterable[Path]) -> set[Path]:
    found: set[Path] = set()
    for directory in matrix_dirs:
        if not directory.is_dir():
            continue
        for path in directory.rglob("*"):
            if not path.is_file():
                continue
            rel = path.relative_to(directory).parts
            # <cell>/<folder>/<file>: files the build step drops into sources/ and wheels/ are not ours
            if len(rel) >= 3 and rel[1] in FILLED_AT_BUILD and rel[-1] != "README.md":
                continue
            found.add(path)
    return found


def looks_rendered(folder: Path) -> bool:
    """True when *folder* holds a Dockerfile with the GENERATED header: a stale matrix folder ``render`` may
    prune. Anything else under ``dockerfiles/`` is not ours and is never deleted.
    """
    for dockerfile in folder.glob("*/Dockerfile"):
        try:
            head = dockerfile.read_text(encoding="utf-8", errors="replace").split("\n", 2)[:2]
        except OSError:
            continue
        if any(HEADER in line for line in head):
            return True
    return False


def compare(rendered: Mapping[Path, str], matrix_dirs: Iterable[Path]) -> Drift:
    existing = _existing_files(matrix_dirs)
    missing = sorted(p for p in rendered if not p.is_file())
    differing = sorted(p for p in rendered if p.is_file() and p.read_text(encoding="utf-8") != rendered[p])
    extra = sorted(existing - set(rendered))
    return Drift(missing=tuple(missing), differing=tuple(differing), extra=tuple(extra))


def matrix_dir(matrix: Matrix, project: Project) -> Path:
    return project.matrix_dir(matrix.name)


def write_rendered(rendered: Mapping[Path, str], matrix_dirs: Iterable[Path]) -> Drift:
    """Write *rendered*, delete stale files of those matrices. Returns what changed."""
    matrix_dirs = list(matrix_dirs)
    drift = compare(rendered, matrix_dirs)
    # the whole tree or nothing: every new file's temp first, then the renames (imagesmith.atomicio)
    changed = drift.missing + drift.differing
    atomicio.write_tree(
        {p: rendered[p] for p in changed},
        remove=drift.extra,
        modes={p: 0o755 for p in changed if p.name.endswith(".sh")},
    )
    for directory in matrix_dirs:
        if directory.is_dir():
            for sub in sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if sub.is_dir() and not any(sub.iterdir()):
                    sub.rmdir()
            if not any(directory.iterdir()):
                directory.rmdir()
    return drift


def check_rendered(rendered: Mapping[Path, str], matrix_dirs: Iterable[Path], project: Project) -> None:
    """RenderError listing every missing, differing and extra file, or nothing when dockerfiles/ is
    current.
    """
    drift = compare(rendered, matrix_dirs)
    if drift.clean:
        return

    def show(paths: Iterable[Path]) -> str:
        return "".join(f"\n    {project.rel(p)}" for p in paths)

    lines = [f"{project.dockerfiles_rel}/ differs from what the matrices render:"]
    if drift.differing:
        lines.append("  differing:" + show(drift.differing))
    if drift.missing:
        lines.append("  missing:" + show(drift.missing))
    if drift.extra:
        lines.append("  extra:" + show(drift.extra))
    raise RenderError("\n".join(lines), hint=f"run `imagesmith render` and commit {project.dockerfiles_rel}/")


__all__ = [
    "FILLED_AT_BUILD",
    "HEADER",
    "TEMPLATES_PACKAGE",
    "Drift",
    "_environment",
    "check_rendered",
    "compare",
    "looks_rendered",
    "matrix_dir",
    "render_cell_files",
    "render_plan",
    "site_packages",
    "write_rendered",
]
