"""What every part of release shares: the cell released, the artifact media types, the clock, and a
reason worded with its fix line."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any, Final

from imagesmith.compat import MinDriver
from imagesmith.errors import ImagesmithError
from imagesmith.index import (
    INDEX_MEDIA_TYPE,
)
from imagesmith.refs import Registry
from imagesmith.tags import (
    candidate_tag,
    release_tag,
)

REPORT_MEDIA_TYPE: Final[str] = "application/vnd.imagesmith.validation-report.v1+json"
REPORT_ARTIFACT_TYPE: Final[str] = REPORT_MEDIA_TYPE
INDEX_ARTIFACT_TYPE: Final[str] = INDEX_MEDIA_TYPE
#: issue 32: the signed cluster report attached to an image digest (``sha256-<hex>.cluster``): its artifact
#: type, and the media type of its second layer, the public key the envelope verifies with (PEM)
CLUSTER_ARTIFACT_TYPE: Final[str] = "application/vnd.imagesmith.cluster-report.v1+dsse"
CLUSTER_KEY_MEDIA_TYPE: Final[str] = "application/vnd.imagesmith.cluster-report.key.v1+pem"
#: OCI 1.1 "empty" descriptor: the config of an artifact manifest (content ``{}``).
EMPTY_MEDIA_TYPE: Final[str] = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB: Final[bytes] = b"{}"
EMPTY_DIGEST: Final[str] = "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _with_fix(exc: ImagesmithError) -> str:
    """The message and, when it has one, the fix line of *exc* (a reason keeps what the user should do)."""
    return f"{exc.message} (fix: {exc.hint})" if exc.hint else exc.message


@dataclass(frozen=True, kw_only=True)
class ReleaseCell:
    matrix: str
    id: str
    tag: str
    candidate: str
    targets: tuple[Registry, ...]
    torch: str
    torchvision: str
    cuda: str
    python: str
    min_driver: MinDriver
    arch: tuple[str, ...]
    shm_size: str | None
    fingerprint: str

    @classmethod
    def from_plan(cls, cell: Any) -> ReleaseCell:
        """From a :class:`imagesmith.plan.Cell` (tags: :mod:`imagesmith.tags`)."""
        from imagesmith import compat

        return cls(
            matrix=cell.matrix,
            id=cell.id,
            tag=release_tag(cell),
            candidate=candidate_tag(cell),
            targets=tuple(cell.publish.registries),
            torch=cell.stack.torch,
            torchvision=cell.stack.torchvision,
            cuda=cell.stack.cuda,
            python=cell.runtime.python,
            min_driver=cell.hardware.min_driver,
            arch=tuple(compat.torch_variant(cell.stack.torch, cell.stack.variant).arch_list),
            shm_size=cell.hardware.shm_min.lower() if cell.hardware.shm_min else None,
            fingerprint=cell.publish.fingerprint,
        )
