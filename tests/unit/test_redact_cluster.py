"""Issue 32: what of a cluster report leaves the cluster (signed by validate, attached by release beside the
image in every registry): no node host, ssh target, address, login user, machine id or RoCE GID; the evidence
(node count, GPUs, fabric, figures, verdicts) kept; pure and idempotent."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from imagesmith.validate.clusterrecord import ClusterReport, canonical, summary_json
from imagesmith.validate.redact import REDACTED, cluster_redacted, redact_cluster
from tests.clusterreports import cluster_document

DIGEST = "sha256:" + "d" * 64
NAMES = ("alice@gpu-node-17.corp.example:2222", "alice@gpu-node-18.corp.example:2222", "root@n1")
SECRETS = (
    "gpu-node-17.corp.example",
    "gpu-node-18",
    "alice",
    "root@",
    "192.168.7.17",
    "10.1.0.3",
    "172.16.4.9",
    "m-1",
)


def report() -> dict[str, Any]:
    data = cluster_document(DIGEST)
    for node, name, address in zip(
        data["nodes"], NAMES, ("192.168.7.17", "192.168.7.18", "10.1.0.3"), strict=True
    ):
        node |= {"name": name, "address": address}
        node["rdma_ports"] = [
            {"device": "mlx5_0", "port": 1, "roce_v2_gids": ["0000:0000:0000:0000:0000:ffff:c0a8:0711"]}
        ]
        node["node_report"] = f"nodes/{name.replace('@', '_')}/report.json"
    data["promises"][1]["failures"] = [
        {
            "subject": "gpu-node-17.corp.example↔n1",
            "kind": "pair slow",
            "message": "pair gpu-node-17.corp.example↔n1: 2.5 Gb/s over ens1n1 (ssh://alice@gpu-node-17.corp."
            "example:2222, /home/alice/.ssh/config)",
            "fix": "NCCL INFO Bootstrap : Using eth0:10.1.0.3<0>, OOB 172.16.4.9",
        }
    ]
    data["collective"] = {
        "launcher": "mpirun",
        "runs": [
            {
                "argv": ["mpirun", "--host", "gpu-node-17.corp.example:8,gpu-node-18.corp.example:8,n1:8"],
                "ranks": [
                    {"rank": 0, "host": "gpu-node-17.corp.example", "pci_bus_id": "0000:18:00.0"},
                    {"rank": 8, "host": "ip-10-0-0-7", "pci_bus_id": "0000:18:00.0"},
                ],
            }
        ],
    }
    data["summary"] = summary_json(data)
    return data


def test_no_node_host_address_user_or_machine_id_is_left() -> None:
    out = redact_cluster(report())
    text = json.dumps(out)
    for secret in SECRETS:
        assert secret not in text, secret
    assert [n["name"] for n in out["nodes"]] == ["node-1", "node-2", "node-3"]
    assert {n["address"] for n in out["nodes"]} == {REDACTED}
    assert {n["machine_id"] for n in out["nodes"]} == {REDACTED}
    assert out["nodes"][0]["rdma_ports"][0]["roce_v2_gids"] == [REDACTED]  # a GID embeds the IPv4 address
    assert out["nodes"][0]["node_report"] == REDACTED
    failure = out["promises"][1]["failures"][0]
    assert failure["subject"] == "node-1↔node-3"  # the same node, the same name everywhere
    assert "over ens1n1" in failure["message"]  # a host name inside another word is not one
    assert failure["fix"].endswith("eth0:node-3<0>, OOB <redacted>")  # a node's address, another IPv4
    run = out["collective"]["runs"][0]
    assert run["argv"][-1] == "node-1:8,node-2:8,node-3:8"
    assert [r["host"] for r in run["ranks"]] == ["node-1", "host-1"]  # a host no node is named after


def test_the_evidence_is_kept_and_the_report_still_reads_the_same() -> None:
    data = report()
    out = redact_cluster(data)
    assert out["summary"] == data["summary"]
    before = ClusterReport.parse(canonical(data), source="c")
    after = ClusterReport.parse(canonical(out), source="c")
    assert (after.verdict, after.gpus_per_node, after.fabric, len(after.nodes)) == (
        before.verdict,
        before.gpus_per_node,
        before.fabric,
        len(before.nodes),
    )
    assert out["nodes"][0]["gpus"] == data["nodes"][0]["gpus"]
    assert out["nodes"][0]["boot_id"] == data["nodes"][0]["boot_id"]
    assert out["image"] == data["image"]  # the image reference and digest are not mangled


def test_redaction_is_idempotent_and_says_whether_a_report_is_redacted() -> None:
    data = report()
    once = redact_cluster(data)
    assert redact_cluster(once) == once
    assert cluster_redacted(once)
    assert not cluster_redacted(data)


_HOST = st.from_regex(r"[a-z][a-z0-9-]{1,12}(\.[a-z]{2,5})?", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(
    hosts=st.lists(_HOST, min_size=2, max_size=4, unique=True),
    user=st.from_regex(r"[a-z]{2,8}", fullmatch=True),
    words=st.lists(st.text(max_size=20), max_size=3),
)
def test_any_nodes_redact_idempotently_and_leave_no_host(
    hosts: list[str], user: str, words: list[str]
) -> None:
    data = cluster_document(DIGEST, nodes=len(hosts))
    for node, host in zip(data["nodes"], hosts, strict=True):
        node |= {"name": f"{user}@{host}", "address": host}
    data["verdict_reason"] = " ".join([*words, *hosts])
    once = redact_cluster(data)
    assert redact_cluster(once) == once
    assert [n["name"] for n in once["nodes"]] == [f"node-{i + 1}" for i in range(len(hosts))]
    for host in hosts:
        assert host not in once["verdict_reason"].split(" ")


def test_ipv6_addresses_are_redacted_and_bus_ids_macs_and_times_are_kept() -> None:
    data = report()
    data["promises"][1]["failures"][0]["fix"] = (
        "NCCL INFO NET/Socket : Using ib0:fe80::a00:27ff:fe4e:66a1%ib0<0>; peer [2001:db8::17]:29500; "
        "GPU 0000:3b:00.0, MAC 0c:42:a1:5e:00:01, at 12:30:45"
    )
    out = redact_cluster(data)
    fix = out["promises"][1]["failures"][0]["fix"]
    assert "fe80" not in fix
    assert "2001:db8" not in fix
    assert f"[{REDACTED}]:29500" in fix
    assert "0000:3b:00.0" in fix
    assert "0c:42:a1:5e:00:01" in fix
    assert "12:30:45" in fix
    assert redact_cluster(out) == out
