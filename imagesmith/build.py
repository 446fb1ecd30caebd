"""Build orchestration: skip what is already pushed, stage contexts, build, push once, copy, verify, tag.

For each cell of a plan:

1. **Skip.** With ``--push``: every registry of the cell is asked for ``fp-<fingerprint[:20]>-<suite[:12]>``
   (``suite``: sha256 of the baked imagesmith wheel, see :func:`suite_digest`); when all of
   them hold it (same digest) and the candidate tag points at it, nothing is built or pushed. When the
   fingerprint is there but a candidate tag is not, only the tag is put (no build). Without ``--push``: a
   local image whose ``io.imagesmith.fingerprint`` label equals the cell's is reused. ``--force`` disables
   both.
2. **Stage.** The committed ``dockerfiles/<matrix>/<cell>/`` (checked against what the matrices render) is
   copied into a staging folder and ``sources/`` (from the source cache only) and ``wheels/`` (imagesmith's
   own wheel, built from this checkout) are filled. The extra CA is no file of the context.
3. **Build** through :class:`~imagesmith.engine.Engine`; base images are build args with the registry-mirror
   map applied; the extra CA is the BuildKit secret ``imagesmith-ca`` (:data:`CA_SECRET`), in no layer. Every
   pip install reads BuildKit's cache mount ``imagesmith-wheelhouse``: a wheel is downloaded once per engine
   (``imagesmith/templates/parts.j2`` pip_install). Cells whose lock has no sha256 for every pin are refused
   (``--allow-unhashed`` lets them through, installed without ``--require-hashes``).
4. **Push** (``--push``): the engine pushes (compresses and uploads) once, to the first registry, under a
   staging tag ``staging-<fingerprint[:20]>``; every other registry is fed from that copy through the
   registry API (verified blob copy/mount + manifest by digest, which tags nothing), then tagged with the
   staging tag too. Only when every registry serves the same manifest digest are the final tags put:
   ``fp-<fingerprint[:20]>`` and ``<cell id>-candidate`` (the release step promotes a validated candidate to
   ``<cell id>``), each tag in every registry before the next (:func:`put_final_tags`): a failure there rolls
   back what this run moved where the registry allows it, else says which registries hold which tag ("rerun
   converges"). No final tag ever names a manifest with a missing or unverified blob; the staging tag only
   ever points at a complete manifest (the registry accepts a manifest only once its blobs are there).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from imagesmith import atomicio, inputs, projectlock
from imagesmith.config import UserConfig, cache_root
from imagesmith.distribution import suite_wheel
from imagesmith.engine import BuildEvent, ContainerEngine, Engine, PushResult, needs_buildkit
from imagesmith.errors import (
    BuildError,
    ConfigError,
    Fault,
    ImagesmithError,
    PushError,
    RegistryError,
    Side,
    join_hints,
)
from imagesmith.matrix import MIRROR_PROFILES, Matrix
from imagesmith.plan import BuildPlan, Cell
from imagesmith.refs import ImageRef, Registry
from imagesmith.registry import (
    ManifestData,
    PromotionError,
    PromotionTarget,
    RegistryApi,
    Verify,
    client_for,
    copy_manifest,
    promote,
    verify_blobs,
    verify_level,
)
from imagesmith.sources import cached_archive, nccl_tests_archive
from imagesmith.tagcheck import check_held, image_config
from imagesmith.tags import candidate_tag, fingerprint_tag, local_ref, staging_tag

if TYPE_CHECKING:
    from imagesmith.project import Project

FINGERPRINT_LABEL = "io.imagesmith.fingerprint"
#: the BuildKit secret id of the extra CA certificate (``RUN --mount=type=secret,id=…`` in parts.j2)
CA_SECRET = "imagesmith-ca"
RETRY_HINT = "no final tag was moved; run the same build again (blobs already pushed are not sent twice)"
SUITE_LABEL = "io.imagesmith.suite"


def suite_digest() -> str:
    """sha256 of imagesmith's own reproducible wheel (made from the installed distribution): the validation
    suite baked into every image.

    The plan's fingerprint covers the rendered files, pins and sources, but not imagesmith's code, which
    changes without a version bump; the skip decision therefore keys on both (tags and the
    ``io.imagesmith.suite`` label), so a changed suite rebuilds its (small, last) layers instead of keeping a
    stale one.
    """
    return suite_wheel().sha256


#: a cell's build status (a Literal: a comparison with a value it never takes is a mypy error)
BuildStatus = Literal["pending", "built", "pushed", "skipped", "retagged", "failed"]


@dataclass
class CellOutcome:
    """One row of the summary (``--summary FILE`` writes these as JSON)."""

    cell: str
    tag: str
    fingerprint: str
    suite: str = ""
    status: BuildStatus = "pending"
    reason: str = ""
    #: built because a base moved (``reason`` says which, from which digest to which)
    base_moved: bool = False
    image_id: str = ""
    digest: str = ""
    size_uncompressed: int = 0
    size_compressed: int = 0
    duration_s: float = 0.0
    build_s: float = 0.0
    push_s: float = 0.0
    steps: int = 0
    cached_steps: int = 0
    bytes_pushed_engine: int = 0
    bytes_copied_api: int = 0
    #: the engine's push: layers it uploaded, layers the registry had already (another cell's, or mounted)
    layers_pushed: int = 0
    layers_existing: int = 0
    #: per layer of the manifest, bottom first: {"index", "digest", "size" (compressed), "pushed", "step"}
    #: ("step": the Dockerfile instruction that made it, from the image config's history)
    layers: list[dict[str, Any]] = field(default_factory=list)
    registries: dict[str, dict[str, str]] = field(default_factory=dict)
    #: base image (as the matrix names it) → the reference the build pulled it by (``…@sha256:…``)
    bases: dict[str, str] = field(default_factory=dict)
    #: what the build says about its bases: a moved base, an escrow copy used, a base made locally
    notes: list[str] = field(default_factory=list)
    error: str = ""


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    push: bool = False
    force: bool = False
    jobs: int = 1
    config: UserConfig = field(default_factory=UserConfig)
    staging_root: Path | None = None
    keep_going: bool = False
    #: extra wheels copied into every context's wheels/ (cells that install with --no-index, e.g. torch from
    #: the base image on an offline GPU host)
    wheels_dir: Path | None = None
    #: the project whose dockerfiles/ are built (default: the one found from the matrix file)
    project: Project | None = None
    #: the registry client of a target (a seam: tests pass fakes, as release's ``client_for`` does); the
    #: engine's push to the first registry takes its credentials from that client too
    client_for: Callable[[Registry], RegistryApi] = client_for
    #: how far copies trust blobs (imagesmith.registry.Verify): ``head`` by default, ``full`` in the nightly
    verify: Verify = field(default_factory=lambda: verify_level())
    #: build cells whose lock lacks sha256 hashes (installed without --require-hashes)
    allow_unhashed: bool = False
    #: where each base image is pulled from (:class:`BaseSources`); made by run_build when not given
    bases: BaseSources | None = None

    def project_of(self, matrix: Matrix) -> Project:
        if self.project is not None:
            return self.project
        from imagesmith.project import discover

        return discover(near=matrix.path)


Reporter = Callable[[str, str, BuildEvent | None], None]


def _no_report(cell: str, phase: str, event: BuildEvent | None) -> None:
    return None


# -- context staging -------------------------------------------------------------------------------
def imagesmith_wheel() -> Path:
    """imagesmith's own wheel, made from the running installation (see :mod:`imagesmith.distribution`),
    written once into the cache under its digest.
    """
    wheel = suite_wheel()
    return wheel.write(cache_root() / "wheels" / wheel.sha256[:24])


def check_context_current(matrix: Matrix, project: Project) -> None:
    """RenderError unless the committed dockerfiles/ of *matrix* are what the templates render now."""
    from imagesmith.plan import build_plan
    from imagesmith.render import check_rendered, matrix_dir, render_plan

    plan = build_plan(matrix, project=project)
    check_rendered(render_plan(plan, project), [matrix_dir(matrix, project)], project)


RUN_PREFIX = "run-"


@contextlib.contextmanager
def run_staging(root: Path) -> Iterator[Path]:
    """A staging folder of this run alone under *root* (``<cache>/contexts/run-XXXX``), so that two builds
    sharing one cache (two projects, or two copies of one) never stage into the same folder. The run holds
    the folder's lock (:func:`imagesmith.projectlock.hold`) while it builds and removes the folder at the end;
    folders of runs that were killed (their lock let go by the kernel) are removed by the next run."""
    with contextlib.ExitStack() as held:
        with projectlock.hold(root, command="build"):  # briefly: a cleaner sees only held or dead folders
            for left in sorted(root.glob(RUN_PREFIX + "*")):
                if _run_alive(left):
                    continue
                shutil.rmtree(left, ignore_errors=True)
            folder = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=root))
            held.callback(shutil.rmtree, folder, ignore_errors=True)
            held.enter_context(projectlock.hold(folder, command="build", wait=0))
        yield folder


def _run_alive(folder: Path) -> bool:
    """Whether a build holds *folder*'s lock (a flock of our own open file: conflicts in this process too)."""
    try:
        fd = os.open(folder / projectlock.LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # not ours to probe: kept
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def stage_context(
    cell: Cell,
    matrix: Matrix,
    config: UserConfig,
    staging_root: Path,
    wheels_dir: Path | None = None,
    *,
    project: Project,
) -> Path:
    """Copy the cell's committed context and fill sources/ and wheels/. Returns the staged folder.

    The extra CA (``config.extra_ca``) is not copied: the build gets it as a secret
    (:func:`build_secrets`)."""
    src = project.path(cell.publish.context)
    if not (src / "Dockerfile").is_file():
        raise BuildError(
            f"cell {cell.id}: {project.rel(src)}/Dockerfile does not exist in project {project.root}",
            hint=f"run `imagesmith render --matrix {cell.matrix}`",
        )
    dest = staging_root / cell.matrix / cell.id
    refused: list[tuple[OSError, Path]] = []  # the first file the disk refused, with its errno

    def copy(source: str, target: str) -> object:
        try:
            return shutil.copy2(source, target)
        except OSError as exc:
            refused.append((exc, Path(target)))
            raise

    try:
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(src, dest, copy_function=copy)
        archive = cached_archive(nccl_tests_archive(matrix.nccl_tests), matrix=cell.matrix)
        copy(str(archive), str(dest / "sources" / archive.name))
        wheel = imagesmith_wheel()
        copy(str(wheel), str(dest / "wheels" / wheel.name))
        if wheels_dir is not None:
            for wheel in sorted(wheels_dir.glob("*.whl")):
                if not wheel.name.startswith("imagesmith-"):
                    copy(str(wheel), str(dest / "wheels" / wheel.name))
    except OSError as exc:  # shutil.Error (copytree's list of failures) too: one error naming the file
        first, path = refused[0] if refused else (exc, Path(exc.filename or dest))
        error = atomicio.storage_error(
            first, path, left=f"the staging folder {dest} was removed, nothing was built"
        )  # before the removal: the free space is what the copy met
        shutil.rmtree(dest, ignore_errors=True)
        raise error from None
    return dest


def build_secrets(config: UserConfig) -> dict[str, Path]:
    """The BuildKit secrets of a cell's build: the extra CA (checked: certificates only, no private key)."""
    return {CA_SECRET: config.extra_ca} if config.extra_ca is not None else {}


class BaseSources:
    """Where this run pulls each base image from, decided once per image (a HEAD per base, thread-safe).

    A base the project's ``bases.toml`` pins: ``mirror/path:tag@digest`` when the registry (through the
    registry-mirror map) still serves that digest, else the escrow copy by digest (``[bases] escrow``), saying
    so; neither → BuildError. A base marked ``origin = "local"`` (made on this machine): by name, as without
    a lock, and the summary says so. A base of a project without a base lock: by name, through the mirror
    map.
    """

    def __init__(
        self,
        config: UserConfig,
        *,
        escrow: Registry | None = None,
        known: Sequence[Registry] = (),
        client_for: Callable[[Registry], RegistryApi] = client_for,
    ) -> None:
        self.config, self.escrow, self.known, self.client_for = config, escrow, tuple(known), client_for
        self._done: dict[str, tuple[str, str | None]] = {}
        self._lock = threading.Lock()

    def ref(self, cell: Cell, image: str) -> tuple[str, str | None]:
        """(reference to pull *image* by, a note for the summary or None)."""
        with self._lock:
            if image not in self._done:
                self._done[image] = self._decide(
                    image, dict(cell.bases.base_digests).get(image), image in cell.bases.base_local
                )
            return self._done[image]

    def _decide(self, image: str, digest: str | None, local: bool) -> tuple[str, str | None]:
        from imagesmith import bases

        mapped = self.config.apply_mirror(image)
        if digest is None and not local:
            return mapped, None
        if (
            digest is None
        ):  # made on this machine (or only the engine holds it): by name, exactly as without a lock
            return mapped, f'base {image} is made locally (bases.toml origin = "local"): built by name'
        pull = bases.pull_ref(image, self.config)
        client = self.client_for(bases.endpoint(pull, self.known))
        try:
            served = client.manifest_digest(pull.path, digest)
            why = "" if served == digest else f"{pull.registry} no longer serves {pull.path}@{digest}"
        except ImagesmithError as exc:
            why = f"{pull.registry} is unreachable ({exc.message.splitlines()[0]})"
        if not why:  # a base the matrix names by digest carries it already
            return (mapped if bases.own_digest(image) else f"{mapped}@{digest}"), None
        if self.escrow is None:
            raise BuildError(
                f"base {image}: {why}; the project has no escrow copy ([bases] escrow in imagesmith.toml)",
                hint="run `imagesmith lock --bases` to pin the base the registry serves now (then "
                '`imagesmith render`), or set [bases] escrow = "<registry>" so lock --bases keeps a copy of '
                "every base",
            )
        repo = bases.escrow_repo(self.escrow, image)
        try:
            held = self.client_for(self.escrow).manifest_digest(repo, digest)
        except ImagesmithError as exc:
            # both down: neither "holds no copy" (not known) nor "run lock --bases" (it needs them too)
            raise BuildError(
                f"base {image}: {why}; and the escrow registry {self.escrow.name} ({self.escrow.host}), "
                f"which keeps {repo}@{digest}, is unreachable too ({exc.message.splitlines()[0]})",
                hint=f"neither serves the base now: check the network (and credentials) of {pull.registry} "
                f"and of the escrow {self.escrow.host}, then rerun the build; either one answering is enough",
                registry=self.escrow.name,
                digest=digest,
            ) from None
        if held != digest:
            raise BuildError(
                f"base {image}: {why}; escrow registry {self.escrow.name} ({self.escrow.host}) holds no "
                f"{repo}@{digest}",
                hint="run `imagesmith lock --bases` where the base's registry is reachable (it copies every "
                "pinned base into the escrow), or pin the base the registry serves now",
            )
        ref = bases.escrow_ref(self.escrow, image, digest)
        return ref, f"base {image}: {why}; built from the escrow copy {ref}"

    def check_mirrored(self, cells: Sequence[Cell], held: Callable[[str], bool]) -> None:
        """Before any build: every base a cell pulls *by name through a registry mirror* is served there or
        held by the engine (*held*: the reference is in its image store). A mirror without the base (a
        machine that reaches no Docker Hub, where the mirror holds only the bases made for it) is one
        BuildError naming the base, the mirror and the fixes — not BuildKit's "not found" mid-build. Bases
        pinned by digest are left to :meth:`ref` (it falls back to the escrow copy); a mirror that does not
        answer is left to the build (its error names the host)."""
        from imagesmith import bases

        users: dict[str, list[str]] = {}
        for cell in cells:
            pinned = dict(cell.bases.base_digests)
            for image in dict.fromkeys(
                (cell.bases.base_image, cell.bases.builder_image, cell.bases.devel_image)
            ):
                if image and image not in pinned:
                    users.setdefault(image, []).append(cell.id)
        for image, ids in users.items():
            ref = ImageRef.parse(image)
            prefix = self.config.mirror_for(ref.registry)
            if prefix is None:
                continue
            mapped = self.config.apply_mirror(image)
            if held(mapped):
                continue
            pull = bases.pull_ref(image, self.config)
            try:
                served = self.client_for(bases.endpoint(pull, self.known)).manifest_digest(
                    pull.path, pull.digest or pull.tag or "latest"
                )
            except ImagesmithError:
                continue
            if served is not None:
                continue
            shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
            raise BuildError(
                f"base image {image} (cell{'s' if len(ids) > 1 else ''} {shown}) is not in the registry "
                f"mirror: the registry-mirror map sends {ref.registry} to {prefix}, which does not serve "
                f"{mapped}, and the Docker engine holds no image of that name — the build would stop at "
                "BuildKit's 'not found'",
                hint=f"seed the mirror: import a root filesystem of {image} and push it as {mapped} (as "
                "scripts/debian-base.sh does for debian:RELEASE); or point the map at a registry that serves "
                f"it (--registry-mirror {ref.registry}=HOST/PREFIX, IMAGESMITH_REGISTRY_MIRRORS or "
                "[registry_mirrors] of the user config); or leave those cells out with --only "
                "(a matrix's cells on another base, e.g. '*-debian12')",
                host=pull.registry,
                repository=pull.path,
                fault=Fault.NOT_FOUND,
                cell=ids[0],
            )


def build_args(cell: Cell, config: UserConfig, sources: BaseSources | None = None) -> dict[str, str]:
    """The build args of *cell*: base images by the reference *sources* decides (by digest where the
    project's base lock pins them), package mirrors, the torch index."""
    profile = MIRROR_PROFILES[cell.publish.mirror_build]
    sources = sources or BaseSources(config)
    images = {"BASE_IMAGE": cell.bases.base_image, "BUILDER_IMAGE": cell.bases.builder_image}
    if cell.bases.devel_image:
        images["DEVEL_IMAGE"] = cell.bases.devel_image
    args = {arg: sources.ref(cell, image)[0] for arg, image in images.items()}
    if profile.pip_index_url:
        args["IMAGESMITH_PIP_INDEX_URL"] = profile.pip_index_url
    if profile.apt_root:
        args["IMAGESMITH_APT_MIRROR"] = profile.apt_root
    if cell.stack.index_url and not cell.stack.pypi_default:
        args["TORCH_INDEX_URL"] = cell.stack.index_url
    return args


# -- registries ------------------------------------------------------------------------------------
def _where(target: Registry, exc: ImagesmithError) -> str:
    """*exc*'s message, naming *target* in front unless the error is about it already (its ``registry``)."""
    if exc.registry == target.name:
        return exc.message
    return f"registry {target.name} ({target.host}): {exc.message}"


def _wrapped(target: Registry, exc: ImagesmithError, hint: str = "") -> PushError:
    """*exc* as a PushError naming *target*, its own fix line kept first."""
    return PushError(_where(target, exc), hint=join_hints(exc.hint, hint or RETRY_HINT))


def put_final_tags(
    targets: Sequence[Registry],
    clients: dict[str, RegistryApi],
    manifest: ManifestData,
    tags: Sequence[str],
) -> None:
    """Put *tags* on *manifest* in every registry, all-or-nothing as far as users can see
    (:func:`imagesmith.registry.promote`).

    Each tag goes to every registry before the next tag is put, and everything is read back. When a step
    fails, what this run moved is rolled back (a tag that pointed elsewhere is put back on its old manifest; a
    new tag is deleted where the registry allows deleting a tag alone); what cannot be rolled back is named
    in the error — "tagged in r1, not in r2 — rerun converges" — and ``imagesmith candidates`` shows it.
    """
    by_target = [PromotionTarget(name=t.name, repo=t.repo, client=clients[t.name], ref=t) for t in targets]
    try:
        promote(by_target, tags, manifest.digest, manifest=manifest)
    except PromotionError as exc:
        t = cast("Registry", exc.target.ref)
        if exc.step == "before" and exc.cause is not None:  # read before anything moved
            raise _wrapped(t, exc.cause) from exc
        first: ImagesmithError
        if exc.cause is None:
            first = PushError(
                f"registry {t.name} ({t.host}): {t.image}:{exc.tag} is {exc.got}, expected {manifest.digest}",
                hint="another build moved the tag meanwhile; " + RETRY_HINT,
            )
        else:
            first = _wrapped(t, exc.cause) if exc.step == "put" else exc.cause
        if not exc.left:
            how = (
                "the tags this run had put were rolled back: no final tag moved"
                if exc.moved
                else "no tag moved"
            )
            raise PushError(f"{first.message} ({how})", hint=join_hints(first.hint, RETRY_HINT)) from exc
        held = {u.name: [tag for v, tag in exc.left if v.name == u.name] for u in targets}
        tagged = [f"{name} ({', '.join(ts)})" for name, ts in held.items() if ts]
        untagged = [name for name, ts in held.items() if len(ts) < len(tags)]
        state = (
            f"tagged in {', '.join(tagged)}, not in {', '.join(untagged)} — rerun converges"
            if untagged
            else f"tagged in {', '.join(tagged)} — rerun converges"
        )
        raise PushError(
            f"{first.message}\n  final tags partly moved ({state}; the registries cannot delete a tag "
            "alone, so it was not rolled back)",
            hint=join_hints(
                first.hint,
                "run the same build again: it puts the missing tags (`imagesmith candidates` shows the mixed "
                "state meanwhile; `imagesmith release` refuses a cell whose candidates differ)",
            ),
        ) from exc


def registry_state(
    cell: Cell, clients: dict[str, RegistryApi], suite: str
) -> dict[str, tuple[str | None, str | None]]:
    """Per registry: (digest of the fp tag, digest of the candidate tag)."""
    out = {}
    for t in cell.publish.registries:
        c = clients[t.name]
        repo = t.repo
        out[t.name] = (
            c.manifest_digest(repo, fingerprint_tag(cell.publish.fingerprint, suite)),
            c.manifest_digest(repo, candidate_tag(cell)),
        )
    return out


def push_cell(
    cell: Cell,
    engine: ContainerEngine,
    clients: dict[str, RegistryApi],
    outcome: CellOutcome,
    report: Reporter,
    suite: str = "",
    verify: Verify = "head",
) -> None:
    """Engine push to the first registry (staging tag), verified API copy to the rest (staging tag there
    too), check that every registry serves the digest, then put the final tags everywhere
    (:func:`put_final_tags`)."""
    first, rest = cell.publish.registries[0], cell.publish.registries[1:]
    staging_ref = f"{first.image}:{staging_tag(cell.publish.fingerprint, suite)}"
    report(cell.id, f"push → {first.name}", None)
    start = time.monotonic()
    src = clients[first.name]
    # the engine pushes with the first registry's own credential chain (chosen by its kind; a refused
    # short-lived token is refreshed once, as the API client does)
    src_repo = first.repo
    pushed = engine.push(
        staging_ref,
        credentials=src.resolve_credentials(),
        refresh=src.refresh_credentials,
        registry_name=f"{first.name} ({first.host})",
        probe=lambda: src.probe_write(src_repo),
    )
    try:
        served = src.manifest_digest(src_repo, staging_tag(cell.publish.fingerprint, suite))
        manifest = src.get_manifest(src_repo, pushed.digest)
        size_compressed = manifest.compressed_size()
        if verify == "full":  # the engine trusts blobs the registry says it has: read them all back
            report(cell.id, f"verify {first.name}", None)
            verify_blobs(src, src_repo, manifest, side=Side.SOURCE)
    except ImagesmithError as exc:
        raise _wrapped(first, exc) from exc
    if served != pushed.digest:
        raise PushError(
            f"registry {first.name} ({first.host}) serves {served} for {staging_ref}, "
            f"the engine pushed {pushed.digest}",
            hint="another push raced this one, or the registry rewrites manifests; no final tag was moved: "
            "run the build again",
        )
    outcome.digest = manifest.digest
    outcome.size_compressed = size_compressed
    # compressed bytes of the uploaded layers (the push stream's progress counts uncompressed bytes)
    outcome.bytes_pushed_engine = _uploaded_bytes(engine, staging_ref, manifest, pushed)
    outcome.layers_pushed, outcome.layers_existing = pushed.layers_pushed, pushed.layers_existing
    try:
        outcome.layers = layer_report(
            engine, staging_ref, manifest, pushed, _history(src, src_repo, manifest)
        )
    except ImagesmithError as exc:
        raise _wrapped(first, exc) from exc
    for t in rest:
        report(cell.id, f"copy → {t.name}", None)
        try:
            digest, sent = copy_manifest(
                src,
                src_repo,
                manifest.digest,
                clients[t.name],
                t.repo,
                put_as=staging_tag(cell.publish.fingerprint, suite),
                verify=verify,
            )
        except ImagesmithError as exc:
            raise _wrapped(t, exc) from exc
        outcome.bytes_copied_api += sent
        if digest != manifest.digest:
            raise PushError(
                f"registry {t.name}: copied manifest digest {digest} ≠ {manifest.digest}",
                hint="the registry rewrote the manifest: push to it directly, or drop it from the cell; "
                + RETRY_HINT,
            )
    # verify: every registry serves the manifest by digest and under the staging tag before any final tag
    for t in cell.publish.registries:
        try:
            got = clients[t.name].manifest_digest(t.repo, manifest.digest)
            staged = clients[t.name].manifest_digest(t.repo, staging_tag(cell.publish.fingerprint, suite))
        except ImagesmithError as exc:
            raise _wrapped(t, exc) from exc
        if got != manifest.digest or staged != manifest.digest:
            raced = (
                f" under {staging_tag(cell.publish.fingerprint, suite)} (it names {staged}: another build "
                "of the same cell pushed meanwhile)"
                if got == manifest.digest and staged
                else ""
            )
            raise PushError(
                f"registry {t.name} ({t.host}) does not serve {manifest.digest}{raced} after the push",
                hint=RETRY_HINT,
            )
    report(cell.id, "tag", None)
    put_final_tags(
        cell.publish.registries,
        clients,
        manifest,
        (fingerprint_tag(cell.publish.fingerprint, suite), candidate_tag(cell)),
    )
    for t in cell.publish.registries:
        outcome.registries[t.name] = {
            "ref": f"{t.image}:{candidate_tag(cell)}",
            "fingerprint_ref": f"{t.image}:{fingerprint_tag(cell.publish.fingerprint, suite)}",
            "digest": manifest.digest,
        }
    outcome.push_s = time.monotonic() - start


def _uploaded_bytes(engine: ContainerEngine, ref: str, manifest: ManifestData, pushed: PushResult) -> int:
    """Compressed bytes of the layers the engine uploaded: its push stream names them by short diff id, the
    image's RootFS.Layers (diff ids) and the manifest's layers are in the same order."""
    diff_ids = ((engine.inspect(ref) or {}).get("RootFS") or {}).get("Layers") or []
    layers = manifest.json().get("layers", [])
    if len(diff_ids) != len(layers):
        return pushed.bytes_pushed
    short = set(pushed.pushed_ids)
    return sum(int(layer["size"]) for d, layer in zip(diff_ids, layers, strict=True) if d[7:19] in short)


def _history(client: RegistryApi, repo: str, manifest: ManifestData) -> list[str]:
    """The Dockerfile step of each layer (bottom first), from the image config's history (``empty_layer``
    entries make no layer)."""
    history = image_config(client, repo, manifest).get("history") or []
    return [
        str(h.get("created_by") or h.get("comment") or "")  # an imported base has only a comment
        for h in history
        if isinstance(h, dict) and not h.get("empty_layer")
    ]


#: a wheel layer's RUN in the image history: the context's wheel-layer.sh run on the layer's pin file
_WHEEL_LAYER_RUN = re.compile(r"^RUN .*\bwheel-layer\.sh (layers/[0-9]+-[A-Za-z0-9._-]+\.txt)\b")


def layer_report(
    engine: ContainerEngine, ref: str, manifest: ManifestData, pushed: PushResult, steps: Sequence[str]
) -> list[dict[str, Any]]:
    """Each manifest layer: compressed size, whether this push uploaded it, and the step that made it (a
    wheel layer is named by the pin file its RUN hands wheel-layer.sh: ``layers/NN-name.txt``)."""
    diff_ids = ((engine.inspect(ref) or {}).get("RootFS") or {}).get("Layers") or []
    layers = manifest.json().get("layers", [])
    short = set(pushed.pushed_ids)
    out: list[dict[str, Any]] = []
    for i, layer in enumerate(layers):
        step = steps[i] if len(steps) == len(layers) else ""
        m = _WHEEL_LAYER_RUN.search(step)
        if m:
            step = f"wheel layer {m.group(1)}"
        out.append(
            {
                "index": i + 1,
                "digest": str(layer.get("digest", "")),
                "size": int(layer.get("size", 0)),
                "pushed": len(diff_ids) == len(layers) and diff_ids[i][7:19] in short,
                "step": " ".join(step.split())[:160],
            }
        )
    return out


def retag_cell(cell: Cell, clients: dict[str, RegistryApi], digest: str, outcome: CellOutcome) -> None:
    first = cell.publish.registries[0]
    try:
        manifest = clients[first.name].get_manifest(first.repo, digest)
    except ImagesmithError as exc:
        raise _wrapped(first, exc) from exc
    put_final_tags(cell.publish.registries, clients, manifest, (candidate_tag(cell),))
    for t in cell.publish.registries:
        outcome.registries[t.name] = {"ref": f"{t.image}:{candidate_tag(cell)}", "digest": digest}


# -- one cell / the plan ---------------------------------------------------------------------------
def build_cell(
    cell: Cell,
    matrix: Matrix,
    engine: ContainerEngine,
    options: BuildOptions,
    staging_root: Path,
    report: Reporter = _no_report,
) -> CellOutcome:
    outcome = CellOutcome(cell=cell.id, tag=candidate_tag(cell), fingerprint=cell.publish.fingerprint)
    start = time.monotonic()
    try:
        _build_cell(cell, matrix, engine, options, staging_root, report, outcome)
    except ImagesmithError as exc:
        outcome.status = "failed"
        outcome.error = str(exc)
        raise
    finally:
        outcome.duration_s = time.monotonic() - start
    return outcome


def _build_cell(
    cell: Cell,
    matrix: Matrix,
    engine: ContainerEngine,
    options: BuildOptions,
    staging_root: Path,
    report: Reporter,
    outcome: CellOutcome,
) -> None:
    clients: dict[str, RegistryApi] = {}
    suite = suite_digest()
    outcome.suite = suite
    if options.push:
        if not cell.publish.registries:
            raise PushError(
                f"cell {cell.id}: --push, but no registry of matrix {matrix.name} takes this cell",
                hint="add a registry to the matrix's `registries` (or widen its `cells` globs), or build "
                "without --push",
            )
        clients = {t.name: options.client_for(t) for t in cell.publish.registries}
        if not options.force:
            report(cell.id, "check registries", None)
            state = registry_state(cell, clients, suite)
            fps = {fp for fp, _ in state.values()}
            if None not in fps and len(fps) == 1:
                digest = str(next(iter(fps)))
                outcome.digest = digest
                if all(cand == digest for _, cand in state.values()):
                    outcome.status = "skipped"
                    outcome.reason = "fingerprint already in every registry"
                    outcome.registries = {
                        t.name: {"ref": f"{t.image}:{candidate_tag(cell)}", "digest": digest}
                        for t in cell.publish.registries
                    }
                    return
                retag_cell(cell, clients, digest, outcome)
                outcome.status = "retagged"
                outcome.reason = "fingerprint already pushed; candidate tag re-pointed"
                return
        if cell.bases.base_moves and not options.force:
            outcome.reason = _moved_reason(cell, clients, suite)
            outcome.base_moved = bool(outcome.reason)
    elif not options.force:
        data = engine.inspect(local_ref(cell))
        labels = ((data or {}).get("Config") or {}).get("Labels") or {}
        if labels.get(FINGERPRINT_LABEL) == cell.publish.fingerprint and labels.get(SUITE_LABEL) == suite:
            outcome.status = "skipped"
            outcome.reason = "image with this fingerprint already built locally"
            outcome.image_id = str((data or {}).get("Id", ""))
            outcome.size_uncompressed = int((data or {}).get("Size", 0))
            return
    report(cell.id, "stage context", None)
    context = stage_context(
        cell, matrix, options.config, staging_root, options.wheels_dir, project=options.project_of(matrix)
    )
    tags = [local_ref(cell)]
    if options.push:
        tags.append(f"{cell.publish.registries[0].image}:{staging_tag(cell.publish.fingerprint, suite)}")
    sources = options.bases or BaseSources(options.config)
    args = build_args(cell, options.config, sources)
    for image in dict.fromkeys(
        i for i in (cell.bases.base_image, cell.bases.builder_image, cell.bases.devel_image) if i
    ):
        ref, note = sources.ref(cell, image)
        outcome.bases[image] = ref
        if note:
            outcome.notes.append(note)
    b_start = time.monotonic()
    result = engine.build(
        context=context,
        tags=tags,
        build_args=args,
        labels={SUITE_LABEL: suite},
        secrets=build_secrets(options.config),
        no_cache=False,
        on_event=lambda ev: report(cell.id, "build", ev),
        what=f"cell {cell.id}",
    )
    outcome.build_s = time.monotonic() - b_start
    outcome.image_id = result.image_id
    outcome.steps = result.steps
    outcome.cached_steps = result.cached_steps
    labels = engine.labels(result.image_id)
    if labels.get(FINGERPRINT_LABEL) != cell.publish.fingerprint:
        raise BuildError(
            f"cell {cell.id}: the built image's {FINGERPRINT_LABEL} label is "
            f"{labels.get(FINGERPRINT_LABEL)!r}, "
            f"the plan says {cell.publish.fingerprint}",
            hint=f"re-render: `imagesmith render --matrix {cell.matrix}`",
        )
    outcome.size_uncompressed = int((engine.inspect(result.image_id) or {}).get("Size", 0))
    outcome.status = "built"
    if options.push:
        staging_ref = f"{cell.publish.registries[0].image}:{staging_tag(cell.publish.fingerprint, suite)}"
        try:
            push_cell(cell, engine, clients, outcome, report, suite, options.verify)
        finally:
            # the local staging tag only carried the engine push: untag it (the image keeps its local tag)
            engine.remove(staging_ref)
        outcome.status = "pushed"


def _moved_reason(cell: Cell, clients: dict[str, RegistryApi], suite: str) -> str:
    """ "rebuilt: base X moved a…→b… (read DATE)" when the cell's fingerprint with its bases' previous
    digests is in its first registry (so the moved base is why it is built), else ""."""
    from imagesmith.plan import with_fingerprint

    before = dict(cell.bases.base_digests)
    before.update(dict(cell.bases.base_moves))
    old = with_fingerprint(
        replace(
            cell,
            bases=replace(cell.bases, base_digests=tuple(before.items())),
            publish=replace(cell.publish, fingerprint=""),
        )
    )
    first = cell.publish.registries[0]
    if (
        clients[first.name].manifest_digest(first.repo, fingerprint_tag(old.publish.fingerprint, suite))
        is None
    ):
        return ""
    return "rebuilt: " + "; ".join(cell.bases.moved_notes())


def preflight(matrix: Matrix, plan: BuildPlan, options: BuildOptions) -> None:
    """What must hold before any build starts: current dockerfiles/, sources in the cache, sane options."""
    if options.jobs < 1:
        raise BuildError(
            f"--jobs {options.jobs}: must be at least 1", hint="--jobs 1 builds one cell at a time"
        )
    if options.wheels_dir is not None and (problem := inputs.folder_problem(options.wheels_dir)):
        raise ConfigError(f"--wheels {options.wheels_dir}: {problem}", hint="give a folder of wheels")
    if options.wheels_dir is not None and not any(options.wheels_dir.glob("*.whl")):
        raise BuildError(
            f"--wheels {options.wheels_dir}: no *.whl files there", hint="give a folder of wheels"
        )
    check_context_current(matrix, options.project_of(matrix))
    unhashed = [c for c in plan.cells if not c.lock.hashed]
    if unhashed and not options.allow_unhashed:
        locks = sorted({c.lock.lock_file for c in unhashed})
        raise BuildError(
            f"{len(unhashed)} cell(s) of matrix {matrix.name} have pins without sha256 hashes "
            f"({', '.join(c.id for c in unhashed[:4])}{', …' if len(unhashed) > 4 else ''}); lock(s) "
            f"{', '.join(locks)}: the build installs with pip --require-hashes",
            hint=f"`imagesmith lock --matrix {matrix.name} --force` on a machine that reaches the variant's "
            "index writes the hashes (then `imagesmith render`); or build them unchecked with "
            "--allow-unhashed, or leave them out with --only",
        )
    cached_archive(nccl_tests_archive(matrix.nccl_tests), matrix=matrix.name)


def base_sources(project: Project, options: BuildOptions) -> BaseSources:
    """The run's :class:`BaseSources`: the project's escrow registry and registries file (for the kind and
    ``insecure`` of a mirror on one of their hosts)."""
    from imagesmith.bases import escrow_registry
    from imagesmith.matrix import load_registries

    known = (
        list(load_registries(project.registries_file).values()) if project.registries_file.is_file() else []
    )
    escrow = escrow_registry(project)
    return BaseSources(options.config, escrow=escrow, known=known, client_for=options.client_for)


def run_build(
    matrix: Matrix,
    plan: BuildPlan,
    options: BuildOptions,
    *,
    engine: ContainerEngine | None = None,
    report: Reporter = _no_report,
) -> tuple[list[CellOutcome], list[ImagesmithError]]:
    """Build every cell of *plan*; returns the outcomes and the errors of failed cells (the caller raises)."""
    preflight(matrix, plan, options)
    eng: ContainerEngine = engine or Engine()
    if eng.backend == "sdk":
        project = options.project_of(matrix)
        needs = [
            c.id
            for c in plan.cells
            if needs_buildkit((project.path(c.publish.context) / "Dockerfile").read_text(errors="replace"))
        ]
        if needs or options.config.extra_ca is not None:
            why = (
                f"cell(s) {', '.join(needs[:4])}{', …' if len(needs) > 4 else ''} use BuildKit's "
                "`RUN --mount` (the wheel cache shared by every cell, the extra CA secret)"
                if needs
                else "the extra CA is given to the build as a BuildKit secret, never as a layer"
            )
            raise BuildError(
                f"the sdk backend (the Engine API's classic builder) cannot build this: {why}",
                hint="use the BuildKit backend: `--backend buildkit` (Debian's docker.io CLI, or "
                "IMAGESMITH_DOCKER_CLI naming a docker CLI that drives BuildKit)",
            )
    if options.bases is None:
        options = replace(options, bases=base_sources(options.project_of(matrix), options))
    assert options.bases is not None
    options.bases.check_mirrored(plan.cells, lambda ref: eng.inspect(ref) is not None)
    with contextlib.ExitStack() as stack:
        staging_root = options.staging_root or stack.enter_context(run_staging(cache_root() / "contexts"))
        staging_root.mkdir(parents=True, exist_ok=True)
        return _build_cells(matrix, plan, eng, options, staging_root, report)


def _build_cells(
    matrix: Matrix,
    plan: BuildPlan,
    eng: ContainerEngine,
    options: BuildOptions,
    staging_root: Path,
    report: Callable[[str, str, BuildEvent | None], None],
) -> tuple[list[CellOutcome], list[ImagesmithError]]:
    outcomes: list[CellOutcome] = []
    errors: list[ImagesmithError] = []

    def one(cell: Cell) -> CellOutcome:
        try:
            return build_cell(cell, matrix, eng, options, staging_root, report)
        except ImagesmithError as exc:
            errors.append(exc)
            failed = CellOutcome(cell=cell.id, tag=candidate_tag(cell), fingerprint=cell.publish.fingerprint)
            failed.status, failed.error = "failed", str(exc)
            report(cell.id, "failed", None)
            return failed

    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        outcomes = list(pool.map(one, plan.cells))
    for cell, o in zip(plan.cells, outcomes, strict=True):  # a second writer may have moved a tag since
        if o.status != "pushed":
            continue
        ours = {name: held["digest"] for name, held in o.registries.items()}
        tags = (candidate_tag(cell), fingerprint_tag(cell.publish.fingerprint, o.suite))
        try:
            label = (FINGERPRINT_LABEL, cell.publish.fingerprint)
            for name, tag, got in check_held(cell.publish.registries, options.client_for, tags, ours, label):
                o.notes.append(
                    f"{name}: {tag} names {got}, another build of the same inputs (built {ours[name]})"
                )
                o.registries[name]["digest"] = o.digest = got
        except ImagesmithError as exc:
            errors.append(exc)
            o.status, o.error = "failed", str(exc)
            o.registries.pop(exc.registry or "", None)  # the summary names no digest no tag names
    return outcomes, errors


def write_summary(path: Path, matrix: str, outcomes: Sequence[CellOutcome], engine_backend: str) -> None:
    data: dict[str, Any] = {
        "matrix": matrix,
        "backend": engine_backend,
        "cells": [asdict(o) for o in outcomes],
    }
    atomicio.write_atomic(path, json.dumps(data, indent=2) + "\n")


__all__ = [
    "BuildOptions",
    "CellOutcome",
    "RegistryError",
    "build_cell",
    "candidate_tag",
    "fingerprint_tag",
    "run_build",
    "staging_tag",
    "suite_digest",
    "write_summary",
]
