"""The source cache: git archive → checked sha256 → cache; builds read only the cache; clear errors."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
from pathlib import Path

import pytest

from imagesmith.errors import SourceCacheError
from imagesmith.sources import (
    SourceArchive,
    _maybe_gunzip,
    cached_archive,
    ensure_cached,
    fetch_from_git,
)

NCCL_MIRROR = Path("/work/.mirror/NVIDIA+nccl-tests/repo")


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_DATE": "2020-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "HOME": str(repo),
    }
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip()


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, str, str]:
    """A small git repository: (path, commit, sha256 of its git archive computed independently)."""
    repo = tmp_path / "src"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "Makefile").write_text("all:\n\techo built\n")
    _git(repo, "add", "Makefile")
    _git(repo, "commit", "-q", "-m", "one")
    commit = _git(repo, "rev-parse", "HEAD")
    tar = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", f"--prefix=demo-{commit}/", commit],
        capture_output=True,
        check=True,
    ).stdout
    return repo, commit, hashlib.sha256(tar).hexdigest()


def _archive(commit: str, sha: str) -> SourceArchive:
    return SourceArchive(
        name="demo", version="v1", commit=commit, sha256=sha, url="http://127.0.0.1:9/none.tar.gz"
    )


def test_missing_entry_is_one_clear_error_saying_how_to_fill_it(tmp_path: Path) -> None:
    archive = _archive("a" * 40, "0" * 64)
    with pytest.raises(SourceCacheError) as info:
        cached_archive(archive, cache=tmp_path, matrix="smoke")
    text = str(info.value)
    assert "is not in the source cache" in text
    assert "imagesmith fetch-sources --matrix smoke" in text
    assert "--from-git DIR" in text


def test_fill_from_git_then_builds_read_the_cache(clone: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, commit, sha = clone
    cache = tmp_path / "cache"
    archive = _archive(commit, sha)
    path, how = ensure_cached(archive, from_git=repo, cache=cache)
    assert how.startswith("from git")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    assert cached_archive(archive, cache=cache) == path
    assert ensure_cached(archive, from_git=repo, cache=cache)[1] == "already cached"


def test_wrong_pin_fails_and_leaves_nothing_in_the_cache(
    clone: tuple[Path, str, str], tmp_path: Path
) -> None:
    repo, commit, _ = clone
    cache = tmp_path / "cache"
    with pytest.raises(SourceCacheError, match="the pin says 1111"):
        fetch_from_git(_archive(commit, "1" * 64), repo, cache=cache)
    assert list(cache.iterdir()) == []


def test_corrupted_cache_entry_is_detected(clone: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, commit, sha = clone
    archive = _archive(commit, sha)
    path, _ = ensure_cached(archive, from_git=repo, cache=tmp_path)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(SourceCacheError, match="delete it and run"):
        cached_archive(archive, cache=tmp_path)


def test_unknown_commit_names_the_commit(clone: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, _, sha = clone
    with pytest.raises(SourceCacheError, match="must contain commit " + "b" * 40):
        fetch_from_git(_archive("b" * 40, sha), repo, cache=tmp_path)


def test_unreachable_url_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SourceCacheError, match="cannot download demo v1"):
        ensure_cached(_archive("c" * 40, "0" * 64), cache=tmp_path)


def test_gzip_stream_is_unpacked_to_the_tar_the_pin_is_over() -> None:
    raw = b"tar-bytes" * 1000
    packed = gzip.compress(raw)
    assert b"".join(_maybe_gunzip([packed[:100], packed[100:]], "u")) == raw
    assert b"".join(_maybe_gunzip([raw[:5], raw[5:]], "u")) == raw


@pytest.mark.skipif(not NCCL_MIRROR.exists(), reason=f"no local nccl-tests clone at {NCCL_MIRROR}")
def test_smoke_pin_matches_the_real_nccl_tests_clone(tmp_path: Path) -> None:
    from imagesmith.matrix import load_matrix
    from imagesmith.sources import nccl_tests_archive

    archive = nccl_tests_archive(load_matrix("smoke").nccl_tests)
    path = fetch_from_git(archive, NCCL_MIRROR, cache=tmp_path)
    assert path.name == f"nccl-tests-{archive.commit}.tar"
