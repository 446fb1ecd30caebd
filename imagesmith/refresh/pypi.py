"""Which package index and which CA (pip's configuration), and what the index says of a project: its
files (:class:`DistFile`), read live through the JSON Simple API (:class:`LiveSource`, which can record
what it read) or replayed from a recording (:class:`RecordedSource`).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from imagesmith import inputs, settings
from imagesmith.errors import ConfigError, UpstreamError
from imagesmith.fatbin import FatbinReport
from imagesmith.refresh.transfer import Http, RemoteWheel, read_fatbins

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
CUDA_LIBRARY = "torch/lib/libtorch_cuda.so"
#: the platform PyPI's default CUDA build is published for
LINUX_X86 = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": "x86_64"}


# ------------------------------------------------------------------------------------------------------------
# configuration: which index, which CA


def _pip_config() -> dict[str, str]:
    """``pip config list`` as {key: value} (empty when pip is missing or fails)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    out = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip("'\"")
    return out


def check_index_url(url: str, origin: str) -> str:
    """*url* when it is an ``http(s)://HOST…`` URL; anything else (``ftp://``, ``not a url``, a path) is a
    :class:`ConfigError` naming *origin* (``--index-url``, ``PIP_INDEX_URL``, pip's config) — before any
    request, so that a typo never gets network advice."""
    parts = url.split("://", 1)
    if len(parts) != 2 or parts[0].lower() not in ("http", "https") or not parts[1].split("/")[0].strip():
        raise ConfigError(
            f"{origin} {url[:200]!r}: not an http(s):// package index URL",
            hint=f"set {origin} to the index's simple API, e.g. https://pypi.example.org/simple/",
        )
    return url


def default_index_url(env: Mapping[str, str] | None = None) -> str:
    """The index pip uses: ``$PIP_INDEX_URL``, else pip's configured ``index-url``, else pip's default."""
    given = (settings.get("PIP_INDEX_URL", env=env) or "").strip()
    if given:
        return check_index_url(given.split()[0], "PIP_INDEX_URL")
    config = _pip_config()
    for key in ("global.index-url", ":env:.index-url", "install.index-url"):
        if config.get(key):
            return check_index_url(config[key].split()[0], f"pip config {key}")
    try:
        from pip._internal.models.index import PyPI

        return str(PyPI.simple_url)
    except ImportError:  # pragma: no cover - every venv imagesmith runs in has pip
        raise ConfigError(
            "no package index configured and pip is not installed",
            hint="pass --index-url URL (a PEP 691 Simple API) or set PIP_INDEX_URL",
        ) from None


def ca_bundle(env: Mapping[str, str] | None = None) -> str | bool:
    """The CA requests verifies with: ``$REQUESTS_CA_BUNDLE``, ``$PIP_CERT``, pip's ``cert``, else certifi."""
    for key in ("REQUESTS_CA_BUNDLE", "PIP_CERT", "SSL_CERT_FILE"):
        given = settings.get(key, env=env)
        if given:
            return given
    config = _pip_config()
    for key in ("global.cert", ":env:.cert"):
        if config.get(key):
            return config[key]
    return True


# ------------------------------------------------------------------------------------------------------------
# what the index says


@dataclass(frozen=True, kw_only=True)
class DistFile:
    """One wheel on the index."""

    project: str
    filename: str
    url: str
    size: int
    upload_time: str = ""
    requires_python: str | None = None
    #: the index serves the wheel's METADATA next to it (PEP 658/714 ``core-metadata``)
    core_metadata: bool = False

    @property
    def version(self) -> Version:
        return parse_wheel_filename(self.filename)[1]

    @property
    def build(self) -> int:
        tag = parse_wheel_filename(self.filename)[2]
        return tag[0] if tag else 0

    @property
    def tags(self) -> frozenset[Any]:
        return parse_wheel_filename(self.filename)[3]

    @property
    def linux_x86(self) -> bool:
        return any(
            t.platform == "any" or (t.platform.startswith("manylinux") and t.platform.endswith("x86_64"))
            for t in self.tags
        )

    @property
    def cpython(self) -> tuple[int, int] | None:
        """(3, 12) for a cp312 wheel; None for py3-none."""
        for t in self.tags:
            m = re.fullmatch(r"cp3([0-9]+)", t.interpreter)
            if m:
                return 3, int(m.group(1))
        return None


class Source(Protocol):
    """Where the facts come from: the live index, or a recording of it."""

    def files(self, project: str) -> list[DistFile]: ...

    def metadata(self, wheel: DistFile) -> str: ...

    def fatbin(self, wheel: DistFile) -> FatbinReport: ...


_KEEP_METADATA = ("Metadata-Version", "Name", "Version", "Requires-Python", "Requires-Dist")


def _trim_metadata(text: str) -> str:
    """The header lines the drafts use (the description is most of a METADATA file)."""
    head = text.split("\n\n", 1)[0]
    return "\n".join(line for line in head.splitlines() if line.split(":", 1)[0] in _KEEP_METADATA) + "\n"


class LiveSource:
    """The package index through its JSON Simple API; *record* = a folder to keep what was read, trimmed."""

    def __init__(self, index_url: str, http: Http, record: Path | None = None) -> None:
        self.index_url = index_url.rstrip("/") + "/"
        self.http = http
        self.record = record
        self.fatbin_reads: list[dict[str, Any]] = []
        self._files: dict[str, list[DistFile]] = {}
        self._touched: dict[str, set[str]] = {}

    def files(self, project: str) -> list[DistFile]:
        if project not in self._files:
            url = urljoin(self.index_url, f"{project}/")
            body, final = self.http.get(url, {"Accept": SIMPLE_JSON})
            hint = "point --index-url at an index that serves application/vnd.pypi.simple.v1+json"
            try:
                data = inputs.loads_json(body, url, error=UpstreamError, hint=hint)
                rows = data["files"]
                self._files[project] = _dist_files(project, rows, final)
            except (ValueError, KeyError, TypeError, AttributeError):
                raise UpstreamError(
                    f"{url} did not answer the JSON Simple API (PEP 691)", hint=hint
                ) from None
        return self._files[project]

    def _touch(self, wheel: DistFile) -> None:
        self._touched.setdefault(wheel.project, set()).add(str(wheel.version))

    def metadata(self, wheel: DistFile) -> str:
        self._touch(wheel)
        if wheel.core_metadata:
            raw = self.http.get(wheel.url + ".metadata")[0]
        else:
            raw = RemoteWheel(self.http, wheel.url, wheel.size).read(_metadata_member(wheel))
        # core metadata is UTF-8 (PEP 566); a stray byte in a description must not end the run: the fields
        # read (Requires-Dist, Requires-Python) are ASCII
        text = raw.decode("utf-8", "replace")
        if self.record:
            path = self.record / "metadata" / f"{wheel.filename}.METADATA"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_trim_metadata(text))
        return text

    def fatbin(self, wheel: DistFile) -> FatbinReport:
        self._touch(wheel)
        before = self.http.bytes
        started = datetime.datetime.now(datetime.timezone.utc)
        remote = RemoteWheel(self.http, wheel.url, wheel.size)
        member = remote.members().get(CUDA_LIBRARY)
        report = read_fatbins(remote.stream(CUDA_LIBRARY))
        seconds = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
        self.fatbin_reads.append(
            {
                "file": wheel.filename,
                "wheel_bytes": wheel.size,
                "member_compressed": member.compressed if member else None,
                "member_size": member.size if member else None,
                "bytes_read": self.http.bytes - before,
                "seconds": round(seconds, 1),
            }
        )
        if self.record:
            path = self.record / "fatbin" / f"{wheel.filename}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(report.to_json(), indent=1) + "\n")
        return report

    def save_listings(self) -> None:
        """Write each project's file list, trimmed to the versions read and the fields used."""
        if not self.record:
            return
        for project, files in self._files.items():
            keep = self._touched.get(project, set())
            rows = [
                {
                    "filename": f.filename,
                    "url": urlsplit(f.url).path,  # the host is the index's business, not the recording's
                    "size": f.size,
                    "upload-time": f.upload_time,
                    "requires-python": f.requires_python,
                }
                for f in files
                if str(f.version) in keep and f.linux_x86
            ]
            path = self.record / "simple" / f"{project}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"files": rows}, indent=1) + "\n")


def _metadata_member(wheel: DistFile) -> str:
    name, version, _, _ = parse_wheel_filename(wheel.filename)
    return f"{name.replace('-', '_')}-{version}.dist-info/METADATA"


def _size(value: Any) -> int:
    """A file's ``size`` from a Simple API page: a non-negative integer, else 0 (unknown; NaN, a string or a
    negative number never reach ``int()``)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _dist_files(project: str, rows: Sequence[Mapping[str, Any]], base: str) -> list[DistFile]:
    out = []
    for row in rows:
        name = str(row.get("filename", ""))
        if not name.endswith(".whl") or row.get("yanked"):
            continue
        try:
            parse_wheel_filename(name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        out.append(
            DistFile(
                project=project,
                filename=name,
                url=urljoin(base, str(row.get("url", ""))),
                size=_size(row.get("size")),
                upload_time=str(row.get("upload-time") or ""),
                requires_python=row.get("requires-python"),
                core_metadata=bool(row.get("core-metadata") or row.get("data-dist-info-metadata")),
            )
        )
    return out


class RecordedSource:
    """A folder written by ``--record``: ``simple/<project>.json``, ``metadata/<file>.METADATA``,
    ``fatbin/<file>.json``."""

    def __init__(self, root: Path) -> None:
        if not (root / "simple").is_dir():
            raise ConfigError(
                f"--offline {root}: no simple/ folder (not a recording)",
                hint="make one with: imagesmith refresh-compat --record DIR",
            )
        self.root = root
        self.fatbin_reads: list[dict[str, Any]] = []

    def files(self, project: str) -> list[DistFile]:
        path = self.root / "simple" / f"{project}.json"
        if not os.path.lexists(path):
            return []
        doc = self._json(path)
        try:
            return _dist_files(project, doc["files"], "")
        except (KeyError, TypeError, ValueError, AttributeError):
            raise self._bad(path, "not a recorded PEP 691 project page (no readable `files` list)") from None

    def _bad(self, path: Path, what: str) -> ConfigError:
        return ConfigError(
            f"--offline {self.root}: {path.relative_to(self.root)}: {what}",
            hint="record again with: imagesmith refresh-compat --record DIR (same --releases)",
        )

    def _text(self, path: Path) -> str:
        """A recorded file: a regular UTF-8 file (a FIFO, a folder or another encoding is one error naming it,
        never "not recorded" or a traceback)."""
        return inputs.read_user_text(
            path,
            f"--offline {self.root}:",
            hint="record again with: imagesmith refresh-compat --record DIR (same --releases)",
        )

    def _json(self, path: Path) -> Any:
        text = self._text(path)
        try:
            return inputs.loads_json(
                text, f"--offline {path}", hint="record again with: imagesmith refresh-compat --record DIR"
            )
        except json.JSONDecodeError as exc:
            raise self._bad(path, f"not JSON ({exc.msg} at line {exc.lineno})") from None

    def _need(self, path: Path) -> Path:
        if not os.path.lexists(path):
            raise ConfigError(
                f"--offline {self.root}: {path.relative_to(self.root)} was not recorded",
                hint="record again with: imagesmith refresh-compat --record DIR (same --releases)",
            )
        return path

    def metadata(self, wheel: DistFile) -> str:
        return self._text(self._need(self.root / "metadata" / f"{wheel.filename}.METADATA"))

    def fatbin(self, wheel: DistFile) -> FatbinReport:
        path = self._need(self.root / "fatbin" / f"{wheel.filename}.json")
        doc = self._json(path)
        try:
            return FatbinReport.from_json(doc)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise self._bad(path, "not a recorded fatbin report") from None
