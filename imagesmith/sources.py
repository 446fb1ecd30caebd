"""Pinned, checksummed source archives (nccl-tests, …) and their local cache.

Each archive is identified by a pinned commit and the sha256 of its *uncompressed* tar stream, i.e. of
``git archive --format=tar --prefix=<name>-<commit>/ <commit>``, whose content is identical to the forge's
``/archive/<commit>.tar.gz`` once gunzipped.
``imagesmith fetch-sources`` fills the cache from one of:

- the network: the source-mirror URL templates (``--mirror``, user config ``[sources] mirrors`` or
  ``$IMAGESMITH_SOURCE_MIRRORS``, then the project's ``imagesmith.toml``), in order, then the pinned URL;
- a local git clone (``--from-git DIR``);
- a folder or file of archives (``--from PATH``: ``<name>-<commit>.tar``, ``.tar.gz``, or the forge's
  ``<commit>.tar.gz``; an explicitly named file is taken whatever its name).

The sha256 is always verified before anything lands in the cache. Builds read only the cache, and a missing
or mismatching entry is one :class:`~imagesmith.errors.SourceCacheError` that says how to fill it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import requests

from imagesmith import http
from imagesmith.config import cache_root
from imagesmith.errors import SourceCacheError

_CHUNK = 1 << 20


@dataclass(frozen=True, kw_only=True)
class SourceArchive:
    """One pinned archive. ``file_name`` is how it is stored in the cache and in a build context."""

    name: str
    version: str
    commit: str
    sha256: str
    url: str

    @property
    def prefix(self) -> str:
        return f"{self.name}-{self.commit}"

    @property
    def file_name(self) -> str:
        return f"{self.prefix}.tar"

    @property
    def label(self) -> str:
        return f"{self.name} {self.version} ({self.commit[:12]})"


def nccl_tests_archive(pin: object) -> SourceArchive:
    """The archive for a matrix's ``nccl_tests`` pin (:class:`imagesmith.matrix.NcclTestsPin`)."""
    return SourceArchive(
        name="nccl-tests",
        version=str(getattr(pin, "version")),  # noqa: B009 - duck-typed to keep this module free of matrix imports
        commit=str(getattr(pin, "commit")),  # noqa: B009
        sha256=str(getattr(pin, "sha256")),  # noqa: B009
        url=str(getattr(pin, "url")),  # noqa: B009
    )


def sources_dir() -> Path:
    """``$IMAGESMITH_CACHE/sources`` (default ``~/.cache/imagesmith/sources``)."""
    return cache_root() / "sources"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _fill_hint(archive: SourceArchive, matrix: str | None) -> str:
    m = f" --matrix {matrix}" if matrix else ""
    return (
        f"run `imagesmith fetch-sources{m}` where {archive.url} (or a source mirror set in config) can be "
        f"reached, `imagesmith fetch-sources{m} --from DIR` with a folder holding {archive.file_name}, or "
        f"`imagesmith fetch-sources{m} --from-git DIR` with a clone of {archive.name} that has commit "
        f"{archive.commit}"
    )


def mirror_urls(archive: SourceArchive, templates: Sequence[str]) -> list[str]:
    """The URLs the mirror *templates* give for *archive* (:data:`imagesmith.project.MIRROR_FIELDS`)."""
    parts = urlsplit(archive.url)
    fields = {
        "url": archive.url,
        "path": parts.path,
        "host": parts.netloc,
        "name": archive.name,
        "version": archive.version,
        "commit": archive.commit,
        "file": archive.file_name,
    }
    out: list[str] = []
    for template in templates:
        url = template.format_map(fields)
        if url not in out:
            out.append(url)
    return out


def cached_archive(archive: SourceArchive, *, cache: Path | None = None, matrix: str | None = None) -> Path:
    """Path of *archive* in the cache after checking its sha256. Never touches the network."""
    directory = cache or sources_dir()
    path = directory / archive.file_name
    if not path.is_file():
        raise SourceCacheError(
            f"source archive {archive.label} is not in the source cache ({path} is missing)",
            hint=_fill_hint(archive, matrix),
        )
    actual = _sha256_file(path)
    if actual != archive.sha256:
        raise SourceCacheError(
            f"source archive {path} has sha256 {actual}, the pin says {archive.sha256} ({archive.label})",
            hint=f"delete it and {_fill_hint(archive, matrix)}",
        )
    return path


class _HashingWriter:
    """Writes to a temp file in the cache directory and hashes on the way; ``commit`` renames into place."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=directory, suffix=".part")
        self.path = Path(name)
        self.file: IO[bytes] = os.fdopen(fd, "wb")
        self.hash = hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.hash.update(data)
        self.file.write(data)

    def commit(self, archive: SourceArchive, target: Path, origin: str) -> Path:
        self.file.close()
        actual = self.hash.hexdigest()
        if actual != archive.sha256:
            self.path.unlink(missing_ok=True)
            raise SourceCacheError(
                f"{origin} gave {archive.label} with sha256 {actual}, the pin says {archive.sha256}",
                hint="check the pin (sha256 of `git archive --format=tar --prefix=<name>-<commit>/ <commit>`)"
                " and the source",
            )
        self.path.replace(target)
        return target

    def abort(self) -> None:
        self.file.close()
        self.path.unlink(missing_ok=True)


def fetch_from_git(archive: SourceArchive, git_dir: Path, *, cache: Path | None = None) -> Path:
    """Fill the cache from a local clone (bare or not) with ``git archive``; checks the sha256."""
    directory = cache or sources_dir()
    target = directory / archive.file_name
    if not git_dir.exists():
        raise SourceCacheError(
            f"--from-git: {git_dir} does not exist", hint="give a clone of " + archive.name
        )
    writer = _HashingWriter(directory)
    cmd = [
        "git",
        f"--git-dir={_git_dir(git_dir)}",
        "archive",
        "--format=tar",
        f"--prefix={archive.prefix}/",
        archive.commit,
    ]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        writer.abort()
        raise SourceCacheError("git is not installed", hint="apt-get install git") from exc
    out, errs = proc.stdout, proc.stderr
    assert out is not None
    assert errs is not None
    for chunk in iter(lambda: out.read(_CHUNK), b""):
        writer.write(chunk)
    err = errs.read().decode(errors="replace").strip()
    if proc.wait() != 0:
        writer.abort()
        raise SourceCacheError(
            f"git archive of {archive.label} from {git_dir} failed: {err}",
            hint=f"the clone must contain commit {archive.commit} (git fetch --tags)",
        )
    return writer.commit(archive, target, f"git archive in {git_dir}")


def _git_dir(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


def fetch_from_url(
    archive: SourceArchive, *, url: str | None = None, cache: Path | None = None, timeout: float = 60.0
) -> Path:
    """Fill the cache from *url* (default: the pinned URL; ``.tar.gz`` is gunzipped on the fly); checks the
    sha256.
    """
    source = url or archive.url
    directory = cache or sources_dir()
    target = directory / archive.file_name
    writer = _HashingWriter(directory)
    try:
        # a short connect timeout: an unreachable host (a blocked forge) fails fast, the next mirror is tried
        with http.get(source, http.SOURCE_ARCHIVE.with_timeout(timeout), stream=True) as resp:
            if resp.status_code != 200:
                raise SourceCacheError(
                    f"GET {source} answered HTTP {resp.status_code} for {archive.label}",
                    hint=_fill_hint(archive, None),
                )
            for chunk in _maybe_gunzip(resp.iter_content(_CHUNK), source):
                writer.write(chunk)
    except requests.RequestException as exc:
        writer.abort()
        raise SourceCacheError(
            f"cannot download {archive.label} from {source}: {type(exc).__name__}",
            hint=_fill_hint(archive, None),
        ) from exc
    except SourceCacheError:
        writer.abort()
        raise
    return writer.commit(archive, target, source)


def fetch_from_network(
    archive: SourceArchive, mirrors: Sequence[str] = (), *, cache: Path | None = None, timeout: float = 60.0
) -> tuple[Path, str]:
    """Try each mirror URL of *mirrors* (templates), then the pinned URL; the first whose content has the
    pinned sha256 wins. One error listing every attempt when none does.
    """
    failures: list[str] = []
    for url in [*mirror_urls(archive, mirrors), archive.url]:
        try:
            return fetch_from_url(archive, url=url, cache=cache, timeout=timeout), f"from {url}"
        except SourceCacheError as exc:
            failures.append(exc.message)
    raise SourceCacheError(
        f"could not fetch {archive.label} from any of {len(failures)} URL(s):\n    "
        + "\n    ".join(failures),
        hint=_fill_hint(archive, None),
    )


def _chunks(f: IO[bytes]) -> Iterator[bytes]:
    while chunk := f.read(_CHUNK):
        yield chunk


def _candidates(archive: SourceArchive, path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    names = [
        archive.file_name,
        f"{archive.file_name}.gz",
        f"{archive.prefix}.tar.gz",
        f"{archive.commit}.tar.gz",
        f"{archive.commit}.tar",
    ]
    return [path / n for n in dict.fromkeys(names) if (path / n).is_file()]


def fetch_from_paths(archive: SourceArchive, paths: Sequence[Path], *, cache: Path | None = None) -> Path:
    """Fill the cache from a folder of archives or an archive file (gzip or plain tar); checks the sha256.

    A file whose checksum does not match is skipped and named in the error when no other one matches.
    """
    directory = cache or sources_dir()
    target = directory / archive.file_name
    mismatched: list[str] = []
    for given in paths:
        if not given.exists():
            raise SourceCacheError(
                f"--from {given}: no such file or folder",
                hint="give a folder of source archives or one archive",
            )
        for candidate in _candidates(archive, given):
            if candidate == given and not _looks_like_archive(candidate):  # a file given by name
                mismatched.append(f"{candidate}: not a gzip or tar archive")
                continue
            writer = _HashingWriter(directory)
            try:
                with candidate.open("rb") as f:
                    for chunk in _maybe_gunzip(_chunks(f), str(candidate)):
                        writer.write(chunk)
                return writer.commit(archive, target, str(candidate))
            except SourceCacheError as exc:
                writer.abort()
                mismatched.append(exc.message)
            except OSError as exc:
                writer.abort()
                mismatched.append(f"{candidate}: cannot read: {exc}")
    looked = ", ".join(str(p) for p in paths)
    detail = ("; " + "; ".join(mismatched)) if mismatched else ""
    raise SourceCacheError(
        f"{archive.label}: no archive with sha256 {archive.sha256[:16]}… in {looked}{detail}",
        hint=f"put {archive.file_name} (or the forge's {archive.commit}.tar.gz) there, or "
        + _fill_hint(archive, None),
    )


def _looks_like_archive(path: Path) -> bool:
    """A gzip stream (1f 8b) or a POSIX tar (``ustar`` at offset 257); anything else given to --from (a key,
    a text file) is named as such, not as "an archive with another sha256". Never opens a FIFO."""
    from imagesmith.inputs import is_regular_file

    if not is_regular_file(path):
        return False
    try:
        with path.open("rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return head.startswith(b"\x1f\x8b") or head[257:262] == b"ustar"


def _maybe_gunzip(chunks: Iterable[bytes], url: str) -> Iterator[bytes]:
    it = iter(chunks)
    first = next(it, b"")
    if not first.startswith(b"\x1f\x8b"):
        yield first
        yield from it
        return
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        yield d.decompress(first)
        for chunk in it:
            yield d.decompress(chunk)
        yield d.flush()
    except zlib.error as exc:
        raise SourceCacheError(
            f"{url}: corrupt gzip stream ({exc})", hint="download it again or use another source"
        ) from exc


def ensure_cached(
    archive: SourceArchive,
    *,
    from_git: Path | None = None,
    from_paths: Sequence[Path] = (),
    mirrors: Sequence[str] = (),
    cache: Path | None = None,
) -> tuple[Path, str]:
    """Fill *archive* into the cache unless a valid copy is there. Returns (path, what was done).

    An explicit local source (*from_git*, *from_paths*) is used alone: when it lacks the archive that is an
    error, never a silent download.
    """
    directory = cache or sources_dir()
    path = directory / archive.file_name
    if path.is_file() and _sha256_file(path) == archive.sha256:
        return path, "already cached"
    if from_git is not None:
        return fetch_from_git(archive, from_git, cache=directory), f"from git {from_git}"
    if from_paths:
        found = fetch_from_paths(archive, from_paths, cache=directory)
        return found, "from " + ", ".join(str(p) for p in from_paths)
    return fetch_from_network(archive, mirrors, cache=directory)
