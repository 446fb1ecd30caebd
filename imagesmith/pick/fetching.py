"""The release index: fetched from a file, URL or registry artifact, verified (trust, signature) and cached
under ~/.cache/imagesmith."""

from __future__ import annotations

import datetime
import hashlib
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from imagesmith import atomicio, inputs
from imagesmith.errors import (
    ConfigError,
    Fault,
    ImagesmithError,
    IndexTrustError,
    ManifestUnknownError,
    RegistryError,
)
from imagesmith.index import (
    RegistryCopy,
    ReleasedImage,
    ReleaseIndex,
    parse_index,
)
from imagesmith.indextrust import index_flag
from imagesmith.refs import split_reference
from imagesmith.schema import HOST_PORT, REPO_PATH
from imagesmith.tags import INDEX_ARTIFACT_TAG

if TYPE_CHECKING:
    from imagesmith.indextrust import Trust, Trusted, TrustStore
    from imagesmith.signing import PublicKey

DEFAULT_TTL_S: Final[int] = 3600
# ------------------------------------------------------------------------------------------------------------
# index input (thin I/O, cached)


def cache_dir() -> Path:
    """Where index copies and trust records live: ``$IMAGESMITH_CACHE``, else ``$XDG_CACHE_HOME/imagesmith``
    or ``~/.cache/imagesmith`` (:func:`imagesmith.config.cache_root`, as every other cache of imagesmith)."""
    from imagesmith.config import cache_root

    return cache_root()


def _cache_path(source: str) -> Path:
    return cache_dir() / "index" / (hashlib.sha256(source.encode()).hexdigest()[:24] + ".json")


def fetch_index(
    source: str,
    *,
    refresh: bool = False,
    ttl_s: int = DEFAULT_TTL_S,
    warn: Callable[[str], None] | None = None,
    insecure: bool = False,
    trust: Trust | None = None,
    note: Callable[[str], None] | None = None,
) -> ReleaseIndex:
    """Load the release index from a file, an ``https://`` URL (``http://`` with *insecure*) or
    ``oci://host/repo[:tag]`` (the artifact ``imagesmith release`` publishes). Remote sources are cached for
    *ttl_s* seconds under ~/.cache/imagesmith. When the source cannot be reached, an older cached copy is used
    **with a warning** (*warn*, default: a ``warning:`` line on stderr) — never with *refresh* (the user asked
    for the source's current index), and never when the source answers that the index is not there (HTTP
    404/410, MANIFEST_UNKNOWN): a withdrawn index is not silently replaced by an old one. Plain HTTP
    (``http://``, ``oci+http://``) only with *insecure* (:func:`check_index_scheme`).

    Verified by default (*trust*; :mod:`imagesmith.indextrust`): a DSSE signature over exactly these bytes
    (``INDEX.sig`` beside a file or URL, the signature layer of the artifact) by the user's key, else the key
    pinned for the source, else (first use) the key published beside it (``INDEX.pub``, the key layer), which
    is then pinned; a serial no lower than the newest seen for the source; an expiry in the future. A cached
    copy is checked again each time it is used (bytes and signature the same key verified before, by their
    sha256: the signature is not computed again). *note* gets one line naming the key trusted.
    ``Trust(verify=False)`` (``--no-verify``) skips all of it.
    """
    from imagesmith.indextrust import KEY_SUFFIX, Trust, TrustStore

    source, trust = _rooted(source, trust if trust is not None else Trust())
    say = note or (lambda _: None)
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", source)
    if scheme and not source.startswith(("http://", "https://", "oci://", "oci+http://")):
        raise ConfigError(
            f"{index_flag()} {source[:200]}: {scheme.group(1)}:// is not a scheme pick reads",
            hint="give a file, an https:// URL or oci://HOST/REPOSITORY[:TAG] (http:// and oci+http:// only "
            "with --insecure)",
        )
    if not source.startswith(("http://", "https://", "oci://", "oci+http://")):
        return _fetch_file(source, trust, say)
    check_index_scheme(source, insecure=insecure)
    cached = _cache_path(source)
    cached_sig = cached.with_suffix(".sig")
    store = TrustStore(_trust_dir(), _trust_key(source), shown=source)

    def from_cache(label: str) -> ReleaseIndex:
        body = cached.read_bytes()
        if not trust.verify:
            return parse_index(body, source=label)
        index, trusted = _verify_index(
            body,
            _read_or_none(cached_sig),
            lambda: None,  # a cached copy is checked against the user's or the pinned key only
            source=label,
            where=str(cached_sig),
            published_where="(not read for a cached copy)",
            trust=trust,
            store=store,
            location=_oci_location(source),
        )
        say(trusted.line(source))
        return index

    # a copy read from the cache writes nothing: the temp files a killed run left there go now, not at the
    # next download (only those of a pid that is gone: atomicio.clean_stale)
    atomicio.clean_stale(cached.parent)
    if not refresh and cached.is_file() and time.time() - cached.stat().st_mtime < ttl_s:
        try:
            return from_cache(f"{source} (cached {cached})")
        except IndexTrustError:
            pass  # a copy cached unverified, or expired since: read the source again
    try:
        body, envelope, published, gone = _download(source, trust)
    except (RegistryError, ConfigError) as exc:
        if isinstance(exc, IndexTrustError) or not cached.is_file():
            raise
        when = _cache_age(cached)
        if refresh:
            raise type(exc)(
                exc.message + f" (--refresh: the cached copy from {when} is not used)",
                hint=(exc.hint + "; or " if exc.hint else "")
                + "drop --refresh to use the cached copy until the source is back",
            ) from None
        (warn or _stderr_warning)(
            f"{index_flag()} {source} cannot be reached ({exc.message}); using the cached copy from {when}: "
            "it may miss images released since (pass --refresh to fail instead)"
        )
        return from_cache(f"{source} (stale cache {cached})")
    if gone is not None:
        raise _gone(gone, source, cached)
    fresh: Trusted | None = None
    if trust.verify:
        where = f"{source}.sig" if source.startswith(("http://", "https://")) else f"{source} signature layer"
        index, fresh = _verify_index(
            body,
            envelope,
            lambda: published,
            source=source,
            where=where,
            published_where=f"{source}{KEY_SUFFIX}"
            if source.startswith(("http://", "https://"))
            else f"{source} key layer",
            trust=trust,
            store=store,
            location=_oci_location(source),
        )
    else:
        index = parse_index(body, source=source)
    cached.parent.mkdir(parents=True, exist_ok=True)
    for path, data in ((cached_sig, envelope), (cached, body)):
        if data is None:
            path.unlink(missing_ok=True)
            continue
        atomicio.write_atomic(path, data)
    if fresh is not None:
        store.record(index, body, fresh, envelope)
        _pin_publisher(index, fresh, store, source)
        say(fresh.line(source))
    return index


def _gone(gone: ConfigError | RegistryError, source: str, cached: Path) -> ImagesmithError:
    """The source says the index is not there (HTTP 404/410, manifest unknown): never an old copy instead."""
    if not cached.is_file():
        return type(gone)(
            f"{index_flag()} {source}: {gone.message}",
            hint=gone.hint
            or f"check {index_flag()} {source}: the repository and tag (`imagesmith release` publishes "
            f"the tag {INDEX_ARTIFACT_TAG})",
        )
    return type(gone)(
        gone.message + f" (a cached copy from {_cache_age(cached)} exists, but the source says the index "
        "is not there)",
        hint=f"check {index_flag()} {source} (`imagesmith release` publishes the tag {INDEX_ARTIFACT_TAG})",
    )


def _rooted(source: str, trust: Trust) -> tuple[str, Trust]:
    """*source* without its ``#sha256:…`` trust root, and *trust* with that root as the key to check with."""
    from imagesmith.indextrust import split_root

    source, root = split_root(source, flag=index_flag())
    if root is None or not trust.verify:
        return source, trust
    # the root in the index reference names this source's key: it wins over the user config's and the
    # environment's (general) one; only a flag of the same run that names another is a contradiction
    if trust.fingerprint_origin == "--key-fingerprint" and trust.fingerprint != root:
        raise ConfigError(
            f"{index_flag()} {source}#{root}: the fingerprint in the index reference differs from "
            f"{trust.fingerprint} (--key-fingerprint)",
            hint="name one trust root: drop one of the two",
        )
    named_key = trust.key if trust.key is not None and trust.key.origin.startswith("--verify-key") else None
    return source, replace(
        trust, key=named_key, fingerprint=root, fingerprint_origin=f"{index_flag()} {source}#{root[:15]}…"
    )


def _fetch_file(source: str, trust: Trust, say: Callable[[str], None]) -> ReleaseIndex:
    """The index of a local file, verified against its ``.sig`` (and ``.pub`` on first use)."""
    from imagesmith.index import MAX_INDEX_BYTES, load_index
    from imagesmith.indextrust import KEY_SUFFIX, MAX_KEY_BYTES, TrustStore

    path = Path(source).expanduser()
    try:
        small = path.is_file() and path.stat().st_size <= MAX_INDEX_BYTES
    except OSError:
        small = False
    signed = _read_or_none(path) if small and trust.verify else None
    if signed is None:  # not verified, or unreadable/too big: load_index reads it or says why not
        return load_index(path)
    store = TrustStore(_trust_dir(), "file:" + str(inputs.resolved(path)), shown=source)
    sig, pub = path.with_name(path.name + ".sig"), path.with_name(path.name + KEY_SUFFIX)
    signature = _read_or_none(sig)
    index, trusted = _verify_index(
        signed,
        signature,
        lambda: _read_or_none(pub, MAX_KEY_BYTES),
        source=source,
        where=str(sig),
        published_where=str(pub),
        trust=trust,
        store=store,
    )
    store.record(index, signed, trusted, signature)
    _pin_publisher(index, trusted, store, source)
    say(trusted.line(source))
    return index


def _download(
    source: str, trust: Trust
) -> tuple[bytes, bytes | None, bytes | None, ConfigError | RegistryError | None]:
    """(index, its signature or None, the published key or None, the answer that it is not there or None)
    of a remote *source*: ``https://`` (its ``.sig`` and ``.pub`` beside it) or ``oci://``."""
    from imagesmith.indextrust import KEY_SUFFIX

    want_key = trust.verify and trust.key is None
    envelope: bytes | None = None
    published: bytes | None = None
    try:
        if not source.startswith(("http://", "https://")):
            body, envelope, published = DOWNLOADS.oci(source, with_key=want_key)
            return body, envelope, published, None
        status, body = DOWNLOADS.http(source)
        if status in (404, 410):
            return (
                b"",
                None,
                None,
                ConfigError(f"{index_flag()} {source}: HTTP {status}", hint="check the URL"),
            )
        if status != 200:
            raise ConfigError(f"{index_flag()} {source}: HTTP {status}", hint="check the URL")
        if trust.verify:
            sig_status, sig_body = DOWNLOADS.http(source + ".sig")
            envelope = sig_body if sig_status == 200 else None
            if want_key:
                key_status, key_body = DOWNLOADS.http(source + KEY_SUFFIX)
                published = key_body if key_status == 200 else None
    except ManifestUnknownError as exc:
        return b"", None, None, exc
    return body, envelope, published, None


def _pin_publisher(index: ReleaseIndex, trusted: Trusted, store: TrustStore, source: str) -> None:
    """A pin per publisher (issue 34): the key now pinned for *source*, when it verified *index*, is pinned
    too for every repository the signed index names in ``published_to`` that has no pin yet — the same
    publisher's second registry is then no first use (a key published there that differs is refused)."""
    from imagesmith.indextrust import TrustStore as Store

    pinned = store.data().get("fingerprint")
    if not index.published_to or "key" not in store.data() or pinned != trusted.fingerprint:
        return
    for location in index.published_to:
        try:
            other = Store(_trust_dir(), _trust_key(f"oci://{location}"), shown=f"oci://{location}")
            if other.path != store.path:
                other.pin_if_unpinned(store, f"by the index of {source} its key signed (it names {location})")
        except ConfigError:
            continue  # a repository name pick could not read, or a damaged record (said when it is read)


def _trust_dir() -> Path:
    return cache_dir() / "index"


def _trust_key(source: str) -> str:
    """What the pinned key and the newest serial are kept under: one index, however its source is spelled
    (``oci://h/r`` and ``oci+http://h/r:release-index`` are the same artifact; ``https://HOST:443/i.json`` and
    ``https://host/i.json`` the same file)."""
    if source.startswith(("oci://", "oci+http://")):
        from imagesmith.index import index_location

        host, repo, tag, _ = parse_oci_source(source)
        return f"oci://{index_location(host, repo)}:{tag}"
    if source.startswith(("http://", "https://")):
        from urllib.parse import urlsplit, urlunsplit

        try:
            url = urlsplit(source)
            port = url.port
        except ValueError:
            return source
        host = (url.hostname or "").lower()
        if ":" in host:
            host = f"[{host}]"
        default = {"http": 80, "https": 443}[url.scheme]
        netloc = host if port in (None, default) else f"{host}:{port}"
        # one source however spelled: host case and the default port (credentials in the URL never count)
        return urlunsplit((url.scheme, netloc, url.path or "/", url.query, ""))
    return source


def _verify_index(
    body: bytes,
    envelope: bytes | None,
    published: Callable[[], bytes | None],
    *,
    source: str,
    where: str,
    published_where: str,
    trust: Trust,
    store: TrustStore,
    location: str | None = None,
) -> tuple[ReleaseIndex, Trusted]:
    """Signature (by the key :func:`~imagesmith.indextrust.choose_key` names), then the index, then (read
    from an ``oci://`` repository: *location*) that the index names that repository among those it is
    published to, then its serial and expiry against what *store* saw: the checks of
    :mod:`imagesmith.indextrust`, in that order."""
    from imagesmith import indextrust

    trusted = indextrust.verified_before(body, envelope, trust, store)
    if trusted is None:
        offered = published() if trust.key is None else None
        trusted = indextrust.choose_key(trust, store, offered, source=source, published_where=published_where)
        assert trusted.key is not None
        try:
            indextrust.check_signature(body, envelope, [trusted.key], source=source, where=where)
        except IndexTrustError:
            if trusted.offered is not None:  # another key beside it, and the pin did not sign: a swap
                indextrust.refuse_other_published(
                    trusted.offered, trusted.fingerprint, store, source, published_where
                )
            raise
    index = parse_index(body, source=source)
    if location is not None:
        indextrust.check_location(index, location, source=source)
    indextrust.check_fresh(
        index, body, source=source, store=store, trust=trust, fingerprint=trusted.fingerprint
    )
    # issue 34: a key published beside it that is not the pin counts only as the successor this index names
    trusted = indextrust.check_rotation(
        index,
        body,
        envelope,
        trusted,
        store=store,
        source=source,
        where=where,
        published_where=published_where,
    )
    return index, trusted


def _oci_location(source: str) -> str | None:
    """``host/repository`` of an ``oci://`` source (what a published index must name), else None."""
    if not source.startswith(("oci://", "oci+http://")):
        return None
    from imagesmith.index import index_location

    host, repo, _, _ = parse_oci_source(source)
    return index_location(host, repo)


def check_index_scheme(source: str, *, insecure: bool) -> None:
    """A remote index only over TLS: ``http://`` and ``oci+http://`` are refused unless *insecure* (``pick
    --insecure``: a registry or server on a network you trust, such as a local test registry)."""
    if insecure or not source.startswith(("http://", "oci+http://")):
        return
    secure = (
        "https://" + source.removeprefix("http://")
        if source.startswith("http://")
        else ("oci://" + source.removeprefix("oci+http://"))
    )
    raise ConfigError(
        f"{index_flag()} {source}: plain HTTP (anyone on the path can change the index, and with it the "
        "digests "
        "you pull)",
        hint=f"use {secure}, or pass --insecure for a server on a network you trust (a local registry)",
    )


def allowed_copies(
    index: ReleaseIndex, image: ReleasedImage
) -> tuple[tuple[RegistryCopy, ...], tuple[str, ...]]:
    """The copies of *image* on a registry host the index's publisher lists (``registries``), and one reason
    for each copy skipped. An index without the list (written before it existed) keeps every copy."""
    if not index.registries:
        return image.registries, ()
    keep = tuple(c for c in image.registries if c.host in index.registries)
    skipped = tuple(
        f"{image.tag}: registry {c.name} ({c.host}) is not one the index's publisher lists "
        f"({', '.join(index.registries)}); skipped"
        for c in image.registries
        if c.host not in index.registries
    )
    return keep, skipped


def _read_or_none(path: Path, limit: int | None = None) -> bytes | None:
    """The bytes of a regular file, None when it cannot be read (a FIFO is never opened for reading: it would
    block); at most *limit* bytes (default: an index's :data:`~imagesmith.index.MAX_INDEX_BYTES`) plus one, so
    a huge file beside the index (``.sig``, ``.pub``) is never read into memory — what is cut off then fails
    its check."""
    from imagesmith.index import MAX_INDEX_BYTES

    if not inputs.is_regular_file(path):
        return None
    try:
        with path.open("rb") as f:
            return f.read((limit or MAX_INDEX_BYTES) + 1)
    except OSError:
        return None


def check_index_signature(
    body: bytes, envelope: bytes | None, keys: Sequence[PublicKey], *, source: str, where: str
) -> None:
    """Refuse the index unless *envelope* is a DSSE signature by one of *keys* over exactly *body*."""
    from imagesmith.indextrust import check_signature

    check_signature(body, envelope, list(keys), source=source, where=where)


def _stderr_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _cache_age(path: Path) -> str:
    mtime = path.stat().st_mtime
    stamp = datetime.datetime.fromtimestamp(mtime, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    hours = max(0.0, time.time() - mtime) / 3600
    age = f"{hours:.0f} h" if hours < 48 else f"{hours / 24:.0f} days"
    return f"{stamp}, {age} old"


def _download_http(url: str) -> tuple[int, bytes]:
    """(status, body) of *url*; a body past :data:`~imagesmith.index.MAX_INDEX_BYTES` is refused unread. Each
    read waits at most ``IMAGESMITH_INDEX_STALL`` seconds for a byte (no headers, or a body stopped mid-way:
    a stall, named), the whole download at most ``IMAGESMITH_INDEX_DEADLINE`` (issue 37)."""
    import requests

    from imagesmith import http, settings
    from imagesmith.index import MAX_INDEX_BYTES

    stall = settings.seconds("IMAGESMITH_INDEX_STALL")
    policy = replace(
        http.RELEASE_INDEX.with_timeout(stall),
        max_bytes=MAX_INDEX_BYTES,
        deadline=settings.seconds("IMAGESMITH_INDEX_DEADLINE"),
    )
    until = time.monotonic() + policy.deadline
    try:
        with http.get(url, policy, stream=True) as resp:
            landed = str(resp.url or url)
            if url.lower().startswith("https://") and not landed.lower().startswith("https://"):
                # the server sent an https:// source on to plain HTTP: whoever is on that path could serve the
                # key a first use pins, and with --no-verify the index itself
                raise ConfigError(
                    f"{index_flag()} {url}: the server redirects it to {landed[:200]}, plain HTTP (anyone on "
                    "the "
                    "path can change what arrives)",
                    hint="ask the publisher for an https:// address that stays on TLS, or download the "
                    "index, its .sig and .pub over a channel you trust and pass the file",
                )
            try:
                return resp.status_code, b"".join(http.capped(http.arriving(resp, until), policy))
            except http.TooLarge:
                raise ConfigError(
                    f"{index_flag()} {url}: more than {MAX_INDEX_BYTES >> 20} MiB (an index takes a few): "
                    "not a "
                    "release index",
                    hint="point --index at the index imagesmith release writes or publishes",
                ) from None
    except http.Overdue:
        raise _index_stalled(url, f"not complete within {policy.deadline:g} s", policy.deadline) from None
    except requests.RequestException as exc:
        if http.timed_out(exc):
            host = urlsplit(url).netloc
            raise _index_stalled(url, f"no bytes for {stall:g} s from {host}", stall) from None
        raise ConfigError(
            f"{index_flag()} {url}: cannot download ({exc.__class__.__name__}: {exc})",
            hint="check the URL / network, or pass a local file",
        ) from None


def _index_stalled(url: str, what: str, seconds: float) -> ConfigError:
    """A download of *url* (the index, its .sig or .pub) given up on its deadline: one error naming both."""
    from imagesmith.indextrust import KEY_SUFFIX

    phase = (
        "index signature download"
        if url.endswith(".sig")
        else "index key download"
        if url.endswith(KEY_SUFFIX)
        else "index download"
    )
    return ConfigError(
        f"{index_flag()} {url}: {what} ({phase}; given up)",
        hint="check that the index's server is up and reachable, or pass a local file; "
        "IMAGESMITH_INDEX_STALL and IMAGESMITH_INDEX_DEADLINE give a slow server more time",
        fault=Fault.UNREACHABLE,
        phase=phase,
        stalled=seconds,
    )


def parse_oci_source(source: str) -> tuple[str, str, str, bool]:
    """``oci://host[:port]/repo/path[:tag]`` → (host, repo, tag, insecure); tag default ``release-index``.
    ``oci+http://`` speaks plain HTTP (a local test registry)."""
    insecure = source.startswith("oci+http://")
    rest = source.split("://", 1)[1]
    if "/" not in rest:
        raise ConfigError(
            f"{index_flag()} {source}: expected oci://HOST/REPOSITORY[:TAG]",
            hint=f"e.g. oci://ghcr.io/acme/torch:{INDEX_ARTIFACT_TAG}",
        )
    host, path = rest.split("/", 1)
    repo, tag, digest = split_reference(path)
    if digest is not None:
        raise ConfigError(
            f"{index_flag()} {source}: an index is read by its tag, not by digest (@{digest[:80]} would be "
            "ignored)",
            hint=f"drop @{digest[:80]}: the signed serial and expiry tell the current index from an older "
            "one; to keep one fixed index, save it as a file with its .sig and pass that",
        )
    if not host or not repo or "" in repo.split("/"):
        raise ConfigError(
            f"{index_flag()} {source}: expected oci://HOST/REPOSITORY[:TAG] (an empty host or path part)",
            hint=f"e.g. oci://ghcr.io/acme/torch:{INDEX_ARTIFACT_TAG}",
        )
    # a malformed host or repository is a bad flag (exit 2), caught here: not a registry's failure (exit 9)
    if not re.fullmatch(HOST_PORT, host, re.ASCII) or not re.fullmatch(REPO_PATH, repo, re.ASCII):
        bad = (
            f"{host!r} is not a registry host[:port]"
            if not re.fullmatch(HOST_PORT, host, re.ASCII)
            else f"{repo!r} is not a repository path (lowercase letters and digits joined by / . _ -)"
        )
        raise ConfigError(
            f"{index_flag()} {source}: {bad}",
            hint=f"e.g. oci://ghcr.io/acme/torch:{INDEX_ARTIFACT_TAG} (a port is 1-65535)",
        )
    return host, repo, tag or INDEX_ARTIFACT_TAG, insecure


def _download_oci(source: str, *, with_key: bool = False) -> tuple[bytes, bytes | None, bytes | None]:
    """(index JSON, its signature envelope or None, the published key or None) of the artifact."""
    from imagesmith.index import read_published_index
    from imagesmith.refs import Registry
    from imagesmith.registry import client_for

    host, repo, tag, insecure = parse_oci_source(source)
    # one retry, quickly: a refused connection is not transient, and a cached copy may answer instead; a
    # registry that sends no byte for IMAGESMITH_INDEX_STALL seconds is a stall the client names
    from imagesmith import settings
    from imagesmith.http import INDEX_ARTIFACT as quick

    target = Registry(name=host, host=host, repository=repo, insecure=insecure)
    stall = min(quick.read_timeout, settings.seconds("IMAGESMITH_INDEX_STALL"))
    client = client_for(target, attempts=quick.attempts, backoff=quick.backoff, timeout=stall)
    try:
        return read_published_index(client, repo, tag, with_key=with_key)
    except ManifestUnknownError:
        raise
    except RegistryError as exc:
        if exc.hint and exc.fault is not Fault.UNREACHABLE:
            raise  # denied, not found, …: the registry client's own fix applies
        raise RegistryError(
            f"{index_flag()} {source}: {exc.message}",
            hint=f"check that {host} is up and reachable from this host (network, proxy, firewall"
            + ("" if insecure else "; a plain-HTTP registry needs oci+http://")
            + "), or pass the index as a file or http(s) URL",
        ) from None


@dataclass
class Downloads:
    """How :func:`fetch_index` gets an index's bytes: the one seam a test swaps
    (``monkeypatch.setattr(fetching.DOWNLOADS, "oci", fake)``) to serve an index without a server."""

    #: (status, body) of an https:// or http:// URL
    http: Callable[[str], tuple[int, bytes]]
    #: (index JSON, signature envelope or None, published key or None) of an oci:// artifact
    oci: Callable[..., tuple[bytes, bytes | None, bytes | None]]


DOWNLOADS = Downloads(http=_download_http, oci=_download_oci)
