"""`imagesmith lock` for real: uv resolves against the package index (network)."""

from __future__ import annotations

import os
from pathlib import Path

from imagesmith.lock import LockKey, compile_lock, read_lock


def test_compile_suite_lock_for_real(tmp_path: Path) -> None:
    """uv really resolves (default index); the written file reads back with its header. Behind this machine's
    TLS interception uv trusts the extra CA it is given, as ``imagesmith lock`` gives it the user config's
    (tests/unit/test_lock_ca.py), with or without an ``SSL_CERT_FILE`` in the environment."""
    key = LockKey(torch="suite", variant="any", python="3.12")
    ca = os.environ.get("IMAGESMITH_TEST_EXTRA_CA")
    path = compile_lock(key, lock_dir=tmp_path, ca=Path(ca) if ca else None)
    lock = read_lock(key, tmp_path)
    assert lock is not None
    assert lock.path == path
    assert lock.version("pytest")
    assert lock.version("pytest-testinfra")
    assert dict(lock.header)["command"].startswith("uv pip compile --generate-hashes --python-version 3.12")
    assert lock.hashed  # every pin carries the sha256 of the files the index publishes for it
    assert all(len(h) == 64 for _, _, hs in lock.hashes for h in hs)
