"""The lock command's layer between its flags and the locks (issue 31): one typed request
(:class:`LockRequest`, what ``imagesmith lock`` was given), the rules of the flags in one place
(:func:`prepare`: every bad combination is one ``ConfigError`` naming the flag, in a fixed order, before
anything is resolved), the run (:func:`lock`: the wheel locks, ``--bases`` or ``--sizes``) and one typed
result (:class:`LockResult`) the command ends with.

What only the command may do — find the project (the root's ``--project``) and hold its lock — it hands in
as functions (``project_of``, ``hold``); a run says what it does line by line through ``echo`` (the
command's ``typer.echo``). Nothing heavy is imported at module level: ``imagesmith --help`` loads this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from imagesmith.errors import ConfigError, ImagesmithError, UpstreamError, join_hints

if TYPE_CHECKING:
    from pathlib import Path

    from imagesmith.lock import LockError, LockKey
    from imagesmith.matrix import Matrix
    from imagesmith.project import Project

#: ``--matrix`` → the project it is in (the command's: the root's ``--project``, ``$IMAGESMITH_PROJECT``)
ProjectOf = Callable[[str | None], "Project"]
#: (project, command) → hold the project's lock until the command ends (the command's resources)
Hold = Callable[["Project", str], None]


class Echo(Protocol):
    """How a run says what it does: a line, on stderr with *err* (``typer.echo``)."""

    def __call__(self, message: str, *, err: bool = False) -> Any: ...


def _silent(message: str, *, err: bool = False) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class LockRequest:
    """What ``imagesmith lock`` was given: its flags as typed values (the defaults are the flags')."""

    matrix: str | None = None
    force: bool = False
    keep_versions: bool = False
    bases: bool = False
    sizes: bool = False
    no_sizes: bool = False


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A request the rules accepted: the project, what the run does, and for the wheel locks the matrix, its
    keys (torch, variant, python) and whether they get the interactive section."""

    project: Project
    mode: Literal["wheels", "bases", "sizes"]
    matrix: Matrix | None = None
    keys: Sequence[LockKey] = ()
    interactive: bool = False
    #: the extra CA of the user config (``[build] extra_ca``, ``IMAGESMITH_EXTRA_CA``): uv trusts it too
    ca: Path | None = None


@dataclass(frozen=True, kw_only=True)
class LockResult:
    """What a run did: the locks it wrote (restored, re-resolved), and the error it ends with when a lock or
    a base could not be resolved (the others were written)."""

    written: Sequence[LockKey] = ()
    failure: ImagesmithError | None = None


def prepare(request: LockRequest, *, project_of: ProjectOf, hold: Hold) -> Prepared:
    """The rules of the flags, in one place and in this order: the project (``--matrix`` names where it is;
    its lock is held from here on), ``--sizes`` with ``--no-sizes``, ``--bases`` with a flag of the wheel
    locks; then for the wheel locks the matrix and the keys it locks."""
    from imagesmith.config import load_config
    from imagesmith.matrix import load_matrix

    r = request
    project = project_of(r.matrix)
    hold(project, "lock")
    if r.sizes and r.no_sizes:
        raise ConfigError(
            "--sizes and --no-sizes contradict each other", hint="give one of them", field="--sizes"
        )
    if r.bases:
        other = [
            f
            for f, on in (("--sizes", r.sizes), ("--force", r.force), ("--keep-versions", r.keep_versions))
            if on
        ]
        if other:
            raise ConfigError(
                f"--bases and {other[0]} do not go together: --bases pins base images only",
                hint="run `imagesmith lock --bases` and the wheel lock as two commands",
                field="--bases",
            )
        return Prepared(project=project, mode="bases")
    if r.sizes:
        return Prepared(project=project, mode="sizes")
    m = load_matrix(project.resolve_matrix_name(r.matrix), project=project)
    # the interactive flavor's packages are a section of the same lock, resolved against its runtime pins
    interactive = "interactive" in m.flavors or any(i.flavor == "interactive" for i in m.include)
    ca = load_config().extra_ca
    return Prepared(
        project=project, mode="wheels", matrix=m, keys=lock_keys(m), interactive=interactive, ca=ca
    )


def lock_keys(m: Matrix) -> list[LockKey]:
    """The locks of *m*: one per (torch, variant, python) that torch release ships (a matrix whose torch is
    the base image's: one suite lock per python)."""
    from imagesmith import compat
    from imagesmith.lock import LockKey

    if m.torch.source == "base":
        return [LockKey(torch="suite", variant="any", python=p) for p in m.python.versions]
    keys: list[LockKey] = []
    combos = {(t, v, p) for t in m.torch.versions for v in m.torch.variants for p in m.python.versions}
    combos |= {(r.torch, r.variant, r.python) for r in m.include}
    for t, v, p in sorted(combos):
        release = compat.torch_release(t)
        if v in release.variants and release.python.contains(f"{p}.0"):
            keys.append(LockKey(torch=t, variant=v, python=p))
    return keys


def lock(request: LockRequest, p: Prepared, *, echo: Echo = _silent) -> LockResult:
    """Run what *p* says: pin the bases (``--bases``), record the wheel sizes (``--sizes``), or resolve each
    lock of the matrix (then record the sizes of those written, unless ``--no-sizes``)."""
    if p.mode == "bases":
        return LockResult(failure=lock_bases(p.project, request.matrix, echo=echo))
    if p.mode == "sizes":
        record_sizes(p.project, echo=echo)
        return LockResult()
    from imagesmith.lock import LockError

    failures: list[LockError] = []
    written: list[LockKey] = []
    for key in p.keys:
        try:
            if _lock_one(key, p, request, echo):
                written.append(key)
        except LockError as exc:
            failures.append(exc)
            # the whole answer (uv's last lines: an unreachable index, a conflict) under the cell it stopped
            detail = "".join(f"\n        {line}" for line in exc.message.splitlines()[1:])
            echo(f"FAILED  {key}{detail}", err=True)
    if written and not request.no_sizes:
        record_sizes(p.project, keys=written, soft=True, echo=echo)
    failure = None
    if failures:
        failure = ConfigError(
            "could not lock: " + "; ".join(e.message.splitlines()[0].rstrip(":") for e in failures),
            hint=join_hints(
                *(e.hint for e in failures),
                "until then those cells are dropped from the plan (see `imagesmith plan --explain`)",
            ),
        )
    return LockResult(written=tuple(written), failure=failure)


def _lock_one(key: LockKey, p: Prepared, request: LockRequest, echo: Echo) -> bool:
    """One lock: re-resolved keeping its versions (``--keep-versions``), kept (sealed, or given its
    interactive section, where it lacks them), restored when cut short, else resolved; True when written."""
    from imagesmith.lock import LockError, add_interactive, compile_lock, lock_path, read_lock, seal_lock

    project, interactive = p.project, p.interactive
    path = lock_path(key, project.locks_dir)
    if path.exists() and request.keep_versions:
        existing = read_lock(key, project.locks_dir)
        with_section = interactive or (existing is not None and bool(existing.interactive_pins))
        # one write: the runtime, builder and interactive pins together (a kill leaves old or new)
        compile_lock(
            key,
            lock_dir=project.locks_dir,
            keep=existing,
            interactive=(existing or True) if with_section else False,
            ca=p.ca,
        )
        echo(f"wrote   {project.rel(path)} (versions kept, hashes added)")
        return True
    if path.exists() and not request.force:
        try:
            existing = read_lock(key, project.locks_dir)
        except LockError as exc:
            if exc.problem != "cut short":
                raise
            restore_lock(key, path, project, interactive=interactive, echo=echo, ca=p.ca)
            return True
        if existing is not None and not existing.sealed:
            seal_lock(existing)
            echo(f"sealed  {project.rel(path)} (end line added; every pin as it was)")
            existing = read_lock(key, project.locks_dir)
        if interactive and existing is not None and not existing.interactive_pins:
            add_interactive(key, lock_dir=project.locks_dir, ca=p.ca)
            echo(f"added   {project.rel(path)} (interactive pins; runtime pins kept)")
        else:
            echo(f"kept    {project.rel(path)}")
        return False
    compile_lock(key, lock_dir=project.locks_dir, interactive=interactive, ca=p.ca)
    echo(f"wrote   {project.rel(path)}")
    return True


def restore_lock(
    key: LockKey,
    path: Path,
    project: Project,
    *,
    interactive: bool,
    echo: Echo = _silent,
    ca: Path | None = None,
) -> None:
    """A lock cut short (no end line): resolved again with every pin it still holds in full as a constraint
    (``--keep-versions`` on what survived), so no version it had moves; written whole."""
    from imagesmith.lock import compile_lock, salvage_lock

    text = path.read_text(encoding="utf-8", errors="replace")
    kept = salvage_lock(text, path, key)
    # its header says whether it had an interactive section (the section itself may be what was cut off)
    had = kept is not None and any(k == "interactive-command" for k, _ in kept.header)
    compile_lock(
        key,
        lock_dir=project.locks_dir,
        keep=kept,
        interactive=(kept or True) if interactive or had else False,
        ca=ca,
    )
    held = len(kept.pins + kept.builder_pins + kept.interactive_pins) if kept is not None else 0
    echo(f"restored {project.rel(path)} (it was cut short: {held} whole pins kept, the rest resolved)")


def lock_bases(project: Project, matrix: str | None, *, echo: Echo = _silent) -> ConfigError | None:
    """``imagesmith lock --bases``: re-read every base image of the matrices into bases.toml; the error of
    the bases that could not be pinned (the others were written), None when every one was."""
    import time

    from imagesmith import bases as b
    from imagesmith.config import load_config
    from imagesmith.matrix import load_matrix, load_registries
    from imagesmith.plan import matrix_bases

    config = load_config()
    known = (
        list(load_registries(project.registries_file).values()) if project.registries_file.is_file() else []
    )
    shown = f"{project.rel(project.locks_dir)}/{b.BASES_FILE}"
    lock = b.read_bases(project.locks_dir, shown)
    entries = dict(lock.entries) if lock else {}
    names = [matrix] if matrix else project.matrix_names()
    images = list(
        dict.fromkeys(image for n in names for _, image in matrix_bases(load_matrix(n, project=project)))
    )
    escrow = b.escrow_registry(project)
    failures: list[str] = []
    for image in images:
        old = entries.get(image)
        if old is not None and old.origin == "local":
            echo(f"local   {image} (made on each machine: taken by name, not pinned)")
            continue
        started = time.monotonic()
        try:
            got = b.resolve(image, config, known=known, pinned=old.digest if old is not None else None)
        except ImagesmithError as exc:
            failures.append(f"{image}: {exc.message.splitlines()[0]}")
            echo(f"FAILED  {image}: {exc.message.splitlines()[0]}", err=True)
            continue
        took = f"{(time.monotonic() - started) * 1000:.0f} ms"
        if b.own_digest(image) is not None:  # pinned by the matrix itself: checked, escrowed, no line
            new = b.BaseEntry(name=image, digest=got.digest, registry=got.where, read="")
            echo(f"served  {image} (the matrix pins it by digest: no line in {shown}, {took})")
        elif old is None:
            new = entries[image] = b.refreshed(old, image, got)
            echo(f"pinned  {image} {got.digest} (read from {got.where}, {took})")
        elif (new := b.refreshed(old, image, got)) is old:
            echo(f"kept    {image} {got.digest} ({took})")
        else:
            entries[image] = new
            echo(f"moved   {new.moved()} from {got.where} ({took})")
        if escrow is not None:
            try:
                ref, sent = b.escrow_copy(new, config, escrow, known=known)
            except ImagesmithError as exc:
                failures.append(f"{image}: escrow copy: {exc.message.splitlines()[0]}")
                echo(f"FAILED  escrow copy of {image}: {exc.message.splitlines()[0]}", err=True)
                continue
            echo(f"escrow  {ref} ({sent / 1e6:.1f} MB copied)")
    # every matrix read: a line none of them names pins nothing (a renamed or dropped base)
    if matrix is None:
        for name in sorted(set(entries) - set(images)):
            echo(f"unused  {name} (no matrix of the project names it: kept; delete the line if it is gone)")
    path = b.write_bases(project.locks_dir, entries.values())
    echo(f"wrote   {project.rel(path)} ({len(entries)} base(s))")
    if not failures:
        return None
    return ConfigError(
        "could not pin: " + "; ".join(failures),
        hint=b.LOCK_FIX + " (the other bases were written; the plan refuses a matrix with an unpinned base)",
    )


def record_sizes(
    project: Project, *, keys: Sequence[LockKey] | None = None, soft: bool = False, echo: Echo = _silent
) -> None:
    """``imagesmith lock --sizes``: wheel-sizes.toml for every lock of the project's locks folder (*keys*:
    only those, merged into the table). *soft*: an index that does not answer is a warning, not an error
    (the locks were written; the plan then treats their wheels as unsized)."""
    from imagesmith import refresh
    from imagesmith.lock import lock_keys_in, read_lock
    from imagesmith.wheelsizes import collect_sizes, merge, read_sizes, write_sizes

    if keys is None:
        keys = lock_keys_in(project.locks_dir)
    locks = [lock for k in keys if (lock := read_lock(k, project.locks_dir)) is not None]
    if not locks:
        raise ConfigError(
            f"no lock files in {project.rel(project.locks_dir)} to size",
            hint="write them first: imagesmith lock --matrix NAME",
        )
    http = refresh.Http(verify=refresh.ca_bundle(), fix=refresh.Http.PIP_FIX)
    source = refresh.LiveSource(refresh.default_index_url(), http)

    class Lister:
        def files(self, name: str) -> list[tuple[str, int]]:
            return [(f.filename, f.size) for f in source.files(name)]

    try:
        rows, missing = collect_sizes(locks, Lister())
    except UpstreamError as exc:
        if not soft:
            raise
        echo(
            f"warning: wheel sizes not recorded ({exc.message.splitlines()[0]}); the layer plan keeps only "
            "the CUDA, NCCL, torch and triton wheels apart until `imagesmith lock --sizes` runs where the "
            "index answers",
            err=True,
        )
        return
    path = write_sizes(project.locks_dir, merge(read_sizes(project.locks_dir), rows), missing)
    echo(
        f"wrote   {project.rel(path)} ({len(rows)} wheels of {len(locks)} locks, "
        f"{http.requests} index requests, {http.bytes / 1e6:.1f} MB read)"
    )
    for pin in missing:
        echo(
            f"unsized {pin}: not on the default index (its own layer if it is a CUDA, NCCL, torch, triton or "
            "+variant wheel, else in the small rest)"
        )
