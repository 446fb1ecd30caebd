"""The project workspace: an ``imagesmith.toml`` at a project's root and the folders it names.

A project owns its matrices, its registries file, its lock files, its generated ``dockerfiles/`` and its
source mirrors. It is found the way cog finds ``cog.yaml``: ``--project DIR`` first, then
``$IMAGESMITH_PROJECT``, then the first ``imagesmith.toml`` walking up from the working directory (or from
an explicitly named matrix file). Every command that reads or writes project files receives one
:class:`Project` and passes it on (load → plan → render → lock → build → release); nothing below the
CLI guesses a path from where imagesmith itself is installed. Packaged data (compat tables, templates,
reference locks, the validation suite) is read only through :mod:`importlib.resources`.

``imagesmith.toml``::

    schema = 1
    name = "gpu-images"             # default: the folder's name
    default_matrix = "smoke"        # --matrix when none is given (default: the only matrix, if just one)

    [paths]                         # relative to this file's folder; these are the defaults
    matrices = "matrices"
    dockerfiles = "dockerfiles"
    locks = "locks"
    registries = "matrices/registries.toml"
    release_index = "release/index.json"   # the index release extends and rewrites (commit it)

    [bases]
    escrow = "local-plain"          # a registry of the registries file: lock --bases copies every pinned
                                    # base there by digest; a build whose upstream tag is gone uses the copy

    [sources]
    # URL templates tried, in order, before a source archive's pinned URL (GitHub through a mirror):
    # {url} the pinned URL, {path} its path, {host} its host, {name} {version} {commit} {file}
    mirrors = ["https://mirror.example/{url}"]
"""

from __future__ import annotations

import datetime
import difflib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from imagesmith import inputs, schema, settings
from imagesmith.errors import ConfigError, MatrixError

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - python 3.10
    pass

PROJECT_FILE: Final[str] = "imagesmith.toml"
#: how long a release index is valid by default (``[release] index_valid_for``; the nightly renews it)
DEFAULT_INDEX_VALID_DAYS: Final[int] = 14
#: the longest project name (it is the default registry namespace: image names hold 255 characters in all)
PROJECT_NAME_MAX: Final[int] = 64
PROJECT_ENV: Final[str] = "IMAGESMITH_PROJECT"
SCHEMA: Final[int] = 1
REGISTRIES_FILE: Final[str] = "registries.toml"

DEFAULT_PATHS: Final[Mapping[str, str]] = {
    "matrices": "matrices",
    "dockerfiles": "dockerfiles",
    "locks": "locks",
    "registries": "matrices/registries.toml",
    "release_index": "release/index.json",
}
#: placeholders a source mirror template may use (see :func:`imagesmith.sources.mirror_urls`)
MIRROR_FIELDS: Final[tuple[str, ...]] = ("url", "path", "host", "name", "version", "commit", "file")
_FIELD = re.compile(r"\{([^{}]*)\}")


class ProjectError(ConfigError):
    """No project found, or its ``imagesmith.toml`` is wrong."""


def _nearest(value: str, choices: tuple[str, ...] | list[str]) -> str:
    got = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.0)
    return got[0] if got else choices[0]


def project_name(text: str) -> str:
    """A folder name made into a registry-safe project name (lowercase, ``[a-z0-9._-]``)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")[:PROJECT_NAME_MAX].strip("-._")
    return name or "imagesmith-project"


@dataclass(frozen=True, kw_only=True)
class Project:
    """A resolved project. Every path is absolute; :meth:`rel` shows one relative to the root."""

    root: Path
    file: Path
    name: str
    default_matrix: str | None
    matrices_dir: Path
    dockerfiles_dir: Path
    locks_dir: Path
    registries_file: Path
    source_mirrors: tuple[str, ...] = ()
    #: the release index ``imagesmith release`` extends and rewrites (``[paths].release_index``): the one
    #: place the previous index comes from (never "the first registry that has one")
    release_index_file: Path = Path("release/index.json")
    #: ``[release] trusted_keys``: public keys whose validation attestations release accepts
    trusted_keys: tuple[Path, ...] = ()
    #: ``[bases] escrow``: the registry (a name of the registries file) every pinned base is copied into
    bases_escrow: str | None = None
    #: ``[release] index_key``: the public key the release index must be signed with (pick, index): a path
    #: inside the project, or the PEM text itself (a str starting with ``-----BEGIN``)
    index_key: Path | str | None = None
    #: ``[release] index_valid_for``: how long an index release writes stays valid (default 14 days)
    index_valid_for: datetime.timedelta = datetime.timedelta(days=DEFAULT_INDEX_VALID_DAYS)

    # -- paths ---------------------------------------------------------------------------------------
    def rel(self, path: Path) -> str:
        """*path* relative to the project root when it is inside it, else as it is."""
        lexical = Path(os.path.normpath(path if path.is_absolute() else Path.cwd() / path))
        for candidate in (lexical, inputs.resolved(path)):
            if candidate.is_relative_to(self.root):
                return candidate.relative_to(self.root).as_posix()
        return str(path)

    @property
    def dockerfiles_rel(self) -> str:
        """``dockerfiles`` (or what ``[paths].dockerfiles`` says), relative to the root, POSIX form."""
        return self.rel(self.dockerfiles_dir)

    def matrix_dir(self, matrix: str) -> Path:
        """Where the build contexts of matrix *matrix* are rendered."""
        return self.dockerfiles_dir / matrix

    def path(self, rel: str) -> Path:
        """A project-relative path (as a plan's ``cell.context``) made absolute."""
        return self.root / rel

    # -- matrices ------------------------------------------------------------------------------------
    def matrix_names(self) -> list[str]:
        if not self.matrices_dir.is_dir():
            return []
        return sorted(
            p.stem
            for p in self.matrices_dir.glob("*.toml")
            if inputs.resolved(p) != inputs.resolved(self.registries_file)
            and p.name != REGISTRIES_FILE
            and p.is_file()
        )

    def resolve_matrix_name(self, matrix: str | None) -> str:
        """``--matrix`` as given, or the project's default matrix."""
        if matrix:
            return matrix
        if self.default_matrix:
            return self.default_matrix
        names = self.matrix_names()
        if len(names) == 1:
            return names[0]
        raise ProjectError(
            f"{self.file}: no --matrix given and no default_matrix set"
            + (f" (matrices: {', '.join(names)})" if names else " (no matrices yet)"),
            hint=(
                f"pass --matrix NAME or set default_matrix = {names[0]!r} in {PROJECT_FILE}"
                if names
                else f"add a matrix file to {self.rel(self.matrices_dir)}/ (see `imagesmith init`)"
            ),
        )

    def matrix_path(self, name_or_path: str | Path) -> Path:
        """``NAME`` → ``<matrices>/NAME.toml``; anything with a slash or ending in ``.toml`` is a path."""
        text = str(name_or_path)
        is_path = "/" in text or text.endswith(".toml")
        path = Path(text) if is_path else self.matrices_dir / f"{text}.toml"
        try:
            if path.is_file():
                if not is_path and inputs.resolved(path) == inputs.resolved(self.registries_file):
                    raise MatrixError(
                        f"{path}: matrix {text!r} is the project's registries file, not a matrix",
                        hint=f"give a matrix name ({', '.join(self.matrix_names()) or 'none yet'})",
                    )
                return path
            if path.exists():
                what = "a folder" if path.is_dir() else "not a regular file (a FIFO, a socket or a device)"
                raise MatrixError(
                    f"{path}: is {what}, not a matrix file",
                    hint="give a matrix NAME of the project or the path of a matrix TOML file",
                )
        except OSError as exc:  # a name longer than the file system allows, a NUL
            raise MatrixError(
                f"{text[:200]!r}: not a usable matrix name or path ({exc.strerror or exc})",
                hint="give a matrix NAME of the project or the path of a matrix file",
            ) from None
        known = self.matrix_names()
        if known:
            near = _nearest(path.stem, known)
            hint = f"nearest matrix: {near!r} (known in {self.rel(self.matrices_dir)}/: {', '.join(known)})"
        else:
            hint = (
                f"{self.rel(self.matrices_dir)}/ of project {self.root} holds no matrix: add one, "
                "or run `imagesmith init` for a working example"
            )
        raise MatrixError(f"{path}: no such matrix file", hint=hint)


# ------------------------------------------------------------------------------------------------------------
# loading


def is_file(path: Path) -> bool:
    """``path.is_file()``, False too where the path cannot even be asked about (a name longer than the file
    system allows, a NUL byte): user-given paths must end in imagesmith's errors, not OSError."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _relative(file: Path, key: str, value: object, root: Path) -> Path:
    leaf = key.split(".")[-1]
    example = DEFAULT_PATHS.get(leaf, "keys/validation.pub")
    if not isinstance(value, str) or not value.strip():
        raise ProjectError(
            f"{file}: {key} must be a non-empty path string",
            hint=f'e.g. {leaf.split("[")[0]} = "{example}"',
        )
    if not value.isprintable():
        raise ProjectError(
            f"{file}: {key} = {value[:200]!r} holds control characters (a NUL, a newline, an escape)",
            hint=f'give a plain relative path, e.g. {leaf.split("[")[0]} = "{example}"',
        )
    if Path(value).is_absolute() or value.startswith("~"):
        raise ProjectError(
            f"{file}: {key} = {value!r} is absolute: a project must work in any clone on any machine",
            hint=f"make it relative to {file.parent.name}/ (e.g. {example!r})",
        )
    # lexically, not resolved: a folder of the project may be a link (the link travels with the clone), and
    # what plans and fingerprints show of it stays project-relative wherever the link points
    resolved = Path(os.path.normpath(root / value))
    if not resolved.is_relative_to(root):
        raise ProjectError(
            f"{file}: {key} = {value!r} leads outside the project ({resolved}): a project must work in any "
            "clone, and a clone holds only what is inside its root",
            hint=f"keep it inside {root.name}/ (e.g. {example!r}); copy or link what is shared into the "
            "project",
        )
    return resolved


#: which ``[paths]`` keys name a folder (the others name a file)
_FOLDER_PATHS: Final[frozenset[str]] = frozenset({"matrices", "dockerfiles", "locks"})


def _check_path_kinds(file: Path, resolved: Mapping[str, Path]) -> None:
    """A ``[paths]`` folder that is a file (or a file that is a folder) is one error now, not a plan that
    silently finds no lock or a registries file read from the wrong place later."""
    for key, path in resolved.items():
        want_folder = key in _FOLDER_PATHS
        try:
            wrong = path.is_file() if want_folder else path.is_dir()
            odd = path.exists() and not (path.is_file() or path.is_dir())
        except OSError:
            wrong, odd = False, False
        if odd:  # a FIFO, a socket, a device: neither what this key names nor "missing"
            raise ProjectError(
                f"{file}: paths.{key} = {path} {inputs.not_a_file(path)}",
                hint=f'paths.{key} = "{DEFAULT_PATHS[key]}" (the default), or a path to a '
                + ("folder" if want_folder else "file"),
            )
        if wrong:
            raise ProjectError(
                f"{file}: paths.{key} = {path} is a {'file' if want_folder else 'folder'}, "
                f"not a {'folder' if want_folder else 'file'}",
                hint=f'paths.{key} = "{DEFAULT_PATHS[key]}" (the default), or a path to a '
                + ("folder" if want_folder else "file"),
            )


def check_mirror_template(template: str, origin: str) -> str:
    """A source-mirror URL template: http(s), only known ``{fields}``. Returns it unchanged."""
    if not isinstance(template, str) or not re.match(r"^https?://[^/{}]+", template):
        raise ProjectError(
            f"{origin}: {template!r} is not an http(s) URL template",
            hint="e.g. https://mirror.example/{url} or https://mirror.example/github{path}",
        )
    for fld in _FIELD.findall(template):
        if fld not in MIRROR_FIELDS:
            raise ProjectError(
                f"{origin}: {template!r} uses {{{fld}}}",
                hint=f"nearest field: {{{_nearest(fld, list(MIRROR_FIELDS))}}}; known: "
                + ", ".join(f"{{{f}}}" for f in MIRROR_FIELDS),
            )
    host = re.split(r"[/{]", template.split("://", 1)[1], maxsplit=1)[0]  # https://m.example{path} too
    rest = _FIELD.sub("", template)
    if (
        not re.fullmatch(schema.HOST_PORT, host)
        or any(c in rest for c in "{}")
        or not rest.isprintable()
        or any(c.isspace() for c in rest)
    ):
        raise ProjectError(
            f"{origin}: {template[:200]!r} is not an http(s) URL template"
            + (
                f" (host {host!r}: a DNS name or IPv4 address, optional port 1-65535)"
                if not re.fullmatch(schema.HOST_PORT, host)
                else " (an unmatched { or }, a space or a control character)"
            ),
            hint="e.g. https://mirror.example/{url} or https://mirror.example/github{path}",
        )
    return template


def _check_dockerfiles_folder(file: Path, root: Path, resolved: Mapping[str, Path]) -> None:
    """``render`` owns ``paths.dockerfiles`` (it deletes what the matrices no longer render there), so that
    folder must be a dedicated one inside the project: not the root, and holding none of the project's inputs.
    """
    out = resolved["dockerfiles"]
    for key in ("matrices", "locks"):
        if resolved[key] == root:
            raise ProjectError(
                f"{file}: paths.{key} = {resolved[key]} is the project root: {key} need a folder of their "
                "own (every .toml there would be read as one)",
                hint=f'paths.{key} = "{DEFAULT_PATHS[key]}" (the default), or another folder inside the '
                "project",
            )
    if out == root or not out.is_relative_to(root):
        raise ProjectError(
            f"{file}: paths.dockerfiles = {out} must be a folder inside the project, not "
            + ("its root" if out == root else "outside it"),
            hint='paths.dockerfiles = "dockerfiles" (render writes and prunes only there)',
        )
    for key in ("matrices", "locks", "registries"):
        other = resolved[key]
        if other == out or other.is_relative_to(out) or out.is_relative_to(other):
            raise ProjectError(
                f"{file}: paths.dockerfiles ({out.relative_to(root)}) overlaps paths.{key} ({other})",
                hint='give the generated files a folder of their own, e.g. "dockerfiles"',
            )


def load_project(file: Path) -> Project:
    """Read and check one ``imagesmith.toml``."""
    file = inputs.resolved(file)
    root = file.parent
    raw = inputs.read_user_text(file, "", error=ProjectError, hint="make the file readable UTF-8 TOML")
    text = schema.check_toml_text(raw, str(file), error=ProjectError)
    data = inputs.loads_toml(
        text, str(file), error=ProjectError, syntax_hint="fix the syntax at the line named"
    )
    schema.PROJECT.check(data, source=str(file), error=ProjectError)
    name = data.get("name", project_name(root.name))
    default_matrix = data.get("default_matrix")
    paths = data.get("paths", {})
    resolved = {
        key: _relative(file, f"paths.{key}", paths.get(key, default), root)
        for key, default in DEFAULT_PATHS.items()
    }
    _check_path_kinds(file, resolved)
    _check_dockerfiles_folder(file, root, resolved)
    mirrors = data.get("sources", {}).get("mirrors", [])
    checked = tuple(check_mirror_template(m, f"{file}: sources.mirrors") for m in mirrors)
    trusted_keys = tuple(
        _relative(file, f"release.trusted_keys[{i}]", v, root)
        for i, v in enumerate(data.get("release", {}).get("trusted_keys", []))
    )
    release = data.get("release", {})
    index_key: Path | str | None = None
    if "index_key" in release:
        raw_key = release["index_key"]
        index_key = (
            raw_key.strip()
            if raw_key.lstrip().startswith("-----BEGIN")
            or re.fullmatch(r"(?i)\s*sha256:[0-9a-f]{64}\s*", raw_key)
            else _relative(file, "release.index_key", raw_key, root)
        )
    valid_for = parse_valid_for(release.get("index_valid_for"))
    if default_matrix is not None and (
        resolved["matrices"] / f"{default_matrix}.toml" == resolved["registries"]
        or default_matrix == Path(REGISTRIES_FILE).stem
    ):
        raise ProjectError(
            f"{file}: default_matrix = {default_matrix!r} names the registries file, not a matrix",
            hint="name a matrix file of "
            f"{resolved['matrices'].relative_to(root).as_posix() or '.'}/, or remove default_matrix",
        )
    if default_matrix is not None and not is_file(resolved["matrices"] / f"{default_matrix}.toml"):
        default_file = resolved["matrices"] / f"{default_matrix}.toml"
        kind = inputs.path_kind(default_file)
        raise ProjectError(
            f"{file}: default_matrix = {default_matrix!r} but {default_file} "
            + (f"is {kind}, not a regular file" if kind else "does not exist"),
            hint=f"make {default_file} the matrix's TOML file, or remove default_matrix"
            if kind
            else "name a matrix that exists, or remove default_matrix",
        )
    return Project(
        root=root,
        file=file,
        name=name,
        default_matrix=default_matrix,
        matrices_dir=resolved["matrices"],
        dockerfiles_dir=resolved["dockerfiles"],
        locks_dir=resolved["locks"],
        registries_file=resolved["registries"],
        source_mirrors=checked,
        release_index_file=resolved["release_index"],
        trusted_keys=trusted_keys,
        bases_escrow=data.get("bases", {}).get("escrow"),
        index_key=index_key,
        index_valid_for=valid_for,
    )


def parse_valid_for(value: str | None) -> datetime.timedelta:
    """``[release] index_valid_for`` (``14d``, ``36h``; the schema checked its shape) as a duration."""
    if not value:
        return datetime.timedelta(days=DEFAULT_INDEX_VALID_DAYS)
    number, unit = int(value[:-1]), value[-1]
    return datetime.timedelta(days=number) if unit == "d" else datetime.timedelta(hours=number)


def _refuse_project_path(origin: str, given: str, path: Path, file: Path) -> None:
    """Why ``--project``/``$IMAGESMITH_PROJECT`` names no project, each case worded as what it is: a path
    that is not a folder (a FIFO, a file) is not one ``init`` could make a project in."""
    try:
        exists, folder = path.exists(), path.is_dir()
        file_kind = inputs.path_kind(file)
    except OSError:
        exists, folder, file_kind = False, False, None
    if not exists and os.path.lexists(path):
        raise ProjectError(
            f"{origin} {given}: a symbolic link to nothing (dangling, or a loop), not a folder",
            hint=f"point {origin} at a project root (the folder holding {PROJECT_FILE})",
        )
    if exists and not folder and path.name != PROJECT_FILE:
        raise ProjectError(
            f"{origin} {given}: not a folder",
            hint=f"point {origin} at a project root (the folder holding {PROJECT_FILE})",
        )
    if file_kind is not None:
        raise ProjectError(
            f"{origin} {given}: {file} is {file_kind}, not the project file",
            hint=f"make {file} the project's TOML file (`imagesmith init` writes one)",
        )
    raise ProjectError(
        f"{origin} {given}: no {PROJECT_FILE} there",
        hint=f"run `imagesmith init {given}` to make one, or point {origin} at a project root",
    )


def find_project_file(start: Path) -> Path | None:
    """The first ``imagesmith.toml`` in *start* or one of its parents. One that is a folder (or a FIFO) is an
    error naming it, not "no imagesmith.toml above"."""
    here = inputs.resolved(start)
    for folder in (here, *here.parents):
        candidate = folder / PROJECT_FILE
        if candidate.is_file():
            return candidate
        try:
            odd = candidate.exists()
        except OSError:
            odd = False
        if odd:
            what = "a folder" if candidate.is_dir() else "not a regular file"
            raise ProjectError(
                f"{candidate} is {what}, not the project file",
                hint=f"remove or rename it; {PROJECT_FILE} is a TOML file (`imagesmith init` writes one)",
            )
    return None


def discover(
    explicit: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    near: Path | None = None,
) -> Project:
    """The project to work in: *explicit* (``--project``), ``$IMAGESMITH_PROJECT``, the first
    ``imagesmith.toml`` walking up from *cwd*, then from *near* (a matrix file named by path).
    """
    env = os.environ if env is None else env
    for origin, given in (("--project", explicit), (PROJECT_ENV, settings.get(PROJECT_ENV, env=env) or None)):
        if given is None:
            continue
        path = Path(given).expanduser()
        file = path if path.name == PROJECT_FILE and path.is_file() else path / PROJECT_FILE
        if not file.is_file():
            _refuse_project_path(origin, str(given), path, file)
        return load_project(file)
    start = cwd or Path.cwd()
    found = find_project_file(start)
    if found is None and near is not None:
        found = find_project_file(near.parent if near.suffix else near)
    if found is None:
        raise ProjectError(
            f"no {PROJECT_FILE} in {inputs.resolved(start)} or any folder above it",
            hint=f"run `imagesmith init` here (or cd into a project), or pass --project DIR "
            f"or set {PROJECT_ENV}",
        )
    return load_project(found)
