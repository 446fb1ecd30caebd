"""The checks of a cell's release, before anything moves: its candidate, its evidence, the gates, the image's
own labels against the plan and the index entry it would get; each a step over :class:`CellRun`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from imagesmith.attestation import (
    attested_in_registry,
)
from imagesmith.errors import ImagesmithError, ReleaseError
from imagesmith.index import (
    SbomRecord,
)
from imagesmith.labelcheck import label_differences
from imagesmith.refs import Registry
from imagesmith.registry import (
    RegistryApi,
)
from imagesmith.tags import (
    cosign_attestation_tag,
)

if TYPE_CHECKING:
    from imagesmith.signing import PublicKey

from imagesmith.release.base import ReleaseCell, _now, _with_fix
from imagesmith.release.blobs import _blobs_of
from imagesmith.release.clusterartifact import cluster_manifest
from imagesmith.release.evidence import (
    ClusterEvidence,
    Report,
    attested_report,
    usable_evidence,
)
from imagesmith.release.facts import image_facts, index_problem
from imagesmith.release.outcome import index_entry
from imagesmith.release.state import CellRun
from imagesmith.validate.clusterrecord import SignedCluster


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


def find_candidate(run: CellRun) -> None:
    """Every registry of the cell that holds ``<cell>-candidate`` holds the same digest: that is the digest
    released (refused when none holds it, or they differ)."""
    cell = run.cell
    candidates, errors = _candidate_digests(cell, run.clients)
    held = {name: d for name, d in candidates.items() if d}
    if not held:
        run.refuse(
            f"no candidate {cell.candidate} in any registry of the cell "
            f"({', '.join(t.name for t in cell.targets)})"
            + (f" ({'; '.join(errors)})" if errors else "")
            + f": run imagesmith build --matrix {cell.matrix} --only {cell.id} --push"
        )
        return
    if len(set(held.values())) > 1:
        run.refuse(
            "the candidate tag points at different digests: "
            + ", ".join(f"{n}={d}" for n, d in sorted(held.items()))
            + f": rerun imagesmith build --matrix {cell.matrix} --only {cell.id} --push"
        )
        return
    run.held = held
    run.digest = run.result.digest = next(iter(held.values()))


def released_digests(cell: ReleaseCell, clients: dict[str, RegistryApi]) -> dict[str, str]:
    """Registry → the digest the cell's release tag resolves to now (registries that lack the tag, or cannot
    be asked, are left out: this only finds what an interrupted run may have promoted)."""
    found: dict[str, str] = {}
    for t in cell.targets:
        try:
            digest = clients[t.name].manifest_digest(t.repo, cell.tag)
        except ImagesmithError:
            continue
        if digest:
            found[t.name] = digest
    return found


def released_at(digest: str, tagged: dict[str, str]) -> Callable[[CellRun], None]:
    """A first step that releases *digest*, the one the release tag already points at in the registries of
    *tagged*, instead of the candidate: how a rerun finishes a release interrupted before its index."""

    def find_released(run: CellRun) -> None:
        """The digest is the one the release tag resolves to (an earlier run promoted it)."""
        run.held = {name: d for name, d in tagged.items() if d == digest}
        run.digest = run.result.digest = digest

    return find_released


def collect_evidence(run: CellRun) -> None:
    """The signed reports of the digest: from the local evidence, else (with trusted keys) the attestations
    an earlier run stored beside the digest, verified again — the first registry with usable ones."""
    run.for_digest = [r for r in run.reports if r.evidence and r.digest == run.digest]
    if run.for_digest or not run.options.trusted:
        return
    for t in run.cell.targets:
        if _stored_evidence(run, t):
            break


def _stored_evidence(run: CellRun, t: Registry) -> bool:
    """Add the attestations stored in *t* to the run's evidence; True when one of them can stand behind the
    entry."""
    digest = run.digest
    try:
        good, bad = attested_in_registry(run.clients[t.name], t.repo, digest, run.options.trusted)
    except ImagesmithError as exc:
        run.unreadable.append(
            f"the attestations stored in {t.name} ({t.image}:{cosign_attestation_tag(digest)}) "
            f"could not be read: {_with_fix(exc)}"
        )
        return False
    run.store_problems += bad
    where = f"{t.image}:{cosign_attestation_tag(digest)}"
    usable, unusable = usable_evidence(good, source=where)
    run.store_problems += unusable  # stored evidence that cannot stand behind an entry: named, not counted
    run.for_digest += usable
    for att in good:
        r = attested_report(att, source=where)
        if r.verdict == "failed" or r.checks_verdict == "failed":
            run.for_digest.append(r)
    return bool(usable)


def check_evidence(run: CellRun) -> None:
    """A passing signed report that proves something, and none that failed: a pass whose checks do not bear
    it out (or that records no GPU host) refuses, one failing host holds the digest back, unreadable stored
    evidence is a fault, and no evidence names why each candidate report does not count."""
    digest = run.digest
    passing = [r for r in run.for_digest if r.passed]
    failing = [r for r in run.for_digest if r.verdict == "failed" or r.checks_verdict == "failed"]
    unusable_passes = [why for r in passing if (why := r.unusable_pass())]
    if (
        unusable_passes
    ):  # a signed pass that proves nothing: refused, naming the report, before anything moves
        run.refuse(
            *unusable_passes,
            f"validate {digest} again on a GPU host with this imagesmith (imagesmith validate "
            f"{run.cell.targets[0].image}@{digest} --report DIR --sign-key KEY records the GPU inventory and "
            "a verdict its checks bear out), and pass only that folder with --reports",
        )
    elif failing:  # one failing host is enough to hold the digest back, whatever passed elsewhere
        run.refuse(
            *(
                f"validation of {digest} failed ({r.path}): {'; '.join(r.failed[:3]) or r.reason}"
                for r in failing
            )
        )
    elif not passing and run.unreadable:  # the evidence may be there: a registry fault, not a refusal
        run.fail(
            *run.unreadable,
            "no local attestation of the candidate digest: rerun when the registry answers, or pass the "
            "validation folder with --reports",
        )
    elif not passing:
        run.refuse(
            *_no_evidence_reasons(
                run.cell, digest, run.for_digest, run.reports, run.store_problems, run.options.trusted
            )
        )
    else:
        run.passing = passing


def scan_gate(run: CellRun) -> None:
    """The vulnerability gate (imagesmith.vulngate), when the run has one: a scan of exactly this digest."""
    gate = run.options.gate
    if gate is None:
        return
    try:
        run.result.vulnerabilities, refusals = gate(run.digest)
    except ImagesmithError as exc:  # an unreadable or hostile report refuses this cell, naming the file
        run.result.vulnerabilities, refusals = None, [_with_fix(exc)]
    if refusals:
        run.refuse(*refusals)


def signed_sbom(run: CellRun) -> None:
    """The signed SBOM of the digest (imagesmith sbom --sign-key), when the run looks for one: stored beside
    the attestations; one that does not verify is never stored, and refuses the cell."""
    if run.options.sbom_for is None:
        return
    found = run.options.sbom_for(run.digest)
    if isinstance(found, str):
        run.refuse(f"signed SBOM {found} (make it again: imagesmith sbom IMAGE@DIGEST --sign-key KEY)")
        return
    if found is not None:
        from imagesmith.sbom import SPDX_PREDICATE_TYPE

        run.sbom_envelopes.append(found.envelope)
        run.result.sbom = SbomRecord(
            format="spdx",
            predicate_type=SPDX_PREDICATE_TYPE,
            digest=found.digest,
            packages=found.packages,
        )


def read_image(run: CellRun) -> None:
    """What the image says of itself (:func:`image_facts`: its config's labels, read from a registry holding
    the candidate) and its blobs (to read back), unless ``--verify off``."""
    digest = run.digest
    source = run.source = next(t for t in run.cell.targets if run.held.get(t.name) == digest)
    client = run.clients[source.name]
    try:
        run.result.facts = image_facts(client, source.repo, digest)
    except ReleaseError as exc:
        run.refuse(_with_fix(exc))
        return
    except ImagesmithError as exc:
        run.fail(f"reading the image config of {digest} from {source.name} failed: {_with_fix(exc)}")
        return
    try:
        run.blobs = _blobs_of(client, source.repo, digest) if run.options.verify != "off" else []
    except ImagesmithError as exc:
        run.fail(f"reading the manifest of {digest} from {source.name} failed: {_with_fix(exc)}")


def check_labels(run: CellRun) -> None:
    """The image config's labels name this cell's torch, torchvision, CUDA and Python (the plan's)."""
    cell, facts = run.cell, run.result.facts
    assert facts is not None, "read_image sets the facts"
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
    # issue 34: min_driver, arch, shm labels vs the plan's cell; torch/CUDA the suite recorded vs the labels
    differ += label_differences(cell, facts, run.passing)
    if differ:
        run.refuse(
            f"the image config of the candidate {run.digest} says {', '.join(differ)}: it is not this cell's "
            f"image; rebuild it: imagesmith build --matrix {cell.matrix} --only {cell.id} --push"
        )


def check_entry(run: CellRun) -> None:
    """The index entry the cell would get passes the index's own parser: never promote what the index writer
    would then refuse to read."""
    probe = index_entry(
        run.cell, replace(run.result, registries=dict.fromkeys(run.held, run.digest)), run.passing, _now()
    )
    problem = index_problem(probe)
    if problem is not None:
        run.refuse(
            f"the index entry for {run.digest} would be invalid: {problem.message}; nothing was promoted"
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
        run.cluster_signed = newest


def cluster_artifact(run: CellRun) -> None:
    """The artifact of the signed cluster report (``sha256-<hex>.cluster``, subject the image manifest the
    source serves): its manifest digest becomes the entry's ``cluster.artifact``, so the signed index binds
    the envelope the copy attaches in every registry."""
    signed = run.cluster_signed
    if signed is None or run.result.cluster is None:
        return
    source = run.origin
    try:
        run.cluster_subject = subject = run.clients[source.name].get_manifest(source.repo, run.digest)
    except ImagesmithError as exc:
        run.fail(f"reading the manifest of {run.digest} from {source.name} failed: {_with_fix(exc)}")
        return
    artifact = cluster_manifest(subject, signed).digest
    run.result.cluster = replace(run.result.cluster, artifact=artifact)


def _problem(e: ClusterEvidence, digest: str) -> str:
    if e.problem is not None:
        return e.problem
    signed = e.signed
    assert signed is not None, "evidence without a problem is signed"
    report = signed.report  # about *digest*: a file claiming it beside an envelope for another is a problem
    if report.verdict != "passed" or report.promises_verdict != "passed":
        failed = "; ".join(report.failed()[:3]) or report.verdict_reason or "no promise checked"
        return f"the cluster validation of {digest} failed ({failed})"
    if not signed.published_safe:  # signed before validate redacted it: it names the nodes' hosts
        return (
            "its signed report names the nodes' hosts, addresses or login users (signed by an imagesmith "
            "that did not redact it), so it cannot be attached to the image in the registries: validate "
            "the cluster again with this imagesmith (it signs the report redacted; cluster.json keeps the "
            "names)"
        )
    empty = [n.name for n in report.nodes if n.gpus == 0]
    if empty:
        return (
            f"node {empty[0]} lists no GPU (nodes[].gpus): a cluster report of GPU-less nodes says nothing "
            "about GPUs, so it cannot stand behind a GPU image"
        )
    return ""
