"""The cross-node DDP step of a cluster run (imagesmith/validate/clusterddp.py): the torchrun and srun command
lines, the shell command a node runs (run here for real with ``sh``), the judgment of what the ranks print
(each rule, one test that fails without it), srun inside an allocation end to end with a fake ``srun`` and
``ssh`` on PATH (no Slurm here), and a node that fails mid-step ending the others at once, named.
tests/integration/test_validate_ddp_netns.py runs the real torchrun with a real CPU torch across
namespaces."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from imagesmith.commands.cluster import ClusterFlags
from imagesmith.errors import ConfigError, ValidationFailed
from imagesmith.validate import clusterddp, clusterrun
from imagesmith.validate.cluster import Identity
from imagesmith.validate.collective import FabricBusbw, expected_busbw
from imagesmith.validate.request import cluster_rules

NODES = clusterrun.parse_nodes(["ssh://n1", "ssh://n2"], None)
ETH25 = expected_busbw("ethernet", 25, 1)
IB = expected_busbw("ib", 400, 8)


def rec(rank: int, world: int, host: str, elapsed: float = 1.0, **extra: Any) -> dict[str, Any]:
    out = {
        "rank": rank,
        "world": world,
        "host": host,
        "local_rank": 0,
        "elapsed_s": elapsed,
        "rows": 512,
        "steps": 10,
        "step_ms": 100.0 * elapsed,
        "samples_per_s": 5120 / elapsed,
        "grad_bytes": 1052672,
        "replicas_equal": True,
    }
    out.update(extra)
    return out


ONE = [rec(0, 1, "a")]
MANY = [rec(0, 2, "a", 1.1), rec(1, 2, "b", 1.1)]


def _judge(one: Any = ONE, many: Any = MANY, expected: FabricBusbw | None = ETH25) -> clusterddp.DdpVerdict:
    return clusterddp.judge_ddp(one, many, n_nodes=2, per_node=1, expected=expected, min_ratio=0.7)


def _kinds(v: clusterddp.DdpVerdict) -> list[str]:
    return [f.kind for f in v.failures]


# ------------------------------------------------------------------------------------------------------------
# command lines


def test_torchrun_argv_is_c10d_with_the_nodes_own_address_and_no_restarts() -> None:
    argv = clusterddp.torchrun_argv(
        "/opt/venv/bin/python3",
        "$D/ddpnodes.py",
        nnodes=2,
        nproc=8,
        endpoint="10.0.0.1:29400",
        rdzv_id="abc",
        backend="nccl",
        workload=clusterddp.GPU_WORKLOAD,
        timeout_s=120,
        local_addr="10.0.0.2",
        is_host=False,
    )
    assert argv == [
        "/opt/venv/bin/python3",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=10.0.0.1:29400",
        "--rdzv_id=abc",
        "--max_restarts=0",
        "--rdzv_conf=is_host=0,join_timeout=120",
        "--local_addr=10.0.0.2",
        "$D/ddpnodes.py",
        "nccl",
        *("20", "5", "4096", "8", "16384", "120"),
    ]


def test_torchrun_argv_refuses_a_backend_or_count_it_cannot_run() -> None:
    common: dict[str, Any] = {"endpoint": "h:1", "rdzv_id": "x", "workload": clusterddp.CPU_WORKLOAD}
    with pytest.raises(ConfigError) as e:
        clusterddp.torchrun_argv("py", "s", nnodes=2, nproc=1, backend="mpi", timeout_s=9, **common)
    assert e.value.field == "--ddp"
    with pytest.raises(ConfigError):
        clusterddp.torchrun_argv("py", "s", nnodes=2, nproc=0, backend="gloo", timeout_s=9, **common)


def test_srun_argv_runs_one_task_per_node_on_exactly_those_nodes() -> None:
    assert clusterddp.srun_argv(["n1", "n2"], "echo hi") == [
        "srun",
        "--nodes=2",
        "--nodelist=n1,n2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "sh",
        "-c",
        "echo hi",
    ]


def test_the_node_command_writes_the_probe_runs_the_argv_and_removes_its_folder() -> None:
    """Run for real with sh: the probe's bytes land at $D/ddpnodes.py, the argv runs with it, the folder goes;
    with a peer, GLOO_SOCKET_IFNAME is the interface the route to the peer leaves by (loopback here)."""
    probe = "print('the probe')\n"
    argv = [
        "sh",
        "-c",
        'cat "$0"; echo "args: $*"; echo "dir: $(dirname "$0")"; env',
        "$D/ddpnodes.py",
        "a b",
    ]
    cmd = clusterddp.node_command(argv, probe=probe, timeout_s=30, peer="127.0.0.1")
    r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30, check=True)
    assert r.stdout.startswith("print('the probe')\nargs: a b\n")
    folder = r.stdout.split("dir: ", 1)[1].splitlines()[0]
    assert not Path(folder).exists()
    assert "GLOO_SOCKET_IFNAME=lo\n" in r.stdout
    assert "OMP_NUM_THREADS=1\n" in r.stdout
    plain = clusterddp.node_command(argv, probe=probe, timeout_s=30)
    assert "GLOO_SOCKET_IFNAME" not in plain


def test_the_node_command_is_bounded_on_the_node_itself() -> None:
    cmd = clusterddp.node_command(["sleep", "30"], probe="", timeout_s=1)
    t0 = time.monotonic()
    r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 124
    assert time.monotonic() - t0 < 10


def test_the_probe_shipped_is_the_packages_ddp_probe() -> None:
    text = clusterddp.probe_text()
    assert "DistributedDataParallel" in text
    assert "IMAGESMITH_PROBE" in text
    assert "import imagesmith" not in text


# ------------------------------------------------------------------------------------------------------------
# the judgment


def test_a_healthy_step_passes_with_its_figures_and_threshold() -> None:
    v = _judge()
    assert v.failures == []
    assert v.warnings == []
    assert v.figures["efficiency"] == pytest.approx(1 / 1.1, abs=1e-4)
    assert v.figures["samples_per_s_one_node"] == 5120.0
    t = v.figures["threshold"]
    assert t["min_ratio"] == 0.7
    assert t["busbw_gbps"] == ETH25.busbw_gbps if ETH25 else False
    assert "2(W−1)/W × 1.1 MB / 2.3 GB/s" in t["basis"]
    assert "derived, not measured" in t["basis"]


def test_the_efficiency_floor_is_the_step_plus_the_ring_allreduce() -> None:
    bw = FabricBusbw(fabric="ib", nic_gbps=1, nics_per_node=1, busbw_gbps=10.0, basis="derived", source="s")
    floor, comm = clusterddp.efficiency_floor(0.1, 1e9, 2, bw)
    assert comm == pytest.approx(0.1)  # 2·(2−1)/2 × 1 GB / 10 GB/s
    assert floor == pytest.approx(0.5)
    floor8, _ = clusterddp.efficiency_floor(0.1, 1e9, 8, bw)
    assert floor8 == pytest.approx(0.1 / (0.1 + 0.175))


def test_scaling_below_the_threshold_fails_naming_the_figures() -> None:
    slow = [rec(0, 2, "a", 3.0), rec(1, 2, "b", 3.0)]
    v = _judge(many=slow, expected=IB)
    assert _kinds(v) == ["scaling low"]
    assert "DDP scaling efficiency 0.333 on 2 nodes" in v.failures[0].message
    # the same figures pass where the declared fabric carries the gradients slowly (the floor is lower)
    slow_link = FabricBusbw(
        fabric="ethernet", nic_gbps=1, nics_per_node=1, busbw_gbps=0.001, basis="derived", source="s"
    )
    assert _judge(many=slow, expected=slow_link).failures == []


def test_no_expected_busbw_is_warned_not_judged() -> None:
    v = _judge(many=[rec(0, 2, "a", 30.0), rec(1, 2, "b", 30.0)], expected=None)
    assert v.failures == []
    assert [w.kind for w in v.warnings] == ["no expectation"]
    assert v.figures["threshold"] is None


def test_a_missing_rank_fails() -> None:
    assert _kinds(_judge(many=[rec(0, 2, "a")])) == ["ranks missing"]


def test_ranks_of_separate_worlds_fail() -> None:
    """Two single-node worlds (each node alone: a rendezvous that never joined them) are not one job."""
    assert _kinds(_judge(many=[rec(0, 1, "a"), rec(0, 1, "b")])) == ["ranks missing"]


def test_the_one_node_run_is_checked_too() -> None:
    assert _kinds(_judge(one=[])) == ["ranks missing"]


def test_a_rank_with_an_error_fails_naming_it() -> None:
    v = _judge(many=[rec(0, 2, "a"), {"rank": 1, "world": 2, "host": "b", "error": "RuntimeError: gloo"}])
    assert _kinds(v) == ["rank failed"]
    assert "rank 1 on b: RuntimeError: gloo" in v.failures[0].message


def test_ranks_on_fewer_machines_than_nodes_fail() -> None:
    v = _judge(many=[rec(0, 2, "a"), rec(1, 2, "a")])
    assert _kinds(v) == ["ranks on fewer machines"]


def test_diverged_replicas_fail() -> None:
    v = _judge(many=[rec(0, 2, "a"), rec(1, 2, "b", replicas_equal=False)])
    assert _kinds(v) == ["replicas diverged"]
    assert "rank 1 on b" in v.failures[0].message


@pytest.mark.parametrize("bad", [0, -1.0, "1.0", None, float("nan"), True])
def test_a_timing_that_is_not_a_positive_number_fails(bad: object) -> None:
    assert _kinds(_judge(many=[rec(0, 2, "a"), rec(1, 2, "b", elapsed_s=bad)])) == ["bad timing"]


# ------------------------------------------------------------------------------------------------------------
# when it runs, and the flags


def _ids(*gpus: int) -> list[Identity]:
    return [
        Identity(
            node=f"n{i}", boot_id=f"b{i}", gpus=tuple((f"GPU-{i}-{g}", f"0000:0{g}:00.0") for g in range(n))
        )
        for i, n in enumerate(gpus, 1)
    ]


def _promise(options: clusterrun.ClusterOptions, ids: list[Identity]) -> Any:
    return clusterddp.ddp_promise(clusterrun.Ssh(options), NODES, ids, options, echo=lambda _l: None)


def test_auto_without_gpus_and_off_are_not_checked_with_the_reason() -> None:
    p, data, logs = _promise(clusterrun.ClusterOptions(), _ids(0, 0))
    assert (p.verdict, data, logs) == ("not checked", None, {})
    assert "--ddp torchrun|srun runs it on the CPU" in p.why
    p, _, _ = _promise(clusterrun.ClusterOptions(ddp="off"), _ids(8, 8))
    assert (p.verdict, p.why) == ("not checked", "--ddp off")


def test_gpus_give_nccl_one_rank_per_gpu_and_no_gpu_gives_gloo() -> None:
    assert clusterddp._per_node(_ids(8, 8), "auto") == (8, "nccl", "")
    assert clusterddp._per_node(_ids(0, 0), "torchrun") == (1, "gloo", "")
    with pytest.raises(ConfigError) as e:
        clusterddp._per_node(_ids(8, 7), "auto")
    assert (e.value.host, e.value.field) == ("n2", "--ddp")


def test_the_launcher_follows_the_allocation() -> None:
    assert clusterddp.launcher_for("auto", False) == "torchrun"
    assert clusterddp.launcher_for("auto", True) == "srun"
    assert clusterddp.launcher_for("off", True) is None


def test_the_ddp_flag_rules() -> None:
    with pytest.raises(ConfigError) as e:
        cluster_rules("auto", slurm=False, ddp="mpirun")
    assert e.value.field == "--ddp"
    with pytest.raises(ConfigError) as e:
        cluster_rules("auto", slurm=False, ddp="srun")
    assert "--ddp torchrun" in (e.value.hint or "")
    cluster_rules("auto", slurm=True, ddp="srun")
    flags = ClusterFlags(
        nodes=None,
        fabric="ethernet",
        link_gbps=None,
        nic_ports=None,
        expect_gdr=False,
        nccl_logs=(),
        bandwidth=True,
        iperf_seconds=5,
        min_ratio=0.7,
        node_suite=True,
        ddp="off",
    )
    assert flags.given() == ["--ddp"]


# ------------------------------------------------------------------------------------------------------------
# end to end with fake launchers


def _tool(folder: Path, name: str, body: str) -> None:
    p = folder / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    return d


#: ssh: the last two words are the host and the command; torch imports, a port is free, the rest succeeds
FAKE_SSH = """for a; do host=$cmd; cmd=$a; done
case "$cmd" in
  *'import torch.distributed.run'*) echo 2.13.0 ;;
  *getsockname*) echo 29400 ;;
  *) {extra} ;;
esac"""


def test_srun_inside_the_allocation_runs_one_node_then_all_and_reports_them(bin_dir: Path) -> None:
    _tool(bin_dir, "ssh", FAKE_SSH.format(extra="true"))
    lines = {
        n: [rec(r, n * 8, f"n{r // 8 + 1}", 1.0 + (n - 1) * 0.05, step_ms=50.0) for r in range(n * 8)]
        for n in (1, 2)
    }
    (bin_dir / "one").write_text("".join(f"IMAGESMITH_PROBE {json.dumps(x)}\n" for x in lines[1]))
    (bin_dir / "two").write_text("".join(f"IMAGESMITH_PROBE {json.dumps(x)}\n" for x in lines[2]))
    _tool(
        bin_dir,
        "srun",
        f'printf "%s\\n" "$@" > {bin_dir}/argv-$1; '
        f'case "$1" in --nodes=1) cat {bin_dir}/one;; *) cat {bin_dir}/two;; esac',
    )
    options = clusterrun.ClusterOptions(slurm=True, fabric="ib", link_gbps=400.0, nic_ports=8, min_ratio=0.7)
    p, data, logs = _promise(options, _ids(8, 8))
    assert (p.name, p.verdict) == ("cross-node DDP", "passed"), p.failures
    assert (data["launcher"], data["backend"], data["ranks"], data["ranks_per_node"]) == (
        "srun",
        "nccl",
        16,
        8,
    )
    assert data["efficiency"] == pytest.approx(1 / 1.05, abs=1e-4)
    assert sorted(logs) == ["ddp-1node.log", "ddp-2node.log"]
    argv = (bin_dir / "argv---nodes=2").read_text().splitlines()
    assert argv[:5] == ["--nodes=2", "--nodelist=n1,n2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "sh"]
    inner = data["runs"][1]["argv"]["srun"]
    assert "--nproc_per_node=8" in inner
    assert "--rdzv_endpoint=n1:29400" in inner
    assert not any(a.startswith("--local_addr") for a in inner)  # one command line for every node
    assert "python3 -m torch.distributed.run" in argv[6]
    md = "\n".join(clusterddp.render_markdown(data))
    assert "## Cross-node DDP (srun: 2 nodes × 8 rank(s), backend nccl)" in md
    assert "| 2 node(s) | 16 | 2 | " in md
    assert "| 15 | n2 |" in md


def test_a_node_without_torch_is_named_before_any_step(bin_dir: Path) -> None:
    _tool(
        bin_dir,
        "ssh",
        "for a; do host=$cmd; cmd=$a; done; "
        '[ "$host" = n2 ] && { echo "No module named torch" >&2; exit 1; }; echo ok',
    )
    with pytest.raises(ConfigError) as e:
        _promise(clusterrun.ClusterOptions(ddp="torchrun"), _ids(0, 0))
    assert (e.value.host, e.value.field) == ("n2", "--python")
    assert "node n2: python3 cannot import torch (No module named torch)" in e.value.message


def test_a_node_that_fails_mid_step_ends_the_others_at_once_and_is_named(bin_dir: Path) -> None:
    """n2's torchrun ends with ssh's 255 and n2 answers no more; n1's (that would wait 60 s) is ended."""
    # the one-node run (n1 alone) passes; in the two-node run n2 fails and n1 would wait 60 s
    _tool(
        bin_dir,
        "ssh",
        f"""for a; do host=$cmd; cmd=$a; done
case "$cmd" in
  *'import torch.distributed.run'*) echo 2.13.0; exit 0 ;;
  *getsockname*) echo 29400; exit 0 ;;
  true) [ "$host" = n2 ] && exit 255; exit 0 ;;
  *--nnodes=1*) echo 'IMAGESMITH_PROBE {json.dumps(rec(0, 1, "n1"))}'; exit 0 ;;
esac
[ "$host" = n2 ] && {{ echo "Connection to n2 closed by remote host." >&2; exit 255; }}
exec sleep 60""",
    )
    t0 = time.monotonic()
    with pytest.raises(ValidationFailed) as e:
        _promise(clusterrun.ClusterOptions(ddp="torchrun"), _ids(0, 0))
    assert time.monotonic() - t0 < 30
    assert e.value.host == "n2"
    assert "node n2 stopped answering during the cross-node DDP step on 2 node(s) × 1 rank(s) (torchrun)" in (
        e.value.message
    )
    assert "Connection to n2 closed by remote host." in e.value.message


# ------------------------------------------------------------------------------------------------------------
# what a failed torchrun said (CI: the error quoted only the rule of `=` that ends torchrun's summary)


def _summary(host: str, rank: int, exitcode: int, traceback: str) -> str:
    """torchrun's ChildFailedError summary, in the shape torch.distributed.elastic prints it."""
    rule = "=" * 60
    return (
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.13/site-packages/torch/distributed/run.py", line 940, in main\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        f"{rule}\n$D/ddpnodes.py FAILED\n{'-' * 60}\nFailures:\n  <NO_OTHER_FAILURES>\n{'-' * 60}\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-12-03_14:01:02\n"
        f"  host      : {host}\n  rank      : {rank} (local_rank: 0)\n"
        f"  exitcode  : {exitcode} (pid: 4242)\n  error_file: <N/A>\n  traceback : {traceback}\n{rule}\n"
    )


def test_a_rank_killed_by_a_signal_is_said_with_its_signal_and_its_own_last_words() -> None:
    stderr = (
        "[W1203 14:01:01.000000000 ProcessGroupGloo.cpp:755] Warning: Unable to resolve hostname\n"
        "terminate called after throwing an instance of 'gloo::IoException'\n"
        "  what():  [gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.233.9.11]:41234\n"
        "W1203 14:01:02.000 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 4242 "
        "SIGTERM\n" + _summary("isn2", 1, -6, "Signal 6 (SIGABRT) received by PID 4242")
    )
    said = clusterddp.torchrun_said(clusterrun.Ran(1, "", stderr, False))
    assert said == (
        "rank 1 on isn2: exit code -6; Signal 6 (SIGABRT) received by PID 4242; it said: what():  "
        "[gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.233.9.11]:41234"
    )


def test_a_rank_that_exited_is_said_with_its_python_error_not_torchruns() -> None:
    stderr = (
        'Traceback (most recent call last):\n  File "/tmp/x/ddpnodes.py", line 3, in <module>\n'
        "RuntimeError: Socket Timeout\n"
        + _summary(
            "isn1", 0, 1, "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        )
    )
    said = clusterddp.torchrun_said(clusterrun.Ran(1, "", stderr, False))
    assert said == "rank 0 on isn1: exit code 1; it said: RuntimeError: Socket Timeout"


def test_output_of_another_shape_is_its_last_line_that_says_something() -> None:
    said = clusterddp.torchrun_said(
        clusterrun.Ran(255, "", "ssh: connect to host n2: refused\n=====\n--\n", False)
    )
    assert said == "ssh: connect to host n2: refused"
    assert clusterrun.Ran(1, "", "=====\n", False).said == "ssh exited with code 1 and said nothing"
    long = clusterddp.torchrun_said(clusterrun.Ran(1, "", "x" * 1000, False))
    assert len(long) == 400
    assert long.endswith("…")


def test_a_node_whose_rank_crashed_is_named_with_torchruns_root_cause(bin_dir: Path) -> None:
    """n2's torchrun ends with its summary (a rank killed by SIGABRT) while n2 still answers: the error names
    n2, the signal and the rank's own last line, not the summary's closing rule."""
    summary = _summary("isn2", 1, -6, "Signal 6 (SIGABRT) received by PID 4242")
    (bin_dir / "summary").write_text("  what():  Connection closed by peer\n" + summary)
    _tool(
        bin_dir,
        "ssh",
        f"""for a; do host=$cmd; cmd=$a; done
case "$cmd" in
  *'import torch.distributed.run'*) echo 2.13.0; exit 0 ;;
  *getsockname*) echo 29400; exit 0 ;;
  true) exit 0 ;;
  *--nnodes=1*) echo 'IMAGESMITH_PROBE {json.dumps(rec(0, 1, "n1"))}'; exit 0 ;;
esac
[ "$host" = n2 ] && {{ cat {bin_dir}/summary >&2; exit 1; }}
exec sleep 60""",
    )
    with pytest.raises(ValidationFailed) as e:
        _promise(clusterrun.ClusterOptions(ddp="torchrun"), _ids(0, 0))
    assert e.value.host == "n2"
    assert (
        "node n2 failed during the cross-node DDP step on 2 node(s) × 1 rank(s) (torchrun) (rank 1 on isn2: "
        "exit code -6; Signal 6 (SIGABRT) received by PID 4242; it said: what():  Connection closed by peer)"
    ) in e.value.message
    assert "=====" not in e.value.message
