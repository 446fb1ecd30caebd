"""One cell's release as it goes: the options it runs with and the state every step reads and fills in."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from imagesmith.refs import Registry
from imagesmith.registry import (
    ManifestData,
    RegistryApi,
    Verify,
)

if TYPE_CHECKING:
    from imagesmith.signing import PublicKey

from imagesmith.release.base import ReleaseCell
from imagesmith.release.blobs import VerifiedBlobs
from imagesmith.release.evidence import ClusterEvidence, Report
from imagesmith.release.outcome import CellResult, Gate, ReleaseStatus, SbomFinder
from imagesmith.validate.clusterrecord import SignedCluster


@dataclass(frozen=True, kw_only=True)
class CellOptions:
    """How one cell is released (the arguments of :func:`imagesmith.release.release_cell` but the cell, its
    evidence and its clients)."""

    dry_run: bool
    #: a client per registry, for the registries' own threads (None: the shared *clients*, one at a time)
    client_for: Callable[[Registry], RegistryApi] | None = None
    verify: Verify = "head"
    trusted: Sequence[PublicKey] = ()
    gate: Gate | None = None
    sbom_for: SbomFinder | None = None
    verified: VerifiedBlobs | None = None


@dataclass
class CellRun:
    """The release of one cell as it goes: what each step of :data:`imagesmith.release.steps.STEPS` reads and
    fills in, and :attr:`result`, the :class:`CellResult` the summary shows.

    A small mutable object rather than a frozen record replaced by every step: each field is owned by the
    step that sets it (named beside it), the runner stops at the first step that refuses or fails the cell
    (:attr:`done`), and the lists the copy threads fill (``streamed``, ``deferred``) are shared by them."""

    cell: ReleaseCell
    reports: Sequence[Report]
    clients: dict[str, RegistryApi]
    options: CellOptions
    #: the cluster reports found under --reports (check_cluster takes those that claim the digest)
    cluster_reports: Sequence[ClusterEvidence] = ()
    result: CellResult = field(init=False)
    #: find_candidate: registry → the candidate's digest (every registry that holds it), and that digest
    held: dict[str, str] = field(default_factory=dict)
    digest: str = ""
    #: collect_evidence: signed reports of the digest (local, else stored), what stored evidence lacked, and
    #: the registries whose stored attestations could not be read (a fault: rerun)
    for_digest: list[Report] = field(default_factory=list)
    store_problems: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    #: check_evidence: the passing, usable reports of the digest
    passing: list[Report] = field(default_factory=list)
    #: check_cluster: the signed cluster report behind the entry's ``cluster`` (attached in every registry);
    #: cluster_artifact: the image manifest it is attached to (read from the source)
    cluster_signed: SignedCluster | None = None
    cluster_subject: ManifestData | None = None
    #: signed_sbom: the verified SBOM envelopes stored beside the attestations
    sbom_envelopes: list[bytes] = field(default_factory=list)
    #: read_image: the registry the image is copied from, and its blobs (digest, size)
    source: Registry | None = None
    blobs: list[tuple[str, int]] = field(default_factory=list)
    #: copy: what each registry's release tag resolved to before; blobs a copy streamed (and hashed) from
    #: the source; the source's blobs to read back once the copies are done
    before: dict[str, str | None] = field(default_factory=dict)
    streamed: set[str] = field(default_factory=set)
    streamed_lock: threading.Lock = field(default_factory=threading.Lock)
    deferred: list[tuple[str, int]] = field(default_factory=list)
    #: the copy step was reached: the passing reports go back with the result (the index entry's evidence)
    promoting: bool = False
    #: a step refused or failed the cell, or the last one recorded it: the runner stops
    done: bool = False

    def __post_init__(self) -> None:
        self.result = CellResult(cell=self.cell.id, tag=self.cell.tag)

    def refuse(self, *reasons: str) -> None:
        """The cell is not released: something about it is wrong (evidence, labels, gate)."""
        self.result.status = "refused"
        self.result.reasons += reasons
        self.done = True

    def fail(self, *reasons: str) -> None:
        """The cell could not be released now: a registry fault (a rerun converges)."""
        self.result.status = "failed"
        self.result.reasons += reasons
        self.done = True

    def finish(self, status: ReleaseStatus) -> None:
        self.result.status = status
        self.done = True

    @property
    def report(self) -> Report:
        """The newest passing report: the one attached as the readable ``.validation`` artifact."""
        return max(self.passing, key=lambda r: r.date)

    @property
    def envelopes(self) -> list[bytes]:
        """The DSSE envelopes of the passing reports (stored in cosign's layout)."""
        return [r.envelope for r in self.passing if r.envelope is not None]

    @property
    def origin(self) -> Registry:
        assert self.source is not None, "read_image sets the source"
        return self.source

    def client(self, t: Registry) -> RegistryApi:
        """The client of *t* for a copy thread: its own (``client_for``) or the shared one."""
        return self.clients[t.name] if self.options.client_for is None else self.options.client_for(t)
