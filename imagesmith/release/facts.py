"""What the image itself says: an index entry's fields come from content bound to the digest (the image
config's labels), and what the index's own parser says of an entry before anything moves."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from imagesmith.compat import MinDriver, parse_driver
from imagesmith.errors import ConfigError, Fault, ImagesmithError, ReleaseError
from imagesmith.index import (
    ReleasedImage,
    ReleaseIndex,
    Shm,
    ValidatedOn,
    dump_index,
    parse_index,
)
from imagesmith.registry import (
    INDEX_TYPES,
    RegistryApi,
    read_small_blob,
)
from imagesmith.release.base import _now

#: the image-config labels (templates/Dockerfile.j2) each field of an index entry comes from
LABEL_TORCH: Final[str] = "io.imagesmith.torch"
LABEL_TORCHVISION: Final[str] = "io.imagesmith.torchvision"
LABEL_VARIANT: Final[str] = "io.imagesmith.variant"
LABEL_CUDA: Final[str] = "io.imagesmith.cuda"
LABEL_PYTHON: Final[str] = "io.imagesmith.python"
LABEL_MIN_FULL: Final[str] = "io.imagesmith.min-driver.full"
LABEL_MIN_MINOR: Final[str] = "io.imagesmith.min-driver.minor-version"
LABEL_SHM: Final[str] = "io.imagesmith.shm-min"
#: the torch wheel's TORCH_CUDA_ARCH_LIST; an image built before it existed gets the list of its
#: torch and variant labels from imagesmith/data/torch.toml
LABEL_TORCH_ARCH: Final[str] = "io.imagesmith.torch-arch"
#: the largest image config read (a config is a few KiB; the index's own cap)
MAX_CONFIG_BYTES: Final[int] = 32 << 20


@dataclass(frozen=True, kw_only=True)
class ImageFacts:
    """The fields of an index entry that ``pick`` decides on, as the image config of the digest states them
    (the config blob is named by the manifest, which is named by the digest: read and hash-checked)."""

    torch: str
    torchvision: str
    cuda: str
    python: str
    min_driver: MinDriver
    arch: tuple[str, ...]
    shm: Shm
    platform: str


def _facts_error(client: RegistryApi, repo: str, digest: str, message: str) -> ReleaseError:
    return ReleaseError(
        f"registry {client.name} ({client.host}) {repo}@{digest}: {message}",
        hint="the image was not built by imagesmith build (or its config was altered): rebuild and push it "
        "with imagesmith build --push, validate the new digest, then release it",
        registry=client.name,
        host=client.host,
        repository=repo,
        digest=digest,
        fault=Fault.NOT_AN_IMAGESMITH_IMAGE,
        problem=message,
    )


def image_facts(client: RegistryApi, repo: str, digest: str) -> ImageFacts:
    """What the image *digest* in *repo* says of itself: its config's labels and platform. The manifest is
    read by digest (its content must hash to it) and the config by the digest the manifest gives (at most
    :data:`MAX_CONFIG_BYTES`, hash-checked). ReleaseError naming the registry, the repository, the digest and
    the label when a label is missing or not what imagesmith build writes."""
    where = f"registry {client.name} ({client.host}) {repo}@{digest}"
    manifest = client.get_manifest(repo, digest)
    if manifest.media_type in INDEX_TYPES:
        children = manifest.json().get("manifests")
        amd64 = [
            m
            for m in (children if isinstance(children, list) else [])
            if isinstance(m, dict)
            and isinstance(m.get("platform"), dict)
            and (m["platform"].get("os"), m["platform"].get("architecture")) == ("linux", "amd64")
            and isinstance(m.get("digest"), str)
        ]
        if len(amd64) != 1:
            raise _facts_error(client, repo, digest, "an image index without exactly one linux/amd64 image")
        manifest = client.get_manifest(repo, amd64[0]["digest"])
    config = manifest.json().get("config")
    if not isinstance(config, dict):
        raise _facts_error(client, repo, digest, "the manifest names no image config")
    body = read_small_blob(
        client,
        repo,
        config.get("digest"),
        config.get("size"),
        limit=MAX_CONFIG_BYTES,
        what="image config",
        where=where,
    )
    try:
        doc = json.loads(body)
    except ValueError:
        raise _facts_error(client, repo, digest, "its image config is not JSON") from None
    except RecursionError:  # arrays nested thousands deep: a registry's bytes, not a traceback
        raise _facts_error(
            client, repo, digest, "its image config is JSON nested deeper than a parser follows"
        ) from None
    inner = doc.get("config") if isinstance(doc, dict) else None
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    labels = labels if isinstance(labels, dict) else {}

    def label(name: str) -> str:
        value = labels.get(name)
        if not isinstance(value, str) or not value.strip():
            raise _facts_error(client, repo, digest, f"its image config has no label {name}")
        return value.strip()

    torch, variant = label(LABEL_TORCH), label(LABEL_VARIANT)
    full, minor = label(LABEL_MIN_FULL), label(LABEL_MIN_MINOR)
    try:
        min_driver = MinDriver(full=parse_driver(full), minor_version=parse_driver(minor))
    except ConfigError as exc:
        raise _facts_error(client, repo, digest, f"a min-driver label: {exc.message}") from None
    if labels.get(LABEL_TORCH_ARCH):
        arch = tuple(a.strip() for a in str(labels[LABEL_TORCH_ARCH]).split(",") if a.strip())
    else:
        from imagesmith import compat

        try:
            arch = tuple(compat.torch_variant(torch, variant).arch_list)
        except ImagesmithError:
            raise _facts_error(
                client,
                repo,
                digest,
                f"no label {LABEL_TORCH_ARCH}, and torch {torch} {variant} is not in "
                "imagesmith/data/torch.toml",
            ) from None
    shm = labels.get(LABEL_SHM)
    os_, cpu = (doc.get("os"), doc.get("architecture")) if isinstance(doc, dict) else (None, None)
    return ImageFacts(
        torch=torch,
        torchvision=label(LABEL_TORCHVISION),
        cuda=label(LABEL_CUDA),
        python=label(LABEL_PYTHON),
        min_driver=min_driver,
        arch=arch,
        shm=Shm(size=shm.strip().lower() if isinstance(shm, str) and shm.strip() else None, ipc_host=False),
        platform=f"{os_}/{cpu}" if isinstance(os_, str) and isinstance(cpu, str) else "linux/amd64",
    )


def dated_as_before(now: Sequence[ValidatedOn], before: Sequence[ValidatedOn]) -> tuple[ValidatedOn, ...]:
    """*now* with the date the index already records for the same report (same ``report_digest``): a report
    without a start time is dated when it is read, and a rerun must not rewrite the index for that alone."""
    dates = {v.report_digest: v.date for v in before if v.report_digest}
    return tuple(replace(v, date=dates.get(v.report_digest, v.date)) for v in now)


def _one_per_report(validated_on: Sequence[ValidatedOn]) -> tuple[ValidatedOn, ...]:
    """One record per report (its ``report_digest``), the earliest date standing: the same report read twice
    (the local copy and the attestation stored with the image, a second apart when the report has no start
    time and is dated when read) is one validation run, not two."""
    first: dict[object, ValidatedOn] = {}
    for v in sorted(set(validated_on), key=lambda v: (v.date, v.gpu, v.report_digest)):
        first.setdefault(v.report_digest or v, v)
    return tuple(first.values())


def bound_entry(
    image: ReleasedImage, facts: ImageFacts, validated_on: Sequence[ValidatedOn]
) -> tuple[ReleasedImage, list[str]]:
    """*image* with every field pick decides on taken from *facts* (the image config of its digest) and
    *validated_on* (its verified, passing attestations); and what changed (``field: old → new``)."""
    vals = _one_per_report(dated_as_before(validated_on, image.validated_on))
    new = replace(
        image,
        torch=facts.torch,
        torchvision=facts.torchvision,
        cuda=facts.cuda,
        python=facts.python,
        min_driver=facts.min_driver,
        arch=facts.arch,
        shm=facts.shm,
        platform=facts.platform,
        validated_on=vals,
    )

    def hosts(vs: Sequence[ValidatedOn]) -> str:
        return (
            ", ".join(f"{v.count}x {v.gpu} driver {v.driver} ({v.report_digest[:19]}…)" for v in vs) or "none"
        )

    changes = entry_changes(image, new)
    if {_val_key(v) for v in image.validated_on} != {_val_key(v) for v in vals}:
        changes.append(f"validated_on: {hosts(image.validated_on)} → {hosts(vals)}")
    return new, changes


def entry_changes(image: ReleasedImage, new: ReleasedImage) -> list[str]:
    """``field: old → new`` of every field pick decides on (but validated_on) where *new* differs."""
    changes = []
    for name, old, now in (
        ("torch", image.torch, new.torch),
        ("torchvision", image.torchvision, new.torchvision),
        ("cuda", image.cuda, new.cuda),
        ("python", image.python, new.python),
        ("min_driver.full", str(image.min_driver.full), str(new.min_driver.full)),
        ("min_driver.minor", str(image.min_driver.minor_version), str(new.min_driver.minor_version)),
        ("arch", ",".join(image.arch), ",".join(new.arch)),
        ("shm.size", image.shm.size or "none", new.shm.size or "none"),
        ("shm.ipc_host", str(image.shm.ipc_host).lower(), str(new.shm.ipc_host).lower()),
        ("platform", image.platform, new.platform),
    ):
        if old != now:
            changes.append(f"{name}: {old} → {now}")
    return changes


def _val_key(v: ValidatedOn) -> tuple[str, int, str, str, str]:
    return (v.gpu, v.count, v.driver, v.date, v.report_digest)


def index_problem(entry: ReleasedImage) -> ConfigError | None:
    """What the index's own validation (:func:`imagesmith.index.parse_index`) says of an index holding only
    *entry* (its error: the field and the problem as fields), or None: nothing is promoted or written that
    the index writer would then refuse to read."""
    probe = ReleaseIndex(generated=_now(), images=(entry,))
    try:
        parse_index(dump_index(probe), source=f"the entry release would write for {entry.tag}")
    except ConfigError as exc:
        return exc
    return None
