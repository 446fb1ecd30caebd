"""imagesmith's own wheel, made from the installed distribution: what goes into every image as the suite.

Every image carries the imagesmith that built it (``imagesmith-validate`` inside the image). That wheel is
made from the files of the *running* installation — a wheel install, a plain ``pip install .`` or an editable
checkout alike — never by building a source tree, so a released imagesmith builds images from any project
folder. The zip is reproducible: entries sorted, fixed timestamps and modes, so the same installed files give
the same bytes and the same sha256 (the image identity's ``suite`` part, see
:func:`imagesmith.build.suite_digest`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import threading
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final

from packaging.utils import canonicalize_name

import imagesmith
from imagesmith.errors import BuildError

DIST_NAME: Final[str] = "imagesmith"
_DATE: Final[tuple[int, int, int, int, int, int]] = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS: Final[frozenset[str]] = frozenset({"__pycache__"})
_SKIP_SUFFIXES: Final[tuple[str, ...]] = (".pyc", ".pyo")
_LOCK = threading.Lock()


@dataclass(frozen=True, kw_only=True)
class SuiteWheel:
    """The wheel's file name, bytes and sha256."""

    name: str
    data: bytes
    sha256: str

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / self.name
        if not (target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == self.sha256):
            tmp = target.with_suffix(".part")
            tmp.write_bytes(self.data)
            tmp.replace(target)
        return target


def package_dir() -> Path:
    """The folder the running ``imagesmith`` package was imported from."""
    return Path(imagesmith.__file__).resolve().parent


def package_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """``(archive name, file)`` for every file of the package: modules, data, templates, the suite."""
    base = root or package_dir()
    out: list[tuple[str, Path]] = []
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base)
        if not path.is_file() or _SKIP_DIRS & set(rel.parts) or path.name.endswith(_SKIP_SUFFIXES):
            continue
        out.append((f"{base.name}/{rel.as_posix()}", path))
    return out


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _dist_text(dist: metadata.Distribution | None, name: str) -> str | None:
    return dist.read_text(name) if dist is not None else None


def _metadata_text(dist: metadata.Distribution | None) -> str:
    text = _dist_text(dist, "METADATA")
    if text:
        return text
    # not installed as a distribution (running from a bare source folder): the minimal core metadata
    return f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {imagesmith.__version__}\n"


def _image_metadata(meta: str) -> str:
    """The METADATA the suite wheel carries into images: without the ``Requires-Dist`` lines of the host-only
    dependencies (:data:`imagesmith.lock.HOST_ONLY_DEPS`: signing, never imported by the suite), which the
    image's lock does not pin — ``pip check`` in the image would otherwise report them missing."""
    from imagesmith.lock import HOST_ONLY_DEPS

    host_only = {canonicalize_name(re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0]) for d in HOST_ONLY_DEPS}
    kept = []
    for line in meta.splitlines(keepends=True):
        m = re.match(r"Requires-Dist:\s*([A-Za-z0-9._-]+)", line)
        if m and canonicalize_name(m.group(1)) in host_only:
            continue
        kept.append(line)
    return "".join(kept)


def installed_distribution() -> metadata.Distribution | None:
    """imagesmith's installed distribution: the one an installer wrote (a ``.dist-info`` with ``WHEEL``,
    editable or not) before any other — setuptools leaves an ``.egg-info`` in a checkout's root, which
    ``python -m imagesmith`` run there finds first on ``sys.path`` ('' = the working folder), and the suite's
    digest would then depend on the folder it was run from."""
    found = list(metadata.distributions(name=DIST_NAME))
    found.sort(key=lambda d: d.read_text("WHEEL") is None)  # stable: sys.path order among equals
    return found[0] if found else None


def build_suite_wheel(root: Path | None = None) -> SuiteWheel:
    """A reproducible ``imagesmith-<version>-py3-none-any.whl`` of the running installation."""
    dist = installed_distribution()
    meta = _metadata_text(dist)
    version_line = re.search(r"^Version:\s*(\S+)", meta, re.MULTILINE)
    version = version_line.group(1) if version_line else imagesmith.__version__
    if version != imagesmith.__version__:
        raise BuildError(
            f"the installed {DIST_NAME} distribution says version {version}, the imported package "
            f"{package_dir()} is {imagesmith.__version__}",
            hint="reinstall imagesmith (pip install --force-reinstall) so metadata and code agree",
        )
    dist_info = f"{DIST_NAME}-{version}.dist-info"
    entries: list[tuple[str, bytes]] = [(name, path.read_bytes()) for name, path in package_files(root)]
    if not entries:
        raise BuildError(
            f"no files found in {root or package_dir()} for imagesmith's own wheel",
            hint="reinstall imagesmith",
        )
    entries.append((f"{dist_info}/METADATA", _image_metadata(meta).encode()))
    entry_points = _dist_text(dist, "entry_points.txt")
    if entry_points:
        entries.append((f"{dist_info}/entry_points.txt", entry_points.encode()))
    wheel_meta = (
        "Wheel-Version: 1.0\nGenerator: imagesmith (from the installed distribution)\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n"
    )
    entries.append((f"{dist_info}/WHEEL", wheel_meta.encode()))
    entries.sort(key=lambda e: e[0])
    record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d in entries)
    record += f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            zf.writestr(info, data, compresslevel=6)
    data = buf.getvalue()
    return SuiteWheel(
        name=f"{DIST_NAME}-{version}-py3-none-any.whl", data=data, sha256=hashlib.sha256(data).hexdigest()
    )


_CACHED: SuiteWheel | None = None


def suite_wheel() -> SuiteWheel:
    """:func:`build_suite_wheel` of the running installation, made once per process."""
    global _CACHED
    with _LOCK:
        if _CACHED is None:
            _CACHED = build_suite_wheel()
        return _CACHED
