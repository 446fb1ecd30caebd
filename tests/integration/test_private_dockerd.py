"""The benchmarks' private dockerd (tests.localinfra.private_dockerd, issue 36) leaves the machine's engine
alone (its docker0 bridge, its iptables rules) and takes its own bridge, rules and data with
it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.localinfra import PrivateDockerd, private_dockerd

BRIDGE = ("istestpd0", "172.30.239.1/24")


def _link(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, check=False).returncode == 0


def _nat_rules() -> str:
    return subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True, check=True).stdout


def test_private_engine_keeps_docker0_and_cleans_up(tmp_path: Path) -> None:
    assert _link("docker0"), "the machine's dockerd has no docker0: run `bash scripts/services.sh start`"
    root = tmp_path / "engine"
    with private_dockerd(root, bridge=BRIDGE, nat=True) as engine:
        assert _link("docker0")
        assert _link(BRIDGE[0])
        assert "172.30.239.0/24" in _nat_rules()
        own = subprocess.run(
            ["docker", "images", "-q"], env=engine.env, capture_output=True, text=True, check=True, timeout=60
        )
        assert own.stdout.split() == []
    assert _link("docker0")
    assert not _link(BRIDGE[0])
    assert "172.30.239.0/24" not in _nat_rules()
    assert not root.exists()


def test_the_main_engines_bridge_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="docker0"):
        PrivateDockerd(root=tmp_path, bridge=("docker0", "172.17.0.1/16")).start()
    assert _link("docker0")
