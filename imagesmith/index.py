"""The release index: which image tags were released, where, with what inside, validated on which hosts.

Pure: ``parse_index`` / ``dump_index`` turn JSON text into frozen dataclasses and back; ``load_index`` /
``save_index`` read and write one file. Nothing here imports a heavy module: ``imagesmith pick`` loads this on
every run. The schema is documented in docs/release.md; every problem is reported as one ``ConfigError``
naming the source, the field path (``images[2].min_driver.full``) and the fix.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from imagesmith.compat import MinDriver, parse_driver
from imagesmith.errors import ConfigError, RegistryError
from imagesmith.refs import Registry, split_reference
from imagesmith.tags import INDEX_ARTIFACT_TAG

SCHEMA = "imagesmith.release-index/v1"

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_DRIVER = re.compile(r"^\d{3}(\.\d{1,3}){1,2}$")
_VERSION = re.compile(r"^\d+(\.\d+){1,3}$")
_ARCH = re.compile(r"^\d{1,2}\.\d[af]?(\+PTX)?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")
_SHM = re.compile(r"^\d+[kmgKMG]?$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True, kw_only=True)
class RegistryCopy:
    """One registry's copy of a released image: a :class:`~imagesmith.refs.Registry`, a tag, a digest.

    Made only by :meth:`parse` (also by release), so a copy read back from an index equals the one written.
    """

    registry: Registry
    tag: str
    digest: str

    @classmethod
    def parse(cls, *, name: str, reference: str, digest: str, kind: str = "generic") -> RegistryCopy:
        """From an index entry: name, reference (``host[:port]/repository:tag``), digest, kind."""
        repository, tag, _ = split_reference(reference)
        host, _, path = repository.partition("/")
        return cls(
            registry=Registry(name=name, host=host, repository=path, kind=kind), tag=tag or "", digest=digest
        )

    @property
    def name(self) -> str:
        return self.registry.name

    @property
    def kind(self) -> str:
        return self.registry.kind

    @property
    def host(self) -> str:
        return self.registry.host

    @property
    def reference(self) -> str:
        """``host[:port]/repository:tag``."""
        return self.registry.ref(self.tag)

    @property
    def pinned(self) -> str:
        """``host/repository@sha256:…``: the immutable reference (what was validated)."""
        return self.registry.pinned(self.digest)


@dataclass(frozen=True, kw_only=True)
class Shm:
    """What the image needs of /dev/shm: a ``size`` for ``--shm-size`` (e.g. ``16g``) and/or ``ipc_host``."""

    size: str | None = None
    ipc_host: bool = False


@dataclass(frozen=True, kw_only=True)
class ValidatedOn:
    """One passing validation run of this exact digest on a GPU host."""

    gpu: str
    count: int
    driver: str
    date: str
    report_digest: str
    host: str = ""


@dataclass(frozen=True, kw_only=True)
class ReleasedImage:
    tag: str
    matrix: str
    cell: str
    digest: str
    registries: tuple[RegistryCopy, ...]
    torch: str
    torchvision: str
    cuda: str
    python: str
    min_driver: MinDriver
    arch: tuple[str, ...]
    shm: Shm
    validated_on: tuple[ValidatedOn, ...]
    fingerprint: str
    released: str
    platform: str = "linux/amd64"


@dataclass(frozen=True, kw_only=True)
class ReleaseIndex:
    generated: str
    images: tuple[ReleasedImage, ...] = field(default=())
    schema: str = SCHEMA

    def by_tag(self, tag: str) -> ReleasedImage | None:
        return next((image for image in self.images if image.tag == tag), None)

    def merged(self, images: Sequence[ReleasedImage], *, generated: str) -> ReleaseIndex:
        """A new index with *images* added, replacing entries with the same tag; sorted by tag."""
        new = {image.tag: image for image in self.images}
        for image in images:
            new[image.tag] = image
        return replace(self, generated=generated, images=tuple(new[t] for t in sorted(new)))


class _Reader:
    """Typed access to a JSON tree that reports the first problem as a ConfigError naming source and path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, problem: str, fix: str) -> ConfigError:
        where = f"{self.source}: {path}" if path else self.source
        return ConfigError(f"release index {where}: {problem}", hint=fix)

    def obj(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {type(value).__name__}", "see docs/release.md")
        return value

    def keys(self, value: Mapping[str, Any], path: str, required: set[str], optional: set[str]) -> None:
        missing = sorted(required - value.keys())
        if missing:
            first = f"{path}.{missing[0]}" if path else missing[0]
            raise self.fail(first, "missing", f"add {', '.join(missing)} (schema: docs/release.md)")
        unknown = sorted(value.keys() - required - optional)
        if unknown:
            first = f"{path}.{unknown[0]}" if path else unknown[0]
            raise self.fail(
                first,
                "unknown field",
                f"remove it or fix its spelling; known: {', '.join(sorted(required | optional))}",
            )

    def string(self, value: Any, path: str, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {value!r}", "see docs/release.md")
        if pattern is not None and not pattern.match(value):
            raise self.fail(path, f"{value!r} is not {what or 'valid'}", f"write {what} (docs/release.md)")
        return value

    def integer(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(path, f"expected a positive integer, got {value!r}", "write a count such as 8")
        return value

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false, got {value!r}", "write true or false")
        return value

    def array(self, value: Any, path: str, *, nonempty: bool = True) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {type(value).__name__}", "see docs/release.md")
        if nonempty and not value:
            raise self.fail(path, "is empty", "a released image needs at least one entry here")
        return value


def _image(r: _Reader, raw: Any, path: str) -> ReleasedImage:
    obj = r.obj(raw, path)
    r.keys(
        obj,
        path,
        {
            "tag",
            "matrix",
            "cell",
            "digest",
            "registries",
            "torch",
            "torchvision",
            "cuda",
            "python",
            "min_driver",
            "arch",
            "shm",
            "validated_on",
            "fingerprint",
            "released",
        },
        {"platform"},
    )
    digest = r.string(obj["digest"], f"{path}.digest", _DIGEST, "a digest sha256:<64 hex>")
    regs: list[RegistryCopy] = []
    for i, raw_reg in enumerate(r.array(obj["registries"], f"{path}.registries")):
        rp = f"{path}.registries[{i}]"
        reg = r.obj(raw_reg, rp)
        r.keys(reg, rp, {"name", "reference", "digest"}, {"kind"})
        name = r.string(reg["name"], f"{rp}.name")
        reference = r.string(reg["reference"], f"{rp}.reference")
        if "/" not in reference or split_reference(reference)[1] is None:
            raise r.fail(
                f"{rp}.reference",
                f"{reference!r} is not host/repository:tag",
                "write e.g. registry.example.com/team/pytorch:2.5.1-cu124-py3.11",
            )
        copy = RegistryCopy.parse(
            name=name,
            reference=reference,
            digest=r.string(reg["digest"], f"{rp}.digest", _DIGEST, "a digest sha256:<64 hex>"),
            kind=r.string(reg.get("kind", "generic"), f"{rp}.kind"),
        )
        if copy.digest != digest:
            raise r.fail(
                f"{rp}.digest",
                f"{copy.digest} differs from the image digest {digest}",
                "a released tag must point at the validated digest everywhere: rerun imagesmith release",
            )
        regs.append(copy)
    names = [c.name for c in regs]
    if len(set(names)) != len(names):
        raise r.fail(f"{path}.registries", f"registry names repeat: {names}", "list each registry once")
    md = r.obj(obj["min_driver"], f"{path}.min_driver")
    r.keys(md, f"{path}.min_driver", {"full", "minor"}, set())
    shm = r.obj(obj["shm"], f"{path}.shm")
    r.keys(shm, f"{path}.shm", set(), {"size", "ipc_host"})
    size = shm.get("size")
    validated: list[ValidatedOn] = []
    for i, raw_v in enumerate(r.array(obj["validated_on"], f"{path}.validated_on")):
        vp = f"{path}.validated_on[{i}]"
        v = r.obj(raw_v, vp)
        r.keys(v, vp, {"gpu", "count", "driver", "date", "report_digest"}, {"host"})
        validated.append(
            ValidatedOn(
                gpu=r.string(v["gpu"], f"{vp}.gpu"),
                count=r.integer(v["count"], f"{vp}.count"),
                driver=r.string(v["driver"], f"{vp}.driver", _DRIVER, "a driver version like 580.65.06"),
                date=r.string(v["date"], f"{vp}.date", _DATE, "an ISO date like 2026-11-29"),
                report_digest=r.string(v["report_digest"], f"{vp}.report_digest", _DIGEST, "sha256:<64 hex>"),
                host=str(v.get("host", "")),
            )
        )
    arch = tuple(
        r.string(a, f"{path}.arch[{i}]", _ARCH, "a TORCH_CUDA_ARCH_LIST entry like 9.0 or 12.0+PTX")
        for i, a in enumerate(r.array(obj["arch"], f"{path}.arch"))
    )
    return ReleasedImage(
        tag=r.string(
            obj["tag"], f"{path}.tag", _TAG, "a Docker tag ([A-Za-z0-9_.-], at most 128 characters)"
        ),
        matrix=r.string(obj["matrix"], f"{path}.matrix"),
        cell=r.string(obj["cell"], f"{path}.cell"),
        digest=digest,
        registries=tuple(regs),
        torch=r.string(obj["torch"], f"{path}.torch", _VERSION, "a version like 2.5.1"),
        torchvision=r.string(obj["torchvision"], f"{path}.torchvision", _VERSION, "a version like 0.20.1"),
        cuda=r.string(obj["cuda"], f"{path}.cuda", _VERSION, "a CUDA version like 12.4"),
        python=r.string(obj["python"], f"{path}.python", _VERSION, "a Python version like 3.11"),
        min_driver=MinDriver(
            full=parse_driver(
                r.string(md["full"], f"{path}.min_driver.full", _DRIVER, "a driver version like 550.54.14")
            ),
            minor_version=parse_driver(
                r.string(md["minor"], f"{path}.min_driver.minor", _DRIVER, "a driver version like 525.60.13")
            ),
        ),
        arch=arch,
        shm=Shm(
            size=None if size is None else r.string(size, f"{path}.shm.size", _SHM, "a size like 16g"),
            ipc_host=r.boolean(shm.get("ipc_host", False), f"{path}.shm.ipc_host"),
        ),
        validated_on=tuple(validated),
        fingerprint=r.string(obj["fingerprint"], f"{path}.fingerprint"),
        released=r.string(obj["released"], f"{path}.released", _DATE, "an ISO date like 2026-11-29"),
        platform=r.string(obj.get("platform", "linux/amd64"), f"{path}.platform"),
    )


def parse_index(text: str | bytes, *, source: str) -> ReleaseIndex:
    """Parse and validate index JSON. *source* (file, URL or registry reference) is named in every error."""
    r = _Reader(source)
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"release index {source}: not valid JSON ({exc})",
            hint="regenerate it with imagesmith release, or point --index at the published index",
        ) from None
    top = r.obj(raw, "")
    r.keys(top, "", {"schema", "generated", "images"}, set())
    if top["schema"] != SCHEMA:
        raise r.fail(
            "schema",
            f"{top['schema']!r} is not {SCHEMA!r}",
            "this imagesmith reads only that schema; upgrade imagesmith or regenerate the index",
        )
    images = tuple(
        _image(r, raw_img, f"images[{i}]")
        for i, raw_img in enumerate(r.array(top["images"], "images", nonempty=False))
    )
    tags = [image.tag for image in images]
    dupes = sorted({t for t in tags if tags.count(t) > 1})
    if dupes:
        raise r.fail("images", f"tag {dupes[0]!r} is listed more than once", "keep one entry per tag")
    return ReleaseIndex(
        generated=r.string(top["generated"], "generated", _DATE, "an ISO timestamp"), images=images
    )


def _image_json(image: ReleasedImage) -> dict[str, Any]:
    shm: dict[str, Any] = {"ipc_host": image.shm.ipc_host}
    if image.shm.size is not None:
        shm["size"] = image.shm.size
    return {
        "tag": image.tag,
        "matrix": image.matrix,
        "cell": image.cell,
        "digest": image.digest,
        "registries": [
            {"name": c.name, "kind": c.kind, "reference": c.reference, "digest": c.digest}
            for c in image.registries
        ],
        "torch": image.torch,
        "torchvision": image.torchvision,
        "cuda": image.cuda,
        "python": image.python,
        "min_driver": {"full": str(image.min_driver.full), "minor": str(image.min_driver.minor_version)},
        "arch": list(image.arch),
        "shm": shm,
        "validated_on": [
            {
                "gpu": v.gpu,
                "count": v.count,
                "driver": v.driver,
                "date": v.date,
                "report_digest": v.report_digest,
                **({"host": v.host} if v.host else {}),
            }
            for v in image.validated_on
        ],
        "fingerprint": image.fingerprint,
        "released": image.released,
        "platform": image.platform,
    }


def dump_index(index: ReleaseIndex) -> str:
    """Canonical JSON text (sorted images, two-space indent, trailing newline): same index → same bytes."""
    doc = {
        "schema": index.schema,
        "generated": index.generated,
        "images": [_image_json(image) for image in sorted(index.images, key=lambda i: i.tag)],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def load_index(path: Path) -> ReleaseIndex:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"release index {path}: no such file",
            hint="pass --index with an existing file, URL or registry ref",
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"release index {path}: cannot read ({exc.strerror})", hint="check the path"
        ) from None
    return parse_index(text, source=str(path))


def save_index(index: ReleaseIndex, path: Path) -> None:
    """Write atomically (temp file + rename) so a reader never sees half an index."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(dump_index(index), encoding="utf-8")
    tmp.replace(path)


# ------------------------------------------------------------------------------------------------------------
# the index as an OCI artifact in a registry (written by imagesmith.release, read by imagesmith.pick)

#: the layer media type of the published index artifact (its tag: imagesmith.tags.INDEX_ARTIFACT_TAG)
INDEX_MEDIA_TYPE: Final[str] = "application/vnd.imagesmith.release-index.v1+json"


def read_index_artifact(client: Any, repo: str, tag: str = INDEX_ARTIFACT_TAG) -> bytes:
    """The index JSON: the single layer of the OCI artifact *repo:tag* (see release.publish_index)."""
    manifest = client.get_manifest(repo, tag).json()
    layers = [layer for layer in manifest.get("layers", []) if layer.get("mediaType") == INDEX_MEDIA_TYPE]
    if len(layers) != 1:
        raise RegistryError(
            f"registry {client.name}: {repo}:{tag} is not an imagesmith release index artifact "
            f"(expected one layer of type {INDEX_MEDIA_TYPE})",
            hint="point --index at the tag imagesmith release publishes",
        )
    digest = layers[0]["digest"]
    with client.get_blob(repo, digest) as resp:
        body: bytes = resp.content
    if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
        raise RegistryError(
            f"registry {client.name}: index blob {digest} arrived with a different sha256",
            hint="a proxy or mirror altered it: pull again, or read the index from another source (--index)",
        )
    return body
