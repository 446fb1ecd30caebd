"""Cluster reports as ``imagesmith validate ssh://n1 ssh://n2 …`` writes them (issue 32), for the tests of the
record (tests/unit/test_cluster_record.py) and of release's cluster step: the document, and its signed
envelope."""

from __future__ import annotations

import copy
from typing import Any

from imagesmith.validate import clusterrecord


def cluster_document(
    digest: str | None,
    *,
    nodes: int = 3,
    gpus: int = 8,
    fabric: str = "ib",
    failed: bool = False,
    repo: str = "acme/torch",
) -> dict[str, Any]:
    """A schema-2 cluster report of *nodes* machines with *gpus* GPUs each; *failed*: the bandwidth promise
    broken (and the verdict with it)."""
    bandwidth: dict[str, Any] = {
        "name": "node-to-node bandwidth",
        "verdict": "passed",
        "why": "",
        "failures": [],
    }
    if failed:
        bandwidth |= {
            "verdict": "failed",
            "failures": [
                {"subject": "n1↔n2", "kind": "pair slow", "message": "pair n1↔n2: n1→n2 2.5 Gb/s", "fix": "f"}
            ],
        }
    data: dict[str, Any] = {
        "schema": 2,
        "kind": "imagesmith cluster report",
        "started": "2026-12-02T10:00:00Z",
        "seconds": 41.5,
        "image": clusterrecord.image_json(f"reg.example/{repo}@{digest}") if digest else None,
        "nodes": [
            {
                "name": f"root@n{i}",
                "address": f"10.0.0.{i}",
                "boot_id": f"boot-{i}",
                "machine_id": f"m-{i}",
                "gpus": [[f"GPU-{i}-{g}", f"00000000:{g:02X}:00.0"] for g in range(gpus)],
                "rdma_ports": [],
                "node_report": None,
                "gpudirect_rdma": None,
            }
            for i in range(1, nodes + 1)
        ],
        "declared": {
            "fabric": fabric,
            "link_gbps": 400.0,
            "nic_ports": None,
            "expect_gdr": False,
            "min_ratio": 0.7,
        },
        "bandwidth": {"pairs": [], "runs": nodes},
        "promises": [
            {"name": "distinct machines", "verdict": "passed", "why": "", "failures": [], "warnings": []},
            bandwidth,
            {
                "name": "NCCL transport",
                "verdict": "not checked",
                "why": "no --nccl-log given",
                "failures": [],
            },
        ],
        "verdict": "failed" if failed else "passed",
        "verdict_reason": "node-to-node bandwidth: pair n1↔n2"
        if failed
        else f"2 promise(s) kept on {nodes} nodes",
    }
    data["summary"] = clusterrecord.summary_json(data)
    return data


#: :func:`changed` with this value deletes the key
DELETE = object()


def changed(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of *data* with the dotted *path* (``nodes.0.gpus``) set to *value* (:data:`DELETE`: the
    key removed)."""
    out = copy.deepcopy(data)
    *parents, last = path.split(".")
    node: Any = out
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    key: Any = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return out
