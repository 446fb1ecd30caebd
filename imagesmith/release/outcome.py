"""What a release run reports: one :class:`CellResult` per cell, the :class:`Outcome` of a matrix, the index
entry a released cell becomes, and the shapes of the gates (vulnerabilities, SBOM) a run is given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from imagesmith.errors import ReleaseError
from imagesmith.index import (
    ClusterSummary,
    RegistryCopy,
    ReleasedImage,
    SbomRecord,
    Shm,
    VulnRecord,
)
from imagesmith.tags import (
    INDEX_ARTIFACT_TAG,
)

if TYPE_CHECKING:
    from imagesmith.sbom import SignedSbom

from imagesmith.release.base import ReleaseCell
from imagesmith.release.evidence import Report
from imagesmith.release.facts import ImageFacts, bound_entry

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
    cluster: ClusterSummary | None = None  # the signed, passing cluster report of the digest (issue 32)
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


#: the vulnerability gate of one digest: (what the index records, the refusal reasons)
Gate = Callable[[str], tuple[VulnRecord | None, list[str]]]
#: the signed SBOM of one digest: None (none), the reason it does not count, or the SBOM
SbomFinder = Callable[[str], "SignedSbom | str | None"]


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
        cluster=result.cluster,
    )
    if result.facts is None:
        return entry
    return bound_entry(entry, result.facts, entry.validated_on)[0]


def index_not_written(outcome: Outcome, reason: str) -> None:
    """The index of this run is neither written nor published, for *reason* (a failed ``(index)`` row)."""
    outcome.cells.append(
        CellResult(cell="(index)", tag=INDEX_ARTIFACT_TAG, status="failed", reasons=[reason])
    )
    outcome.index_changed = False
