"""Draft torch / torchvision / torchaudio rows from PyPI and diff them against ``data/torch.toml``.

Primary sources only, read through the package index's JSON Simple API (PEP 691):

- the file list of a project: wheel file names (cp tags → the Python range), sizes, upload times;
- each wheel's ``METADATA`` (Requires-Dist: the NCCL, cuDNN and CUDA runtime pins of PyPI's default CUDA
  build; torchvision's and torchaudio's ``torch`` pin), from the PEP 658 ``.metadata`` file when the index
  has one, else from the wheel itself with HTTP range requests (its zip central directory, then that one
  member);
- the CUDA architectures of PyPI's default build, from the fatbin headers in ``torch/lib/libtorch_cuda.so``:
  the member is streamed from its local header and inflated on the fly until its ``.nv_fatbin`` run ends
  (:mod:`imagesmith.fatbin`); the rest of the member and of the wheel is never fetched.

Only PyPI's default variant of a release can be read here; the other variants (PyTorch's own wheel index) are
reported as not checked. :class:`LiveSource` reads the index; ``record`` keeps what it read (trimmed) in a
folder that :class:`RecordedSource` replays (``--offline DIR``; the unit tests' data).
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import re
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

import requests
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from imagesmith import compat, http, inputs, settings
from imagesmith.errors import ConfigError, UpstreamError
from imagesmith.fatbin import FatbinReport, FatbinScanner

#: exit status of ``imagesmith refresh-compat`` when PyPI differs from the data or has releases it lacks
EXIT_DIFFERENCES = 11
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
CUDA_LIBRARY = "torch/lib/libtorch_cuda.so"
_CHUNK = 1 << 20
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
# HTTP with byte accounting


class Http:
    """GET, range GET and streamed range GET; every failure is one :class:`UpstreamError` naming the URL."""

    #: the fix of an index that does not answer, for ``imagesmith refresh`` (its flags)
    REFRESH_FIX = (
        "check the network and proxy (HTTPS_PROXY, REQUESTS_CA_BUNDLE), pass --index-url, "
        "or replay a recording with --offline DIR"
    )
    #: … and for a command that reads pip's own index (``imagesmith lock --sizes``)
    PIP_FIX = (
        "check the network and proxy (HTTPS_PROXY, REQUESTS_CA_BUNDLE), or set PIP_INDEX_URL to an index "
        "that answers (a PEP 691 Simple API such as PyPI's /simple/)"
    )

    def __init__(
        self, verify: str | bool = True, session: requests.Session | None = None, *, fix: str = REFRESH_FIX
    ) -> None:
        self.session = session or requests.Session()
        self.verify = verify
        self.fix = fix
        self.bytes = 0
        self.requests = 0

    def _get(self, url: str, headers: Mapping[str, str], *, stream: bool = True) -> requests.Response:
        """The answer to a GET, its body not read yet (always streamed: a body is read through
        :meth:`_body`, capped, and only once its status says it is the one asked for)."""
        self.requests += 1
        try:
            resp = http.get(
                url,
                http.PACKAGE_INDEX,
                headers=headers,
                stream=True,
                verify=self.verify,
                session=self.session,
            )
        except requests.RequestException as exc:
            raise UpstreamError(f"cannot read {url}: {exc}", hint=self.fix) from None
        if resp.status_code not in (200, 206):
            resp.close()
            raise UpstreamError(f"{url} answered HTTP {resp.status_code}", hint=self.fix)
        return resp

    def _body(self, url: str, resp: requests.Response) -> bytes:
        """*resp*'s body, at most ``http.PACKAGE_INDEX.max_bytes`` of it (a larger answer is not an index
        page, a metadata file or a range imagesmith asked for)."""
        policy = http.PACKAGE_INDEX
        try:
            body = b"".join(http.capped(resp.iter_content(_CHUNK), policy))
        except http.TooLarge as exc:
            raise UpstreamError(
                f"{url} answered more than {exc.limit >> 20} MiB; not read further",
                hint="point --index-url (or PIP_INDEX_URL) at a package index's Simple API",
            ) from None
        except requests.RequestException as exc:
            raise UpstreamError(f"reading {url} failed: {exc}", hint=self.fix) from None
        finally:
            resp.close()
        self.bytes += len(body)
        return body

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> tuple[bytes, str]:
        """(body, the URL it came from after redirects)."""
        resp = self._get(url, headers or {})
        return self._body(url, resp), resp.url

    def range(self, url: str, start: int, end: int) -> bytes:
        """Bytes ``start`` … ``end`` (inclusive) of *url*; a negative *start* = the last ``-start`` bytes."""
        spec = f"bytes={start}" if start < 0 else f"bytes={start}-{end}"
        resp = self._get(url, {"Range": spec})
        if resp.status_code != 206:
            resp.close()  # the whole file (a wheel of gigabytes): not read
            raise UpstreamError(
                f"{url} ignored the Range header (HTTP {resp.status_code})",
                hint="the file host must answer range requests; use --no-arch to skip the wheel reads",
            )
        return self._body(url, resp)

    def stream(self, url: str, start: int, end: int) -> Iterator[bytes]:
        resp = self._get(url, {"Range": f"bytes={start}-{end}"}, stream=True)
        try:
            for chunk in resp.iter_content(_CHUNK):
                self.bytes += len(chunk)
                yield chunk
        except requests.RequestException as exc:
            raise UpstreamError(f"reading {url} failed: {exc}", hint="run it again") from None
        finally:
            resp.close()


# ------------------------------------------------------------------------------------------------------------
# a wheel on a web server, read by ranges


@dataclass(frozen=True)
class Member:
    name: str
    method: int
    compressed: int
    size: int
    offset: int


class RemoteWheel:
    """A zip read through range requests: the central directory from the end, members from their offsets."""

    def __init__(self, http: Http, url: str, size: int) -> None:
        self.http = http
        self.url = url
        self.size = size
        self._members: dict[str, Member] | None = None

    def members(self) -> dict[str, Member]:
        if self._members is None:
            tail = self.http.range(self.url, -min(self.size, 65536), 0)
            self._members = parse_central_directory(tail, self.size, self._fetch)
        return self._members

    def _fetch(self, start: int, end: int) -> bytes:
        return self.http.range(self.url, start, end)

    def _data_start(self, member: Member) -> int:
        local = self.http.range(self.url, member.offset, member.offset + 29)
        name_len, extra_len = struct.unpack_from("<HH", local, 26)
        return int(member.offset + 30 + name_len + extra_len)

    def read(self, name: str) -> bytes:
        """One (small) member, whole."""
        member = self._member(name)
        start = self._data_start(member)
        raw = self.http.range(self.url, start, start + member.compressed - 1)
        return raw if member.method == 0 else zlib.decompress(raw, -15)

    def stream(self, name: str) -> Iterator[bytes]:
        """One member's uncompressed bytes in order; stop iterating to stop downloading."""
        member = self._member(name)
        start = self._data_start(member)
        chunks = self.http.stream(self.url, start, start + member.compressed - 1)
        if member.method == 0:
            yield from chunks
            return
        inflater = zlib.decompressobj(-15)
        for chunk in chunks:
            out = inflater.decompress(chunk)
            if out:
                yield out

    def _member(self, name: str) -> Member:
        found = self.members().get(name)
        if found is None:
            raise UpstreamError(
                f"{self.url} has no member {name}",
                hint="this wheel is not a CUDA build (a CPU-only wheel carries no libtorch_cuda.so)",
            )
        return found


def parse_central_directory(tail: bytes, size: int, fetch: Callable[[int, int], bytes]) -> dict[str, Member]:
    """The members of a zip of *size* bytes from its last bytes (*tail*); *fetch* reads the rest if needed."""
    at = tail.rfind(b"PK\x05\x06")
    if at < 0:
        raise UpstreamError(
            "not a zip file: no end-of-central-directory record in its last 64 KiB",
            hint="the index listed a file that is not a wheel; check --index-url",
        )
    count, cd_size, cd_offset = struct.unpack_from("<HII", tail, at + 10)
    z64 = tail.rfind(b"PK\x06\x06", 0, at)
    if z64 >= 0:  # zip64: the counts and offsets of the zip64 EOCD win
        count, _, cd_size, cd_offset = struct.unpack_from("<QQQQ", tail, z64 + 24)
    tail_start = size - len(tail)
    if cd_offset >= tail_start:
        cd = tail[cd_offset - tail_start : cd_offset - tail_start + cd_size]
    else:
        cd = fetch(cd_offset, cd_offset + cd_size - 1)
    out: dict[str, Member] = {}
    p = 0
    for _ in range(count):
        if cd[p : p + 4] != b"PK\x01\x02":
            raise UpstreamError(
                f"broken zip central directory at entry {len(out)}",
                hint="the file changed while read; run again",
            )
        method, csize, usize, nlen, elen, clen = (
            struct.unpack_from("<H", cd, p + 10)[0],
            *struct.unpack_from("<IIHHH", cd, p + 20),
        )
        (offset,) = struct.unpack_from("<I", cd, p + 42)
        name = cd[p + 46 : p + 46 + nlen].decode("utf-8", "replace")
        extra = cd[p + 46 + nlen : p + 46 + nlen + elen]
        if 0xFFFFFFFF in (csize, usize, offset):
            usize, csize, offset = _zip64_sizes(extra, usize, csize, offset)
        out[name] = Member(name, method, csize, usize, offset)
        p += 46 + nlen + elen + clen
    return out


def _zip64_sizes(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    q = 0
    while q + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, q)
        if tag == 1:
            values = list(struct.unpack_from(f"<{length // 8}Q", extra, q + 4))
            if usize == 0xFFFFFFFF:
                usize = values.pop(0)
            if csize == 0xFFFFFFFF:
                csize = values.pop(0)
            if offset == 0xFFFFFFFF:
                offset = values.pop(0)
        q += 4 + length
    return usize, csize, offset


def read_fatbins(chunks: Iterator[bytes]) -> FatbinReport:
    """Feed a binary's bytes to a :class:`FatbinScanner` until its fatbin run is over (then stop reading)."""
    scanner = FatbinScanner()
    for chunk in chunks:
        scanner.feed(chunk)
        if scanner.done:
            break
    if hasattr(chunks, "close"):
        chunks.close()
    return scanner.finish()


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


# ------------------------------------------------------------------------------------------------------------
# drafts


@dataclass
class Pins:
    """What a torch wheel's Requires-Dist pins for Linux x86_64."""

    cuda: str | None = None  # "12.8"
    cuda_pin: str | None = None  # "nvidia-cuda-runtime-cu12==12.8.90"
    nccl: str | None = None
    cudnn: str | None = None
    torch: SpecifierSet | None = None  # torchvision / torchaudio: their torch requirement
    requires_python: str | None = None


def parse_metadata(text: str) -> Pins:
    """The pins of one METADATA file (Linux x86_64 markers)."""
    msg = HeaderParser().parsestr(text)
    pins = Pins(requires_python=msg.get("Requires-Python"))
    for line in msg.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({**LINUX_X86, "extra": ""}):
            continue
        name = req.name.lower().replace("_", "-")
        exact = next((s.version for s in req.specifier if s.operator == "=="), None)
        if name == "torch":
            pins.torch = req.specifier
        elif re.fullmatch(r"nvidia-nccl-cu[0-9]+", name) and exact:
            pins.nccl = exact
        elif re.fullmatch(r"nvidia-cudnn-cu[0-9]+", name) and exact:
            pins.cudnn = exact
        elif _is_cuda_runtime(name) and exact and (pins.cuda_pin is None or name == "cuda-toolkit"):
            pins.cuda = ".".join(exact.split(".")[:2])
            pins.cuda_pin = f"{req.name}=={exact}"
    return pins


def _is_cuda_runtime(name: str) -> bool:
    """The packages whose ``==`` pin says which CUDA a torch wheel was built for (12.x: the runtime; 13.x: the
    ``cuda-toolkit`` metapackage)."""
    return name in ("cuda-toolkit", "nvidia-cuda-runtime") or bool(
        re.fullmatch(r"nvidia-cuda-runtime-cu[0-9]+", name)
    )


def python_range(wheels: Sequence[DistFile]) -> str | None:
    """``>=3.10,<3.15`` from the cp tags of a release's Linux x86_64 wheels."""
    minors = sorted({cp[1] for w in wheels if (cp := w.cpython)})
    if not minors:
        return None
    return f">=3.{minors[0]},<3.{minors[-1] + 1}"


@dataclass
class Draft:
    """One torch release as PyPI shows it."""

    version: str
    wheel: DistFile
    python: str | None
    pins: Pins
    arch: FatbinReport | None = None
    torchvision: tuple[str, DistFile, SpecifierSet | None] | None = None
    torchaudio: tuple[str, DistFile, SpecifierSet | None] | None = None
    #: the paired torchvision's Requires-Python (0.26 …: ``>=3.10,!=3.14.1``)
    torchvision_python: str | None = None

    @property
    def variant(self) -> str | None:
        return "cu" + self.pins.cuda.replace(".", "") if self.pins.cuda else None


def _final(files: Sequence[DistFile]) -> dict[str, list[DistFile]]:
    """Final releases → their Linux x86_64 wheels (the highest build tag per file tag)."""
    by: dict[str, dict[frozenset[Any], DistFile]] = {}
    for f in files:
        v = f.version
        if v.is_prerelease or v.is_devrelease or v.local or not f.linux_x86:
            continue
        slot = by.setdefault(str(v), {})
        old = slot.get(f.tags)
        if old is None or f.build > old.build:
            slot[f.tags] = f
    return {v: list(s.values()) for v, s in by.items()}


def _pick_wheel(wheels: Sequence[DistFile]) -> DistFile:
    """The wheel to read: cp312 when there is one (mid-range), else the newest CPython, else any."""
    cps = [w for w in wheels if w.cpython and not any(t.abi.endswith("t") for t in w.tags)]
    for w in cps:
        if w.cpython == (3, 12):
            return w
    if cps:
        return max(cps, key=lambda w: w.cpython or (0, 0))
    return wheels[0]


def _companion(
    source: Source, project: str, torch: str, torch_upload: str, wanted: str | None
) -> tuple[str, DistFile, SpecifierSet | None] | None:
    """torchvision / torchaudio for *torch*: *wanted* (the data's value) when given, else the release that
    pins ``torch==`` it, else the first one uploaded on or after it whose requirement admits it."""
    releases = _final(source.files(project))
    if wanted is not None:
        wheels = releases.get(wanted)
        if not wheels:
            return None
        wheel = _pick_wheel(wheels)
        return wanted, wheel, parse_metadata(source.metadata(wheel)).torch
    day = torch_upload[:10]
    window = sorted(
        (v for v, ws in releases.items() if min(w.upload_time for w in ws)[:10] >= day),
        key=lambda v: min(w.upload_time for w in releases[v]),
    )[:4]
    admits = None
    for v in window:
        wheel = _pick_wheel(releases[v])
        spec = parse_metadata(source.metadata(wheel)).torch
        if spec is not None and any(s.operator == "==" and s.version == torch for s in spec):
            return v, wheel, spec
        if admits is None and spec is not None and spec.contains(torch):
            admits = (v, wheel, spec)
    return admits


def draft(
    source: Source,
    version: str,
    wheels: Sequence[DistFile],
    *,
    arch: bool = True,
    data: compat.TorchRelease | None = None,
) -> Draft:
    wheel = _pick_wheel(wheels)
    pins = parse_metadata(source.metadata(wheel))
    d = Draft(version=version, wheel=wheel, python=python_range(wheels), pins=pins)
    if arch and pins.cuda:
        d.arch = source.fatbin(wheel)
    upload = min(w.upload_time for w in wheels)
    d.torchvision = _companion(source, "torchvision", version, upload, data.torchvision if data else None)
    if d.torchvision is not None:
        d.torchvision_python = parse_metadata(source.metadata(d.torchvision[1])).requires_python
    d.torchaudio = _companion(
        source, "torchaudio", version, upload, data.torchaudio if data and data.torchaudio else None
    )
    return d


# ------------------------------------------------------------------------------------------------------------
# the diff


@dataclass(frozen=True)
class Row:
    """One compared field. ``status``: match, differs, new, not-checked, not-on-pypi."""

    release: str
    variant: str | None
    field: str
    data: str | None
    pypi: str | None
    status: str
    source: str = ""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class Result:
    rows: list[Row] = field(default_factory=list)
    drafts: dict[str, Draft] = field(default_factory=dict)
    new: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return any(r.status in ("differs", "new") for r in self.rows)

    @property
    def exit_code(self) -> int:
        return EXIT_DIFFERENCES if self.differs else 0


def _same_arch(a: Sequence[str], b: Sequence[str]) -> bool:
    def key(x: str) -> tuple[float, str]:
        return float(x.split("+")[0].rstrip("af")), x

    return sorted(a, key=key) == sorted(b, key=key)


def _companion_row(
    rel: str, name: str, data: str | None, found: tuple[str, DistFile, SpecifierSet | None] | None
) -> Row:
    if found is None:
        return Row(rel, None, name, data, None, "differs" if data else "match", note=f"no {name} on PyPI")
    version, wheel, spec = found
    pin = f"{version} (torch{spec})" if spec is not None else version
    if data is None:
        return Row(rel, None, name, None, pin, "new", wheel.url)
    exact = spec is not None and any(s.operator == "==" and s.version == rel for s in spec)
    if spec is not None and not spec.contains(rel):
        return Row(
            rel, None, name, data, pin, "differs", wheel.url, note=f"{name} {version} does not admit {rel}"
        )
    if spec is None:
        note = "its METADATA has no torch requirement"
    else:
        note = "" if exact else f"requirement admits torch {rel} without pinning it"
    return Row(rel, None, name, data, pin, "match", wheel.url, note=note)


def _excluded(spec: SpecifierSet | str | None) -> list[str]:
    """The exact Pythons a Requires-Python excludes (``!=3.14.1``): what ``torchvision_python`` records."""
    if spec is None:
        return []
    try:
        parsed = spec if isinstance(spec, SpecifierSet) else SpecifierSet(spec)
    except InvalidSpecifier:
        return [str(spec)]
    return sorted(sp.version for sp in parsed if sp.operator == "!=")


def _torchvision_python_row(version: str, data: SpecifierSet | None, d: Draft, *, new: bool = False) -> Row:
    """The paired torchvision's Requires-Python exclusions against ``torchvision_python`` (a person edits it:
    ``--write`` leaves this field alone)."""
    have = str(data) if data is not None else None
    if d.torchvision is None or d.torchvision_python is None:
        return Row(version, None, "torchvision_python", have, None, "not-checked", note="no Requires-Python")
    url = d.torchvision[1].url
    note = f"torchvision {d.torchvision[0]} Requires-Python"
    if _excluded(data) == _excluded(d.torchvision_python):
        return Row(version, None, "torchvision_python", have, d.torchvision_python, "match", url, note)
    status = "new" if new else "differs"
    return Row(version, None, "torchvision_python", have, d.torchvision_python, status, url, note)


def compare(data: compat.TorchRelease | None, d: Draft | None, version: str) -> list[Row]:
    """The rows for one release."""
    if d is None:
        return [
            Row(version, None, "release", version, None, "not-on-pypi", note="no Linux x86_64 wheel on PyPI")
        ]
    url = d.wheel.url
    arch = d.arch.arch_list() if d.arch else None
    arch_note = ("also: " + ", ".join(d.arch.extras())) if d.arch and d.arch.extras() else ""
    if data is None:
        rows = [
            Row(version, None, "python", None, d.python, "new", url),
            Row(version, None, "pypi_default", None, d.variant, "new", url),
            Row(version, d.variant, "cuda", None, d.pins.cuda, "new", url, note=d.pins.cuda_pin or ""),
            Row(version, d.variant, "nccl", None, d.pins.nccl, "new", url),
            Row(version, d.variant, "cudnn", None, d.pins.cudnn, "new", url),
            Row(version, d.variant, "arch_list", None, _fmt(arch), "new", url, note=arch_note),
            _companion_row(version, "torchvision", None, d.torchvision),
            _torchvision_python_row(version, None, d, new=True),
            _companion_row(version, "torchaudio", None, d.torchaudio),
        ]
        return rows

    def row(variant: str | None, name: str, have: Any, got: Any, note: str = "") -> Row:
        if got is None:
            return Row(
                version, variant, name, _fmt(have), None, "not-checked", url, note or "not in the metadata"
            )
        same = _same_arch(have, got) if name == "arch_list" else str(have) == str(got)
        if name == "python":
            same = SpecifierSet(str(have)) == SpecifierSet(str(got))
        return Row(version, variant, name, _fmt(have), _fmt(got), "match" if same else "differs", url, note)

    rows = [
        row(None, "python", _spec(data.python), d.python),
        row(None, "pypi_default", data.pypi_default, d.variant),
    ]
    variant = data.variants.get(d.variant or "")
    if variant is None:
        rows.append(
            Row(
                version,
                d.variant,
                "variant",
                None,
                d.variant,
                "differs",
                url,
                note="the data has no such variant",
            )
        )
    else:
        note = d.pins.cuda_pin or ""
        rows += [
            row(variant.name, "cuda", variant.cuda, d.pins.cuda, note),
            row(variant.name, "nccl", variant.nccl, d.pins.nccl),
            row(variant.name, "cudnn", variant.cudnn, d.pins.cudnn),
            row(
                variant.name, "arch_list", list(variant.arch_list), arch, arch_note if d.arch else "--no-arch"
            ),
        ]
    rows += [
        _companion_row(version, "torchvision", data.torchvision, d.torchvision),
        _torchvision_python_row(version, data.torchvision_python, d),
        _companion_row(version, "torchaudio", data.torchaudio, d.torchaudio),
    ]
    for other in data.variants:
        if other != d.variant:
            rows.append(
                Row(version, other, "variant", other, None, "not-checked", note="not on PyPI, not checked")
            )
    return rows


def _spec(spec: SpecifierSet) -> str:
    """``>=3.10,<3.15`` (lower bound first, as the data writes it)."""
    return ",".join(sorted((str(s) for s in spec), key=lambda s: (not s.startswith(">"), s)))


def _fmt(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return ", ".join(value)
    return str(value)


def parse_releases(text: str | None, default_from: str) -> tuple[Version, Version | None]:
    """``2.10-2.15`` → (2.10, 2.15); ``2.12`` → that minor; ``2.10-`` → 2.10 and later; None →
    *default_from* and later."""
    spec = text or f"{default_from}-"
    low, dash, high = spec.partition("-")
    try:
        lo = Version(low.strip())
        hi = Version(high.strip()) if dash and high.strip() else (None if dash else lo)
    except InvalidVersion:
        raise ConfigError(
            f"--releases {text}: not a range", hint="give MINOR[-MINOR] such as 2.10-2.15, 2.12 or 2.10-"
        ) from None
    return lo, hi


def _in(version: str, lo: Version, hi: Version | None) -> bool:
    v = Version(version)
    minor = Version(f"{v.major}.{v.minor}")
    return minor >= Version(f"{lo.major}.{lo.minor}") and (
        hi is None or minor <= Version(f"{hi.major}.{hi.minor}")
    )


def run(
    source: Source,
    releases: str | None = None,
    *,
    arch: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Result:
    """Read PyPI for the selected releases and compare with the data."""
    known = {r.version: r for r in compat.torch_releases()}
    newest = max((Version(v) for v in known), default=Version("2.0"))
    lo, hi = parse_releases(releases, f"{newest.major}.{newest.minor}")
    on_pypi = _final(source.files("torch"))
    versions = sorted({v for v in [*known, *on_pypi] if _in(v, lo, hi)}, key=Version)
    if not versions:
        raise ConfigError(
            f"--releases {releases}: no torch release in that range",
            hint=f"the data holds {min(known, key=Version)} … {max(known, key=Version)}",
        )
    result = Result()
    for version in versions:
        wheels = on_pypi.get(version)
        if progress:
            progress(f"torch {version}: " + ("reading PyPI" if wheels else "not on PyPI"))
        d = draft(source, version, wheels, arch=arch, data=known.get(version)) if wheels else None
        if d is not None:
            result.drafts[version] = d
            if version not in known:
                result.new.append(version)
        result.rows += compare(known.get(version), d, version)
    return result


# ------------------------------------------------------------------------------------------------------------
# writing drafts into torch.toml


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _filename_source(d: Draft, today: str) -> str:
    return f"PyPI file {d.wheel.filename} (METADATA Requires-Dist, cp tags), read {today} by refresh-compat"


def release_toml(d: Draft, today: str) -> str:
    """A ``[[release]]`` block for a release the data lacks: ``verified = false``, the file in ``source``."""
    tv = d.torchvision[0] if d.torchvision else "?"
    lines = ["", "[[release]]", f"version = {_q(d.version)}", f"torchvision = {_q(tv)}"]
    if _excluded(d.torchvision_python):
        lines.append(f"torchvision_python = {_q(d.torchvision_python or '')}")
    if d.torchaudio:
        lines.append(f"torchaudio = {_q(d.torchaudio[0])}")
        if not any(t.platform != "any" for t in d.torchaudio[1].tags) or d.torchaudio[1].cpython is None:
            lines.append("torchaudio_local = false")
    pair = "; ".join(
        f"{name} {c[0]}: PyPI file {c[1].filename} requires torch{c[2]}"
        for name, c in (("torchvision", d.torchvision), ("torchaudio", d.torchaudio))
        if c
    )
    lines += [
        f"python = {_q(d.python or '')}",
        f"pypi_default = {_q(d.variant or '')}",
        "verified = false",
        f"source = {_q(_filename_source(d, today) + ('; ' + pair if pair else ''))}",
        "",
        "[[release.variant]]",
        f"name = {_q(d.variant or '')}",
        f"cuda = {_q(d.pins.cuda or '')}",
        "arch_list = [" + ", ".join(_q(a) for a in (d.arch.arch_list() if d.arch else [])) + "]",
        f"nccl = {_q(d.pins.nccl or '')}",
        f"cudnn = {_q(d.pins.cudnn or '')}",
        "verified = false",
        f"source = {_q(_variant_source(d, today))}",
    ]
    return "\n".join(lines) + "\n"


def _variant_source(d: Draft, today: str) -> str:
    text = f"nccl/cudnn/cuda: {_filename_source(d, today)}"
    if d.pins.cuda_pin:
        text += f" ({d.pins.cuda_pin})"
    if d.arch:
        text += (
            f"; arch: fatbin headers of {CUDA_LIBRARY} in that wheel ({d.arch.fatbins} fatbins"
            + (f"; also {', '.join(d.arch.extras())}" if d.arch.extras() else "")
            + ")"
        )
    return text


def edit_field(text: str, version: str, variant: str | None, key: str, value: str, note: str) -> str:
    """Set ``key`` of release *version* (or of its *variant*) to *value*, mark that row ``verified = false``
    and append *note* to its ``source``; every other line stays as it is."""
    lines = text.split("\n")
    blocks = [i for i, line in enumerate(lines) if line.strip() in ("[[release]]", "[[release.variant]]")]
    blocks.append(len(lines))
    target = None
    in_release = False
    for start, end in itertools.pairwise(blocks):
        body = lines[start:end]
        if lines[start].strip() == "[[release]]":
            in_release = any(line == f"version = {_q(version)}" for line in body)
            if in_release and variant is None:
                target = (start, end)
                break
        elif in_release and variant is not None and any(line == f"name = {_q(variant)}" for line in body):
            target = (start, end)
            break
    if target is None:
        raise ConfigError(
            f"torch.toml has no row for torch {version} {variant or ''}".strip(),
            hint="add the row by hand (its variant block), then run refresh-compat --write again",
        )
    start, end = target
    rendered = (
        "[" + ", ".join(_q(a.strip()) for a in value.split(",")) + "]" if key == "arch_list" else _q(value)
    )
    seen = set()
    for i in range(start, end):
        name = lines[i].split("=", 1)[0].strip()
        if name == key:
            lines[i] = f"{key} = {rendered}"
            seen.add(key)
        elif name == "verified":
            lines[i] = "verified = false"
            seen.add("verified")
        elif name == "source":
            old = json.loads(lines[i].split("=", 1)[1].strip())
            lines[i] = f"source = {_q(old + '; ' + note)}"
            seen.add("source")
    if "verified" not in seen:
        at = next(i for i in range(start, end) if lines[i].startswith("source ="))
        lines.insert(at, "verified = false")
    if key not in seen:
        at = next(i for i in range(start, end) if lines[i].startswith("verified ="))
        lines.insert(at, f"{key} = {rendered}")
    return "\n".join(lines)


def write(result: Result, path: Path, today: str | None = None) -> list[str]:
    """Apply *result* to the torch.toml at *path*: new releases appended, differing fields edited in place
    (rows never removed). Returns one line per change."""
    today = today or datetime.datetime.now(datetime.timezone.utc).date().isoformat()  # UTC, as every date
    text = path.read_text()
    done = []
    missing = {r.release for r in result.rows if r.field == "variant" and r.status == "differs"}
    for row in result.rows:
        if (
            row.status != "differs"
            or row.pypi is None
            or row.field in ("variant", "torchvision", "torchvision_python", "torchaudio")
        ):
            continue
        if row.field == "pypi_default" and row.release in missing:
            continue  # the data has no such variant: a person adds it (printed)
        d = result.drafts[row.release]
        note = f"refresh-compat {today}: {row.field} {row.data} → {row.pypi} per PyPI file {d.wheel.filename}"
        text = edit_field(
            text,
            row.release,
            row.variant if row.field not in ("python", "pypi_default") else None,
            row.field,
            row.pypi,
            note,
        )
        done.append(
            f"torch {row.release} {row.variant or ''} {row.field}: {row.data} → {row.pypi}".replace("  ", " ")
        )
    for version in result.new:
        text = text.rstrip("\n") + "\n" + release_toml(result.drafts[version], today)
        done.append(f"torch {version}: new release row (verified = false)")
    path.write_text(text)
    return done
