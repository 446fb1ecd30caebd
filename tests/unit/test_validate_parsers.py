"""Parsers of GPU-host output, on real outputs captured on the lent 2×H200 machine
(tests/data/validate/h200x2) and on documented variants (8-GPU HGX with NICs, PCIe boxes, old nccl-tests),
plus broken inputs that must fail
loudly."""

from __future__ import annotations

import pytest

from imagesmith import nvsmi
from imagesmith.errors import ParseError
from imagesmith.validate.facts import BASE_FIELDS, parse_extra_csv
from imagesmith.validate.parsers import (
    format_bytes,
    parse_nccl_log,
    parse_size,
    parse_topo_matrix,
    parse_topo_p2p,
    strip_ansi,
)
from tests.repo import REPO

H200 = REPO / "tests" / "data" / "validate" / "h200x2"


def _read(name: str) -> str:
    return (H200 / name).read_text()


# --- topo -m ------------------------------------------------------------------------------------------------


def test_real_h200_topo_has_ansi_header_and_parses() -> None:
    text = _read("topo-m.txt")
    assert "\x1b[4m" in text  # nvidia-smi 580 underlines the header even into a file
    topo = parse_topo_matrix(text)
    assert topo.gpus == ("GPU0", "GPU1")
    assert topo.nics == ()
    assert topo.gpu_pairs() == [("GPU0", "GPU1", "NV18")]
    assert topo.cpu_affinity == {"GPU0": "0-31", "GPU1": "0-31"}
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "0"}
    assert topo.gpu_numa_id == {"GPU0": "N/A", "GPU1": "N/A"}


def test_real_single_h200_topo_and_p2p() -> None:
    """Captured on a lent 1×H200 machine: one GPU, no pair, GPU NUMA ID column."""
    one = REPO / "tests" / "data" / "validate" / "h200x1"
    topo = parse_topo_matrix((one / "topo-m.txt").read_text())
    assert topo.gpus == ("GPU0",)
    assert topo.gpu_pairs() == []
    assert topo.cpu_affinity == {"GPU0": "0-15"}
    assert topo.gpu_numa_id == {"GPU0": "N/A"}
    p2p = parse_topo_p2p((one / "topo-p2p-n.txt").read_text())
    assert p2p.not_ok() == []
    assert [g.name for g in nvsmi.parse_list((one / "nvidia-smi-L.txt").read_text()).gpus] == ["NVIDIA H200"]
    table = nvsmi.parse_table((one / "nvidia-smi.txt").read_text())
    assert (str(table.driver), table.cuda_version, len(table.gpus)) == ("580.159.04", "13.0", 1)
    q = nvsmi.parse_query_csv((one / "nvidia-smi-query.csv").read_text())
    assert [(g.index, g.name, g.memory_mib) for g in q.gpus] == [(0, "NVIDIA H200", 143771)]


def _hgx8() -> str:
    """8×H100 HGX layout (documented format: tab separated, NV18 for all GPU pairs, NICs, 2 NUMA nodes)."""
    devs = [f"GPU{i}" for i in range(8)] + ["NIC0", "NIC1"]
    head = "\t\x1b[4m" + "\t".join(devs) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"
    rows = []
    for i in range(8):
        cells = [" X " if j == i else "NV18" for j in range(8)]
        cells += ["PXB" if i < 4 else "SYS", "SYS" if i < 4 else "PXB"]
        aff, numa = ("0-55,112-167", "0") if i < 4 else ("56-111,168-223", "1")
        rows.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{aff}\t{numa}\t\tN/A")
    for k in range(2):
        cells = [("PXB" if (i < 4) == (k == 0) else "SYS") for i in range(8)]
        cells += [" X " if k == 0 else "SYS", "SYS" if k == 0 else " X "]
        rows.append(f"NIC{k}\t" + "\t".join(cells) + "\t\t\t")
    legend = (
        "\n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n\n"
        "NIC Legend:\n\n"
    )
    return head + "\n" + "\n".join(rows) + legend + "  NIC0: mlx5_0\n  NIC1: mlx5_1\n"


def test_hgx8_topology_with_nics_and_numa() -> None:
    topo = parse_topo_matrix(_hgx8())
    assert len(topo.gpus) == 8
    assert topo.nics == ("NIC0", "NIC1")
    assert len(topo.gpu_pairs()) == 28
    assert {link for _, _, link in topo.gpu_pairs()} == {"NV18"}
    assert topo.numa_affinity["GPU0"] == "0"
    assert topo.numa_affinity["GPU7"] == "1"
    assert topo.cpu_affinity["GPU5"] == "56-111,168-223"
    assert topo.links[("GPU0", "NIC0")] == "PXB"
    assert topo.links[("GPU7", "NIC0")] == "SYS"
    assert topo.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}


def test_pcie_box_topology() -> None:
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tPIX\tSYS\t0-15\t0\n"
        "GPU1\tPIX\t X \tSYS\t0-15\t0\n"
        "GPU2\tSYS\tSYS\t X \t16-31\t1\n"
    )
    topo = parse_topo_matrix(text)
    assert [link for _, _, link in topo.gpu_pairs()] == ["PIX", "SYS", "SYS"]
    assert topo.gpu_numa_id == {}


def test_topology_unknown_link_fails_naming_the_cell() -> None:
    text = strip_ansi(_read("topo-m.txt")).replace("NV18", "NVX", 1)
    with pytest.raises(ParseError, match="unknown link type 'NVX' between GPU0 and GPU1"):
        parse_topo_matrix(text)


def test_topology_that_disagrees_with_itself_fails_naming_both_cells() -> None:
    """The real 2×H200 matrix with GPU1's row garbled to SYS: before, only the upper half was read, so the
    host counted as NVLink (NV18) and its scaling was judged against the NVLink expectation."""
    lines = strip_ansi(_read("topo-m.txt")).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("GPU1\t"))
    lines[row] = lines[row].replace("NV18", "SYS", 1)
    with pytest.raises(
        ParseError, match="GPU0→GPU1 is 'NV18' but GPU1→GPU0 is 'SYS': the matrix is not symmetric"
    ):
        parse_topo_matrix("\n".join(lines))


def test_topology_nv0_is_not_an_nvlink() -> None:
    """NV# counts bonded NVLinks: NV0 is none, never printed by nvidia-smi; before, it passed as NVLink."""
    text = strip_ansi(_read("topo-m.txt")).replace("NV18", "NV0")
    with pytest.raises(ParseError, match="unknown link type 'NV0' between GPU0 and GPU1"):
        parse_topo_matrix(text)


def test_topology_truncated_fails() -> None:
    lines = strip_ansi(_read("topo-m.txt")).splitlines()
    with pytest.raises(ParseError, match="rows missing for GPU1"):
        parse_topo_matrix("\n".join(lines[:2]))


def test_topology_of_an_error_message_fails() -> None:
    with pytest.raises(ParseError, match="no header row"):
        parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


# --- topo -p2p ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["topo-p2p-n.txt", "topo-p2p-r.txt"])
def test_real_h200_p2p(name: str) -> None:
    p2p = parse_topo_p2p(_read(name))
    assert p2p.gpus == ("GPU0", "GPU1")
    assert p2p.status[("GPU0", "GPU1")] == "OK"
    assert p2p.not_ok() == []


def test_p2p_not_supported_is_reported() -> None:
    text = " \tGPU0\tGPU1\t\n GPU0\tX\tNS\t\n GPU1\tNS\tX\t\n\nLegend:\n"
    assert parse_topo_p2p(text).not_ok() == [("GPU0", "GPU1", "NS"), ("GPU1", "GPU0", "NS")]


def test_p2p_garbage_fails() -> None:
    with pytest.raises(ParseError, match="unknown P2P status 'maybe'"):
        parse_topo_p2p(" \tGPU0\tGPU1\t\n GPU0\tX\tmaybe\t\n GPU1\tOK\tX\t\n")


# --- nvidia-smi (the compat helper's parsers, on the same captures) ---------------------------------------


def test_real_h200_nvidia_smi_outputs() -> None:
    table = nvsmi.parse_table(_read("nvidia-smi.txt"))
    assert table.cuda_version == "13.0"
    assert str(table.driver) == "580.159.04"
    q = nvsmi.parse_query_csv(_read("nvidia-smi-query.csv"))
    assert [(g.index, g.name, g.memory_mib) for g in q.gpus] == [(0, "NVIDIA H200", 143771)] * 1 + [
        (1, "NVIDIA H200", 143771)
    ]
    lines = _read("nvidia-smi-query.csv").splitlines()[1:]
    extra = parse_extra_csv(
        "\n".join(",".join(ln.split(",")[len(BASE_FIELDS) :]) for ln in lines),
        (
            "compute_cap",
            "mig.mode.current",
            "ecc.mode.current",
            "ecc.errors.uncorrected.volatile.total",
            "power.limit",
            "power.default_limit",
            "power.max_limit",
        ),
        source="test",
    )
    assert extra[0]["mig.mode.current"] == "Disabled"
    assert extra[1]["power.default_limit"] == "700.00 W"


# --- nccl-tests ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("i", [1, 2, 3])
def test_real_h200_allreduce_logs(i: int) -> None:
    r = parse_nccl_log(_read(f"all_reduce_perf-{i}.log"))
    assert r.collective == "all_reduce_perf"
    assert r.tests_version == "2.19.6"
    assert r.nccl_library == r.nccl_headers == 22809
    assert r.n_gpus == 2
    assert r.devices == ("NVIDIA H200", "NVIDIA H200")
    assert len(r.rows) == 28
    assert r.rows[0].size == 8
    assert r.rows[-1].size == 1 << 30
    assert r.oob_ok
    assert r.oob_count == 0
    assert not r.wrong_rows()
    assert not r.warnings
    assert 300 < r.max_size_busbw < 400
    assert r.avg_busbw > 80


def test_truncated_log_fails_loudly() -> None:
    text = _read("all_reduce_perf-1.log")
    cut = text[: text.index("     1048576")]
    with pytest.raises(ParseError, match=r"footer .* is missing after 17 rows"):
        parse_nccl_log(cut)


def test_log_without_rows_fails() -> None:
    text = _read("all_reduce_perf-1.log")
    with pytest.raises(ParseError, match="no result rows"):
        parse_nccl_log(text[: text.index("           8 ")])


def test_corrupted_row_fails_with_line_number() -> None:
    lines = _read("all_reduce_perf-2.log").splitlines()
    idx = next(i for i, ln in enumerate(lines) if ln.strip().startswith("65536"))
    lines[idx] = lines[idx][:40]  # a row cut in the middle (disk full, interleaved write)
    with pytest.raises(ParseError, match=rf"line {idx + 1}: a data row has \d+ columns, expected 13"):
        parse_nccl_log("\n".join(lines))


def test_non_numeric_busbw_fails() -> None:
    lines = _read("all_reduce_perf-3.log").splitlines()
    idx = next(i for i, ln in enumerate(lines) if ln.strip().startswith("1048576 "))
    parts = lines[idx].split()
    parts[7] = "6x.04"
    lines[idx] = "  ".join(parts)
    text = "\n".join(lines)
    with pytest.raises(ParseError, match="not a number"):
        parse_nccl_log(text)


def test_wrong_results_oob_and_warnings_are_reported() -> None:
    lines = _read("all_reduce_perf-1.log").splitlines()
    idx = next(i for i, ln in enumerate(lines) if ln.strip().startswith("4096 "))
    parts = lines[idx].split()
    parts[8] = "3"
    lines[idx] = "  ".join(parts)
    lines.insert(
        idx, "vm:1875:1890 [0] misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-x"
    )
    text = "\n".join(lines).replace("# Out of bounds values : 0 OK", "# Out of bounds values : 2 FAILED")
    r = parse_nccl_log(text)
    assert [w.size for w in r.wrong_rows()] == [4096]
    assert not r.oob_ok
    assert r.oob_count == 2
    assert r.warnings
    assert "NCCL WARN" in r.warnings[0]


def test_aborted_run_fails() -> None:
    text = _read("all_reduce_perf-1.log").split("#       size")[0]
    text += "vm: Test NCCL failure common.cu:1279 'unhandled system error / '\n"
    with pytest.raises(ParseError, match=r"the test aborted: .*Test NCCL failure"):
        parse_nccl_log(text)


def test_old_nccl_tests_format_without_version_header() -> None:
    text = _read("all_reduce_perf-1.log")
    text = "\n".join(
        ln for ln in text.splitlines() if "nccl-tests version" not in ln and "Collective test" not in ln
    ).replace("[0000:00:06]", "[0x06]")
    r = parse_nccl_log(text)
    assert r.tests_version is None
    assert r.collective is None
    assert len(r.rows) == 28


def test_unchecked_run_has_na_wrong_columns() -> None:
    lines = _read("all_reduce_perf-1.log").splitlines()
    out = []
    for ln in lines:
        parts = ln.split()
        if len(parts) == 13 and parts[0].isdigit():
            parts[8] = parts[12] = "N/A"
            ln = "  ".join(parts)
        out.append(ln)
    r = parse_nccl_log("\n".join(out))
    assert r.rows[0].wrong_oop is None
    assert not r.wrong_rows()


# --- sizes --------------------------------------------------------------------------------------------------


def test_sizes() -> None:
    assert parse_size("64m") == 64 * 1024**2
    assert parse_size("8g") == parse_size("8GiB") == 8 * 1024**3
    assert parse_size("1073741824") == 1 << 30
    assert format_bytes(64 * 1024**2) == "64 MiB"
    assert format_bytes(140 * 1024**3) == "140 GiB"
    from imagesmith.errors import ConfigError

    with pytest.raises(ConfigError, match="'lots' is not a size"):
        parse_size("lots", what="--shm-min")
