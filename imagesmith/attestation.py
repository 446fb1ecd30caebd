"""Validation evidence as signed attestations, stored the way cosign stores them.

* **Statement.** An in-toto statement whose subject is the image's manifest digest (the digest the engine
  and the registry report for the validated image, never a label or a field of the report) and whose
  predicate is the report (``report.json``), predicateType :data:`VALIDATION_PREDICATE_TYPE`.
* **Envelope.** A DSSE envelope over it (:mod:`imagesmith.signing`), signed on the validation runner with
  a key only runners hold; written beside the report as :data:`ATTESTATION_FILE`.
* **Registry layout** (cosign's, ``specs/ATTESTATION_SPEC.md`` and ``cosign attest``): the tag
  ``sha256-<hex>.att`` of the image's repository holds an OCI image manifest; every attestation is one layer
  of media type ``application/vnd.dsse.envelope.v1+json`` (the envelope JSON is the blob) with the
  annotations ``dev.cosignproject.cosign/signature: ""`` and ``predicateType: <uri>``; the config is an
  image config listing the layers as ``rootfs.diff_ids``. ``cosign verify-attestation --key release.pub
  --type <uri>`` reads it.

Nothing here trusts a registry: every envelope read back is verified against the project's trusted keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from imagesmith.errors import ConfigError, CorruptBlobError, ImagesmithError, RegistryError, SignatureError
from imagesmith.registry import OCI_MANIFEST, ManifestData, ensure_blob, read_small_blob
from imagesmith.tags import cosign_attestation_tag

if TYPE_CHECKING:
    from imagesmith.registry import RegistryApi
    from imagesmith.signing import PublicKey, SigningKey, Statement, Verified

#: the file ``imagesmith validate --sign-key`` writes beside report.json (one DSSE envelope, JSON)
ATTESTATION_FILE: Final[str] = "attestation.dsse.json"
VALIDATION_PREDICATE_TYPE: Final[str] = "https://imagesmith.dev/attestation/validation/v1"
DSSE_MEDIA_TYPE: Final[str] = "application/vnd.dsse.envelope.v1+json"
OCI_CONFIG: Final[str] = "application/vnd.oci.image.config.v1+json"
#: cosign's signature annotation: empty for attestations (the signature is inside the envelope)
COSIGN_SIGNATURE_ANNOTATION: Final[str] = "dev.cosignproject.cosign/signature"
PREDICATE_ANNOTATION: Final[str] = "predicateType"
#: cosign writes go-containerregistry's zero time into the config of an attestation image
_ZERO_TIME: Final[str] = "0001-01-01T00:00:00Z"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_subject(inspect: Mapping[str, Any], image: str) -> tuple[str, str]:
    """(repository, manifest digest) of the image the engine holds as *image*, from its inspect data.

    The digest comes from the engine's ``RepoDigests`` (what it verified when it pulled or pushed the
    image): for ``REPO@sha256:D`` the engine must list ``REPO@D``; for a tag, the repository's digests
    must be exactly one. A locally built image that was never pushed has none: it cannot be attested."""
    from imagesmith.refs import split_reference

    repo, _tag, wanted = split_reference(image)
    listed: list[tuple[str, str]] = []
    for entry in inspect.get("RepoDigests") or []:
        if isinstance(entry, str) and "@" in entry:
            r, d = entry.rsplit("@", 1)
            listed.append((r, d))
    same_repo = sorted({d for r, d in listed if _same_repo(r, repo)})
    if wanted is not None:
        if wanted in same_repo:
            return repo, wanted
        raise SignatureError(
            f"the engine does not report digest {wanted} for {image} (it lists "
            + (", ".join(f"{r}@{d}" for r, d in listed) or "no registry digest")
            + ")",
            hint=f"pull {image} so the engine verifies it, then validate it again",
        )
    if len(same_repo) == 1:
        return repo, same_repo[0]
    raise SignatureError(
        f"cannot attest {image}: the engine reports "
        + (f"{len(same_repo)} registry digests for it" if same_repo else "no registry digest for it")
        + " (a signed attestation must name the exact manifest digest)",
        hint="push the image, then validate it by digest: imagesmith validate REPO@sha256:… --sign-key KEY",
    )


def _same_repo(a: str, b: str) -> bool:
    def norm(r: str) -> str:
        for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/"):
            if r.startswith(prefix):
                r = r[len(prefix) :]
        return r.removeprefix("library/")

    return norm(a) == norm(b)


def sign_validation(report: Mapping[str, Any], *, repository: str, digest: str, key: SigningKey) -> bytes:
    """The DSSE envelope of the validation statement: subject *repository*@*digest*, predicate *report*."""
    from imagesmith import signing

    return signing.sign_statement(repository, digest, VALIDATION_PREDICATE_TYPE, report, key)


@dataclass(frozen=True)
class Attested:
    """A verified validation attestation: the digest it is about, the report it carries, who signed it."""

    digest: str
    report: bytes  # the predicate, as canonical JSON (what release reads as the report)
    signer: str
    envelope: bytes


def verified_statement(
    envelope: bytes, trusted: Sequence[PublicKey], predicate_type: str, *, where: str = ""
) -> tuple[Statement, Verified, list[str]]:
    """The in-toto statement *envelope* carries, its signature verified against *trusted* and its predicate of
    *predicate_type*; with the verification and the statement's subject digests, sorted. ``SignatureError``
    otherwise (altered, unknown key, another predicate), its message after *where*."""
    from imagesmith import signing

    verified = signing.verify_envelope(envelope, trusted, payload_type=signing.INTOTO_PAYLOAD_TYPE)
    st = signing.parse_statement(verified.payload)
    if st.predicate_type != predicate_type:
        raise SignatureError(
            f"{where}the signed statement's predicateType is {st.predicate_type!r}, not {predicate_type!r}"
        )
    return st, verified, sorted({d for _, d in st.subjects})


def verify_validation(
    envelope: bytes, trusted: Sequence[PublicKey], *, digest: str | None = None
) -> Attested:
    """Verify a validation envelope against *trusted*; with *digest*, the statement must be about it.

    Raises ``SignatureError`` naming why not (altered, unknown key, another digest, another predicate)."""
    st, verified, subjects = verified_statement(envelope, trusted, VALIDATION_PREDICATE_TYPE)
    if digest is not None and digest not in subjects:
        raise SignatureError(
            f"the signed statement is about {', '.join(subjects)}, not {digest} "
            f"(signed by {verified.key.describe()})"
        )
    if digest is None and len(subjects) != 1:
        raise SignatureError(f"the signed statement names {len(subjects)} digests; a validation names one")
    report = json.dumps(st.predicate, indent=2, sort_keys=True).encode()
    return Attested(
        digest=digest or subjects[0], report=report, signer=verified.key.describe(), envelope=envelope
    )


def claimed_digest(envelope: bytes) -> str | None:
    """The subject digest an envelope *claims*, read without trusting it (for refusal messages only)."""
    import base64

    try:
        doc = json.loads(envelope)
        st = json.loads(base64.b64decode(doc["payload"]))
        return "sha256:" + str(st["subject"][0]["digest"]["sha256"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


# ------------------------------------------------------------------------------------------------------------
# cosign's registry layout


def attestation_config(layers: Sequence[Mapping[str, Any]]) -> bytes:
    """The image config of an attestation manifest (what cosign's go-containerregistry writes)."""
    doc = {
        "architecture": "",
        "created": _ZERO_TIME,
        "history": [{"created": _ZERO_TIME} for _ in layers],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": [str(x["digest"]) for x in layers]},
        "config": {},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def envelope_layer(envelope: bytes, predicate_type: str = VALIDATION_PREDICATE_TYPE) -> dict[str, Any]:
    return {
        "mediaType": DSSE_MEDIA_TYPE,
        "size": len(envelope),
        "digest": _sha(envelope),
        "annotations": {COSIGN_SIGNATURE_ANNOTATION: "", PREDICATE_ANNOTATION: predicate_type},
    }


def attestation_manifest(layers: Sequence[Mapping[str, Any]]) -> tuple[ManifestData, bytes]:
    """(manifest, config blob) of ``sha256-<hex>.att`` holding *layers* (order kept)."""
    config = attestation_config(layers)
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": _sha(config)},
        "layers": [dict(x) for x in layers],
    }
    body = json.dumps(doc, separators=(",", ":")).encode()
    return ManifestData(body=body, media_type=OCI_MANIFEST, digest=_sha(body)), config


#: the largest attestation envelope read from a registry (a report of a large host takes well under 1 MiB)
MAX_ENVELOPE_BYTES = 16 << 20


def _existing_layers(client: RegistryApi, repo: str, tag: str) -> list[dict[str, Any]]:
    if client.manifest_digest(repo, tag) is None:
        return []
    layers = client.get_manifest(repo, tag).json().get("layers")
    if not isinstance(layers, list):
        return []
    return [x for x in layers if isinstance(x, dict) and isinstance(x.get("digest"), str)]


def stored_envelopes(client: RegistryApi, repo: str, digest: str) -> Iterator[tuple[str, bytes | str]]:
    """(where, envelope) of every DSSE layer with our predicateType in ``sha256-<hex>.att`` of *repo*, or
    (where, why it cannot be read) for a layer whose descriptor is unusable (no sha256 digest, a size that is
    no byte count or past :data:`MAX_ENVELOPE_BYTES`) or whose bytes do not hash to it (never trusted anyway:
    each envelope is verified)."""
    tag = cosign_attestation_tag(digest)
    for layer in _existing_layers(client, repo, tag):
        ann = layer.get("annotations")
        if (
            layer.get("mediaType") != DSSE_MEDIA_TYPE
            or not isinstance(ann, dict)
            or ann.get(PREDICATE_ANNOTATION) != VALIDATION_PREDICATE_TYPE
        ):
            continue
        where = f"{client.host}/{repo}:{tag}#{layer['digest'][:19]}"
        try:
            body = read_small_blob(
                client,
                repo,
                layer["digest"],
                layer.get("size"),
                limit=MAX_ENVELOPE_BYTES,
                what="attestation",
                where=f"registry {client.name} ({client.host}) {repo}:{tag}",
            )
        except CorruptBlobError as exc:
            yield where, exc.message
            continue
        except RegistryError as exc:
            if (
                exc.field is None
            ):  # the registry failed (not the descriptor's digest or size): the caller says so
                raise
            yield where, exc.message
            continue
        yield where, body


def attested_in_registry(
    client: RegistryApi, repo: str, digest: str, trusted: Sequence[PublicKey]
) -> tuple[list[Attested], list[str]]:
    """The attestations of *digest* stored in this registry that verify, and why the others do not."""
    good: list[Attested] = []
    bad: list[str] = []
    for where, envelope in stored_envelopes(client, repo, digest):
        if isinstance(envelope, str):
            bad.append(f"{where}: {envelope}")
            continue
        try:
            good.append(verify_validation(envelope, trusted, digest=digest))
        except SignatureError as exc:
            bad.append(f"{where}: {exc.message}")
    return good, bad


def has_attestations(client: RegistryApi, repo: str, digest: str, envelopes: Sequence[bytes]) -> bool:
    have = {x["digest"] for x in _existing_layers(client, repo, cosign_attestation_tag(digest))}
    return all(_sha(e) in have for e in envelopes)


def attach_attestations(
    client: RegistryApi,
    repo: str,
    digest: str,
    envelopes: Sequence[bytes],
    predicate_type: str = VALIDATION_PREDICATE_TYPE,
) -> str | None:
    """Add *envelopes* to ``sha256-<hex>.att`` of *repo* (layers already there are kept, cosign's or ours).

    Idempotent: returns None when every envelope is already stored, else the new manifest digest."""
    tag = cosign_attestation_tag(digest)
    layers = _existing_layers(client, repo, tag)
    have = {x["digest"] for x in layers}
    new = [e for e in dict.fromkeys(envelopes) if _sha(e) not in have]
    if not new:
        return None
    for envelope in new:
        _ensure_blob(client, repo, envelope)
        layers.append(envelope_layer(envelope, predicate_type))
    manifest, config = attestation_manifest(layers)
    _ensure_blob(client, repo, config)
    return client.put_manifest(repo, tag, manifest)


def _ensure_blob(client: RegistryApi, repo: str, data: bytes) -> None:
    ensure_blob(client, repo, data)


def load_trusted_keys(paths: Sequence[Any], *, origin: str) -> list[PublicKey]:
    """The public keys named by *paths* (``[release] trusted_keys``); ConfigError naming *origin*."""
    from pathlib import Path

    from imagesmith import signing

    keys = []
    for p in paths:
        try:
            keys.append(signing.load_public_key(Path(p)))
        except ImagesmithError as exc:
            raise ConfigError(f"{origin}: {exc.message}", hint=exc.hint) from None
    return keys
