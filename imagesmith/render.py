"""Render a plan's cells into build contexts under ``dockerfiles/<matrix>/<cell-id>/`` (Jinja2,
StrictUndefined).

Per cell: ``Dockerfile``, ``requirements.txt`` (every runtime pin), ``builder-requirements.txt`` (the
nccl-tests builder's pins), ``entrypoint.sh`` (the /dev/shm guard), ``apt-mirror.sh``, ``mirror/*`` when the
run-time mirror profile is not ``none``, and a README in each of ``sources/``, ``wheels/``, ``certs/`` — the
folders the build step fills from its caches. Files the build step puts into those three folders are not part
of the rendering and are ignored by ``--check``.

Rendering is pure: :func:`render_cell_files` returns ``{relative path: text}``. Only :func:`write_rendered`
and :func:`check_rendered` touch the file system.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Final

import jinja2

from imagesmith.errors import RenderError
from imagesmith.matrix import MIRROR_PROFILES, Matrix
from imagesmith.plan import NCCL_TESTS_BIN, BuildPlan, Cell

if TYPE_CHECKING:
    from imagesmith.project import Project

#: the package's templates folder (read through importlib.resources by jinja2's PackageLoader)
TEMPLATES_PACKAGE: Final[tuple[str, str]] = ("imagesmith", "templates")
HEADER: Final[str] = "GENERATED — do not edit; run `imagesmith render`"
#: Folders of a build context that the build step fills; only their rendered README belongs to the rendering.
FILLED_AT_BUILD: Final[tuple[str, ...]] = ("sources", "wheels", "certs")


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader(*TEMPLATES_PACKAGE),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


_ENV: jinja2.Environment | None = None


def _env() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = _environment()
    return _ENV


def _render(template: str, **context: object) -> str:
    try:
        return _env().get_template(template).render(**context)
    except jinja2.TemplateError as exc:
        where = f"imagesmith/templates/{template}"
        line = getattr(exc, "lineno", None)
        raise RenderError(
            f"{where}{':' + str(line) if line else ''}: {exc}",
            hint="a template of this imagesmith installation is broken: reinstall imagesmith "
            "or fix the template",
        ) from None


def site_packages(cell: Cell) -> str:
    return f"{cell.venv}/lib/python{cell.python}/site-packages"


def render_cell_files(cell: Cell) -> dict[str, str]:
    """All files of *cell*'s build context, keyed by path relative to the context folder."""
    runtime_mirror = MIRROR_PROFILES[cell.mirror_runtime]
    build_mirror = MIRROR_PROFILES[cell.mirror_build]
    context = {
        "cell": cell,
        "build_mirror": build_mirror,
        "runtime_mirror": runtime_mirror,
        "build_apt_mirror": build_mirror.apt_root,
        "runtime_apt_mirror": runtime_mirror.apt_root,
        "site_packages": site_packages(cell),
        "nccl_tests_bin": NCCL_TESTS_BIN,
        "cuda_major": cell.cuda.split(".")[0],
        "cuda_home": f"{site_packages(cell)}/nvidia/cu{cell.cuda.split('.')[0]}",
    }
    # No cell id in the pin files: the runtime and devel cells of one (torch, variant, python) COPY the same
    # requirements.txt, so the torch layer is one layer (built once, pushed once).
    # The lock's name, not its path: the same pins render the same file (and share the torch layer) in any
    # project.
    header = f"# {HEADER}\n# pins from lock {PurePosixPath(cell.lock_file).name}\n"
    files = {
        "Dockerfile": _render("Dockerfile.j2", **context),
        "entrypoint.sh": _render("entrypoint.sh.j2", **context),
        "apt-mirror.sh": _render("apt-mirror.sh", **context),
        "requirements.txt": header + "".join(f"{n}=={v}\n" for n, v in cell.pins),
        "builder-requirements.txt": header + "".join(f"{n}=={v}\n" for n, v in cell.builder_pins),
    }
    for folder in FILLED_AT_BUILD:
        files[f"{folder}/README.md"] = _render("context-README.md.j2", folder=folder, **context)
    if runtime_mirror.name != "none":
        files["mirror/pip.conf"] = _render("pip.conf.j2", **context)
        files["mirror/uv.toml"] = _render("uv.toml.j2", **context)
        files["mirror/condarc"] = _render("condarc.j2", **context)
    for name, text in files.items():
        if HEADER not in text.split("\n", 3)[1] + text.split("\n", 3)[0]:
            raise RenderError(
                f"template output {name} of {cell.id} lacks the '{HEADER}' header",
                hint="every template must start with the GENERATED header (see imagesmith/templates/)",
            )
    return files


def render_plan(plan: BuildPlan, project: Project) -> dict[Path, str]:
    """Every file of every cell of *plan*, keyed by absolute path under *project*'s root."""
    out: dict[Path, str] = {}
    for cell in plan.cells:
        for rel, text in render_cell_files(cell).items():
            out[project.path(cell.context) / rel] = text
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
            # <cell>/<folder>/<file>: files the build step drops into sources/wheels/certs are not ours
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
    for path in drift.extra:
        path.unlink()
    for path in drift.missing + drift.differing:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered[path], encoding="utf-8")
        if path.name.endswith(".sh"):
            path.chmod(0o755)
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
