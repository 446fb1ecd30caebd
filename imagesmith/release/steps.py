"""The release of one cell as a list of named steps over one :class:`CellRun` (``STEPS``), and its runner."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from imagesmith.refs import Registry
from imagesmith.registry import (
    RegistryApi,
    Verify,
)

if TYPE_CHECKING:
    from imagesmith.signing import PublicKey

from imagesmith.release import checks, promotion
from imagesmith.release.base import ReleaseCell
from imagesmith.release.blobs import VerifiedBlobs
from imagesmith.release.evidence import ClusterEvidence, Report
from imagesmith.release.outcome import CellResult, Gate, SbomFinder
from imagesmith.release.state import CellOptions, CellRun

#: one step of a cell's release: reads and fills in the run; refuses or fails it to stop the others
Step = Callable[[CellRun], None]

#: the release of one cell, in order (a new gate is one function and one row here). Each step is a
#: function of :mod:`imagesmith.release.checks` or :mod:`imagesmith.release.promotion`, tested alone in
#: tests/unit/test_release_steps.py.
STEPS: Final[tuple[tuple[str, Step], ...]] = (
    ("find candidate", checks.find_candidate),
    ("collect evidence", checks.collect_evidence),
    ("check evidence", checks.check_evidence),
    ("check cluster evidence", checks.check_cluster),
    ("scan gate", checks.scan_gate),
    ("signed SBOM", checks.signed_sbom),
    ("read image", checks.read_image),
    ("cluster artifact", checks.cluster_artifact),
    ("check labels", checks.check_labels),
    ("check entry", checks.check_entry),
    ("copy", promotion.copy),
    ("read back", promotion.read_back),
    ("promote", promotion.promote_tag),
    ("record", promotion.record),
)


def run_steps(run: CellRun, steps: Sequence[tuple[str, Step]] = STEPS) -> CellRun:
    """Run *steps* over *run* until one refuses or fails the cell (or the last records it)."""
    for _, step in steps:
        step(run)
        if run.done:
            break
    return run


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
    cluster_reports: Sequence[ClusterEvidence] = (),
) -> tuple[CellResult, list[Report]]:
    """Promote one cell (or say why not): :data:`STEPS` over one :class:`CellRun`. Returns the result and the
    passing reports of the digest (none when the cell was refused before anything was copied).

    Every blob of the digest is read back and hashed in every registry of the cell once (remembered in
    *verified*, by registry host and digest): a damaged blob a registry already held (even of the right size,
    which the default ``--verify head`` trusts) is repaired or named, and no release tag moves.

    Evidence is a signed attestation that verifies with a *trusted* key and whose subject is the candidate's
    digest: from *reports* (read by :func:`collect_reports`), else stored in one of the cell's registries.
    *cluster_reports* (read by :func:`imagesmith.release.evidence.collect_cluster_reports`): the signed
    cluster reports, a passing one of which for the digest becomes the entry's ``cluster``."""
    options = CellOptions(
        dry_run=dry_run,
        client_for=client_for,
        verify=verify,
        trusted=trusted,
        gate=gate,
        sbom_for=sbom_for,
        verified=verified,
    )
    run = run_steps(
        CellRun(cell=cell, reports=reports, clients=clients, options=options, cluster_reports=cluster_reports)
    )
    return run.result, (run.passing if run.promoting else [])
