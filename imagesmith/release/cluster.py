"""Cluster evidence (issue 32): the signed cluster reports of ``imagesmith validate ssh://n1 ssh://n2 …
--image IMAGE@DIGEST --sign-key KEY`` found under ``--reports`` (``cluster.json`` with ``cluster.dsse.json``
beside it), verified against the trusted keys; and the step "check cluster evidence" that, for a cell whose
digest such a report names, refuses the cell unless the report is signed by a trusted key, about this
digest, and passed — then records its summary in the index entry (``cluster``).

Cluster evidence is optional: a cell without any keeps an entry without ``cluster``. But a report that
claims the digest and cannot stand behind it (unsigned, altered, signed for another digest, failed, a
malformed signed field) refuses the cell before anything moves: a renter is never shown a cluster claim
that someone's failed or forged run made.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagesmith import inputs
from imagesmith.errors import ConfigError, SignatureError
from imagesmith.validate.clusterrecord import (
    CLUSTER_ATTESTATION,
    CLUSTER_JSON,
    ClusterReport,
    SignedCluster,
    claimed_digest,
    verify_report,
)

if TYPE_CHECKING:
    from imagesmith.release.state import CellRun
    from imagesmith.signing import PublicKey


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
    claims = _claims(claimed, claimed_digest(envelope))
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


def check_cluster(run: CellRun) -> None:
    """Every cluster report that claims this cell's digest is signed by a trusted key, about this digest,
    passed by its promises and names GPUs on every node; the newest becomes the entry's ``cluster``. One
    that does not refuses the cell, naming the file and why."""
    digest = run.digest
    mine = [e for e in run.cluster_reports if e.about(digest)]
    refusals: list[str] = []
    good: list[SignedCluster] = []
    for e in mine:
        why = _problem(e, digest)
        if why:
            refusals.append(f"cluster report {e.path}: {why}")
        elif e.signed is not None:
            good.append(e.signed)
    if refusals:
        run.refuse(
            *refusals,
            f"validate the cluster again with this image (imagesmith validate ssh://n1 ssh://n2 … --image "
            f"{run.cell.targets[0].image}@{digest} --sign-key KEY), or leave its folder out of --reports",
        )
        return
    if good:
        newest = max(good, key=lambda s: s.report.started)
        run.result.cluster = newest.report.summary(report_digest=newest.sha)


def _problem(e: ClusterEvidence, digest: str) -> str:
    if e.problem is not None:
        return e.problem
    signed = e.signed
    assert signed is not None, "evidence without a problem is signed"
    report = signed.report  # about *digest*: a file claiming it beside an envelope for another is a problem
    if report.verdict != "passed" or report.promises_verdict != "passed":
        failed = "; ".join(report.failed()[:3]) or report.verdict_reason or "no promise checked"
        return f"the cluster validation of {digest} failed ({failed})"
    empty = [n.name for n in report.nodes if n.gpus == 0]
    if empty:
        return (
            f"node {empty[0]} lists no GPU (nodes[].gpus): a cluster report of GPU-less nodes says nothing "
            "about GPUs, so it cannot stand behind a GPU image"
        )
    return ""
