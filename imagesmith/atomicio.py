"""Whole files or none: every file imagesmith writes goes through here.

:func:`write_atomic` writes to a temp file in the target's own folder (``.<name>.<pid>.imagesmith-tmp``),
fsyncs it, renames it over the target and fsyncs the folder: a reader (or the next run after a kill, a power
cut or a full disk) sees the old file or the new one, never a 0-byte or cut one. A target that is a symlink
or not a regular file is refused (a lock that is a FIFO, a key that is a link to somewhere else).
:func:`write_tree` does the same for a set of files that go together (render's dockerfiles/): every file's
temp is written and fsynced first, then the renames; a failure before the renames leaves the tree as it was.
:func:`replace_dir` renames a folder written under a temp name into place (validate's report folder).

A temp file left by a run that was killed is removed by the next write into that folder once its pid is gone
(:func:`clean_stale`). Full-disk and out-of-inode errors become one :class:`~imagesmith.errors.StorageError`
naming the file, the free space there and that the old file was left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Final

from imagesmith.errors import Fault, StorageError

TMP_SUFFIX: Final[str] = ".imagesmith-tmp"
_TMP_NAME: Final = re.compile(r"^\.(?P<name>.+)\.(?P<pid>[0-9]+)(?:\.[0-9]+)?\.imagesmith-tmp$")
_FULL: Final = (errno.ENOSPC, errno.EDQUOT)


def tmp_path(path: Path, n: int = 0) -> Path:
    """The temp name of *path* for this process (``.<name>.<pid>[.<n>].imagesmith-tmp`` beside it)."""
    more = f".{n}" if n else ""
    return path.with_name(f".{path.name}.{os.getpid()}{more}{TMP_SUFFIX}")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(folder: Path) -> list[Path]:
    """Remove the temp files (and temp folders) in *folder* that a dead imagesmith run left. Returns them."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _TMP_NAME.match(entry.name)
        if m is None or _pid_alive(int(m.group("pid"))):
            continue
        p = Path(entry.path)
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p)
    return removed


def free_space(folder: Path) -> str:
    """What is left where *folder* lives, in words (``12.0 MB and 3 inodes free``)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return "free space unknown"
    free = st.f_bavail * st.f_frsize
    inodes = f", {st.f_favail} inodes" if st.f_files else ""
    return f"{free / 1e6:.1f} MB{inodes} free"


def storage_error(exc: OSError, path: Path, *, left: str | None = None) -> StorageError:
    """One error for a write of *path* that the disk refused (full, out of inodes, read-only, quota)."""
    what = {
        errno.ENOSPC: "no space left on the device (or no inodes)",
        errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "read-only file system",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    kept = left or (f"{path.name} was left as it was" if path.name else "nothing was changed")
    return StorageError(
        f"cannot write {path}: {what} ({free_space(path.parent)}); {kept}",
        hint=f"free space in {path.parent} and run the command again",
        file=str(path),
        fault=Fault.STORAGE_FULL if exc.errno in _FULL else Fault.STORAGE,
    )


def check_target(path: Path) -> None:
    """Refuse to replace a symlink or something that is not a regular file (a folder, a FIFO, a device)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise StorageError(
            f"{path} is a symbolic link: imagesmith does not write through it",
            hint=f"remove the link (or replace it with the file it points to): rm {path}",
            file=str(path),
            problem="symlink",
        )
    if not stat.S_ISREG(st.st_mode):
        raise StorageError(
            f"{path} is not a regular file: imagesmith does not replace it",
            hint=f"move it out of the way and run the command again: {path}",
            file=str(path),
            problem="not a regular file",
        )


def fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot fsync a directory
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_tmp(path: Path, data: bytes, mode: int, n: int = 0) -> Path:
    tmp = tmp_path(path, n)
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    tmp.chmod(mode)  # the umask narrowed it at creation
    return tmp


def _mode_of(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o644


def write_atomic(path: Path, data: bytes | str, *, mode: int | None = None) -> Path:
    """Write *data* to *path* whole or not at all (see the module). *mode*: the new file's permissions
    (default: the old file's, or 0o644). Returns *path*."""
    body = data.encode("utf-8") if isinstance(data, str) else data
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(exc, path, left="nothing was written") from None
    check_target(path)
    clean_stale(folder)
    if mode is None:
        mode = _mode_of(path)
    try:
        tmp = _write_tmp(path, body, mode)
    except OSError as exc:
        raise storage_error(exc, path) from None
    try:
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise storage_error(exc, path) from None
    fsync_dir(folder)
    return path


def write_exclusive(path: Path, data: bytes, *, mode: int) -> Path:
    """Create *path* with *data*, whole, only if nothing is there (a key: never overwritten). The temp is
    written and fsynced, then hard-linked to *path* (which fails when *path* exists) and removed: a kill
    leaves no file or the whole one, never a 0-byte key. Raises FileExistsError when *path* exists."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        clean_stale(folder)
        tmp = _write_tmp(path, data, mode)
    except OSError as exc:
        raise storage_error(exc, path, left="nothing was written") from None
    try:
        os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    fsync_dir(folder)
    return path


def write_tree(
    files: Mapping[Path, bytes | str],
    *,
    remove: Iterable[Path] = (),
    modes: Mapping[Path, int] | None = None,
) -> None:
    """Write every file of *files* (and remove *remove*) as one change: all temps written and fsynced first,
    then renamed into place. A failure while writing the temps leaves every file as it was; the renames that
    follow cannot run out of space. A kill during the renames leaves each file old or new, whole, and the
    next run (``render`` again) finishes the rest."""
    for path in files:
        check_target(path)
    written: list[tuple[Path, Path]] = []
    try:
        for folder in sorted({p.parent for p in files}):
            folder.mkdir(parents=True, exist_ok=True)
            clean_stale(folder)
        for path, data in files.items():
            body = data.encode("utf-8") if isinstance(data, str) else data
            mode = (modes or {}).get(path) or _mode_of(path)
            written.append((_write_tmp(path, body, mode), path))
    except OSError as exc:
        for tmp, _ in written:
            with contextlib.suppress(OSError):
                tmp.unlink()
        where = next((p for p in files if not any(p == d for _, d in written)), next(iter(files)))
        raise storage_error(exc, where, left="every file of the tree was left as it was") from None
    for tmp, path in written:
        tmp.replace(path)
    remove = tuple(remove)
    for path in remove:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    for folder in sorted({p.parent for p in (*files, *remove)}):
        fsync_dir(folder)


@contextlib.contextmanager
def staged_dir(path: Path) -> Iterator[Path]:
    """A folder to fill under a temp name beside *path*; renamed to *path* when the block ends without an
    error (an older *path* is replaced), removed when it raises. A kill leaves *path* as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path.parent)
    tmp = tmp_path(path)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, path)


def replace_dir(tmp: Path, path: Path) -> None:
    """Put the folder *tmp* at *path*; an older folder there is moved aside first and removed after."""
    old: Path | None = None
    if os.path.lexists(path):
        if path.is_symlink() or not path.is_dir():
            raise StorageError(
                f"{path} is not a folder: imagesmith does not replace it",
                hint=f"move it out of the way and run the command again: {path}",
                file=str(path),
                problem="not a folder",
            )
        old = tmp_path(path, 1)
        path.replace(old)
    tmp.replace(path)
    fsync_dir(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
