"""SIGTERM and SIGINT (issue 37): one ``error: aborted`` line, the child stopped, exit 143 / 130, every file
as it was."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import fakeuv
from tests.unit.test_lock_whole import KEY, REF, _project


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie whose parent is gone is reaped by init soon after
    status = Path(f"/proc/{pid}/status")
    return status.is_file() and "State:\tZ" in status.read_text()


@pytest.mark.parametrize(
    ("signum", "code", "why"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")]
)
def test_a_stopped_lock_says_aborted_stops_its_resolver_and_leaves_the_lock(
    tmp_path: Path, signum: int, code: int, why: str
) -> None:
    root = _project(tmp_path / "p")
    pidfile = tmp_path / "uv.pid"
    env = {
        **os.environ,
        **fakeuv.install(tmp_path / "bin", REF),
        "FAKE_UV_SLEEP": "120",
        "FAKE_UV_PIDFILE": str(pidfile),
    }
    script = Path(sys.executable).with_name("imagesmith")
    proc = subprocess.Popen(
        [str(script), "-C", str(root), "lock", "--matrix", "smoke", "--force", "--no-sizes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the resolver never started"
        time.sleep(0.05)
    child = int(pidfile.read_text())
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"error: aborted ({why})" in err
    assert err.count("error:") == 1
    assert "Traceback" not in err
    for _ in range(100):
        if _gone(child):
            break
        time.sleep(0.05)
    assert _gone(child), "the resolver outlived imagesmith"
    locks = root / "locks"
    assert (locks / KEY.filename).read_text() == REF.read_text()
    assert sorted(p.name for p in locks.iterdir()) == [KEY.filename]


class _MutatedOnImport:
    """``imagesmith.cli`` whose import takes a SIGTERM inside C code: the handler runs and raises, and what
    comes out is another exception (CI: ssl.py's ``from _ssl import RAND_egd`` turned it into a TypeError)."""

    def __init__(self, term: bool) -> None:
        self.term = term

    def __getattr__(self, name: str) -> object:
        if self.term:
            from imagesmith import entry

            with contextlib.suppress(BaseException):
                entry._terminated(signal.SIGTERM, None)
        raise TypeError("expected a message argument")


@pytest.mark.parametrize("term", [True, False])
def test_a_sigterm_whose_exception_an_import_turned_into_another_still_ends_as_sigterm(
    term: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagesmith import entry

    monkeypatch.setattr(entry, "_caught", set())
    monkeypatch.setitem(sys.modules, "imagesmith.cli", _MutatedOnImport(term))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        if term:
            with pytest.raises(SystemExit) as stopped:
                entry.run()
            assert stopped.value.code == 128 + signal.SIGTERM
            assert "aborted (SIGTERM)" in capsys.readouterr().err
        else:  # no signal: a bug's exception is not hidden behind "aborted"
            with pytest.raises(TypeError, match="expected a message argument"):
                entry.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
