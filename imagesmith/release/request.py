"""The release command's layer between its flags and the release run: one typed request
(:class:`ReleaseRequest`, what ``imagesmith release`` was given), the rules of its flags in one place
(:func:`prepare_release`: every bad value or combination is one error naming the flag, in a fixed order,
before the project is locked or a registry asked), and the run (:func:`release_for`), whose typed result is
the :class:`~imagesmith.release.outcome.Outcome` the command prints. Finding and locking the project stay
with the command (the root's ``--project``); printing the outcome too.

The candidates command's layer too (``imagesmith candidates``): :class:`CandidatesRequest`,
:func:`prepare_candidates` (the project — handed in as ``project_of`` —, the matrix with ``--registries``,
``--only``, before a registry is asked), :func:`candidates_for` and :class:`CandidatesResult` (the rows,
``--pinned``'s references and its refusal when a cell has none).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesmith import settings
from imagesmith.errors import ConfigError, RegistryError, ReleaseError
from imagesmith.inputs import check_output_file
from imagesmith.refs import Registry
from imagesmith.registry import RegistryApi, Verify, verify_level
from imagesmith.release.base import ReleaseCell
from imagesmith.release.outcome import Outcome
from imagesmith.release.run import candidate_cells, candidate_rows, default_client, release_matrix

if TYPE_CHECKING:
    from imagesmith.project import Project
    from imagesmith.signing import PublicKey, SigningKey

#: the setting that names the index's signing key when --sign-key is not given (signing.SIGNING_KEY_ENV: that
#: module loads cryptography, which a release without keys does not need)
SIGNING_KEY_ENV = "IMAGESMITH_SIGNING_KEY"


@dataclass(frozen=True, kw_only=True)
class ReleaseRequest:
    """What ``imagesmith release`` was given: its flags as typed values (the defaults are the flags'), but
    ``--json`` (how the command prints the outcome)."""

    reports: Sequence[Path] = ()
    matrix: str | None = None
    only: Sequence[str] = ()
    dry_run: bool = False
    index_file: Path | None = None
    registries: Path | None = None
    extend_from: str | None = None
    verify: str | None = None
    trusted_keys: Sequence[Path] = ()
    sign_key: Path | None = None
    rotate_to: Path | None = None
    scan_reports: Sequence[Path] = ()


@dataclass(frozen=True, kw_only=True)
class PreparedRelease:
    """A request the flag rules accepted: the keys read (whose attestations count, that signs the index, that
    the index rotates to) and how far copies trust blobs."""

    trusted: tuple[PublicKey, ...] = ()
    sign_key: SigningKey | None = None
    rotate_to: SigningKey | None = None
    verify: Verify = "head"


def prepare_release(request: ReleaseRequest) -> PreparedRelease:
    """The rules of the flags, in one place and in this order, before the project is locked or any registry
    asked: ``--index-file`` can be written (a ConfigError naming it), every ``--trusted-key`` is a public
    key, ``--sign-key`` (else ``$IMAGESMITH_SIGNING_KEY``) a private one, ``--rotate-to`` a private key that
    is not the signing key and comes with one (ConfigErrors naming it), and ``--verify`` (else
    ``$IMAGESMITH_VERIFY``) a level (a RegistryError: exit 9, as the copies' own check of it)."""
    r = request
    if r.index_file is not None:
        check_output_file(r.index_file, "--index-file")
    trusted: tuple[PublicKey, ...] = ()
    if r.trusted_keys:
        from imagesmith import signing

        trusted = tuple(signing.load_public_key(p) for p in r.trusted_keys)
    key_file = r.sign_key or (
        Path(str(settings.get(SIGNING_KEY_ENV))) if settings.get(SIGNING_KEY_ENV) else None
    )
    key = None
    if key_file is not None:
        from imagesmith import signing

        key = signing.load_signing_key(key_file)
    successor = _successor(r.rotate_to, key)
    return PreparedRelease(
        trusted=trusted, sign_key=key, rotate_to=successor, verify=verify_level(r.verify or None)
    )


def _successor(rotate_to: Path | None, key: SigningKey | None) -> SigningKey | None:
    """``--rotate-to NEW.key``: the key the index rotates to; the current key (--sign-key) signs the rotation,
    so it is needed, and must be another key."""
    if rotate_to is None:
        return None
    if key is None:
        raise ConfigError(
            "--rotate-to needs --sign-key (or $IMAGESMITH_SIGNING_KEY): the current key signs the rotation",
            hint="pass --sign-key CURRENT.key --rotate-to NEW.key",
        )
    from imagesmith import signing

    successor = signing.load_signing_key(rotate_to)
    if successor.public.fingerprint == key.public.fingerprint:
        raise ConfigError(
            f"--rotate-to {rotate_to}: the same key as --sign-key", hint="give the new key's private half"
        )
    return successor


def release_for(
    request: ReleaseRequest,
    prepared: PreparedRelease,
    *,
    project: Project,
    echo: Callable[[str], Any] = lambda _: None,
) -> Outcome:
    """Release the cells of the request's matrix in *project* (:func:`release_matrix`) with what
    :func:`prepare_release` accepted; the index file is ``--index-file``, else the project's."""
    r = request
    return release_matrix(
        project.resolve_matrix_name(r.matrix),
        report_dirs=r.reports,
        only=r.only,
        dry_run=r.dry_run,
        index_file=r.index_file or project.release_index_file,
        registries_file=r.registries,
        extend_from=r.extend_from,
        echo=echo,
        project=project,
        verify=prepared.verify,
        trusted=prepared.trusted,
        sign_key=prepared.sign_key,
        rotate_to=prepared.rotate_to,
        scan_dirs=r.scan_reports,
    )


#: ``--matrix`` → the project it is in (the command's: the root's ``--project``, ``$IMAGESMITH_PROJECT``)
ProjectOf = Callable[[str | None], "Project"]


@dataclass(frozen=True, kw_only=True)
class CandidatesRequest:
    """What ``imagesmith candidates`` was given: its flags as typed values (the defaults are the flags')."""

    matrix: str | None = None
    only: Sequence[str] = ()
    registries: Path | None = None
    pinned: bool = False


@dataclass(frozen=True, kw_only=True)
class PreparedCandidates:
    """A request the rules accepted: the cells whose candidates are looked up."""

    cells: Sequence[ReleaseCell] = ()


@dataclass(frozen=True, kw_only=True)
class CandidatesResult:
    """Per cell: its candidate's digest and pinned reference in each registry (``candidates``' JSON rows);
    *pinned*: the command prints one pinned reference a cell."""

    rows: Sequence[Mapping[str, Any]] = ()
    pinned: bool = False

    def raise_for_missing(self) -> None:
        """``--pinned``: a cell without a candidate is a RegistryError when its registries could not be asked
        (a fault to rerun, not a missing build), else a ReleaseError (exit 8); nothing is printed then."""
        if not self.pinned:
            return
        missing = [r["cell"] for r in self.rows if not r["pinned"]]
        unasked = [e for r in self.rows if not r["pinned"] for e in r["errors"]]
        if unasked:
            raise RegistryError(
                f"no candidate found for {', '.join(missing)}: " + "; ".join(dict.fromkeys(unasked)),
                hint="rerun when the registries answer (the errors above name them and their fix)",
            )
        if missing:
            raise ReleaseError(
                f"no candidate pushed for {', '.join(missing)}",
                hint="run imagesmith build --matrix MATRIX --only CELL --push first",
            )

    def lines(self) -> list[str]:
        """What the command prints: one pinned reference a cell (``--pinned``), else the rows as JSON."""
        if self.pinned:
            return [r["pinned"][0] for r in self.rows]
        return [json.dumps(list(self.rows), indent=2)]


def prepare_candidates(request: CandidatesRequest, *, project_of: ProjectOf) -> PreparedCandidates:
    """The rules of the flags, in one place and in this order, before a registry is asked: the project
    (``--matrix`` names where it is: *project_of*), the matrix (its name in the project, its file and
    ``--registries`` read), ``--only`` (a NothingToDoError when it matches no cell: exit 3)."""
    r = request
    project = project_of(r.matrix)
    cells = candidate_cells(
        project.resolve_matrix_name(r.matrix), only=r.only, registries_file=r.registries, project=project
    )
    return PreparedCandidates(cells=cells)


def candidates_for(
    request: CandidatesRequest,
    prepared: PreparedCandidates,
    *,
    client_for: Callable[[Registry], RegistryApi] = default_client,
) -> CandidatesResult:
    """Ask each cell's registries for its candidate (:func:`candidate_rows`)."""
    return CandidatesResult(rows=candidate_rows(prepared.cells, client_for=client_for), pinned=request.pinned)
