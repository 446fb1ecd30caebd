"""HTTP with byte accounting (:class:`Http`) and a wheel on a web server read by ranges
(:class:`RemoteWheel`: its zip central directory, one member, or a member streamed into the fatbin scanner).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import requests

from imagesmith import http
from imagesmith.errors import UpstreamError
from imagesmith.fatbin import FatbinReport, FatbinScanner

_CHUNK = 1 << 20


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
