"""``--pull``: the picked image through :mod:`imagesmith.engine`, the only module that talks to a Docker
engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from imagesmith.errors import (
    ConfigError,
    EngineError,
    RegistryError,
)
from imagesmith.index import (
    RegistryCopy,
)

if TYPE_CHECKING:
    from imagesmith.credentials import CredentialChain
    from imagesmith.engine import ContainerEngine

from imagesmith.pick.ranking import Pick

# ------------------------------------------------------------------------------------------------------------
# --pull (through imagesmith.engine, the only module that talks to a Docker engine)


def pull_image(
    pick: Pick,
    *,
    echo: Callable[[str], None],
    engine: ContainerEngine | None = None,
    chain_for: Callable[[RegistryCopy], CredentialChain] | None = None,
) -> str:
    """Pull the picked image by its released digest (``repo@sha256:…``, never by tag) and check that the
    engine now holds exactly that digest.

    Each registry of the image (same digest) is tried in turn, the picked one first, with its credential
    chain (environment, docker config, the kind's token command: ECR, ACR); a registry that cannot be pulled
    from, or serves another digest under the tag, is named and the next one tried. RegistryError when none
    works (each one's reason in the message).
    """
    from imagesmith.credentials import credential_chain
    from imagesmith.errors import ImagesmithError

    if engine is None:
        from imagesmith.engine import Engine

        engine = Engine()
    chains = chain_for or (lambda c: credential_chain(c.host, c.kind, name=c.name))
    copies = [pick.registry, *pick.alternatives]
    failures: list[tuple[RegistryCopy, ImagesmithError]] = []
    for n, copy in enumerate(copies):
        try:
            return _pull_one(copy, engine, chains(copy), echo)
        except (RegistryError, EngineError, ConfigError) as exc:
            failures.append((copy, exc))
            rest = copies[n + 1 :]
            echo(
                f"pull from {copy.name} ({copy.host}) failed: {exc.message}"
                + (
                    f"; trying {rest[0].name} ({rest[0].host}), same digest"
                    if rest
                    else " — no other registry holds this image"
                )
            )
    if len(failures) == 1:
        only = failures[0][1]
        raise RegistryError(only.message, hint=only.hint or "check the registry and the network") from None
    raise RegistryError(
        f"--pull: no registry holding {pick.image.tag} ({pick.image.digest[:19]}…) could be pulled from: "
        + "; ".join(f"{c.name} ({c.host}): {e.message}" for c, e in failures),
        hint="; ".join(dict.fromkeys(f"{c.name}: {e.hint}" for c, e in failures if e.hint))
        or "check the network and the registries' credentials",
    )


def _pull_one(copy: RegistryCopy, engine: ContainerEngine, chain: CredentialChain, echo: Any) -> str:
    """Pull ``repo@digest`` (never the tag: a moved tag must not reach this host) and check that the engine
    now holds that digest."""
    reference = copy.pinned
    creds = chain.resolve()
    echo(f"pulling {reference} (released as {copy.reference})" + (f" as {creds.username}" if creds else ""))
    started = time.monotonic()
    try:
        image_id = engine.pull(reference, credentials=creds)
    except EngineError as exc:
        # what the engine said (its own words, not the reference pulled: a digest may hold "401")
        fresh = chain.refresh(creds) if creds is not None and _refused(exc.said or "") else None
        if fresh is None:
            raise
        image_id = engine.pull(reference, credentials=fresh)  # an expired token (ECR 12 h, ACR 3 h)
    info = engine.inspect(reference) or {}
    digests = [d for d in info.get("RepoDigests", []) if isinstance(d, str)]
    if reference not in digests:
        raise RegistryError(
            f"registry {copy.name}: the engine pulled {reference} but holds "
            f"{', '.join(digests) or 'an unknown digest'}, not the released {copy.digest}",
            hint="the registry served other content for the digest: pull from another registry of the "
            "image, or report it to the registry's operator",
        )
    echo(f"pulled {reference} as {image_id[:19]} in {time.monotonic() - started:.0f}s")
    return str(image_id)


def _refused(message: str) -> bool:
    low = message.lower()
    return any(w in low for w in ("unauthorized", "denied", "authentication required", "401", "403"))
