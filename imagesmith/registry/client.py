"""The registry HTTP API v2 client: manifests (HEAD/GET/PUT/DELETE), tags, blobs (HEAD, mount, GET), the
write probe — on the transport (:mod:`~imagesmith.registry.transport`) and the resumable upload
(:mod:`~imagesmith.registry.upload`)."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urljoin

import requests

from imagesmith.errors import CorruptBlobError, Fault
from imagesmith.registry.api import (
    _DIGEST,
    ACCEPT_MANIFESTS,
    MANIFEST_V2,
    BlobStat,
    ManifestData,
    RegistryApi,
)
from imagesmith.registry.faults import MAX_MANIFEST_BYTES, _TooLarge, _Transient, answer_codes
from imagesmith.registry.transport import _length
from imagesmith.registry.upload import Uploader, _Upload


class RegistryClient(Uploader):
    """One registry host, over the HTTP API v2 (implements :class:`RegistryApi`). Every method names the
    registry in its errors."""

    # -- API ------------------------------------------------------------------------------------------------
    def ping(self) -> None:
        """GET /v2/ (authenticating if asked). Raises RegistryError when the registry cannot be used."""
        resp = self._call("GET", "/v2/")
        self._check(resp, "ping /v2/", (200,))

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """HEAD the manifest; its digest, or None when the registry does not hold it."""
        resp = self._call(
            "HEAD",
            f"/v2/{repo}/manifests/{reference}",
            scope=self._scope(repo),
            headers={"Accept": ACCEPT_MANIFESTS},
        )
        if resp.status_code == 404:
            return None
        self._check(resp, f"HEAD manifest {repo}:{reference}", (200,), manifest=True)
        digest = (resp.headers.get("Docker-Content-Digest") or "").strip()
        # a header that is no sha256 digest, or names another digest than the one asked for, is not taken at
        # its word: the manifest is read and hashed (get_manifest refuses content that does not match)
        if _DIGEST.fullmatch(digest) and (not _DIGEST.fullmatch(reference) or digest == reference):
            return digest
        return self.get_manifest(repo, reference).digest

    def get_manifest(self, repo: str, reference: str) -> ManifestData:
        """The manifest *reference* (tag or digest). Its content must hash to the digest asked for, and to
        the ``Docker-Content-Digest`` the registry names: a body cut or altered on the way is read again
        (twice more), then refused — never handed on to be copied or tagged."""
        what = f"GET manifest {repo}:{reference}"
        problem = ""
        for _ in range(3):
            try:
                resp = self._retrying(
                    lambda started: self._send(
                        "GET",
                        f"/v2/{repo}/manifests/{reference}",
                        scope=self._scope(repo),
                        headers={"Accept": ACCEPT_MANIFESTS},
                        started=started,
                        limit=MAX_MANIFEST_BYTES,
                    )
                )
            except _TooLarge as exc:
                raise self._fail(
                    what,
                    exc.describe("the manifest") + " (no registry stores a larger one)",
                    hint=f"registry {self.name} (or a proxy in front of it) serves something that is not an "
                    "image manifest there: check the reference, the registry's storage and any proxy in "
                    "between, or drop that registry",
                    fault=Fault.TOO_LARGE,
                ) from None
            self._check(resp, what, (200,), manifest=True)
            body = resp.content
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            named = (resp.headers.get("Docker-Content-Digest") or "").strip()
            if _DIGEST.fullmatch(reference) and digest != reference:
                problem = f"its content hashes to {digest}, not the digest asked for"
                continue
            if named.startswith("sha256:") and named != digest:
                problem = (
                    f"the registry names it {named} (Docker-Content-Digest), its content hashes to {digest}"
                )
                continue
            origin = f"registry {self.name} ({self.host}) {repo}@{reference}"
            media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
            if not media_type or media_type == "application/json":
                doc = ManifestData(
                    body=body, media_type="", digest=digest, origin=origin, registry=self.name
                ).json()
                media_type = str(doc.get("mediaType") or MANIFEST_V2)
            return ManifestData(
                body=body, media_type=media_type, digest=digest, origin=origin, registry=self.name
            )
        raise CorruptBlobError(
            f"registry {self.name} ({self.host}): {what}: {problem} (3 reads); nothing was copied or tagged "
            "from it",
            hint=f"the manifest registry {self.name} serves (or a proxy in front of it) does not match its "
            "digest: check the registry's storage and any proxy or cache in between, then rerun",
            registry=self.name,
            host=self.host,
            repository=repo,
            digest=reference,
            fault=Fault.CORRUPT,
            problem=problem,
        )

    def put_manifest(self, repo: str, reference: str, manifest: ManifestData) -> str:
        resp = self._call(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            scope=self._scope(repo, "pull,push"),
            headers={"Content-Type": manifest.media_type},
            data=manifest.body,
        )
        self._check(resp, f"PUT manifest {repo}:{reference}", (201, 200), manifest=True)
        digest = resp.headers.get("Docker-Content-Digest", manifest.digest)
        if digest != manifest.digest:
            raise self._fail(
                f"PUT manifest {repo}:{reference}",
                f"stored digest {digest} ≠ sent {manifest.digest}",
                hint=f"registry {self.name} rewrites manifests (or a proxy in front of it does): push to it "
                "directly, or drop it from the cell's registries",
            )
        return digest

    def delete_manifest(self, repo: str, digest: str) -> None:
        resp = self._call(
            "DELETE", f"/v2/{repo}/manifests/{digest}", scope=self._scope(repo, "pull,push,delete")
        )
        self._check(resp, f"DELETE manifest {repo}@{digest}", (202, 200), manifest=True)

    def delete_tag(self, repo: str, tag: str) -> bool:
        """DELETE a tag alone (OCI distribution 1.1); False when the registry does not support it (Debian's
        docker-registry 2.8 answers 405/UNSUPPORTED or deletes by digest only)."""
        if tag.startswith("sha256:"):
            raise ValueError("delete_tag takes a tag, not a digest")
        resp = self._call(
            "DELETE", f"/v2/{repo}/manifests/{tag}", scope=self._scope(repo, "pull,push,delete")
        )
        if resp.status_code in (200, 202, 404):
            resp.close()
            return resp.status_code != 404 or self.manifest_digest(repo, tag) is None
        resp.close()
        return False

    def list_tags(self, repo: str) -> list[str]:
        tags: list[str] = []
        url = f"/v2/{repo}/tags/list"
        while url:
            resp = self._call("GET", url, scope=self._scope(repo))
            if resp.status_code == 404:
                return tags
            self._check(resp, f"list tags of {repo}", (200,))
            try:
                data = resp.json()
            except ValueError:
                data = None
            page = data.get("tags") if isinstance(data, dict) else None
            if page is not None and (not isinstance(page, list) or not all(isinstance(t, str) for t in page)):
                data = None
            if not isinstance(data, dict):
                raise self._fail(
                    f"list tags of {repo}",
                    'the answer is not a tag list (a JSON object with a "tags" list of strings)',
                    hint=f"check that {self.host} is a registry (not a web page or proxy error page) and "
                    "rerun",
                )
            tags += page or []
            link = resp.headers.get("Link", "")
            m = re.match(r"<([^>]+)>", link)
            url = urljoin(self.base + "/", m.group(1)) if m else ""
        return tags

    def stat_blob(self, repo: str, digest: str) -> BlobStat | None:
        """HEAD the blob: its size and the digest the registry names (``Docker-Content-Digest``), or None."""
        resp = self._call("HEAD", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo))
        if resp.status_code == 404:
            return None
        self._check(resp, f"HEAD blob {repo}@{digest[:19]}", (200,))
        return BlobStat(size=_length(resp), digest=resp.headers.get("Docker-Content-Digest") or None)

    def blob_size(self, repo: str, digest: str) -> int | None:
        """HEAD the blob: its size, or None when absent."""
        stat = self.stat_blob(repo, digest)
        return None if stat is None else stat.size

    def delete_blob(self, repo: str, digest: str) -> bool:
        """DELETE the blob from *repo*; False when the registry does not allow deletes (405, UNSUPPORTED)."""
        resp = self._call("DELETE", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo, "pull,push,delete"))
        if resp.status_code in (200, 202, 404):
            resp.close()
            return True
        codes, _ = answer_codes(resp)
        if resp.status_code in (400, 403, 405) or "UNSUPPORTED" in codes:
            resp.close()
            return False
        self._check(resp, f"DELETE blob {repo}@{digest[:19]}", (202,))
        return True

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool:
        """Cross-repository mount on this registry; False when the registry started an upload instead (that
        upload session is cancelled at once, so nothing is left behind)."""
        resp = self._call(
            "POST",
            f"/v2/{repo}/blobs/uploads/",
            scope=f"{self._scope(repo, 'pull,push')} {self._scope(from_repo)}",
            params={"mount": digest, "from": from_repo},
        )
        self._check(resp, f"mount blob {digest[:19]} from {from_repo} into {repo}", (201, 202))
        if resp.status_code == 202 and resp.headers.get("Location"):
            self._cancel_upload(
                urljoin(self.base + "/", resp.headers["Location"]), self._scope(repo, "pull,push")
            )
        return resp.status_code == 201

    def get_blob(self, repo: str, digest: str, offset: int = 0) -> requests.Response:
        """Streamed GET of a blob (follows redirects to storage), from byte *offset* (``Range``; a registry
        that ignores it answers 200 with the whole blob). The caller closes the response."""
        headers = {"Range": f"bytes={offset}-"} if offset else None
        resp = self._call(
            "GET", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo), stream=True, headers=headers
        )
        return self._check(resp, f"GET blob {repo}@{digest[:19]}", (200, 206))

    def probe_write(self, repo: str) -> None:
        """Write 1 MiB into an upload session of *repo* and cancel it (nothing is stored). RegistryError with
        the translated fault when the registry cannot take a write now (storage full, quota, denied,
        read-only); transient faults pass silently (the caller's retries deal with them)."""
        scope = self._scope(repo, "pull,push")
        up = _Upload()
        try:
            resp = self._send("POST", f"/v2/{repo}/blobs/uploads/", scope=scope)  # one try: a probe
            self._check(resp, f"write probe into {repo}", (202,))
            up.location = urljoin(self.base + "/", self._location(resp, f"write probe into {repo}"))
            resp = self._send(
                "PATCH",
                up.location,
                scope=scope,
                data=bytes(1 << 20),
                headers={"Content-Type": "application/octet-stream", "Content-Range": f"0-{(1 << 20) - 1}"},
            )
            if resp.status_code in (202, 204):
                up.location = urljoin(self.base + "/", resp.headers.get("Location", up.location))
            self._check(resp, f"write probe into {repo}", (202, 204))
        except _Transient:
            pass
        finally:
            self._cancel_upload(up, scope)


_: type[RegistryApi] = RegistryClient  # mypy checks that the HTTP client implements the seam
