"""The cross-node collective (imagesmith/validate/collective.py): launcher command lines, the Slurm node
list, the busbw/rank/transport verdict, the node a failed launch names. The nccl-tests table is the real
2×H200 run in tests/data/validate/h200x2 with its rank lines moved onto two hosts; the NCCL INFO lines are the
public captures in tests/data/validate/cluster (SOURCES.md)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

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
