"""imagesmith.atomicio: each file imagesmith writes is the old one or the new one, whole; writers use it."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from imagesmith import atomicio
from imagesmith.errors import StorageError


def test_write_atomic_replaces_whole_and_keeps_the_mode(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    atomicio.write_atomic(p, "one\n")
    p.chmod(0o600)
    atomicio.write_atomic(p, b"two\n")
    assert p.read_text() == "two\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.txt"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "lock.txt"
    p.write_text("old whole\n")

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(StorageError) as err:
        atomicio.write_atomic(p, "new\n")
    assert str(p) in err.value.message
    assert "free" in err.value.message
    assert "left as it was" in err.value.message
    assert err.value.file == str(p)
    assert err.value.fault == "storage full"
    assert p.read_text() == "old whole\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["lock.txt"]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder"])
def test_symlink_and_non_regular_targets_are_refused(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("not mine\n")
    p = tmp_path / "x.txt"
    if kind == "symlink":
        p.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        p.mkdir()
    with pytest.raises(StorageError, match=r"x\.txt"):
        atomicio.write_atomic(p, "new\n")
    assert target.read_text() == "not mine\n"


def test_stale_temps_of_dead_runs_are_cleaned_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".lock.txt.{dead_pid}{atomicio.TMP_SUFFIX}"
    stale.write_text("")
    stale_dir = tmp_path / f".report.{dead_pid}{atomicio.TMP_SUFFIX}"
    stale_dir.mkdir()
    live = tmp_path / f".other.txt.{os.getppid()}{atomicio.TMP_SUFFIX}"
    live.write_text("in progress")
    atomicio.write_atomic(tmp_path / "lock.txt", "x\n")
    assert not stale.exists()
    assert not stale_dir.exists()
    assert live.exists()


def test_write_tree_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = tmp_path / "m" / "a", tmp_path / "m" / "b", tmp_path / "m" / "c"
    atomicio.write_tree({a: "a1", b: "b1", c: "c1"})
    calls = {"n": 0}
    real = os.write

    def fails_on_second_file(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", fails_on_second_file)
    with pytest.raises(StorageError, match="every file of the tree was left as it was"):
        atomicio.write_tree({a: "a2", b: "b2", c: "c2"}, remove=(c,))
    monkeypatch.undo()
    assert (a.read_text(), b.read_text(), c.read_text()) == ("a1", "b1", "c1")
    assert sorted(x.name for x in (tmp_path / "m").iterdir()) == ["a", "b", "c"]
    atomicio.write_tree({a: "a2", b: "b2"}, remove=(c,), modes={b: 0o755})
    assert (a.read_text(), b.read_text(), c.exists()) == ("a2", "b2", False)
    assert stat.S_IMODE(b.stat().st_mode) == 0o755


def test_write_exclusive_never_overwrites(tmp_path: Path) -> None:
    p = tmp_path / "k.key"
    atomicio.write_exclusive(p, b"secret", mode=0o600)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        atomicio.write_exclusive(p, b"other", mode=0o600)
    assert p.read_bytes() == b"secret"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["k.key"]


def test_staged_dir_replaces_the_folder_only_when_whole(tmp_path: Path) -> None:
    out = tmp_path / "report"
    with atomicio.staged_dir(out) as tmp:
        (tmp / "report.json").write_text("{}")
    assert (out / "report.json").read_text() == "{}"

    def killed() -> None:
        with atomicio.staged_dir(out) as tmp:
            (tmp / "report.json").write_text('{"half": ')
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        killed()
    assert (out / "report.json").read_text() == "{}"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["report"]


_WRITERS = (
    "imagesmith/lock.py",
    "imagesmith/wheelsizes.py",
    "imagesmith/bases.py",
    "imagesmith/render.py",
    "imagesmith/index.py",
    "imagesmith/indextrust.py",
    "imagesmith/signing.py",
    "imagesmith/build.py",
    "imagesmith/pick/fetching.py",
    "imagesmith/validate/report.py",
    "imagesmith/commands/sbom.py",
    "imagesmith/commands/validate.py",
)


@pytest.mark.parametrize("module", _WRITERS)
def test_writers_write_through_atomicio(module: str) -> None:
    """The files a later stage trusts (locks, sizes, bases, dockerfiles, index, trust records, keys,
    summaries, reports, SBOMs, attestations) are never written in place: no write_text/write_bytes/replace of
    their own in these modules (a line marked ``# scratch`` writes into a temp folder of its own)."""
    source = (Path(__file__).resolve().parents[2] / module).read_text().splitlines()
    text = "\n".join(line for line in source if not line.rstrip().endswith("# scratch"))
    for call in (".write_text(", ".write_bytes(", ".replace(path)", "tmp.replace("):
        assert call not in text, f"{module} writes a file in place ({call}): use imagesmith.atomicio"


def test_keygen_after_a_kill_between_its_two_files_writes_the_missing_public_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagesmith import signing
    from imagesmith.cli import main

    priv = tmp_path / "release.key"
    assert main(["keygen", str(priv), "--type", "ed25519"]) == 0
    key_id = signing.load_signing_key(priv).key_id
    before = priv.read_bytes()
    (tmp_path / "release.pub").unlink()  # what a kill after the private key's rename left
    capsys.readouterr()
    assert main(["keygen", str(priv), "--type", "ed25519"]) == 0
    assert "from the existing" in capsys.readouterr().out
    assert priv.read_bytes() == before
    assert signing.load_public_key(tmp_path / "release.pub").key_id == key_id
    assert main(["keygen", str(priv)]) == 2  # both there: never overwritten


def test_keygen_replaces_the_0_byte_files_an_older_kill_left(tmp_path: Path) -> None:
    from imagesmith import signing

    priv, pub = tmp_path / "k.key", tmp_path / "k.pub"
    priv.write_bytes(b"")
    pub.write_bytes(b"")
    key = signing.write_keypair(priv, pub, "ed25519", finish=True)
    assert signing.load_public_key(pub).key_id == key.key_id
    assert priv.stat().st_size > 0
