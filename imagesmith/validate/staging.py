"""The report folder of ``imagesmith validate``, filled beside it and put in place whole.

A run writes its evidence bundle into a temp folder beside the report folder (same parent, so a rename
moves it): ``.DIR.tmp-<pid>-<random>``. When the run ends with a verdict (passed or failed), :func:`publish`
renames it to DIR; a bundle DIR already holds (a rerun into the same folder) is swapped out in the same
step (``renameat2(RENAME_EXCHANGE)`` where the kernel has it, else moved aside first) and removed after. At
every instant DIR is the old whole bundle or the new whole one (absent, on a first run). On an error or an
abort the temp folder is removed and DIR is left as it was; a run killed outright leaves its temp folder,
which the next run into that parent removes (its pid, in the name, is gone; a live run's are left alone).
A report folder that is a mount point (the scratch folder inside an image) is filled in place.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import shutil
from pathlib import Path

from imagesmith.errors import ConfigError

#: ``.<name>.tmp-<pid>-<random>`` (the new bundle being filled) or ``.<name>.old-<pid>-<random>`` (the bundle
#: it replaces, between the swap and its removal)
_LEFTOVER = re.compile(r"\..+\.(?:tmp|old)-([0-9]+)-[0-9a-f]+", flags=re.ASCII)

#: files that mark a folder as an evidence bundle (what a rerun may replace whole)
BUNDLE_FILES = ("report.json", "report.md", "junit.xml", "attestation.dsse.json")


def is_staging(name: str) -> bool:
    """Whether *name* is a temp or set-aside folder of a validate run (never evidence: release skips it)."""
    return _LEFTOVER.fullmatch(name) is not None


def check_replaceable(path: Path) -> None:
    """A folder given as --report that already exists is replaced whole at the end of the run: only an
    empty folder or an earlier bundle may be, never a folder of other files (``--report .``)."""
    if not path.is_dir() or path.resolve() == Path.cwd().resolve():
        if path.is_dir():
            raise ConfigError(
                f"--report {path}: is the current folder; the bundle replaces its folder whole",
                hint="give a folder of its own for the bundle, e.g. reports/validate-1",
            )
        return
    names = {p.name for p in path.iterdir()}
    if names and not names & set(BUNDLE_FILES):
        raise ConfigError(
            f"--report {path}: holds files that are not an evidence bundle (a rerun replaces it whole)",
            hint="give a new folder or the folder of an earlier validate run",
        )


def staging_dir(final: Path) -> Path:
    """A new, empty temp folder beside *final*, after removing the leftovers of dead runs in that parent;
    *final* itself when it is a mount point (a mount cannot be renamed: the scratch folder the host
    bind-mounts into an image, which the host copies files out of and writes the bundle from itself)."""
    if os.path.ismount(final):
        return final
    parent = final.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    remove_dead_leftovers(parent)
    path = parent / f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir()
    return path


def remove_dead_leftovers(parent: Path) -> list[Path]:
    """Remove the temp and set-aside folders in *parent* of runs whose process is gone; return them."""
    removed = []
    for entry in parent.iterdir():
        m = _LEFTOVER.fullmatch(entry.name)
        if m is None or not entry.is_dir() or _alive(int(m.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def publish(staging: Path, final: Path) -> None:
    """Put the filled *staging* folder in place as *final*, replacing a bundle *final* holds."""
    if staging == final:  # a mount point, filled in place
        return
    final = final.absolute()
    if not final.exists():
        staging.rename(final)
        return
    aside = final.parent / f".{final.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
    if _exchange(staging, final):
        staging.rename(aside)  # staging now holds the old bundle
    else:
        final.rename(aside)
        staging.rename(final)
    shutil.rmtree(aside, ignore_errors=True)


def discard(staging: Path, final: Path) -> None:
    """Remove the temp folder of a run that ends without a verdict: *final* stays as it was."""
    if staging != final:
        shutil.rmtree(staging, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap *a* and *b* in one step (Linux renameat2 RENAME_EXCHANGE); False where that is not to be had."""
    at_fdcwd, rename_exchange = -100, 2
    with contextlib.suppress(OSError, AttributeError):
        fn = ctypes.CDLL(None, use_errno=True).renameat2
        if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return pid > 0
