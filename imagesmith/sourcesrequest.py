"""The fetch-sources command's layer between its flags and the source cache (issue 31): one typed request
(:class:`SourcesRequest`, what ``imagesmith fetch-sources`` was given), the rules of the flags in one place
(:func:`prepare`: every bad value or combination is one ``ConfigError`` naming the flag — its ``field`` —,
in a fixed order, before an archive is fetched: the matrices are read first), the run (:func:`fetch`: each
pinned archive cached, its sha256 checked) and one typed result (:class:`SourcesResult`) the command prints.

What only the command may do — find the project (the root's ``--project``) — it hands in as a function
(``project_of``); a run says what it cached archive by archive through ``echo`` (the command's
``typer.echo``). Nothing heavy is imported at module level: ``imagesmith --help`` loads this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesmith.errors import ConfigError, ImagesmithError

if TYPE_CHECKING:
    from imagesmith.project import Project
    from imagesmith.sources import SourceArchive

#: ``--matrix`` → the project it is in (the command's: the root's ``--project``, ``$IMAGESMITH_PROJECT``)
ProjectOf = Callable[[str | None], "Project"]


#: how a run says what it does: a line (the command's ``typer.echo``)
Echo = Callable[[str], Any]


def _silent(message: str) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class SourcesRequest:
    """What ``imagesmith fetch-sources`` was given: its flags as typed values (no ``--matrix``: every matrix
    of the project; no ``--from``/``--from-git``: the network)."""

    matrix: Sequence[str] = ()
    from_git: Path | None = None
    from_paths: Sequence[Path] = ()
    mirror: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A request the rules accepted: the project, the archives its matrices pin (each once), the mirror
    templates in the order they are tried (``--mirror``, the user config's, the project's)."""

    project: Project
    archives: Sequence[SourceArchive]
    mirrors: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class Cached:
    """One archive in the cache: its label, path, how it got there, its sha256."""

    label: str
    path: Path
    how: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class SourcesResult:
    """What a run did: each archive cached (in order), and the cache folder."""

    cached: Sequence[Cached]
    cache: Path


def prepare(request: SourcesRequest, *, project_of: ProjectOf) -> Prepared:
    """The rules of the flags, in one place and in this order: ``--from-git`` with ``--from``, each ``--from``
    a folder or a regular file, ``--from-git`` a folder, the project (``--matrix`` names where it is), a
    matrix to read (none in the project: an error), ``--mirror`` templates, then each matrix read and the
    archive it pins."""
    from imagesmith.config import load_config
    from imagesmith.matrix import load_matrix
    from imagesmith.project import check_mirror_template
    from imagesmith.sources import nccl_tests_archive

    r = request
    if r.from_git is not None and r.from_paths:
        raise ConfigError(
            "--from-git and --from are exclusive", hint="give one local source", field="--from-git"
        )
    _check_local_sources(r.from_git, r.from_paths)
    project = project_of(r.matrix[0] if r.matrix else None)
    names = list(r.matrix) or project.matrix_names()
    if not names:
        raise ConfigError(
            f"project {project.root}: no matrix in {project.rel(project.matrices_dir)}/",
            hint="add a matrix file (`imagesmith init` writes a working example)",
            field="--matrix",
        )
    try:
        mirrors = [check_mirror_template(t, "--mirror") for t in r.mirror]
    except ImagesmithError as exc:
        raise exc.replace(field=exc.field or "--mirror") from None
    mirrors += [*load_config().source_mirrors, *project.source_mirrors]
    archives: dict[str, SourceArchive] = {}
    for name in names:
        archive = nccl_tests_archive(load_matrix(name, project=project).nccl_tests)
        archives.setdefault(archive.file_name, archive)
    return Prepared(project=project, archives=tuple(archives.values()), mirrors=tuple(mirrors))


def fetch(request: SourcesRequest, p: Prepared, *, echo: Echo = _silent) -> SourcesResult:
    """Cache each archive of *p* (from ``--from-git``, ``--from``, the mirrors or its pinned URL), its
    sha256 checked; *echo* told of each one as it is there."""
    from imagesmith.sources import ensure_cached, sources_dir

    cached = []
    for archive in p.archives:
        path, how = ensure_cached(
            archive, from_git=request.from_git, from_paths=request.from_paths, mirrors=list(p.mirrors)
        )
        one = Cached(label=archive.label, path=path, how=how, sha256=archive.sha256)
        echo(cached_line(one))
        cached.append(one)
    return SourcesResult(cached=tuple(cached), cache=sources_dir())


def cached_line(c: Cached) -> str:
    """The line ``fetch-sources`` prints for an archive in the cache."""
    return f"{c.label}: {c.path} ({c.how}, sha256 {c.sha256[:16]}… ok)"


def _check_local_sources(from_git: Path | None, from_paths: Sequence[Path]) -> None:
    """--from and --from-git name what is on this machine: a path that is not there, or not a folder or a
    regular file (a FIFO, a device), is a bad flag (exit 2), found before any matrix is read."""
    from imagesmith.inputs import is_regular_file

    hint = "give a folder of source archives or one archive (nccl-tests-<commit>.tar.gz)"
    for given in from_paths:
        try:
            there, folder = given.exists(), given.is_dir()
        except OSError:
            there, folder = False, False
        if not there:
            raise ConfigError(f"--from {given}: no such file or folder", hint=hint, field="--from")
        if not folder and not is_regular_file(given):
            raise ConfigError(
                f"--from {given}: neither a folder nor a regular file", hint=hint, field="--from"
            )
    if from_git is not None:
        try:
            folder = from_git.is_dir()
        except OSError:
            folder = False
        if not folder:
            raise ConfigError(
                f"--from-git {from_git}: not a folder",
                hint="give a local clone of nccl-tests (git clone …)",
                field="--from-git",
            )
