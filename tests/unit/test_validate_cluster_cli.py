"""``imagesmith validate`` over several nodes (issue 32): the node list, the flags, and every refusal that
comes
before any node is touched (no sshd here: tests/integration/test_validate_cluster_netns.py runs three)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError
from imagesmith.validate import clusterrun


def test_nodes_from_targets_and_a_nodes_file(tmp_path: Path) -> None:
    f = tmp_path / "nodes.txt"
    f.write_text(
        "# the rental's nodes\nssh://root@10.0.0.3:2222 192.168.7.3   # data NIC\n\nssh://[fe80::1]\n"
    )
    nodes = clusterrun.parse_nodes(["ssh://me@a", "ssh://b:22"], str(f))
    assert [(n.name, n.user, n.host, n.port, n.address) for n in nodes] == [
        ("me@a", "me", "a", None, "a"),
        ("b:22", None, "b", 22, "b"),
        ("root@10.0.0.3:2222", "root", "10.0.0.3", 2222, "192.168.7.3"),
        ("[fe80::1]", None, "fe80::1", None, "fe80::1"),
    ]


@pytest.mark.parametrize(
    ("targets", "lines", "words"),
    [
        (["ssh://a"], None, "at least two nodes"),
        (["ssh://a", "ssh://a"], None, "named twice"),
        (["ssh://a", "docker://x"], None, "not an ssh:// target"),
        (["ssh://a", "local://"], None, "not an ssh:// target"),
        (["ssh://a"], "ssh://b 10.0.0.2 extra\n", "3 words"),
        (["ssh://a"], "ssh://\n", "not ssh://user@host"),
    ],
)
def test_bad_node_lists_are_refused(
    tmp_path: Path, targets: list[str], lines: str | None, words: str
) -> None:
    path = None
    if lines is not None:
        path = tmp_path / "nodes.txt"
        path.write_text(lines)
    with pytest.raises(ConfigError, match=words):
        clusterrun.parse_nodes(targets, str(path) if path else None)


def test_ssh_command_line_is_bounded_and_non_interactive() -> None:
    opts = clusterrun.ClusterOptions(ssh_config="/cfg", ssh_identity="/key")
    node = clusterrun.parse_nodes(["ssh://u@h:2200", "ssh://x"], None)[0]
    argv = clusterrun.Ssh(opts).argv(node, "true")
    assert argv[0] == "ssh"
    for want in ("BatchMode=yes", "ConnectTimeout=10", "ServerAliveInterval=5", "ServerAliveCountMax=2"):
        assert want in argv
    assert argv[-4:] == ["-p", "2200", "u@h", "true"]
    assert argv[argv.index("-F") : argv.index("-F") + 2] == ["-F", "/cfg"]
    assert argv[argv.index("-i") : argv.index("-i") + 2] == ["-i", "/key"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["validate", "--fabric", "ib"], "apply only to several nodes"),
        (["validate", "ssh://a", "--no-bandwidth"], "apply only to several nodes"),
        (["validate", "ssh://a", "--link-gbps", "100"], "apply only to several nodes"),
        (["validate", "ssh://a", "ssh://b", "--fabric", "infiniband"], "use one of ib, roce, ethernet"),
        (["validate", "ssh://a", "ssh://b", "--sign-key", "{tmp}/k"], "and no --image is given"),
        (["validate", "ssh://a", "ssh://b", "--image", "acme/torch:2.5.1"], "not an image by digest"),
        (["validate", "ssh://a", "ssh://b", "--image", "acme/torch@sha256:abc"], "not an image by digest"),
        (["validate", "ssh://a", "--image", "acme/t@sha256:" + "a" * 64], "apply only to several nodes"),
        (
            ["validate", "ssh://a", "ssh://b", "--image", "a/t@sha256:" + "a" * 64, "--sign-key", "{tmp}/k"],
            "signing key",
        ),
        (["validate", "ssh://a", "docker://ctr"], "not an ssh:// target"),
        (["validate", "ssh://a", "ssh://a"], "named twice"),
        (["validate", "ssh://a", "ssh://b", "--nccl-log", "{tmp}/missing.log"], "--nccl-log"),
        (["validate", "--nodes", "{tmp}/missing.txt"], "--nodes"),
        (["validate", "ssh://a", "ssh://b", "--link-gbps", "0"], "--link-gbps"),
    ],
)
def test_cluster_flags_are_refused_before_any_node_is_touched(
    run_cli: Any, tmp_path: Path, args: list[str], words: str
) -> None:
    (tmp_path / "k").write_text("not a key")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args] + ["--report", str(tmp_path / "r")]
    r = run_cli(*argv)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert words in r.stderr
    assert "fix:" in r.stderr or "Usage" in r.stderr or "Invalid value" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "r" / clusterrun.CLUSTER_JSON).exists()


def test_the_markdown_report_shows_the_pair_matrix_and_the_failures() -> None:
    data = {
        "verdict": "failed",
        "verdict_reason": "node-to-node bandwidth: pair a↔b slow",
        "promises": [
            {"name": "distinct machines", "verdict": "passed", "failures": []},
            {
                "name": "node-to-node bandwidth",
                "verdict": "failed",
                "failures": [
                    {"subject": "a↔b", "kind": "pair slow", "message": "pair a↔b: a→b 0.02 Gb/s", "fix": "f"}
                ],
            },
        ],
        "nodes": [
            {"name": "a", "boot_id": "1", "rdma_ports": []},
            {
                "name": "b",
                "boot_id": "2",
                "rdma_ports": [
                    {
                        "device": "mlx5_0",
                        "port": 1,
                        "state": "ACTIVE",
                        "rate_gbps": 400.0,
                        "link_layer": "InfiniBand",
                    }
                ],
            },
        ],
        "bandwidth": {"pairs": [{"pair": ["a", "b"], "forward_gbps": 0.02, "reverse_gbps": 9.5}]},
    }
    md = clusterrun.render_markdown(data)
    assert md.startswith("# Cluster validation: FAILED")
    assert "| a | — | 0.02 |" in md
    assert "| b | 9.50 | — |" in md
    assert "- **node-to-node bandwidth**: pair a↔b: a→b 0.02 Gb/s. Fix: f" in md
    assert "mlx5_0:1 ACTIVE 400.0G InfiniBand" in md


@pytest.mark.parametrize(
    ("flag", "kind"),
    [
        ("--nodes", "fifo"),
        ("--nodes", "folder"),
        ("--nodes", "utf16"),
        ("--nodes", "huge"),
        ("--nccl-log", "fifo"),
        ("--nccl-log", "folder"),
        ("--nccl-log", "utf16"),
    ],
)
def test_the_cluster_file_flags_refuse_what_is_no_file_of_theirs(
    run_cli: Any, tmp_path: Path, flag: str, kind: str
) -> None:
    """A FIFO (never read: it would block), a folder, UTF-16, a 5000-digit line: one error naming the flag,
    exit 2, before any node is touched."""
    import os

    path = tmp_path / "input"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "utf16":
        path.write_bytes("ssh://a\n".encode("utf-16"))
    else:
        path.write_text("9" * 5000 + "\n")
    r = run_cli("validate", "ssh://a", "ssh://b", flag, str(path), "--report", str(tmp_path / "r"))
    assert r.exit_code == 2, r.stdout + r.stderr
    assert flag in r.stderr or kind == "huge"
    assert "fix:" in r.stderr
    assert "Traceback" not in r.stderr
