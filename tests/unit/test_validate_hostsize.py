"""Host sizing and storage (issue 33), replayed: the vCPUs and RAM a container gets (cgroup v2 and v1 limits
below the host's totals), the usual-advice warnings, the NICs, and fio's JSON and dd's lines as recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesmith.validate.hostsize import judge_host, parse_host, parse_nics
from imagesmith.validate.storage import parse_fio_json, parse_storage
from tests.repo import REPO

DATA = REPO / "tests" / "data" / "storage"

#: the lent 1×H200 host (docs/evidence/h200x1-soak): 16 vCPUs, 125 GiB, no swap, a scope without limits
H200_HOST = """# nproc
16
# meminfo
MemTotal:       131513532 kB
SwapTotal:             0 kB
# cgroup /system.slice/run-u7.scope
memory.max max
memory.swap.max max
# cgroup /system.slice
cpu.max max 100000
memory.max max
# cgroup /
"""

#: a container given 4 CPUs and 32 GiB of a 64-core, 2 TB host (docker run --cpus 4 --memory 32g)
CONTAINER_V2 = """# nproc
64
# meminfo
MemTotal:       2113510400 kB
SwapTotal:       8388604 kB
# cgroup /
cpu.max 400000 100000
memory.max 34359738368
memory.swap.max 0
"""

CONTAINER_V1 = """# nproc
64
# meminfo
MemTotal:       2113510400 kB
SwapTotal:             0 kB
# v1 cpu.cfs_quota_us 200000
# v1 cpu.cfs_period_us 100000
# v1 memory.limit_in_bytes 17179869184
"""


def test_h200_host_warns_ram_below_twice_gpu_memory() -> None:
    size = judge_host(parse_host(H200_HOST), gpus=1, gpu_memory_mib=143771)
    assert size.vcpu == 16
    assert size.ram == 131513532 * 1024
    assert size.figures["ram_per_gpu_memory"] == pytest.approx(0.89, abs=0.01)
    assert size.figures["vcpu_per_gpu"] == 16
    (warning,) = size.warnings
    assert "0.89× the GPUs' 140.4 GiB" in warning
    assert "2×" in warning


def test_the_recorded_h200_host() -> None:
    """The lent H200 as the suite saw it (docs/evidence/h200x1-listing/healthy/host-size.txt): cgroup v2,
    memory.max 128 GiB two levels up, above MemTotal 125.8 GiB — MemTotal is what the container gets."""
    cap = parse_host((REPO / "tests" / "data" / "h200-listing" / "host-size.txt").read_text())
    assert cap.cgroup == "v2"
    assert cap.memory_max == 128 * 2**30
    assert cap.memory_max_at == "/process_api"
    size = judge_host(cap, gpus=1, gpu_memory_mib=143771)
    assert size.vcpu == 16
    assert size.ram == 131961788 * 1024
    assert size.ram_basis == "MemTotal; the cgroup's memory.max (128.0 GiB at /process_api) is above it"
    assert size.figures["ram_per_gpu_memory"] == pytest.approx(0.90, abs=0.01)


def test_the_recorded_h200_data_folder_without_fio() -> None:
    fig = parse_storage(
        "/var/tmp/imagesmith-data", (REPO / "tests/data/h200-listing/storage-data-dd.txt").read_text()
    )
    assert not fig.fio
    assert fig.write_bps == pytest.approx(2**30 / 0.847136)
    assert fig.read_bps == pytest.approx(2**30 / 0.933166)
    assert fig.free_bytes == 68495986688


def test_container_limits_win_over_the_host_totals_v2() -> None:
    cap = parse_host(CONTAINER_V2)
    size = judge_host(cap, gpus=8, gpu_memory_mib=8 * 81559)
    assert size.vcpu == 4
    assert "cpu.max quota of 4 CPUs" in size.vcpu_basis
    assert "nproc 64" in size.vcpu_basis
    assert size.ram == 32 * 2**30
    assert "memory.max" in size.ram_basis
    assert cap.swap_max == 0
    assert cap.swap_total == 8388604 * 1024
    texts = " ".join(size.warnings)
    assert "0.5 per GPU" in texts
    assert "below the usual advice of 8 per GPU" in texts
    assert "swap of 8.0 GiB is on" in texts


def test_container_limits_v1() -> None:
    size = judge_host(parse_host(CONTAINER_V1), gpus=1, gpu_memory_mib=46068)
    assert size.vcpu == 2
    assert size.ram == 16 * 2**30
    assert size.ram_basis.startswith("cgroup memory.max at cgroup v1")


def test_the_smallest_limit_of_the_cgroup_path_counts() -> None:
    text = (
        "# nproc\n32\n# meminfo\nMemTotal: 100 kB\n# cgroup /a/b\ncpu.max 800000 100000\n"
        "# cgroup /a\ncpu.max 200000 100000\n"
    )
    size = judge_host(parse_host(text), gpus=1, gpu_memory_mib=1)
    assert size.vcpu == 2
    assert "at /a" in size.vcpu_basis


def test_nothing_readable_is_unknown_not_zero() -> None:
    size = judge_host(parse_host("sh: nproc: not found\n"), gpus=1, gpu_memory_mib=143771)
    assert size.vcpu is None
    assert size.ram is None
    assert any("unknown" in w for w in size.warnings)


def test_nics_and_fabrics() -> None:
    nics = parse_nics(
        "net eth0 25000\nnet ens1 -1\nrdma InfiniBand 400 Gb/sec (4X NDR)\n"
        "rdma Ethernet 200 Gb/sec (4X HDR)\n"
    )
    assert nics.rate == pytest.approx(50e9)
    assert "InfiniBand" in nics.basis
    assert nics.fabrics == ["ethernet", "infiniband", "roce"]
    assert parse_nics("").rate is None


def test_recorded_fio_json_and_dd() -> None:
    fig = parse_storage("/data", (DATA / "fio-3.33-dd.txt").read_text())
    assert fig.fio
    assert fig.tool == "fio"
    assert not fig.problems
    assert fig.read_bps == 734485448
    assert fig.write_bps == 983157941
    assert fig.randread_iops == pytest.approx(17303.5, abs=0.1)
    assert fig.randread_p99_ms == pytest.approx(11.08, abs=0.01)
    assert fig.checkpoint_bytes == 2**30
    assert fig.checkpoint_write_s == 1.259
    assert fig.checkpoint_read_s == 1.73084
    assert fig.free_bytes == 75726249984


def test_without_fio_dd_gives_the_sequential_figures() -> None:
    fig = parse_storage("/dev/shm", (DATA / "nofio-shm-direct.txt").read_text())
    assert not fig.fio
    assert "fio is not on this host" in fig.tool
    assert fig.write_bps == pytest.approx(268435456 / 3.1408)
    assert fig.read_bps == pytest.approx(268435456 / 0.250427)
    assert fig.randread_iops is None


def test_dd_retried_without_direct_io_counts_the_retry() -> None:
    text = (
        "# imagesmith-storage df\n100 200\n# imagesmith-storage no-fio\n# imagesmith-storage dd-write\n"
        "dd: failed to open '/x/ckpt': Invalid argument\n# imagesmith-storage dd-write\n1024+0 records in\n"
        "1024+0 records out\n1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2 s, 537 MB/s\n"
        "# imagesmith-storage dd-read\ndd: error reading '/x/ckpt': Input/output error\n"
    )
    fig = parse_storage("/x", text)
    assert fig.write_bps == pytest.approx(2**30 / 2)
    assert fig.read_bps is None
    assert fig.problems == ["dd-read: dd: error reading '/x/ckpt': Input/output error"]


def test_fio_noise_before_json_and_garbage() -> None:
    jobs = parse_fio_json(
        "fio: note: both iodepth >= 1 and synchronous I/O engine\n"
        '{"jobs": [{"jobname": "seqread", "read": {"bw": 1000, "iops": 1.0}}]}'
    )
    assert jobs["seqread"]["bw"] == 1024000
    assert jobs["seqread"]["p99_ms"] is None
    fig = parse_storage("/d", "# imagesmith-storage fio\nfio: command not found\n")
    assert fig.problems
    assert fig.problems[0].startswith("fio: fio printed no JSON")


def test_a_nearly_full_folder_is_not_filled() -> None:
    text = (
        "# imagesmith-storage df\n40000000 1000000000\n# imagesmith-storage size\n12\n"
        "# imagesmith-storage no-space\n"
    )
    fig = parse_storage("/full", text)
    assert fig.size_mib == 12
    assert fig.read_bps is None
    assert fig.problems == [
        "less than 48 MiB free: not measured (the measurement uses at most a third of the free space)"
    ]


def test_the_measurement_uses_at_most_a_third_of_the_free_space(tmp_path: Path) -> None:
    """The command itself, on a folder of this machine, with a size far above its free space: the size it
    prints is a third of what df says is free (dd then writes that much; fio is not needed for this)."""
    import subprocess

    from imagesmith.validate.storage import storage_command

    script = storage_command(str(tmp_path), checkpoint_mib=64 * 2**30).split("mkdir -p", 1)[0] + "true"
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, check=True).stdout
    avail_mib = int(out.split("# imagesmith-storage df\n", 1)[1].split()[0]) // 2**20
    size = int(out.split("# imagesmith-storage size\n", 1)[1].split()[0])
    assert abs(size - avail_mib // 3) <= avail_mib // 100 + 1
