"""Carried-entry re-verification: every entry the index carries over from before this run is checked again
against its tags and its signed attestations, registry by registry, and rebuilt from its content."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from imagesmith.attestation import (
    attested_in_registry,
)
from imagesmith.errors import ImagesmithError, ReleaseError
from imagesmith.index import (
    RegistryCopy,
    ReleasedImage,
    ValidatedOn,
)
from imagesmith.refs import Registry
from imagesmith.registry import (
    RegistryApi,
)
from imagesmith.tags import (
    cosign_attestation_tag,
)

if TYPE_CHECKING:
    from imagesmith.signing import PublicKey

from imagesmith.release.base import ReleaseCell, _with_fix
from imagesmith.release.evidence import attested_report, usable_evidence
from imagesmith.release.facts import ImageFacts, bound_entry, image_facts, index_problem
from imagesmith.release.outcome import CellResult, Outcome, index_not_written


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


def carry_over(
    images: Sequence[ReleasedImage],
    known: Mapping[str, Registry],
    client_for: Callable[[Registry], RegistryApi],
    clients: dict[str, RegistryApi],
    trusted: Sequence[PublicKey],
    outcome: Outcome,
) -> tuple[ReleasedImage, ...] | None:
    """The carried *images*, re-verified (:func:`verify_carried`) and rebuilt from their content
    (:func:`rebind_carried`); refusals and corrections go to *outcome*. None when some could not be checked
    (a registry error): then the index is neither written nor published, which *outcome* says."""
    carried = verify_carried(images, known, client_for, clients, trusted=trusted)
    outcome.cells.extend(carried.refusals)
    if carried.unverified:
        index_not_written(
            outcome,
            "carried index entries could not be re-verified, so the index was neither written nor "
            "published (rerun when the registries answer): " + "; ".join(carried.unverified),
        )
        return None
    rebound = rebind_carried(carried, known, client_for, clients)
    outcome.cells.extend(rebound.refusals)
    outcome.corrections += rebound.corrections
    if rebound.unverified:
        index_not_written(
            outcome,
            "the image configs of carried index entries could not be read, so the index was neither "
            "written nor published (rerun when the registries answer): " + "; ".join(rebound.unverified),
        )
        return None
    return rebound.images
