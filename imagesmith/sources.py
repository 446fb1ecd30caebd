"""Pinned, checksummed source archives (nccl-tests, …) and their local cache.

Each archive is identified by a pinned commit and the sha256 of its *uncompressed* tar stream, i.e. of
``git archive --format=tar --prefix=<name>-<commit>/ <commit>``, whose content is identical to the forge's
``/archive/<commit>.tar.gz`` once gunzipped.
``imagesmith fetch-sources`` fills the cache from the pinned URL (where
the network allows) or from a local git clone (``--from-git``); builds read only the cache, and a missing or
mismatching entry is one :class:`~imagesmith.errors.SourceCacheError` that says how to fill it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import requests

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
        f"run `imagesmith fetch-sources{m}` where {archive.url} can be reached, or "
        f"`imagesmith fetch-sources{m} --from-git DIR` with a clone of {archive.name} "
        f"that has commit {archive.commit}"
    )


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


def fetch_from_url(archive: SourceArchive, *, cache: Path | None = None, timeout: float = 60.0) -> Path:
    """Fill the cache from the pinned URL (``.tar.gz`` is gunzipped on the fly); checks the sha256."""
    directory = cache or sources_dir()
    target = directory / archive.file_name
    writer = _HashingWriter(directory)
    try:
        with requests.get(archive.url, stream=True, timeout=timeout) as resp:
            if resp.status_code != 200:
                raise SourceCacheError(
                    f"GET {archive.url} answered HTTP {resp.status_code} for {archive.label}",
                    hint=_fill_hint(archive, None),
                )
            for chunk in _maybe_gunzip(resp.iter_content(_CHUNK), archive.url):
                writer.write(chunk)
    except requests.RequestException as exc:
        writer.abort()
        raise SourceCacheError(
            f"cannot download {archive.label} from {archive.url}: {type(exc).__name__}",
            hint=_fill_hint(archive, None),
        ) from exc
    except SourceCacheError:
        writer.abort()
        raise
    return writer.commit(archive, target, archive.url)


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
        raise SourceCacheError(f"{url}: corrupt gzip stream ({exc})", hint="try again") from exc


def ensure_cached(
    archive: SourceArchive, *, from_git: Path | None = None, cache: Path | None = None
) -> tuple[Path, str]:
    """Fill *archive* into the cache unless a valid copy is there. Returns (path, what was done)."""
    directory = cache or sources_dir()
    path = directory / archive.file_name
    if path.is_file() and _sha256_file(path) == archive.sha256:
        return path, "already cached"
    if from_git is not None:
        return fetch_from_git(archive, from_git, cache=directory), f"from git {from_git}"
    return fetch_from_url(archive, cache=directory), f"from {archive.url}"
