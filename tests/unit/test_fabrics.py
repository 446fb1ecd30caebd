"""imagesmith/data/fabrics.toml (issue 32, "Beyond one machine"): the fabrics validate knows, read with one
error naming the file and the field for a bad row; the Literal, the schema enums and pick's names held to it;
``--fabric efa`` refused naming the gap and the fix before any node is contacted."""

from __future__ import annotations

import subprocess
from importlib import resources
from pathlib import Path
from typing import Any, get_args

import pytest

from imagesmith.commands import cluster as cluster_cmd
from imagesmith.errors import ConfigError
from imagesmith.pick import ranking
from imagesmith.schema import CLUSTER_FABRICS, report
from imagesmith.validate import clusterrun, fabrics, nccltransport, nics

GOOD = """schema = 1
[[fabric]]
name = "ib"
title = "InfiniBand"
nccl_net = "IB"
carries = ["libibverbs1"]
supported = true
source = "s"

[[fabric]]
name = "efa"
title = "AWS Elastic Fabric Adapter"
nccl_net = "AWS Libfabric"
carries = []
supported = false
gap = "no libfabric"
fix = "use the EFA installer"
source = "s"
"""


def test_the_packaged_file_has_the_four_fabrics() -> None:
    rows = {r.name: r for r in fabrics.rows()}
    assert list(rows) == ["ib", "roce", "ethernet", "efa"]
    assert {n: r.title for n, r in rows.items()} == {
        "ib": "InfiniBand",
        "roce": "RoCE",
        "ethernet": "Ethernet",
        "efa": "AWS Elastic Fabric Adapter",
    }
    assert {n: r.nccl_net for n, r in rows.items()} == {
        "ib": "IB",
        "roce": "IB",
        "ethernet": "Socket",
        "efa": "AWS Libfabric",
    }
    assert rows["ib"].carries == rows["roce"].carries == ("libibverbs1", "ibverbs-providers", "librdmacm1")
    assert rows["ethernet"].carries == ()
    efa = rows["efa"]
    assert not efa.supported
    assert [r.name for r in rows.values() if r.supported] == ["ib", "roce", "ethernet"]
    assert "libfabric" in efa.gap
    assert "aws-ofi-nccl" in efa.gap
    assert "--skip-kmod" in efa.fix
    assert "--fabric ethernet" in efa.fix
    for want in ("Install the EFA software in a container", "aws/aws-ofi-nccl", "NVIDIA-NeMo/RL", "NERSC"):
        assert want in efa.source
    assert all(r.source for r in rows.values())


def test_the_parser_reads_a_good_file() -> None:
    ib, efa = fabrics.parse(GOOD)
    assert (ib.name, ib.supported, ib.gap, ib.fix, ib.carries) == ("ib", True, "", "", ("libibverbs1",))
    assert (efa.gap, efa.fix, efa.carries) == ("no libfabric", "use the EFA installer", ())


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda t: t.replace("schema = 1", "schema = 2"), "schema"),
        (lambda t: t + "[[fabric\n", "TOML"),
        (lambda t: "schema = 1\n", "fabric"),
        (lambda t: t.replace('name = "efa"', 'name = "ib"'), "fabric[1].name"),
        (lambda t: t.replace('name = "efa"', 'name = "EFA"'), "fabric[1].name"),
        (lambda t: t.replace('name = "efa"\n', ""), "fabric[1].name"),
        (lambda t: t.replace('title = "InfiniBand"\n', ""), "fabric ib.title"),
        (lambda t: t.replace('nccl_net = "IB"', 'nccl_net = ""'), "fabric ib.nccl_net"),
        (lambda t: t.replace('carries = ["libibverbs1"]', 'carries = "libibverbs1"'), "fabric ib.carries"),
        (lambda t: t.replace("supported = true", 'supported = "yes"'), "fabric ib.supported"),
        (lambda t: t.replace('gap = "no libfabric"\n', ""), "fabric efa.gap"),
        (lambda t: t.replace('fix = "use the EFA installer"\n', ""), "fabric efa.fix"),
        (lambda t: t.replace("supported = true", 'supported = true\nfix = "x"'), "fabric ib"),
        (lambda t: t.replace('source = "s"\n', "", 1), "fabric ib.source"),
        (lambda t: t.replace("supported = true", "supported = false\ngap = 'g'\nfix = 'f'"), "fabric"),
    ],
)
def test_a_bad_row_is_one_error_naming_the_file_and_field(edit: Any, field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        fabrics.parse(edit(GOOD))
    assert exc.value.file == "imagesmith/data/fabrics.toml"
    assert exc.value.field == field
    assert exc.value.message.startswith(f"imagesmith/data/fabrics.toml: {field}: ")
    assert exc.value.hint


def test_the_literal_the_schemas_and_pick_agree_with_the_data() -> None:
    supported = fabrics.supported()
    assert get_args(nics.Fabric) == nics.FABRICS == supported
    assert supported == CLUSTER_FABRICS
    assert report._FABRIC.enum == supported
    # ib and roce are NCCL's IB transport; ethernet's is the socket the transport check takes as sold; efa's
    # plugin network is "another transport" where ib/roce was declared
    for row in fabrics.rows():
        assert nccltransport._is_rdma(row.nccl_net) == (row.name in ("ib", "roce")), row.name
    assert "efa" not in nics.FABRICS


def test_pick_names_a_fabric_by_the_data_title() -> None:
    summary = type(
        "S", (), {"fabric": "roce", "nodes": 2, "gpus_per_node": 8, "date": "2026-12-02T00:00:00Z"}
    )
    summary.report_digest = "sha256:" + "a" * 64  # type: ignore[attr-defined]
    assert "fabric roce (RoCE) (2026-12-02;" in ranking.cluster_sentence(summary)  # type: ignore[arg-type]


def test_the_packaged_file_is_the_one_read() -> None:
    text = resources.files("imagesmith.data").joinpath("fabrics.toml").read_text(encoding="utf-8")
    assert fabrics.parse(text) == fabrics.rows()


@pytest.fixture
def no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any ssh, subprocess or preflight is a test failure: the refusal comes first."""

    def touched(*_a: object, **_k: object) -> None:
        raise AssertionError("a node was contacted")

    monkeypatch.setattr(subprocess, "run", touched)
    monkeypatch.setattr(subprocess, "Popen", touched)
    monkeypatch.setattr(clusterrun, "preflight", touched)


@pytest.mark.parametrize(
    "targets",
    [["ssh://a"], ["ssh://a", "ssh://b"], ["ssh://a", "ssh://b", "ssh://c"]],
)
def test_fabric_efa_is_refused_naming_the_gap_and_the_fix(
    run_cli: Any, tmp_path: Path, no_node: None, targets: list[str]
) -> None:
    r = run_cli("validate", *targets, "--fabric", "efa", "--report", str(tmp_path / "r"))
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "--fabric efa (AWS Elastic Fabric Adapter): not supported" in r.stderr
    assert "aws-ofi-nccl" in r.stderr
    assert "libfabric" in r.stderr
    assert "fix:" in r.stderr
    assert "--skip-kmod" in r.stderr
    assert "--fabric ethernet" in r.stderr
    for wrong in ("invalid choice", "use one of", "apply only to several nodes", "Traceback"):
        assert wrong not in r.stderr
    assert not (tmp_path / "r").exists()


def test_the_refusal_carries_the_field() -> None:
    flags = cluster_cmd.ClusterFlags(
        nodes=None,
        fabric="efa",
        link_gbps=None,
        nic_ports=None,
        expect_gdr=False,
        nccl_logs=(),
        bandwidth=True,
        iperf_seconds=5,
        min_ratio=0.7,
        node_suite=True,
    )
    with pytest.raises(ConfigError) as exc:
        cluster_cmd.several(["ssh://a", "ssh://b"], flags)
    assert exc.value.field == "--fabric"
    assert exc.value.exit_code == 2
    assert exc.value.hint
    assert "--skip-kmod" in exc.value.hint


def test_the_cluster_run_itself_refuses_efa() -> None:
    options = clusterrun.ClusterOptions(fabric="efa")  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as exc:
        clusterrun.run_cluster([], options)
    assert exc.value.field == "--fabric"
    assert "aws-ofi-nccl" in exc.value.message
