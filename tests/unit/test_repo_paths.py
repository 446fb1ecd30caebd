"""Nothing in the repository names an absolute path of a particular machine: a fresh clone anywhere works.

Checks every tracked text file (recorded evidence and captured host output aside: they quote the machines
they came from) for the folder this checkout lives in (which holds this machine's other clones too).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.repo import REPO

EXEMPT = ("docs/evidence/", "tests/data/")


def _tracked_text() -> dict[str, str]:
    proc = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=False, timeout=30
    )
    if proc.returncode != 0:
        pytest.skip("not a git checkout")
    out = {}
    for name in proc.stdout.decode().split("\0"):
        if not name or name.startswith(EXEMPT) or not (REPO / name).is_file():
            continue
        data = (REPO / name).read_bytes()
        if b"\0" in data[:8000]:
            continue
        out[name] = data.decode("utf-8", errors="replace")
    return out


def test_no_absolute_path_of_this_machine() -> None:
    outer = f"{REPO.parent}/"
    needles = {outer}
    hits = [
        f"{name}:{lineno}: {line.strip()[:120]}"
        for name, text in _tracked_text().items()
        for lineno, line in enumerate(text.splitlines(), 1)
        if any(n in line for n in needles) and name != "tests/unit/test_repo_paths.py"
    ]
    assert hits == []


def test_the_checker_sees_tracked_files() -> None:
    files = _tracked_text()
    assert "imagesmith.toml" in files
    assert "scripts/setup.sh" in files
