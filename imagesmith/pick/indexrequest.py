"""The index command's layer (``imagesmith index``, issue 31) and the trust every reader of a release index
decides by: one typed request (:class:`IndexRequest`, what ``imagesmith index`` was given), the rules of its
flags in one place (:func:`prepare`: the source, then how the index is trusted — :func:`index_trust`, which
``pick`` and ``validate --baseline-from`` use too —, each bad value or combination one ``ConfigError`` naming
the flag, before anything is fetched), the run (:func:`show`: the index fetched and verified as pick does)
and one typed result (:class:`IndexResult`) the command prints.

What only the command may read it hands in as a function: the project the renter named (``named_project``:
the root's ``--project``, ``$IMAGESMITH_PROJECT``; never one found by walking up), and how a warning and a
note reach stderr (``warn``, ``note``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from imagesmith import inputs, settings
from imagesmith.config import load_config
from imagesmith.errors import ConfigError
from imagesmith.index import ReleaseIndex, dump_index
from imagesmith.indextrust import (
    IndexKey,
    Trust,
    is_fingerprint,
    parse_fingerprint,
    pem_fingerprint,
    split_root,
)
from imagesmith.pick.fetching import fetch_index

if TYPE_CHECKING:
    from imagesmith.project import Project

#: the project the renter named (``--project``, ``$IMAGESMITH_PROJECT``), else None (the command's)
NamedProject = Callable[[], "Project | None"]
#: the setting that names the release index when no source is given
INDEX_ENV = "IMAGESMITH_INDEX"


def _none() -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class IndexRequest:
    """What ``imagesmith index`` was given: its flags as typed values (the defaults are the flags'), but
    ``--json`` (how the command prints the result)."""

    source: str | None = None
    refresh: bool = False
    insecure: bool = False
    verify_key: Path | None = None
    no_verify: bool = False
    key_fingerprint: str | None = None
    trust_first_use: bool = False


@dataclass(frozen=True, kw_only=True)
class PreparedIndex:
    """A request the rules accepted: the source (SOURCE, else ``$IMAGESMITH_INDEX``) and how it is trusted."""

    source: str
    trust: Trust


@dataclass(frozen=True, kw_only=True)
class IndexResult:
    """The release index read, and the source it was read from."""

    source: str
    index: ReleaseIndex

    def json(self) -> str:
        """The index as the publisher's JSON (``--json``)."""
        return dump_index(self.index)

    def lines(self) -> list[str]:
        """The listing: the index, its registries, one line an image."""
        idx = self.index
        out = [
            f"{self.source}: {len(idx.images)} image(s), generated {idx.generated}"
            + (f", serial {idx.serial}, expires {idx.expires}" if idx.serial else ""),
            "  registries (the publisher's hosts): "
            + (", ".join(idx.registries) or "not listed (an index written before issue 17)"),
        ]
        for img in idx.images:
            hosts = ", ".join(f"{r.name}" for r in img.registries)
            out.append(
                f"  {img.tag}  torch {img.torch} CUDA {img.cuda} py{img.python}  driver >= "
                f"{img.min_driver.full} (minor {img.min_driver.minor_version})  {img.digest[:19]}…  [{hosts}]"
            )
        return out


def prepare(request: IndexRequest, *, named_project: NamedProject = _none) -> PreparedIndex:
    """The rules of the flags, in one place and in this order, before anything is fetched: a source (SOURCE,
    else ``$IMAGESMITH_INDEX``), then the trust (:func:`index_trust`: ``--verify-key``/``--key-fingerprint``
    with ``--no-verify``, the fingerprint, the key file)."""
    r = request
    source = r.source or settings.get(INDEX_ENV)
    if not source:
        raise ConfigError(
            "no release index given",
            hint="pass FILE|URL|oci://HOST/REPO[:TAG] or set IMAGESMITH_INDEX",
            field="SOURCE",
        )
    trust = index_trust(
        r.verify_key,
        r.no_verify,
        fingerprint=r.key_fingerprint,
        first_use=r.trust_first_use,
        named_project=named_project,
    )
    return PreparedIndex(source=str(source), trust=trust)


def show(
    request: IndexRequest,
    prepared: PreparedIndex,
    *,
    warn: Callable[[str], None] = lambda _: None,
    note: Callable[[str], None] = lambda _: None,
) -> IndexResult:
    """The release index of the request, fetched and trusted as :func:`prepare` decided."""
    idx = fetch_trusted(
        prepared.source,
        prepared.trust,
        refresh=request.refresh,
        insecure=request.insecure,
        warn=warn,
        note=note,
    )
    return IndexResult(source=prepared.source, index=idx)


def fetch_trusted(
    source: str,
    trust: Trust,
    *,
    refresh: bool,
    insecure: bool,
    warn: Callable[[str], None],
    note: Callable[[str], None],
) -> ReleaseIndex:
    """The release index of *source* for pick and index: verified as *trust* says (the key's fingerprint
    noted), or — *trust* of ``--no-verify`` — unchecked, with a warning on every run."""
    idx = fetch_index(source, refresh=refresh, warn=warn, insecure=insecure, trust=trust, note=note)
    if not trust.verify:
        warn(
            f"--no-verify: the release index {split_root(source)[0]} is used without checking its signature, "
            "serial or expiry: whoever can change it chooses the image this host runs"
        )
    return idx


def index_trust(
    flag: Path | None,
    no_verify: bool,
    *,
    fingerprint: str | None = None,
    first_use: bool = False,
    named_project: NamedProject = _none,
) -> Trust:
    """How pick and index trust the release index (:class:`imagesmith.indextrust.Trust`): the key of
    --verify-key, else the fingerprint of --key-fingerprint (issue 34: the trust root), else
    $IMAGESMITH_INDEX_KEY, else ``[release] index_key`` of the user config (or its older ``[pick]
    verify_key``), else of the project's imagesmith.toml **only when named** (*named_project*: ``--project``,
    $IMAGESMITH_PROJECT: a walked-up file in a parent folder never chooses the key); each a key or its
    fingerprint. None → the key pinned for the source; with ``--trust-first-use`` the key published beside it
    (first use). ``--no-verify``: nothing is checked (the caller warns)."""
    if no_verify:
        if flag is not None or fingerprint is not None:
            given = "--verify-key" if flag is not None else "--key-fingerprint"
            raise ConfigError(
                f"{given} and --no-verify contradict each other",
                hint="drop --no-verify: the index is then checked with the key given",
                field="--no-verify",
            )
        return Trust(verify=False)
    root = parse_fingerprint(fingerprint, origin="--key-fingerprint") if fingerprint is not None else None
    base = Trust(
        first_use=first_use, fingerprint=root, fingerprint_origin="--key-fingerprint" if root else ""
    )
    if flag is not None:
        return replace(base, key=IndexKey(read_key(flag, "--verify-key"), f"--verify-key {flag}"))
    if root is not None:
        return base
    config = load_config()
    named: tuple[Path | str, str] | None = None
    if config.index_key is not None:
        named = (config.index_key, config.index_key_origin or config.source)
    else:
        project = named_project()
        if project is not None and project.index_key is not None:
            named = (project.index_key, f"{project.file}: release.index_key")
    if named is None:
        return Trust(first_use=first_use)
    value, origin = named
    if isinstance(value, Path):
        return Trust(key=IndexKey(read_key(value, origin), f"{origin} ({value})"), first_use=first_use)
    if is_fingerprint(value):
        return Trust(
            fingerprint=parse_fingerprint(value, origin=origin),
            fingerprint_origin=origin,
            first_use=first_use,
        )
    return Trust(key=IndexKey(value.encode(), origin), first_use=first_use)


def read_key(path: Path, origin: str) -> bytes:
    """The PEM text of the key file *path* named by *origin*; parsed only when a signature is checked (a
    pick from a cached index verified before loads no crypto), so an unusable file is said here already."""
    try:  # a FIFO, a device, a folder or a huge file is one error, never a read that blocks
        data = inputs.read_user_file(
            path,
            origin,
            hint=f"point {origin} at the PEM public key file (a `.pub` that `imagesmith keygen` wrote)",
            max_bytes=1 << 20,
        )
    except ConfigError:
        if path.exists():
            raise
        data = b""  # missing: load_public_key below says so, naming where the path came from
    if pem_fingerprint(data) is None:
        from imagesmith import signing

        signing.load_public_key(path, origin)  # says why: unreadable, not PEM, not a key imagesmith takes
    return data
