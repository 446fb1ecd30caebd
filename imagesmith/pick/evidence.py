"""``pick --verify-cluster``: the renter's check of the picked image's cluster evidence (issue 32). The signed
cluster report release attached beside the image (``sha256-<hex>.cluster``,
:mod:`imagesmith.release.clusterartifact`) is fetched from the picked registry, bounded, and checked against
the index entry — whose signature the index's trusted key has already verified: the artifact's manifest
digest is the entry's ``cluster.artifact`` (so the envelope and the key beside it are the ones the publisher
released), the DSSE envelope verifies with that key, its statement is about the picked digest, and the
signed report hashes to ``cluster.report_digest`` and gives the entry's nodes, GPUs and fabric."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from imagesmith.errors import ConfigError

if TYPE_CHECKING:
    from imagesmith.refs import Registry
    from imagesmith.registry import RegistryApi

from imagesmith.pick.ranking import Pick, cluster_sentence


def verify_cluster(
    pick: Pick, *, insecure: bool = False, client_for: Callable[[Registry], RegistryApi] | None = None
) -> list[str]:
    """The lines that say the picked image's cluster evidence verified (ConfigError when its entry records
    none; RegistryError naming the registry, the tag and the field when the artifact is missing, altered,
    swapped or another image's: nothing an attacker can push there passes). *insecure* (pick's
    ``--insecure``): the registry is spoken to in plain HTTP, as the index was."""
    from imagesmith.release.clusterartifact import verify_cluster_artifact
    from imagesmith.tags import cluster_tag

    image, copy = pick.image, pick.registry
    cluster = image.cluster
    if cluster is None:
        raise ConfigError(
            f"--verify-cluster: {image.tag} ({image.digest}) records no cluster validation in the index",
            hint="drop --verify-cluster, or pick an image whose entry has a cluster (imagesmith index --json "
            "shows them)",
            field="cluster",
            digest=image.digest,
        )
    if client_for is None:
        from dataclasses import replace

        from imagesmith.registry import client_for as make

        def client_for(r: Registry) -> RegistryApi:
            return make(replace(r, insecure=True) if insecure else r)

    client = client_for(copy.registry)
    signed = verify_cluster_artifact(client, copy.registry.repo, image.digest, cluster)
    key = signed.key.fingerprint if signed.key is not None else "?"
    return [
        f"cluster evidence verified: {copy.registry.image}:{cluster_tag(image.digest)} "
        f"(artifact {cluster.artifact[:19]}…, the one the signed index records)",
        f"  {cluster_sentence(cluster)}",
        f"  signed report {signed.sha[:19]}… about {image.digest[:19]}…, signed by key {key}; "
        f"promises: {', '.join(f'{p.name} {p.verdict}' for p in signed.report.promises)}",
    ]
