"""The shapes of the validation report (:data:`VALIDATION_REPORT`, ``report.json`` of ``imagesmith
validate``, read by :mod:`imagesmith.validate.record`), of the figures it measures (:data:`PERF_FIGURES`)
of what a GPU rental promised (:data:`LISTING`, ``imagesmith validate --listing``) and of the cluster report
(:data:`CLUSTER_REPORT`, ``cluster.json`` of ``imagesmith validate ssh://n1 ssh://n2 …``, read by
:mod:`imagesmith.validate.clusterrecord`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from imagesmith.schema.core import Field, Kind, Schema
from imagesmith.schema.index import _DIGEST

# -- the validation report: report.json of imagesmith validate, read by imagesmith release
# (imagesmith.validate.record). Its tables are open: an image may carry a newer imagesmith-validate that
# records more.

#: the report schema imagesmith validate writes, and those a reader takes
REPORT_SCHEMA: Final[int] = 3
REPORT_SCHEMAS: Final[tuple[int, ...]] = (1, 2, 3)
#: a report's verdicts
VERDICTS: Final[tuple[str, ...]] = ("passed", "failed", "not validated")
_OPTIONAL_TEXT = Field(kind="string", nullable=True)

#: one GPU of a schema-2 report's ``gpus`` (nvidia-smi's view)
REPORT_GPU: Field = Field(
    kind="table",
    open=True,
    description="one GPU the suite saw",
    fields={
        "index": Field(kind="integer", description="nvidia-smi index"),
        "name": Field(kind="string", description="model, e.g. NVIDIA H200"),
        "driver": Field(kind="string", description="driver version"),
        "memory_mib": Field(kind="integer", nullable=True),
        "compute_cap": replace(_OPTIONAL_TEXT, description="compute capability, e.g. 9.0"),
        "bus_id": _OPTIONAL_TEXT,
        "uuid": _OPTIONAL_TEXT,
    },
)

VALIDATION_REPORT: Schema = Schema(
    title="imagesmith validation report (report.json, written by imagesmith validate)",
    file_name="validation-report",
    docs="docs/validation.md",
    root=Field(
        kind="table",
        open=True,
        message="no 'verdict' key",
        hint="pass the report.json imagesmith validate wrote",
        fields={
            "schema": Field(
                kind="integer",
                enum=REPORT_SCHEMAS,
                message=f"report schema {{value!r}} is not one this imagesmith reads ({REPORT_SCHEMAS})",
                hint="release with the imagesmith version that validated, or upgrade imagesmith",
                description=(
                    "report format (absent: 1); 2 records the GPU inventory as `gpus`; 3 records why as "
                    "values: `verdict_cause` and each skipped check's `skip`"
                ),
            ),
            "verdict": Field(kind="string", required=True, enum=VERDICTS),
            "verdict_reason": Field(kind="string", description="why, in one line"),
            "verdict_cause": Field(
                kind="string",
                description=(
                    "why, as a value (schema 3): suite-error, failed, no-gpu, no-check, left-out, "
                    "no-gpus-given, refused; empty when passed"
                ),
            ),
            "target": Field(kind="string", description="what was validated: an image reference or host"),
            "started": Field(kind="string", description="UTC start time"),
            "duration_s": Field(kind="number"),
            "image": Field(
                kind="table",
                open=True,
                fields={"digest": Field(kind="string", pattern=_DIGEST, description="the image's digest")},
            ),
            "options": Field(kind="table", open=True, description="the suite's options"),
            "gpus": Field(kind="array", items=REPORT_GPU, description="every GPU the suite saw (schema 2)"),
            "checks": Field(
                kind="array",
                description="one entry per check",
                items=Field(
                    kind="table",
                    open=True,
                    fields={
                        "name": Field(kind="string"),
                        "module": Field(kind="string"),
                        "status": Field(
                            kind="string", description="passed, failed, skipped (empty: errored)"
                        ),
                        "message": Field(kind="string"),
                        "fix": Field(kind="string"),
                        "duration_s": Field(kind="number"),
                        "figures": Field(kind="table", open=True, description="measured values"),
                        "warnings": Field(kind="array", items=Field(kind="string")),
                        "skip": Field(
                            kind="string",
                            description=(
                                "a skipped check's cause (schema 3): no-gpu when the target showed no GPU"
                            ),
                        ),
                    },
                ),
            ),
            "warnings": Field(kind="array", items=Field(kind="string")),
            "topology_matrix": Field(
                kind="map", nullable=True, items=Field(kind="string"), description="nvidia-smi topo -m links"
            ),
            "plot": Field(kind="string"),
            "logs": Field(kind="array", items=Field(kind="string")),
        },
    ),
)


def _promise(kind: Kind, description: str, example: str, **kw: Any) -> Field:
    return Field(kind=kind, description=description, example=example, **kw)


def _folder(name: str) -> Field:
    return Field(
        kind="table",
        description=f"the {name} folder and what the listing promised of it",
        fields={
            "path": _promise(
                "string", f"absolute path of the {name} folder on the host", '"/data"', required=True
            ),
            "read": _promise("string", "sequential 1 MiB read, a rate (GB/s: bytes, Gb/s: bits)", '"5 GB/s"'),
            "write": _promise("string", "sequential 1 MiB write, a rate", '"2 GB/s"'),
            "iops": _promise("integer", "4 KiB random-read IOPS", "200000"),
            "free": _promise("string", "free space you need there, a size (GB or GiB)", '"2 TB"'),
        },
    )


LISTING: Schema = Schema(
    title="what a GPU rental promised (imagesmith validate --listing FILE)",
    file_name="listing.toml",
    docs="docs/validation.md",
    root=Field(
        kind="table",
        fields={
            "gpu": Field(
                kind="table",
                fields={
                    "model": _promise("string", "as --expect-gpu: tokens of nvidia-smi's name", '"H200"'),
                    "count": _promise("integer", "number of GPUs (1-1024)", "8"),
                    "memory": _promise("string", "memory per GPU, a size (GB or GiB)", '"141 GB"'),
                    "interconnect": _promise(
                        "string", "how GPU pairs connect: nvlink or pcie", '"nvlink"', enum=("nvlink", "pcie")
                    ),
                    "mig": _promise("boolean", "MIG enabled (true) or whole GPUs (false)", "false"),
                    "driver": _promise("string", "least driver version", '"580"'),
                    "cuda": _promise("string", "least CUDA version of the driver", '"13.0"'),
                },
            ),
            "host": Field(
                kind="table",
                fields={
                    "vcpu": _promise("integer", "vCPUs the container gets", "128"),
                    "ram": _promise("string", "RAM the container gets, a size", '"2 TiB"'),
                },
            ),
            "network": Field(
                kind="table",
                fields={
                    "nic_rate": _promise("string", "link rate of the fastest NIC, a rate", '"400 Gb/s"'),
                    "fabric": _promise(
                        "string",
                        "infiniband, roce or ethernet",
                        '"infiniband"',
                        enum=("infiniband", "roce", "ethernet"),
                    ),
                },
            ),
            "storage": Field(
                kind="table",
                fields={"data": _folder("data"), "checkpoint": _folder("checkpoint")},
            ),
            "price": Field(
                kind="table",
                fields={
                    "per_hour": _promise("number", "price per hour of the rental", "23.92"),
                    "currency": _promise("string", "its currency", '"USD"'),
                },
            ),
        },
    ),
)


# -- the cluster report: cluster.json of ``imagesmith validate ssh://n1 ssh://n2 …`` (issue 32), read by
# imagesmith.validate.clusterrecord and checked by release. Its root is closed (release reads it as evidence:
# an unknown key is a report imagesmith did not write); the node, bandwidth and promise tables are open.

#: the cluster report schema validate writes, and those a reader takes: 2 adds ``image`` (the digest the run
#: is evidence for) and ``summary``
CLUSTER_REPORT_SCHEMA: Final[int] = 2
CLUSTER_REPORT_SCHEMAS: Final[tuple[int, ...]] = (1, 2)
CLUSTER_REPORT_KIND: Final[str] = "imagesmith cluster report"
#: a cluster verdict, and one promise's
CLUSTER_VERDICTS: Final[tuple[str, ...]] = ("passed", "failed")
PROMISE_VERDICTS: Final[tuple[str, ...]] = ("passed", "failed", "not checked", "not validated")
_FABRIC = Field(kind="string", enum=("ib", "roce", "ethernet"), description="ib, roce or ethernet")
_FINDING = Field(
    kind="table",
    open=True,
    fields={
        "subject": Field(kind="string"),
        "kind": Field(kind="string"),
        "message": Field(kind="string"),
        "fix": Field(kind="string"),
    },
)

CLUSTER_REPORT: Schema = Schema(
    title="imagesmith cluster report (cluster.json, written by imagesmith validate ssh://n1 ssh://n2 …)",
    file_name="cluster-report",
    docs="docs/validation.md",
    root=Field(
        kind="table",
        fields={
            "schema": Field(
                kind="integer",
                required=True,
                enum=CLUSTER_REPORT_SCHEMAS,
                hint="release with the imagesmith version that validated, or upgrade imagesmith",
                description="report format; 2 records `image` and `summary`",
            ),
            "kind": Field(kind="string", required=True, enum=(CLUSTER_REPORT_KIND,)),
            "started": Field(
                kind="string",
                required=True,
                pattern=r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z",
                description="UTC start time",
            ),
            "seconds": Field(kind="number", description="how long the run took"),
            "image": Field(
                kind="table",
                nullable=True,
                description="schema 2: the image the run is evidence for (--image IMAGE@DIGEST); null "
                "without one",
                fields={
                    "reference": Field(kind="string", required=True, min=1),
                    "digest": Field(
                        kind="string", required=True, pattern=_DIGEST, description="its manifest digest"
                    ),
                },
            ),
            "summary": Field(
                kind="table",
                description="schema 2: what the index records (the reader recomputes it from the report)",
                fields={
                    "nodes": Field(kind="integer", required=True, min=2),
                    "gpus_per_node": Field(
                        kind="integer", required=True, min=0, description="the fewest GPUs of a node"
                    ),
                    "fabric": replace(_FABRIC, required=True),
                    "verdict": Field(kind="string", required=True, enum=CLUSTER_VERDICTS),
                },
            ),
            "nodes": Field(
                kind="array",
                required=True,
                min=2,
                description="one entry per node",
                items=Field(
                    kind="table",
                    open=True,
                    fields={
                        "name": Field(kind="string", required=True, min=1),
                        "address": Field(kind="string"),
                        "boot_id": Field(kind="string", required=True, min=1),
                        "machine_id": Field(kind="string"),
                        "gpus": Field(
                            kind="array",
                            required=True,
                            description="[uuid, PCI bus id] of each GPU the node lists",
                            items=Field(kind="array", items=Field(kind="string")),
                        ),
                        "rdma_ports": Field(kind="array", items=Field(kind="table", open=True)),
                        "node_report": Field(kind="string", nullable=True),
                        "gpudirect_rdma": Field(kind="table", open=True, nullable=True),
                    },
                ),
            ),
            "declared": Field(
                kind="table",
                required=True,
                open=True,
                fields={"fabric": replace(_FABRIC, required=True)},
            ),
            "collective": Field(
                kind="table",
                open=True,
                nullable=True,
                description="the cross-node collective (--collective): its launcher, ranks and, per "
                "nccl-tests run, busbw per message size, its expected busbw and the NCCL transport, and "
                "`plot` (busbw.png beside it, or why there is none); absent or null when not run",
            ),
            "ddp": Field(
                kind="table",
                open=True,
                nullable=True,
                description="the cross-node DDP step (--ddp): its launcher and backend, the one-node and "
                "all-node runs (torchrun argv, each rank's host and samples/s), the scaling efficiency and "
                "its threshold with the basis; absent or null when not run",
            ),
            "bandwidth": Field(
                kind="table",
                required=True,
                open=True,
                description="the node-pair bandwidth matrix (iperf3, both directions)",
                fields={
                    "pairs": Field(kind="array", items=Field(kind="table", open=True)),
                    "runs": Field(kind="integer", min=0),
                },
            ),
            "rdma_bandwidth": Field(
                kind="table",
                open=True,
                nullable=True,
                description="the RDMA node-pair bandwidth (ib_write_bw per device pair, ring + re-pairing), "
                "its threshold and basis; absent or null when it did not run (no RDMA port on two nodes, "
                "--no-rdma-bandwidth)",
                fields={
                    "pairs": Field(kind="array", items=Field(kind="table", open=True)),
                    "runs": Field(kind="integer", min=0),
                },
            ),
            "promises": Field(
                kind="array",
                required=True,
                min=1,
                description="the verdict per promise",
                items=Field(
                    kind="table",
                    open=True,
                    fields={
                        "name": Field(kind="string", required=True, min=1),
                        "verdict": Field(kind="string", required=True, enum=PROMISE_VERDICTS),
                        "why": Field(kind="string"),
                        "failures": Field(kind="array", items=_FINDING),
                        "warnings": Field(kind="array", items=_FINDING),
                    },
                ),
            ),
            "verdict": Field(kind="string", required=True, enum=CLUSTER_VERDICTS),
            "verdict_reason": Field(kind="string"),
        },
    ),
)
