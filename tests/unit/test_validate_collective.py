"""The cross-node collective (imagesmith/validate/collective.py): launcher command lines, the Slurm node
list, the busbw/rank/transport verdict, the node a failed launch names. The nccl-tests table is the real
2×H200 run in tests/data/validate/h200x2 with its rank lines moved onto two hosts; the NCCL INFO lines are the
public captures in tests/data/validate/cluster (SOURCES.md)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError
from imagesmith.validate import collective

DATA = Path(__file__).resolve().parents[1] / "data" / "validate"


def _two_node_log(transport: str, *, hosts: tuple[str, str] = ("n1", "n2")) -> str:
    text = (DATA / "h200x2" / "all_reduce_perf-1.log").read_text()
    lines = []
    rank = 0
    for line in text.splitlines():
        if line.startswith("#  Rank"):
            line = line.replace("on         vm", f"on {hosts[rank]:>10}")
            rank += 1
        lines.append(line)
    return "\n".join(lines) + "\n" + (DATA / "cluster" / transport).read_text()


def _judge_ib(log: str, *, n_nodes: int = 2, min_ratio: float = 0.7) -> collective.CollectiveVerdict:
    """*log* spread over two hosts, judged as 1 GPU per node on a declared 8 × 400G IB fabric."""
    return collective.judge_collective(
        _two_node_log(log),
        n_nodes=n_nodes,
        gpus_per_node=1,
        fabric="ib",
        nic_gbps=400,
        nics_per_node=8,
        min_ratio=min_ratio,
    )


def test_ib_run_at_its_busbw_passes_and_sizes_are_reported() -> None:
    v = _judge_ib("nccl-ib-gdr.log")
    assert [f.kind for f in v.failures] == [], v.failures
    assert v.expected is not None
    assert v.expected.busbw_gbps == 455
    assert v.sizes()[-1] == {"bytes": 1073741824, "busbw_gbps": 329.38}


def test_socket_fallback_where_ib_is_declared_fails_naming_the_transport() -> None:
    v = _judge_ib("nccl-socket-fallback.log")
    assert any("Socket" in f.message for f in v.failures)


def test_low_busbw_and_ranks_alone_fail() -> None:
    v = _judge_ib("nccl-ib-gdr.log", n_nodes=4, min_ratio=0.9)
    assert {f.kind for f in v.failures} == {"ranks alone", "busbw low"}


def test_derived_expectation_from_the_link_rate() -> None:
    e = collective.expected_busbw("ethernet", 10, 1)
    assert e is not None
    assert e.basis == "derived"
    assert e.busbw_gbps == 0.94
    assert collective.expected_busbw("ethernet", None, 1) is None


def test_mpirun_and_srun_argv() -> None:
    argv = collective.mpirun_argv(["a", "b"], 8)
    assert argv[:5] == ["mpirun", "--host", "a:8,b:8", "-np", "16"]
    assert "NCCL_DEBUG=INFO" in argv
    assert argv[argv.index("-e") + 1] == "8G"
    s = collective.srun_argv(2, 8, collective="all_gather_perf")
    assert "--ntasks-per-node=8" in s
    assert "all_gather_perf" in s
    assert "--kill-on-bad-exit=1" in s
    with pytest.raises(ConfigError):
        collective.mpirun_argv(["a"], 1, collective="broadcast")


@pytest.mark.parametrize(
    ("said", "node"),
    [
        ("mpirun noticed that process rank 3 with PID 0 on node n2 exited on signal 9 (Killed).", "n2"),
        ("srun: error: n3: task 2: Killed", "n3"),
        ("ssh: connect to host n2 port 22: Connection refused", "n2"),
        ("nothing useful", None),
    ],
)
def test_the_failed_node_is_named(said: str, node: str | None) -> None:
    assert collective.failed_node(said, ["n1", "n2", "n3"]) == node


def _tool(tmp_path: Path, name: str, body: str) -> None:
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)


def test_slurm_nodes_through_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tool(tmp_path, "scontrol", 'test "$3" = "gpu[01-02]" && printf "gpu01\\ngpu02\\n"')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert collective.slurm_nodes({"SLURM_JOB_NODELIST": "gpu[01-02]"}) == ["gpu01", "gpu02"]
    with pytest.raises(ConfigError) as exc:
        collective.slurm_nodes({})
    assert exc.value.field == "--slurm"


def test_a_launch_that_hangs_ends_in_bound_naming_the_node(tmp_path: Path) -> None:
    _tool(
        tmp_path, "fake-mpirun", "echo 'ssh: connect to host n2 port 22: Connection timed out' >&2; sleep 30"
    )
    with pytest.raises(ConfigError) as exc:
        collective.launch([str(tmp_path / "fake-mpirun")], ["n1", "n2"], timeout=1)
    assert exc.value.host == "n2"


def test_a_rank_that_dies_names_its_node(tmp_path: Path) -> None:
    _tool(
        tmp_path,
        "fake-mpirun",
        "echo 'mpirun noticed that process rank 1 with PID 7 on node n3 exited on signal 9'; exit 137",
    )
    with pytest.raises(ConfigError) as exc:
        collective.launch([str(tmp_path / "fake-mpirun")], ["n1", "n3"], timeout=10)
    assert exc.value.host == "n3"


def test_ranks_on_fewer_machines_than_nodes_fail() -> None:
    """Two node names, one machine: every rank line says n1 (an alias, or two containers of one host)."""
    one = collective.judge_collective(
        _two_node_log("nccl-ib-gdr.log", hosts=("n1", "n1")),
        n_nodes=2,
        gpus_per_node=1,
        fabric="ib",
        nic_gbps=400,
        nics_per_node=8,
        min_ratio=0.7,
    )
    assert [f.kind for f in one.failures] == ["ranks on fewer machines"]
    assert "ran on 1 machine(s) (n1), 2 nodes given" in one.failures[0].message
    assert collective.rank_hosts(_two_node_log("nccl-ib-gdr.log")) == [
        (0, "n1", "0000:00:06"),
        (1, "n2", "0000:00:07"),
    ]


def test_all_gather_busbw_is_judged_against_the_nodes_nics() -> None:
    """nccl-tests doc/PERFORMANCE.md: all_gather's busbw (algbw × (n-1)/n) is the bottleneck link's speed;
    across nodes that is the node's NICs × ALLGATHER_EFFICIENCY, not all_reduce's table (NVLS/tree lift
    all_reduce's busbw above the NICs' rate). The real two-node GB10 run (one 200 Gb/s RoCE link)."""
    log = (DATA / "cluster" / "all_gather_perf-gb10x2.log").read_text()
    log += (DATA / "cluster" / "nccl-roce-ibext.log").read_text()  # the RoCE transport's INFO lines
    kw: dict[str, Any] = dict(n_nodes=2, gpus_per_node=1, fabric="roce", nic_gbps=200, nics_per_node=1)
    v = collective.judge_collective(log, min_ratio=0.9, collective="all_gather_perf", **kw)
    assert v.failures == []
    assert v.expected is not None
    assert (v.expected.busbw_gbps, v.expected.basis) == (23.0, "measured")
    assert "(n-1)/n" in v.expected.source
    slow = collective.judge_collective(log, min_ratio=1.0, collective="all_gather_perf", **kw)
    assert [f.kind for f in slow.failures] == ["busbw low"]
    assert slow.failures[0].message.startswith("all_gather busbw 22.98 GB/s at 17179869184 bytes")
    # the all_reduce figure of the same fabric would be another (and here none: no all_reduce row fits)
    ib = collective.expected_for("all_gather_perf", "ib", 400, 8)
    assert ib is not None
    assert ib.busbw_gbps == 368.0  # 8 × 50 GB/s × 0.92 (nccl-tests#290: 46-48 GB/s per NDR NIC)
    reduce = collective.expected_for("all_reduce_perf", "ib", 400, 8)
    assert reduce is not None
    assert reduce.busbw_gbps == 455
    assert collective.expected_for("all_gather_perf", "ib", None, 8) is None
    assert collective.judge_collective(log, min_ratio=0.9, judge_busbw=False, **kw).failures == []


def test_mpirun_runs_as_root_only_when_asked_and_spawns_no_tree() -> None:
    argv = collective.mpirun_argv(["a", "b"], 1, as_root=True)
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    assert "--allow-run-as-root" not in collective.mpirun_argv(["a", "b"], 1)
    pairs = {argv[i + 1]: argv[i + 2] for i, w in enumerate(argv) if w == "--mca"}
    assert pairs["plm_rsh_no_tree_spawn"] == "1"  # only this host sshes to the nodes
    assert (pairs["oob_tcp_keepalive_time"], pairs["oob_tcp_keepalive_probes"]) == ("10", "2")
    assert "--nodelist=n1,n2" in collective.srun_argv(2, 8, nodelist=["n1", "n2"])
