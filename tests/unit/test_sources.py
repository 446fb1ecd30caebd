"""The source cache: git archive → checked sha256 → cache; builds read only the cache; clear errors."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import SourceCacheError
from imagesmith.sources import (
    SourceArchive,
    _maybe_gunzip,
    cached_archive,
    ensure_cached,
    fetch_from_git,
    fetch_from_paths,
    mirror_urls,
)
from tests.localhttp import QuietHTTPServer
from tests.repo import REPO

#: pinned archives kept beside a checkout (a relative location, never a machine's absolute path)
SHARED_SOURCES = REPO.parent / "shared" / "sources"


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


@pytest.mark.skipif(not SHARED_SOURCES.is_dir(), reason=f"no pinned source folder at {SHARED_SOURCES}")
def test_smoke_pin_matches_the_pinned_archive_beside_the_checkout(tmp_path: Path) -> None:
    """The nccl-tests pin is the archive kept beside the checkout (../shared/sources), checksummed."""
    from imagesmith.matrix import load_matrix
    from imagesmith.sources import nccl_tests_archive

    archive = nccl_tests_archive(load_matrix("smoke").nccl_tests)
    path = fetch_from_paths(archive, [SHARED_SOURCES], cache=tmp_path)
    assert path.name == f"nccl-tests-{archive.commit}.tar"
    assert cached_archive(archive, cache=tmp_path) == path


# -- local folders and files, mirrors ----------------------------------------------------------------


def _tar_of(clone: tuple[Path, str, str]) -> bytes:
    repo, commit, _ = clone
    return subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", f"--prefix=demo-{commit}/", commit],
        capture_output=True,
        check=True,
    ).stdout


def test_from_a_folder_takes_the_forge_name_gzipped(clone: tuple[Path, str, str], tmp_path: Path) -> None:
    _, commit, sha = clone
    folder = tmp_path / "archives"
    folder.mkdir()
    (folder / f"{commit}.tar.gz").write_bytes(gzip.compress(_tar_of(clone)))
    archive = _archive(commit, sha)
    path, how = ensure_cached(archive, from_paths=[folder], cache=tmp_path / "cache")
    assert how == f"from {folder}"
    assert path == tmp_path / "cache" / archive.file_name
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha


def test_an_explicit_file_is_taken_whatever_its_name(clone: tuple[Path, str, str], tmp_path: Path) -> None:
    _, commit, sha = clone
    odd = tmp_path / "download (1).bin"
    odd.write_bytes(_tar_of(clone))
    path = fetch_from_paths(_archive(commit, sha), [odd], cache=tmp_path / "cache")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha


def test_a_folder_without_a_matching_archive_names_what_it_checked(
    clone: tuple[Path, str, str], tmp_path: Path
) -> None:
    _, commit, sha = clone
    folder = tmp_path / "archives"
    folder.mkdir()
    (folder / f"demo-{commit}.tar").write_bytes(b"not the archive")
    cache = tmp_path / "cache"
    with pytest.raises(SourceCacheError) as info:
        ensure_cached(_archive(commit, sha), from_paths=[folder], cache=cache)
    text = str(info.value)
    assert f"no archive with sha256 {sha[:16]}" in text
    assert "the pin says" in text  # the mismatching file is named with its checksum
    assert "fix:" in text
    assert not list(cache.glob("*.tar"))  # nothing half-written
    with pytest.raises(SourceCacheError, match="no such file or folder"):
        ensure_cached(_archive(commit, sha), from_paths=[tmp_path / "missing"], cache=cache)


def test_mirror_templates() -> None:
    archive = SourceArchive(
        name="nccl-tests",
        version="v2.19.6",
        commit="a" * 40,
        sha256="0" * 64,
        url="https://github.com/NVIDIA/nccl-tests/archive/" + "a" * 40 + ".tar.gz",
    )
    urls = mirror_urls(
        archive,
        [
            "https://gh-proxy.example/{url}",
            "https://mirror.example/github{path}",
            "https://files.example/{name}/{version}/{file}",
            "https://gh-proxy.example/{url}",
        ],
    )
    assert urls == [
        "https://gh-proxy.example/" + archive.url,
        "https://mirror.example/github/NVIDIA/nccl-tests/archive/" + "a" * 40 + ".tar.gz",
        f"https://files.example/nccl-tests/v2.19.6/nccl-tests-{'a' * 40}.tar",
    ]


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A plain HTTP server on 127.0.0.1 serving a temporary folder (404 for what is not there)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = QuietHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


def test_network_tries_mirrors_in_order_then_upstream(
    clone: tuple[Path, str, str], tmp_path: Path, http_folder: tuple[str, Path]
) -> None:
    base, www = http_folder
    _, commit, sha = clone
    (www / "good").mkdir()
    (www / "good" / f"{commit}.tar.gz").write_bytes(gzip.compress(_tar_of(clone)))
    (www / "bad").mkdir()
    (www / "bad" / f"{commit}.tar.gz").write_bytes(gzip.compress(b"tampered"))
    archive = SourceArchive(
        name="demo", version="v1", commit=commit, sha256=sha, url=f"{base}/upstream/{commit}.tar.gz"
    )
    mirrors = [
        base + "/missing/{commit}.tar.gz",
        base + "/bad/{commit}.tar.gz",
        base + "/good/{commit}.tar.gz",
    ]
    path, how = ensure_cached(archive, mirrors=mirrors, cache=tmp_path / "cache")
    assert how == f"from {base}/good/{commit}.tar.gz"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    # upstream last: with no mirror serving it, every attempt is named
    path.unlink()
    with pytest.raises(SourceCacheError) as info:
        ensure_cached(archive, mirrors=mirrors[:2], cache=tmp_path / "cache")
    text = str(info.value)
    assert "from any of 3 URL(s)" in text
    assert "HTTP 404" in text
    assert "the pin says" in text  # the tampered mirror is caught by the checksum
    assert f"{base}/upstream/" in text
    assert not list((tmp_path / "cache").glob("*.tar"))


def test_user_config_and_environment_mirrors(tmp_path: Path) -> None:
    from imagesmith.config import load_config
    from imagesmith.errors import ConfigError

    conf = tmp_path / "config.toml"
    conf.write_text('[sources]\nmirrors = ["https://m.example/{url}"]\n')
    assert load_config({"IMAGESMITH_CONFIG": str(conf)}).source_mirrors == ("https://m.example/{url}",)
    env = {"IMAGESMITH_CONFIG": str(conf), "IMAGESMITH_SOURCE_MIRRORS": "https://a/{url}, https://b{path}"}
    assert load_config(env).source_mirrors == ("https://a/{url}", "https://b{path}")
    conf.write_text('[sources]\nmirrors = ["https://m.example/{sha}"]\n')
    with pytest.raises(ConfigError, match=r"uses \{sha\}"):
        load_config({"IMAGESMITH_CONFIG": str(conf)})


def test_fetch_sources_cli_from_a_folder(
    clone: tuple[Path, str, str], tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command a new machine runs: the project's pins, from a folder of archives, into the cache."""
    from tests.repo import PROJECT

    monkeypatch.setenv("IMAGESMITH_CACHE", str(tmp_path / "cache"))
    empty = tmp_path / "empty"
    empty.mkdir()
    out = run_cli("--project", str(PROJECT.root), "fetch-sources", "--matrix", "smoke", "--from", str(empty))
    assert out.exit_code == 5
    assert "no archive with sha256" in out.stderr
    if not SHARED_SOURCES.is_dir():
        pytest.skip(f"no pinned source folder at {SHARED_SOURCES}")
    out = run_cli("--project", str(PROJECT.root), "fetch-sources", "--from", str(SHARED_SOURCES))
    assert out.exit_code == 0, out.stderr
    assert "nccl-tests v2.19.6 (a0b82b2260cf)" in out.stdout
    assert (
        tmp_path / "cache" / "sources" / "nccl-tests-a0b82b2260cf5152b9f8c061bbf7eaf0ba096432.tar"
    ).is_file()
    out = run_cli("--project", str(PROJECT.root), "fetch-sources", "--mirror", "ftp://x/{url}")
    assert out.exit_code == 2
    assert "not an http(s) URL template" in out.stderr
