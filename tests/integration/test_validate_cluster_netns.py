"""``imagesmith validate ssh://n1 ssh://n2 ssh://n3`` for real, against three network namespaces of this
machine (issue 32): each node a namespace with an sshd of its own (its own host key, config and authorized key
in a temporary folder; Debian's openssh-server), joined by veth pairs to a bridge in a fourth namespace, where
the CLI runs. Nothing touches the root namespace's network: every packet stays inside the namespaces made
here, and they are deleted at the end (also after a failure).

Machine identity: the check reads the kernel's ``/proc/sys/kernel/random/boot_id`` (docs/validation.md
"Several nodes"), which all namespaces share. Each node's sshd therefore starts in the private mount
namespace ``ip netns exec`` gives it, with a file of its own bind-mounted over ``boot_id`` (and over
``/etc/machine-id``): three kernels as far as anything started over ssh can see. "The same machine" is two
nodes given the same boot_id file — what containers of one host really show.

- healthy: 3 nodes pass (identity, NICs for ethernet, the ring's 3 pairs at the declared rate);
- a ``tc`` limit on the n1→n2 traffic fails the bandwidth promise naming that pair, not a node;
- n3 with n1's boot_id fails "distinct machines" naming both nodes;
- a Socket-only NCCL log where IB is declared fails the NCCL transport naming NET/Socket (fixture replay:
  no GPU here);
- n2 killed (sshd stopped, link down) once the bandwidth step has started: exit 7 naming n2, no report;
- n3's sshd stopped before the run: exit 2 naming n3 with the fix, before any check; a node whose PATH
  has no iperf3: exit 2 naming it with the install command.
- the per-node suite (one check: no GPU, no torch here) on all three at once, each bundle under nodes/;
- with --image and --sign-key, the cluster report names the digest and is signed (what release reads).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netnscluster import Cluster, NetnsError, assert_node_lost, cluster_report, netns_cluster, promise
from tests.repo import REPO

pytestmark = pytest.mark.netns

FIXTURES = REPO / "tests" / "data" / "validate" / "cluster"


@pytest.fixture(scope="module")
def netns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        with netns_cluster(3, tmp_path_factory.mktemp("netns")) as c:
            yield c
    except NetnsError as exc:
        pytest.fail(str(exc))


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=check)


@pytest.fixture
def cluster(netns: Cluster) -> Iterator[Cluster]:
    """The three nodes healthy again after each test: links up, no tc, every sshd running."""
    yield netns
    for n in netns.nodes:
        _sh("ip", "-n", n.name, "link", "set", "eth0", "up", check=False)
        _sh("ip", "netns", "exec", n.name, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        if n.proc is None or n.proc.poll() is not None:
            netns.start(n)


def test_three_healthy_nodes_pass(cluster: Cluster, tmp_path: Path) -> None:
    r = cluster.validate(tmp_path, "--link-gbps", "0.2", "--iperf-seconds", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    data = cluster_report(tmp_path)
    assert data["verdict"] == "passed"
    nodes = data["nodes"]
    assert isinstance(nodes, list)
    assert [n["name"] for n in nodes] == [n.label for n in cluster.nodes]
    assert len({n["boot_id"] for n in nodes}) == 3
    bw = data["bandwidth"]
    assert isinstance(bw, dict)
    assert bw["runs"] == 3
    assert {frozenset(p["pair"]) for p in bw["pairs"]} == {
        frozenset((a.label, b.label))
        for a, b in (
            (cluster.nodes[0], cluster.nodes[1]),
            (cluster.nodes[1], cluster.nodes[2]),
            (cluster.nodes[2], cluster.nodes[0]),
        )
    }
    assert all(p["ok"] and p["forward_gbps"] > 0.14 and p["reverse_gbps"] > 0.14 for p in bw["pairs"])
    assert (tmp_path / "cluster.md").read_text().startswith("# Cluster validation: PASSED")


def test_a_signed_cluster_report_names_the_image_and_release_reads_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """--image and --sign-key: cluster.dsse.json beside cluster.json attests the digest, with the summary, and
    the release's reader verifies it (these nodes list no GPU, so release's step would refuse it as evidence:
    tests/unit/test_release_cluster.py)."""
    from imagesmith import signing
    from imagesmith.release.evidence import collect_cluster_reports
    from imagesmith.validate import clusterrecord

    key = signing.generate_key()
    key_file = tmp_path / "runner.key"
    key_file.write_bytes(key.private_pem())
    key_file.chmod(0o600)
    digest = "sha256:" + "c" * 64
    report = tmp_path / "r"
    r = cluster.validate(
        report, "--no-bandwidth", "--image", f"reg.example/t@{digest}", "--sign-key", str(key_file)
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"signed: {report / 'cluster.dsse.json'} (attests reg.example/t@{digest}" in r.stdout
    data = cluster_report(report)
    assert data["image"] == {"reference": f"reg.example/t@{digest}", "digest": digest}
    assert data["summary"] == {"nodes": 3, "gpus_per_node": 0, "fabric": "ethernet", "verdict": "passed"}
    (found,) = collect_cluster_reports([report], [key.public])
    assert found.signed is not None
    assert found.signed.digest == digest
    # what is signed (and release attaches in registries) is the report redacted: no node's ssh target or
    # address; cluster.json keeps them
    from imagesmith.validate.redact import redact_cluster

    assert found.signed.report == clusterrecord.ClusterReport.parse(
        clusterrecord.canonical(redact_cluster(data)), source="c"
    )
    assert [n.name for n in found.signed.report.nodes] == ["node-1", "node-2", "node-3"]
    assert found.signed.published_safe
    signed_text = found.signed.body.decode()
    nodes: list[dict[str, str]] = json.loads((report / "cluster.json").read_text())["nodes"]
    for node in nodes:
        assert node["name"] not in signed_text
        assert node["address"] not in signed_text


def test_a_rate_limited_link_fails_naming_the_pair(cluster: Cluster, tmp_path: Path) -> None:
    n1, n2, _n3 = cluster.nodes
    # only what n1 sends to n2 is limited (20 Mbit/s): the link n1→n2, not node n1 (n1→n3 is free)
    ns = ["ip", "netns", "exec", n1.name, "tc"]
    _sh(*ns, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "20")
    _sh(*ns, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", "20mbit")
    _sh(*ns, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", "10gbit")
    _sh(
        *ns,
        "filter",
        "add",
        "dev",
        "eth0",
        "parent",
        "1:",
        "protocol",
        "ip",
        "u32",
        "match",
        "ip",
        "dst",
        f"{n2.address}/32",
        "flowid",
        "1:10",
    )
    r = cluster.validate(tmp_path, "--link-gbps", "0.2", "--iperf-seconds", "2")
    assert r.returncode == 7, r.stdout + r.stderr
    pair = f"{n1.label}↔{n2.label}"
    assert pair in r.stderr
    data = cluster_report(tmp_path)
    bw = promise(data, "node-to-node bandwidth")
    assert bw["verdict"] == "failed"
    failures = bw["failures"]
    assert isinstance(failures, list)
    assert [(f["kind"], f["subject"]) for f in failures] == [("pair slow", pair)]
    assert f"{n1.label}→{n2.label}" in failures[0]["message"]
    assert promise(data, "distinct machines")["verdict"] == "passed"
    bandwidth = data["bandwidth"]
    assert isinstance(bandwidth, dict)
    assert bandwidth["runs"] == 5  # the ring's 3, then n1 and n2 each against n3


def test_a_node_sharing_anothers_kernel_fails_naming_both(cluster: Cluster, tmp_path: Path) -> None:
    n1, _n2, n3 = cluster.nodes
    cluster.start(n3, boot_id=n1.boot_file.read_text().strip())
    try:
        r = cluster.validate(tmp_path, "--no-bandwidth")
    finally:
        cluster.start(n3, boot_id=str(uuid.uuid4()))
    assert r.returncode == 7, r.stdout + r.stderr
    p = promise(cluster_report(tmp_path), "distinct machines")
    failures = p["failures"]
    assert isinstance(failures, list)
    assert [(f["kind"], f["subject"]) for f in failures] == [("same machine", f"{n1.label} and {n3.label}")]
    assert f"{n1.label} and {n3.label} are one machine" in r.stderr


def test_a_socket_only_nccl_log_fails_where_ib_is_declared(cluster: Cluster, tmp_path: Path) -> None:
    log = FIXTURES / "nccl-socket-fallback.log"
    r = cluster.validate(tmp_path, "--no-bandwidth", "--fabric", "ib", "--nccl-log", str(log))
    assert r.returncode == 7, r.stdout + r.stderr
    data = cluster_report(tmp_path)
    t = promise(data, "NCCL transport")
    failures = t["failures"]
    assert isinstance(failures, list)
    assert [(f["kind"], f["subject"]) for f in failures] == [("socket transport", "NET/Socket")]
    assert "NET/Socket" in r.stderr
    # no RDMA port on these nodes either: the NIC promise fails for IB, naming each node
    nics = promise(data, "NICs (ib)")
    nic_failures = nics["failures"]
    assert isinstance(nic_failures, list)
    assert [f["subject"] for f in nic_failures] == [n.label for n in cluster.nodes]
    # the same log where plain Ethernet was declared: sockets are what was sold
    ok = cluster.validate(tmp_path / "eth", "--no-bandwidth", "--nccl-log", str(log))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # GPUDirect RDMA expected: these nodes have no NVIDIA driver at all, each is named
    gdr = cluster.validate(tmp_path / "gdr", "--no-bandwidth", "--expect-gdr")
    assert gdr.returncode == 7, gdr.stdout + gdr.stderr
    gdr_failures = promise(cluster_report(tmp_path / "gdr"), "GPUDirect RDMA")["failures"]
    assert isinstance(gdr_failures, list)
    assert [(f["kind"], f["subject"]) for f in gdr_failures] == [
        ("no nvidia driver", n.label) for n in cluster.nodes
    ]
    # and no nvidia-smi: NIC-GPU affinity is not checked, each node named with the reason (never passed)
    affinity = promise(cluster_report(tmp_path / "gdr"), "NIC-GPU affinity")
    assert affinity["verdict"] == "not checked"
    assert affinity["why"] == "; ".join(f"{n.label}: no nvidia-smi on the node" for n in cluster.nodes)


def test_a_node_that_dies_mid_run_is_named_and_no_report_is_written(cluster: Cluster, tmp_path: Path) -> None:
    _n1, n2, _n3 = cluster.nodes
    proc = cluster.popen(tmp_path, "--link-gbps", "0.2", "--iperf-seconds", "3")
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if "node-to-node bandwidth" in line:
                break
            assert time.monotonic() < deadline, "the run never reached the bandwidth step"
        # the node goes away: its link down, its sshd gone
        _sh("ip", "-n", n2.name, "link", "set", "eth0", "down")
        cluster.stop(n2)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert_node_lost(proc, out, err, tmp_path, f"node {n2.label} stopped answering")


def test_an_unreachable_node_is_one_error_before_any_check(cluster: Cluster, tmp_path: Path) -> None:
    n3 = cluster.nodes[2]
    cluster.stop(n3)
    t0 = time.monotonic()
    r = cluster.validate(tmp_path, "--no-bandwidth", timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"cannot reach node {n3.label} over ssh" in r.stderr
    assert "fix:" in r.stderr
    assert time.monotonic() - t0 < 90
    assert not (tmp_path / "cluster.json").exists()


def test_a_node_without_iperf3_is_named_with_the_fix(cluster: Cluster, tmp_path: Path) -> None:
    n2 = cluster.nodes[1]
    cluster.start(n2, sshd_extra="SetEnv PATH=/usr/sbin:/sbin\n")  # no /usr/bin: no iperf3 there
    try:
        r = cluster.validate(tmp_path, "--link-gbps", "0.2")
    finally:
        cluster.start(n2)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"node {n2.label}: iperf3 is not installed" in r.stderr
    assert "apt-get install iperf3" in r.stderr


def test_the_per_node_suite_runs_on_every_node_at_once(cluster: Cluster, tmp_path: Path) -> None:
    """The one-host suite over each node's ssh (the existing path), limited with -k to a check that needs no
    GPU and no torch: each node's own bundle under nodes/, its verdict a promise of the cluster report ("not
    validated": -k chose the checks, never a pass), so the cluster run is not a pass either."""
    r = cluster.validate(tmp_path, "--no-bandwidth", "-k", "test_shm_size", node_suite=True, timeout=600)
    assert r.returncode == 7, r.stdout + r.stderr
    data = cluster_report(tmp_path)
    nodes = data["nodes"]
    assert isinstance(nodes, list)
    for node, entry in zip(cluster.nodes, nodes, strict=True):
        own = tmp_path / str(entry["node_report"])
        report = json.loads(own.read_text())
        assert report["target"] == node.target
        assert [c["name"] for c in report["checks"]] == ["test_shm_size"]
        assert promise(data, f"node suite {node.label}")["verdict"] == "not validated"
    assert promise(data, "distinct machines")["verdict"] == "passed"
