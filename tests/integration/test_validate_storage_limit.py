"""Issue 33: the storage check against a slow data folder. A small ext4 file system on a loop device whose
reads this test's cgroup throttles (cgroup v2 ``io.max``, or v1 ``blkio.throttle.read_bps_device``) to 8 MB/s;
``imagesmith validate local:// --listing`` promising 100 MB/s of sequential read there must fail naming
``storage.data.read``, with fio's figure (fio: scripts/setup.sh). Root only; everything is made and removed
here, bounded in time. /dev/shm is not a block device (no io.max applies to tmpfs): the data folder is
the loop device's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

THROTTLE_BPS = 8 * 10**6

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in ("losetup", "mkfs.ext4", "fio", "mount")),
    reason="needs root, losetup, mkfs.ext4, mount and fio (scripts/setup.sh)",
)


def _sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


def _throttled_cgroup(major_minor: str) -> Path | None:
    """A new cgroup whose reads of the device are limited to THROTTLE_BPS: v2 where the io controller is
    enabled at the root, else v1's blkio; None where neither can be made."""
    name = f"imagesmith-io-{uuid.uuid4().hex[:8]}"
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists() and "io" in (v2 / "cgroup.subtree_control").read_text().split():
        cg = v2 / name
        cg.mkdir()
        (cg / "io.max").write_text(f"{major_minor} rbps={THROTTLE_BPS}\n")
        return cg
    v1 = Path("/sys/fs/cgroup/blkio")
    if (v1 / "blkio.throttle.read_bps_device").exists():
        cg = v1 / name
        cg.mkdir()
        (cg / "blkio.throttle.read_bps_device").write_text(f"{major_minor} {THROTTLE_BPS}\n")
        return cg
    return None


@pytest.fixture
def slow_folder(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    image = tmp_path / "disk.img"
    with image.open("wb") as f:
        f.truncate(160 * 2**20)
    loop = _sh("losetup", "-f", "--show", str(image))
    mnt = tmp_path / "data"
    mnt.mkdir()
    cg: Path | None = None
    try:
        _sh("mkfs.ext4", "-q", loop)
        _sh("mount", loop, str(mnt))
        cg = _throttled_cgroup(_sh("lsblk", "-dno", "MAJ:MIN", loop).strip())
        if cg is None:
            pytest.skip("neither cgroup v2 io.max nor v1 blkio throttling is available here")
        yield mnt, cg
    finally:
        subprocess.run(["umount", str(mnt)], check=False, timeout=60)
        subprocess.run(["losetup", "-d", loop], check=False, timeout=60)
        if cg is not None:
            for _ in range(50):  # the run's processes have left it once they exited
                try:
                    cg.rmdir()
                    break
                except OSError:
                    subprocess.run(["sleep", "0.1"], check=False)


def test_a_throttled_data_folder_breaks_its_promised_read_rate(
    slow_folder: tuple[Path, Path], tmp_path: Path
) -> None:
    mnt, cg = slow_folder
    listing = tmp_path / "listing.toml"
    listing.write_text(f'[storage.data]\npath = "{mnt}"\nread = "100 MB/s"\nfree = "10 MB"\n')
    report = tmp_path / "report"
    argv = [sys.executable, "-m", "imagesmith", "validate", "local://", "--listing", str(listing)]
    argv += ["--checkpoint-size", "16m", "-k", "test_storage or test_listing", "--report", str(report)]
    # the wrapper joins the throttled cgroup, then becomes imagesmith: the suite and fio inherit it
    wrapper = f'echo $$ > "{cg}/cgroup.procs" && exec "$@"'
    r = subprocess.run(["sh", "-c", wrapper, "sh", *argv], capture_output=True, text=True, timeout=300)
    assert r.returncode == 7, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((report / "report.json").read_text())
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["test_storage"]["status"] == "passed"
    fig = checks["test_storage"]["figures"]["data"]
    assert fig["fio"] is True
    assert fig["tool"] == "fio"
    assert fig["read_bps"] < 2 * THROTTLE_BPS  # the kernel's limit, not the file system's speed
    rows = {row["promise"]: row for row in checks["test_listing"]["figures"]["promises"]}
    assert rows["storage.data.read"]["verdict"] == "broken"
    assert rows["storage.data.free"]["verdict"] == "kept"
    assert checks["test_listing"]["status"] == "failed"
    assert "storage.data.read: promised 100 MB/s" in checks["test_listing"]["message"]
    assert "Promised vs measured" in (report / "report.md").read_text()
