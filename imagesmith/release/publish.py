"""The index a run extends (the project's file, or the registry named by ``--extend-from``), and the new
index written, signed and published."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesmith.errors import ConfigError, ImagesmithError, ReleaseError
from imagesmith.index import (
    ReleasedImage,
    ReleaseIndex,
    dump_index,
    index_location,
    issued,
    load_index,
    parse_index,
    read_signed_index_artifact,
    renewal_due,
    save_index,
)
from imagesmith.indextrust import renter_line
from imagesmith.labelcheck import write_file
from imagesmith.project import DEFAULT_INDEX_VALID_DAYS
from imagesmith.refs import Registry
from imagesmith.registry import (
    RegistryApi,
)
from imagesmith.tags import (
    INDEX_ARTIFACT_TAG,
)

if TYPE_CHECKING:
    from imagesmith.signing import PublicKey, SigningKey

from imagesmith.release.artifacts import (
    IndexPublicationError,
    _signed_same,
    index_signature_path,
    publish_index_everywhere,
)
from imagesmith.release.base import ReleaseCell, _now, _with_fix
from imagesmith.release.outcome import CellResult, Outcome, index_not_written


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


def merged_index(
    base: ReleaseIndex,
    carried: Sequence[ReleasedImage],
    entries: Sequence[ReleasedImage],
    repos: Sequence[Registry],
) -> ReleaseIndex:
    """*base* with its *carried* entries (re-verified, rebuilt) and this run's *entries*; its registry hosts
    and the repositories it is published to (issue 25: inside the signed bytes, pick refuses it read from any
    other repository — a copy moved there by someone who can push)."""
    merged = replace(base, images=tuple(carried)).merged(list(entries), generated=base.generated)
    return replace(
        merged,
        registries=tuple(sorted({c.host for image in merged.images for c in image.registries})),
        published_to=tuple(sorted({*base.published_to, *(index_location(t.host, t.repo) for t in repos)})),
    )


def write_index(
    merged: ReleaseIndex,
    base: ReleaseIndex,
    index_file: Path,
    index_valid_for: datetime.timedelta | None,
    outcome: Outcome,
) -> bool:
    """Write *merged* to *index_file* when it changed, or is past half its validity (issue 25: then with a
    new serial and expiry); what is written must read back (never a file the next release cannot load).
    False when it was not written (*outcome* says why)."""
    valid_for = index_valid_for or datetime.timedelta(days=DEFAULT_INDEX_VALID_DAYS)
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    if not (outcome.index_changed or renewal_due(merged, valid_for, now)):
        return True
    outcome.index_changed = True
    merged = issued(merged, previous=base.serial, valid_for=valid_for, now=now)
    try:
        parse_index(dump_index(merged), source=str(index_file))
    except ConfigError as exc:
        index_not_written(outcome, f"the index was neither written nor published: {_with_fix(exc)}")
        return False
    save_index(merged, index_file)
    return True


def sign_index(
    index_file: Path,
    body: bytes,
    sign_key: SigningKey,
    outcome: Outcome,
    rotate_to: SigningKey | None = None,
) -> tuple[bytes, bytes]:
    """The DSSE envelope of the index *body* (kept when the one beside the file signs the same bytes: ECDSA
    signatures differ each time) and the public key beside it (``index.json.pub``, the artifact's key
    layer: what pick pins on first use)."""
    from imagesmith import signing

    signature = index_signature_path(index_file)
    # issue 34: a rotation is signed by both keys; the successor's key is the one published beside it
    envelope = signing.sign_envelope_by(
        body, signing.INDEX_PAYLOAD_TYPE, [sign_key, *([rotate_to] if rotate_to is not None else [])]
    )
    if not signature.is_file() or not _signed_same(signature, body, rotate_to or sign_key):
        write_file(signature, envelope + b"\n")
    else:
        envelope = signature.read_bytes().strip()
    outcome.index_signature = str(signature)
    public = (rotate_to or sign_key).public.pem
    published_key = index_file.with_name(index_file.name + ".pub")
    if not published_key.is_file() or published_key.read_bytes() != public:
        write_file(published_key, public)
    return envelope, public


def publish(
    index_file: Path,
    repos: Sequence[Registry],
    clients: Mapping[str, RegistryApi],
    sign_key: SigningKey | None,
    outcome: Outcome,
    echo: Callable[[str], Any],
    *,
    rotate_to: SigningKey | None = None,
) -> None:
    """Sign the index file's content (with *sign_key*) and publish it to every repository of *repos*
    (:func:`publish_index_everywhere`); a failure is a failed ``(index)`` row of *outcome*."""
    body = dump_index(load_index(index_file)).encode()
    envelope: bytes | None = None
    public: bytes | None = None
    if sign_key is not None:
        envelope, public = sign_index(index_file, body, sign_key, outcome, rotate_to)
        # issue 34: the one line a renter pastes, the key's fingerprint as its trust root
        echo(renter_line(load_index(index_file).published_to, (rotate_to or sign_key).public.fingerprint))
    else:
        echo(
            "warning: the index is not signed (no --sign-key / $IMAGESMITH_SIGNING_KEY): "
            "pick and imagesmith index refuse it (unless --no-verify)"
        )
    try:
        outcome.index_published += publish_index_everywhere(repos, clients, body, envelope, public)
    except IndexPublicationError as exc:
        outcome.cells.append(
            CellResult(cell="(index)", tag=INDEX_ARTIFACT_TAG, status="failed", reasons=[exc.message])
        )
