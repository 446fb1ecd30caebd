"""Image references: the one place that splits ``registry/path[:tag][@digest]``.

:func:`split_reference` splits a reference as written (``host:5000/a/b:tag`` → ``host:5000/a/b``, ``tag``);
:class:`ImageRef` also fills Docker's defaults in (``debian:bookworm`` →
``docker.io/library/debian:bookworm``).
Every module that takes a reference apart (engine tagging, the release index, ``pick --index oci://…``, the
registry-mirror map, build's repository paths) goes through these two.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagesmith.errors import ConfigError


def split_reference(reference: str) -> tuple[str, str | None, str | None]:
    """``(repository as written, tag or None, digest or None)``. A ``:`` counts as a tag separator only in
    the last path component, so a registry port (``host:5000/…``) is never taken for a tag.
    """
    text, digest = reference, None
    if "@" in text:
        text, digest = text.split("@", 1)
    last = text.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = text.rsplit(":", 1)
        return repository, tag, digest
    return text, None, digest


DOCKER_HUB = "docker.io"
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"})


@dataclass(frozen=True, kw_only=True)
class ImageRef:
    """A parsed image reference: ``registry/path[:tag][@digest]`` with Docker's defaults filled in."""

    registry: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, ref: str) -> ImageRef:
        """Parse *ref* as the docker CLI does (``debian:bookworm`` → docker.io/library/debian:bookworm)."""
        text = ref.strip()
        if not text or any(c.isspace() for c in text):
            raise ConfigError(f"{ref!r} is not an image reference", hint="use e.g. debian:bookworm")
        named, tag, digest = split_reference(text)
        first, sep, rest = named.partition("/")
        if sep and ("." in first or ":" in first or first == "localhost"):
            registry, remainder = first, rest
        else:
            registry, remainder = DOCKER_HUB, named
        if registry in _HUB_ALIASES:
            registry = DOCKER_HUB
            if "/" not in remainder:
                remainder = f"library/{remainder}"
        if not remainder:
            raise ConfigError(
                f"{ref!r} is not an image reference (no repository)", hint="use e.g. debian:bookworm"
            )
        if tag is None and digest is None:
            tag = "latest"
        return cls(registry=registry, path=remainder, tag=tag, digest=digest)

    @property
    def repository(self) -> str:
        return f"{self.registry}/{self.path}"

    def __str__(self) -> str:
        out = self.repository
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out
