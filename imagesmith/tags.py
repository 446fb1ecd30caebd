"""Every tag and local name imagesmith gives an image or artifact, in one place.

==================================  =================================================================
``fp-<fingerprint[:20]>-<suite[:12]>``  the image's identity: plan fingerprint + the baked imagesmith (build)
``staging-<fingerprint[:20]>-<suite[:12]>``  the engine's one push, before any final tag moves (build)
``<cell id>-candidate``                 built, pushed and verified in every registry; not yet released (build)
``<cell id>``                           released: a candidate whose exact digest passed validation (release)
``sha256-<hex>.validation``             the validation report attached to an image digest (release; a copy)
``sha256-<hex>.cluster``                the signed cluster report of an image digest (release; issue 32)
``sha256-<hex>.att``                    signed validation attestations of an image digest (cosign's layout)
``release-index``                       the release index artifact (release writes, pick reads)
``imagesmith/<matrix>:<cell id>``       the engine-local name of a built cell (build, validate)
==================================  =================================================================
"""

from __future__ import annotations

from typing import Final, Protocol

FINGERPRINT_CHARS: Final[int] = 20
SUITE_CHARS: Final[int] = 12
INDEX_ARTIFACT_TAG: Final[str] = "release-index"


class _Cell(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def matrix(self) -> str: ...


def _identity(fingerprint: str, suite: str) -> str:
    return fingerprint[:FINGERPRINT_CHARS] + (f"-{suite[:SUITE_CHARS]}" if suite else "")


def fingerprint_tag(fingerprint: str, suite: str = "") -> str:
    """``fp-<fingerprint[:20]>-<suite[:12]>``: the image's identity (plan fingerprint + baked imagesmith)."""
    return f"fp-{_identity(fingerprint, suite)}"


def staging_tag(fingerprint: str, suite: str = "") -> str:
    """``staging-…``: where the engine pushes first; only ever points at a complete manifest."""
    return f"staging-{_identity(fingerprint, suite)}"


def candidate_tag(cell: _Cell) -> str:
    return f"{cell.id}-candidate"


def release_tag(cell: _Cell) -> str:
    return cell.id


def attestation_tag(digest: str) -> str:
    """``sha256-<hex>.validation``: the tag of the report artifact attached to image *digest*."""
    return digest.replace(":", "-") + ".validation"


def cluster_tag(digest: str) -> str:
    """``sha256-<hex>.cluster``: the tag of the signed cluster report artifact attached to image *digest*."""
    return digest.replace(":", "-") + ".cluster"


def cosign_attestation_tag(digest: str) -> str:
    """``sha256-<hex>.att``: where cosign (and imagesmith release) keeps the attestations of *digest*."""
    return digest.replace(":", "-") + ".att"


def local_ref(cell: _Cell) -> str:
    return f"imagesmith/{cell.matrix}:{cell.id}"
