"""The promotion of a cell, in two phases: the image and its evidence copied into every registry (blobs read
back once), then the release tag moved everywhere and read back; each a step over :class:`CellRun`."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, cast

from imagesmith.attestation import (
    attach_attestations,
    has_attestations,
)
from imagesmith.errors import ImagesmithError, ReleaseError, Side
from imagesmith.refs import Registry
from imagesmith.registry import (
    PromotionError,
    PromotionTarget,
    RegistryApi,
    Verify,
    blob_digest,
    copy_blob,
    copy_manifest,
    promote,
    verify_blobs,
)
from imagesmith.release.artifacts import attach_report, attached_report_ok
from imagesmith.release.base import ReleaseCell, _with_fix
from imagesmith.release.clusterartifact import attach_cluster, cluster_problem
from imagesmith.release.state import CellRun
from imagesmith.tags import (
    attestation_tag,
    cluster_tag,
    cosign_attestation_tag,
)


class _There(NamedTuple):
    """What one registry holds of the release before its copy (phase 1)."""

    has_manifest: bool
    has_report: bool
    has_att: bool
    has_cluster: bool  # the signed cluster report is served whole (or the entry has none)
    tagged: str | None  # what the release tag resolves to now
    unread: list[tuple[str, int]]  # the blobs not yet read back there


def copy(run: CellRun) -> None:
    """Phase 1, in every registry of the cell (one thread each when each has its own clients): copy the
    manifest by digest and its blobs, read each blob back once, store the attestations, the report and the
    signed cluster report (read back whole); never the release tag. One registry failing leaves every
    release tag where it was. With ``--dry-run``, what would be done is the result."""
    run.promoting = True
    cell, res, digest = run.cell, run.result, run.digest
    if run.options.client_for is None or len(cell.targets) == 1:
        results = [_prepare(run, t) for t in cell.targets]
    else:  # registries are independent: one thread each, every thread with its own clients
        with ThreadPoolExecutor(max_workers=min(8, len(cell.targets))) as pool:
            results = list(pool.map(lambda t: _prepare(run, t), cell.targets))
    run.before = before = {t.name: tagged for t, (_, tagged, _) in zip(cell.targets, results, strict=True)}
    res.tag_moves = [name for name, tagged in before.items() if tagged != digest]
    failed = False
    for steps, _, error in results:
        res.steps += steps
        if error is not None:
            failed = True
            res.reasons.append(error.message)
    if failed:  # phase 1 failed somewhere: no release tag is moved anywhere
        res.registries = {name: d for name, d in before.items() if d is not None}
        run.fail(
            f"no release tag was moved: {cell.tag} is put only once every registry of the cell "
            f"({', '.join(t.name for t in cell.targets)}) holds the image and its evidence; rerun when the "
            "failing registry answers (what was copied is kept, untagged), or remove it from the cell's "
            "registries"
        )
    elif run.options.dry_run:
        res.registries = {name: d for name, d in before.items() if d == digest}
        run.finish("would-promote" if res.steps else "up-to-date")


def _prepare(run: CellRun, t: Registry) -> tuple[list[str], str | None, ReleaseError | None]:
    """Phase 1 in one registry (its own clients when parallel): (steps, what the tag resolves to now,
    error)."""
    c, cell = run.client(t), run.cell
    try:
        there = _what_is_there(run, c, t)
    except ImagesmithError as exc:
        return [], None, _phase_one_error(f"{t.name}: {_with_fix(exc)}", t, cell, exc)
    todo = _todo(run, t, there)
    if run.options.dry_run or not todo:
        return todo, there.tagged, None
    try:
        _copy_into(run, c, t, there)
    except ImagesmithError as exc:
        error = _phase_one_error(f"promotion to {t.name} failed: {_with_fix(exc)}", t, cell, exc)
        return todo, there.tagged, error
    return todo, there.tagged, None


def _what_is_there(run: CellRun, c: RegistryApi, t: Registry) -> _There:
    digest, memory = run.digest, run.options.verified
    has_manifest = c.manifest_digest(t.repo, digest) is not None
    return _There(
        has_manifest=has_manifest,
        has_report=has_manifest and attached_report_ok(c, t.repo, digest),
        has_att=has_manifest and has_attestations(c, t.repo, digest, run.envelopes + run.sbom_envelopes),
        has_cluster=run.cluster_signed is None
        or run.result.cluster is None
        or (has_manifest and cluster_problem(c, t.repo, digest, run.result.cluster) is None),
        tagged=c.manifest_digest(t.repo, run.cell.tag),
        unread=[(d, n) for d, n in run.blobs if memory is None or not memory.has(c.host, d)],
    )


def _todo(run: CellRun, t: Registry, there: _There) -> list[str]:
    """The steps phase 1 takes in *t*, as the summary names them."""
    digest, source = run.digest, run.origin
    todo = []
    if not there.has_manifest:
        todo.append(f"copy manifest {digest[:19]}… and its blobs from {source.name} to {t.name}")
    if there.unread:
        todo.append(
            f"read back {len(there.unread)} blob(s) of {digest[:19]}… in {t.name} and check their sha256"
        )
    if not there.has_att:
        todo.append(
            f"store {len(run.envelopes)} signed attestation(s)"
            + (" and the signed SBOM" if run.sbom_envelopes else "")
            + f" as {t.image}:{cosign_attestation_tag(digest)}"
        )
    if not there.has_report:
        todo.append(f"attach {run.report.path} as {t.image}:{attestation_tag(digest)}")
    if not there.has_cluster:
        todo.append(f"attach the signed cluster report as {t.image}:{cluster_tag(digest)}")
    if there.tagged != digest:
        was = f" (was {there.tagged[:19]}…)" if there.tagged else ""
        todo.append(f"tag {t.image}:{run.cell.tag} → {digest[:19]}…" + was)
    return todo


def _copy_into(run: CellRun, c: RegistryApi, t: Registry, there: _There) -> None:
    """Copy the image and its evidence into *t*: every blob read back there once (a damaged copy is repaired
    or named), the manifest put by digest and served, the attestations and the report stored."""
    digest, source, memory, verify = run.digest, run.origin, run.options.verified, run.options.verify
    src = run.client(source)
    unread = list(there.unread)
    if not there.has_manifest and t.name != source.name and c.host != src.host and unread:
        # blobs first, one by one: a missing one is streamed from the source (whose bytes are hashed on the
        # way) and read back here; one already here is read back; either way once
        fresh = {d for d, _ in unread}
        for d, size in run.blobs:
            level: Verify = "full" if d in fresh else verify
            if copy_blob(src, source.repo, c, t.repo, d, size=size, verify=level):
                with run.streamed_lock:
                    run.streamed.add(d)
            if d in fresh and memory is not None:
                memory.add(c.host, d)
        unread.clear()
    if not there.has_manifest:  # (every blob there now, unless mounted within one registry: HEADs)
        copy_manifest(src, source.repo, digest, c, t.repo, verify=verify)
    if there.has_manifest and verify == "full":  # the nightly: read back what an earlier run copied
        verify_blobs(c, t.repo, src.get_manifest(source.repo, digest), side=Side.DESTINATION)
        if memory is not None:  # every blob was just read and hashed: not read twice
            for d, _ in unread:
                memory.add(c.host, d)
        unread.clear()
    if t.name == source.name:
        run.deferred.extend(unread)  # after the copies: what they streamed from here is not read again
        unread.clear()
    for d, size in unread:  # once per (registry, blob): a damaged copy is repaired or named
        copy_blob(src, source.repo, c, t.repo, d, size=size, verify="read")
        if memory is not None:
            memory.add(c.host, d)
    _store_evidence(run, c, t, there)


def _store_evidence(run: CellRun, c: RegistryApi, t: Registry, there: _There) -> None:
    digest = run.digest
    if not there.has_att:
        attach_attestations(c, t.repo, digest, run.envelopes)
        if run.sbom_envelopes:
            from imagesmith.sbom import SPDX_PREDICATE_TYPE

            attach_attestations(c, t.repo, digest, run.sbom_envelopes, SPDX_PREDICATE_TYPE)
    if not there.has_report:
        attach_report(c, t.repo, c.get_manifest(t.repo, digest), run.report)
    if not there.has_cluster:  # put, then read back whole and verified (or a RegistryError naming it)
        assert run.cluster_signed is not None
        assert run.cluster_subject is not None
        assert run.result.cluster is not None
        attach_cluster(c, t.repo, run.cluster_subject, run.cluster_signed, run.result.cluster)
    if c.manifest_digest(t.repo, digest) != digest:  # served by digest, checked, before any tag
        raise ReleaseError(
            f"{t.name}: {t.image}@{digest} is not served after the copy",
            hint=f"check registry {t.name}'s storage, then rerun the release",
        )


def read_back(run: CellRun) -> None:
    """The source's own copy of each blob: read back unless a copy just streamed (and hashed) it."""
    source, memory = run.origin, run.options.verified
    client = run.clients[source.name]
    try:
        for d, size in run.deferred:
            if d not in run.streamed:
                blob_digest(client, source.repo, d, side=Side.SOURCE, size=size)
            if memory is not None:
                memory.add(client.host, d)
    except ImagesmithError as exc:
        run.result.registries = {name: d for name, d in run.before.items() if d is not None}
        run.fail(
            f"promotion from {source.name} failed: {_with_fix(exc)}; no release tag was moved (rerun once "
            "the registry's copy is repaired)"
        )


def promote_tag(run: CellRun) -> None:
    """Phase 2: the release tag on the digest in every registry, each read back (rolled back on failure)."""
    try:
        _tag_everywhere(run.cell, run.digest, run.clients, run.before)
    except TagPromotionError as exc:
        run.result.registries = {name: d for name, d in run.before.items() if d is not None} | {
            t.name: run.digest for t in exc.left
        }
        run.fail(exc.message)


def record(run: CellRun) -> None:
    """Every registry of the cell serves the release tag on the digest."""
    run.result.registries = {t.name: run.digest for t in run.cell.targets}
    run.finish("promoted" if run.result.steps else "up-to-date")


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
