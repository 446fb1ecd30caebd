"""After a ``build --push`` run: do the final tags it put still name what it built (issue 37)?

Two ``build --push`` runs of one matrix with separate caches (two copies of one project) push the same tags to
the same registries; each reads its tags back when it puts them, but the other run may move them afterwards.
:func:`check_held` reads every tag again once all cells are done. A tag that names another manifest whose
image config carries the same fingerprint label is another build of the same inputs: it is returned, and the
caller records the digest the tag names. A tag that names other content, or nothing, is a
:class:`~imagesmith.errors.PushError` naming the registry, the tag, the digest found and this run's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from imagesmith.errors import ImagesmithError, PushError
from imagesmith.refs import Registry
from imagesmith.registry import ManifestData, RegistryApi

MOVED_HINT = (
    "another build moved the tag after this run put it: rerun `imagesmith build --push` (it re-tags) or find "
    "who else pushes this matrix"
)


def image_config(client: RegistryApi, repo: str, manifest: ManifestData) -> dict[str, Any]:
    """The image config *manifest* names ({} when it names none, or it is not a JSON object)."""
    digest = str((manifest.json().get("config") or {}).get("digest", ""))
    if not digest:
        return {}
    try:
        config = json.loads(b"".join(client.get_blob(repo, digest).iter_content(1 << 16)))
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def check_held(
    targets: Sequence[Registry],
    client_for: Callable[[Registry], RegistryApi],
    tags: Sequence[str],
    digests: Mapping[str, str],
    label: tuple[str, str],
) -> list[tuple[str, str, str]]:
    """Read each of *tags* in each of *targets* (``digests``: registry name → the digest this run tagged).
    Returns (registry, tag, digest found) for each tag another build of the same inputs holds (its image
    config's ``label[0]`` is ``label[1]``); raises PushError for a tag that names other content or nothing."""
    same: list[tuple[str, str, str]] = []
    for t in targets:
        client, ours = client_for(t), digests[t.name]
        for tag in tags:
            try:
                got = client.manifest_digest(t.repo, tag)
                labels: Any = {}
                if got and got != ours:
                    config = image_config(client, t.repo, client.get_manifest(t.repo, got))
                    labels = (config.get("config") or {}).get("Labels") or {}
            except ImagesmithError as exc:
                raise PushError(
                    f"registry {t.name} ({t.host}): reading {t.image}:{tag} back after the build: "
                    + exc.message,
                    hint=exc.hint,
                    registry=t.name,
                    host=t.host,
                    repository=t.repo,
                ) from exc
            if got == ours:
                continue
            if got and isinstance(labels, dict) and labels.get(label[0]) == label[1]:
                same.append((t.name, tag, got))
                continue
            raise PushError(
                f"registry {t.name} ({t.host}): {t.image}:{tag} names {got or 'no manifest'}, not {ours} "
                "that this run built and tagged there",
                hint=MOVED_HINT,
                registry=t.name,
                host=t.host,
                repository=t.repo,
                digest=got,
            )
    return same
