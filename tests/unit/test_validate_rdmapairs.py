"""RDMA node-pair bandwidth (imagesmith.validate.rdmapairs): perftest's report read from recorded real outputs
(tests/data/validate/cluster/ib_write_bw-*.txt, each naming its source), the verdict against the port's
negotiated rate, the pairing (ring, re-pairing of suspects), the shell the nodes run (executed here with a
stand-in ib_write_bw on PATH), and the promise when no node has an RDMA device."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError, ParseError, ValidationFailed
from imagesmith.validate import clusterrun, rdmapairs
from imagesmith.validate.clusterrun import ClusterOptions, Node, Ran
from imagesmith.validate.nics import parse_sysfs_dump
from imagesmith.validate.rdmapairs import RdmaPort, parse_ib_write_bw

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "validate" / "cluster"
SWEEP = (FIXTURES / "ib_write_bw-roce-sweep-gpu-operator.txt").read_text()
D10 = (FIXTURES / "ib_write_bw-roce-D10-scc24.txt").read_text()
GB10 = (FIXTURES / "ib_write_bw-roce-4qp-gb10.txt").read_text()


def _port(dev: str = "mlx5_0", rate: float | None = 400, gid: int | None = 3) -> RdmaPort:
    return RdmaPort(device=dev, port=1, rate_gbps=rate, link_layer="Ethernet", gid_index=gid)


def _node(name: str) -> Node:
    return Node(name=name, target=f"ssh://{name}", user=None, host=name, port=None, address=name)


def test_the_sweep_of_the_gpu_operator_docs_reads_its_largest_size() -> None:
    bw = parse_ib_write_bw(SWEEP)
    assert (bw.device, bw.link_type, bw.qps) == ("mlx5_0", "Ethernet", 1)
    assert len(bw.rows) == 23
    assert (bw.last.bytes, bw.last.iterations, bw.last.average_gbps) == (8388608, 5000, 92.39)
    assert bw.rows[0].bytes == 2


def test_a_duration_run_over_three_qps_reads_its_average_not_its_zero_peak() -> None:
    bw = parse_ib_write_bw(D10)
    assert (bw.device, bw.qps) == ("bnxt_re0", 3)
    assert (bw.last.bytes, bw.last.peak_gbps, bw.last.average_gbps) == (65536, 0.0, 363.47)


def test_mb_per_second_is_perftests_mebibytes_and_stray_lines_are_skipped() -> None:
    # perftest_parameters.h RESULT_FMT, and the CPU-frequency warning perftest prints without -F
    text = (
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
        "Conflicting CPU frequency values detected: 1000.259000 != 2105.420000. CPU Frequency is not max.\n"
        " 65536      5000             11025.44            11024.71                  0.176395\n"
    )
    bw = parse_ib_write_bw(text)
    assert bw.last.average_gbps == pytest.approx(11024.71 * 1048576 * 8 / 1e9, abs=1e-3)  # 92.48 Gb/s


def test_no_result_table_carries_perftests_last_words() -> None:
    with pytest.raises(ParseError) as e:
        parse_ib_write_bw(" Couldn't connect to 10.0.0.2:18515\n Unable to init the socket connection\n")
    assert e.value.said == "Unable to init the socket connection"
    with pytest.raises(ParseError):
        parse_ib_write_bw(SWEEP.split(" #bytes")[0])  # cut before the table


def test_active_ports_and_the_roce_v2_gid_come_from_the_nic_inventory() -> None:
    ports = parse_sysfs_dump((FIXTURES / "sysfs-roce-v2.txt").read_text())
    inv = [clusterrun._port_json(p) for p in ports]
    (p,) = rdmapairs.active_ports(inv)
    assert (p.name, p.rate_gbps, p.gid_index) == ("mlx5_0:1", 100.0, 3)
    down = parse_sysfs_dump((FIXTURES / "sysfs-mlx4-init-and-eth.txt").read_text())
    active = [x for x in down if x.active]
    assert len(rdmapairs.active_ports([clusterrun._port_json(x) for x in down])) == len(active)


def _judge(reports: list[tuple[str, int]], rate: float = 400) -> rdmapairs.PairResult:
    ports = [(_port(rate=rate), _port(rate=rate)) for _ in reports]
    return rdmapairs.judge_reports(("n1", "n2"), ports, reports, declared_gbps=None, min_ratio=0.9, limit=35)


def test_the_verdict_is_against_the_lower_negotiated_rate_of_the_two_ports() -> None:
    ok = _judge([(D10, 0)])  # 363.47 of 400 = 0.909
    assert ok.ok
    assert ok.devices[0].gbps == 363.47
    assert ok.devices[0].basis == "negotiated 400 Gb/s (mlx5_0:1, sysfs rate)"
    slow = _judge([(SWEEP, 0)])  # 92.39 of 400
    (f,) = slow.findings
    assert (f.kind, f.subject) == ("rdma pair slow", "n1→n2 mlx5_0:1")
    assert "92.39 Gb/s, below 90% of 400 Gb/s" in f.message
    assert _judge([(SWEEP, 0)], rate=100).ok  # the same run on a 100 Gb/s port
    mixed = rdmapairs.judge_reports(
        ("n1", "n2"),
        [(_port(rate=100), _port(rate=400))],
        [(SWEEP, 0)],
        declared_gbps=None,
        min_ratio=0.9,
        limit=35,
    )
    assert mixed.ok
    assert mixed.devices[0].rate_gbps == 100


def test_a_killed_or_failed_client_fails_the_pair_naming_the_device() -> None:
    r = _judge([(D10, 0), ("", 124), (" Couldn't connect to n2:18517\n", 1)])
    kinds = [(f.kind, f.subject) for f in r.findings]
    assert kinds == [("rdma pair hung", "n1→n2 mlx5_0:1"), ("rdma pair failed", "n1→n2 mlx5_0:1")]
    assert "did not end within 35 s (killed)" in r.findings[0].message
    assert "Couldn't connect to n2:18517" in r.findings[1].message


def test_no_rate_anywhere_is_a_flag_error() -> None:
    with pytest.raises(ConfigError) as e:
        rdmapairs.judge_reports(
            ("n1", "n2"),
            [(_port(rate=None), _port(rate=None))],
            [(D10, 0)],
            declared_gbps=None,
            min_ratio=0.9,
            limit=35,
        )
    assert "--link-gbps" in (e.value.hint or "")
    r = rdmapairs.judge_reports(
        ("n1", "n2"),
        [(_port(rate=None), _port(rate=None))],
        [(D10, 0)],
        declared_gbps=400,
        min_ratio=0.9,
        limit=35,
    )
    assert r.ok
    assert r.devices[0].basis == "declared 400 Gb/s"


def test_the_ring_then_re_pairing_names_the_slow_node() -> None:
    nodes = [_node(f"n{i}") for i in range(1, 5)]
    ports = {n.name: [_port()] for n in nodes}
    seen: list[tuple[str, str]] = []

    def measure(ssh: Any, a: Node, b: Node, pairs: Any, options: Any) -> rdmapairs.PairResult:
        seen.append((a.name, b.name))
        text = SWEEP if "n2" in (a.name, b.name) else D10
        return rdmapairs.judge_reports(
            (a.name, b.name), pairs, [(text, 0)], declared_gbps=None, min_ratio=0.9, limit=35
        )

    pass1, pass2, findings = rdmapairs.run_pairs(None, nodes, ports, ClusterOptions(), measure=measure)  # type: ignore[arg-type]
    assert [p.pair for p in pass1] == [("n1", "n2"), ("n3", "n4"), ("n2", "n3"), ("n4", "n1")]
    assert {p.pair[0] for p in pass2} == {"n1", "n2", "n3"}  # each suspect against n4, the one known good
    assert [(f.kind, f.subject) for f in findings] == [("rdma node slow", "n2")]


class _Ssh:
    def __init__(self, answers: dict[str, Ran]) -> None:
        self.answers = answers

    def run(self, node: Node, command: str, **_: Any) -> Ran:
        return self.answers.get(node.name, Ran(0, "", "", False))


def _inv(rate: float = 400) -> list[dict[str, Any]]:
    return [
        {
            "device": "mlx5_0",
            "port": 1,
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate_gbps": rate,
            "link_layer": "InfiniBand",
            "roce_v2_gids": [],
        }
    ]


def test_no_rdma_device_is_not_checked_with_its_reason_never_passed() -> None:
    nodes = [_node("n1"), _node("n2")]
    ssh: Any = _Ssh({})
    p, data = rdmapairs.rdma_promise(ssh, nodes, {"n1": [], "n2": []}, ClusterOptions(), echo=print)
    assert (p.verdict, data) == ("not checked", None)
    assert "no RDMA device on any node" in p.why
    p, _ = rdmapairs.rdma_promise(ssh, nodes, {"n1": _inv(), "n2": []}, ClusterOptions(), echo=print)
    assert p.verdict == "not checked"
    assert "only n1 has an ACTIVE RDMA port" in p.why
    p, _ = rdmapairs.rdma_promise(
        ssh, nodes, {"n1": _inv(), "n2": _inv()}, ClusterOptions(rdma_bandwidth=False), echo=print
    )
    assert (p.verdict, p.why) == ("not checked", "--no-rdma-bandwidth")


def test_a_node_with_ports_and_no_ib_write_bw_is_one_error_with_the_install_line() -> None:
    nodes = [_node("n1"), _node("n2")]
    ssh: Any = _Ssh({"n2": Ran(0, "imagesmith-no-ib_write_bw\n", "", False)})
    with pytest.raises(ConfigError) as e:
        rdmapairs.rdma_promise(ssh, nodes, {"n1": _inv(), "n2": _inv()}, ClusterOptions(), echo=print)
    assert e.value.host == "n2"
    assert "node n2: RDMA ports and no ib_write_bw" in e.value.message
    assert "apt-get install perftest" in (e.value.hint or "")


def test_the_nodes_shell_retries_a_server_not_yet_listening_and_reports_each_client(tmp_path: Path) -> None:
    """client_command run for real by sh, with a stand-in ib_write_bw on PATH that refuses the first
    connection (perftest's words), then prints a recorded report; one client killed by its timeout."""
    (tmp_path / "D10.txt").write_text(D10)
    tool = tmp_path / "ib_write_bw"
    tool.write_text(
        "#!/bin/sh\n"
        'case "$*" in *mlx5_1*) exec sleep 30;; esac\n'
        f"if [ ! -e {tmp_path}/tried ]; then : >{tmp_path}/tried; "
        'echo " Couldn\'t connect to n2:18515" >&2; exit 1; fi\n'
        f'echo "$*" >>{tmp_path}/argv\n'
        f"cat {tmp_path}/D10.txt\n"
    )
    tool.chmod(0o755)
    s = rdmapairs.settings()
    ports = [_port("mlx5_0"), _port("mlx5_1")]
    cmd = rdmapairs.client_command(ports, "n2", s, 5, 2)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, env=env, timeout=60, check=True)
    (r0, rc0), (_r1, rc1) = rdmapairs.split_client_output(out.stdout, 2)
    assert rc0 == 0
    assert parse_ib_write_bw(r0).last.average_gbps == 363.47
    assert rc1 == 124
    argv = (tmp_path / "argv").read_text()
    assert "-d mlx5_0 -i 1 -p 18515 -s 1048576 -D 5 -F --report_gbits -x 3 n2" in argv
    server = rdmapairs.server_command(ports, s, 5, 45)
    assert "timeout 45 ib_write_bw -d mlx5_0 -i 1 -p 18515" in server
    assert "-d mlx5_1 -i 1 -p 18516" in server


def test_the_threshold_and_its_basis_come_from_the_data_file() -> None:
    s = rdmapairs.settings()
    assert s.min_ratio == 0.9
    assert any("azurehpc-health-checks" in src for src in s.sources)


class _GoneServerSsh:
    """n2's ssh fails (exit 255) for the servers and for the liveness probe; n1's clients find no server."""

    def __init__(self) -> None:
        self.options = ClusterOptions()

    def argv(self, node: Node, command: str, **_: Any) -> list[str]:
        return ["sh", "-c", "echo 'ssh: connect to host n2 port 22: No route to host' >&2; exit 255"]

    def run(self, node: Node, command: str, **_: Any) -> Ran:
        if command == "true":
            return Ran(255 if node.name == "n2" else 0, "", "no route", False)
        out = " Couldn't connect to n2:18515\n===== imagesmith ib_write_bw 0 rc=1\n"
        return Ran(0, out, "", False)


def test_a_server_node_that_is_gone_is_the_runs_error_not_a_slow_pair() -> None:
    ssh: Any = _GoneServerSsh()
    with pytest.raises(ValidationFailed) as e:
        rdmapairs.measure_pair(ssh, _node("n1"), _node("n2"), [(_port(), _port())], ClusterOptions())
    assert e.value.host == "n2"
    assert "node n2 stopped answering during the RDMA bandwidth run n1→n2" in e.value.message


def test_a_real_report_below_its_ports_rate_fails_naming_the_device() -> None:
    """The GB10 run: 111.61 Gb/s over 4 QPs on a 200 Gb/s port (the same link carried 183 Gb/s of NCCL
    all_gather): 0.56 of the rate, below the 0.9 floor."""
    bw = parse_ib_write_bw(GB10)
    assert (bw.device, bw.link_type, bw.qps, bw.last.average_gbps) == ("rocep1s0f0", "IB", 4, 111.61)
    dev = _port("rocep1s0f0", rate=200)
    r = rdmapairs.judge_reports(
        ("n1", "n2"), [(dev, dev)], [(GB10, 0)], declared_gbps=None, min_ratio=0.9, limit=35
    )
    (f,) = r.findings
    assert f.subject == "n1→n2 rocep1s0f0:1"
    assert "111.61 Gb/s, below 90% of 200 Gb/s (negotiated 200 Gb/s (rocep1s0f0:1, sysfs rate))" in f.message
