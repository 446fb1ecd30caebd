"""The cross-node collective of ``imagesmith validate ssh://n1 ssh://n2 ssh://n3 --collective mpirun``,
launched for real by Debian's Open MPI (openmpi-bin) over the sshd of three network namespaces of this machine
(tests/netnscluster.py; each namespace its own hostname, boot_id and machine-id), from a fourth namespace
where the CLI runs. Everything mpirun and its daemons send (ssh, orted's call back to mpirun over TCP) stays
inside these namespaces: the root namespace has no route into them.

What is real and what is a replay. There is no GPU here, so each node's PATH (its sshd's ``SetEnv``) starts
with a folder where ``all_reduce_perf`` and ``all_gather_perf`` are a stand-in shell script that prints a
recorded nccl-tests log instead of measuring: the table of the real 2×H200 all_reduce_perf run in
tests/data/validate/h200x2/all_reduce_perf-1.log (nccl-tests 2.19.6 on a lent H200 host) and of a real
two-node all_gather_perf run in tests/data/validate/cluster/all_gather_perf-gb10x2.log (2 × GB10), with
the NCCL INFO transport lines of tests/data/validate/cluster/nccl-socket-fallback.log (NVIDIA/nccl #226 and a
public DeepSpeed log, SOURCES.md) or nccl-ib-gdr.log. The launch (mpirun → ssh → orted on every node → one
process per rank), the rank placement (each rank prints its own "Rank N … on HOST" line with the rank number
Open MPI gave it and the hostname of the namespace it landed in), the aggregation of every rank's output by
mpirun, and the judgment (ranks, machines, busbw at the largest size, transport) are real; the benchmark's
figures are the replay.

- healthy (Ethernet declared, Socket transport): passes; 3 ranks on 3 machines, busbw per size in the
  report, both collectives' logs beside it;
- n2's orted and its rank killed mid-collective, then its link cut: exit 7 naming n2, no cluster report;
- the Socket transport where IB is declared: the collective's promise fails naming NET/Socket.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netnscluster import (
    STANDIN_PATH,
    Cluster,
    NetnsError,
    assert_node_lost,
    cluster_report,
    nccl_tests_standin,
    netns_cluster,
    promise,
)

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nccl_tests_standin(tmp_path_factory.mktemp("standin"))


@pytest.fixture(scope="module")
def netns(tmp_path_factory: pytest.TempPathFactory, standin: Path) -> Iterator[Cluster]:
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun is missing: run `bash scripts/setup.sh` (installs openmpi-bin)")
    path = STANDIN_PATH.format(standin)
    try:
        with netns_cluster(3, tmp_path_factory.mktemp("netns"), subnet="10.233.8") as c:
            for n in c.nodes:
                c.start(n, sshd_extra=f"SetEnv {path}\n")
            yield c
    except NetnsError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def cluster(netns: Cluster, standin: Path) -> Iterator[Cluster]:
    """Socket lines, a short pause; after each test every node healthy again."""
    nccl_tests_standin(standin)
    yield netns
    path = STANDIN_PATH.format(standin)
    for n in netns.nodes:
        subprocess.run(["ip", "-n", n.name, "link", "set", "eth0", "up"], check=False, timeout=30)
        if n.proc is None or n.proc.poll() is not None:
            netns.start(n, sshd_extra=f"SetEnv {path}\n")


def test_a_healthy_collective_over_mpirun_passes(cluster: Cluster, tmp_path: Path) -> None:
    r = cluster.validate(tmp_path, "--no-bandwidth", "--link-gbps", "0.2", "--collective", "mpirun")
    assert r.returncode == 0, r.stdout + r.stderr
    data = cluster_report(tmp_path)
    coll = data["collective"]
    assert isinstance(coll, dict)
    assert (coll["launcher"], coll["nodes"], coll["ranks"]) == ("mpirun", 3, 3)
    reduce, gather = coll["runs"]
    assert reduce["collective"] == "all_reduce_perf"
    assert gather["collective"] == "all_gather_perf"
    # placement: rank i on node i+1 (ppr:1:node over --host n1,n2,n3), each named by its own hostname
    assert [(x["rank"], x["host"]) for x in reduce["ranks"]] == [
        (i, n.name) for i, n in enumerate(cluster.nodes)
    ]
    assert reduce["ranks_seen"] == 3
    assert reduce["largest"] == {"bytes": 1073741824, "busbw_gbps": 329.38}
    assert reduce["sizes"][0] == {"bytes": 8, "busbw_gbps": 0.0}
    assert reduce["transport"]["nets"] == ["Socket"]
    assert reduce["argv"][:2] == ["mpirun", "--allow-run-as-root"]
    for test in ("all_reduce_perf", "all_gather_perf"):
        assert promise(data, f"cross-node NCCL {test}")["verdict"] == "passed"
        assert "Collective test concluded" in (tmp_path / "collective" / f"{test}.log").read_text()
    md = (tmp_path / "cluster.md").read_text()
    assert "## Cross-node NCCL (mpirun: 3 nodes × 1 rank(s))" in md
    assert "| 1073741824 | 329.38 | — |" in md
    assert "| 17179869184 | — | 22.98 |" in md
    # the figure, written before cluster.json, named in it and in cluster.md (matplotlib: the dev extra)
    assert coll["plot"] == "busbw.png"
    assert (tmp_path / "busbw.png").read_bytes()[:4] == b"\x89PNG"
    assert "![busbw per message size](busbw.png)" in md
    # all_gather judged against the node's NIC (0.2 Gb/s declared: 0.02 GB/s expected), not all_reduce's table
    assert gather["expected"]["busbw_gbps"] == 0.02
    assert gather["largest"] == {"bytes": 17179869184, "busbw_gbps": 22.98}


def test_a_node_killed_mid_collective_is_named_and_no_report_is_written(
    cluster: Cluster, standin: Path, tmp_path: Path
) -> None:
    n2 = cluster.nodes[1]
    (standin / "delay").write_text("60\n")  # rank 0 holds the table back: the run is in flight
    proc = cluster.popen(tmp_path, "--no-bandwidth", "--link-gbps", "0.2", "--collective", "mpirun")
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if "cluster: all_reduce_perf across" in line:
                break
            assert time.monotonic() < deadline, "the run never reached the collective"
        # n2's Open MPI daemon (orted) and its rank (exec'd into its wait), once they run there
        victims: list[int] = []
        while "orted" not in [_comm(str(p)) for p in victims]:
            assert time.monotonic() < deadline, "the collective never reached n2"
            assert proc.poll() is None, "the run ended before the collective reached n2"
            pids = subprocess.run(
                ["ip", "netns", "pids", n2.name], capture_output=True, text=True, timeout=30, check=False
            ).stdout.split()
            victims = [int(p) for p in pids if _comm(p) in ("orted", "sleep")]
            time.sleep(0.1)
        time.sleep(0.5)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):  # a helper of the launch that ended on its own
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "-n", n2.name, "link", "set", "eth0", "down"], check=True, timeout=30)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    said = f"node {n2.label} stopped answering during the cross-node all_reduce_perf (mpirun)"
    assert_node_lost(proc, out, err, tmp_path, said, "collective")


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_the_socket_transport_where_ib_is_declared_fails_naming_it(cluster: Cluster, tmp_path: Path) -> None:
    r = cluster.validate(
        tmp_path,
        "--no-bandwidth",
        "--fabric",
        "ib",
        "--link-gbps",
        "400",
        "--nic-ports",
        "8",
        "--collective",
        "mpirun",
    )
    assert r.returncode == 7, r.stdout + r.stderr
    data = cluster_report(tmp_path)
    p = promise(data, "cross-node NCCL all_reduce_perf")
    assert p["verdict"] == "failed"
    failures = p["failures"]
    assert isinstance(failures, list)
    assert ("socket transport", "NET/Socket") in [(f["kind"], f["subject"]) for f in failures]
    # busbw is judged too: the replayed 329 GB/s against 0.7 × 455 GB/s (8 × 400G NDR) passes it
    assert "busbw low" not in [f["kind"] for f in failures]
    assert "NET/Socket" in r.stderr
