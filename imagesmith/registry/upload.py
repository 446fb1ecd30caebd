"""Blob uploads, chunked and resumable: a dropped ``PATCH`` is resumed at the offset the registry reports,
else the blob restarts from its first byte; an upload given up is cancelled (``DELETE`` of the session) so
its bytes do not stay on the registry's disk."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urljoin

import requests

from imagesmith.errors import Fault, RegistryError
from imagesmith.registry.api import BlobStat
from imagesmith.registry.faults import _Transient, answer_codes
from imagesmith.registry.transport import Transport, _length


@dataclass
class _Upload:
    """One upload session: where the registry said to send the next request."""

    location: str | None = None


@dataclass
class _Progress:
    """When the registry last took more bytes of a blob: its upload gives up once it took none for the
    policy's deadline (one deadline per blob, restarted by progress only, never by a retry or a restart)."""

    last: float
    held: int = 0

    def took(self, held: int) -> None:
        """The registry holds *held* bytes of the current session: progress when that is more than before."""
        if held > self.held:
            self.last = time.monotonic()
        self.held = held

    def idle(self) -> float:
        return time.monotonic() - self.last


class _Restart(Exception):
    """The registry lost an upload session (or refused to resume it): upload the blob again from byte 0."""


@dataclass(frozen=True)
class SizedChunks:
    """*chunks* of a blob whose size is known (the manifest says it): uploads stream each PATCH as the bytes
    arrive instead of gathering a chunk first."""

    chunks: Callable[[], Iterator[bytes]]
    size: int

    def __call__(self) -> Iterator[bytes]:
        return self.chunks()


def _pieces_from(pieces: list[bytes], pos: int) -> Iterator[bytes]:
    """The bytes of *pieces* from offset *pos* on (a generator: requests streams it, chunked)."""
    for piece in pieces:
        if pos >= len(piece):
            pos -= len(piece)
            continue
        yield piece[pos:] if pos else piece
        pos = 0


class Uploader(Transport):
    """Blob upload on top of the transport (what :class:`~imagesmith.registry.client.RegistryClient`
    inherits)."""

    # -- blob upload: chunked, resumable, cancelled when given up --------------------------------------------
    def upload_blob(self, repo: str, digest: str, chunks: Callable[[], Iterator[bytes]]) -> None:
        """Upload a blob: POST an upload session, PATCH it chunk by chunk (``Content-Range``), PUT ?digest=.

        Each request is retried on its own. A chunk whose PATCH failed is resumed at the offset the registry
        reports for the session; when the registry lost or refuses the session, *chunks* is called again and
        the blob restarts from its first byte (at most ``policy.restarts`` times). An upload that fails for
        good is cancelled (``DELETE`` of the session) so its bytes do not stay on the registry's disk.
        """
        scope = self._scope(repo, "pull,push")
        restarts = 0
        progress = _Progress(last=time.monotonic())
        while True:
            up = self._start_upload(repo, digest, scope)
            progress.held = 0
            try:
                self._upload_chunks(repo, digest, scope, up, chunks, progress)
                return
            except _Restart as exc:
                self._cancel_upload(up, scope)
                if progress.idle() >= self.policy.deadline:
                    raise self._stalled(repo, digest, progress) from None
                restarts += 1
                if restarts > self.policy.restarts:
                    raise self._fail(
                        f"upload {digest[:19]} to {repo}",
                        f"the registry dropped the upload session {restarts} times ({exc})",
                        hint=f"check registry {self.name}'s storage and logs, then rerun",
                    ) from None
            except _Transient as exc:
                self._cancel_upload(up, scope)
                if progress.idle() >= self.policy.deadline:
                    raise self._stalled(repo, digest, progress) from exc
                raise self._gave_up(exc, self.policy.attempts) from exc
            except BaseException:
                self._cancel_upload(up, scope)
                raise

    def _stalled(self, repo: str, digest: str, progress: _Progress) -> RegistryError:
        """The upload of *digest* given up: the registry took no byte of it for the deadline (issue 37)."""
        error = self._fail(
            f"upload {digest[:19]} to {repo}",
            f"no bytes for {progress.idle():.0f} s from registry {self.name} (it holds {progress.held} "
            f"bytes of the blob's current upload; the deadline of {self.policy.deadline:.0f} s restarts "
            "on progress only)",
            hint=f"check that registry {self.name} is up, not full and not throttled, then rerun (blobs "
            "already copied are not sent again); IMAGESMITH_REGISTRY_DEADLINE gives a slow registry more "
            "time",
            fault=Fault.UNREACHABLE,
            transient=True,
        )
        return error.replace(repository=repo, digest=digest)

    def _start_upload(self, repo: str, digest: str, scope: str) -> _Upload:
        resp = self._call("POST", f"/v2/{repo}/blobs/uploads/", scope=scope)
        self._check(resp, f"start upload of {digest[:19]} to {repo}", (202,))
        return _Upload(urljoin(self.base + "/", self._location(resp, f"start upload of {digest[:19]}")))

    def _location(self, resp: requests.Response, what: str) -> str:
        """The ``Location`` an upload answer must carry (a RegistryError naming the registry when absent)."""
        location = resp.headers.get("Location", "").strip()
        resp.close()
        if not location:
            raise self._fail(
                what,
                f"HTTP {resp.status_code} without a Location header (the registry API requires one)",
                hint=f"registry {self.name} (or a proxy in front of it) drops the Location header: fix the "
                "proxy, or push to the registry directly",
            )
        return location

    def _upload_status(self, up: _Upload, scope: str, started: float) -> int | None:
        """Bytes the registry holds for the session (its location updated), or None when it lost it."""
        assert up.location is not None
        resp = self._send("GET", up.location, scope=scope, started=started)
        if resp.status_code in (404, 400, 416):
            resp.close()
            return None
        self._check(resp, "upload status", (204, 200))
        rng = re.match(r"(?:bytes=)?0-([0-9]+)", resp.headers.get("Range", ""))
        up.location = urljoin(self.base + "/", resp.headers.get("Location", up.location))
        # docker-registry answers "0-0" for an empty session too: read it as empty (a registry holding one
        # byte then refuses the resent chunk with 416, and the blob restarts)
        return int(rng.group(1)) + 1 if rng and rng.group(1) != "0" else 0

    def _upload_chunks(
        self,
        repo: str,
        digest: str,
        scope: str,
        up: _Upload,
        chunks: Callable[[], Iterator[bytes]],
        progress: _Progress,
    ) -> None:
        """PATCH the blob chunk by chunk. Each chunk's body is streamed from *chunks* as it arrives (the
        source keeps sending while the destination writes) and its pieces are kept until the registry took
        it, so a failed PATCH is resumed from them. ``Content-Range`` needs the chunk's end: with a known
        size (:class:`SizedChunks`) it is computed, else each chunk is gathered before it is sent."""
        size: int | None = getattr(chunks, "size", None)
        source = iter(chunks())
        carry = b""
        ended = False
        failed: list[BaseException] = []  # the source's error, raised once the registry's session is current

        def pull(limit: int) -> bytes:
            nonlocal carry, ended
            while not carry and not ended:
                try:
                    carry = next(source)
                except StopIteration:
                    ended = True
            take, carry = carry[:limit], carry[limit:]
            return take

        offset = 0
        while True:
            if size is None:
                pending: list[bytes] = []
                held = 0
                while held < self.chunk_size and (piece := pull(self.chunk_size - held)):
                    pending.append(piece)
                    held += len(piece)
                if not pending:
                    break
                self._patch(repo, digest, scope, up, (offset, held), pending, None, progress)
                offset += held
                continue
            length = min(self.chunk_size, size - offset)
            if length <= 0:
                break
            pending = []

            def more(length: int = length, pending: list[bytes] = pending) -> Iterator[bytes]:
                got = sum(len(p) for p in pending)
                while got < length and not failed:
                    try:
                        piece = pull(length - got)
                    except BaseException as exc:  # the source failed: end this PATCH cleanly, raise later
                        failed.append(exc)
                        return
                    if not piece:
                        return
                    pending.append(piece)
                    got += len(piece)
                    yield piece

            self._patch(repo, digest, scope, up, (offset, length), pending, more, progress)
            if failed:
                raise failed[0]
            offset += sum(len(p) for p in pending)
            if sum(len(p) for p in pending) < length:
                break  # the source ended early: read_blob's size check (below) says so
        if size is not None:
            extra = pull(1)  # runs the source to its end: its digest and size checks
            if extra:
                raise RegistryError(f"blob {digest}: the source sends more than the {size} bytes expected")
        self._finish_upload(repo, digest, scope, up, offset)

    def _patch(
        self,
        repo: str,
        digest: str,
        scope: str,
        up: _Upload,
        span: tuple[int, int],
        pending: list[bytes],
        more: Callable[[], Iterator[bytes]] | None,
        progress: _Progress,
    ) -> None:
        """PATCH bytes *span* (offset, length) — *pending* plus, when streaming, what *more* pulls — with
        retries; after a failure the registry is asked what it holds and the rest is sent from *pending*.
        Bytes the registry takes are *progress*; a retry finds it idle for the deadline: given up."""
        offset, length = span
        pos = 0  # bytes of the chunk the registry holds
        for attempt in self.policy.retrying():
            with attempt:
                started = time.monotonic()
                if attempt.retry_state.attempt_number > 1:
                    held = self._upload_status(up, scope, started)
                    if held is not None:
                        progress.took(held)
                    if progress.idle() >= self.policy.deadline:
                        raise self._stalled(repo, digest, progress)
                    if held is None:
                        raise _Restart("upload session unknown after a failed chunk")
                    if not offset <= held <= offset + sum(len(p) for p in pending):
                        raise _Restart(f"the registry holds {held} bytes, the chunk starts at {offset}")
                    pos = held - offset
                    if pos == length:
                        break

                def body(pos: int = pos) -> Iterator[bytes]:
                    yield from _pieces_from(list(pending), pos)
                    if more is not None:
                        yield from more()

                assert up.location is not None
                resp = self._send(
                    "PATCH",
                    up.location,
                    scope=scope,
                    data=body(),
                    started=started,
                    headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Range": f"{offset + pos}-{offset + length - 1}",
                    },
                )
                if resp.status_code in (404, 416):
                    _codes, message = answer_codes(resp)
                    resp.close()
                    raise _Restart(f"PATCH answered HTTP {resp.status_code} {message}")
                self._check(resp, f"upload {digest[:19]} to {repo}", (202, 204))
                up.location = urljoin(self.base + "/", resp.headers.get("Location", up.location))
                progress.took(offset + length)

    def _finish_upload(self, repo: str, digest: str, scope: str, up: _Upload, size: int) -> None:
        """PUT ?digest=; a PUT whose answer was lost is done when the blob is there with its size."""
        what = f"finish upload of {digest[:19]} to {repo}"
        for attempt in self.policy.retrying():
            with attempt:
                started = time.monotonic()
                if attempt.retry_state.attempt_number > 1:
                    stat = self._head_once(repo, digest, started)
                    if stat is not None and stat.size == size:
                        up.location = None
                        return
                assert up.location is not None
                sep = "&" if "?" in up.location else "?"
                resp = self._send("PUT", f"{up.location}{sep}digest={digest}", scope=scope, started=started)
                if resp.status_code in (201, 204):
                    resp.close()
                    up.location = None
                    return
                codes, message = answer_codes(resp)
                if (
                    "BLOB_UPLOAD_UNKNOWN" in codes
                    or "BLOB_UPLOAD_INVALID" in codes
                    or resp.status_code == 404
                ):
                    resp.close()
                    stat = self._head_once(repo, digest, started)
                    if stat is not None and stat.size == size:
                        up.location = None
                        return
                    raise _Restart(f"PUT answered {message}")
                self._check(resp, what, (201,))

    def _head_once(self, repo: str, digest: str, started: float) -> BlobStat | None:
        resp = self._send("HEAD", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo), started=started)
        if resp.status_code != 200:
            resp.close()
            return None
        return BlobStat(size=_length(resp), digest=None)

    def _cancel_upload(self, up: _Upload | str | None, scope: str) -> None:
        """DELETE an upload session (best effort, one quick try): its bytes leave the registry's disk."""
        location = up.location if isinstance(up, _Upload) else up
        if isinstance(up, _Upload):
            up.location = None
        if not location:
            return
        try:
            resp = self._send(
                "DELETE", location, scope=scope, started=time.monotonic() - self.policy.deadline
            )
            resp.close()
        except (_Transient, RegistryError):
            pass
