"""Two builds sharing one cache stage into folders of their own (issue 37: "Directory not empty" when two
builds of one cell staged into ``<cache>/contexts/MATRIX/CELL`` at once); a killed run's folder is removed by
the next run, a live run's folder never."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from imagesmith.build import RUN_PREFIX, run_staging


def test_two_runs_at_once_stage_into_different_folders_each_removed_at_its_end(tmp_path: Path) -> None:
    root = tmp_path / "contexts"
    with run_staging(root) as first:
        (first / "smoke" / "cell").mkdir(parents=True)
        with run_staging(root) as second:  # the second run's cleanup must not take the first's folder
            assert second != first
            assert (first / "smoke" / "cell").is_dir()
            (second / "smoke" / "cell").mkdir(parents=True)
        assert not second.exists()
        assert (first / "smoke" / "cell").is_dir()
    assert not first.exists()


def test_a_killed_runs_folder_is_removed_by_the_next_run_a_live_one_in_another_process_kept(
    tmp_path: Path,
) -> None:
    root = tmp_path / "contexts"
    dead = root / f"{RUN_PREFIX}dead"
    (dead / "smoke" / "cell").mkdir(parents=True)
    (dead / ".imagesmith.lock").write_text("pid=1 command=build\n")  # its holder is gone: nothing holds it
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from imagesmith.build import run_staging
        with run_staging(Path({str(root)!r})) as folder:
            print(folder, flush=True)
            sys.stdin.read()
        """
    )
    live = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert live.stdout is not None
        other = Path(live.stdout.readline().strip())
        assert other.is_dir()
        assert not dead.exists()  # the live process's run cleaned it
        with run_staging(root) as mine:
            assert mine != other
            assert other.is_dir()  # held by a live build: kept
    finally:
        assert live.stdin is not None
        live.stdin.close()
        live.wait(timeout=30)
    assert not other.exists()
