"""validate runs its suite in a process group of its own and stops it on any exit (issue 37): a killed
``validate`` left its pytest suite running as an orphan that kept loading the GPU and wrote a report later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

#: a stand-in suite: starts a child of its own (as the suite's checks do), writes both pids, then works
SUITE = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "open(sys.argv[1], 'w').write(f'{__import__(\"os\").getpid()} {child.pid}')\n"
    "time.sleep(float(sys.argv[2]))\n"
)
#: imagesmith's side: run the suite as validate does; SIGTERM raises (as imagesmith.cli makes it)
DRIVER = (
    "import os, signal, sys\n"
    "from imagesmith.validate.runner import run_in_own_group\n"
    "def stop(signum, frame):\n"
    "    raise SystemExit(143)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "suite = [sys.executable, '-c', *sys.argv[1:4]]\n"
    "sys.exit(run_in_own_group(suite, env=dict(os.environ)))\n"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.is_file() and "State:\tZ" in status.read_text())


def _gone_soon(pid: int) -> bool:
    for _ in range(200):
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _start(tmp_path: Path, work_s: float) -> tuple[subprocess.Popen[bytes], int, int]:
    pids = tmp_path / "pids"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, SUITE, str(pids), str(work_s)])
    for _ in range(600):
        if pids.exists() and pids.read_text():
            suite, child = (int(x) for x in pids.read_text().split())
            return driver, suite, child
        time.sleep(0.05)
    driver.kill()
    raise AssertionError("the stand-in suite never started")


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_the_suite_and_its_children_die_with_validate(tmp_path: Path, signum: int) -> None:
    driver, suite, child = _start(tmp_path, 120)
    try:
        assert os.getpgid(suite) == suite  # a group of its own
        assert os.getpgid(driver.pid) != suite
        driver.send_signal(signum)
        driver.wait(timeout=60)
        assert _gone_soon(suite), "the suite outlived validate"
        assert _gone_soon(child), "a child of the suite outlived validate"
    finally:
        for pid in (suite, child):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_what_the_suite_left_running_is_stopped_when_it_ends(tmp_path: Path) -> None:
    driver, _, child = _start(tmp_path, 0)
    try:
        assert driver.wait(timeout=60) == 0
        assert _gone_soon(child), "a child the suite left behind outlived validate"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
