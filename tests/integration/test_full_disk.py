"""Fill its disk (issue 37): on a small tmpfs of its own (root; mounted and unmounted here), a full disk or
one out of inodes is one error naming the file and the free space, every file is left as it was, and once
there is room a plain rerun finishes."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagesmith import atomicio
from tests import fakeuv
from tests.unit.test_lock_whole import KEY, REF, _project

IMAGESMITH = Path(sys.executable).with_name("imagesmith")


@contextlib.contextmanager
def _tmpfs(where: Path, options: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=60)


def _until_full(step: Callable[[], object]) -> int:
    """Run *step* until the file system refuses; the errno it refused with."""
    try:
        while True:
            step()
    except OSError as exc:
        return exc.errno or 0


def _fill_bytes(folder: Path) -> Path:
    filler = folder / "filler"
    with filler.open("wb") as f:

        def block() -> None:
            f.write(b"\0" * 65536)
            f.flush()

        assert _until_full(block) == errno.ENOSPC
    with contextlib.suppress(OSError), filler.open("ab") as f:  # the last partial block
        while True:
            f.write(b"\0")
            f.flush()
    return filler


def _fill_inodes(folder: Path) -> Path:
    many = folder / "inodes"
    many.mkdir()
    names = iter(range(10**7))
    assert _until_full(lambda: (many / str(next(names))).touch()) == errno.ENOSPC
    return many


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(IMAGESMITH), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("exhaust", ["bytes", "inodes"])
def test_render_on_a_full_disk_changes_nothing_and_says_where(tmp_path: Path, exhaust: str) -> None:
    options = "size=8m,nr_inodes=400" if exhaust == "inodes" else "size=8m"
    with _tmpfs(tmp_path / "mnt", options) as mnt:
        root = _project(mnt / "p")
        assert _run("-C", str(root), "render").returncode == 0
        out = root / "dockerfiles"
        old = _snapshot(out)
        matrix = root / "matrices" / "smoke.toml"
        matrix.write_text(matrix.read_text().replace('shm_min = "256m"', 'shm_min = "512m"'))
        filler = _fill_bytes(mnt) if exhaust == "bytes" else _fill_inodes(mnt)
        done = _run("-C", str(root), "render")
        assert done.returncode == 13, done.stderr
        error, fix = done.stderr.strip().splitlines()
        assert error.startswith(f"error: cannot write {out}/"), error
        assert "no space left on the device" in error
        assert " MB" in error
        assert "free" in error
        assert "every file of the tree was left as it was" in error
        assert fix.strip().startswith("fix: free space in ")
        assert _snapshot(out) == old
        assert [p for p in root.rglob("*") if p.name.endswith(atomicio.TMP_SUFFIX)] == []
        if filler.is_dir():
            for p in filler.iterdir():
                p.unlink()
        else:
            filler.unlink()
        assert _run("-C", str(root), "render").returncode == 0
        assert _snapshot(out) != old
        assert _run("-C", str(root), "render", "--check").returncode == 0


def test_lock_on_a_full_disk_keeps_the_old_lock(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "mnt", "size=8m") as mnt:
        root = _project(mnt / "p")
        env = fakeuv.install(tmp_path / "bin", REF)
        assert _run("-C", str(root), "render", env=env).returncode == 0  # takes the project lock file once
        lock = root / "locks" / KEY.filename
        before = lock.read_bytes()
        filler = _fill_bytes(mnt)
        done = _run("-C", str(root), "lock", "--matrix", "smoke", "--force", "--no-sizes", env=env)
        assert done.returncode != 0, done.stdout
        assert f"cannot write {lock}: no space left on the device" in done.stderr
        assert "was left as it was" in done.stderr
        assert lock.read_bytes() == before
        assert sorted(p.name for p in lock.parent.iterdir()) == [KEY.filename]
        filler.unlink()
        done = _run("-C", str(root), "lock", "--matrix", "smoke", "--force", "--no-sizes", env=env)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("exhaust", ["bytes", "inodes"])
def test_build_staging_a_context_on_a_full_disk_is_one_error_naming_the_file(
    tmp_path: Path, exhaust: str
) -> None:
    """`build` copies a cell's context into its staging folder: a full disk there (bytes or inodes) is one
    StorageError naming the file, the free space and that the half-staged folder was removed — not
    shutil's list of (source, destination, reason) tuples."""
    from imagesmith.build import stage_context
    from imagesmith.config import UserConfig
    from imagesmith.errors import StorageError
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from tests.repo import PROJECT

    matrix = load_matrix("smoke", project=PROJECT)
    cell = build_plan(matrix, project=PROJECT).cells[0]
    options = "size=8m,nr_inodes=400" if exhaust == "inodes" else "size=8m"
    with _tmpfs(tmp_path / "mnt", options) as mnt:
        staging = mnt / "contexts"
        staging.mkdir()
        _fill_bytes(mnt) if exhaust == "bytes" else _fill_inodes(mnt)
        with pytest.raises(StorageError) as caught:
            stage_context(cell, matrix, UserConfig(), staging, project=PROJECT)
        message = caught.value.message
        assert message.startswith(f"cannot write {staging}/"), message
        assert "no space left on the device" in message
        assert " MB" in message
        assert "free" in message
        assert "[(" not in message
        assert "the staging folder" in message
        assert "was removed" in message
        assert str(caught.value.fields()["file"]).startswith(str(staging))
        assert not (staging / cell.matrix / cell.id).exists()
