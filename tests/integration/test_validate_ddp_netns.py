"""The cross-node DDP step of ``imagesmith validate ssh://n1 ssh://n2 --ddp torchrun``, run for real across
two network namespaces of this machine (tests/netnscluster.py: each its own sshd, hostname, boot_id), from a
third namespace where the CLI runs.

What is real here, and what is not: everything but the GPU. The nodes' Python (``--python``) is a virtual
environment holding PyTorch's CPU build (``pip install torch==2.13.0``, made once and kept in the test cache:
:func:`torch_venv`; the namespaces share this machine's files), so the nodes import a real torch: the probe is
copied over
the run's ssh, one torchrun (``python -m torch.distributed.run``) per node joins the c10d rendezvous on the
first node's address, the ranks train DistributedDataParallel over gloo on the CPU through the veth pairs,
and the CLI judges what they print. There is no GPU, so the backend is gloo, not nccl (the nccl path ran on
a lent H200: docs/benchmarks.md), and the scaling figure is that of namespaces sharing this machine's cores.

- healthy: passes; 2 ranks on 2 machines, the one-node and all-node runs with their argv, per-rank hosts and
  samples/s in cluster.json, the section in cluster.md, the logs beside it;
- n2's link cut and its torchrun killed once its ranks run: exit 7 naming n2, no cluster report;
- a node whose python has no torch: exit 2 naming the node and --python.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netnscluster import (
    Cluster,
    NetnsError,
    assert_node_lost,
    cluster_report,
    netns_cluster,
    promise,
    torch_venv,
)

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def venv() -> Path:
    try:
        return torch_venv()
    except NetnsError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def netns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        with netns_cluster(2, tmp_path_factory.mktemp("netns"), subnet="10.233.9") as c:
            yield c
    except NetnsError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def cluster(netns: Cluster) -> Iterator[Cluster]:
    """After each test every node healthy again: link up, sshd running."""
    yield netns
    for n in netns.nodes:
        subprocess.run(["ip", "-n", n.name, "link", "set", "eth0", "up"], check=False, timeout=30)
        if n.proc is None or n.proc.poll() is not None:
            netns.start(n)


FLAGS = ("--no-bandwidth", "--link-gbps", "0.2", "--collective", "off", "--ddp", "torchrun")


def flags(venv: Path) -> tuple[str, ...]:
    return (*FLAGS, "--python", str(venv / "bin" / "python3"))


def test_a_healthy_ddp_step_over_torchrun_passes(cluster: Cluster, venv: Path, tmp_path: Path) -> None:
    r = cluster.validate(tmp_path, *flags(venv))
    assert r.returncode == 0, r.stdout + r.stderr
    data = cluster_report(tmp_path)
    ddp = data["ddp"]
    assert isinstance(ddp, dict)
    assert (ddp["launcher"], ddp["backend"], ddp["nodes"], ddp["ranks"]) == ("torchrun", "gloo", 2, 2)
    one, both = ddp["runs"]
    assert (one["nodes"], one["ranks"], both["nodes"], both["ranks"]) == (1, 1, 2, 2)
    # each rank on its own node, named by the node's own hostname (its UTS namespace)
    assert [(x["rank"], x["world"], x["host"]) for x in both["per_rank"]] == [
        (i, 2, n.name) for i, n in enumerate(cluster.nodes)
    ]
    assert [x["host"] for x in one["per_rank"]] == [cluster.nodes[0].name]
    assert all(x["replicas_equal"] is True and x["samples_per_s"] > 0 for x in both["per_rank"])
    argv = both["argv"]
    assert list(argv) == [n.label for n in cluster.nodes]
    for n in cluster.nodes:
        assert argv[n.label][:3] == [str(venv / "bin" / "python3"), "-m", "torch.distributed.run"]
        assert {"--nnodes=2", "--rdzv_backend=c10d", f"--local_addr={n.address}"} <= set(argv[n.label])
        assert f"--rdzv_endpoint={cluster.nodes[0].address}:" in " ".join(argv[n.label])
    assert ddp["efficiency"] > 0
    assert ddp["threshold"]["basis"].startswith("0.7 × t1 / (t1 + 2(W−1)/W × 1.1 MB / 0.02 GB/s)")
    assert promise(data, "cross-node DDP")["verdict"] == "passed"
    md = (tmp_path / "cluster.md").read_text()
    assert "## Cross-node DDP (torchrun: 2 nodes × 1 rank(s), backend gloo)" in md
    assert f"| 1 | {cluster.nodes[1].name} |" in md
    for log in ("ddp-1node.log", "ddp-2node.log"):
        assert "IMAGESMITH_PROBE" in (tmp_path / "ddp" / log).read_text()


def test_a_node_killed_mid_step_is_named_and_no_report_is_written(
    cluster: Cluster, venv: Path, tmp_path: Path
) -> None:
    n2 = cluster.nodes[1]
    proc = cluster.popen(tmp_path, *flags(venv))
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            if "cluster: DDP step on 2 node(s)" in line:
                break
            assert time.monotonic() < deadline, "the run never reached the DDP step on both nodes"
        victims: list[int] = []
        while not any(
            "ddpnodes.py" in _cmdline(p) and "torch.distributed.run" not in _cmdline(p) for p in victims
        ):
            assert time.monotonic() < deadline, "the DDP step's ranks never started on n2"
            assert proc.poll() is None, "the run ended before n2's ranks started"
            pids = subprocess.run(
                ["ip", "netns", "pids", n2.name], capture_output=True, text=True, timeout=30, check=False
            ).stdout.split()
            victims = [int(p) for p in pids if "ddpnodes.py" in _cmdline(int(p))]
            time.sleep(0.1)
        # the link first (n2 silent, as a node that lost power), then its torchrun and ranks
        subprocess.run(["ip", "-n", n2.name, "link", "set", "eth0", "down"], check=True, timeout=30)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    said = f"node {n2.label} stopped answering during the cross-node DDP step on 2 node(s)"
    assert_node_lost(proc, out, err, tmp_path, said, "ddp")


def test_a_node_without_torch_is_named_with_the_fix(cluster: Cluster, tmp_path: Path) -> None:
    r = cluster.validate(tmp_path, *FLAGS, "--python", "/usr/bin/python3")
    assert r.returncode == 2, r.stdout + r.stderr
    assert (
        f"node {cluster.nodes[0].label}, {cluster.nodes[1].label}: /usr/bin/python3 cannot import torch"
        in (r.stderr)
    )
    assert "--python PATH" in r.stderr
    assert not (tmp_path / "cluster.json").exists()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
