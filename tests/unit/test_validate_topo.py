"""NIC↔GPU affinity from ``nvidia-smi topo -m`` (issue 32): the parser on real captures
(tests/data/validate/cluster/topo-*.txt, each naming its source), the PIX/PXB rule where GPUDirect RDMA is
declared, and the cluster step that reports it (not checked, with the reason, where nvidia-smi is absent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ParseError
from imagesmith.validate.clusterrun import Node, Ran, _affinity_promise
from imagesmith.validate.nics import TOPO_COMMAND, judge_affinity, parse_topo

DATA = Path(__file__).resolve().parents[1] / "data" / "validate" / "cluster"
LEGEND = (
    "\nLegend:\n\n  X    = Self\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n\nNIC Legend:\n\n"
)


def _text(name: str) -> str:
    return (DATA / name).read_text()


def _legend(n: int) -> str:
    return LEGEND + "".join(f"  NIC{k}: mlx5_{k}\n" for k in range(n))


def test_h100_each_gpu_has_a_pix_nic_and_passes() -> None:
    topo = parse_topo(_text("topo-h100-nccl1453.txt"))
    assert topo is not None
    assert topo.gpus == tuple(range(8))
    assert topo.nics == tuple(f"NIC{k}" for k in range(9))  # the quote has no NIC Legend
    assert [row.index("PIX") for row in topo.paths] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert judge_affinity("n1", topo) == []


def test_a_gpu_whose_pix_nic_is_gone_fails_naming_gpu_and_its_nearest_nic() -> None:
    text = _text("topo-h100-nccl1453.txt").replace("NODE\tPIX\t0-79", "NODE\tSYS\t0-79", 1)  # GPU0's NIC8
    topo = parse_topo(text + _legend(9))
    assert topo is not None
    (f,) = judge_affinity("n1", topo)
    assert (f.kind, f.subject) == ("nic far from gpu", "n1 GPU0")
    assert "nearest NIC mlx5_5 is NODE" in f.message


def test_old_driver_columns_name_the_devices_and_far_gpus_fail() -> None:
    topo = parse_topo(_text("topo-v100-mlx5-columns-nccltests29.txt"))
    assert topo is not None
    assert topo.nics == ("mlx5_0", "mlx5_1")
    found = [(f.subject, f.message.split(": ", 1)[1]) for f in judge_affinity("n2", topo)]
    near = "(PIX or PXB needed for GPUDirect RDMA)"
    assert found == [
        ("n2 GPU0", f"nearest NIC mlx5_0 is NODE {near}"),
        ("n2 GPU1", f"nearest NIC mlx5_0 is NODE {near}"),
    ] + [(f"n2 GPU{g}", f"nearest NIC mlx5_0 is SYS {near}") for g in (4, 5, 6, 7)]


def test_the_nic_legend_names_the_columns_and_one_it_lacks_is_an_error() -> None:
    rows = _text("topo-h100-nccl1453.txt")
    topo = parse_topo(rows + _legend(9))
    assert topo is not None
    assert topo.nics == tuple(f"mlx5_{k}" for k in range(9))
    with pytest.raises(ParseError) as exc:
        parse_topo(rows + _legend(8), source="n1 nvidia-smi topo -m")
    assert exc.value.field == "NIC Legend"
    assert "NIC8" in str(exc.value)


def test_a_capture_cut_inside_a_row_is_one_error_naming_the_cell() -> None:
    text = _text("topo-h20-roce-cut-deepep137.txt")  # the quote stops at GPU7's "NO"
    with pytest.raises(ParseError) as exc:
        parse_topo(text, source="n3 nvidia-smi topo -m")
    assert exc.value.field == "GPU7 NIC4"
    assert str(exc.value).startswith("n3 nvidia-smi topo -m: GPU7 to NIC4: 'NO'")
    short = "\n".join(ln for ln in text.splitlines() if not ln.startswith("GPU7"))
    short += "\nGPU7    NV18    NV18    NV18    NV18    NV18    NV18    NV18     X      SYS     SYS\n"
    with pytest.raises(ParseError) as exc:
        parse_topo(short)
    assert exc.value.field == "GPU7 row"


def test_h20_roce_gpus_without_a_nic_on_their_switch_fail() -> None:
    text = "\n".join(
        ln for ln in _text("topo-h20-roce-cut-deepep137.txt").splitlines() if not ln.startswith("GPU7")
    )
    topo = parse_topo(text)
    assert topo is not None
    assert [(f.subject, f.message.split("nearest NIC ")[1][:12]) for f in judge_affinity("n3", topo)] == [
        ("n3 GPU1", "NIC0 is NODE"),
        ("n3 GPU3", "NIC0 is NODE"),
        ("n3 GPU5", "NIC2 is NODE"),
    ]


def test_the_h200_capture_with_an_underlined_header_has_one_gpu_and_no_nic() -> None:
    topo = parse_topo(_text("topo-h200-one-gpu-no-nic.txt"))
    assert topo is not None
    assert (topo.gpus, topo.nics) == ((0,), ())
    assert [f.kind for f in judge_affinity("h200", topo)] == ["no nic in topology"]


@pytest.mark.parametrize("text", ["", "NVIDIA-SMI has failed\n", "GPU0 X\n"])
def test_no_matrix_header_is_an_error(text: str) -> None:
    with pytest.raises(ParseError) as exc:
        parse_topo(text)
    assert exc.value.field == "topo header"


class _Ssh:
    def __init__(self, outputs: dict[str, str]) -> None:
        self.outputs = outputs

    def run(self, node: Node, command: str, **_: Any) -> Ran:
        assert command == TOPO_COMMAND
        return Ran(rc=0, stdout=self.outputs[node.name], stderr="", timed_out=False)


def _nodes(*names: str) -> list[Node]:
    return [Node(name=n, target=f"ssh://{n}", user=None, host=n, port=None, address=n) for n in names]


def test_the_cluster_step_skips_a_node_without_nvidia_smi_and_never_passes_it() -> None:
    ssh: Any = _Ssh({"n1": "# no nvidia-smi\n", "n2": "# no nvidia-smi\n"})
    p = _affinity_promise(ssh, _nodes("n1", "n2"))
    assert (p.verdict, p.why) == (
        "not checked",
        "n1: no nvidia-smi on the node; n2: no nvidia-smi on the node",
    )
    ssh = _Ssh({"n1": _text("topo-h100-nccl1453.txt"), "n2": "# no nvidia-smi\n"})
    assert _affinity_promise(ssh, _nodes("n1", "n2")).verdict == "not checked"
    ssh = _Ssh({"n1": _text("topo-h100-nccl1453.txt"), "n2": _text("topo-v100-mlx5-columns-nccltests29.txt")})
    p = _affinity_promise(ssh, _nodes("n1", "n2"))
    assert p.verdict == "failed"
    assert {f.subject.split()[0] for f in p.failures} == {"n2"}


def test_the_cluster_step_names_the_host_of_a_cut_capture() -> None:
    ssh: Any = _Ssh({"n1": _text("topo-h100-nccl1453.txt"), "n2": _text("topo-h20-roce-cut-deepep137.txt")})
    with pytest.raises(ParseError) as exc:
        _affinity_promise(ssh, _nodes("n1", "n2"))
    assert (exc.value.host, exc.value.field) == ("n2", "GPU7 NIC4")
