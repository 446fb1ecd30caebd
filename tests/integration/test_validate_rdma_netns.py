"""The RDMA node-pair bandwidth of ``imagesmith validate ssh://n1 ssh://n2 ssh://n3 --fabric roce``, run for
real over the sshd of three network namespaces of this machine (tests/netnscluster.py; each its own hostname,
boot_id and machine-id), from a fourth namespace where the CLI runs.

What is real and what is a replay (as test_validate_collective_netns.py does for nccl-tests). There is no RDMA
device here (no kernel module, no Soft-RoCE), so two things stand in on each node:

- its ``/sys/class`` (bind-mounted in the private mount namespace of the node's sshd): one RoCE v2 port,
  ``mlx5_0`` port 1, ACTIVE at 400 Gb/s, in the kernel's sysfs layout, which the NIC inventory reads over
  ssh as it would on a real host;
- ``ib_write_bw`` first on the node's PATH (its sshd's ``SetEnv``): a stand-in that does perftest's
  out-of-band part for real (the server listens on the ``-p`` TCP port, the client connects to HOST:PORT,
  both ends exchange their hostnames over it) and then prints a recorded real ib_write_bw report instead of
  measuring: 363.47 Gb/s (tests/data/validate/cluster/ib_write_bw-roce-D10-scc24.txt, SC24 cluster, RoCE
  400G), or, where either end is listed in its ``slow`` file, 92.39 Gb/s
  (ib_write_bw-roce-sweep-gpu-operator.txt, a 100 Gb/s-class run from NVIDIA's GPU Operator docs).

The launch (servers on one node, clients on the other, over the run's ssh, bounded by ``timeout``), the
pairing (the ring's rounds, the re-pairing of suspects), the gathering of every client's report and the
judgment against the port's negotiated rate are real; the bandwidth figures are the replay.

- healthy: 3 ring pairs at 363.47 of 400 Gb/s pass, one row per device pair in cluster.json and cluster.md;
- n2's ends replay the slow report: the promise fails naming the pairs n1→n2 and n2→n3 and mlx5_0:1;
- n3 without ib_write_bw on its PATH: exit 2 naming n3 with the install line, before any pair runs;
- n2's server accepts and never answers: the client is killed at its bound and the pair n1→n2 fails, named.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netnscluster import (
    STANDIN_PATH,
    Cluster,
    NetnsError,
    Node,
    cluster_report,
    ib_write_bw_standin,
    netns_cluster,
    promise,
    sys_class_tree,
)

pytestmark = pytest.mark.netns

ARGS = ("--fabric", "roce", "--no-bandwidth", "--collective", "off")


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ib_write_bw_standin(tmp_path_factory.mktemp("standin"))


@pytest.fixture(scope="module")
def sys_class(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sys_class_tree(tmp_path_factory.mktemp("sysclass"))


def _start(c: Cluster, n: Node, standin: Path, sys_class: Path, *, path: bool = True) -> None:
    extra = f"SetEnv {STANDIN_PATH.format(standin)}\n" if path else ""
    c.start(n, sshd_extra=extra, sys_class=sys_class)


@pytest.fixture(scope="module")
def netns(tmp_path_factory: pytest.TempPathFactory, standin: Path, sys_class: Path) -> Iterator[Cluster]:
    if shutil.which("timeout") is None:
        pytest.fail("timeout (coreutils) is missing")
    try:
        with netns_cluster(3, tmp_path_factory.mktemp("netns"), subnet="10.233.9") as c:
            for n in c.nodes:
                _start(c, n, standin, sys_class)
            yield c
    except NetnsError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def cluster(netns: Cluster, standin: Path, sys_class: Path) -> Iterator[Cluster]:
    """Every node healthy again after each test: no slow or hung ends, what a test left running ended."""
    yield netns
    for name in ("slow", "hang"):
        (standin / name).write_text("")
    for n in netns.nodes:
        pids = subprocess.run(
            ["ip", "netns", "pids", n.name], capture_output=True, text=True, timeout=30, check=False
        ).stdout.split()
        for pid in pids:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"ib_write_bw" in cmd:
                subprocess.run(["kill", "-9", pid], check=False, timeout=30)
        _start(netns, n, standin, sys_class)


def _devices(data: dict[str, object]) -> list[tuple[str, str, str, object, bool]]:
    rdma = data["rdma_bandwidth"]
    assert isinstance(rdma, dict)
    return [
        (p["pair"][0], p["pair"][1], d["client"], d["gbps"], d["ok"])
        for p in rdma["pairs"]
        for d in p["devices"]
    ]


def test_three_healthy_nodes_pass_at_the_ports_rate(cluster: Cluster, tmp_path: Path) -> None:
    r = cluster.validate(tmp_path, *ARGS)
    assert r.returncode == 0, r.stdout + r.stderr
    data = cluster_report(tmp_path)
    p = promise(data, "RDMA node-pair bandwidth")
    assert p["verdict"] == "passed"
    n1, n2, n3 = (n.label for n in cluster.nodes)
    assert _devices(data) == [
        (n1, n2, "mlx5_0:1", 363.47, True),
        (n2, n3, "mlx5_0:1", 363.47, True),
        (n3, n1, "mlx5_0:1", 363.47, True),
    ]
    rdma = data["rdma_bandwidth"]
    assert isinstance(rdma, dict)
    assert (rdma["runs"], rdma["min_ratio"]) == (3, 0.9)
    assert rdma["pairs"][0]["devices"][0]["basis"] == "negotiated 400 Gb/s (mlx5_0:1, sysfs rate)"
    md = (tmp_path / "cluster.md").read_text()
    assert "## RDMA node-pair bandwidth (ib_write_bw" in md
    assert f"| 1 | {n1} → {n2} | mlx5_0:1 → mlx5_0:1 | 363.47 | 400 | 360 | ok |" in md


def test_a_slow_node_fails_naming_the_pairs_and_the_device(
    cluster: Cluster, standin: Path, tmp_path: Path
) -> None:
    (standin / "slow").write_text(cluster.nodes[1].name + "\n")  # n2's hostname: its namespace's name
    r = cluster.validate(tmp_path, *ARGS)
    assert r.returncode == 7, r.stdout + r.stderr
    data = cluster_report(tmp_path)
    p = promise(data, "RDMA node-pair bandwidth")
    assert p["verdict"] == "failed"
    n1, n2, n3 = (n.label for n in cluster.nodes)
    failures = p["failures"]
    assert isinstance(failures, list)
    # 3 nodes, 2 slow ring pairs: every node is a suspect, none is known good, so pass 2 has no partner to
    # re-pair with and the slow pairs themselves are named
    assert [(f["kind"], f["subject"]) for f in failures] == [
        ("rdma pair slow", f"{n1}→{n2} mlx5_0:1"),
        ("rdma pair slow", f"{n2}→{n3} mlx5_0:1"),
    ]
    assert "92.39 Gb/s, below 90% of 400 Gb/s" in failures[0]["message"]
    assert _devices(data)[2] == (n3, n1, "mlx5_0:1", 363.47, True)
    assert f"pair {n1}→{n2} mlx5_0:1" in r.stderr


def test_a_node_without_ib_write_bw_is_named_with_the_install_line(
    cluster: Cluster, standin: Path, sys_class: Path, tmp_path: Path
) -> None:
    n3 = cluster.nodes[2]
    _start(cluster, n3, standin, sys_class, path=False)
    r = cluster.validate(tmp_path, *ARGS)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"node {n3.label}: RDMA ports and no ib_write_bw (perftest)" in r.stderr
    assert "apt-get install perftest" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "cluster.json").exists()


def test_a_server_that_never_answers_is_killed_and_the_pair_named(
    cluster: Cluster, standin: Path, tmp_path: Path
) -> None:
    (standin / "hang").write_text(cluster.nodes[1].name + "\n")  # n2's servers accept and say nothing
    r = cluster.validate(tmp_path, *ARGS, timeout=300)
    assert r.returncode == 7, r.stdout + r.stderr
    data = cluster_report(tmp_path)
    p = promise(data, "RDMA node-pair bandwidth")
    failures = p["failures"]
    assert isinstance(failures, list)
    n1, n2 = cluster.nodes[0].label, cluster.nodes[1].label
    assert ("rdma pair hung", f"{n1}→{n2} mlx5_0:1") in [(f["kind"], f["subject"]) for f in failures]
    hung = next(f for f in failures if f["kind"] == "rdma pair hung")
    assert "did not end within 35 s (killed)" in hung["message"]
