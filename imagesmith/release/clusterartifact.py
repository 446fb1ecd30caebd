"""Issue 32, the cluster evidence in the registries: the signed cluster report of a released digest, attached
beside the image in every registry of the release as an OCI 1.1 artifact (``sha256-<hex>.cluster``, subject
the image manifest), and read back and verified — by release after it is put, and by a renter
(``imagesmith pick --verify-cluster``) against the signed index.

The artifact: an empty config, the DSSE envelope ``validate --sign-key`` wrote (cluster.dsse.json, whose
predicate is the redacted cluster report: :func:`imagesmith.validate.redact.redact_cluster`), and the public
key it verifies with (PEM). Its manifest holds no time and no registry name, so the same evidence is the same
manifest digest in every registry and on every rerun; the index entry's ``cluster.artifact`` records it, so
the signed index binds the envelope and the key. Everything read from a registry is bounded (the manifest by
the client, each layer by its size here) and checked against its digest before it is parsed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from imagesmith.attestation import DSSE_MEDIA_TYPE
from imagesmith.errors import ConfigError, Fault, RegistryError, SignatureError
from imagesmith.index import ClusterSummary
from imagesmith.registry import OCI_MANIFEST, ManifestData, RegistryApi, ensure_blob, read_small_blob
from imagesmith.release.artifacts import artifact_manifest
from imagesmith.release.base import CLUSTER_ARTIFACT_TYPE, CLUSTER_KEY_MEDIA_TYPE, EMPTY_BLOB
from imagesmith.tags import cluster_tag
from imagesmith.validate.clusterrecord import SignedCluster, verify_report

#: the largest envelope taken from a registry (a signed report of 64 nodes × 8 GPUs with 64 bandwidth pairs
#: is 47,772 bytes: docs/validation.md) and the largest public key (a PEM of P-256 is 178 bytes)
MAX_ENVELOPE_BYTES: Final[int] = 4 << 20
MAX_KEY_BYTES: Final[int] = 16 << 10
_TAMPERED = (
    "the registry does not serve the cluster artifact the signed index records. Publisher: rerun imagesmith "
    "release with the cluster folder in --reports (it attaches the signed report again); renter: do not "
    "trust what it serves, and tell the publisher"
)


def _key_pem(signed: SignedCluster) -> bytes:
    assert signed.key is not None, "verify_report records the key"
    return signed.key.pem


def cluster_manifest(subject: ManifestData, signed: SignedCluster) -> ManifestData:
    """The artifact of *signed* about the image *subject*: the envelope, then the key, as layers."""
    report = signed.report
    return artifact_manifest(
        artifact_type=CLUSTER_ARTIFACT_TYPE,
        layer_media_type=DSSE_MEDIA_TYPE,
        layer=signed.envelope,
        subject=subject,
        annotations={
            "org.opencontainers.image.created": report.started,
            "io.imagesmith.verdict": report.verdict,
            "io.imagesmith.validated-on": f"{len(report.nodes)} nodes x {report.gpus_per_node} GPUs, "
            f"fabric {report.fabric}",
        },
        extra_layers=[(CLUSTER_KEY_MEDIA_TYPE, _key_pem(signed))],
    )


def attach_cluster(
    client: RegistryApi, repo: str, subject: ManifestData, signed: SignedCluster, summary: ClusterSummary
) -> str:
    """Put the cluster artifact of *signed* beside *subject* in *repo* (idempotent: the same evidence, the
    same manifest digest; nothing is put when the registry serves it whole already): every blob first, then
    the manifest under ``sha256-<hex>.cluster``, then read back whole and verified
    (:func:`verify_cluster_artifact`: RegistryError naming the registry, tag and field when the registry
    does not keep what it was given). Returns the manifest digest."""
    manifest = cluster_manifest(subject, signed)
    if cluster_problem(client, repo, subject.digest, summary) is None:
        return manifest.digest
    for blob in (EMPTY_BLOB, signed.envelope, _key_pem(signed)):
        ensure_blob(client, repo, blob)
    client.put_manifest(repo, cluster_tag(subject.digest), manifest)
    verify_cluster_artifact(client, repo, subject.digest, summary)
    return manifest.digest


def cluster_problem(client: RegistryApi, repo: str, digest: str, summary: ClusterSummary) -> str | None:
    """Why *repo* does not serve the cluster artifact of *summary* whole (None when it does): the phase-1
    check of release (a registry fault reading it is raised, not a problem)."""
    try:
        verify_cluster_artifact(client, repo, digest, summary)
    except RegistryError as exc:
        if exc.fault is not Fault.FOREIGN_ARTIFACT:
            raise
        return exc.message
    return None


@dataclass(frozen=True, kw_only=True)
class ClusterArtifact:
    """What a registry serves under ``sha256-<hex>.cluster``: its manifest digest, the envelope, the key."""

    digest: str
    envelope: bytes
    key: bytes


def _refuse(where: str, field: str, problem: str, *, registry: str, repo: str, digest: str) -> RegistryError:
    return RegistryError(
        f"{where}: {field}: {problem}",
        hint=_TAMPERED,
        registry=registry,
        repository=repo,
        digest=digest,
        field=field,
        problem=problem,
        fault=Fault.FOREIGN_ARTIFACT,
    )


def read_cluster_artifact(client: RegistryApi, repo: str, digest: str) -> ClusterArtifact:
    """The cluster artifact of image *digest* in *repo*: an OCI image manifest of artifact type
    :data:`CLUSTER_ARTIFACT_TYPE` whose subject is *digest*, with exactly one envelope layer and one key
    layer, each read up to its bound and checked against its digest. RegistryError (``fault`` foreign
    artifact, ``field`` the manifest field) naming the registry and the tag otherwise."""
    tag = cluster_tag(digest)
    where = f"registry {client.name}: {repo}:{tag}"

    def refuse(field: str, problem: str) -> RegistryError:
        return _refuse(where, field, problem, registry=client.name, repo=repo, digest=digest)

    if client.manifest_digest(repo, tag) is None:
        raise refuse("manifest", "no cluster artifact is attached to the image")
    manifest = client.get_manifest(repo, tag)
    try:
        doc: Any = json.loads(manifest.body)
    except (ValueError, RecursionError):
        raise refuse("manifest", "not JSON") from None
    if not isinstance(doc, dict) or manifest.media_type != OCI_MANIFEST:
        raise refuse("mediaType", f"{manifest.media_type!r}, not an OCI image manifest ({OCI_MANIFEST})")
    if doc.get("artifactType") != CLUSTER_ARTIFACT_TYPE:
        raise refuse("artifactType", f"{doc.get('artifactType')!r}, not {CLUSTER_ARTIFACT_TYPE}")
    subject = doc.get("subject")
    said = subject.get("digest") if isinstance(subject, dict) else None
    if said != digest:
        raise refuse("subject.digest", f"{said!r}: the artifact is about another image, not {digest}")
    raw = doc.get("layers")
    layers = [x for x in raw if isinstance(x, dict)] if isinstance(raw, list) else []
    types = sorted(str(x.get("mediaType")) for x in layers)
    wanted = sorted([DSSE_MEDIA_TYPE, CLUSTER_KEY_MEDIA_TYPE])
    if not isinstance(raw, list) or len(layers) != len(raw) or types != wanted:
        raise refuse("layers", f"{types!r}, not one {DSSE_MEDIA_TYPE} and one {CLUSTER_KEY_MEDIA_TYPE} layer")
    by_type = {x["mediaType"]: x for x in layers}
    env, key = by_type[DSSE_MEDIA_TYPE], by_type[CLUSTER_KEY_MEDIA_TYPE]
    return ClusterArtifact(
        digest=manifest.digest,
        envelope=read_small_blob(
            client,
            repo,
            env.get("digest"),
            env.get("size"),
            limit=MAX_ENVELOPE_BYTES,
            what="envelope",
            where=where,
        ),
        key=read_small_blob(
            client, repo, key.get("digest"), key.get("size"), limit=MAX_KEY_BYTES, what="key", where=where
        ),
    )


def verify_cluster_artifact(
    client: RegistryApi, repo: str, digest: str, summary: ClusterSummary
) -> SignedCluster:
    """The cluster artifact of image *digest* in *repo* is the one *summary* (an entry's ``cluster`` of a
    signed index) records, whole: its manifest digest is ``summary.artifact``, its envelope verifies with
    the key beside it (which the manifest digest, and so the signed index, binds), the statement is about
    *digest*, the signed report hashes to ``summary.report_digest``, passed, and gives the summary's nodes,
    GPUs per node and fabric. RegistryError naming the registry, the tag and the field otherwise (a missing
    artifact, a swapped one, another image's, a key or envelope that does not verify)."""
    where = f"registry {client.name}: {repo}:{cluster_tag(digest)}"

    def refuse(field: str, problem: str) -> RegistryError:
        return _refuse(where, field, problem, registry=client.name, repo=repo, digest=digest)

    if not summary.artifact:
        raise refuse(
            "cluster.artifact",
            "the index entry records no cluster artifact (released before the signed report was attached)",
        )
    art = read_cluster_artifact(client, repo, digest)
    if art.digest != summary.artifact:
        raise refuse(
            "cluster.artifact", f"the registry serves {art.digest}, the index records {summary.artifact}"
        )
    from imagesmith.signing import parse_public_key

    try:
        key = parse_public_key(art.key, source=f"{where} (key layer)")
        signed = verify_report(art.envelope, [key], source=where)
    except (ConfigError, SignatureError) as exc:
        raise refuse("envelope", exc.message) from None
    if signed.digest != digest:
        raise refuse("envelope", f"the signed statement is about {signed.digest}, not {digest}")
    report = signed.report
    for field, said, recorded in (
        ("cluster.report_digest", signed.sha, summary.report_digest),
        ("cluster.nodes", len(report.nodes), summary.nodes),
        ("cluster.gpus_per_node", report.gpus_per_node, summary.gpus_per_node),
        ("cluster.fabric", report.fabric, summary.fabric),
        ("verdict", report.promises_verdict, "passed"),
    ):
        if said != recorded:
            raise refuse(field, f"the signed report gives {said!r}, the index records {recorded!r}")
    return signed
