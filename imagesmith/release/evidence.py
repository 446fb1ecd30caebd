"""Validation evidence: the signed attestations of ``imagesmith validate`` (and the report files beside
them), read and verified against the trusted keys; which of them can stand behind an index entry; and the
signed cluster reports of a multi-node run (:class:`ClusterEvidence`, issue 32)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from imagesmith import inputs
from imagesmith.attestation import (
    ATTESTATION_FILE,
    Attested,
    claimed_digest,
    verify_validation,
)
from imagesmith.compat import MinDriver, parse_driver
from imagesmith.errors import ConfigError, SignatureError
from imagesmith.index import (
    RegistryCopy,
    ReleasedImage,
    Shm,
    ValidatedOn,
)
from imagesmith.validate.clusterrecord import (
    CLUSTER_ATTESTATION,
    CLUSTER_JSON,
    ClusterReport,
    SignedCluster,
    verify_report,
)
from imagesmith.validate.clusterrecord import claimed_digest as cluster_claimed_digest
from imagesmith.validate.record import ValidationReport
from imagesmith.validate.redact import redact_report_bytes
from imagesmith.validate.staging import is_staging

if TYPE_CHECKING:
    from imagesmith.signing import PublicKey

from imagesmith.release.base import _now, _sha
from imagesmith.release.facts import index_problem


@dataclass(frozen=True, kw_only=True)
class Report:
    """One piece of validation evidence: the validation report (:class:`ValidationReport`, the one type of the
    record the suite writes, the host reads, release checks and the index summarises) and what release knows
    of where it came from. Only a report carried by a signed attestation that verifies with a trusted key
    counts (``signer`` set, ``problem`` None); the others are kept to say why they do not."""

    path: str  # the file, or the registry artifact the report was read from
    body: bytes
    digest: str | None  # signed: the attestation's subject; unsigned: what the report claims (never trusted)
    #: the report itself (None: nothing readable was there, only a reason in ``problem``)
    record: ValidationReport | None = field(default=None, hash=False)
    #: when it was read: the date of a report that records no start time
    read_at: str = ""
    signer: str | None = None  # the trusted key that signed the attestation
    envelope: bytes | None = field(default=None, repr=False)  # the DSSE envelope (attached to registries)
    problem: str | None = None  # why this is not evidence (unsigned, bad signature, unknown key, …)
    claimed: str | None = None  # the digest the report.json file itself names (for messages only)

    @property
    def verdict(self) -> str:
        """The report's own ``verdict`` ("unknown" without one); never taken at its word: see
        :attr:`checks_verdict`."""
        return self.record.verdict if self.record is not None else "unknown"

    @property
    def checks_verdict(self) -> str:
        """The verdict its checks give (validate's own rule, :attr:`ValidationReport.checks_verdict`)."""
        return self.record.checks_verdict if self.record is not None else ""

    @property
    def reason(self) -> str:
        return self.record.verdict_reason if self.record is not None else ""

    @property
    def target(self) -> str:
        return self.record.target if self.record is not None else ""

    @property
    def gpu(self) -> str:
        return self.record.gpu_model if self.record is not None else ""

    @property
    def gpu_count(self) -> int:
        return len(self.record.gpus) if self.record is not None else 0

    @property
    def driver(self) -> str:
        return self.record.driver if self.record is not None else ""

    @property
    def date(self) -> str:
        return (self.record.started if self.record is not None else "") or self.read_at

    @property
    def failed(self) -> tuple[str, ...]:
        return self.record.failed() if self.record is not None else ()

    @property
    def link(self) -> str:
        return self.record.link if self.record is not None else ""

    @property
    def figures(self) -> Mapping[str, float]:
        return self.record.figures if self.record is not None else {}

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
        """What the index records of this report (:meth:`ValidationReport.validated_on`)."""
        if self.record is None:  # nothing readable: an empty host (an index refuses it: never promoted)
            return ValidatedOn(gpu="", count=0, driver="", date=self.date, report_digest=self.sha)
        return self.record.validated_on(report_digest=self.sha, date=self.date)


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
        record=report,
        read_at=_now(),
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
        # a validate run's temp folder (being filled, a killed run's) or the bundle it replaced: no evidence
        found = [p for p in found if not any(is_staging(part) for part in p.relative_to(d).parts)]
        for f in sorted({p.parent for p in found}):
            out += read_evidence(f, trusted)
    return out


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
# cluster evidence (issue 32): the signed cluster reports of ``imagesmith validate ssh://n1 ssh://n2 …
# --image IMAGE@DIGEST --sign-key KEY`` under --reports (cluster.json, cluster.dsse.json beside it); the step
# that checks them is checks.check_cluster


@dataclass(frozen=True, kw_only=True)
class ClusterEvidence:
    """One cluster report found under ``--reports``: where, the digests it claims (the file's
    ``image.digest`` and the envelope's subject: never trusted, they only match the report to a cell), and
    either the verified report (``signed``) or why it is not evidence (``problem``)."""

    path: str
    claims: tuple[str, ...]
    signed: SignedCluster | None = None
    problem: str | None = None

    def about(self, digest: str) -> bool:
        return digest in self.claims or (self.signed is not None and self.signed.digest == digest)


def read_cluster_evidence(folder: Path, trusted: Sequence[PublicKey]) -> ClusterEvidence:
    """The cluster evidence of one folder: cluster.json (checked: a malformed one is a ConfigError naming
    the file and the field) and the envelope beside it, verified."""
    report_path, att_path = folder / CLUSTER_JSON, folder / CLUSTER_ATTESTATION
    claimed: str | None = None
    if os.path.lexists(report_path):
        body = inputs.read_user_file(report_path, "", hint="check --reports")
        claimed = ClusterReport.parse(body, source=str(report_path)).image_digest
    if not os.path.lexists(att_path):
        return ClusterEvidence(
            path=str(report_path),
            claims=_claims(claimed),
            problem=f"not signed: no {CLUSTER_ATTESTATION} beside it (validate the cluster with --image "
            "IMAGE@DIGEST --sign-key KEY on a validation runner)",
        )
    envelope = inputs.read_user_file(att_path, "", hint="check --reports")
    claims = _claims(claimed, cluster_claimed_digest(envelope))
    if not trusted:
        return ClusterEvidence(
            path=str(att_path),
            claims=claims,
            problem="no trusted public key is configured ([release] trusted_keys in imagesmith.toml)",
        )
    try:
        signed = verify_report(envelope, trusted, source=str(att_path))
    except (SignatureError, ConfigError) as exc:  # altered, unknown key, a signed field that is malformed
        return ClusterEvidence(path=str(att_path), claims=claims, problem=exc.message)
    if claimed is not None and claimed != signed.digest:
        return ClusterEvidence(
            path=str(report_path),
            claims=claims,
            signed=signed,
            problem=f"its image.digest is {claimed}, but {CLUSTER_ATTESTATION} beside it is signed for "
            f"{signed.digest}",
        )
    return ClusterEvidence(path=str(att_path), claims=claims, signed=signed)


def _claims(*digests: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(d for d in digests if d))


def collect_cluster_reports(dirs: Sequence[Path], trusted: Sequence[PublicKey] = ()) -> list[ClusterEvidence]:
    """Every cluster report (cluster.json or cluster.dsse.json) under *dirs* (``--reports``), read as
    evidence against the *trusted* keys. A file given itself counts for its folder."""
    folders: set[Path] = set()
    for d in dirs:
        if inputs.is_regular_file(d):
            if d.name in (CLUSTER_JSON, CLUSTER_ATTESTATION):
                folders.add(d.parent)
            continue
        if inputs.folder_problem(d) is not None:
            continue  # collect_reports names it
        folders |= {p.parent for p in (*d.rglob(CLUSTER_JSON), *d.rglob(CLUSTER_ATTESTATION))}
    return [read_cluster_evidence(f, trusted) for f in sorted(folders)]
