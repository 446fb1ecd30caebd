"""One registry in memory, implementing :class:`imagesmith.registry.RegistryApi` — the fake every unit test
puts behind the ``client_for`` seam (build, release, attestations, copies).

It behaves as a registry does where the tests can tell: tags per repository, manifests and blobs by digest,
a manifest refused before its blobs are there, an upload whose bytes do not hash to its digest refused, a
missing manifest or blob a :class:`RegistryError` naming the registry. What a real registry cannot be made to
show is set on purpose: ``fail`` (every call raises it: a registry that is down), ``deletes=False`` (a
registry that refuses DELETE), blobs or manifests changed in place (damage, a hostile registry).

mypy checks it against the protocol (``_SEAM`` below, ``[tool.mypy] files``): it cannot drift from it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType

from imagesmith.credentials import Credentials
from imagesmith.errors import RegistryError
from imagesmith.registry import OCI_MANIFEST, BlobStat, ManifestData, RegistryApi

__all__ = ["FakeRegistry", "MemoryBlob", "image_manifest", "sha256"]


def sha256(data: bytes) -> str:
    """The ``sha256:<hex>`` digest of *data*."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_manifest(config: bytes, *layers: bytes, media_type: str = OCI_MANIFEST) -> ManifestData:
    """An image manifest of *config* and *layers* (their digests and sizes)."""
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {"digest": sha256(config), "size": len(config)},
            "layers": [{"digest": sha256(layer), "size": len(layer)} for layer in layers],
        }
    ).encode()
    return ManifestData(body=body, media_type=media_type, digest=sha256(body))


@dataclass
class MemoryBlob:
    """A blob being read (what ``requests.Response`` is to :class:`imagesmith.registry.RegistryClient`)."""

    data: bytes

    def iter_content(self, chunk_size: int) -> Iterator[bytes]:
        for i in range(0, len(self.data), chunk_size):
            yield self.data[i : i + chunk_size]

    def __enter__(self) -> MemoryBlob:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


@dataclass
class FakeRegistry:
    """One registry in memory; records the calls that write (``writes``) and the references asked for
    (``asked``)."""

    name: str = "fake"
    host: str = "fake.example"
    #: what resolve_credentials gives (an engine push's password), and what refresh_credentials gives after
    #: the engine's push was refused (``refreshes`` counts the calls)
    credentials: Credentials | None = None
    fresh: Credentials | None = None
    #: when set, every call raises it (the registry is down, or refuses this client)
    fail: RegistryError | None = None
    #: False: DELETE of a blob or tag is refused (as many hosted registries do), the call returns False
    deletes: bool = True
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, ManifestData] = field(default_factory=dict)
    #: (repository, tag) → manifest digest
    tags: dict[tuple[str, str], str] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)
    refreshes: int = 0

    # -- setting a registry up ------------------------------------------------------------------------------
    def add_blob(self, data: bytes) -> str:
        """Store *data* as a blob (no write recorded); its digest."""
        digest = sha256(data)
        self.blobs[digest] = data
        return digest

    def add_manifest(self, repo: str, tag: str | None, manifest: ManifestData) -> str:
        """Store *manifest* (tagged *tag* in *repo* unless None) as it stands, blobs or not; its digest."""
        self.manifests[manifest.digest] = manifest
        if tag is not None:
            self.tags[repo, tag] = manifest.digest
        return manifest.digest

    def tagged(self, repo: str) -> dict[str, str]:
        """Tag → digest of *repo*."""
        return {t: d for (r, t), d in self.tags.items() if r == repo}

    # -- RegistryApi -----------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def _missing(self, what: str) -> RegistryError:
        return RegistryError(
            f"registry {self.name} ({self.host}): {what} not found", hint="push the image (again)"
        )

    def ping(self) -> None:
        self._check()

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        self.asked.append((repo, reference))
        self._check()
        if reference.startswith("sha256:"):
            return reference if reference in self.manifests else None
        digest = self.tags.get((repo, reference))
        return digest if digest in self.manifests else None

    def get_manifest(self, repo: str, reference: str) -> ManifestData:
        self._check()
        digest = reference if reference.startswith("sha256:") else self.tags.get((repo, reference))
        if digest is None or digest not in self.manifests:
            raise self._missing(f"manifest {repo}@{reference}")
        return self.manifests[digest]

    def put_manifest(self, repo: str, reference: str, manifest: ManifestData) -> str:
        self._check()
        for digest, _size in manifest.blobs():
            if digest not in self.blobs:
                raise RegistryError(
                    f"registry {self.name} ({self.host}): PUT manifest {repo}:{reference}: blob {digest} "
                    "unknown to registry",
                    hint="push the blobs before the manifest",
                )
        self.manifests[manifest.digest] = manifest
        if not reference.startswith("sha256:"):
            self.tags[repo, reference] = manifest.digest
        self.writes.append(f"manifest {repo}:{reference}")
        return manifest.digest

    def delete_manifest(self, repo: str, digest: str) -> None:
        self._check()
        self.manifests.pop(digest, None)
        self.writes.append(f"delete manifest {repo}@{digest}")

    def list_tags(self, repo: str) -> list[str]:
        self._check()
        return sorted(self.tagged(repo))

    def blob_size(self, repo: str, digest: str) -> int | None:
        self._check()
        return len(self.blobs[digest]) if digest in self.blobs else None

    def stat_blob(self, repo: str, digest: str) -> BlobStat | None:
        self._check()
        return BlobStat(len(self.blobs[digest]), digest) if digest in self.blobs else None

    def delete_blob(self, repo: str, digest: str) -> bool:
        self._check()
        self.writes.append(f"delete blob {digest}")
        if not self.deletes:
            return False
        self.blobs.pop(digest, None)
        return True

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool:
        self._check()
        return digest in self.blobs

    def get_blob(self, repo: str, digest: str, offset: int = 0) -> MemoryBlob:
        self._check()
        if digest not in self.blobs:
            raise self._missing(f"blob {repo}@{digest}")
        return MemoryBlob(self.blobs[digest][offset:])

    def upload_blob(self, repo: str, digest: str, chunks: Callable[[], Iterator[bytes]]) -> None:
        self._check()
        data = b"".join(chunks())
        if sha256(data) != digest:
            raise RegistryError(
                f"registry {self.name} ({self.host}): upload of {digest} to {repo}: the bytes hash to "
                f"{sha256(data)}",
                hint="upload the blob's own bytes",
            )
        self.blobs[digest] = data
        self.writes.append(f"blob {digest[:15]}")

    def delete_tag(self, repo: str, tag: str) -> bool:
        self._check()
        self.writes.append(f"untag {repo}:{tag}")
        if not self.deletes:
            return False
        self.tags.pop((repo, tag), None)
        return True

    def probe_write(self, repo: str) -> None:
        self._check()

    def resolve_credentials(self) -> Credentials | None:
        return self.credentials

    def refresh_credentials(self, refused: Credentials) -> Credentials | None:
        self.refreshes += 1
        return self.fresh


#: the fake implements the seam (mypy checks the assignment, as it does RegistryClient's in imagesmith/)
_SEAM: type[RegistryApi] = FakeRegistry
