"""The report folder of ``imagesmith validate`` is filled under a temp name beside it and renamed into place
when the run ends (issue 37 item 5): at every instant DIR is the old whole bundle or the new whole one, a
run that errors or is killed leaves DIR as it was, and the next run removes a dead run's temp folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ValidationFailed
from imagesmith.validate import runner, staging
from imagesmith.validate.context import SuiteOptions

OLD = {"report.json": '{"verdict": "passed", "old": true}\n', "report.md": "# old\n", "old.log": "old\n"}


def _old_bundle(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True)
    for name, text in OLD.items():
        (folder / name).write_text(text)
    return _files(folder)


def _files(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def _fake_suite(
    monkeypatch: pytest.MonkeyPatch, final: Path, seen: list[dict[str, str]], *, fail: bool = False
) -> None:
    """run_suite as the real one behaves for the bundle: it writes into ``options.report_dir`` file by file;
    while it runs, *final* is looked at (what a reader of DIR would see mid-run)."""

    def run_suite(options: SuiteOptions, *, select: str | None = None) -> dict[str, Any]:
        out = Path(options.report_dir)
        (out / "junit.xml").write_text("<testsuites/>\n")
        seen.append(_files(final) if final.exists() else {})
        if fail:
            raise ValidationFailed("the validation suite did not finish", hint="read the pytest output above")
        data = {"verdict": "failed", "verdict_reason": "1 check failed", "checks": []}
        (out / "report.json").write_text(json.dumps(data) + "\n")
        (out / "report.md").write_text("# new\n")
        return data

    monkeypatch.setattr(runner, "run_suite", run_suite)


def test_a_rerun_into_a_folder_leaves_the_new_bundle_whole(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    final = tmp_path / "reports" / "run"
    old = _old_bundle(final)
    seen: list[dict[str, str]] = []
    _fake_suite(monkeypatch, final, seen)
    r = run_cli("validate", "local://", "--report", str(final))
    assert r.exit_code == 7, r.stdout + r.stderr  # a failed verdict: its bundle is put in place all the same
    assert seen == [old], "mid-run, DIR must still hold the old bundle, whole"
    new = _files(final)
    assert set(new) == {"junit.xml", "report.json", "report.md"}, "nothing of the old bundle stays"
    assert _leftovers(final.parent) == []


def test_a_run_that_fails_before_the_end_leaves_the_old_bundle(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    final = tmp_path / "run"
    old = _old_bundle(final)
    _fake_suite(monkeypatch, final, [], fail=True)
    r = run_cli("validate", "local://", "--report", str(final))
    assert r.exit_code != 0
    assert _files(final) == old
    assert _leftovers(tmp_path) == [], "the failed run's temp folder is removed"


def test_a_folder_of_other_files_is_refused(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep\n")
    r = run_cli("validate", "local://", "--report", str(tmp_path / "mine"))
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "not an evidence bundle" in r.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep\n"


def test_the_report_records_the_bundle_folder_not_its_temp_folder() -> None:
    options = SuiteOptions(report_dir="reports/.run.tmp-1-ab", bundle_dir="reports/run")
    recorded = options.recorded()
    assert recorded["report_dir"] == "reports/run"
    assert "bundle_dir" not in recorded
    assert SuiteOptions(report_dir="reports/run").recorded()["report_dir"] == "reports/run"


def test_a_mount_point_is_filled_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scratch folder bind-mounted into an image (``--report /imagesmith-report``) cannot be renamed."""
    mount = tmp_path / "imagesmith-report"
    mount.mkdir()
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == mount)
    assert staging.staging_dir(mount) == mount
    (mount / "report.json").write_text("{}\n")
    staging.publish(mount, mount)
    staging.discard(mount, mount)
    assert _files(mount) == {"report.json": "{}\n"}
    assert _leftovers(tmp_path) == []


#: nvidia-smi that says it was called and then hangs: validate is killed while its suite runs
HANGING_SMI = "#!/bin/sh\ntouch '@MARK@'\nsleep 120\n"


def test_a_killed_run_leaves_the_old_bundle_and_the_next_run_removes_its_temp_folder(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    final = tmp_path / "run"
    old = _old_bundle(final)
    mark, bin_dir = tmp_path / "called", tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(HANGING_SMI.replace("@MARK@", str(mark)))
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"}
    argv = [sys.executable, "-m", "imagesmith", "validate", "local://", "-k", "gpu_inventory"]
    proc = subprocess.Popen([*argv, "--report", str(final)], env=env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(1200):
            if mark.exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert mark.exists(), "the suite never reached nvidia-smi"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _files(final) == old, "a killed run must leave DIR as it was"
    staged = _leftovers(tmp_path)
    assert [n.split("-")[1] for n in staged] == [str(proc.pid)], staged  # the dead run's temp folder
    live = tmp_path / f".other.tmp-{os.getpid()}-0a0b"  # a live run's: not to be touched
    live.mkdir()
    _fake_suite(monkeypatch, final, [])
    assert run_cli("validate", "local://", "--report", str(final)).exit_code == 7
    assert set(_files(final)) == {"junit.xml", "report.json", "report.md"}
    assert _leftovers(tmp_path) == [live.name]
