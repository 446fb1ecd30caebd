"""The release index: which image tags were released, where, with what inside, validated on which hosts.

Pure: ``parse_index`` / ``dump_index`` turn JSON text into frozen dataclasses and back; ``load_index`` /
``save_index`` read and write one file. Nothing here imports a heavy module: ``imagesmith pick`` loads this on
every run. The schema is documented in docs/release.md, its shape is :data:`imagesmith.schema.RELEASE_INDEX`
(docs/schemas/release-index.schema.json); every problem is reported as one ``ConfigError`` naming the
source, the field path (``images[2].min_driver.full``) and the fix.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from imagesmith import atomicio, inputs, kinds, schema
from imagesmith.compat import MinDriver, parse_driver
from imagesmith.errors import ConfigError, Fault, RegistryError
from imagesmith.refs import Registry, split_reference
from imagesmith.tags import INDEX_ARTIFACT_TAG

SCHEMA: Final[str] = schema.RELEASE_INDEX_SCHEMA
#: the schema of an index without a ``cluster`` summary (what older readers take)
SCHEMA_V1: Final[str] = schema.RELEASE_INDEX_V1


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
        """From an index entry: name, reference (``host[:port]/repository:tag``), digest, kind (a retired kind
        name of an index written before, ``acr``, reads as its successor for the host: ``kinds.current``)."""
        repository, tag, _ = split_reference(reference)
        host, _, path = repository.partition("/")
        registry = Registry(name=name, host=host, repository=path, kind=kinds.current(kind, host))
        return cls(registry=registry, tag=tag or "", digest=digest)

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
    #: the weakest GPU-to-GPU link (``NV18``, ``SYS``; empty with one GPU) and what the host measured
    #: (hbm_copy_gbps, matmul_tflops, h2d_gbps, d2h_gbps: medians over its GPUs; allreduce_busbw_gbps):
    #: the fleet baseline of ``imagesmith validate --baseline-from INDEX``
    link: str = ""
    figures: Mapping[str, float] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, kw_only=True)
class VulnRecord:
    """The vulnerability gate's verdict on the digest (imagesmith.vulngate): which scan, which advisories the
    allowlist let through."""

    scanner: str
    report: str
    report_digest: str
    fail_on: str
    allowlisted: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SbomRecord:
    """The SBOM attested beside the validation attestation (imagesmith.sbom)."""

    format: str
    predicate_type: str
    digest: str
    packages: int = 0


@dataclass(frozen=True, kw_only=True)
class ClusterSummary:
    """Issue 32: the signed, passing multi-node validation of the digest (``imagesmith validate ssh://n1
    ssh://n2 … --image IMAGE@DIGEST --sign-key KEY``, checked by release's "check cluster evidence" step):
    how many machines, GPUs on each, the fabric declared and judged, when, and the sha256 of the signed
    cluster report (:mod:`imagesmith.validate.clusterrecord`). ``artifact``: the manifest digest of the
    artifact ``sha256-<hex>.cluster`` release attached beside the image in every registry (the signed
    envelope and its signer's public key): the signed index binds it, ``pick --verify-cluster`` checks it;
    "" in an entry released before it was attached."""

    nodes: int
    gpus_per_node: int
    fabric: str
    date: str
    report_digest: str
    artifact: str = ""


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
    vulnerabilities: VulnRecord | None = None
    sbom: SbomRecord | None = None
    cluster: ClusterSummary | None = None


@dataclass(frozen=True, kw_only=True)
class ReleaseIndex:
    generated: str
    images: tuple[ReleasedImage, ...] = field(default=())
    schema: str = SCHEMA
    #: the registry hosts (``host[:port]``) the publisher releases to: pick takes a copy only from one of
    #: these; empty in an index written before the field existed (pick then warns)
    registries: tuple[str, ...] = ()
    #: issue 25, inside the signed bytes: a number every new index of the publisher raises (pick refuses one
    #: lower than the newest it has seen for the source: a replay), and the time after which the index is no
    #: longer valid (pick refuses it: a frozen mirror). 0 / "" in an index written before they existed
    serial: int = 0
    expires: str = ""
    #: every repository the index is published to (``host/repository``, :func:`index_location`), inside the
    #: signed bytes: an index read from an ``oci://`` repository not listed is a copy of another repository's
    #: index and is refused. Empty in an index written before the field existed
    published_to: tuple[str, ...] = ()
    #: issue 34, inside the signed bytes: until when a renter takes the index as current (the freshness bound:
    #: a frozen mirror can serve it at most this long after it was issued); "" in an index written before it
    fresh_until: str = ""
    #: issue 34, key rotation: the fingerprint of the key that signs the publisher's next indexes (this index
    #: is signed by both); a renter that pinned the signing key moves the pin to it. "" when none
    successor_key: str = ""

    def by_tag(self, tag: str) -> ReleasedImage | None:
        return next((image for image in self.images if image.tag == tag), None)

    def merged(self, images: Sequence[ReleasedImage], *, generated: str) -> ReleaseIndex:
        """A new index with *images* added, replacing entries with the same tag; sorted by tag."""
        new = {image.tag: image for image in self.images}
        for image in images:
            new[image.tag] = image
        return replace(self, generated=generated, images=tuple(new[t] for t in sorted(new)))


class _Reader(schema.Checker):
    """Words the problems :data:`imagesmith.schema.RELEASE_INDEX` finds (and the reader's own) as one
    ConfigError naming the index, the field path and the fix.
    """

    def __init__(self, source: str) -> None:
        super().__init__(source, ConfigError, docs="docs/release.md")

    def fail(
        self, key: str, message: str, *, nearest: str | None = None, hint: str | None = None
    ) -> ConfigError:
        where = f"{self.source}: {key}" if key else self.source
        return ConfigError(
            f"release index {where}: {message}",
            hint=hint or "see docs/release.md",
            file=self.source,
            field=key or None,
            problem=message,
        )

    def keys(
        self, table: Mapping[str, Any], prefix: str, allowed: Sequence[str], required: Sequence[str]
    ) -> None:
        missing = sorted(set(required) - table.keys())
        if missing:
            first = f"{prefix}.{missing[0]}" if prefix else missing[0]
            raise self.fail(first, "missing", hint=f"add {', '.join(missing)} (schema: docs/release.md)")
        unknown = sorted(table.keys() - set(allowed))
        if unknown:
            first = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
            raise self.fail(
                first,
                "unknown field",
                hint=f"remove it or fix its spelling; known: {', '.join(sorted(allowed))}",
            )

    def wrong_type(self, spec: schema.Field, value: Any, key: str) -> ConfigError:
        if spec.message:
            return self.fail(key, spec.message.format(value=value), hint=spec.hint)
        if spec.kind == "string":
            what = "a non-empty string" if spec.min else "a string"
            return self.fail(key, f"expected {what}, got {value!r}")
        if spec.kind == "integer":
            return self.fail(
                key, f"expected a positive integer, got {value!r}", hint="write a count such as 8"
            )
        if spec.kind == "boolean":
            return self.fail(key, f"expected true or false, got {value!r}", hint="write true or false")
        what = "a list" if spec.kind == "array" else "an object"
        return self.fail(key, f"expected {what}, got {type(value).__name__}")

    def too_small(self, spec: schema.Field, value: Any, key: str) -> ConfigError:
        if spec.kind == "array":
            return self.fail(key, "is empty", hint="a released image needs at least one entry here")
        return self.wrong_type(spec, value, key)


def _image(r: _Reader, obj: Mapping[str, Any], path: str) -> ReleasedImage:
    """One ``images[]`` entry that fits the schema; checks what one field says about another."""
    digest = obj["digest"]
    regs: list[RegistryCopy] = []
    for i, reg in enumerate(obj["registries"]):
        rp = f"{path}.registries[{i}]"
        reference = reg["reference"]
        if "/" not in reference or split_reference(reference)[1] is None:
            raise r.fail(
                f"{rp}.reference",
                f"{reference!r} is not host/repository:tag",
                hint="write e.g. registry.example.com/team/pytorch:2.5.1-cu124-py3.11",
            )
        copy = RegistryCopy.parse(
            name=reg["name"],
            reference=reference,
            digest=reg["digest"],
            kind=reg.get("kind", "generic"),
        )
        if copy.digest != digest:
            raise r.fail(
                f"{rp}.digest",
                f"{copy.digest} differs from the image digest {digest}",
                hint="a released tag must point at the validated digest everywhere: rerun imagesmith release",
            )
        regs.append(copy)
    names = [c.name for c in regs]
    if len(set(names)) != len(names):
        raise r.fail(f"{path}.registries", f"registry names repeat: {names}", hint="list each registry once")
    shm = obj["shm"]
    for j, v in enumerate(obj["validated_on"]):
        where = f"{path}.validated_on[{j}]"
        if v["count"] > MAX_GPUS:
            raise r.fail(
                f"{where}.count", f"{v['count']} GPUs in one host", hint=f"a host has 1 to {MAX_GPUS} GPUs"
            )
        for k, x in (v.get("figures") or {}).items():
            if not math.isfinite(float(x)) or float(x) <= 0:
                raise r.fail(
                    f"{where}.figures.{k}",
                    f"{x!r} is not a measured figure",
                    hint="a figure is a positive, finite number (GB/s or TFLOP/s): regenerate the index with "
                    "imagesmith release",
                )
    return ReleasedImage(
        tag=obj["tag"],
        matrix=obj["matrix"],
        cell=obj["cell"],
        digest=digest,
        registries=tuple(regs),
        torch=obj["torch"],
        torchvision=obj["torchvision"],
        cuda=obj["cuda"],
        python=obj["python"],
        min_driver=MinDriver(
            full=parse_driver(obj["min_driver"]["full"]),
            minor_version=parse_driver(obj["min_driver"]["minor"]),
        ),
        arch=tuple(obj["arch"]),
        shm=Shm(size=shm.get("size"), ipc_host=shm.get("ipc_host", False)),
        validated_on=tuple(
            ValidatedOn(
                gpu=v["gpu"],
                count=v["count"],
                driver=v["driver"],
                date=v["date"],
                report_digest=v["report_digest"],
                host=v.get("host", ""),
                link=v.get("link", ""),
                figures=MappingProxyType({str(k): float(x) for k, x in (v.get("figures") or {}).items()}),
            )
            for v in obj["validated_on"]
        ),
        fingerprint=obj["fingerprint"],
        released=obj["released"],
        platform=obj.get("platform", "linux/amd64"),
        vulnerabilities=_vuln(obj.get("vulnerabilities")),
        sbom=_sbom(obj.get("sbom")),
        cluster=_cluster(obj.get("cluster")),
    )


def _vuln(v: Mapping[str, Any] | None) -> VulnRecord | None:
    if v is None:
        return None
    return VulnRecord(
        scanner=v["scanner"],
        report=v["report"],
        report_digest=v["report_digest"],
        fail_on=v["fail_on"],
        allowlisted=tuple(v.get("allowlisted") or ()),
    )


def _cluster(v: Mapping[str, Any] | None) -> ClusterSummary | None:
    if v is None:
        return None
    return ClusterSummary(
        nodes=v["nodes"],
        gpus_per_node=v["gpus_per_node"],
        fabric=v["fabric"],
        date=v["date"],
        report_digest=v["report_digest"],
        artifact=v.get("artifact", ""),
    )


def _sbom(v: Mapping[str, Any] | None) -> SbomRecord | None:
    if v is None:
        return None
    return SbomRecord(
        format=v["format"],
        predicate_type=v["predicate_type"],
        digest=v["digest"],
        packages=v.get("packages", 0),
    )


#: the fields of an entry its image decides (the config's labels): equal in every entry of one digest
_CONTENT: Final[tuple[str, ...]] = (
    "torch",
    "torchvision",
    "cuda",
    "python",
    "min_driver",
    "arch",
    "shm",
    "platform",
)


def _one_image_one_content(r: _Reader, images: Sequence[ReleasedImage]) -> None:
    """Refuse two entries of one digest that disagree on what the image holds: one image has one config,
    and pick would choose the same bytes by either entry's claims."""
    first: dict[str, tuple[int, ReleasedImage]] = {}
    for i, image in enumerate(images):
        seen = first.setdefault(image.digest, (i, image))
        if seen[0] == i:
            continue
        j, other = seen
        for name in _CONTENT:
            if getattr(image, name) != getattr(other, name):
                raise r.fail(
                    f"images[{i}].{name}",
                    f"{image.tag} is the image {image.digest} as {other.tag} (images[{j}]) is, but says "
                    f"{name} {_said(getattr(image, name))}, not {_said(getattr(other, name))}",
                    hint="one digest is one image: regenerate the index with imagesmith release (it reads "
                    "these fields from the image's labels)",
                )


def _said(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, MinDriver):
        return f"{value.full} (minor {value.minor_version})"
    if isinstance(value, Shm):
        return f"size {value.size or 'default'}, ipc_host {str(value.ipc_host).lower()}"
    return str(value)


def parse_index(text: str | bytes, *, source: str) -> ReleaseIndex:
    """Parse and validate index JSON. *source* (file, URL or registry reference) is named in every error.
    The shape is :data:`imagesmith.schema.RELEASE_INDEX` (docs/schemas/release-index.schema.json)."""
    from imagesmith import strictjson

    r = _Reader(source)
    if len(text) > MAX_INDEX_BYTES:
        raise _too_big(source, len(text))
    try:
        raw = strictjson.loads(
            text,
            parse_int=inputs.json_int_parser(
                f"release index {source}",
                hint="regenerate it with imagesmith release, or point --index at the published index",
            ),
        )
    except strictjson.StrictJSONError as exc:
        raise ConfigError(
            f"release index {source}: {exc}",
            hint="regenerate it with imagesmith release, or point --index at the published index",
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"release index {source}: not valid JSON ({exc})",
            hint="regenerate it with imagesmith release, or point --index at the published index",
        ) from None
    except RecursionError:
        raise ConfigError(
            f"release index {source}: not a release index (JSON nested deeper than a parser follows)",
            hint="regenerate it with imagesmith release, or point --index at the published index",
        ) from None
    hidden = _control_character(raw)
    if hidden is not None:
        where, value, char = hidden
        raise r.fail(
            where,
            f"{value[:80]!r} holds the control character U+{ord(char):04X}",
            hint="an index holds no control or invisible formatting characters (printed by pick, one would "
            "move the cursor or rewrite the screen): regenerate it with imagesmith release",
        )
    schema.RELEASE_INDEX.check(raw, checker=r)
    images = tuple(_image(r, raw_img, f"images[{i}]") for i, raw_img in enumerate(raw["images"]))
    if raw["schema"] == SCHEMA_V1:
        with_cluster = [i for i, image in enumerate(images) if image.cluster is not None]
        if with_cluster:  # the field came with v2: a v1 index that has it was not written by release
            raise r.fail(
                f"images[{with_cluster[0]}].cluster",
                f"is a field of {SCHEMA}, not of {SCHEMA_V1}",
                hint="regenerate the index with imagesmith release (it writes v2 for an index with a "
                "cluster summary)",
            )
    tags = [image.tag for image in images]
    dupes = sorted({t for t in tags if tags.count(t) > 1})
    if dupes:
        raise r.fail("images", f"tag {dupes[0]!r} is listed more than once", hint="keep one entry per tag")
    _one_image_one_content(r, images)
    hosts = tuple(raw.get("registries") or ())
    if len(set(hosts)) != len(hosts):
        raise r.fail("registries", f"hosts repeat: {list(hosts)}", hint="list each registry host once")
    expires = raw.get("expires", "")
    if expires:
        try:  # 2026-02-30T00:00:00Z fits the schema's pattern, but is no time: pick would call it expired
            datetime.datetime.fromisoformat(expires.removesuffix("Z"))
        except ValueError:
            raise r.fail(
                "expires",
                f"{expires!r} is no date (no such day or hour)",
                hint="regenerate it with imagesmith release",
            ) from None
    serial = raw.get("serial", 0)
    if serial > MAX_SERIAL:
        raise r.fail("serial", f"{serial} is past {MAX_SERIAL}", hint="regenerate it with imagesmith release")
    published = tuple(raw.get("published_to") or ())
    if len(set(published)) != len(published):
        raise r.fail(
            "published_to", f"repositories repeat: {list(published)}", hint="list each repository once"
        )
    fresh_until = raw.get("fresh_until", "")
    if fresh_until:
        try:
            datetime.datetime.fromisoformat(fresh_until.removesuffix("Z"))
        except ValueError:
            raise r.fail(
                "fresh_until",
                f"{fresh_until!r} is no date (no such day or hour)",
                hint="regenerate it with imagesmith release",
            ) from None
    return ReleaseIndex(
        generated=raw["generated"],
        images=images,
        registries=hosts,
        serial=serial,
        expires=raw.get("expires", ""),
        published_to=published,
        fresh_until=fresh_until,
        successor_key=raw.get("successor_key", ""),
    )


#: characters no index string holds: C0 and C1 controls (a terminal escape sequence starts with one), and the
#: invisible ones that make printed text read otherwise than it is (zero-width, bidirectional overrides)
_HIDDEN: Final[re.Pattern[str]] = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]"
)


def _control_character(raw: Any) -> tuple[str, str, str] | None:
    """(field path, string, character) of the first key or string value of *raw* that holds a character of
    :data:`_HIDDEN`, else None. Iterative: the JSON may be nested as deep as the parser went."""
    todo: list[tuple[str, Any]] = [("", raw)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            found = _HIDDEN.search(value)
            if found is not None:
                return where, value, found.group()
        elif isinstance(value, dict):
            for key, item in value.items():
                inner = f"{where}.{key}" if where else key
                found = _HIDDEN.search(key)
                if found is not None:
                    return where, key, found.group()
                todo.append((inner, item))
        elif isinstance(value, list):
            todo.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
    return None


def index_location(host: str, repository: str) -> str:
    """``host/repository`` of a repository the index is published to, as :attr:`ReleaseIndex.published_to`
    records it and pick compares it: the host the client contacts (never guessed from the path: a single-label
    host such as ``acme`` is that host, not a Docker Hub namespace), in lower case (host names are
    case-insensitive), Docker Hub's aliases, in any case, as ``docker.io`` with ``library/`` added to a
    one-part repository; the repository as the registry API names it."""
    from imagesmith.refs import DOCKER_HUB, DOCKER_HUB_ALIASES

    host = host.lower()
    if host in DOCKER_HUB_ALIASES:
        host = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    return f"{host}/{repository}"


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
                **({"link": v.link} if v.link else {}),
                **({"figures": dict(v.figures)} if v.figures else {}),
            }
            for v in image.validated_on
        ],
        "fingerprint": image.fingerprint,
        "released": image.released,
        "platform": image.platform,
        **(
            {
                "vulnerabilities": {
                    "scanner": image.vulnerabilities.scanner,
                    "report": image.vulnerabilities.report,
                    "report_digest": image.vulnerabilities.report_digest,
                    "fail_on": image.vulnerabilities.fail_on,
                    "allowlisted": list(image.vulnerabilities.allowlisted),
                }
            }
            if image.vulnerabilities is not None
            else {}
        ),
        **(
            {
                "sbom": {
                    "format": image.sbom.format,
                    "predicate_type": image.sbom.predicate_type,
                    "digest": image.sbom.digest,
                    "packages": image.sbom.packages,
                }
            }
            if image.sbom is not None
            else {}
        ),
        **(
            {
                "cluster": {
                    "nodes": image.cluster.nodes,
                    "gpus_per_node": image.cluster.gpus_per_node,
                    "fabric": image.cluster.fabric,
                    "date": image.cluster.date,
                    "report_digest": image.cluster.report_digest,
                }
                | ({"artifact": image.cluster.artifact} if image.cluster.artifact else {})
            }
            if image.cluster is not None
            else {}
        ),
    }


def dump_index(index: ReleaseIndex) -> str:
    """Canonical JSON text (sorted images, two-space indent, trailing newline): same index → same bytes."""
    # v2 only where an entry needs it (its cluster summary): an index without one stays readable by older
    # imagesmith (issue 32)
    needs_v2 = any(image.cluster is not None for image in index.images)
    doc: dict[str, Any] = {"schema": SCHEMA if needs_v2 else SCHEMA_V1, "generated": index.generated}
    if index.serial:
        doc["serial"] = index.serial
    if index.expires:
        doc["expires"] = index.expires
    if index.fresh_until:
        doc["fresh_until"] = index.fresh_until
    if index.successor_key:
        doc["successor_key"] = index.successor_key
    if index.registries:
        doc["registries"] = sorted(index.registries)
    if index.published_to:
        doc["published_to"] = sorted(index.published_to)
    doc |= {
        "images": [_image_json(image) for image in sorted(index.images, key=lambda i: i.tag)],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


#: the highest serial an index may carry (the largest integer every JSON reader holds exactly, 2**53 - 1)
MAX_SERIAL: Final[int] = (1 << 53) - 1

#: how far (seconds) a serial may lie past the clock: serials are the times release wrote them, so one further
#: ahead was not written by a release run with a right clock. Release does not count up from such an index
#: (:func:`issued`), and pick and index refuse it (:func:`imagesmith.indextrust.check_fresh`): recorded as
#: the newest seen, it would make every later index look like a replay
SERIAL_AHEAD_S: Final[int] = 86400

#: the most GPUs a validated_on entry may name for one host (NVIDIA's largest nodes have 72)
MAX_GPUS: Final[int] = 1024

#: the largest release index read (a file, a download, an artifact layer): thousands of images take a few
#: MiB; anything past this is not an index, and is not read into memory
MAX_INDEX_BYTES: Final[int] = 32 << 20


#: issue 34, the freshness bound: how long after it was issued a renter takes an index as current (its
#: signed ``fresh_until``). A mirror or registry that freezes the index can serve it at most this long; the
#: nightly release run (every 24 h) re-issues it once less than half is left, so a renter never sees it
#: lapse while the nightly runs. TUF's timestamp role bounds its freeze window the same way (a short
#: expiry, re-signed often)
DEFAULT_FRESH_FOR: Final[datetime.timedelta] = datetime.timedelta(hours=36)


def renewal_due(
    index: ReleaseIndex,
    valid_for: datetime.timedelta,
    now: datetime.datetime,
    fresh_for: datetime.timedelta = DEFAULT_FRESH_FOR,
) -> bool:
    """Whether release must issue *index* again although nothing in it changed: it has no serial, expiry or
    freshness bound (written before issue 25 / 34), or less than half of *valid_for* (of *fresh_for*) is left
    (the nightly's run renews it long before pick would refuse it)."""
    if not index.serial or not index.expires or not index.fresh_until:
        return True
    try:
        expires = datetime.datetime.strptime(index.expires, "%Y-%m-%dT%H:%M:%SZ")
        fresh = datetime.datetime.strptime(index.fresh_until, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return True
    return (
        expires.replace(tzinfo=datetime.timezone.utc) - now < valid_for / 2
        or fresh.replace(tzinfo=datetime.timezone.utc) - now < fresh_for / 2
    )


def issued(
    index: ReleaseIndex,
    *,
    previous: int,
    valid_for: datetime.timedelta,
    now: datetime.datetime,
    fresh_for: datetime.timedelta = DEFAULT_FRESH_FOR,
) -> ReleaseIndex:
    """*index* as release writes it now: generated *now*, valid for *valid_for*, and a serial above
    *previous* — the seconds since 1970 of *now*, or *previous* + 1 when that is higher, so that a release run
    from a checkout with an older index file still writes a serial above every index published before it."""
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    clock = int(now.timestamp())
    # serials are times: one more than a day ahead of the clock was not written by a release run (an index
    # planted where --extend-from reads it, unsigned or not): raising past it would run the serials up to
    # MAX_SERIAL, where no later index could be newer
    base = previous if previous <= clock + SERIAL_AHEAD_S else 0
    return replace(
        index,
        generated=now.strftime(stamp),
        serial=min(max(base + 1, clock), MAX_SERIAL),
        expires=(now + valid_for).strftime(stamp),
        fresh_until=(now + min(fresh_for, valid_for)).strftime(stamp),
    )


def _too_big(source: str, size: int) -> ConfigError:
    return ConfigError(
        f"release index {source}: {size} bytes, more than the {MAX_INDEX_BYTES >> 20} MiB an index may have",
        hint="point --index at the index imagesmith release writes (release/index.json) or publishes "
        f"({INDEX_ARTIFACT_TAG})",
    )


def load_index(path: Path) -> ReleaseIndex:
    if inputs.is_regular_file(path) and path.stat().st_size > MAX_INDEX_BYTES:
        raise _too_big(str(path), path.stat().st_size)
    text = inputs.read_user_file(
        path,
        "release index",
        hint="pass --index with an existing file, URL or registry ref",
        max_bytes=MAX_INDEX_BYTES,
    )
    return parse_index(text, source=str(path))


def save_index(index: ReleaseIndex, path: Path) -> None:
    """Write atomically (imagesmith.atomicio: temp, fsync, rename) so a reader never sees half an index; a
    symbolic link or a non-regular file at *path* is refused, never written through (issue 34)."""
    atomicio.write_atomic(path, dump_index(index))


# ------------------------------------------------------------------------------------------------------------
# the index as an OCI artifact in a registry (written by imagesmith.release, read by imagesmith.pick)

#: the layer media type of the published index artifact (its tag: imagesmith.tags.INDEX_ARTIFACT_TAG)
INDEX_MEDIA_TYPE: Final[str] = "application/vnd.imagesmith.release-index.v1+json"


def read_index_artifact(client: Any, repo: str, tag: str = INDEX_ARTIFACT_TAG) -> bytes:
    """The index JSON: the index layer of the OCI artifact *repo:tag* (see release.publish_index)."""
    return read_signed_index_artifact(client, repo, tag)[0]


#: the media type of the DSSE envelope layer that signs the index (release --sign-key)
INDEX_SIGNATURE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"


#: the media type of the layer that publishes the release key's public half beside the index (PEM): what
#: pick pins on first use when the user names no key (issue 25)
INDEX_KEY_MEDIA_TYPE: Final[str] = "application/vnd.imagesmith.release-index.key.v1+pem"


def read_signed_index_artifact(
    client: Any, repo: str, tag: str = INDEX_ARTIFACT_TAG
) -> tuple[bytes, bytes | None]:
    """(index JSON, its DSSE envelope or None): the layers of the artifact *repo:tag*, each checked against
    its digest."""
    body, envelope, _ = read_published_index(client, repo, tag)
    return body, envelope


def read_published_index(
    client: Any, repo: str, tag: str = INDEX_ARTIFACT_TAG, *, with_key: bool = False
) -> tuple[bytes, bytes | None, bytes | None]:
    """(index JSON, its DSSE envelope or None, the published public key or None — read only *with_key*): the
    layers of the artifact *repo:tag*, each checked against its digest."""
    manifest = client.get_manifest(repo, tag).json()
    where = f"registry {client.name}: {repo}:{tag}"
    raw_layers = manifest.get("layers")
    if not isinstance(raw_layers, list) or not all(isinstance(x, dict) for x in raw_layers):
        raw_layers = []
    layers = [layer for layer in raw_layers if layer.get("mediaType") == INDEX_MEDIA_TYPE]
    if len(layers) != 1:
        raise RegistryError(
            f"{where} is not an imagesmith release index artifact (expected one layer of type "
            f"{INDEX_MEDIA_TYPE})",
            hint="point --index at the tag imagesmith release publishes",
        )
    sigs = [x for x in raw_layers if x.get("mediaType") == INDEX_SIGNATURE_MEDIA_TYPE]
    body = _blob(client, repo, layers[0], "index", where)
    envelope = _blob(client, repo, sigs[0], "index signature", where) if len(sigs) == 1 else None
    keys = [x for x in raw_layers if x.get("mediaType") == INDEX_KEY_MEDIA_TYPE] if with_key else []
    key = _blob(client, repo, keys[0], "index key", where) if len(keys) == 1 else None
    return body, envelope, key


def _blob(client: Any, repo: str, layer: Mapping[str, Any], what: str, where: str) -> bytes:
    """The bytes of the artifact's *layer*, at most :data:`MAX_INDEX_BYTES`, checked against its digest."""
    from imagesmith.registry import read_small_blob

    return read_small_blob(
        client, repo, layer.get("digest"), layer.get("size"), limit=MAX_INDEX_BYTES, what=what, where=where
    )


class IndexMovedError(RegistryError):
    """The registry's release index moved under a release: it holds another index whose serial is at least
    the one about to be published (another release published meanwhile). Publishing would lose that
    release's entries or give one serial two bodies; nothing is moved."""

    exit_code = 8


def check_index_not_moved(
    client: Any, repo: str, *, new_digest: str, new_body: bytes, current: str | None
) -> None:
    """The compare step of the index publish's compare-and-swap (imagesmith.release.publish_index_everywhere):
    *current* is the digest ``repo:release-index`` holds now (None: no index yet). Publishing *new_body* (the
    artifact *new_digest*) over it is refused (:class:`IndexMovedError`) when it holds another index whose
    serial is at least the new one's: a release on another machine (or one that did not see this project's
    index file) published meanwhile. The same index (a rerun) and an older serial pass."""
    if current is None or current == new_digest:
        return
    new_serial = parse_index(
        new_body.decode("utf-8", "replace"), source="the index this release publishes"
    ).serial
    body, _ = read_signed_index_artifact(client, repo)
    if body == new_body:  # the same index (another signature layer): a rerun
        return
    try:
        theirs = parse_index(body.decode("utf-8", "replace"), source=f"registry {client.name}: {repo}")
    except ConfigError:
        return  # not an index imagesmith can read: the release replaces it, as before
    if theirs.serial < new_serial:
        return
    raise IndexMovedError(
        f"registry {client.name}: {repo}:{INDEX_ARTIFACT_TAG} moved under this release: it holds serial "
        f"{theirs.serial} ({current}), and this release would publish serial {new_serial} with other bytes "
        "(another release published meanwhile); nothing was moved",
        hint=f"take that index into this project's index file and rerun the release (move the file away and "
        f"pass --extend-from {client.name}), so that no release's entry is lost and no serial has two bodies",
        registry=client.name,
        repository=repo,
        digest=current,
        fault=Fault.INDEX_MOVED,
    )
