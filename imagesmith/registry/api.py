"""The registry seam: what build, release and pick ask of one registry (:class:`RegistryApi`), and the
values it speaks in (:class:`ManifestData`, :class:`BlobStat`, the manifest media types)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from imagesmith.credentials import Credentials
from imagesmith.errors import Fault, RegistryError

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST_V2 = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ACCEPT_MANIFESTS = ", ".join((MANIFEST_V2, MANIFEST_LIST_V2, OCI_MANIFEST, OCI_INDEX))
INDEX_TYPES = frozenset({MANIFEST_LIST_V2, OCI_INDEX})
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: bytes per upload PATCH: what a refused request costs to send again, and held in memory per upload (ECR
#: wants at least 5 MiB; each PATCH costs the registry a round trip: 16 MiB chunks were 20 % slower here)
UPLOAD_CHUNK = 64 << 20


@dataclass(frozen=True, kw_only=True)
class ManifestData:
    body: bytes
    media_type: str
    digest: str
    #: where it was read (``registry NAME (HOST) REPO@REF``), named in errors about its content
    origin: str = field(default="", compare=False)
    #: the name of the registry it was read from (the ``registry`` of errors about its content)
    registry: str = field(default="", compare=False)

    def _invalid(self, what: str) -> RegistryError:
        where = self.origin or f"manifest {self.digest}"
        return RegistryError(
            f"{where}: not a valid image manifest: {what}",
            hint="the registry serves a manifest that breaks the image spec (every descriptor needs a digest "
            "and a size): push the image again, or drop this registry from the cell",
            registry=self.registry or None,
            digest=self.digest,
            fault=Fault.INVALID_MANIFEST,
        )

    def json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.body)
        except ValueError as exc:
            raise self._invalid(f"not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise self._invalid("not a JSON object")
        return data

    def blobs(self) -> list[tuple[str, int]]:
        """(digest, size) of the config and every layer of an image manifest."""
        data = self.json()
        out: list[tuple[str, int]] = []
        for where, desc in [("config", data.get("config"))] + [
            (f"layers[{i}]", layer) for i, layer in enumerate(data.get("layers") or [])
        ]:
            if not isinstance(desc, dict) or not isinstance(desc.get("digest"), str):
                raise self._invalid(f"{where}.digest is missing")
            size = desc.get("size")
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise self._invalid(f"{where}.size is missing or not a byte count ({size!r})")
            out.append((desc["digest"], size))
        return out

    def compressed_size(self) -> int:
        """Bytes a pull downloads: the config plus every (compressed) layer."""
        return sum(size for _, size in self.blobs())


@dataclass(frozen=True)
class BlobStat:
    """What HEAD says of a blob: its size and the digest the registry names it by (None when not sent)."""

    size: int
    digest: str | None = None


class BlobStream(Protocol):
    """A blob being read (``requests.Response`` for HTTP): chunks, closed by the ``with`` block."""

    def iter_content(self, chunk_size: int) -> Iterator[bytes]: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *args: Any) -> Any: ...


class RegistryApi(Protocol):
    """What build, release and pick ask of one registry: the seam they are typed with.

    :class:`RegistryClient` is the HTTP implementation; :func:`client_for` the one factory. Fakes in tests
    implement what a test path reaches.
    """

    @property
    def name(self) -> str: ...
    @property
    def host(self) -> str: ...

    def ping(self) -> None: ...
    def manifest_digest(self, repo: str, reference: str) -> str | None: ...
    def get_manifest(self, repo: str, reference: str) -> ManifestData: ...
    def put_manifest(self, repo: str, reference: str, manifest: ManifestData) -> str: ...
    def delete_manifest(self, repo: str, digest: str) -> None: ...
    def list_tags(self, repo: str) -> list[str]: ...
    def blob_size(self, repo: str, digest: str) -> int | None: ...
    def stat_blob(self, repo: str, digest: str) -> BlobStat | None: ...
    def delete_blob(self, repo: str, digest: str) -> bool: ...
    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool: ...
    def get_blob(self, repo: str, digest: str, offset: int = 0) -> BlobStream: ...
    def upload_blob(self, repo: str, digest: str, chunks: Callable[[], Iterator[bytes]]) -> None: ...
    def delete_tag(self, repo: str, tag: str) -> bool: ...
    def probe_write(self, repo: str) -> None: ...

    def resolve_credentials(self) -> Credentials | None:
        """The credentials for an engine push to this registry (its chain), or None."""
        ...

    def refresh_credentials(self, refused: Credentials) -> Credentials | None:
        """Other credentials after the engine's push was refused with *refused*, or None."""
        ...
