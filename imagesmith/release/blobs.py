"""Blobs read back by content, remembered per registry host, and the blobs of an image."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Final

from imagesmith import atomicio, inputs
from imagesmith.errors import StorageError
from imagesmith.registry import (
    INDEX_TYPES,
    RegistryApi,
)


class VerifiedBlobs:
    """The (registry host, blob digest) pairs release has read back in full and hashed: each blob it promotes
    is verified by content at least once per registry, and a rerun (or a later cell sharing the layer) does
    not read it again. A small JSON file under imagesmith's cache dir (``$IMAGESMITH_CACHE``,
    ``~/.cache/imagesmith``): ``release/verified-blobs.json``. A missing, unreadable or foreign file is an
    empty memory (everything is read again), never an error."""

    #: the most pairs kept (the newest): a few MB of JSON
    MAX_ENTRIES: Final[int] = 100_000

    def __init__(self, path: Path | None) -> None:
        import threading

        self.path = path
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}
        self._new = False
        if path is None:
            return
        try:
            # a regular file only: a FIFO there (its size reads 0) would block release forever
            regular = inputs.is_regular_file(path) and path.stat().st_size < (64 << 20)
            doc = json.loads(path.read_bytes()) if regular else None
        except (OSError, ValueError, RecursionError):
            doc = None
        verified = doc.get("verified") if isinstance(doc, dict) and doc.get("schema") == 1 else None
        if isinstance(verified, dict):
            self._seen = {
                k: float(v)
                for k, v in verified.items()
                if isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
            }

    @classmethod
    def default(cls) -> VerifiedBlobs:
        from imagesmith.config import cache_root

        return cls(cache_root() / "release" / "verified-blobs.json")

    @staticmethod
    def _key(host: str, digest: str) -> str:
        return f"{host.lower()}@{digest}"

    def has(self, host: str, digest: str) -> bool:
        with self._lock:
            return self._key(host, digest) in self._seen

    def add(self, host: str, digest: str) -> None:
        with self._lock:
            self._seen[self._key(host, digest)] = time.time()
            self._new = True

    def save(self) -> None:
        """Write the file atomically (merged with what another run wrote meanwhile); errors are ignored:
        the next run reads those blobs again."""
        if self.path is None or not self._new:
            return
        with self._lock:
            merged = {**VerifiedBlobs(self.path)._seen, **self._seen}
            newest = dict(sorted(merged.items(), key=lambda kv: kv[1])[-self.MAX_ENTRIES :])
            body = json.dumps({"schema": 1, "verified": newest}, sort_keys=True).encode()
            try:
                atomicio.write_atomic(self.path, body)
                self._new = False
            except (OSError, StorageError):
                pass


def _blobs_of(client: RegistryApi, repo: str, digest: str) -> list[tuple[str, int]]:
    """(digest, size) of every blob of the image *digest* (of each image of an image index)."""
    manifest = client.get_manifest(repo, digest)
    if manifest.media_type not in INDEX_TYPES:
        return manifest.blobs()
    out: list[tuple[str, int]] = []
    children = manifest.json().get("manifests")
    for i, child in enumerate(children if isinstance(children, list) else []):
        if not isinstance(child, dict) or not isinstance(child.get("digest"), str):
            raise manifest._invalid(f"manifests[{i}].digest is missing")
        out += _blobs_of(client, repo, child["digest"])
    return out
