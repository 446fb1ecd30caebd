"""``imagesmith release``: promote only validated digests through the registry HTTP API; publish the index.

For every cell of a matrix (``--only`` globs narrow it):

1. **Candidate.** ``imagesmith build --push`` left ``<cell id>-candidate`` in the cell's registries. Every
   registry that holds it must hold the *same* digest D (else: refused).
2. **Evidence.** A signed validation attestation (imagesmith/attestation.py: ``attestation.dsse.json`` beside
   the ``report.json`` of ``imagesmith validate IMAGE@D --sign-key KEY``, searched under ``--reports``) that
   verifies with a trusted key (``[release] trusted_keys``, ``--trusted-key``), whose statement's subject is
   exactly D and whose predicate (the report) passed; and no signed attestation of D that failed (one per GPU
   family in the nightly: any failure holds the digest back). A report file alone is never enough: unsigned,
   altered, unknown-key and other-digest evidence is named in the refusal with its reason. Without local
   evidence, the attestations an earlier run stored beside D (``sha256-<hex>.att``) are verified again.
3. **Promotion**, each step checked before it is done, so an interrupted run converges when rerun and a
   finished one is a no-op; a and b in every registry first, c only once a and b succeeded everywhere (a
   registry that fails leaves no release tag anywhere; a tag that fails is rolled back elsewhere):
   a. the manifest D (and its blobs: cross-repository mount on one registry, streamed copy between
      registries; never a rebuild, never a second push from the engine) is copied from a registry holding the
      candidate, put by digest (tags nothing);
   b. the signed attestations are stored in cosign's layout (``sha256-<hex of D>.att``: DSSE layers, see
      imagesmith/attestation.py), and a readable copy of the report as an OCI artifact tagged
      ``sha256-<hex of D>.validation`` (``subject`` = D: registries with the referrers API list it);
   c. only then the release tag ``<cell id>`` is put, and read back: it must resolve to D.
4. **Index.** Released cells become entries of the release index (imagesmith/index.py, docs/release.md): the
   project's index file (``[paths].release_index`` / ``--index-file``, or the index of ``--extend-from
   REGISTRY``) is extended, every entry it carries over re-verified (:func:`verify_carried`: its tag and its
   signed attestations, in each registry), the file is updated and the same JSON is pushed as the artifact
   tag ``release-index`` to every registry repository of the matrix (what ``imagesmith pick --index
   oci://…`` reads); with a signing key, its DSSE envelope is written beside the file (``index.json.sig``)
   and added to the artifact.

Refusals name the cell and the missing or failing check; they are collected, the other cells are released, and
the command exits with ``ReleaseError`` (exit 8) at the end.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from imagesmith import inputs
from imagesmith.attestation import (
    ATTESTATION_FILE,
    DSSE_MEDIA_TYPE,
    Attested,
    attach_attestations,
    attested_in_registry,
    claimed_digest,
    has_attestations,
    verify_validation,
)
from imagesmith.compat import MinDriver
from imagesmith.errors import ConfigError, ImagesmithError, ReleaseError, SignatureError
from imagesmith.index import (
    INDEX_MEDIA_TYPE,
    RegistryCopy,
    ReleasedImage,
    ReleaseIndex,
    Shm,
    ValidatedOn,
    dump_index,
    load_index,
    parse_index,
    read_index_artifact,
    save_index,
)
from imagesmith.refs import Registry
from imagesmith.registry import (
    OCI_MANIFEST,
    ManifestData,
    RegistryApi,
    Verify,
    client_for,
    copy_manifest,
    ensure_blob,
    verify_blobs,
)
from imagesmith.tags import (
    INDEX_ARTIFACT_TAG,
    attestation_tag,
    candidate_tag,
    cosign_attestation_tag,
    release_tag,
)
from imagesmith.validate.record import ValidationReport
from imagesmith.validate.redact import redact_report_bytes

if TYPE_CHECKING:
    from imagesmith.project import Project
    from imagesmith.signing import PublicKey, SigningKey

REPORT_MEDIA_TYPE: Final[str] = "application/vnd.imagesmith.validation-report.v1+json"
REPORT_ARTIFACT_TYPE: Final[str] = REPORT_MEDIA_TYPE
INDEX_ARTIFACT_TYPE: Final[str] = INDEX_MEDIA_TYPE
#: OCI 1.1 "empty" descriptor: the config of an artifact manifest (content ``{}``).
EMPTY_MEDIA_TYPE: Final[str] = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB: Final[bytes] = b"{}"
EMPTY_DIGEST: Final[str] = "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest()
_DIGEST_IN_REF = re.compile(r"@(sha256:[0-9a-f]{64})$")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------------------------
# what is released


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
            targets=tuple(cell.registries),
            torch=cell.torch,
            torchvision=cell.torchvision,
            cuda=cell.cuda,
            python=cell.python,
            min_driver=cell.min_driver,
            arch=tuple(compat.torch_variant(cell.torch, cell.variant).arch_list),
            shm_size=cell.shm_min.lower() if cell.shm_min else None,
            fingerprint=cell.fingerprint,
        )


# ------------------------------------------------------------------------------------------------------------
# validation reports


@dataclass(frozen=True, kw_only=True)
class Report:
    """One piece of validation evidence. Only a report carried by a signed attestation that verifies with a
    trusted key counts (``signer`` set, ``problem`` None); the others are kept to say why they do not."""

    path: str  # the file, or the registry artifact the report was read from
    body: bytes
    digest: str | None  # signed: the attestation's subject; unsigned: what the report claims (never trusted)
    verdict: str
    reason: str
    target: str
    gpu: str
    gpu_count: int
    driver: str
    date: str
    failed: tuple[str, ...] = ()
    link: str = ""
    figures: Mapping[str, float] = field(default_factory=dict, hash=False)
    signer: str | None = None  # the trusted key that signed the attestation
    envelope: bytes | None = field(default=None, repr=False)  # the DSSE envelope (attached to registries)
    problem: str | None = None  # why this is not evidence (unsigned, bad signature, unknown key, …)
    claimed: str | None = None  # the digest the report.json file itself names (for messages only)

    @property
    def published_body(self) -> bytes:
        """The report as it is attached in registries: redacted (no host names, ssh targets, identity-file
        paths, user names; :mod:`imagesmith.validate.redact`). The local file keeps them."""
        return redact_report_bytes(self.body)

    @property
    def sha(self) -> str:
        """sha256 of :attr:`published_body`: the attached artifact's layer (the index's report_digest)."""
        return _sha(self.published_body)

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"

    @property
    def evidence(self) -> bool:
        return self.problem is None and self.signer is not None and self.envelope is not None

    @property
    def host_known(self) -> bool:
        """The GPU inventory check recorded model, count and driver (needed for the index's validated_on)."""
        return bool(self.gpu and self.gpu_count and self.driver)

    def validated_on(self) -> ValidatedOn:
        return ValidatedOn(
            gpu=self.gpu,
            count=self.gpu_count,
            driver=self.driver,
            date=self.date,
            report_digest=self.sha,
            link=self.link,
            figures=self.figures,
        )


def read_report(path: Path) -> Report:
    """One report.json of ``imagesmith validate`` (schema 1 or 2); ConfigError naming the file otherwise.
    The result is not evidence by itself (see :func:`read_evidence`)."""
    body = inputs.read_user_file(path, "", hint="check --reports")
    return parse_report(body, source=str(path))


def parse_report(body: bytes, *, source: str) -> Report:
    """A report.json's bytes; *source* (file or registry artifact) is named in errors and refusals."""
    report = ValidationReport.parse(body, source=source)
    return Report(
        path=source,
        body=body,
        digest=report.image_digest,
        verdict=report.verdict,
        reason=report.verdict_reason,
        target=report.target,
        gpu=report.gpu_model,
        gpu_count=len(report.gpus),
        driver=report.driver,
        date=report.started or _now(),
        failed=report.failed(),
        link=report.link,
        figures=report.figures,
        claimed=report.image_digest,
    )


def attested_report(attested: Attested, *, source: str, claimed: str | None = None) -> Report:
    """The report a verified attestation carries, bound to the attestation's subject digest."""
    r = parse_report(attested.report, source=source)
    return replace(
        r, digest=attested.digest, signer=attested.signer, envelope=attested.envelope, claimed=claimed
    )


def _unusable(path: str, problem: str, *, claimed: str | None, beside: Report | None) -> Report:
    if beside is not None:
        return replace(beside, path=path, problem=problem, digest=claimed or beside.digest)
    return Report(
        path=path,
        body=b"",
        digest=claimed,
        verdict="unknown",
        reason="",
        target="",
        gpu="",
        gpu_count=0,
        driver="",
        date="",
        problem=problem,
        claimed=claimed,
    )


def read_evidence(
    folder: Path, trusted: Sequence[PublicKey], *, report_file: Path | None = None
) -> list[Report]:
    """The evidence of one validation folder: report.json (or *report_file*) and, beside it, the signed
    attestation."""
    report_path, att_path = report_file or folder / "report.json", folder / ATTESTATION_FILE
    beside = read_report(report_path) if report_path.is_file() else None
    claimed = beside.digest if beside is not None else None
    if not att_path.is_file():
        assert beside is not None
        return [
            replace(
                beside,
                problem=f"not signed: no {ATTESTATION_FILE} beside it (a report file alone is never enough; "
                "validate with --sign-key on a validation runner)",
            )
        ]
    try:
        envelope = att_path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{att_path}: cannot read ({exc.strerror})", hint="check --reports") from None
    if not trusted:
        return [
            _unusable(
                str(att_path),
                "no trusted public key is configured ([release] trusted_keys in imagesmith.toml)",
                claimed=claimed_digest(envelope) or claimed,
                beside=beside,
            )
        ]
    try:
        attested = verify_validation(envelope, trusted)
    except SignatureError as exc:
        return [
            _unusable(str(att_path), exc.message, claimed=claimed_digest(envelope) or claimed, beside=beside)
        ]
    except ConfigError as exc:  # the signed predicate is not a report imagesmith reads
        return [_unusable(str(att_path), exc.message, claimed=claimed_digest(envelope), beside=beside)]
    return [attested_report(attested, source=str(att_path), claimed=claimed)]


def collect_reports(dirs: Sequence[Path], trusted: Sequence[PublicKey] = ()) -> list[Report]:
    """Every report.json and attestation under *dirs*, read as evidence against the *trusted* keys."""
    out = []
    for d in dirs:
        if not d.exists():
            raise ConfigError(
                f"--reports {d}: no such folder", hint="pass the folder(s) imagesmith validate wrote"
            )
        if d.is_file():
            if d.name == ATTESTATION_FILE:
                out += read_evidence(d.parent, trusted)
            else:
                out += read_evidence(d.parent, trusted, report_file=d)
            continue
        found = [*d.rglob("report.json"), *d.rglob(ATTESTATION_FILE)]
        for f in sorted({p.parent for p in found}):
            out += read_evidence(f, trusted)
    return out


# ------------------------------------------------------------------------------------------------------------
# outcome


@dataclass
class CellResult:
    cell: str
    tag: str
    status: str = "pending"  # promoted | up-to-date | refused | failed | would-promote
    digest: str | None = None
    reasons: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    registries: dict[str, str] = field(default_factory=dict)  # name -> digest the release tag now resolves to


@dataclass
class Outcome:
    matrix: str
    dry_run: bool
    cells: list[CellResult] = field(default_factory=list)
    index_file: str | None = None
    index_changed: bool = False
    index_published: list[str] = field(default_factory=list)
    index_signature: str | None = None

    def raise_for_refusals(self) -> None:
        bad = [c for c in self.cells if c.status in ("refused", "failed")]
        if bad:
            lines = [f"{c.cell}: {c.status}: {'; '.join(c.reasons)}" for c in bad]
            evidence = (
                "validate the candidate digest on a validation runner (imagesmith validate IMAGE@DIGEST "
                "--report DIR --sign-key KEY, KEY's .pub in [release] trusted_keys) and pass --reports DIR"
            )
            registries = (
                "a failed promotion converges when the command is rerun once the registry named above "
                "answers (what was copied is not sent again)"
            )
            statuses = {c.status for c in bad}
            raise ReleaseError(
                f"matrix {self.matrix}: {len(bad)} cell(s) not released:\n  " + "\n  ".join(lines),
                hint=registries if statuses == {"failed"} else evidence + "; " + registries,
            )


# ------------------------------------------------------------------------------------------------------------
# registry steps


default_client = client_for


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


def index_manifest(body: bytes, envelope: bytes | None = None) -> ManifestData:
    """The ``release-index`` artifact of the index JSON *body* (and its DSSE *envelope*, a second layer)."""
    return artifact_manifest(
        artifact_type=INDEX_ARTIFACT_TYPE,
        layer_media_type=INDEX_MEDIA_TYPE,
        layer=body,
        subject=None,
        annotations={"org.opencontainers.image.title": "imagesmith release index"},
        extra_layers=[(DSSE_MEDIA_TYPE, envelope)] if envelope is not None else [],
    )


def stage_index(client: RegistryApi, repo: str, body: bytes, envelope: bytes | None = None) -> ManifestData:
    """Every blob of the index artifact, and its manifest by digest (which tags nothing), in *repo*."""
    manifest = index_manifest(body, envelope)
    if client.manifest_digest(repo, manifest.digest) != manifest.digest:
        _ensure_blob(client, repo, EMPTY_BLOB)
        _ensure_blob(client, repo, body)
        if envelope is not None:
            _ensure_blob(client, repo, envelope)
        client.put_manifest(repo, manifest.digest, manifest)
    return manifest


def publish_index(client: RegistryApi, repo: str, body: bytes, envelope: bytes | None = None) -> str:
    """Push the index JSON as the artifact ``repo:release-index`` (no-op when it holds these bytes); with
    *envelope*, its DSSE signature is a second layer of the same manifest (one tag moves both at once)."""
    manifest = index_manifest(body, envelope)
    if client.manifest_digest(repo, INDEX_ARTIFACT_TAG) == manifest.digest:
        return manifest.digest
    stage_index(client, repo, body, envelope)
    return client.put_manifest(repo, INDEX_ARTIFACT_TAG, manifest)


def publish_index_everywhere(
    repos: Sequence[Registry], clients: Mapping[str, RegistryApi], body: bytes, envelope: bytes | None
) -> tuple[list[str], str | None]:
    """Publish the index to every repository of *repos* as one step, as far as pick can see: its blobs and
    manifest (by digest) go to every registry first; only then ``release-index`` is moved, registry by
    registry, each read back; when one fails, the tags this run moved are put back on the index they held.
    Returns (the references published, the error or None)."""
    manifest = index_manifest(body, envelope)
    before: dict[tuple[str, str], str | None] = {}
    for t in repos:
        try:
            before[t.name, t.repo] = clients[t.name].manifest_digest(t.repo, INDEX_ARTIFACT_TAG)
            stage_index(clients[t.name], t.repo, body, envelope)
        except ImagesmithError as exc:
            return [], (
                f"publishing the index to {t.name} failed: {_with_fix(exc)}; no registry's "
                f"{INDEX_ARTIFACT_TAG} was moved (rerun to converge)"
            )
    moved: list[Registry] = []
    for t in repos:
        c = clients[t.name]
        try:
            if before[t.name, t.repo] != manifest.digest:
                c.put_manifest(t.repo, INDEX_ARTIFACT_TAG, manifest)
                moved.append(t)
            now = c.manifest_digest(t.repo, INDEX_ARTIFACT_TAG)
            if now != manifest.digest:
                raise ReleaseError(
                    f"registry {t.name} ({t.host}): {t.image}:{INDEX_ARTIFACT_TAG} resolves to {now}, not "
                    f"{manifest.digest} after it was put",
                    hint=f"check registry {t.name}'s storage, then rerun the release",
                )
        except ImagesmithError as exc:
            left = []
            for u in reversed(moved):
                old = before[u.name, u.repo]
                try:
                    cu = clients[u.name]
                    if old is not None:
                        cu.put_manifest(u.repo, INDEX_ARTIFACT_TAG, cu.get_manifest(u.repo, old))
                        continue
                    if cu.delete_tag(u.repo, INDEX_ARTIFACT_TAG):
                        continue
                except ImagesmithError:
                    pass
                left.append(u.name)
            state = (
                f"the index stays published in {', '.join(reversed(left))} (the registry cannot delete a tag "
                "alone)"
                if left
                else "the other registries' index was put back"
            )
            return (
                [],
                f"publishing the index to {t.name} failed: {_with_fix(exc)}; {state} (rerun to converge)",
            )
    return [f"{t.image}:{INDEX_ARTIFACT_TAG}" for t in repos], None


# ------------------------------------------------------------------------------------------------------------
# the release of one cell


def _candidate_digests(
    cell: ReleaseCell, clients: dict[str, RegistryApi]
) -> tuple[dict[str, str | None], list[str]]:
    found: dict[str, str | None] = {}
    errors: list[str] = []
    for t in cell.targets:
        try:
            found[t.name] = clients[t.name].manifest_digest(t.repo, cell.candidate)
        except ImagesmithError as exc:
            found[t.name] = None
            errors.append(exc.message)
    return found, errors


def release_cell(
    cell: ReleaseCell,
    reports: Sequence[Report],
    clients: dict[str, RegistryApi],
    *,
    dry_run: bool,
    client_for: Callable[[Registry], RegistryApi] | None = None,
    verify: Verify = "head",
    trusted: Sequence[PublicKey] = (),
) -> tuple[CellResult, list[Report]]:
    """Promote one cell (or say why not). Returns the result and the passing reports of the digest.

    Evidence is a signed attestation that verifies with a *trusted* key and whose subject is the candidate's
    digest: from *reports* (read by :func:`collect_reports`), else stored in one of the cell's registries."""
    res = CellResult(cell=cell.id, tag=cell.tag)
    candidates, errors = _candidate_digests(cell, clients)
    held = {name: d for name, d in candidates.items() if d}
    if not held:
        res.status = "refused"
        res.reasons.append(
            f"no candidate {cell.candidate} in any registry of the cell "
            f"({', '.join(t.name for t in cell.targets)})"
            + (f" ({'; '.join(errors)})" if errors else "")
            + f": run imagesmith build --matrix {cell.matrix} --only {cell.id} --push"
        )
        return res, []
    if len(set(held.values())) > 1:
        res.status = "refused"
        res.reasons.append(
            "the candidate tag points at different digests: "
            + ", ".join(f"{n}={d}" for n, d in sorted(held.items()))
            + f": rerun imagesmith build --matrix {cell.matrix} --only {cell.id} --push"
        )
        return res, []
    digest = next(iter(held.values()))
    res.digest = digest
    for_digest = [r for r in reports if r.evidence and r.digest == digest]
    store_problems: list[str] = []
    unreadable: list[str] = []  # registries whose stored attestations could not be read (a fault: rerun)
    if not for_digest and trusted:  # no local attestation: one a previous run stored, verified again
        for t in cell.targets:
            try:
                good, bad = attested_in_registry(clients[t.name], t.repo, digest, trusted)
            except ImagesmithError as exc:
                unreadable.append(
                    f"the attestations stored in {t.name} ({t.image}:{cosign_attestation_tag(digest)}) "
                    f"could not be read: {_with_fix(exc)}"
                )
                continue
            store_problems += bad
            for att in good:
                where = f"{t.image}:{cosign_attestation_tag(digest)}"
                for_digest.append(attested_report(att, source=where))
            if good:
                break
    passing = [r for r in for_digest if r.passed]
    failing = [r for r in for_digest if r.verdict == "failed"]
    if failing:  # one failing host is enough to hold the digest back, whatever passed elsewhere
        res.status = "refused"
        for r in failing:
            detail = "; ".join(r.failed[:3]) or r.reason
            res.reasons.append(f"validation of {digest} failed ({r.path}): {detail}")
        return res, []
    if not passing and unreadable:  # the evidence may be there: a registry fault, not a refusal
        res.status = "failed"
        res.reasons += unreadable
        res.reasons.append(
            "no local attestation of the candidate digest: rerun when the registry answers, or pass the "
            "validation folder with --reports"
        )
        return res, []
    if not passing:
        res.status = "refused"
        res.reasons += _no_evidence_reasons(cell, digest, for_digest, reports, store_problems, trusted)
        return res, []
    report = max(passing, key=lambda r: r.date)
    envelopes = [r.envelope for r in passing if r.envelope is not None]
    source = next(t for t in cell.targets if held.get(t.name) == digest)

    def prepare(t: Registry) -> tuple[list[str], str | None, str | None]:
        """Phase 1 in one registry (its own clients when parallel): copy the manifest by digest, store the
        attestations and the report; never the release tag. (steps, what the tag resolves to now, error)."""
        c = clients[t.name] if client_for is None else client_for(t)
        src = clients[source.name] if client_for is None else client_for(source)
        try:
            has_manifest = c.manifest_digest(t.repo, digest) is not None
            has_report = has_manifest and attached_report_ok(c, t.repo, digest)
            has_att = has_manifest and has_attestations(c, t.repo, digest, envelopes)
            tagged = c.manifest_digest(t.repo, cell.tag)
        except ImagesmithError as exc:
            return [], None, f"{t.name}: {_with_fix(exc)}"
        todo = []
        if not has_manifest:
            todo.append(f"copy manifest {digest[:19]}… and its blobs from {source.name} to {t.name}")
        if not has_att:
            todo.append(
                f"store {len(envelopes)} signed attestation(s) as {t.image}:{cosign_attestation_tag(digest)}"
            )
        if not has_report:
            todo.append(f"attach {report.path} as {t.image}:{attestation_tag(digest)}")
        if tagged != digest:
            todo.append(
                f"tag {t.image}:{cell.tag} → {digest[:19]}…" + (f" (was {tagged[:19]}…)" if tagged else "")
            )
        if dry_run or not todo:
            return todo, tagged, None
        try:
            if not has_manifest:
                copy_manifest(src, source.repo, digest, c, t.repo, verify=verify)
            if has_manifest and verify == "full":  # the nightly: read back what an earlier run copied
                verify_blobs(c, t.repo, src.get_manifest(source.repo, digest), side="destination")
            if not has_att:
                attach_attestations(c, t.repo, digest, envelopes)
            if not has_report:
                attach_report(c, t.repo, c.get_manifest(t.repo, digest), report)
            if c.manifest_digest(t.repo, digest) != digest:  # served by digest, checked, before any tag
                raise ReleaseError(
                    f"{t.name}: {t.image}@{digest} is not served after the copy",
                    hint=f"check registry {t.name}'s storage, then rerun the release",
                )
        except ImagesmithError as exc:
            return todo, tagged, f"promotion to {t.name} failed: {_with_fix(exc)}"
        return todo, tagged, None

    if client_for is None or len(cell.targets) == 1:
        results = [prepare(t) for t in cell.targets]
    else:  # registries are independent: one thread each, every thread with its own clients
        with ThreadPoolExecutor(max_workers=min(8, len(cell.targets))) as pool:
            results = list(pool.map(prepare, cell.targets))
    before = {t.name: tagged for t, (_, tagged, _) in zip(cell.targets, results, strict=True)}
    for steps, _, error in results:
        res.steps += steps
        if error is not None:
            res.status = "failed"
            res.reasons.append(error)
    if res.status == "failed":  # phase 1 failed somewhere: no release tag is moved anywhere
        res.registries = {name: d for name, d in before.items() if d is not None}
        res.reasons.append(
            f"no release tag was moved: {cell.tag} is put only once every registry of the cell "
            f"({', '.join(t.name for t in cell.targets)}) holds the image and its evidence; rerun when the "
            "failing registry answers (what was copied is kept, untagged), or remove it from the cell's "
            "registries"
        )
        return res, passing
    if dry_run:
        res.registries = {name: d for name, d in before.items() if d == digest}
        res.status = "would-promote" if res.steps else "up-to-date"
        return res, passing
    moved, error = _tag_everywhere(cell, digest, clients, before)
    res.registries = {t.name: digest for t in cell.targets}
    if error is not None:
        res.status = "failed"
        res.reasons.append(error)
        res.registries = {name: d for name, d in before.items() if d is not None} | {
            t.name: digest for t in moved
        }
        return res, passing
    res.status = "promoted" if res.steps else "up-to-date"
    return res, passing


def _tag_everywhere(
    cell: ReleaseCell, digest: str, clients: Mapping[str, RegistryApi], before: Mapping[str, str | None]
) -> tuple[list[Registry], str | None]:
    """Phase 2: put the release tag on *digest* in every registry of *cell*, then read each back. On a
    failure, what this run moved is rolled back (a tag that pointed elsewhere is put back on its old manifest;
    a new tag deleted where the registry can delete a tag alone). Returns (tags left moved, error or None)."""
    moved: list[Registry] = []
    error: str | None = None
    for t in cell.targets:
        if before.get(t.name) == digest:
            continue
        c = clients[t.name]
        try:
            c.put_manifest(t.repo, cell.tag, c.get_manifest(t.repo, digest))
            moved.append(t)
        except ImagesmithError as exc:
            error = f"tagging {t.image}:{cell.tag} in {t.name} failed: {_with_fix(exc)}"
            break
    if error is None:
        for t in cell.targets:
            try:
                now: str | None = clients[t.name].manifest_digest(t.repo, cell.tag)
                why = "" if now == digest else f"resolves to {now}, not {digest}"
            except ImagesmithError as exc:
                why = f"cannot be read back: {_with_fix(exc)}"
            if why:
                error = (
                    f"{t.name}: {t.image}:{cell.tag} {why} (a registry that does not keep what it was given, "
                    "or another release moved the tag meanwhile)"
                )
                break
    if error is None:
        return moved, None
    left = []
    for t in reversed(moved):
        c, old = clients[t.name], before.get(t.name)
        try:
            if old is not None:
                c.put_manifest(t.repo, cell.tag, c.get_manifest(t.repo, old))
                continue
            if c.delete_tag(t.repo, cell.tag):
                continue
        except ImagesmithError:
            pass
        left.append(t)
    if not left:
        return [], error + (
            "; the release tags this run had put were rolled back: no release tag moved (rerun to converge)"
            if moved
            else "; no release tag moved (rerun to converge)"
        )
    names = ", ".join(t.name for t in reversed(left))
    return left, error + (
        f"; the release tag stays moved to the validated digest in {names} (the registry cannot delete a "
        "tag alone): rerun to tag the other registries"
    )


def _names_cell(target: str, cell: ReleaseCell) -> bool:
    """The report's target is the cell's candidate or release tag (``…/repo:<cell>-candidate@…``)."""
    name = target.split("@", 1)[0]
    return any(name.endswith((f":{t}", f"/{t}")) for t in (cell.candidate, cell.tag))


def _no_evidence_reasons(
    cell: ReleaseCell,
    digest: str,
    for_digest: Sequence[Report],
    reports: Sequence[Report],
    store_problems: Sequence[str],
    trusted: Sequence[PublicKey],
) -> list[str]:
    """Why no passing signed evidence exists for *digest*: every report that claims it, or this cell, and
    could not count names its own reason (unsigned, altered, unknown key, signed for another digest)."""
    out = []
    if not trusted:
        out.append(
            "no trusted public key is configured, so no attestation can be accepted: add the validation "
            "runners' public key to [release] trusted_keys in imagesmith.toml (or pass --trusted-key FILE)"
        )
    for r in for_digest:  # signed, about this digest, neither passed nor failed
        detail = "; ".join(r.failed[:3]) or r.reason
        out.append(f"validation of {digest} {r.verdict} ({r.path}): {detail}")
    for r in reports:
        about_cell = _names_cell(r.target, cell) or r.claimed == digest or r.digest == digest
        if r.evidence and r.digest != digest and about_cell:
            out.append(
                f"{r.path} is signed for {r.digest}, not the candidate digest {digest}"
                + (f" (its report.json claims {r.claimed})" if r.claimed and r.claimed != r.digest else "")
            )
        elif not r.evidence and about_cell:
            out.append(f"{r.path} (claims {r.digest or 'no digest'}) is not evidence: {r.problem}")
    out += [f"stored attestation {p}" for p in store_problems]
    if not out or all(not r.evidence for r in reports if r.digest == digest):
        out.append(
            f"no signed validation attestation for the candidate digest {digest}"
            + f": run imagesmith validate {cell.targets[0].image}@{digest} --report DIR --sign-key KEY on a "
            "validation runner, then pass --reports DIR"
        )
    return out


def _with_fix(exc: ImagesmithError) -> str:
    """The message and, when it has one, the fix line of *exc* (a reason keeps what the user should do)."""
    return f"{exc.message} (fix: {exc.hint})" if exc.hint else exc.message


def index_entry(
    cell: ReleaseCell, result: CellResult, reports: Sequence[Report], released: str
) -> ReleasedImage:
    assert result.digest is not None
    return ReleasedImage(
        tag=cell.tag,
        matrix=cell.matrix,
        cell=cell.id,
        digest=result.digest,
        registries=tuple(
            RegistryCopy.parse(name=t.name, kind=t.kind, reference=t.ref(cell.tag), digest=result.digest)
            for t in cell.targets
            if result.registries.get(t.name) == result.digest
        ),
        torch=cell.torch,
        torchvision=cell.torchvision,
        cuda=cell.cuda,
        python=cell.python,
        min_driver=cell.min_driver,
        arch=cell.arch,
        shm=Shm(size=cell.shm_size, ipc_host=False),
        validated_on=tuple(sorted({r.validated_on() for r in reports}, key=lambda v: (v.date, v.gpu))),
        fingerprint=cell.fingerprint,
        released=released,
    )


# ------------------------------------------------------------------------------------------------------------
# a matrix


def _index_repos(cells: Sequence[ReleaseCell]) -> list[Registry]:
    """Each registry repository of *cells* once (where the index artifact is published)."""
    seen: dict[tuple[str, str], Registry] = {}
    for cell in cells:
        for t in cell.targets:
            seen.setdefault((t.name, t.repo), t)
    return list(seen.values())


def _base_index(
    index_file: Path,
    cells: Sequence[ReleaseCell],
    clients: Mapping[str, RegistryApi],
    *,
    extend_from: str | None = None,
    echo: Callable[[str], Any] = lambda _: None,
) -> ReleaseIndex:
    """The index to extend, from the one place the project names: the index file (``[paths].release_index``
    or ``--index-file``), or, when asked for by name (``--extend-from REGISTRY``), the index that registry
    publishes. Never "the first registry that has one": a registry that publishes an index while the file is
    missing is a refusal, not a source. Carried entries are re-verified later (:func:`verify_carried`)."""
    if index_file.is_file():
        if extend_from:
            raise ConfigError(
                f"--extend-from {extend_from}: the index file {index_file} exists: release extends it",
                hint="drop --extend-from, or move the file away to start from that registry's index",
            )
        return load_index(index_file)
    repos = _index_repos(cells)
    if extend_from:
        named = [t for t in repos if t.name == extend_from]
        if not named:
            known = sorted({t.name for t in repos})
            raise ConfigError(
                f"--extend-from {extend_from}: not a registry of the cells released ({', '.join(known)})",
                hint=f"name one of {', '.join(known)}",
            )
        t = named[0]
        c = clients[t.name]
        if c.manifest_digest(t.repo, INDEX_ARTIFACT_TAG) is None:
            raise ConfigError(
                f"--extend-from {extend_from}: {t.image}:{INDEX_ARTIFACT_TAG} does not exist",
                hint="drop --extend-from to start a new index, or name the registry that publishes it",
            )
        echo(
            f"extending the index {t.image}:{INDEX_ARTIFACT_TAG} (--extend-from); its entries are re-verified"
        )
        return parse_index(read_index_artifact(c, t.repo), source=f"{t.image}:{INDEX_ARTIFACT_TAG}")
    for t in repos:
        try:
            published = clients[t.name].manifest_digest(t.repo, INDEX_ARTIFACT_TAG)
        except ImagesmithError:
            continue  # an unreachable registry fails the promotion with its own reason
        if published is not None:
            raise ReleaseError(
                f"no release index at {index_file}, but registry {t.name} publishes "
                f"{t.image}:{INDEX_ARTIFACT_TAG}: releasing would replace it with an index of this run alone",
                hint=f"put the project's index at {index_file} (paths.release_index in imagesmith.toml, or "
                f"--index-file), or pass --extend-from {t.name} to extend the published one (each of its "
                "entries is re-verified against its tags)",
            )
    echo(f"no release index at {index_file}: starting a new one")
    return ReleaseIndex(generated=_now())


@dataclass(frozen=True, kw_only=True)
class Carried:
    """The carried entries of the index after re-verification: what stays, one refusal per dropped copy, and
    the copies that could not be checked (a registry error: then nothing is written)."""

    images: tuple[ReleasedImage, ...]
    refusals: tuple[CellResult, ...]
    unverified: tuple[str, ...]


def _carried_evidence(client: RegistryApi, repo: str, digest: str, trusted: Sequence[PublicKey]) -> str:
    """Why the copy of *digest* in this registry lacks signed evidence today ("" when it has it): a stored
    attestation of *digest* that verifies with a *trusted* key and passed, and none that failed."""
    good, bad = attested_in_registry(client, repo, digest, trusted)
    failed = [a for a in good if json.loads(a.report).get("verdict") == "failed"]
    if failed:
        return f"a signed validation attestation of {digest} ({failed[0].signer}) says failed"
    if any(json.loads(a.report).get("verdict") == "passed" for a in good):
        return ""
    return (
        f"no passing validation attestation of {digest} stored as {cosign_attestation_tag(digest)} verifies "
        "with a trusted key" + (f" ({bad[0]})" if bad else "")
    )


def verify_carried(
    images: Sequence[ReleasedImage],
    known: Mapping[str, Registry],
    client_for: Callable[[Registry], RegistryApi],
    clients: dict[str, RegistryApi],
    *,
    trusted: Sequence[PublicKey],
) -> Carried:
    """Re-verify each entry the index carries over from before this run, registry by registry: the copy's
    registry must be one the project names (same name, host and repository in its registries file), its tag
    must still resolve there to the recorded digest, and that registry must hold a signed validation
    attestation of the digest that verifies with a *trusted* key today and passed (none that failed). A copy
    that fails is dropped (refused, naming the entry and the registry); an entry with no copy left is dropped.
    Without trusted keys nothing can be re-verified: every copy is unverified (then nothing is written)."""
    checks: list[tuple[ReleasedImage, RegistryCopy, Registry | None, str]] = []
    for image in images:
        for copy in image.registries:
            reg = known.get(copy.name)
            why = ""
            if reg is None:
                why = f"registry {copy.name} is not in this project's registries file"
            elif (reg.host, reg.repository) != (copy.host, copy.registry.repository):
                why = (
                    f"registry {copy.name} is {reg.image} in this project's registries file, not "
                    f"{copy.registry.image}"
                )
            checks.append((image, copy, reg if not why else None, why))

    def resolve(item: tuple[ReleasedImage, RegistryCopy, Registry | None, str]) -> tuple[str, str | None]:
        _, copy, reg, why = item
        if reg is None:
            return why, None
        if not trusted:
            return (
                "error: no trusted public key is configured, so its signed attestation cannot be verified "
                "(fix: add the validation runners' public key to [release] trusted_keys in imagesmith.toml, "
                "or pass --trusted-key FILE)",
                None,
            )
        client = clients.get(reg.name) or client_for(reg)
        try:
            now = client.manifest_digest(reg.repo, copy.tag)
            if now != copy.digest:
                return "", now
            return _carried_evidence(client, reg.repo, copy.digest, trusted), now
        except ImagesmithError as exc:
            return f"error: {_with_fix(exc)}", None

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(resolve, checks))
    keep: dict[str, list[RegistryCopy]] = {image.tag: [] for image in images}
    reasons: dict[str, list[str]] = {}
    unverified: list[str] = []
    for (image, copy, _, _), (why, now) in zip(checks, answers, strict=True):
        if why.startswith("error: "):
            unverified.append(f"{image.tag} in {copy.name}: {why.removeprefix('error: ')}")
            keep[image.tag].append(copy)
            continue
        if not why and now != copy.digest:
            why = f"{copy.reference} resolves to {now or 'nothing'}, not the recorded {copy.digest}"
        if why:
            reasons.setdefault(image.tag, []).append(
                f"carried index entry {image.tag}, registry {copy.name}: {why}; that copy is dropped from "
                "the index"
            )
        else:
            keep[image.tag].append(copy)
    kept = tuple(replace(image, registries=tuple(keep[image.tag])) for image in images if keep[image.tag])
    refusals = tuple(
        CellResult(cell=image.cell, tag=image.tag, status="refused", reasons=reasons[image.tag])
        for image in images
        if image.tag in reasons
    )
    return Carried(images=kept, refusals=refusals, unverified=tuple(unverified))


def release_cells(
    cells: Sequence[ReleaseCell],
    *,
    matrix: str,
    reports: Sequence[Report],
    index_file: Path,
    dry_run: bool = False,
    client_for: Callable[[Registry], RegistryApi] = default_client,
    echo: Callable[[str], Any] = lambda _: None,
    verify: Verify = "head",
    known_registries: Sequence[Registry] = (),
    extend_from: str | None = None,
    trusted: Sequence[PublicKey] = (),
    sign_key: SigningKey | None = None,
) -> Outcome:
    """Release *cells* (see the module docstring) on the evidence of *reports* signed by *trusted* keys;
    write and publish the index, signed with *sign_key* when given (the envelope beside the file, and in
    every index artifact). *known_registries*: every registry the project names (its registries file),
    against which carried index entries are checked; the cells' own targets always count. *extend_from*: the
    registry whose published index to extend when *index_file* does not exist."""
    clients: dict[str, RegistryApi] = {}
    for cell in cells:
        for t in cell.targets:
            if t.name not in clients:
                clients[t.name] = client_for(t)
    known = {r.name: r for r in known_registries} | {t.name: t for c in cells for t in c.targets}
    outcome = Outcome(matrix=matrix, dry_run=dry_run, index_file=str(index_file))
    entries: list[ReleasedImage] = []
    base = _base_index(index_file, cells, clients, extend_from=extend_from, echo=echo)
    for cell in cells:
        echo(f"{cell.id}: checking candidate and evidence")
        result, passing = release_cell(
            cell, reports, clients, dry_run=dry_run, client_for=client_for, verify=verify, trusted=trusted
        )
        outcome.cells.append(result)
        if (
            result.digest
            and result.status in ("promoted", "up-to-date", "would-promote")
            and result.registries
        ):
            old = base.by_tag(cell.tag)
            if old is not None and old.digest == result.digest and result.status == "up-to-date":
                entry = index_entry(cell, result, passing, old.released)
                entry = replace(
                    entry, validated_on=tuple(dict.fromkeys(old.validated_on + entry.validated_on))
                )
            else:
                entry = index_entry(cell, result, passing, _now())
            entries.append(entry)
    fresh = {e.tag for e in entries}
    carried = verify_carried(
        [image for image in base.images if image.tag not in fresh],
        known,
        client_for,
        clients,
        trusted=trusted,
    )
    outcome.cells.extend(carried.refusals)
    if carried.unverified:
        outcome.cells.append(
            CellResult(
                cell="(index)",
                tag=INDEX_ARTIFACT_TAG,
                status="failed",
                reasons=[
                    "carried index entries could not be re-verified, so the index was neither written nor "
                    "published (rerun when the registries answer): " + "; ".join(carried.unverified)
                ],
            )
        )
        outcome.index_changed = False
        return outcome
    base_kept = replace(base, images=carried.images)
    merged = base_kept.merged(entries, generated=base.generated)
    merged = replace(
        merged, registries=tuple(sorted({c.host for image in merged.images for c in image.registries}))
    )
    outcome.index_changed = merged != base or not index_file.is_file()
    if not merged.images:  # nothing released, now or before: no index to write or publish
        outcome.index_file = None
        outcome.index_changed = False
        return outcome
    if dry_run:
        return outcome
    if outcome.index_changed:
        merged = replace(merged, generated=_now())
        save_index(merged, index_file)
    body = dump_index(load_index(index_file)).encode()
    signature = index_signature_path(index_file)
    envelope: bytes | None = None
    if sign_key is not None:
        from imagesmith import signing

        envelope = signing.sign_envelope(body, signing.INDEX_PAYLOAD_TYPE, sign_key)
        if not signature.is_file() or not _signed_same(signature, body, sign_key):
            signature.write_bytes(envelope + b"\n")
        else:
            envelope = signature.read_bytes().strip()
        outcome.index_signature = str(signature)
    else:
        echo(
            "warning: the index is not signed (no --sign-key / $IMAGESMITH_SIGNING_KEY): "
            "pick --verify-key will refuse it"
        )
    published, error = publish_index_everywhere(_index_repos(cells), clients, body, envelope)
    outcome.index_published += published
    if error is not None:
        outcome.cells.append(
            CellResult(cell="(index)", tag=INDEX_ARTIFACT_TAG, status="failed", reasons=[error])
        )
    return outcome


def release_matrix(
    matrix: str | Path,
    *,
    report_dirs: Sequence[Path],
    only: Sequence[str] = (),
    dry_run: bool = False,
    index_file: Path,
    registries_file: Path | None = None,
    client_for: Callable[[Registry], RegistryApi] = default_client,
    echo: Callable[[str], Any] = lambda _: None,
    project: Project | None = None,
    verify: Verify = "head",
    extend_from: str | None = None,
    trusted: Sequence[PublicKey] = (),
    sign_key: SigningKey | None = None,
) -> Outcome:
    """Load the matrix of *project*, plan it, and release its cells (see the module docstring). *trusted*:
    the keys whose attestations count (the project's ``[release] trusted_keys`` are added)."""
    from imagesmith.attestation import load_trusted_keys
    from imagesmith.matrix import REGISTRIES_FILE, load_matrix, load_registries
    from imagesmith.plan import build_plan
    from imagesmith.project import discover

    m = load_matrix(matrix, project=project, registries_file=registries_file)
    # every registry the project names (what load_matrix read), not only this matrix's: carried entries of
    # other matrices are checked against them
    proj = project or discover(near=Path(str(matrix)) if str(matrix).endswith(".toml") else None)
    beside = proj.matrix_path(matrix).parent / REGISTRIES_FILE
    reg_file = registries_file or (beside if beside.is_file() else proj.registries_file)
    known = [*(load_registries(reg_file).values() if reg_file.is_file() else ()), *m.registries]
    plan = build_plan(m, project=project).select(list(only))
    if not plan.cells:
        raise ConfigError(f"matrix {m.name}: the plan has no cell", hint="imagesmith plan --explain says why")
    keys = list(trusted)
    if project is not None and project.trusted_keys:
        keys += load_trusted_keys(project.trusted_keys, origin=f"{project.file}: release.trusted_keys")
    reports = collect_reports(report_dirs, keys)
    cells = [ReleaseCell.from_plan(c) for c in plan.cells]
    return release_cells(
        cells,
        matrix=m.name,
        reports=reports,
        index_file=index_file,
        dry_run=dry_run,
        client_for=client_for,
        echo=echo,
        verify=verify,
        known_registries=known,
        extend_from=extend_from,
        trusted=keys,
        sign_key=sign_key,
    )


def candidate_state(found: Mapping[str, str | None], errors: Sequence[str] = ()) -> str:
    """One line on a cell's candidate across its registries: ``consistent``, ``none``, ``mixed: …`` (some
    registries hold it, others do not: an interrupted tag phase) or ``differs: …`` (different digests)."""
    held = {name: d for name, d in found.items() if d}
    missing = [name for name, d in found.items() if not d]
    if not held:
        return "none" + (" (registries could not be asked)" if errors else "")
    if len(set(held.values())) > 1:
        return (
            "differs: " + ", ".join(f"{n}={d[:19]}…" for n, d in sorted(held.items())) + " — rerun the build"
        )
    if missing:
        return (
            f"mixed: tagged in {', '.join(sorted(held))}, not in {', '.join(missing)} — rerun "
            "`imagesmith build --push` to converge"
        )
    return "consistent"


def candidates(
    matrix: str | Path,
    *,
    only: Sequence[str] = (),
    registries_file: Path | None = None,
    client_for: Callable[[Registry], RegistryApi] = default_client,
    project: Project | None = None,
) -> list[dict[str, Any]]:
    """Per cell: the candidate's digest and pinned reference in each registry (for imagesmith validate)."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan

    m = load_matrix(matrix, project=project, registries_file=registries_file)
    plan = build_plan(m, project=project).select(list(only))
    rows = []
    for pc in plan.cells:
        cell = ReleaseCell.from_plan(pc)
        clients = {t.name: client_for(t) for t in cell.targets}
        found, errors = _candidate_digests(cell, clients)
        rows.append(
            {
                "cell": cell.id,
                "candidate": cell.candidate,
                "digests": found,
                "pinned": [f"{t.image}@{found[t.name]}" for t in cell.targets if found.get(t.name)],
                "state": candidate_state(found, errors),
                "errors": errors,
            }
        )
    return rows
