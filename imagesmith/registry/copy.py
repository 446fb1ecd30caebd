"""Verified copies between registries: a blob is never trusted by its name alone (:data:`Verify`), a stream
cut in the middle is resumed, a damaged blob is repaired or reported as
:class:`~imagesmith.errors.CorruptBlobError`; errors say which side failed (source/destination)."""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

import requests

from imagesmith import settings
from imagesmith.errors import CorruptBlobError, Fault, RegistryError, Side
from imagesmith.registry.api import _DIGEST, INDEX_TYPES, UPLOAD_CHUNK, ManifestData, RegistryApi
from imagesmith.registry.faults import RetryPolicy
from imagesmith.registry.upload import SizedChunks

_CHUNK = 8 << 20

#: How far a copy trusts a blob (lowest to highest; ``off``, the pre-issue-18 behaviour, is for benchmarks):
#: ``head`` (default) — a blob the destination already holds must answer HEAD with its digest and the size the
#: manifest gives; ``read`` — such a blob is read back in full and hashed (a registry that is not trusted);
#: ``full`` — ``read``, plus every blob the copy uploaded is read back and hashed (the nightly's verify mode).
Verify = Literal["off", "head", "read", "full"]
VERIFY_LEVELS: tuple[str, ...] = get_args(Verify)
VERIFY_ENV = "IMAGESMITH_VERIFY"


def verify_level(value: str | None = None, *, allow_off: bool = False) -> Verify:
    """*value*, else ``$IMAGESMITH_VERIFY``, else ``head``; RegistryError for an unknown level (``off`` only
    with *allow_off*: benchmarks)."""
    level = (value or settings.get(VERIFY_ENV) or "head").strip().lower()
    if level not in VERIFY_LEVELS or (level == "off" and not allow_off):
        raise RegistryError(
            f"verify level {level!r} is not one of head, read, full",
            hint=f"--verify head|read|full (or {VERIFY_ENV}); full is the nightly's",
        )
    return level  # type: ignore[return-value]


# -- copies -------------------------------------------------------------------------------------------------
def _sided(side: Side, exc: RegistryError) -> RegistryError:
    """*exc* with the side of the copy that failed in front (``source registry r1 …``), its fix kept."""
    return exc if exc.side else exc.replace(side=side)


def _download_stalled(
    client: RegistryApi, repo: str, digest: str, side: Side, got: int, idle: float
) -> RegistryError:
    """A blob download given up: the registry sent no byte of it for the deadline (issue 37)."""
    return RegistryError(
        f"registry {client.name} ({client.host}): GET blob {repo}@{digest[:19]}: no bytes for {idle:.0f} s "
        f"from registry {client.name} (stopped at byte {got}; the deadline restarts on progress only)",
        hint=f"check that registry {client.name} is up and not throttled, then rerun (blobs already copied "
        "are not sent again); IMAGESMITH_REGISTRY_DEADLINE gives a slow registry more time",
        side=side,
        registry=client.name,
        host=client.host,
        repository=repo,
        digest=digest,
        fault=Fault.UNREACHABLE,
        transient=True,
    )


def read_blob(
    client: RegistryApi,
    repo: str,
    digest: str,
    *,
    side: Side = Side.SOURCE,
    size: int | None = None,
    policy: RetryPolicy | None = None,
) -> Iterator[bytes]:
    """The bytes of blob *digest*, sha256-checked: a stream cut in the middle is resumed (``Range``) at the
    byte it stopped; a content that does not hash to *digest* (or has another size than *size*) is a
    :class:`CorruptBlobError` naming *side*, the registry, the repository and the digest."""
    policy = policy or getattr(client, "policy", None) or RetryPolicy()
    h = hashlib.sha256()
    got = 0
    cuts = 0
    last = time.monotonic()  # the last byte the source sent: the deadline restarts on progress only
    while True:
        try:
            with client.get_blob(repo, digest, got) if got else client.get_blob(repo, digest) as resp:
                skip = got if got and getattr(resp, "status_code", 206) == 200 else 0
                for chunk in resp.iter_content(_CHUNK):
                    if skip:
                        drop = min(skip, len(chunk))
                        chunk, skip = chunk[drop:], skip - drop
                        if not chunk:
                            continue
                    h.update(chunk)
                    got += len(chunk)
                    yield chunk
                    last = time.monotonic()  # (the consumer's time is not the source's stall)
            break
        except RegistryError as exc:
            if exc.transient and time.monotonic() - last >= policy.deadline:
                raise _download_stalled(client, repo, digest, side, got, time.monotonic() - last) from None
            raise _sided(side, exc) from None
        except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
            cuts += 1
            if time.monotonic() - last >= policy.deadline:
                raise _download_stalled(client, repo, digest, side, got, time.monotonic() - last) from None
            if cuts >= policy.attempts:
                raise RegistryError(
                    f"registry {client.name} ({client.host}): GET blob {repo}@{digest[:19]}: the "
                    f"download broke {cuts} time(s), last at byte {got} ({type(exc).__name__})",
                    hint=f"check that registry {client.name} is up and reachable, then rerun (blobs already "
                    "copied are not sent again)",
                    side=side,
                    registry=client.name,
                    host=client.host,
                    repository=repo,
                    digest=digest,
                    fault=Fault.UNREACHABLE,
                    transient=True,
                ) from None
            time.sleep(min(policy.max_wait, policy.backoff * 2 ** (cuts - 1)))
    actual = "sha256:" + h.hexdigest()
    if actual != digest or (size is not None and got != size):
        problem = f"its content hashes to {actual} ({got} bytes" + (
            f", the manifest says {size})" if size else ")"
        )
        raise CorruptBlobError(
            f"registry {client.name} ({client.host}): blob {digest} in {repo} is corrupt: {problem}",
            hint="the registry's copy of the blob is damaged: delete it there (and run the registry's "
            "garbage collection, which removes the stored file), then rerun to copy it again",
            side=side,
            registry=client.name,
            host=client.host,
            repository=repo,
            digest=digest,
            fault=Fault.CORRUPT,
            problem=problem,
        )


_END = object()


def _prefetched(source: Iterator[bytes], depth: int = 4) -> Iterator[bytes]:
    """*source* read ahead by a thread (up to *depth* pieces): the source registry sends the next pieces while
    the destination takes this one. The source's errors are raised here, in the consumer; a consumer that
    stops early stops the thread, which closes *source*."""
    pieces: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                pieces.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def pump() -> None:
        try:
            for piece in source:
                if not put(piece):
                    return
            put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)
        finally:
            close = getattr(source, "close", None)
            if callable(close):
                close()

    threading.Thread(target=pump, name="imagesmith-blob-read", daemon=True).start()
    try:
        while True:
            item = pieces.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, bytes)
            yield item
    finally:
        stop.set()


def blob_digest(client: RegistryApi, repo: str, digest: str, *, side: Side, size: int | None = None) -> None:
    """Read *digest* back from *client* in full and check it (CorruptBlobError when it does not hash)."""
    for _ in read_blob(client, repo, digest, side=side, size=size):
        pass


@dataclass(frozen=True)
class _Distrust:
    """Why the blob a destination holds cannot be trusted: not there at all (``missing``), or there but
    wrong (``problem``, in words: a corrupt blob's hash, a HEAD that names another digest or size)."""

    missing: bool
    problem: str


def _dst_problem(
    dst: RegistryApi, repo: str, digest: str, size: int | None, verify: Verify
) -> _Distrust | None:
    """Why the blob *dst* already holds cannot be trusted, or None (it checks out at *verify*'s level)."""
    stat = dst.stat_blob(repo, digest)
    if stat is None:
        return _Distrust(missing=True, problem="missing")
    if verify == "off":
        return None
    if stat.digest and stat.digest != digest:
        return _Distrust(missing=False, problem=f"HEAD names it {stat.digest}")
    if size is not None and stat.size != size:
        return _Distrust(missing=False, problem=f"HEAD gives {stat.size} bytes, the manifest says {size}")
    if verify in ("read", "full"):
        try:
            blob_digest(dst, repo, digest, side=Side.DESTINATION, size=size)
        except CorruptBlobError as exc:
            return _Distrust(missing=False, problem=exc.problem if exc.problem is not None else exc.message)
    return None


def copy_blob(
    src: RegistryApi,
    src_repo: str,
    dst: RegistryApi,
    dst_repo: str,
    digest: str,
    *,
    size: int | None = None,
    verify: Verify = "head",
) -> int:
    """Make *dst* hold a verified blob *digest*; returns the bytes transferred (0 when present or mounted).

    A blob *dst* already holds is trusted only when it checks out at the *verify* level (see
    :data:`Verify`); one that does not is deleted and uploaded again, then read back; when the registry keeps
    the damaged file (Debian's docker-registry does until garbage collection) the copy fails with a
    :class:`CorruptBlobError` naming the destination, the repository and the digest — nothing is tagged.
    Errors name the side that failed (``source registry …`` / ``destination registry …``).
    """
    try:
        problem = _dst_problem(dst, dst_repo, digest, size, verify)
    except RegistryError as exc:
        raise _sided(Side.DESTINATION, exc) from None
    if problem is None:
        return 0
    repairing = not problem.missing
    if repairing:
        try:
            deleted = dst.delete_blob(dst_repo, digest)
        except RegistryError as exc:
            raise _sided(Side.DESTINATION, exc) from None
        if not deleted:
            raise _corrupt_at_destination(dst, dst_repo, digest, problem.problem, repaired=False)
    elif src.host == dst.host and src_repo != dst_repo:
        try:
            if dst.mount_blob(dst_repo, digest, src_repo):
                return 0
        except RegistryError as exc:
            raise _sided(Side.DESTINATION, exc) from None
    sent = 0

    def stream() -> Iterator[bytes]:
        nonlocal sent
        sent = 0
        # read ahead one upload chunk: the source sends chunk k+1 while the destination takes chunk k
        depth = max(2, getattr(dst, "chunk_size", UPLOAD_CHUNK) // _CHUNK + 1)
        for chunk in _prefetched(read_blob(src, src_repo, digest, side=Side.SOURCE, size=size), depth):
            sent += len(chunk)
            yield chunk

    try:
        dst.upload_blob(dst_repo, digest, stream if size is None else SizedChunks(stream, size))
    except RegistryError as exc:
        raise _sided(Side.DESTINATION, exc) from None
    if repairing or verify == "full":
        try:
            again = _dst_problem(dst, dst_repo, digest, size, "read")
        except RegistryError as exc:
            raise _sided(Side.DESTINATION, exc) from None
        if again is not None:
            raise _corrupt_at_destination(dst, dst_repo, digest, again.problem, repaired=repairing)
    return sent


def _corrupt_at_destination(
    dst: RegistryApi, repo: str, digest: str, problem: str, *, repaired: bool
) -> CorruptBlobError:
    tried = (
        "deleting it and uploading it again did not help (the registry keeps the damaged file)"
        if repaired
        else "the registry does not allow deleting it"
    )
    return CorruptBlobError(
        f"registry {dst.name} ({dst.host}): blob {digest} in {repo} is corrupt ({problem}); "
        f"{tried}; nothing was tagged",
        hint=f"remove the blob from registry {dst.name}'s storage (Debian's docker-registry: delete it "
        "through the API, then run `docker-registry garbage-collect` on its config), then rerun",
        side=Side.DESTINATION,
        registry=dst.name,
        host=dst.host,
        repository=repo,
        digest=digest,
        fault=Fault.CORRUPT,
        problem=problem,
    )


def ensure_blob(client: RegistryApi, repo: str, data: bytes) -> str:
    """Make *client* hold the small blob *data* (an artifact's layer or config): uploaded when missing; one
    the registry already holds is trusted only when HEAD gives its size (and digest, when sent), else it is
    deleted and uploaded again. Returns its digest; CorruptBlobError when the registry keeps a damaged one."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    def chunks() -> Iterator[bytes]:
        yield data

    for attempt in range(2):
        stat = client.stat_blob(repo, digest)
        if stat is not None and stat.size == len(data) and stat.digest in (None, digest):
            return digest
        if stat is not None and not client.delete_blob(repo, digest):
            break
        if attempt == 0:
            client.upload_blob(repo, digest, chunks)
    raise _corrupt_at_destination(
        client,
        repo,
        digest,
        f"HEAD gives {stat.size if stat else 'nothing'} bytes, the blob has {len(data)}",
        repaired=stat is not None,
    )


_FOREIGN_ARTIFACT = (
    "the registry serves an artifact imagesmith did not write: republish it (imagesmith release)"
)


def read_small_blob(
    client: RegistryApi, repo: str, digest: Any, size: Any, *, limit: int, what: str, where: str
) -> bytes:
    """The bytes of a small blob a descriptor names (an index, an attestation envelope): *digest* must be a
    sha256 digest and *size* a byte count up to *limit*; nothing past *size* is read, and the bytes must hash
    to *digest*. RegistryError naming *where* (the registry and reference) otherwise — a hostile registry's
    descriptor is never a traceback nor an unbounded read."""
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise RegistryError(
            f"{where}: the {what} layer's digest is not a sha256 digest ({digest!r})",
            hint=_FOREIGN_ARTIFACT,
            fault=Fault.FOREIGN_ARTIFACT,
            field="digest",
        )
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= limit:
        raise RegistryError(
            f"{where}: the {what} layer's size is {size!r}, not a byte count up to {limit} "
            f"({limit >> 20} MiB)",
            hint=_FOREIGN_ARTIFACT,
            fault=Fault.FOREIGN_ARTIFACT,
            field="size",
        )
    h, parts, got = hashlib.sha256(), [], 0
    with client.get_blob(repo, digest) as resp:
        for chunk in resp.iter_content(1 << 16):
            got += len(chunk)
            if got > size:
                break
            h.update(chunk)
            parts.append(chunk)
    if got != size or "sha256:" + h.hexdigest() != digest:
        raise CorruptBlobError(
            f"{where}: {what} blob {digest} arrived with a different "
            + ("size" if got != size else "sha256"),
            hint="a proxy or mirror altered it, or the registry's copy is damaged: read it again, or from "
            "another source",
            digest=digest,
            fault=Fault.CORRUPT,
        )
    return b"".join(parts)


def verify_blobs(client: RegistryApi, repo: str, manifest: ManifestData, *, side: Side) -> None:
    """Read every blob of *manifest* back from *client* and check digest and size (the nightly's verify)."""
    for child in _children(manifest):
        verify_blobs(client, repo, client.get_manifest(repo, child), side=side)
    if manifest.media_type not in INDEX_TYPES:
        for digest, size in manifest.blobs():
            blob_digest(client, repo, digest, side=side, size=size)


def _children(manifest: ManifestData) -> list[str]:
    if manifest.media_type not in INDEX_TYPES:
        return []
    out = []
    for i, child in enumerate(manifest.json().get("manifests") or []):
        if not isinstance(child, dict) or not isinstance(child.get("digest"), str):
            raise manifest._invalid(f"manifests[{i}].digest is missing")
        out.append(child["digest"])
    return out


def copy_manifest(
    src: RegistryApi,
    src_repo: str,
    reference: str,
    dst: RegistryApi,
    dst_repo: str,
    *,
    put_as: str | None = None,
    verify: Verify = "head",
) -> tuple[str, int]:
    """Copy an image (or index, recursively) by reference; every blob (verified, see :func:`copy_blob`)
    before the manifest.

    Returns (digest, bytes transferred). The manifest is put under *put_as* (default: its digest, so
    nothing is tagged by the copy itself).
    """
    try:
        manifest = src.get_manifest(src_repo, reference)
    except RegistryError as exc:
        raise _sided(Side.SOURCE, exc) from None
    sent = 0
    children = _children(manifest)
    if children:
        for child in children:
            _, n = copy_manifest(src, src_repo, child, dst, dst_repo, verify=verify)
            sent += n
    else:
        try:
            blobs = manifest.blobs()
        except RegistryError as exc:
            raise _sided(Side.SOURCE, exc) from None
        for digest, size in blobs:
            sent += copy_blob(src, src_repo, dst, dst_repo, digest, size=size, verify=verify)
    try:
        dst.put_manifest(dst_repo, put_as or manifest.digest, manifest)
    except RegistryError as exc:
        raise _sided(Side.DESTINATION, exc) from None
    return manifest.digest, sent
