"""Release's own artifacts in a registry: the validation report attached to a digest, and the release
index (staged, signed, published to one registry or every registry of a run)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from imagesmith.attestation import (
    DSSE_MEDIA_TYPE,
)
from imagesmith.errors import ImagesmithError, ReleaseError, SignatureError
from imagesmith.index import (
    INDEX_KEY_MEDIA_TYPE,
    INDEX_MEDIA_TYPE,
    check_index_not_moved,
)
from imagesmith.refs import Registry
from imagesmith.registry import (
    OCI_MANIFEST,
    ManifestData,
    PromotionError,
    PromotionTarget,
    RegistryApi,
    ensure_blob,
    promote,
)
from imagesmith.tags import (
    INDEX_ARTIFACT_TAG,
    attestation_tag,
)

if TYPE_CHECKING:
    from imagesmith.signing import SigningKey

from imagesmith.release.base import (
    EMPTY_BLOB,
    EMPTY_DIGEST,
    EMPTY_MEDIA_TYPE,
    INDEX_ARTIFACT_TYPE,
    REPORT_ARTIFACT_TYPE,
    REPORT_MEDIA_TYPE,
    _sha,
    _with_fix,
)
from imagesmith.release.evidence import Report


def _ensure_blob(client: RegistryApi, repo: str, data: bytes) -> str:
    return ensure_blob(client, repo, data)


def artifact_manifest(
    *,
    artifact_type: str,
    layer_media_type: str,
    layer: bytes,
    subject: ManifestData | None,
    annotations: dict[str, str],
    extra_layers: Sequence[tuple[str, bytes]] = (),
) -> ManifestData:
    """An OCI 1.1 artifact as an image manifest: empty config, one layer (and *extra_layers*), optional
    subject."""
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_BLOB)},
        "layers": [
            {"mediaType": mt, "digest": _sha(data), "size": len(data)}
            for mt, data in [(layer_media_type, layer), *extra_layers]
        ],
    }
    if subject is not None:
        doc["subject"] = {
            "mediaType": subject.media_type,
            "digest": subject.digest,
            "size": len(subject.body),
        }
    doc["annotations"] = annotations
    body = json.dumps(doc, indent=2, sort_keys=True).encode()
    return ManifestData(body=body, media_type=OCI_MANIFEST, digest=_sha(body))


def attach_report(client: RegistryApi, repo: str, subject: ManifestData, report: Report) -> str:
    """Put the report artifact for *subject* (idempotent: same report → same manifest digest). What is pushed
    is the redacted report (:attr:`Report.published_body`)."""
    manifest = artifact_manifest(
        artifact_type=REPORT_ARTIFACT_TYPE,
        layer_media_type=REPORT_MEDIA_TYPE,
        layer=report.published_body,
        subject=subject,
        annotations={
            "org.opencontainers.image.created": report.date,
            "io.imagesmith.verdict": report.verdict,
            "io.imagesmith.validated-on": f"{report.gpu_count}x {report.gpu} driver {report.driver}",
        },
    )
    tag = attestation_tag(subject.digest)
    if client.manifest_digest(repo, tag) == manifest.digest:
        return manifest.digest
    _ensure_blob(client, repo, EMPTY_BLOB)
    _ensure_blob(client, repo, report.published_body)
    return client.put_manifest(repo, tag, manifest)


def attached_report_ok(client: RegistryApi, repo: str, digest: str) -> bool:
    """True when ``sha256-<hex>.validation`` exists with *digest* as subject and a passed verdict."""
    tag = attestation_tag(digest)
    if client.manifest_digest(repo, tag) is None:
        return False
    doc = client.get_manifest(repo, tag).json()
    subject, annotations = doc.get("subject"), doc.get("annotations")
    if not isinstance(subject, dict) or not isinstance(annotations, dict):
        return False  # not the artifact release writes (a foreign or damaged one): put ours again
    return bool(subject.get("digest") == digest and annotations.get("io.imagesmith.verdict") == "passed")


def index_signature_path(index_file: Path) -> Path:
    """``index.json.sig``: the DSSE envelope of the index (its payload is the index JSON), beside it."""
    return index_file.with_name(index_file.name + ".sig")


def _signed_same(signature: Path, body: bytes, key: SigningKey) -> bool:
    """The envelope at *signature* already signs *body* with *key* (ECDSA signatures differ each time: keep
    the old one, so a rerun changes no file and no artifact)."""
    from imagesmith import signing

    try:
        verified = signing.verify_envelope(
            signature.read_bytes(), [key.public], payload_type=signing.INDEX_PAYLOAD_TYPE
        )
    except (SignatureError, OSError):
        return False
    return verified.payload == body


def index_manifest(body: bytes, envelope: bytes | None = None, key: bytes | None = None) -> ManifestData:
    """The ``release-index`` artifact of the index JSON *body* (and its DSSE *envelope*, a second layer, and
    the signing key's public PEM *key*, a third: what pick pins on first use)."""
    extra = [(DSSE_MEDIA_TYPE, envelope)] if envelope is not None else []
    extra += [(INDEX_KEY_MEDIA_TYPE, key)] if key is not None else []
    return artifact_manifest(
        artifact_type=INDEX_ARTIFACT_TYPE,
        layer_media_type=INDEX_MEDIA_TYPE,
        layer=body,
        subject=None,
        annotations={"org.opencontainers.image.title": "imagesmith release index"},
        extra_layers=extra,
    )


def stage_index(
    client: RegistryApi, repo: str, body: bytes, envelope: bytes | None = None, key: bytes | None = None
) -> ManifestData:
    """Every blob of the index artifact, and its manifest by digest (which tags nothing), in *repo*."""
    manifest = index_manifest(body, envelope, key)
    if client.manifest_digest(repo, manifest.digest) != manifest.digest:
        _ensure_blob(client, repo, EMPTY_BLOB)
        _ensure_blob(client, repo, body)
        for extra in (envelope, key):
            if extra is not None:
                _ensure_blob(client, repo, extra)
        client.put_manifest(repo, manifest.digest, manifest)
    return manifest


def publish_index(
    client: RegistryApi, repo: str, body: bytes, envelope: bytes | None = None, key: bytes | None = None
) -> str:
    """Push the index JSON as the artifact ``repo:release-index`` of one registry (no-op when it holds these
    bytes); with *envelope*, its DSSE signature is a second layer of the same manifest (one tag moves both at
    once), and with *key* the signer's public key a third. The tag moves through
    :func:`imagesmith.registry.promote` (read back; :class:`PromotionError` when the registry does not keep
    it); :func:`publish_index_everywhere` is the same for every registry of a release."""
    manifest = index_manifest(body, envelope, key)
    if client.manifest_digest(repo, INDEX_ARTIFACT_TAG) == manifest.digest:
        return manifest.digest
    stage_index(client, repo, body, envelope, key)
    target = PromotionTarget(name=client.name, repo=repo, client=client)
    promote([target], [INDEX_ARTIFACT_TAG], manifest.digest, manifest=manifest)
    return manifest.digest


def publish_index_everywhere(
    repos: Sequence[Registry],
    clients: Mapping[str, RegistryApi],
    body: bytes,
    envelope: bytes | None,
    key: bytes | None = None,
) -> list[str]:
    """Publish the index to every repository of *repos* as one step, as far as pick can see: its blobs and
    manifest (by digest) go to every registry first; only then ``release-index`` is moved, registry by
    registry, each read back (:func:`imagesmith.registry.promote`); when one fails, the tags this run moved
    are put back on the index they held. Returns the references published; :class:`IndexPublicationError`.
    *key*: the signer's public key, a layer of the artifact (issue 25)."""
    manifest = index_manifest(body, envelope, key)
    targets = [PromotionTarget(name=t.name, repo=t.repo, client=clients[t.name], ref=t) for t in repos]
    before: dict[tuple[PromotionTarget, str], str | None] = {}
    for p in targets:
        try:
            before[p, INDEX_ARTIFACT_TAG] = p.client.manifest_digest(p.repo, INDEX_ARTIFACT_TAG)
            # issue 37: compare before the swap: never over a newer index another release published
            check_index_not_moved(
                p.client,
                p.repo,
                new_digest=manifest.digest,
                new_body=body,
                current=before[p, INDEX_ARTIFACT_TAG],
            )
            stage_index(p.client, p.repo, body, envelope, key)
        except ImagesmithError as exc:
            raise IndexPublicationError(
                f"publishing the index to {p.name} failed: {_with_fix(exc)}; no registry's "
                f"{INDEX_ARTIFACT_TAG} was moved (rerun to converge)",
                registry=p.name,
                repository=p.repo,
            ) from exc
    try:
        promote(targets, [INDEX_ARTIFACT_TAG], manifest.digest, manifest=manifest, before=before)
    except PromotionError as exc:
        t = cast("Registry", exc.target.ref)
        cause = exc.cause or ReleaseError(
            f"registry {t.name} ({t.host}): {t.image}:{INDEX_ARTIFACT_TAG} resolves to {exc.got}, not "
            f"{manifest.digest} after it was put",
            hint=f"check registry {t.name}'s storage, then rerun the release",
        )
        left = [u.name for u, _ in exc.left]
        state = (
            f"the index stays published in {', '.join(left)} (the registry cannot delete a tag alone)"
            if left
            else "the other registries' index was put back"
        )
        raise IndexPublicationError(
            f"publishing the index to {t.name} failed: {_with_fix(cause)}; {state} (rerun to converge)",
            registry=t.name,
            repository=t.repo,
            digest=manifest.digest,
        ) from exc
    return [f"{t.image}:{INDEX_ARTIFACT_TAG}" for t in repos]


class IndexPublicationError(ReleaseError):
    """The release index could not be published to every registry; the message says where it stands."""
