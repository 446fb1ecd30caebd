"""One writer at a time (issue 37): the project lock of lock/render/build/release and the trust store's cache
lock; a second command waits, then names the one holding it; a killed holder holds nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from imagesmith import projectlock
from imagesmith.errors import BusyError, ConfigError
from imagesmith.indextrust import Trusted, TrustStore
from imagesmith.lock import read_lock
from tests import fakeuv
from tests.indexkey import KEY
from tests.unit.test_lock_whole import KEY as LOCK_KEY
from tests.unit.test_lock_whole import REF, _project
from tests.unit.test_pick import make_index

IMAGESMITH = Path(sys.executable).with_name("imagesmith")
HOLDER = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from imagesmith import projectlock\n"
    "with projectlock.hold(Path(sys.argv[1]), command=sys.argv[2]):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(120)\n"
)


def _holder(folder: Path, command: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), command], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def _imagesmith(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(IMAGESMITH), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("command", [["render"], ["lock", "--matrix", "smoke", "--no-sizes"]])
def test_a_second_writer_waits_then_names_the_one_holding_the_project(
    tmp_path: Path, command: list[str]
) -> None:
    root = _project(tmp_path / "p")
    holder = _holder(root, "lock")
    try:
        done = _imagesmith("-C", str(root), *command, env={"IMAGESMITH_LOCK_WAIT": "0.3"})
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 14, done.stderr
    error, fix = done.stderr.strip().splitlines()
    assert f"another imagesmith lock (pid {holder.pid}) holds {root / projectlock.LOCK_FILE}" in error
    assert "waited 0.3 s" in error
    assert fix.strip().startswith("fix: wait for that command to finish")
    assert not (root / "dockerfiles").exists()


def test_a_killed_holder_holds_nothing(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    holder = _holder(root, "render")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    done = _imagesmith("-C", str(root), "render", env={"IMAGESMITH_LOCK_WAIT": "0"})
    assert done.returncode == 0, done.stderr
    assert (root / "dockerfiles" / "smoke").is_dir()


def test_two_locks_at_once_run_one_after_the_other_and_both_finish(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    env = {**fakeuv.install(tmp_path / "bin", REF), "FAKE_UV_SLEEP": "0.5", "IMAGESMITH_LOCK_WAIT": "60"}
    args = [str(IMAGESMITH), "-C", str(root), "lock", "--matrix", "smoke", "--force", "--no-sizes"]
    procs = [
        subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env}
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    lock = read_lock(LOCK_KEY, root / "locks")
    assert lock is not None
    assert lock.sealed
    assert sorted(p.name for p in (root / "locks").iterdir()) == [LOCK_KEY.filename]


def test_the_wait_is_bounded_and_checked() -> None:
    assert projectlock.wait_seconds() == projectlock.DEFAULT_WAIT_S
    os.environ["IMAGESMITH_LOCK_WAIT"] = "soon"
    try:
        with pytest.raises(ConfigError, match="IMAGESMITH_LOCK_WAIT"):
            projectlock.wait_seconds()
    finally:
        del os.environ["IMAGESMITH_LOCK_WAIT"]


def test_the_lock_is_reentrant_in_one_process_and_exclusive_across(tmp_path: Path) -> None:
    with projectlock.hold(tmp_path, command="build"), projectlock.hold(tmp_path, command="build"):
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pathlib import Path; from imagesmith import projectlock\n"
                "with projectlock.hold(Path(sys.argv[1]), wait=0): pass",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert probe.returncode != 0
        assert "BusyError" in probe.stderr
        assert f"imagesmith build (pid {os.getpid()})" in probe.stderr
    with projectlock.hold(tmp_path, wait=0):
        pass


def test_a_pick_never_records_an_older_serial_over_a_newer_one_another_pick_recorded(tmp_path: Path) -> None:
    """Two picks of one source at once: the one that read the record first must not write its older serial
    over the newer one the other recorded meanwhile (the replay floor would go back)."""
    folder = tmp_path / "index"
    source = "file:/srv/index.json"
    trusted = Trusted.of(KEY.public, "test")
    slow, fast = TrustStore(folder, source), TrustStore(folder, source)
    assert slow.newest() is None  # read before the other pick wrote
    fast.record(replace(make_index(), serial=7), b"seven", trusted)
    slow.record(replace(make_index(), serial=6), b"six", trusted)
    newest = TrustStore(folder, source).newest()
    assert newest is not None
    assert newest["serial"] == 7


def test_busy_is_its_own_exit_status() -> None:
    assert BusyError.exit_code == 14
