"""The cross-node collective wired into a cluster run (imagesmith/validate/clustercollective.py): which
launcher, how many ranks, srun inside an allocation end to end with a fake ``srun`` and ``ssh`` on PATH (no
Slurm here; tests/integration/test_validate_collective_netns.py launches a real mpirun across namespaces), the
error naming the node a failed launch blames, and ``--slurm`` / ``--collective`` refused where they cannot
apply. The fake srun prints the real 2×H200 nccl-tests table of tests/data/validate/h200x2 with its two rank
lines moved onto n1 and n2 and the NET/IB + GDR lines of tests/data/validate/cluster/nccl-ib-gdr.log."""

from __future__ import annotations

import importlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError, ValidationFailed
from imagesmith.validate import clustercollective, clusterrun
from imagesmith.validate.cluster import Identity
from imagesmith.validate.request import cluster_rules, slurm_wanted

DATA = Path(__file__).resolve().parents[1] / "data" / "validate"


def _two_node_log() -> str:
    lines, rank = [], 0
    for line in (DATA / "h200x2" / "all_reduce_perf-1.log").read_text().splitlines():
        if line.startswith("#  Rank"):
            line = line.replace("on         vm", f"on {('n1', 'n2')[rank]:>10}")
            rank += 1
        lines.append(line)
    return "\n".join(lines) + "\n" + (DATA / "cluster" / "nccl-ib-gdr.log").read_text()


def _tool(folder: Path, name: str, body: str) -> None:
    p = folder / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)


def _ids(*gpus: int) -> list[Identity]:
    return [
        Identity(
            node=f"n{i}", boot_id=f"b{i}", gpus=tuple((f"GPU-{i}-{g}", f"0000:0{g}:00.0") for g in range(n))
        )
        for i, n in enumerate(gpus, 1)
    ]


NODES = clusterrun.parse_nodes(["ssh://n1", "ssh://n2"], None)


def _ib_in_allocation() -> clusterrun.ClusterOptions:
    """Inside a Slurm allocation, 8 × 400G InfiniBand declared."""
    return clusterrun.ClusterOptions(slurm=True, fabric="ib", link_gbps=400.0, nic_ports=8, min_ratio=0.7)


def _run(options: clusterrun.ClusterOptions, ids: list[Identity]) -> Any:
    return clustercollective.collective_promises(
        clusterrun.Ssh(options), NODES, ids, options, echo=lambda _line: None
    )


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    return d


def test_srun_inside_the_allocation_runs_both_collectives_and_reports_them(bin_dir: Path) -> None:
    (bin_dir / "log").write_text(_two_node_log())
    _tool(bin_dir, "srun", f'echo "$@" >> {bin_dir}/argv; cat {bin_dir}/log')
    promises, data, logs = _run(_ib_in_allocation(), _ids(1, 1))
    assert [(p.name, p.verdict) for p in promises] == [
        ("cross-node NCCL all_reduce_perf", "passed"),
        ("cross-node NCCL all_gather_perf", "passed"),
    ]
    calls = (bin_dir / "argv").read_text().splitlines()
    assert len(calls) == 2
    assert "--nodelist=n1,n2" in calls[0]
    assert "--ntasks-per-node=1" in calls[0]
    assert " all_reduce_perf " in calls[0]
    assert " all_gather_perf " in calls[1]
    assert (data["launcher"], data["ranks"]) == ("srun", 2)
    run = data["runs"][0]
    assert run["ranks"] == [
        {"rank": 0, "host": "n1", "pci_bus_id": "0000:00:06"},
        {"rank": 1, "host": "n2", "pci_bus_id": "0000:00:07"},
    ]
    assert run["largest"] == {"bytes": 1073741824, "busbw_gbps": 329.38}
    assert run["expected"]["busbw_gbps"] == 455
    assert run["transport"]["nets"] == ["IB"]
    assert run["transport"]["gdr_channels"] > 0
    # all_gather: judged against the node's NICs (8 × 400 Gb/s × 0.92), not all_reduce's table
    assert data["runs"][1]["expected"]["busbw_gbps"] == 368.0
    assert set(logs) == {"all_reduce_perf.log", "all_gather_perf.log"}
    md = "\n".join(clustercollective.render_markdown(data))
    assert "## Cross-node NCCL (srun: 2 nodes × 1 rank(s))" in md
    assert "| 1073741824 | 329.38 | 329.38 |" in md


def test_a_rank_killed_on_a_node_is_one_error_naming_it(bin_dir: Path) -> None:
    _tool(bin_dir, "srun", "echo 'srun: error: n2: task 1: Killed' >&2; exit 137")
    _tool(bin_dir, "ssh", 'case "$*" in *" n2 "*) exit 255;; esac; exit 0')
    with pytest.raises(ValidationFailed) as exc:
        _run(_ib_in_allocation(), _ids(1, 1))
    assert exc.value.host == "n2"
    assert "node n2 stopped answering during the cross-node all_reduce_perf (srun)" in exc.value.message
    assert "no cluster report was written" in exc.value.message


def test_which_launcher_and_how_many_ranks(bin_dir: Path) -> None:
    assert clustercollective.launcher_for("auto", True) == "srun"
    assert clustercollective.launcher_for("auto", False) == "mpirun"
    assert clustercollective.launcher_for("off", True) is None
    # auto on nodes without GPUs: not checked, and nothing launched (no mpirun on this PATH needed)
    (promise,), data, _ = _run(clusterrun.ClusterOptions(), _ids(0, 0))
    assert (promise.verdict, data) == ("not checked", None)
    assert "no GPU on the nodes" in promise.why
    with pytest.raises(ConfigError) as exc:
        _run(clusterrun.ClusterOptions(), _ids(8, 7))
    assert exc.value.host == "n2"
    assert "node n2: 7 GPU(s) where the other nodes show 8" in exc.value.message


def test_mpirun_goes_over_the_runs_own_ssh() -> None:
    opts = clusterrun.ClusterOptions(ssh_config="/c/ssh_config", ssh_identity="/c/key")
    agent = clustercollective.ssh_agent(
        clusterrun.parse_nodes(["ssh://me@a:2200", "ssh://me@b:2200"], None), opts
    )
    assert agent.startswith("ssh -o BatchMode=yes -o ConnectTimeout=10")
    assert agent.endswith("-F /c/ssh_config -i /c/key -l me -p 2200")
    with pytest.raises(ConfigError, match="different ssh users or ports"):
        clustercollective.ssh_agent(clusterrun.parse_nodes(["ssh://me@a", "ssh://you@b"], None), opts)
    with pytest.raises(ConfigError, match="has a space"):
        clustercollective.ssh_agent(NODES, clusterrun.ClusterOptions(ssh_config="/my dir/cfg"))


def test_slurm_is_implied_inside_an_allocation_of_two_or_more_nodes_without_targets() -> None:
    alloc = {"SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_JOB_NUM_NODES": "4"}
    assert slurm_wanted(False, [], alloc)
    assert not slurm_wanted(False, ["local://"], alloc)  # named: this node only
    assert not slurm_wanted(False, [], {"SLURM_JOB_NODELIST": "gpu01", "SLURM_JOB_NUM_NODES": "1"})
    assert not slurm_wanted(False, [], {})
    assert slurm_wanted(True, [], {})


def test_collective_modes_are_checked_by_the_flag_rules() -> None:
    cluster_rules("srun", slurm=True)
    with pytest.raises(ConfigError, match="use one of auto, mpirun, srun, off"):
        cluster_rules("nccl", slurm=False)
    with pytest.raises(ConfigError, match="srun launches on the nodes of a Slurm allocation"):
        cluster_rules("srun", slurm=False)


def test_busbw_png_per_collective_or_why_there_is_none(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """busbw.png beside cluster.json: one line per collective (report.write_plot's approach); without
    matplotlib (the optional extra ``plot``) the report says why there is no figure."""
    (bin_dir / "log").write_text(_two_node_log())
    _tool(bin_dir, "srun", f"cat {bin_dir}/log")
    _promises, data, _logs = _run(_ib_in_allocation(), _ids(1, 1))
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    out.mkdir()
    data["plot"] = clustercollective.write_plot(data, out)
    assert data["plot"] == "busbw.png"
    assert (out / "busbw.png").read_bytes()[:4] == b"\x89PNG"
    assert "![busbw per message size](busbw.png)" in "\n".join(clustercollective.render_markdown(data))
    real = importlib.import_module

    def no_matplotlib(name: str, *args: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_matplotlib)
    data["plot"] = clustercollective.write_plot(data, tmp_path)
    assert data["plot"] == "skipped: matplotlib is not installed (pip install 'imagesmith[plot]')"
    md = "\n".join(clustercollective.render_markdown(data))
    assert "No busbw.png: matplotlib is not installed (pip install 'imagesmith[plot]')" in md
    assert clustercollective.write_plot(None, tmp_path) == "skipped: the cross-node collective did not run"
