"""The HTTP policy of every HTTP path imagesmith has, in one place: timeouts, retries, the CA, size caps.

Four paths speak HTTP, each with a named :class:`HttpPolicy` here:

- :data:`REGISTRY` — the registry API (:mod:`imagesmith.registry`: its ``RetryPolicy`` starts from it):
  retried with backoff on transient faults within a deadline, each answer read whole within the read timeout;
  the CA is the registry's own (``/etc/docker/certs.d/HOST/ca.crt``) else the system's;
- :data:`PACKAGE_INDEX` — PyPI's JSON Simple API and wheel ranges (``refresh-compat``, ``lock --sizes``): not
  retried (a run is repeated, or replayed from a recording); the CA is pip's (``refresh.ca_bundle``); an
  answer read whole is capped (a body is read only after its status: a range answered with the whole wheel
  is refused unread);
- :data:`SOURCE_ARCHIVE` — pinned source archives (``fetch-sources``, builds): not retried, the next mirror is
  tried instead (so the connect timeout is short: a blocked forge fails fast); unbounded, the sha256 decides;
- :data:`RELEASE_INDEX` — ``pick --index https://…``: not retried (a cached copy may answer), capped at
  ``index.MAX_INDEX_BYTES`` by its caller; :data:`INDEX_ARTIFACT` — ``pick --index oci://…``, the registry API
  tried quickly.

Every path but the registry's asks :func:`get` for its responses (the registry transport sends its own
requests with :data:`REGISTRY`'s timeouts: it follows redirects hop by hop); ``requests`` honours
``$REQUESTS_CA_BUNDLE`` where a path passes ``verify=True``. Nothing here decides on an error: each path
words its own (a registry, an index, a source archive) from the exceptions ``requests`` raises.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import requests
import urllib3

from imagesmith import settings


@dataclass(frozen=True, kw_only=True)
class HttpPolicy:
    """How one HTTP path asks: ``connect_timeout`` / ``read_timeout`` per request, ``attempts`` tries of one
    request (1: not retried here), waits from ``backoff`` doubling up to ``max_wait``, all within ``deadline``
    seconds per operation, and at most ``max_bytes`` of one answer (None: unbounded)."""

    name: str
    connect_timeout: float
    read_timeout: float
    attempts: int = 1
    backoff: float = 0.5
    max_wait: float = 10.0
    deadline: float = 180.0
    max_bytes: int | None = None

    @property
    def timeout(self) -> tuple[float, float]:
        return (self.connect_timeout, self.read_timeout)

    def with_timeout(self, seconds: float) -> HttpPolicy:
        """This policy with a read timeout of *seconds* (the connect timeout no longer than that)."""
        return replace(self, read_timeout=seconds, connect_timeout=min(self.connect_timeout, seconds))


REGISTRY = HttpPolicy(
    name="registry API",
    connect_timeout=10.0,
    # the defaults of IMAGESMITH_REGISTRY_STALL / _DEADLINE (the retry policy reads the variables)
    read_timeout=settings.default_seconds("IMAGESMITH_REGISTRY_STALL"),
    attempts=10,
    backoff=0.5,
    max_wait=10.0,
    deadline=settings.default_seconds("IMAGESMITH_REGISTRY_DEADLINE"),
    # an answer read whole (a tag list, a token, an error body); blobs are streamed, never read whole
    max_bytes=32 << 20,
)
#: a manifest: registries store none past 4 MiB (distribution, containerd), so a larger answer is not one
REGISTRY_MANIFEST = replace(REGISTRY, name="registry manifest", max_bytes=4 << 20)
#: an index page, a wheel's metadata or a wheel range, read whole: PyPI's largest Simple API page (torch's) is
#: a few MiB; a larger answer is none of these (a range request answered with the whole wheel)
PACKAGE_INDEX = HttpPolicy(name="package index", connect_timeout=15.0, read_timeout=120.0, max_bytes=64 << 20)
SOURCE_ARCHIVE = HttpPolicy(name="source archive", connect_timeout=10.0, read_timeout=60.0)
RELEASE_INDEX = HttpPolicy(
    name="release index",
    connect_timeout=30.0,
    read_timeout=settings.default_seconds("IMAGESMITH_INDEX_STALL"),
    deadline=settings.default_seconds("IMAGESMITH_INDEX_DEADLINE"),
)
#: ``pick --index oci://…``: the registry API, tried quickly (a refused connection is not transient, and a
#: cached copy of the index may answer instead)
INDEX_ARTIFACT = replace(
    REGISTRY,
    name="release index artifact",
    attempts=2,
    backoff=0.2,
    read_timeout=20.0,  # or IMAGESMITH_INDEX_STALL, when that is shorter
)


def get(
    url: str,
    policy: HttpPolicy,
    *,
    headers: Mapping[str, str] | None = None,
    stream: bool = False,
    verify: str | bool = True,
    session: requests.Session | None = None,
) -> requests.Response:
    """One GET of *url* under *policy* (its timeouts; redirects followed). ``requests``' exceptions propagate:
    the caller words them."""
    if session is not None:
        return session.get(
            url, headers=dict(headers or {}), timeout=policy.timeout, stream=stream, verify=verify
        )
    with requests.Session() as own:  # as requests.get: a streamed answer keeps its connection
        return own.get(url, headers=dict(headers or {}), timeout=policy.timeout, stream=stream, verify=verify)


class TooLarge(Exception):
    """An answer went past its policy's ``max_bytes`` (what was read is dropped)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


def capped(chunks: Iterator[bytes], policy: HttpPolicy) -> Iterator[bytes]:
    """*chunks*, raising :class:`TooLarge` as soon as they pass ``policy.max_bytes`` (nothing past it is
    read)."""
    got = 0
    for chunk in chunks:
        got += len(chunk)
        if policy.max_bytes is not None and got > policy.max_bytes:
            raise TooLarge(policy.max_bytes)
        yield chunk


def timed_out(exc: BaseException) -> bool:
    """Whether *exc* is a read that waited its whole read timeout for a byte (a stall): requests' and
    urllib3's own, and requests' ConnectionError around urllib3's (a stream read mid-body)."""
    if isinstance(exc, requests.exceptions.ConnectionError) and exc.args:
        return isinstance(exc.args[0], urllib3.exceptions.ReadTimeoutError | TimeoutError)
    return isinstance(
        exc, requests.exceptions.ReadTimeout | urllib3.exceptions.ReadTimeoutError | TimeoutError
    )


class Overdue(Exception):
    """A download past its deadline: its bytes kept coming, too slowly (:func:`arriving`)."""


def arriving(resp: requests.Response, until: float) -> Iterator[bytes]:
    """*resp*'s body (``stream=True``) as its bytes arrive: each read waits the read timeout at most (a stall:
    requests' ReadTimeout), a broken stream is requests' ChunkedEncodingError, and :class:`Overdue` once the
    clock (``time.monotonic``) passes *until*."""
    try:
        while chunk := resp.raw.read1(1 << 16, decode_content=True):
            yield chunk
            if time.monotonic() > until:
                raise Overdue
    except urllib3.exceptions.ReadTimeoutError as exc:
        raise requests.exceptions.ReadTimeout(exc) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise requests.exceptions.ChunkedEncodingError(exc) from exc
