"""The shape of the release index (:data:`RELEASE_INDEX`, read by :mod:`imagesmith.index`)."""

from __future__ import annotations

from typing import Any, Final

from imagesmith.schema.core import PERF_FIGURES, Field, Schema
from imagesmith.schema.registries import HOST_PORT, PORT, REPO_PATH

# -- the release index (imagesmith.index: reference form, digests that must agree, repeated tags and registry
# names stay in its reader). Its reader words problems its own way (imagesmith.index._Reader).

#: the ``schema`` values of a release index this imagesmith reads; v2 (issue 32) adds an entry's ``cluster``
#: (its signed multi-node validation). Release writes v2 only for an index that holds a ``cluster`` summary,
#: else v1: a renter's older imagesmith keeps reading every index that does not need the new field
RELEASE_INDEX_V1: Final[str] = "imagesmith.release-index/v1"
RELEASE_INDEX_SCHEMA: Final[str] = "imagesmith.release-index/v2"
RELEASE_INDEX_SCHEMAS: Final[tuple[str, ...]] = (RELEASE_INDEX_V1, RELEASE_INDEX_SCHEMA)
#: the fabrics a cluster validation declares (imagesmith.validate.nics.FABRICS)
CLUSTER_FABRICS: Final[tuple[str, ...]] = ("ib", "roce", "ethernet")
_DIGEST = r"sha256:[0-9a-f]{64}"
_DRIVER = r"\d{3}(\.\d{1,3}){1,2}"
_DATE = r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?"
#: a full UTC timestamp (an index's expiry: compared to the clock, so no date alone, no zone but Z)
_TIMESTAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"


#: a dotted version (torch, torchvision, CUDA, Python) of the release index: ASCII digits, bounded (a version
#: part of thousands of digits would reach int())
_DOTTED_VERSION = r"[0-9]{1,6}(\.[0-9]{1,6}){1,3}"


def _text_field(description: str = "", pattern: str | None = None, what: str = "", **more: Any) -> Field:
    """A non-empty string; with *pattern*, a problem reads "'x' is not <what>", fixed by "write <what>"."""
    if pattern is None:
        return Field(kind="string", min=1, description=description, **more)
    return Field(
        kind="string",
        min=1,
        pattern=pattern,
        invalid=f"{{value!r}} is not {what}",
        hint=f"write {what} (docs/release.md)",
        description=description or what,
        **more,
    )


RELEASE_INDEX: Schema = Schema(
    title="imagesmith release index (index.json, written by imagesmith release)",
    file_name=RELEASE_INDEX_SCHEMA.removeprefix("imagesmith.").split("/")[0],  # named after its schema id
    docs="docs/release.md",
    root=Field(
        kind="table",
        fields={
            "schema": Field(
                kind="string",
                required=True,
                enum=RELEASE_INDEX_SCHEMAS,
                message=f"{{value!r}} is not one of {', '.join(map(repr, RELEASE_INDEX_SCHEMAS))}",
                hint="this imagesmith reads only those schemas; upgrade imagesmith or regenerate the index",
                description="v1, or v2 for an index with a `cluster` entry (issue 32)",
            ),
            "generated": _text_field("when the index was written", _DATE, "an ISO timestamp", required=True),
            "serial": Field(
                kind="integer",
                min=1,
                description="raised by every index the publisher writes (imagesmith release): pick and index "
                "refuse one lower than the newest they have seen for the source (a replayed older index); "
                "absent in indexes written before issue 25",
                example="1764385920",
            ),
            "expires": _text_field(
                "until when the index is valid ([release] index_valid_for after it was written, renewed by "
                "release): pick and index refuse it afterwards; absent in indexes written before issue 25",
                _TIMESTAMP,
                "a UTC timestamp like 2026-12-13T03:12:00Z",
            ),
            "fresh_until": _text_field(
                "issue 34, the freshness bound: until when a renter takes this index as current (written by "
                "imagesmith release, [release] index_fresh_for after it was issued, renewed by every nightly "
                "run): pick and index refuse it afterwards (a frozen mirror can serve it at most this long); "
                "absent in indexes written before it",
                _TIMESTAMP,
                "a UTC timestamp like 2026-12-03T15:12:00Z",
            ),
            "successor_key": _text_field(
                "issue 34, key rotation: the fingerprint of the key that signs the publisher's next indexes; "
                "this index is signed by the current key and the successor, and a renter that pinned the "
                "current key moves its pin to the successor",
                r"sha256:[0-9a-f]{64}",
                "sha256: and 64 lowercase hex digits",
            ),
            "registries": Field(
                kind="array",
                description="the registry hosts the publisher releases to (written by imagesmith release): "
                "pick takes an image only from a host listed here; absent in indexes written before it",
                items=_text_field(
                    pattern=r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:" + PORT + ")?",
                    what="a registry host[:port] (no scheme, no path)",
                ),
            ),
            "published_to": Field(
                kind="array",
                description="every repository the publisher publishes this index to, as host/repository "
                "(written by imagesmith release): pick and index refuse the index read from an oci:// "
                "repository not listed here (a copy of another repository's index); absent in indexes "
                "written before it",
                items=_text_field(
                    pattern=r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:" + PORT + r")?/[a-z0-9]+([._/-]+[a-z0-9]+)*",
                    what="a registry host[:port]/repository (lower case, no tag)",
                ),
            ),
            "images": Field(
                kind="array",
                required=True,
                description="one entry per released tag",
                items=Field(
                    kind="table",
                    fields={
                        "tag": _text_field(
                            "the released tag",
                            r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}",
                            "a Docker tag ([A-Za-z0-9_.-], at most 128 characters)",
                            required=True,
                        ),
                        "matrix": _text_field("the matrix it was built from", required=True),
                        "cell": _text_field("the matrix cell", required=True),
                        "digest": _text_field(
                            "the validated manifest digest",
                            _DIGEST,
                            "a digest sha256:<64 hex>",
                            required=True,
                        ),
                        "registries": Field(
                            kind="array",
                            required=True,
                            min=1,
                            description="where the tag was pushed; every copy has the image's digest",
                            items=Field(
                                kind="table",
                                fields={
                                    "name": _text_field("registries.toml name", required=True),
                                    "kind": _text_field("registry kind (default: generic)"),
                                    "reference": _text_field(
                                        "where the tag was pushed",
                                        rf"{HOST_PORT}/{REPO_PATH}:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}",
                                        "a reference host[:port]/repository:tag (lowercase repository, "
                                        "no digest, no spaces)",
                                        required=True,
                                    ),
                                    "digest": _text_field(
                                        pattern=_DIGEST, what="a digest sha256:<64 hex>", required=True
                                    ),
                                },
                            ),
                        ),
                        "torch": _text_field(
                            pattern=_DOTTED_VERSION, what="a version like 2.5.1", required=True
                        ),
                        "torchvision": _text_field(
                            pattern=_DOTTED_VERSION, what="a version like 0.20.1", required=True
                        ),
                        "cuda": _text_field(
                            pattern=_DOTTED_VERSION, what="a CUDA version like 12.4", required=True
                        ),
                        "python": _text_field(
                            pattern=_DOTTED_VERSION, what="a Python version like 3.11", required=True
                        ),
                        "min_driver": Field(
                            kind="table",
                            required=True,
                            description="the oldest driver that runs it (full; minor-version compatibility)",
                            fields={
                                "full": _text_field(
                                    pattern=_DRIVER, what="a driver version like 550.54.14", required=True
                                ),
                                "minor": _text_field(
                                    pattern=_DRIVER, what="a driver version like 525.60.13", required=True
                                ),
                            },
                        ),
                        "arch": Field(
                            kind="array",
                            required=True,
                            min=1,
                            description="TORCH_CUDA_ARCH_LIST of the wheels",
                            items=_text_field(
                                pattern=r"\d{1,2}\.\d[af]?(\+PTX)?",
                                what="a TORCH_CUDA_ARCH_LIST entry like 9.0 or 12.0+PTX",
                            ),
                        ),
                        "shm": Field(
                            kind="table",
                            required=True,
                            description="what it needs of /dev/shm",
                            fields={
                                "size": _text_field(
                                    "for --shm-size", r"\d+[kmgKMG]?", "a size like 16g", nullable=True
                                ),
                                "ipc_host": Field(kind="boolean", description="needs --ipc=host"),
                            },
                        ),
                        "validated_on": Field(
                            kind="array",
                            required=True,
                            min=1,
                            description="passing validation runs of this digest",
                            items=Field(
                                kind="table",
                                fields={
                                    "gpu": _text_field("GPU model", required=True),
                                    "count": Field(kind="integer", required=True, min=1, description="GPUs"),
                                    "driver": _text_field(
                                        pattern=_DRIVER, what="a driver version like 580.65.06", required=True
                                    ),
                                    "date": _text_field(
                                        pattern=_DATE, what="an ISO date like 2026-11-29", required=True
                                    ),
                                    "report_digest": _text_field(
                                        pattern=_DIGEST, what="sha256:<64 hex>", required=True
                                    ),
                                    "host": Field(kind="string", description="the host's name"),
                                    "link": Field(
                                        kind="string",
                                        description="the weakest GPU-to-GPU link (NV18, SYS, …)",
                                        example='"NV18"',
                                    ),
                                    "figures": Field(
                                        kind="map",
                                        description="what the host measured (the fleet baseline)",
                                        example='{ "hbm_copy_gbps" = 4238.4 }',
                                        keys=Field(
                                            kind="string",
                                            enum=PERF_FIGURES,
                                        ),
                                        items=Field(
                                            kind="number", description="GB/s, TFLOP/s, a ratio or minutes"
                                        ),
                                    ),
                                },
                            ),
                        ),
                        "fingerprint": _text_field("the cell's build fingerprint", required=True),
                        "released": _text_field(
                            "when it was released", _DATE, "an ISO date like 2026-11-29", required=True
                        ),
                        "platform": _text_field("OCI platform (default: linux/amd64)"),
                        "vulnerabilities": Field(
                            kind="table",
                            description="the vulnerability gate's verdict (imagesmith.vulngate)",
                            fields={
                                "scanner": _text_field(
                                    "grype, trivy or osv (SBOM × OSV data)", required=True
                                ),
                                "report": _text_field("the scan report's file name", required=True),
                                "report_digest": _text_field(
                                    pattern=r"sha256:[0-9a-f]{64}(,sha256:[0-9a-f]{64})*",
                                    what="sha256:<64 hex> of the report file(s)",
                                    required=True,
                                ),
                                "fail_on": Field(
                                    kind="string", required=True, enum=("critical", "high", "medium", "low")
                                ),
                                "allowlisted": Field(
                                    kind="array",
                                    description="advisories at or above fail_on let through by the allowlist",
                                    items=_text_field(what="an advisory id"),
                                ),
                            },
                        ),
                        "cluster": Field(
                            kind="table",
                            description="issue 32 (schema v2): the signed, passing multi-node validation of "
                            "this digest (imagesmith validate ssh://n1 ssh://n2 … --image IMAGE@DIGEST "
                            "--sign-key KEY): pick prints it",
                            fields={
                                "nodes": Field(
                                    kind="integer",
                                    required=True,
                                    min=2,
                                    description="machines validated",
                                    message="expected a count of 2 or more nodes, got {value!r}",
                                    hint="regenerate the index with imagesmith release",
                                ),
                                "gpus_per_node": Field(
                                    kind="integer",
                                    required=True,
                                    min=1,
                                    description="GPUs of each node",
                                    message="expected a count of 1 or more GPUs, got {value!r}",
                                    hint="regenerate the index with imagesmith release",
                                ),
                                "fabric": Field(
                                    kind="string",
                                    required=True,
                                    enum=CLUSTER_FABRICS,
                                    description="the fabric the run declared and judged",
                                ),
                                "date": _text_field(
                                    pattern=_DATE, what="an ISO date like 2026-11-29", required=True
                                ),
                                "report_digest": _text_field(
                                    pattern=_DIGEST,
                                    what="sha256 of the signed cluster report",
                                    required=True,
                                ),
                                "artifact": _text_field(
                                    "the manifest digest of the artifact sha256-<hex>.cluster: the signed "
                                    "cluster report attached beside the image in every registry (pick "
                                    "--verify-cluster fetches and checks it)",
                                    pattern=_DIGEST,
                                    what="a sha256 digest",
                                ),
                            },
                        ),
                        "sbom": Field(
                            kind="table",
                            description="the SBOM attested beside the validation attestation",
                            fields={
                                "format": Field(kind="string", required=True, enum=("spdx", "cyclonedx")),
                                "predicate_type": _text_field("the in-toto predicateType", required=True),
                                "digest": _text_field(
                                    pattern=_DIGEST, what="sha256 of the SBOM document", required=True
                                ),
                                "packages": Field(kind="integer", min=0, description="packages it lists"),
                            },
                        ),
                    },
                ),
            ),
        },
    ),
)
