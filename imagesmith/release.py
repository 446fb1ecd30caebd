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
   evidence, the attestations an earlier run stored beside D (``sha256-<hex>.att``) are verified again. A
   signed pass must prove something: its verdict is recomputed from its checks and it must record the GPU
   host (:meth:`Report.unusable_pass`), else refused naming it (stored ones like that are never counted).
   **Content.** The entry's fields come from D's image config (:func:`image_facts`: labels of the config the
   manifest names, hash-checked) and the verified attestations; the entry must pass the index's own parser
   (:func:`index_problem`) before anything moves.
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
   Every blob of D is read back and hashed in every registry once (:class:`VerifiedBlobs` remembers it by
   registry host and digest), before c: a damaged copy is repaired or named, and no tag moves.
4. **Index.** Released cells become entries of the release index (imagesmith/index.py, docs/release.md): the
   project's index file (``[paths].release_index`` / ``--index-file``, or the index of ``--extend-from
   REGISTRY``) is extended, every entry it carries over re-verified (:func:`verify_carried`: its tag and its
   signed attestations, in each registry) and rebuilt from its content (:func:`rebind_carried`: every
   correction is named in the summary), the file is updated and the same JSON is pushed as the artifact
   tag ``release-index`` to every registry repository of the matrix (what ``imagesmith pick --index
   oci://…`` reads); with a signing key, its DSSE envelope is written beside the file (``index.json.sig``)
   and added to the artifact.

Refusals name the cell and the missing or failing check; they are collected, the other cells are released, and
the command exits with ``ReleaseError`` (exit 8) at the end.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, cast

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
from imagesmith.compat import MinDriver, parse_driver
from imagesmith.errors import ConfigError, ImagesmithError, ReleaseError, SignatureError
from imagesmith.index import (
    INDEX_KEY_MEDIA_TYPE,
    INDEX_MEDIA_TYPE,
    RegistryCopy,
    ReleasedImage,
    ReleaseIndex,
    SbomRecord,
    Shm,
    ValidatedOn,
    VulnRecord,
    dump_index,
    index_location,
    issued,
    load_index,
    parse_index,
    read_signed_index_artifact,
    renewal_due,
    save_index,
)
from imagesmith.project import DEFAULT_INDEX_VALID_DAYS
from imagesmith.refs import Registry
from imagesmith.registry import (
    INDEX_TYPES,
    OCI_MANIFEST,
    ManifestData,
    PromotionError,
    PromotionTarget,
    RegistryApi,
    Verify,
    blob_digest,
    client_for,
    copy_blob,
    copy_manifest,
    ensure_blob,
    promote,
    read_small_blob,
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
    from imagesmith.sbom import SignedSbom
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
    #: the verdict its checks give (validate's own rule, :func:`imagesmith.validate.report.verdict_of`):
    #: the ``verdict`` field is never taken at its word
    checks_verdict: str = ""

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

    def unusable_pass(self) -> str | None:
        """Why this signed *passing* report cannot stand behind a release (None when it can): its checks do
        not give "passed", or it records no GPU host (model, count and driver of the GPU inventory)."""
        if self.checks_verdict != "passed":
            detail = "; ".join(self.failed[:3]) or "no check passed"
            return (
                f"{self.path}: its verdict says passed, its checks say {self.checks_verdict} ({detail}): "
                "the verdict is recomputed from the checks, never taken at its word"
            )
        if not self.host_known:
            return (
                f"{self.path}: a passing report that records no GPU host (its GPU inventory gives no model, "
                "count and driver), so nothing says where it was validated"
            )
        return None

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
        checks_verdict=_checks_verdict(report.checks, report.schema),
    )


def _checks_verdict(checks: Sequence[Mapping[str, Any]], schema: int) -> str:
    """The verdict *checks* give by validate's own rule (any failure → failed; no check passed, or GPU checks
    skipped for lack of a GPU → not validated; else passed)."""
    from imagesmith.validate.report import outcomes_of, verdict_of

    return verdict_of(outcomes_of(list(checks), schema)).verdict


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
    # a report.json that is there but not a regular file (a FIFO, a folder, a link loop) is an error naming
    # it (read_user_file), not "no report"
    beside = read_report(report_path) if os.path.lexists(report_path) else None
    claimed = beside.digest if beside is not None else None
    if not att_path.is_file():
        if beside is None:  # found by its name, but the attestation is not a file either
            raise ConfigError(
                f"{att_path} {inputs.not_a_file(att_path) or 'cannot be read'}", hint="check --reports"
            )
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
        problem = inputs.folder_problem(d)
        if problem is not None and not inputs.is_regular_file(d):  # a report.json itself is taken too
            raise ConfigError(
                f"--reports {d}: {problem}", hint="pass the folder(s) imagesmith validate wrote"
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
# what the image itself says: the index's fields come from content bound to the digest

#: the image-config labels (templates/Dockerfile.j2) each field of an index entry comes from
LABEL_TORCH: Final[str] = "io.imagesmith.torch"
LABEL_TORCHVISION: Final[str] = "io.imagesmith.torchvision"
LABEL_VARIANT: Final[str] = "io.imagesmith.variant"
LABEL_CUDA: Final[str] = "io.imagesmith.cuda"
LABEL_PYTHON: Final[str] = "io.imagesmith.python"
LABEL_MIN_FULL: Final[str] = "io.imagesmith.min-driver.full"
LABEL_MIN_MINOR: Final[str] = "io.imagesmith.min-driver.minor-version"
LABEL_SHM: Final[str] = "io.imagesmith.shm-min"
#: the torch wheel's TORCH_CUDA_ARCH_LIST; an image built before it existed gets the list of its
#: torch and variant labels from imagesmith/data/torch.toml
LABEL_TORCH_ARCH: Final[str] = "io.imagesmith.torch-arch"
#: the largest image config read (a config is a few KiB; the index's own cap)
MAX_CONFIG_BYTES: Final[int] = 32 << 20


@dataclass(frozen=True, kw_only=True)
class ImageFacts:
    """The fields of an index entry that ``pick`` decides on, as the image config of the digest states them
    (the config blob is named by the manifest, which is named by the digest: read and hash-checked)."""

    torch: str
    torchvision: str
    cuda: str
    python: str
    min_driver: MinDriver
    arch: tuple[str, ...]
    shm: Shm
    platform: str


def _facts_error(client: RegistryApi, repo: str, digest: str, message: str) -> ReleaseError:
    return ReleaseError(
        f"registry {client.name} ({client.host}) {repo}@{digest}: {message}",
        hint="the image was not built by imagesmith build (or its config was altered): rebuild and push it "
        "with imagesmith build --push, validate the new digest, then release it",
        registry=client.name,
        host=client.host,
        repository=repo,
        digest=digest,
        fault="not an imagesmith image",
        problem=message,
    )


def image_facts(client: RegistryApi, repo: str, digest: str) -> ImageFacts:
    """What the image *digest* in *repo* says of itself: its config's labels and platform. The manifest is
    read by digest (its content must hash to it) and the config by the digest the manifest gives (at most
    :data:`MAX_CONFIG_BYTES`, hash-checked). ReleaseError naming the registry, the repository, the digest and
    the label when a label is missing or not what imagesmith build writes."""
    where = f"registry {client.name} ({client.host}) {repo}@{digest}"
    manifest = client.get_manifest(repo, digest)
    if manifest.media_type in INDEX_TYPES:
        children = manifest.json().get("manifests")
        amd64 = [
            m
            for m in (children if isinstance(children, list) else [])
            if isinstance(m, dict)
            and isinstance(m.get("platform"), dict)
            and (m["platform"].get("os"), m["platform"].get("architecture")) == ("linux", "amd64")
            and isinstance(m.get("digest"), str)
        ]
        if len(amd64) != 1:
            raise _facts_error(client, repo, digest, "an image index without exactly one linux/amd64 image")
        manifest = client.get_manifest(repo, amd64[0]["digest"])
    config = manifest.json().get("config")
    if not isinstance(config, dict):
        raise _facts_error(client, repo, digest, "the manifest names no image config")
    body = read_small_blob(
        client,
        repo,
        config.get("digest"),
        config.get("size"),
        limit=MAX_CONFIG_BYTES,
        what="image config",
        where=where,
    )
    try:
        doc = json.loads(body)
    except ValueError:
        raise _facts_error(client, repo, digest, "its image config is not JSON") from None
    except RecursionError:  # arrays nested thousands deep: a registry's bytes, not a traceback
        raise _facts_error(
            client, repo, digest, "its image config is JSON nested deeper than a parser follows"
        ) from None
    inner = doc.get("config") if isinstance(doc, dict) else None
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    labels = labels if isinstance(labels, dict) else {}

    def label(name: str) -> str:
        value = labels.get(name)
        if not isinstance(value, str) or not value.strip():
            raise _facts_error(client, repo, digest, f"its image config has no label {name}")
        return value.strip()

    torch, variant = label(LABEL_TORCH), label(LABEL_VARIANT)
    full, minor = label(LABEL_MIN_FULL), label(LABEL_MIN_MINOR)
    try:
        min_driver = MinDriver(full=parse_driver(full), minor_version=parse_driver(minor))
    except ConfigError as exc:
        raise _facts_error(client, repo, digest, f"a min-driver label: {exc.message}") from None
    if labels.get(LABEL_TORCH_ARCH):
        arch = tuple(a.strip() for a in str(labels[LABEL_TORCH_ARCH]).split(",") if a.strip())
    else:
        from imagesmith import compat

        try:
            arch = tuple(compat.torch_variant(torch, variant).arch_list)
        except ImagesmithError:
            raise _facts_error(
                client,
                repo,
                digest,
                f"no label {LABEL_TORCH_ARCH}, and torch {torch} {variant} is not in "
                "imagesmith/data/torch.toml",
            ) from None
    shm = labels.get(LABEL_SHM)
    os_, cpu = (doc.get("os"), doc.get("architecture")) if isinstance(doc, dict) else (None, None)
    return ImageFacts(
        torch=torch,
        torchvision=label(LABEL_TORCHVISION),
        cuda=label(LABEL_CUDA),
        python=label(LABEL_PYTHON),
        min_driver=min_driver,
        arch=arch,
        shm=Shm(size=shm.strip().lower() if isinstance(shm, str) and shm.strip() else None, ipc_host=False),
        platform=f"{os_}/{cpu}" if isinstance(os_, str) and isinstance(cpu, str) else "linux/amd64",
    )


def bound_entry(
    image: ReleasedImage, facts: ImageFacts, validated_on: Sequence[ValidatedOn]
) -> tuple[ReleasedImage, list[str]]:
    """*image* with every field pick decides on taken from *facts* (the image config of its digest) and
    *validated_on* (its verified, passing attestations); and what changed (``field: old → new``)."""
    vals = tuple(sorted(set(validated_on), key=lambda v: (v.date, v.gpu, v.report_digest)))
    new = replace(
        image,
        torch=facts.torch,
        torchvision=facts.torchvision,
        cuda=facts.cuda,
        python=facts.python,
        min_driver=facts.min_driver,
        arch=facts.arch,
        shm=facts.shm,
        platform=facts.platform,
        validated_on=vals,
    )

    def hosts(vs: Sequence[ValidatedOn]) -> str:
        return (
            ", ".join(f"{v.count}x {v.gpu} driver {v.driver} ({v.report_digest[:19]}…)" for v in vs) or "none"
        )

    changes = entry_changes(image, new)
    if {_val_key(v) for v in image.validated_on} != {_val_key(v) for v in vals}:
        changes.append(f"validated_on: {hosts(image.validated_on)} → {hosts(vals)}")
    return new, changes


def entry_changes(image: ReleasedImage, new: ReleasedImage) -> list[str]:
    """``field: old → new`` of every field pick decides on (but validated_on) where *new* differs."""
    changes = []
    for name, old, now in (
        ("torch", image.torch, new.torch),
        ("torchvision", image.torchvision, new.torchvision),
        ("cuda", image.cuda, new.cuda),
        ("python", image.python, new.python),
        ("min_driver.full", str(image.min_driver.full), str(new.min_driver.full)),
        ("min_driver.minor", str(image.min_driver.minor_version), str(new.min_driver.minor_version)),
        ("arch", ",".join(image.arch), ",".join(new.arch)),
        ("shm.size", image.shm.size or "none", new.shm.size or "none"),
        ("shm.ipc_host", str(image.shm.ipc_host).lower(), str(new.shm.ipc_host).lower()),
        ("platform", image.platform, new.platform),
    ):
        if old != now:
            changes.append(f"{name}: {old} → {now}")
    return changes


def _val_key(v: ValidatedOn) -> tuple[str, int, str, str, str]:
    return (v.gpu, v.count, v.driver, v.date, v.report_digest)


def index_problem(entry: ReleasedImage) -> ConfigError | None:
    """What the index's own validation (:func:`imagesmith.index.parse_index`) says of an index holding only
    *entry* (its error: the field and the problem as fields), or None: nothing is promoted or written that
    the index writer would then refuse to read."""
    probe = ReleaseIndex(generated=_now(), images=(entry,))
    try:
        parse_index(dump_index(probe), source=f"the entry release would write for {entry.tag}")
    except ConfigError as exc:
        return exc
    return None


def usable_evidence(attested: Sequence[Attested], *, source: str) -> tuple[list[Report], list[str]]:
    """The passing reports among verified *attested* that can stand behind an index entry, and why each
    other passing one cannot (verdict not borne out by its checks, no GPU host, a field the index refuses):
    such stored evidence is named, never counted, so it cannot poison later releases."""
    good: list[Report] = []
    bad: list[str] = []
    for att in attested:
        try:
            r = attested_report(att, source=source)
        except ConfigError as exc:
            bad.append(f"{source}: {exc.message}")
            continue
        if not r.passed:
            continue
        why = r.unusable_pass() or _validated_on_problem(r)
        if why:
            bad.append(why)
        else:
            good.append(r)
    return good, bad


def _validated_on_problem(r: Report) -> str | None:
    probe = ReleasedImage(
        tag="probe",
        matrix="probe",
        cell="probe",
        digest=r.digest or "sha256:" + "0" * 64,
        registries=(
            RegistryCopy.parse(
                name="probe", reference="probe.invalid/probe:probe", digest=r.digest or "sha256:" + "0" * 64
            ),
        ),
        torch="2.5.1",
        torchvision="0.20.1",
        cuda="12.4",
        python="3.11",
        min_driver=MinDriver(full=parse_driver("450.80.02"), minor_version=parse_driver("450.80.02")),
        arch=("8.0",),
        shm=Shm(),
        validated_on=(r.validated_on(),),
        fingerprint="probe",
        released=_now(),
    )
    problem = index_problem(probe)
    if problem is None:
        return None
    said = problem.problem or problem.message  # the problem alone, without the probe entry's file and field
    return f"{r.path}: its validated-on record is not what a release index holds ({said})"


# ------------------------------------------------------------------------------------------------------------
# outcome


#: a cell's release status (a Literal: a comparison with a value it never takes is a mypy error)
ReleaseStatus = Literal["pending", "promoted", "up-to-date", "refused", "failed", "would-promote"]


@dataclass
class CellResult:
    cell: str
    tag: str
    status: ReleaseStatus = "pending"
    digest: str | None = None
    reasons: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    #: the registries whose release tag this run moves (moved, or would move with --dry-run) onto ``digest``
    tag_moves: list[str] = field(default_factory=list)
    registries: dict[str, str] = field(default_factory=dict)  # name -> digest the release tag now resolves to
    vulnerabilities: VulnRecord | None = None  # the vulnerability gate's verdict (imagesmith.vulngate)
    sbom: SbomRecord | None = None  # the signed SBOM stored beside the validation attestation
    #: what the image config of the digest says (the entry's fields come from it, not from the plan)
    facts: ImageFacts | None = None


@dataclass
class Outcome:
    matrix: str
    dry_run: bool
    cells: list[CellResult] = field(default_factory=list)
    index_file: str | None = None
    index_changed: bool = False
    index_published: list[str] = field(default_factory=list)
    index_signature: str | None = None
    #: carried entries rebuilt from their content: ``entry TAG: field: old → new``
    corrections: list[str] = field(default_factory=list)

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


# ------------------------------------------------------------------------------------------------------------
# blobs read back by content, remembered


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
            from imagesmith.labelcheck import write_file  # issue 34 (call site): temp + rename, no link

            try:
                write_file(self.path, body)
                self._new = False
            except (OSError, ConfigError):
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
    gate: Gate | None = None,
    sbom_for: SbomFinder | None = None,
    verified: VerifiedBlobs | None = None,
) -> tuple[CellResult, list[Report]]:
    """Promote one cell (or say why not). Returns the result and the passing reports of the digest.

    Every blob of the digest is read back and hashed in every registry of the cell once (remembered in
    *verified*, by registry host and digest): a damaged blob a registry already held (even of the right size,
    which the default ``--verify head`` trusts) is repaired or named, and no release tag moves.

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
            where = f"{t.image}:{cosign_attestation_tag(digest)}"
            usable, unusable = usable_evidence(good, source=where)
            store_problems += (
                unusable  # stored evidence that cannot stand behind an entry: named, not counted
            )
            for_digest += usable
            for att in good:
                r = attested_report(att, source=where)
                if r.verdict == "failed" or r.checks_verdict == "failed":
                    for_digest.append(r)
            if usable:
                break
    passing = [r for r in for_digest if r.passed]
    failing = [r for r in for_digest if r.verdict == "failed" or r.checks_verdict == "failed"]
    unusable_passes = [why for r in passing if (why := r.unusable_pass())]
    if (
        unusable_passes
    ):  # a signed pass that proves nothing: refused, naming the report, before anything moves
        res.status = "refused"
        res.reasons += unusable_passes
        res.reasons.append(
            f"validate {digest} again on a GPU host with this imagesmith (imagesmith validate "
            f"{cell.targets[0].image}@{digest} --report DIR --sign-key KEY records the GPU inventory and "
            "a verdict its checks bear out), and pass only that folder with --reports"
        )
        return res, []
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
    if gate is not None:  # the vulnerability gate (imagesmith.vulngate): a scan of exactly this digest
        try:
            res.vulnerabilities, refusals = gate(digest)
        except ImagesmithError as exc:  # an unreadable or hostile report refuses this cell, naming the file
            res.vulnerabilities, refusals = None, [_with_fix(exc)]
        if refusals:
            res.status = "refused"
            res.reasons += refusals
            return res, []
    sbom_envelopes: list[bytes] = []
    if sbom_for is not None:  # a signed SBOM of the digest (imagesmith sbom --sign-key), stored beside
        found = sbom_for(digest)
        if isinstance(found, str):  # one that does not verify is never stored: refused, named
            res.status = "refused"
            res.reasons.append(
                f"signed SBOM {found} (make it again: imagesmith sbom IMAGE@DIGEST --sign-key KEY)"
            )
            return res, []
        if found is not None:
            from imagesmith.sbom import SPDX_PREDICATE_TYPE

            sbom_envelopes.append(found.envelope)
            res.sbom = SbomRecord(
                format="spdx",
                predicate_type=SPDX_PREDICATE_TYPE,
                digest=found.digest,
                packages=found.packages,
            )
    report = max(passing, key=lambda r: r.date)
    envelopes = [r.envelope for r in passing if r.envelope is not None]
    source = next(t for t in cell.targets if held.get(t.name) == digest)
    try:
        facts = image_facts(clients[source.name], source.repo, digest)
    except ReleaseError as exc:
        res.status = "refused"
        res.reasons.append(_with_fix(exc))
        return res, []
    except ImagesmithError as exc:
        res.status = "failed"
        res.reasons.append(
            f"reading the image config of {digest} from {source.name} failed: {_with_fix(exc)}"
        )
        return res, []
    res.facts = facts
    memory = verified
    try:
        blobs = _blobs_of(clients[source.name], source.repo, digest) if verify != "off" else []
    except ImagesmithError as exc:
        res.status = "failed"
        res.reasons.append(f"reading the manifest of {digest} from {source.name} failed: {_with_fix(exc)}")
        return res, []
    differ = [
        f"{name} {said} (the plan's cell: {planned})"
        for name, said, planned in (
            ("torch", facts.torch, cell.torch),
            ("torchvision", facts.torchvision, cell.torchvision),
            ("cuda", facts.cuda, cell.cuda),
            ("python", facts.python, cell.python),
        )
        if said != planned
    ]
    # issue 34 (call site): min_driver, arch and shm labels vs the plan's cell; torch/CUDA the suite recorded
    from imagesmith.labelcheck import label_differences

    differ += label_differences(cell, facts, passing)
    if differ:
        res.status = "refused"
        res.reasons.append(
            f"the image config of the candidate {digest} says {', '.join(differ)}: it is not this cell's "
            f"image; rebuild it: imagesmith build --matrix {cell.matrix} --only {cell.id} --push"
        )
        return res, []
    probe = index_entry(cell, replace(res, registries=dict.fromkeys(held, digest)), passing, _now())
    problem = index_problem(probe)
    if problem is not None:  # never promote what the index writer would then refuse to read
        res.status = "refused"
        res.reasons.append(
            f"the index entry for {digest} would be invalid: {problem.message}; nothing was promoted"
        )
        return res, []

    streamed: set[str] = set()  # blobs a copy of this run read from the source in full, their sha256 checked
    streamed_lock = threading.Lock()
    deferred: list[tuple[str, int]] = []  # the source's blobs to read back once the copies are done

    def prepare(t: Registry) -> tuple[list[str], str | None, ReleaseError | None]:
        """Phase 1 in one registry (its own clients when parallel): copy the manifest by digest, store the
        attestations and the report; never the release tag. (steps, what the tag resolves to now, error)."""
        c = clients[t.name] if client_for is None else client_for(t)
        src = clients[source.name] if client_for is None else client_for(source)
        try:
            has_manifest = c.manifest_digest(t.repo, digest) is not None
            has_report = has_manifest and attached_report_ok(c, t.repo, digest)
            has_att = has_manifest and has_attestations(c, t.repo, digest, envelopes + sbom_envelopes)
            tagged = c.manifest_digest(t.repo, cell.tag)
            unread = [(d, n) for d, n in blobs if memory is None or not memory.has(c.host, d)]
        except ImagesmithError as exc:
            return [], None, _phase_one_error(f"{t.name}: {_with_fix(exc)}", t, cell, exc)
        todo = []
        if not has_manifest:
            todo.append(f"copy manifest {digest[:19]}… and its blobs from {source.name} to {t.name}")
        if unread:
            todo.append(
                f"read back {len(unread)} blob(s) of {digest[:19]}… in {t.name} and check their sha256"
            )
        if not has_att:
            todo.append(
                f"store {len(envelopes)} signed attestation(s)"
                + (" and the signed SBOM" if sbom_envelopes else "")
                + f" as {t.image}:{cosign_attestation_tag(digest)}"
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
            if not has_manifest and t.name != source.name and c.host != src.host and unread:
                # blobs first, one by one: a missing one is streamed from the source (whose bytes are hashed
                # on the way) and read back here; one already here is read back; either way once
                fresh = {d for d, _ in unread}
                for d, size in blobs:
                    level: Verify = "full" if d in fresh else verify
                    if copy_blob(src, source.repo, c, t.repo, d, size=size, verify=level):
                        with streamed_lock:
                            streamed.add(d)
                    if d in fresh and memory is not None:
                        memory.add(c.host, d)
                unread.clear()
            if not has_manifest:  # (every blob there now, unless mounted within one registry: HEADs)
                copy_manifest(src, source.repo, digest, c, t.repo, verify=verify)
            if has_manifest and verify == "full":  # the nightly: read back what an earlier run copied
                verify_blobs(c, t.repo, src.get_manifest(source.repo, digest), side="destination")
                if memory is not None:  # every blob was just read and hashed: not read twice
                    for d, _ in unread:
                        memory.add(c.host, d)
                unread.clear()
            if t.name == source.name:
                deferred.extend(unread)  # after the copies: what they streamed from here is not read again
                unread.clear()
            for d, size in unread:  # once per (registry, blob): a damaged copy is repaired or named
                copy_blob(src, source.repo, c, t.repo, d, size=size, verify="read")
                if memory is not None:
                    memory.add(c.host, d)
            if not has_att:
                attach_attestations(c, t.repo, digest, envelopes)
                if sbom_envelopes:
                    from imagesmith.sbom import SPDX_PREDICATE_TYPE

                    attach_attestations(c, t.repo, digest, sbom_envelopes, SPDX_PREDICATE_TYPE)
            if not has_report:
                attach_report(c, t.repo, c.get_manifest(t.repo, digest), report)
            if c.manifest_digest(t.repo, digest) != digest:  # served by digest, checked, before any tag
                raise ReleaseError(
                    f"{t.name}: {t.image}@{digest} is not served after the copy",
                    hint=f"check registry {t.name}'s storage, then rerun the release",
                )
        except ImagesmithError as exc:
            return (
                todo,
                tagged,
                _phase_one_error(f"promotion to {t.name} failed: {_with_fix(exc)}", t, cell, exc),
            )
        return todo, tagged, None

    if client_for is None or len(cell.targets) == 1:
        results = [prepare(t) for t in cell.targets]
    else:  # registries are independent: one thread each, every thread with its own clients
        with ThreadPoolExecutor(max_workers=min(8, len(cell.targets))) as pool:
            results = list(pool.map(prepare, cell.targets))
    before = {t.name: tagged for t, (_, tagged, _) in zip(cell.targets, results, strict=True)}
    res.tag_moves = [name for name, tagged in before.items() if tagged != digest]
    for steps, _, error in results:
        res.steps += steps
        if error is not None:
            res.status = "failed"
            res.reasons.append(error.message)
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
    try:  # the source's own copy of each blob: read back unless a copy just streamed (and hashed) it
        for d, size in deferred:
            if d not in streamed:
                blob_digest(clients[source.name], source.repo, d, side="source", size=size)
            if memory is not None:
                memory.add(clients[source.name].host, d)
    except ImagesmithError as exc:
        res.status = "failed"
        res.registries = {name: d for name, d in before.items() if d is not None}
        res.reasons.append(
            f"promotion from {source.name} failed: {_with_fix(exc)}; no release tag was moved (rerun once "
            "the registry's copy is repaired)"
        )
        return res, passing
    try:
        _tag_everywhere(cell, digest, clients, before)
    except TagPromotionError as exc:
        res.status = "failed"
        res.reasons.append(exc.message)
        res.registries = {name: d for name, d in before.items() if d is not None} | {
            t.name: digest for t in exc.left
        }
        return res, passing
    res.registries = {t.name: digest for t in cell.targets}
    res.status = "promoted" if res.steps else "up-to-date"
    return res, passing


def _tag_everywhere(
    cell: ReleaseCell, digest: str, clients: Mapping[str, RegistryApi], before: Mapping[str, str | None]
) -> None:
    """Phase 2: put the release tag on *digest* in every registry of *cell* and read each back
    (:func:`imagesmith.registry.promote`, the manifest each registry holds for the digest). On a failure,
    what this run moved is rolled back (a tag that pointed elsewhere is put back on its old manifest; a new
    tag deleted where the registry can delete a tag alone): :class:`TagPromotionError` names what stays
    moved."""
    targets = [PromotionTarget(name=t.name, repo=t.repo, client=clients[t.name], ref=t) for t in cell.targets]
    try:
        promote(targets, [cell.tag], digest, before={(p, cell.tag): before.get(p.name) for p in targets})
    except PromotionError as exc:
        raise TagPromotionError(cell, digest, exc) from exc


def _phase_one_error(text: str, t: Registry, cell: ReleaseCell, cause: ImagesmithError) -> ReleaseError:
    """Phase 1 failed in registry *t* (copy, evidence, or reading what is there): a ReleaseError about it,
    worded as the release summary shows it, its fields from the registry's error."""
    return ReleaseError(
        text,
        registry=t.name,
        host=t.host,
        repository=t.repo,
        digest=cause.digest,
        cell=cell.id,
        fault=cause.fault,
        transient=cause.transient,
    )


class TagPromotionError(ReleaseError):
    """The release tag of a cell could not be moved everywhere (phase 2). ``left``: the registries where it
    stays moved to the validated digest; the message words the failure as the release summary shows it."""

    def __init__(self, cell: ReleaseCell, digest: str, failed: PromotionError) -> None:
        t = cast("Registry", failed.target.ref)
        where = f"{t.image}:{cell.tag}"
        if failed.step == "put" and failed.cause is not None:
            error = f"tagging {where} in {t.name} failed: {_with_fix(failed.cause)}"
        else:
            why = (
                f"cannot be read back: {_with_fix(failed.cause)}"
                if failed.cause is not None
                else f"resolves to {failed.got}, not {digest}"
            )
            error = (
                f"{t.name}: {where} {why} (a registry that does not keep what it was given, or another "
                "release moved the tag meanwhile)"
            )
        self.left = [cast("Registry", u.ref) for u, _ in reversed(failed.left)]
        if not self.left:
            error += (
                "; the release tags this run had put were rolled back: no release tag moved (rerun to "
                "converge)"
                if failed.moved
                else "; no release tag moved (rerun to converge)"
            )
        else:
            names = ", ".join(u.name for u in reversed(self.left))
            error += (
                f"; the release tag stays moved to the validated digest in {names} (the registry cannot "
                "delete a tag alone): rerun to tag the other registries"
            )
        super().__init__(error, registry=t.name, host=t.host, repository=t.repo, digest=digest, cell=cell.id)
        self.failed = failed


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
    entry = ReleasedImage(
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
        validated_on=tuple(
            sorted({r.validated_on() for r in reports}, key=lambda v: (v.date, v.gpu, v.report_digest))
        ),
        fingerprint=cell.fingerprint,
        released=released,
        vulnerabilities=result.vulnerabilities,
        sbom=result.sbom,
    )
    if result.facts is None:
        return entry
    return bound_entry(entry, result.facts, entry.validated_on)[0]


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
    keys: Sequence[PublicKey] = (),
) -> ReleaseIndex:
    """The index to extend, from the one place the project names: the index file (``[paths].release_index``
    or ``--index-file``), or, when asked for by name (``--extend-from REGISTRY``), the index that registry
    publishes. Never "the first registry that has one": a registry that publishes an index while the file is
    missing is a refusal, not a source. Carried entries are re-verified later (:func:`verify_carried`); the
    repositories a registry's index names as ``published_to`` are carried only when one of *keys* (the release
    key) signed it (:func:`_published_to_if_signed`)."""
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
        body, envelope = read_signed_index_artifact(c, t.repo)
        base = parse_index(body, source=f"{t.image}:{INDEX_ARTIFACT_TAG}")
        return _published_to_if_signed(
            base, body, envelope, keys, where=f"{t.image}:{INDEX_ARTIFACT_TAG}", echo=echo
        )
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


def _published_to_if_signed(
    base: ReleaseIndex,
    body: bytes,
    envelope: bytes | None,
    keys: Sequence[PublicKey],
    *,
    where: str,
    echo: Callable[[str], Any],
) -> ReleaseIndex:
    """*base* (read from a registry for --extend-from), its ``published_to`` kept only when one of *keys*
    signed exactly *body*: pick takes the signed index from every repository it names, so a repository that
    someone who can push to this registry wrote into it would be signed into the next index as a place the
    publisher's index belongs (and one copied there would pass). Entries need no signature here: each is
    re-verified against its tags, labels and evidence."""
    if not base.published_to:
        return base
    from imagesmith.errors import IndexTrustError
    from imagesmith.indextrust import check_signature

    try:
        check_signature(body, envelope, list(keys), source=where, where=f"{where} signature layer")
    except IndexTrustError:
        echo(
            f"the index {where} is not signed by the release key: the repositories it names as published_to "
            f"({', '.join(base.published_to)}) are not carried; the new index names this run's"
        )
        return replace(base, published_to=())
    return base


@dataclass(frozen=True, kw_only=True)
class Carried:
    """The carried entries of the index after re-verification: what stays, one refusal per dropped copy, and
    the copies that could not be checked (a registry error: then nothing is written)."""

    images: tuple[ReleasedImage, ...]
    refusals: tuple[CellResult, ...]
    unverified: tuple[str, ...]
    #: per tag: the validated-on records of the verified, passing attestations its kept copies hold
    evidence: Mapping[str, tuple[ValidatedOn, ...]] = field(default_factory=dict)


def _carried_evidence(
    client: RegistryApi, repo: str, digest: str, trusted: Sequence[PublicKey]
) -> tuple[str, tuple[ValidatedOn, ...]]:
    """Why the copy of *digest* in this registry lacks signed evidence today ("" when it has it): a stored
    attestation of *digest* that verifies with a *trusted* key and passed — by its checks, with a GPU host —
    and none that failed; and the validated-on records of those that count."""
    good, bad = attested_in_registry(client, repo, digest, trusted)
    where = f"{client.host}/{repo}:{cosign_attestation_tag(digest)}"
    failed = [
        a
        for a in good
        if (r := attested_report(a, source=where)).verdict == "failed" or r.checks_verdict == "failed"
    ]
    if failed:
        return f"a signed validation attestation of {digest} ({failed[0].signer}) says failed", ()
    usable, unusable = usable_evidence(good, source=where)
    if usable:
        return "", tuple(r.validated_on() for r in usable)
    why = (bad + unusable)[:1]
    return (
        f"no passing validation attestation of {digest} stored as {cosign_attestation_tag(digest)} verifies "
        "with a trusted key" + (f" ({why[0]})" if why else ""),
        (),
    )


class _CarriedAnswer(NamedTuple):
    """What re-checking one carried copy found."""

    why: str  # the copy is dropped for this ("" = it stands, if it still resolves to the digest)
    now: str | None  # the digest the tag resolves to now
    vals: tuple[ValidatedOn, ...]  # its verified evidence
    unverified: str = ""  # it could not be checked (kept, and the index is not written): why


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

    def resolve(item: tuple[ReleasedImage, RegistryCopy, Registry | None, str]) -> _CarriedAnswer:
        _, copy, reg, why = item
        if reg is None:
            return _CarriedAnswer(why, None, ())
        if not trusted:
            return _CarriedAnswer(
                "",
                None,
                (),
                unverified="no trusted public key is configured, so its signed attestation cannot be "
                "verified (fix: add the validation runners' public key to [release] trusted_keys in "
                "imagesmith.toml, or pass --trusted-key FILE)",
            )
        client = clients.get(reg.name) or client_for(reg)
        try:
            now = client.manifest_digest(reg.repo, copy.tag)
            if now != copy.digest:
                return _CarriedAnswer("", now, ())
            why, vals = _carried_evidence(client, reg.repo, copy.digest, trusted)
            return _CarriedAnswer(why, now, vals)
        except ImagesmithError as exc:
            return _CarriedAnswer("", None, (), unverified=_with_fix(exc))

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(resolve, checks))
    keep: dict[str, list[RegistryCopy]] = {image.tag: [] for image in images}
    reasons: dict[str, list[str]] = {}
    unverified: list[str] = []
    evidence: dict[str, set[ValidatedOn]] = {}
    for (image, copy, _, _), (why, now, vals, not_checked) in zip(checks, answers, strict=True):
        if not_checked:
            unverified.append(f"{image.tag} in {copy.name}: {not_checked}")
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
            evidence.setdefault(image.tag, set()).update(vals)
    kept = tuple(replace(image, registries=tuple(keep[image.tag])) for image in images if keep[image.tag])
    refusals = tuple(
        CellResult(cell=image.cell, tag=image.tag, status="refused", reasons=reasons[image.tag])
        for image in images
        if image.tag in reasons
    )
    return Carried(
        images=kept,
        refusals=refusals,
        unverified=tuple(unverified),
        evidence={tag: tuple(vals) for tag, vals in evidence.items()},
    )


def _stored_validated_on(
    cell: ReleaseCell, result: CellResult, clients: Mapping[str, RegistryApi], trusted: Sequence[PublicKey]
) -> tuple[ValidatedOn, ...]:
    """The validated-on records of the usable attestations of the released digest stored in the first of the
    cell's registries that holds it (earlier runs' evidence: another GPU family's pass). A registry error
    here leaves them out (the local evidence still stands behind the entry)."""
    assert result.digest is not None
    for t in cell.targets:
        if result.registries.get(t.name) != result.digest:
            continue
        try:
            good, _ = attested_in_registry(clients[t.name], t.repo, result.digest, trusted)
        except ImagesmithError:
            return ()
        usable, _ = usable_evidence(good, source=f"{t.image}:{cosign_attestation_tag(result.digest)}")
        return tuple(r.validated_on() for r in usable)
    return ()


@dataclass(frozen=True, kw_only=True)
class Rebound:
    """Carried entries rebuilt from their content: what stays, the corrections made (``entry TAG: field: old →
    new``), entries dropped (their image config is not imagesmith's) and images that could not be read."""

    images: tuple[ReleasedImage, ...]
    corrections: tuple[str, ...]
    refusals: tuple[CellResult, ...]
    unverified: tuple[str, ...]


def _dropped_entry(image: ReleasedImage, why: str) -> CellResult:
    """The refusal of a carried index entry that is dropped from the index, and why."""
    return CellResult(
        cell=image.cell,
        tag=image.tag,
        status="refused",
        reasons=[f"carried index entry {image.tag}: {why}; the entry is dropped"],
    )


def rebind_carried(
    carried: Carried,
    known: Mapping[str, Registry],
    client_for: Callable[[Registry], RegistryApi],
    clients: Mapping[str, RegistryApi],
) -> Rebound:
    """Every field pick decides on, of every carried entry, from content bound to its digest: the image
    config's labels (read from a registry whose copy was just re-verified; the config is content-addressed,
    so any copy says the same) and the validated-on records of its verified attestations
    (:attr:`Carried.evidence`); each copy's registry kind from the project's registries file (*known*). An
    entry that disagrees is rebuilt, and each change is named."""
    images: list[ReleasedImage] = []
    corrections: list[str] = []
    refusals: list[CellResult] = []
    unverified: list[str] = []
    for image in carried.images:
        facts: ImageFacts | None = None
        faults: list[str] = []
        refused: ReleaseError | None = None
        for copy in image.registries:  # the config is content-addressed: any registry that answers will do
            reg = known[copy.name]
            try:
                facts = image_facts(clients.get(reg.name) or client_for(reg), reg.repo, image.digest)
                break
            except ReleaseError as exc:  # the image config is not imagesmith's: the same in every registry
                refused = exc
                break
            except ImagesmithError as exc:
                faults.append(f"{image.tag} in {copy.name}: {_with_fix(exc)}")
        if refused is not None:
            refusals.append(_dropped_entry(image, _with_fix(refused)))
            continue
        if facts is None:
            unverified += faults
            images.append(image)
            continue
        new, changes = bound_entry(image, facts, carried.evidence.get(image.tag, ()))
        # each copy as the project's registries file names it (verify_carried matched name, host and
        # repository): its kind decides which registry pick sends a renter to, never the index's word
        copies = tuple(
            replace(c, registry=replace(c.registry, kind=known[c.name].kind)) for c in new.registries
        )
        kinds = [
            f"registries[{c.name}].kind: {c.kind} → {known[c.name].kind}"
            for c in new.registries
            if c.kind != known[c.name].kind
        ]
        new = replace(new, registries=copies)
        problem = index_problem(new)
        if problem is not None:
            refusals.append(_dropped_entry(image, problem.message))
            continue
        corrections += [
            f"entry {image.tag}: {c} (from its image config and signed evidence)" for c in changes
        ] + [f"entry {image.tag}: {c} (from the registries file)" for c in kinds]
        images.append(new)
    return Rebound(
        images=tuple(images),
        corrections=tuple(corrections),
        refusals=tuple(refusals),
        unverified=tuple(unverified),
    )


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
    index_valid_for: datetime.timedelta | None = None,
    rotate_to: SigningKey | None = None,
    gate: Gate | None = None,
    sbom_for: SbomFinder | None = None,
    verified: VerifiedBlobs | None = None,
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
    if not dry_run:  # issue 34 (call site): a link or non-regular file where release writes: refused up front
        from imagesmith.labelcheck import check_targets

        check_targets(
            [index_file, index_signature_path(index_file), index_file.with_name(index_file.name + ".pub")]
        )
    verified = verified if verified is not None else VerifiedBlobs.default()
    entries: list[ReleasedImage] = []
    base = _base_index(
        index_file,
        cells,
        clients,
        extend_from=extend_from,
        echo=echo,
        keys=[sign_key.public] if sign_key is not None else [],
    )
    for cell in cells:
        echo(f"{cell.id}: checking candidate and evidence")
        result, passing = release_cell(
            cell,
            reports,
            clients,
            dry_run=dry_run,
            client_for=client_for,
            verify=verify,
            trusted=trusted,
            gate=gate,
            sbom_for=sbom_for,
            verified=verified,
        )
        verified.save()
        outcome.cells.append(result)
        if (
            result.digest
            and result.status in ("promoted", "up-to-date", "would-promote")
            and result.registries
        ):
            old = base.by_tag(cell.tag)
            # released: when the tag first moved to this digest (a rerun that moved no tag keeps it)
            kept = old is not None and old.digest == result.digest and not result.tag_moves
            entry = index_entry(cell, result, passing, old.released if old is not None and kept else _now())
            # validated_on: every verified, passing attestation of the digest (the local ones and those
            # stored by earlier runs), never a previous index's word
            stored = _stored_validated_on(cell, result, clients, trusted) if not dry_run else ()
            if result.facts is not None:
                entry = bound_entry(entry, result.facts, (*entry.validated_on, *stored))[0]
            if old is not None and old.digest == entry.digest:
                # a rerun without --scan-reports keeps what the release recorded of the same digest
                entry = replace(
                    entry,
                    vulnerabilities=entry.vulnerabilities or old.vulnerabilities,
                    sbom=entry.sbom or old.sbom,
                )
                # the index said otherwise of this digest
                outcome.corrections += [
                    f"entry {entry.tag}: {c} (from its image config)" for c in entry_changes(old, entry)
                ]
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
    rebound = rebind_carried(carried, known, client_for, clients)
    outcome.cells.extend(rebound.refusals)
    outcome.corrections += rebound.corrections
    if rebound.unverified:
        outcome.cells.append(
            CellResult(
                cell="(index)",
                tag=INDEX_ARTIFACT_TAG,
                status="failed",
                reasons=[
                    "the image configs of carried index entries could not be read, so the index was neither "
                    "written nor published (rerun when the registries answer): "
                    + "; ".join(rebound.unverified)
                ],
            )
        )
        outcome.index_changed = False
        return outcome
    base_kept = replace(base, images=rebound.images)
    merged = base_kept.merged(entries, generated=base.generated)
    merged = replace(
        merged,
        registries=tuple(sorted({c.host for image in merged.images for c in image.registries})),
        # issue 25: where this index is published (every repository before, and this run's), inside the signed
        # bytes: pick refuses it read from any other repository (a copy moved there by someone who can push)
        published_to=tuple(
            sorted({*base.published_to, *(index_location(t.host, t.repo) for t in _index_repos(cells))})
        ),
        # issue 34 (call site): a key rotation names the successor inside the signed bytes
        successor_key=rotate_to.public.fingerprint if rotate_to is not None and sign_key is not None else "",
    )
    outcome.index_changed = merged != base or not index_file.is_file()
    if not merged.images:  # nothing released, now or before: no index to write or publish
        outcome.index_file = None
        outcome.index_changed = False
        return outcome
    if dry_run:
        return outcome
    # issue 25: a changed index, or one past half its validity, gets a new serial and expiry (signed below)
    valid_for = index_valid_for or datetime.timedelta(days=DEFAULT_INDEX_VALID_DAYS)
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    if outcome.index_changed or renewal_due(merged, valid_for, now):
        outcome.index_changed = True
        merged = issued(merged, previous=base.serial, valid_for=valid_for, now=now)
        try:  # what is written must read back: never leave a file the next release cannot load
            parse_index(dump_index(merged), source=str(index_file))
        except ConfigError as exc:
            outcome.cells.append(
                CellResult(
                    cell="(index)",
                    tag=INDEX_ARTIFACT_TAG,
                    status="failed",
                    reasons=[f"the index was neither written nor published: {_with_fix(exc)}"],
                )
            )
            outcome.index_changed = False
            return outcome
        save_index(merged, index_file)
    body = dump_index(load_index(index_file)).encode()
    from imagesmith.labelcheck import write_file

    signature = index_signature_path(index_file)
    envelope: bytes | None = None
    public: bytes | None = None
    if sign_key is not None:
        from imagesmith import signing

        envelope = signing.sign_envelope_by(  # issue 34 (call site): a rotation is signed by both keys
            body, signing.INDEX_PAYLOAD_TYPE, [sign_key, *([rotate_to] if rotate_to is not None else [])]
        )
        if not signature.is_file() or not _signed_same(signature, body, rotate_to or sign_key):
            write_file(signature, envelope + b"\n")  # issue 34 (call site): temp + rename, no link
        else:
            envelope = signature.read_bytes().strip()
        outcome.index_signature = str(signature)
        # the public half beside it (index.json.pub, the artifact's key layer): what pick pins on first use
        public = (rotate_to or sign_key).public.pem  # issue 34 (call site): the successor's, on a rotation
        published_key = index_file.with_name(index_file.name + ".pub")
        if not published_key.is_file() or published_key.read_bytes() != public:
            write_file(published_key, public)  # issue 34 (call site): temp + rename, no link
        # issue 34 (call site): the one line a renter pastes, the key's fingerprint as its trust root
        from imagesmith.indextrust import renter_line

        echo(renter_line(merged.published_to, (rotate_to or sign_key).public.fingerprint))
    else:
        echo(
            "warning: the index is not signed (no --sign-key / $IMAGESMITH_SIGNING_KEY): "
            "pick and imagesmith index refuse it (unless --no-verify)"
        )
    try:
        outcome.index_published += publish_index_everywhere(
            _index_repos(cells), clients, body, envelope, public
        )
    except IndexPublicationError as exc:
        outcome.cells.append(
            CellResult(cell="(index)", tag=INDEX_ARTIFACT_TAG, status="failed", reasons=[exc.message])
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
    rotate_to: SigningKey | None = None,
    scan_dirs: Sequence[Path] = (),
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
    gate = vulnerability_gate(scan_dirs, proj.file)
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
        index_valid_for=proj.index_valid_for,
        rotate_to=rotate_to,
        gate=gate,
        sbom_for=sbom_finder(scan_dirs, keys) if scan_dirs else None,
    )


#: the vulnerability gate of one digest: (what the index records, the refusal reasons)
Gate = Callable[[str], tuple[VulnRecord | None, list[str]]]
#: the signed SBOM of one digest: None (none), the reason it does not count, or the SBOM
SbomFinder = Callable[[str], "SignedSbom | str | None"]


def sbom_finder(dirs: Sequence[Path], trusted: Sequence[PublicKey]) -> SbomFinder:
    """The signed SBOMs (``sha256-<hex>.sbom.dsse.json``, imagesmith.sbom) in *dirs*, verified with
    *trusted*."""
    from imagesmith.sbom import find_signed_sbom

    return lambda digest: find_signed_sbom(dirs, digest, trusted)


def vulnerability_gate(scan_dirs: Sequence[Path], project_file: Path | None) -> Gate | None:
    """The gate of ``[release.vulnerabilities]`` (imagesmith.toml) over the reports in *scan_dirs*; None when
    neither is given (the gate is off)."""
    from imagesmith import vulngate
    from imagesmith.compat import today

    policy = vulngate.load_policy(project_file)
    if policy is None and not scan_dirs:
        return None
    for d in scan_dirs:
        if problem := inputs.folder_problem(d):
            raise ConfigError(
                f"--scan-reports {d}: {problem}",
                hint="pass the folder the scanner reports were saved in",
            )
    day = today()

    def check(digest: str) -> tuple[VulnRecord | None, list[str]]:
        verdict, reasons = vulngate.gate(scan_dirs, digest, policy, today=day)
        if verdict is None or reasons:
            return None, reasons
        return (
            VulnRecord(
                scanner=verdict.scan.scanner,
                report=", ".join(Path(p).name for p in verdict.scan.source.split(", ")),
                report_digest=verdict.scan.sha,
                fail_on=(policy.fail_on if policy else "critical"),
                allowlisted=verdict.allowlisted_ids(),
            ),
            [],
        )

    return check


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
