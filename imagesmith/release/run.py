"""A release run: the cells of a matrix released one by one, the index extended, written and published; and
the candidates of a matrix (for ``imagesmith validate``)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesmith.errors import ConfigError
from imagesmith.index import (
    ReleasedImage,
    ReleaseIndex,
    ValidatedOn,
)
from imagesmith.labelcheck import check_targets
from imagesmith.refs import Registry
from imagesmith.registry import (
    RegistryApi,
    Verify,
    client_for,
)

if TYPE_CHECKING:
    from imagesmith.project import Project
    from imagesmith.signing import PublicKey, SigningKey

from imagesmith.release.artifacts import index_signature_path
from imagesmith.release.base import ReleaseCell, _now
from imagesmith.release.blobs import VerifiedBlobs
from imagesmith.release.carried import _stored_validated_on, carry_over
from imagesmith.release.checks import _candidate_digests, released_at, released_digests
from imagesmith.release.evidence import ClusterEvidence, Report, collect_cluster_reports, collect_reports
from imagesmith.release.facts import bound_entry, dated_as_before, entry_changes
from imagesmith.release.gates import sbom_finder, vulnerability_gate
from imagesmith.release.outcome import CellResult, Gate, Outcome, SbomFinder, index_entry
from imagesmith.release.publish import _base_index, _index_repos, merged_index, publish, write_index
from imagesmith.release.state import CellOptions, CellRun
from imagesmith.release.steps import STEPS, release_cell, run_steps

default_client = client_for


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
    gate: Gate | None = None,
    sbom_for: SbomFinder | None = None,
    verified: VerifiedBlobs | None = None,
    rotate_to: SigningKey | None = None,
    cluster_reports: Sequence[ClusterEvidence] = (),
) -> Outcome:
    """Release *cells* (see the package docstring) on the evidence of *reports* signed by *trusted* keys;
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
    if not dry_run:  # issue 34: a link or non-regular file where release writes: refused up front
        check_targets(
            [index_file, index_signature_path(index_file), index_file.with_name(index_file.name + ".pub")]
        )
    verified = verified if verified is not None else VerifiedBlobs.default()
    base = _base_index(
        index_file,
        cells,
        clients,
        extend_from=extend_from,
        echo=echo,
        keys=[sign_key.public] if sign_key is not None else [],
    )
    entries: list[ReleasedImage] = []
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
            cluster_reports=cluster_reports,
        )
        verified.save()
        if result.status in ("refused", "failed"):
            options = CellOptions(
                dry_run=dry_run,
                client_for=client_for,
                verify=verify,
                trusted=trusted,
                gate=gate,
                sbom_for=sbom_for,
                verified=verified,
            )
            finished = _finish_interrupted(cell, result, base, reports, clients, options, cluster_reports)
            if finished is not None:
                outcome.cells.append(result)
                result, passing = finished
                verified.save()
        outcome.cells.append(result)
        if (
            result.digest
            and result.status in ("promoted", "up-to-date", "would-promote")
            and result.registries
        ):
            stored = _stored_validated_on(cell, result, clients, trusted) if not dry_run else ()
            entries.append(_released_entry(cell, result, passing, stored, base, outcome))
    fresh = {e.tag for e in entries}
    carried = carry_over(
        [image for image in base.images if image.tag not in fresh],
        known,
        client_for,
        clients,
        trusted,
        outcome,
    )
    if carried is None:
        return outcome
    merged = merged_index(base, carried, entries, _index_repos(cells))
    # issue 34: a rotation names its successor inside the signed bytes; an index without one names none
    successor = rotate_to.public.fingerprint if rotate_to is not None and sign_key is not None else ""
    merged = replace(merged, successor_key=successor)
    outcome.index_changed = merged != base or not index_file.is_file()
    if not merged.images:  # nothing released, now or before: no index to write or publish
        outcome.index_file = None
        outcome.index_changed = False
        return outcome
    if dry_run:
        return outcome
    if write_index(merged, base, index_file, index_valid_for, outcome):
        publish(index_file, _index_repos(cells), clients, sign_key, outcome, echo, rotate_to=rotate_to)
    return outcome


def _finish_interrupted(
    cell: ReleaseCell,
    candidate: CellResult,
    base: ReleaseIndex,
    reports: Sequence[Report],
    clients: dict[str, RegistryApi],
    options: CellOptions,
    cluster_reports: Sequence[ClusterEvidence] = (),
) -> tuple[CellResult, list[Report]] | None:
    """Issue 37: the release of a digest an earlier run promoted (the release tag moved onto it) but did not
    record (killed before its index was written), when *candidate*, the cell's candidate now, was not
    released (a newer build not validated yet, say). That digest goes through every step a candidate does
    (signed passing evidence verified again, labels, entry; a registry the tag did not reach yet gets it),
    and *candidate*'s refusal says what stays released. None when the tag points at nothing new: no tag, the
    digest the index records (carried and re-verified as any entry), the candidate's, or several digests."""
    tagged = released_digests(cell, clients)
    recorded = base.by_tag(cell.tag)
    others = set(tagged.values()) - {candidate.digest, recorded.digest if recorded is not None else None}
    if len(others) != 1 or (recorded is not None and recorded.digest in tagged.values()):
        return None
    (digest,) = others
    steps = (("find released", released_at(digest, tagged)), *STEPS[1:])
    run = run_steps(
        CellRun(
            cell=cell, reports=reports, clients=clients, options=options, cluster_reports=cluster_reports
        ),
        steps,
    )
    if run.result.status not in ("promoted", "up-to-date", "would-promote"):
        return None
    candidate.reasons.insert(
        0,
        f"the newer candidate {candidate.digest or '(none)'} is not validated: {cell.tag} stays on {digest}, "
        "which an interrupted release promoted, and that is what the index records",
    )
    return run.result, (run.passing if run.promoting else [])


def _released_entry(
    cell: ReleaseCell,
    result: CellResult,
    passing: Sequence[Report],
    stored: Sequence[ValidatedOn],
    base: ReleaseIndex,
    outcome: Outcome,
) -> ReleasedImage:
    """The index entry of a released cell. ``released``: when the tag first moved to this digest (a rerun
    that moved no tag keeps it); ``validated_on``: every verified, passing attestation of the digest (the
    local ones and those *stored* by earlier runs), never a previous index's word; a rerun without
    ``--scan-reports`` keeps what the release recorded of the same digest; a field the old entry of the
    digest said otherwise is a correction of *outcome*."""
    old = base.by_tag(cell.tag)
    kept = old is not None and old.digest == result.digest and not result.tag_moves
    entry = index_entry(cell, result, passing, old.released if old is not None and kept else _now())
    if result.facts is not None:
        entry = bound_entry(entry, result.facts, (*entry.validated_on, *stored))[0]
    if old is not None and old.digest == entry.digest:
        entry = replace(
            entry,
            vulnerabilities=entry.vulnerabilities or old.vulnerabilities,
            sbom=entry.sbom or old.sbom,
            cluster=entry.cluster or old.cluster,  # a rerun without the cluster folder keeps its record
            validated_on=dated_as_before(entry.validated_on, old.validated_on),
        )
        outcome.corrections += [
            f"entry {entry.tag}: {c} (from its image config)" for c in entry_changes(old, entry)
        ]
    return entry


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
    scan_dirs: Sequence[Path] = (),
    rotate_to: SigningKey | None = None,
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
    cluster_reports = collect_cluster_reports(report_dirs, keys)
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
        gate=gate,
        sbom_for=sbom_finder(scan_dirs, keys) if scan_dirs else None,
        rotate_to=rotate_to,
        cluster_reports=cluster_reports,
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
    cells = candidate_cells(matrix, only=only, registries_file=registries_file, project=project)
    return candidate_rows(cells, client_for=client_for)


def candidate_cells(
    matrix: str | Path,
    *,
    only: Sequence[str] = (),
    registries_file: Path | None = None,
    project: Project | None = None,
) -> list[ReleaseCell]:
    """The cells of *matrix* that *only* selects (the matrix and the registries file read, ``--only``
    matched), before any registry is asked."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan

    m = load_matrix(matrix, project=project, registries_file=registries_file)
    plan = build_plan(m, project=project).select(list(only))
    return [ReleaseCell.from_plan(pc) for pc in plan.cells]


def candidate_rows(
    cells: Sequence[ReleaseCell], *, client_for: Callable[[Registry], RegistryApi] = default_client
) -> list[dict[str, Any]]:
    """Per cell of *cells*: its candidate's digest and pinned reference in each of its registries, asked."""
    rows = []
    for cell in cells:
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
