"""What release checks of a candidate's labels and how it writes its files (issue 34).

**Labels bound to the plan and to the evidence.** ``pick`` filters on an index entry's min-driver, arch and
shm fields, which release takes from the candidate's image-config labels
(:func:`imagesmith.release.image_facts`).
:func:`label_differences` compares them with the plan's cell, and the torch and CUDA the validation suite
recorded *inside the image* (``test_record_stack`` of each verified, passing report) with the torch and CUDA
labels: any disagreement refuses the cell — false labels would be published and picked by.

**Writes.** Every file release writes beside the index (the index, ``index.json.sig``, ``index.json.pub``) and
its read-back memory goes through :func:`write_file`: a temporary file created exclusively in the same folder,
then renamed over the target; a target that is a symbolic link or not a regular file (a FIFO, a device, a
folder) is refused — a link committed as ``index.json.sig`` would make the release job overwrite a file
outside the project. :func:`check_targets` refuses them before anything is promoted.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from imagesmith import atomicio
from imagesmith.errors import ConfigError

#: the validation check whose figures record the stack inside the image
#: (imagesmith/validate/suite/test_01_record.py)
RECORD_CHECK = "test_record_stack"


def label_differences(cell: Any, facts: Any, reports: Sequence[Any]) -> list[str]:
    """``what the image says (what it should say)`` for each label of *facts* (:class:`ImageFacts` of the
    candidate) that disagrees with the plan's *cell* (:class:`ReleaseCell`: min_driver, arch, shm) or with
    the evidence (the torch / CUDA each passing report in *reports* recorded inside the image); [] when all
    agree. A report that recorded no torch (an older suite, a failed record check) binds nothing."""
    out = []
    if facts.min_driver != cell.min_driver:
        out.append(
            f"min-driver {facts.min_driver.full}/{facts.min_driver.minor_version} (the plan's cell: "
            f"{cell.min_driver.full}/{cell.min_driver.minor_version})"
        )
    if tuple(facts.arch) != tuple(cell.arch):
        out.append(
            f"arch {','.join(facts.arch) or 'none'} (the plan's cell: {','.join(cell.arch) or 'none'})"
        )
    planned_shm = (cell.shm_size or "").lower() or None
    if (facts.shm.size or None) != planned_shm:
        out.append(f"shm-min {facts.shm.size or 'none'} (the plan's cell: {planned_shm or 'none'})")
    for report in reports:
        recorded = recorded_stack(getattr(report, "body", b""))
        where = f"the validation report {getattr(report, 'path', '?')} recorded inside the image"
        torch = recorded.get("torch")
        if isinstance(torch, str) and torch.strip() and _base(torch) != _base(facts.torch):
            out.append(f"torch {facts.torch} ({where}: torch {torch})")
        cuda = recorded.get("torch_cuda")
        if isinstance(cuda, str) and cuda.strip() and not _same_cuda(cuda, facts.cuda):
            out.append(f"cuda {facts.cuda} ({where}: torch built for CUDA {cuda})")
    return list(dict.fromkeys(out))


def recorded_stack(body: bytes) -> dict[str, Any]:
    """The figures of the report's :data:`RECORD_CHECK` (what ran inside the image), {} when none."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError, TypeError):
        return {}
    checks = doc.get("checks") if isinstance(doc, dict) else None
    for check in checks if isinstance(checks, list) else ():
        if isinstance(check, dict) and check.get("name") == RECORD_CHECK:
            figures = check.get("figures")
            return figures if isinstance(figures, dict) else {}
    return {}


def _base(version: str) -> str:
    """``2.5.1+cu124`` → ``2.5.1`` (torch's local version names its wheel's CUDA, not another torch)."""
    return version.strip().split("+", 1)[0]


def _same_cuda(recorded: str, label: str) -> bool:
    """torch.version.cuda (``12.4``) against the CUDA label (``12.4`` or ``12.4.1``): the same major.minor."""
    return recorded.strip().split(".")[:2] == label.strip().split(".")[:2]


# ------------------------------------------------------------------------------------------------------------
# writes


def _refusal(path: Path, why: str) -> ConfigError:
    return ConfigError(
        f"{path}: {why}: release writes it, and does not write through it",
        hint=f"remove {path} (or replace it by the regular file it stands for) and run release again",
    )


def check_target(path: Path) -> None:
    """Refuse *path* as a file release replaces: a symbolic link (dangling or not), or anything there that is
    not a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _refusal(path, f"cannot be inspected ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise _refusal(path, f"is a symbolic link (to {str(path.readlink())[:200]})")
    if not stat.S_ISREG(st.st_mode):
        raise _refusal(path, "is not a regular file (a folder, a FIFO, a socket or a device)")


def check_targets(paths: Iterable[Path]) -> None:
    """:func:`check_target` for each of *paths*: called before release promotes anything."""
    for path in paths:
        check_target(path)


def write_file(path: Path, data: bytes) -> None:
    """Write *data* to *path* whole or not at all (:func:`imagesmith.atomicio.write_atomic`: a temporary
    file in *path*'s folder, fsynced, renamed over *path*). *path* must not be a symbolic link or a
    non-regular file (:func:`check_target`, release's own error naming the file); the rename replaces the
    name, never what a link points to."""
    check_target(path)
    atomicio.write_atomic(path, data)
