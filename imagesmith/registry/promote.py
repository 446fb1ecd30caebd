"""One promotion primitive: move tags onto a digest across N registries, read each back, roll back on failure.

Build (its final tags), release (the release tag) and the release index (``release-index``) all promote
through :func:`promote`; what is promoted must already be everywhere (the artifacts first, phase 1 — each
caller's own), then the tags move (phase 2, here):

- each tag goes to every registry before the next tag is put; a registry whose tag already names the digest
  is not written; every tag is read back right after it is put (and an untouched one is read too), so
  a registry that does not keep what it was given stops the promotion there;
- on a failure the tags this run moved are rolled back, last first: a tag that named another manifest is put
  back on it (the manifest that registry holds), a new tag is deleted where the registry can delete a tag
  alone; Debian's docker-registry 2.8 cannot — such a tag stays, and :class:`PromotionError` says where;
- the manifest put under a tag is the digest's own (given, or read from that registry by digest: never a
  partial manifest), and every request carries the client's retry policy (retries on transient faults,
  never on ``manifest unknown``).

The error is typed: :class:`PromotionError` carries the step that failed, the registry and tag, the error
under it (or the digest read back), and which tags were moved, rolled back, or left moved; each caller words
it as its users know it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from imagesmith.errors import Fault, ImagesmithError, RegistryError
from imagesmith.registry.api import ManifestData, RegistryApi

Step = Literal["before", "put", "read back"]


@dataclass(frozen=True, eq=False)
class Target:
    """One repository of one registry to promote in: its name (as errors say it), repository, client, and
    whatever the caller keeps with it (``ref``: its ``Registry``)."""

    name: str
    repo: str
    client: RegistryApi
    ref: object = None


@dataclass(frozen=True)
class Promotion:
    """What a promotion did: the (target, tag) pairs it moved (a tag already on the digest is not)."""

    moved: tuple[tuple[Target, str], ...] = ()


class PromotionError(RegistryError):
    """A promotion failed at ``step`` in ``target`` for ``tag``: ``cause`` is the registry's error (None when
    the tag was read back as ``got``, another digest). ``moved`` were put by this run; ``left`` of them stay
    moved (the registry cannot delete a tag alone, or the roll-back failed); the rest were rolled back."""

    def __init__(
        self,
        *,
        step: Step,
        target: Target,
        tag: str,
        digest: str,
        cause: ImagesmithError | None,
        got: str | None = None,
        moved: Sequence[tuple[Target, str]] = (),
        left: Sequence[tuple[Target, str]] = (),
    ) -> None:
        what = (
            f"{target.name}: {target.repo}:{tag}: {step} failed: {cause.message}"
            if cause is not None
            else f"{target.name}: {target.repo}:{tag} resolves to {got}, not {digest}"
        )
        super().__init__(
            what,
            hint=cause.hint if cause is not None else None,
            registry=target.name,
            repository=target.repo,
            digest=digest,
            fault=Fault.PROMOTION,
        )
        self.step: Step = step
        self.target = target
        self.tag = tag
        self.cause = cause
        self.got = got
        self.moved = tuple(moved)
        self.left = tuple(left)

    @property
    def rolled_back(self) -> tuple[tuple[Target, str], ...]:
        return tuple(m for m in self.moved if m not in self.left)


@dataclass
class _Run:
    targets: Sequence[Target]
    tags: Sequence[str]
    digest: str
    manifest: ManifestData | None
    before: dict[tuple[Target, str], str | None] = field(default_factory=dict)
    moved: list[tuple[Target, str]] = field(default_factory=list)

    def manifest_in(self, t: Target) -> ManifestData:
        return self.manifest if self.manifest is not None else t.client.get_manifest(t.repo, self.digest)

    def fail(
        self, step: Step, t: Target, tag: str, cause: ImagesmithError | None, got: str | None = None
    ) -> PromotionError:
        return PromotionError(
            step=step,
            target=t,
            tag=tag,
            digest=self.digest,
            cause=cause,
            got=got,
            moved=self.moved,
            left=self.roll_back(),
        )

    def roll_back(self) -> list[tuple[Target, str]]:
        """Undo the moved tags, last first; the ones that stay moved (in the order they were moved)."""
        left = []
        for t, tag in reversed(self.moved):
            old = self.before[t, tag]
            try:
                if old is not None:
                    t.client.put_manifest(t.repo, tag, t.client.get_manifest(t.repo, old))
                    continue
                if t.client.delete_tag(t.repo, tag):
                    continue
            except ImagesmithError:
                pass
            left.append((t, tag))
        return list(reversed(left))


def promote(
    targets: Sequence[Target],
    tags: Sequence[str],
    digest: str,
    *,
    manifest: ManifestData | None = None,
    before: Mapping[tuple[Target, str], str | None] | None = None,
) -> Promotion:
    """Put *tags* on *digest* in every target, read back, roll back on failure (see the module docstring).

    *manifest*: the digest's manifest (default: read from each registry by digest). *before*: what each
    (target, tag) named before, when the caller read it in its phase 1 (default: read here first; a failure
    there moves nothing). Raises :class:`PromotionError`.
    """
    if manifest is not None and manifest.digest != digest:
        raise ValueError(f"promote: the manifest is {manifest.digest}, not {digest}")
    run = _Run(targets=targets, tags=tags, digest=digest, manifest=manifest)
    for t in targets:
        for tag in tags:
            if before is not None:
                run.before[t, tag] = before[t, tag]
                continue
            try:
                run.before[t, tag] = t.client.manifest_digest(t.repo, tag)
            except ImagesmithError as exc:
                raise run.fail("before", t, tag, exc) from exc
    for tag in tags:
        for t in targets:
            if run.before[t, tag] != digest:
                try:
                    t.client.put_manifest(t.repo, tag, run.manifest_in(t))
                except ImagesmithError as exc:
                    raise run.fail("put", t, tag, exc) from exc
                run.moved.append((t, tag))
            try:
                got = t.client.manifest_digest(t.repo, tag)
            except ImagesmithError as exc:
                raise run.fail("read back", t, tag, exc) from exc
            if got != digest:
                raise run.fail("read back", t, tag, None, got)
    return Promotion(moved=tuple(run.moved))
