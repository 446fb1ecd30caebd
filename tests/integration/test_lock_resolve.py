"""`imagesmith lock` for real: uv resolves against the package index (network)."""

from __future__ import annotations

from pathlib import Path

from imagesmith.lock import LockKey, compile_lock, read_lock


def test_compile_suite_lock_for_real(tmp_path: Path) -> None:
    """uv really resolves (default index); the written file reads back with its header."""
    key = LockKey(torch="suite", variant="any", python="3.12")
    path = compile_lock(key, lock_dir=tmp_path)
    lock = read_lock(key, tmp_path)
    assert lock is not None
    assert lock.path == path
    assert lock.version("pytest")
    assert lock.version("pytest-testinfra")
    assert dict(lock.header)["command"].startswith("uv pip compile --generate-hashes --python-version 3.12")
    assert lock.hashed  # every pin carries the sha256 of the files the index publishes for it
    assert all(len(h) == 64 for _, _, hs in lock.hashes for h in hs)
