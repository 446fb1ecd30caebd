"""imagesmith.nvsmi: nvidia-smi default table, --query-gpu CSV and -L. Captures in tests/data/nvsmi/."""

from __future__ import annotations

import pytest

from imagesmith import compat, nvsmi
from imagesmith.errors import ParseError
from tests.repo import REPO

NVSMI = REPO / "tests" / "data" / "nvsmi"


def read(name: str) -> str:
    return (NVSMI / name).read_text()


# ------------------------------------------------------------------------------------ garbage


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("garbage_driver_failed.txt", "nvidia-smi could not talk to the driver"),
        ("garbage_no_devices.txt", "nvidia-smi found no GPUs"),
        ("garbage_html.txt", "not nvidia-smi output"),
        ("garbage_truncated_table.txt", "no GPU table after the header"),
        ("garbage_bad_driver.txt", "'470.xx.01' is not a driver version"),
        ("query_noheader_nounits_h100.csv", "without its header line"),
    ],
)
def test_garbage_files_raise_parse_error_naming_the_source(name: str, message: str) -> None:
    with pytest.raises(ParseError) as err:
        nvsmi.parse(read(name), source=f"gpu-host-7:{name}")
    assert str(err.value).startswith(f"gpu-host-7:{name}: ")
    assert message in str(err.value)
    assert err.value.hint  # says what was expected


@pytest.mark.parametrize("text", ["", "   \n", "\x00\x01binary", "GPU 0 NVIDIA H200"])
def test_junk_text(text: str) -> None:
    with pytest.raises(ParseError, match="host-a"):
        nvsmi.parse(text, "host-a")


def test_table_with_a_mangled_gpu_row() -> None:
    text = read("r535_h100_sxm_x4.txt").replace(
        "|   0  NVIDIA H100 80GB HBM3", "|   X  NVIDIA H100 80GB HBM3"
    )
    with pytest.raises(ParseError, match="cannot read GPU row"):
        nvsmi.parse_table(text, "f.txt")


def test_table_with_junk_in_the_memory_cell() -> None:
    text = read("r535_h100_sxm_x4.txt").replace("4MiB / 81559MiB", "lots of MiB")
    with pytest.raises(ParseError, match="no memory usage"):
        nvsmi.parse_table(text, "f.txt")


def test_table_gpu_row_without_its_second_line() -> None:
    lines = read("real_580.159.04_h200_default.txt").splitlines()
    text = "\n".join(line for line in lines if "143771MiB" not in line and "Disabled" not in line)
    with pytest.raises(ParseError, match="line with temperature, power and memory is missing"):
        nvsmi.parse_table(text, "f.txt")


def test_mig_enabled_table_with_memory_na() -> None:
    # R535+ prints N/A in the memory cell of a GPU in MIG mode (seen in public captures)
    text = read("r570_a100_mig_enabled.txt").replace("      25MiB /  81920MiB ", "                  N/A   ")
    g = nvsmi.parse_table(text, "mig").gpus[0]
    assert (g.memory_mib, g.mig_mode) == (None, "Enabled")


def test_header_with_junk_cuda_version() -> None:
    text = read("r535_h100_sxm_x4.txt").replace("CUDA Version: 12.2", "CUDA Version: twelve")
    with pytest.raises(ParseError, match="'twelve' is not a CUDA version"):
        nvsmi.parse_table(text, "f.txt")


def test_csv_errors() -> None:
    with pytest.raises(ParseError, match="2 values for 3 fields"):
        nvsmi.parse_query_csv("index, name, memory.total [MiB]\n0, NVIDIA H200\n", "f.csv")
    with pytest.raises(ParseError, match=r"memory\.total 'lots'"):
        nvsmi.parse_query_csv("index, name, memory.total [MiB]\n0, NVIDIA H200, lots\n", "f.csv")
    with pytest.raises(ParseError, match="no GPU rows"):
        nvsmi.parse_query_csv("index, name\n", "f.csv")
    with pytest.raises(ParseError, match="disagree on the driver version"):
        nvsmi.parse_query_csv("name, driver_version\nNVIDIA H200, 580.65.06\nNVIDIA H200, 570.26\n", "f.csv")
    with pytest.raises(ParseError, match="field list has no 'name'"):
        nvsmi.parse_query_csv("0, 81920\n", "f.csv", fields=["index", "memory.total"])
    with pytest.raises(ParseError, match="compute_cap 'Hopper'"):
        nvsmi.parse_query_csv("name, compute_cap\nNVIDIA H200, Hopper\n", "f.csv")


def test_list_errors() -> None:
    with pytest.raises(ParseError, match="line 2: cannot read"):
        nvsmi.parse_list(
            "GPU 0: NVIDIA H200 (UUID: GPU-8f8ec75d-437d-b98b-303a-920620c683d9)\nhello\n", "l.txt"
        )


# ------------------------------------------------------------------------------------ formats


def test_real_h200_default_output() -> None:
    r = nvsmi.parse(read("real_580.159.04_h200_default.txt"), "h200")
    assert (r.format, str(r.driver), r.cuda_version) == ("table", "580.159.04", "13.0")
    assert len(r.gpus) == 1
    g = r.gpus[0]
    assert (g.index, g.name, g.memory_mib, g.bus_id, g.mig_mode, g.truncated) == (
        0,
        "NVIDIA H200",
        143771,
        "00000000:00:06.0",
        "Disabled",
        False,
    )
    assert compat.gpu(g.name, memory_mib=g.memory_mib).key == "h200"


def test_real_h200_query_csv_and_list() -> None:
    csv_report = nvsmi.parse(read("real_580.159.04_h200_query.csv"), "h200")
    assert (csv_report.format, str(csv_report.driver)) == ("csv", "580.159.04")
    g = csv_report.gpus[0]
    assert (g.name, g.memory_mib, g.compute_cap, g.bus_id, g.mig_mode) == (
        "NVIDIA H200",
        143771,
        "9.0",
        "00000000:00:06.0",
        "Disabled",
    )
    fields = [
        "index",
        "name",
        "pci.bus_id",
        "memory.total",
        "compute_cap",
        "driver_version",
        "mig.mode.current",
    ]
    raw = nvsmi.parse_query_csv(
        read("real_580.159.04_h200_query_noheader_nounits.csv"), "h200", fields=fields
    )
    assert raw.gpus == csv_report.gpus
    assert raw.driver == csv_report.driver
    listed = nvsmi.parse(read("real_580.159.04_h200_L.txt"), "h200")
    assert listed.format == "list"
    assert listed.driver is None
    assert listed.gpus[0].uuid == "GPU-8f8ec75d-437d-b98b-303a-920620c683d9"


def test_r470_narrow_table_truncated_names_and_memory() -> None:
    r = nvsmi.parse(read("r470_a100_sxm4_80gb_x8.txt"), "a100-host")
    assert (str(r.driver), r.cuda_version, len(r.gpus)) == ("470.82.01", "11.4", 8)
    assert [g.index for g in r.gpus] == list(range(8))
    assert all(g.name == "NVIDIA A100-SXM..." and g.truncated for g in r.gpus)
    assert r.gpus[7].bus_id == "00000000:BD:00.0"
    assert {compat.gpu(g.name, memory_mib=g.memory_mib).key for g in r.gpus} == {"a100-80gb-sxm4"}
    small = nvsmi.parse(read("r470_a100_sxm4_40gb_x2.txt"), "a100-40")
    assert {compat.gpu(g.name, memory_mib=g.memory_mib).key for g in small.gpus} == {"a100-40gb-sxm4"}


def test_r610_header_kmd_and_umd_versions() -> None:
    r = nvsmi.parse(read("r610_rtx5090_x2.txt"), "r610")
    assert (str(r.driver), r.cuda_version) == ("610.43.02", "13.3")
    assert [g.name for g in r.gpus] == ["NVIDIA GeForce RTX 5090"] * 2
    assert r.gpus[1].memory_mib == 32607
    assert r.gpus[0].mig_mode is None  # consumer cards show N/A


def test_mixed_models_and_mig_enabled() -> None:
    mixed = nvsmi.parse(read("r550_rtx4090_x2_rtx3090.txt"), "mixed")
    assert [g.name for g in mixed.gpus] == ["NVIDIA GeForce RTX 4090"] * 2 + ["NVIDIA GeForce RTX 3090"]
    assert [g.memory_mib for g in mixed.gpus] == [24564, 24564, 24576]
    mig = nvsmi.parse(read("r570_a100_mig_enabled.txt"), "mig")
    assert mig.gpus[0].mig_mode == "Enabled"
    assert nvsmi.parse(read("r535_h100_sxm_x4.txt"), "h100").gpus[3].bus_id == "00000000:5D:00.0"


def test_query_csv_with_units_and_list_with_mig_devices() -> None:
    r = nvsmi.parse(read("query_header_a100.csv"), "q")
    assert (str(r.driver), [g.memory_mib for g in r.gpus]) == ("580.105.08", [81920] * 4)
    listed = nvsmi.parse(read("list_a100_mig.txt"), "l")
    assert listed.gpus[0].mig_devices == ("3g.40gb", "3g.40gb")
    assert listed.gpus[0].mig_mode == "Enabled"
    assert listed.gpus[1].mig_devices == ()
    assert listed.gpus[1].mig_mode is None


def test_csv_missing_values_become_none() -> None:
    r = nvsmi.parse_query_csv("index, name, mig.mode.current\n0, NVIDIA GeForce RTX 4090, [N/A]\n", "q")
    assert r.gpus[0].mig_mode is None
    assert r.driver is None


def test_header_with_cuda_na() -> None:
    text = read("r535_h100_sxm_x4.txt").replace("CUDA Version: 12.2", "CUDA Version: N/A ")
    assert nvsmi.parse_table(text, "f").cuda_version is None


def test_crlf_bom_and_ansi_escapes_are_tolerated() -> None:
    plain = read("real_580.159.04_h200_default.txt")
    noisy = "\ufeff" + plain.replace("NVIDIA-SMI 580", "\x1b[4mNVIDIA-SMI 580").replace("\n", "\r\n")
    assert nvsmi.parse(noisy, "h200").gpus == nvsmi.parse(plain, "h200").gpus
    csv_text = read("real_580.159.04_h200_query.csv").replace("\n", "\r\n")
    assert nvsmi.parse(csv_text, "h200").gpus[0].memory_mib == 143771


def test_wide_table_truncated_name_and_windows_driver_model() -> None:
    r = nvsmi.parse(read("r580_rtx_pro_6000_truncated.txt"), "pro6000")
    g = r.gpus[0]
    assert (g.name, g.truncated, g.memory_mib) == ("NVIDIA RTX PRO 6000 Blac...", True, 97887)
    assert compat.gpu(g.name, memory_mib=g.memory_mib).family == "rtx-pro-6000"
    windows = read("r580_rtx_pro_6000_truncated.txt").replace("Blac...    On  |", "Blac...  WDDM  |")
    assert nvsmi.parse_table(windows, "win").gpus[0].name == "NVIDIA RTX PRO 6000 Blac..."
