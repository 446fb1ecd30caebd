"""Image references: the one place that splits ``registry/path[:tag][@digest]``.

:func:`split_reference` splits a reference as written (``host:5000/a/b:tag`` → ``host:5000/a/b``, ``tag``);
:class:`ImageRef` also fills Docker's defaults in (``debian:bookworm`` →
``docker.io/library/debian:bookworm``).
Every module that takes a reference apart (engine tagging, the release index, ``pick --index oci://…``, the
registry-mirror map, build's repository paths) goes through these two.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Final

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


#: the most patterns one glob's ``{a,b}`` groups may expand to: 22 groups of two are 4 million patterns, and
#: ``--only`` (or an exclude rule) spun for minutes before this bound
MAX_BRACE_EXPANSIONS: Final[int] = 4096


def expand_braces(pattern: str) -> list[str]:
    """Expand simple ``{a,b}`` groups (nested allowed): ``2.{1,2}*`` → ``["2.1*", "2.2*"]``. A glob that
    expands to more than :data:`MAX_BRACE_EXPANSIONS` patterns is a ConfigError."""
    done: list[str] = []
    todo = [pattern]
    while todo:
        current = todo.pop()
        match = re.search(r"\{([^{}]*)\}", current)
        if match is None:
            done.append(current)
        else:
            head, tail = current[: match.start()], current[match.end() :]
            todo.extend(head + option + tail for option in reversed(match.group(1).split(",")))
        if len(done) + len(todo) > MAX_BRACE_EXPANSIONS:
            raise ConfigError(
                f"glob {pattern[:120]!r} expands to more than {MAX_BRACE_EXPANSIONS} patterns "
                "(every {a,b} group multiplies them)",
                hint="use fewer {a,b} groups, or * and ? wildcards",
            )
    return list(dict.fromkeys(done))  # nested groups can repeat a pattern


def matches(value: str, pattern: str) -> bool:
    """fnmatch with ``{a,b}`` brace expansion (case-sensitive)."""
    return any(fnmatch.fnmatchcase(value, p) for p in expand_braces(pattern))


DOCKER_HUB = "docker.io"
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"})
#: the host names of Docker Hub (lower case), ``docker.io`` among them
DOCKER_HUB_ALIASES: frozenset[str] = _HUB_ALIASES


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


@dataclass(frozen=True, kw_only=True)
class Registry:
    """One registry repository images go to: the one registry type of imagesmith.

    An entry of a project's registries file (with the ``cells`` globs it receives), a cell's build and release
    targets, and each copy in a release index (:class:`imagesmith.index.RegistryCopy` holds one) are all this.
    ``repository`` is the path inside the registry as written (``namespace/repository``); :attr:`repo` is the
    path the registry HTTP API names (Docker Hub's ``library/`` filled in). Credentials never live here.
    """

    name: str
    host: str
    repository: str
    kind: str = "generic"
    insecure: bool = False
    cells: tuple[str, ...] = ("*",)

    @classmethod
    def from_image(cls, name: str, image: str, *, kind: str = "generic", insecure: bool = False) -> Registry:
        """``host[:port]/path`` (no tag) → a registry named *name*."""
        repository, tag, digest = split_reference(image)
        host, sep, path = repository.partition("/")
        if tag is not None or digest is not None or not sep or not host or not path:
            raise ConfigError(
                f"registry {name!r}: {image!r} is not host/repository", hint="write e.g. ghcr.io/team/torch"
            )
        return cls(name=name, host=host, repository=path, kind=kind, insecure=insecure)

    @property
    def image(self) -> str:
        """``host/namespace/repository``: the image without a tag."""
        return f"{self.host}/{self.repository}" if self.repository else self.host

    @property
    def namespace(self) -> str:
        """The repository path without its last part (``team`` of ``team/torch``; empty for ``torch``)."""
        return self.repository.rpartition("/")[0]

    @property
    def repo(self) -> str:
        """The repository path inside the registry (what the registry HTTP API names)."""
        return ImageRef.parse(self.image).path

    def wants(self, cell_id: str) -> bool:
        """True when *cell_id* matches one of this registry's ``cells`` globs."""
        return any(matches(cell_id, pattern) for pattern in self.cells)

    def ref(self, tag: str) -> str:
        """This registry's reference for *tag*."""
        return f"{self.image}:{tag}"

    def pinned(self, digest: str) -> str:
        """``host/repository@sha256:…``: the immutable reference."""
        return f"{self.image}@{digest}"
