"""Degraded GPU hosts through the real suite: ``imagesmith validate local://`` with a fake ``nvidia-smi`` (and
``dmesg``) on PATH that replays the real 2×H200 capture with one fault injected. This machine has no GPU, so
the faults a real host cannot be made to show are injected here; every check that reads nvidia-smi runs for
real (testinfra's local backend, the child pytest, report.json/report.md).

Each fault must fail a named check with what is wrong (the GPU / field) and a fix, exit 7, and never leave a
"passed" verdict, a traceback or a report that disagrees with the exit code.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.repo import REPO

DATA = REPO / "tests" / "data" / "validate"
H200 = DATA / "h200x2"
FAULTS = DATA / "faults"
#: the checks that need nvidia-smi only (torch is not installed here)
GPU_CHECKS = "gpu_inventory or ecc or mig or power or topology or health or xid or nvlink"

#: POSIX sh and awk, no Python: one suite run calls it ~15 times, and a Python start-up (~20 ms of CPU each,
#: even with ``-S``) was a third of this file's CPU time (docs/benchmarks.md, "Unit suite wall time")
FAKE_SMI = r"""#!/bin/sh
# fake nvidia-smi: replays files of @DIR@ (see test_validate_host_faults.py)
D='@DIR@'
out() {
    p="$D/$1"
    if [ -e "$p.rc" ] && [ -e "$p.only-rc" ]; then exit "$(cat "$p.rc")"; fi
    if [ -e "$p" ]; then cat "$p"; fi
    if [ -e "$p.rc" ]; then exit "$(cat "$p.rc")"; fi
    exit 0
}
if [ $# -eq 0 ]; then out default; fi
if [ $# -eq 1 ] && [ "$1" = -L ]; then out L; fi
case $1 in
--query-gpu=*)
    if [ -e "$D/query.raw" ]; then out query.raw; fi
    # the query file is nvidia-smi's CSV with units ("index, name, memory.total [MiB], ..."): print the
    # asked fields in the asked order, without the MiB/W units (nounits), as nvidia-smi does
    exec awk -v want="${1#--query-gpu=}" '
        function cell(i,  v) { v = $i; sub(/^ +/, "", v); return v }
        BEGIN { FS = ","; n = split(want, fields, ",") }
        NR == 1 {
            for (i = 1; i <= NF; i++) {
                h = cell(i); sub(/[ \t]*\[.*\]$/, "", h)
                if (!(h in col)) col[h] = i
            }
            for (j = 1; j <= n; j++) if (!(fields[j] in col)) {
                printf "Field \"%s\" is not a valid field to query.\n", fields[j] > "/dev/stderr"
                exit 2
            }
            next
        }
        NF == 0 { print "fake nvidia-smi: a blank line in " FILENAME > "/dev/stderr"; exit 1 }
        NF == 1 { print cell(1); next }  # an error line nvidia-smi prints among the rows
        {
            line = ""
            for (j = 1; j <= n; j++) {
                if (col[fields[j]] > NF) { print "fake nvidia-smi: a short row: " $0 > "/dev/stderr"; exit 1 }
                v = cell(col[fields[j]]); sub(/ (MiB|W)$/, "", v)
                line = line (j > 1 ? ", " : "") v
            }
            print line
        }' "$D/query"
    ;;
esac
key=
first=1
for a in "$@"; do
    while [ "${a#-}" != "$a" ]; do a=${a#-}; done
    if [ -n "$first" ]; then key=$a; first=; else key="$key-$a"; fi
done
out "$key"
"""

FAKE_DMESG = """#!/bin/sh
if [ -f "@DIR@/dmesg.denied" ]; then
  echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1
fi
cat "@DIR@/dmesg"
"""

NVLINK_UP = "".join(
    f"GPU {i}: NVIDIA H200 (UUID: GPU-{i})\n" + "".join(f"\t Link {n}: 26.562 GB/s\n" for n in range(18))
    for i in range(2)
)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A healthy 2×H200 host as the real capture shows it; tests edit its files to inject one fault."""
    d = tmp_path / "host"
    d.mkdir()
    shutil.copy(H200 / "nvidia-smi.txt", d / "default")
    shutil.copy(H200 / "nvidia-smi-L.txt", d / "L")
    shutil.copy(H200 / "topo-m.txt", d / "topo-m")
    shutil.copy(H200 / "topo-p2p-n.txt", d / "topo-p2p-n")
    shutil.copy(FAULTS / "h200x2-query-health.csv", d / "query")
    (d / "nvlink-s").write_text(NVLINK_UP)
    (d / "dmesg").write_text("[    0.457042] NVRM: loading NVIDIA UNIX Open Kernel Module  580.159.04\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", FAKE_SMI), ("dmesg", FAKE_DMESG)):
        script = bin_dir / name
        script.write_text(text.replace("@DIR@", str(d)))
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    return d


def validate(
    run_cli: Callable[..., Any], tmp_path: Path, select: str = GPU_CHECKS
) -> tuple[Any, dict[str, Any]]:
    report = tmp_path / "report"
    r = run_cli("validate", "local://", "-k", select, "--report", str(report))
    data = json.loads((report / "report.json").read_text())
    md = (report / "report.md").read_text()
    # the report agrees with the exit code, and no check died of a bug of its own
    assert r.exit_code == (0 if data["verdict"] == "passed" else 7), r.stderr
    assert md.startswith(f"# Validation: {data['verdict'].upper()}")
    for c in data["checks"]:
        assert "Traceback" not in c["message"], c
        assert "failure of the check itself" not in c["fix"], c
        if c["status"] == "failed":
            assert c["fix"], c
            assert c["message"] in md
            assert c["fix"] in md
    return r, {c["name"]: c for c in data["checks"]} | {"_report": data}


def statuses(checks: dict[str, Any]) -> dict[str, str]:
    return {k: v["status"] for k, v in checks.items() if not k.startswith("_")}


def test_healthy_capture_passes_every_gpu_check(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    """The control: the real capture fails nothing (the verdict is "not validated" only because -k ran a
    subset)."""
    r, checks = validate(run_cli, tmp_path)
    assert set(statuses(checks).values()) == {"passed"}, statuses(checks)
    assert checks["_report"]["verdict"] == "not validated"
    assert "run it without -k" in r.stderr
    assert "run it without -k" in (tmp_path / "report" / "report.md").read_text()


def test_real_one_gpu_host_passes_and_skips_the_pair_checks(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    """The lent 1×H200 host as it answered (nvlink -s prints nothing, the kernel log has no Xid): every GPU
    check passes; the NCCL check skips for want of a second GPU although this host has no all_reduce_perf
    and no torch (it failed on the missing binary before)."""
    one = DATA / "h200x1"
    shutil.copy(one / "nvidia-smi.txt", host / "default")
    shutil.copy(one / "nvidia-smi-L.txt", host / "L")
    shutil.copy(one / "topo-m.txt", host / "topo-m")
    shutil.copy(FAULTS / "h200x1-query-health.csv", host / "query")
    shutil.copy(one / "nvlink-s.txt", host / "nvlink-s")
    shutil.copy(one / "dmesg-nvrm.txt", host / "dmesg")
    _, checks = validate(run_cli, tmp_path, GPU_CHECKS + " or nccl_allreduce")
    got = statuses(checks)
    assert got.pop("test_nccl_allreduce") == "skipped"
    assert checks["test_nccl_allreduce"]["message"] == "needs at least 2 GPUs; this target has 1"
    assert set(got.values()) == {"passed"}, got


def failed(checks: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in checks.items() if not k.startswith("_") and v["status"] == "failed"}


def test_hung_nvidia_smi_fails_not_no_gpu(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    """`timeout` kills a hung nvidia-smi with exit 124: a stuck driver, never "no GPU visible"."""
    (host / "default.rc").write_text("124")
    (host / "default").write_text("")
    _, checks = validate(run_cli, tmp_path)
    bad = failed(checks)
    assert "test_gpu_inventory" in bad
    assert "did not answer within 60 s" in bad["test_gpu_inventory"]["message"]
    assert "reset or a reboot" in bad["test_gpu_inventory"]["fix"]
    assert checks["_report"]["verdict"] == "failed"


@pytest.mark.parametrize(
    ("output", "rc", "words", "fix"),
    [
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
            "the latest NVIDIA driver is installed and running.\n",
            9,
            "could not talk to the driver",
            "no working NVIDIA driver",
        ),
        ("Failed to initialize NVML: Driver/library version mismatch\n", 18, "version mismatch", "reboot"),
        ("Failed to initialize NVML: Unknown Error\n", 255, "NVML: Unknown Error", "restart the container"),
        ("Segmentation fault\n", 139, "nvidia-smi failed (exit 139): Segmentation fault", "broken"),
        ("", 0, "nvidia-smi printed nothing", "broken"),
        ("\x00\x01 ### not a table\n", 0, "no header line", "broken"),
    ],
)
def test_failing_nvidia_smi_is_a_broken_host(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path, output: str, rc: int, words: str, fix: str
) -> None:
    (host / "default").write_text(output)
    (host / "default.rc").write_text(str(rc))
    _, checks = validate(run_cli, tmp_path)
    inv = checks["test_gpu_inventory"]
    assert inv["status"] == "failed", inv
    assert words in inv["message"], inv
    assert fix in inv["fix"], inv
    assert checks["_report"]["verdict"] == "failed"


def test_non_utf8_output_is_read_not_a_crash(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    """Bytes that are not UTF-8 (a corrupted terminal, a latin-1 locale) before the table: it is read."""
    (host / "default").write_bytes(b"\xff\xfe\x80 noise\n" + (H200 / "nvidia-smi.txt").read_bytes())
    _, checks = validate(run_cli, tmp_path)
    assert set(statuses(checks).values()) == {"passed"}, statuses(checks)
    (host / "query.raw").write_bytes(b"0, NVIDIA H200\xff, GPU-1, 00000000:00:06.0, 580.159.04\n")
    _, checks = validate(run_cli, tmp_path)
    inv = checks["test_gpu_inventory"]
    assert inv["status"] == "failed", inv
    assert "5 values for 6 fields" in inv["message"], inv


def test_lost_gpu_is_named_with_its_address(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    """nvidia-smi prints an error line for a GPU that fell off the bus and rows for the others."""
    query = (host / "query").read_text()
    (host / "query").write_text(
        query + "Unable to determine the device handle for GPU 0000:00:08.0: Unknown Error\n"
    )
    _, checks = validate(run_cli, tmp_path)
    inv = checks["test_gpu_inventory"]
    assert inv["status"] == "failed"
    assert "cannot reach the GPU at 0000:00:08.0 (Unknown Error)" in inv["message"]
    assert "fallen off the bus" in inv["fix"]
    assert (tmp_path / "report" / "nvidia-smi-query.csv").is_file()  # the fix points at it


def test_truncated_or_empty_query_fails_with_the_log_saved(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    (host / "query.raw").write_text("0, NVIDIA H200, GPU-9bcd1a27, 00000000:00:06.0, 580.15")
    _, checks = validate(run_cli, tmp_path)
    inv = checks["test_gpu_inventory"]
    assert inv["status"] == "failed"
    assert "5 values for 6 fields" in inv["message"]
    assert "580.15" in (tmp_path / "report" / "nvidia-smi-query.csv").read_text()


def test_table_and_query_disagree_on_the_gpu_count(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    table = (H200 / "nvidia-smi.txt").read_text()
    (host / "default").write_text(table[: table.index("|   1  NVIDIA H200")])
    _, checks = validate(run_cli, tmp_path)
    assert "table shows 1 GPU(s) but its --query-gpu lists 2" in checks["test_gpu_inventory"]["message"]


def test_ecc_error_names_the_gpu(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    q = (host / "query").read_text()
    (host / "query").write_text(q.replace("Enabled, 0, 700", "Enabled, 3, 700", 1))
    _, checks = validate(run_cli, tmp_path)
    assert statuses(failed(checks)) == {"test_ecc_errors": "failed"}
    assert "GPU 0: 3" in checks["test_ecc_errors"]["message"]


def test_idle_hardware_slowdown_fails(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    q = (host / "query").read_text().splitlines()
    q[2] = q[2].removesuffix("Not Active, Not Active, Not Active") + "Not Active, Active, Not Active"
    (host / "query").write_text("\n".join(q) + "\n")
    _, checks = validate(run_cli, tmp_path)
    assert statuses(failed(checks)) == {"test_gpu_health": "failed"}
    msg = checks["test_gpu_health"]["message"]
    assert "GPU 1 (NVIDIA H200, 00000000:00:07.0): hardware thermal slowdown" in msg
    assert "cooling" in checks["test_gpu_health"]["fix"]


def test_persistence_mode_off_is_a_warning(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    q = (host / "query").read_text()
    (host / "query").write_text(q.replace("No, No, Enabled", "No, No, Disabled"))
    _, checks = validate(run_cli, tmp_path)
    health = checks["test_gpu_health"]
    assert health["status"] == "passed"
    assert any("persistence mode is off on GPU 0, 1" in w for w in health["warnings"])
    assert "nvidia-persistenced" in " ".join(checks["_report"]["warnings"])


def test_xid_errors_in_the_kernel_log(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    shutil.copy(FAULTS / "xid-dmesg.txt", host / "dmesg")
    _, checks = validate(run_cli, tmp_path)
    xid = checks["test_kernel_xid"]
    assert xid["status"] == "failed"
    assert "GPU 1 (0000:00:07): Xid 79 (GPU has fallen off the bus)" in xid["message"]
    assert "PCI 0000:3b:00 (not one of the GPUs nvidia-smi lists): Xid 48" in xid["message"]
    assert "Xid 13" not in xid["message"]
    assert "NVSwitch 0000:c1:00: SXid 20034 (fatal NVSwitch error)" in xid["message"]
    assert any("NVSwitch 0000:05:00: SXid 12028 (non-fatal NVSwitch error)" in w for w in xid["warnings"])
    assert any("GPU 0 (0000:00:06): Xid 13" in w for w in xid["warnings"])
    assert "Xid (PCI:0000:00:07): 79" in (tmp_path / "report" / "kernel-xid.txt").read_text()


def test_unreadable_kernel_log_is_a_named_skip(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    (host / "dmesg.denied").write_text("")
    _, checks = validate(run_cli, tmp_path)
    xid = checks["test_kernel_xid"]
    assert xid["status"] == "skipped"
    assert "Operation not permitted" in xid["message"]
    assert "on the host itself" in xid["message"]


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (
            NVLINK_UP.replace("Link 3: 26.562 GB/s", "Link 3: <inactive>", 1),
            "GPU 0 (NVIDIA H200): link 3 inactive, 17 up",
        ),
        (
            NVLINK_UP.split("GPU 1")[0]
            + "GPU 1: NVIDIA H200 (UUID: GPU-1)\n"
            + "".join(f"\t Link {n}: <inactive>\n" for n in range(18)),
            "GPU 1 (NVIDIA H200): all 18 NVLinks inactive",
        ),
    ],
)
def test_nvlinks_down(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path, status: str, words: str
) -> None:
    (host / "nvlink-s").write_text(status)
    _, checks = validate(run_cli, tmp_path)
    assert statuses(failed(checks)) == {"test_nvlink_links": "failed"}
    assert words in checks["test_nvlink_links"]["message"]
    assert "reset the GPUs" in checks["test_nvlink_links"]["fix"]


def test_expect_count_with_a_gpu_missing(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    """Fewer GPUs than the host was sold with: --expect-count names both counts."""
    report = tmp_path / "report"
    r = run_cli("validate", "local://", "-k", GPU_CHECKS, "--expect-count", "8", "--report", str(report))
    assert r.exit_code == 7
    checks = {c["name"]: c for c in json.loads((report / "report.json").read_text())["checks"]}
    assert "expected 8 GPUs, nvidia-smi shows 2" in checks["test_gpu_inventory"]["message"]


# ------------------------------------------------------------------------------------------------------------
# the parsers and judgements behind them


@pytest.mark.parametrize("value", ["nan", "-nan", "inf", "-1.00"])
def test_nccl_log_with_a_bandwidth_that_is_not_a_figure_fails(value: str) -> None:
    """nccl-tests prints nan/inf when a timing broke: never a figure a floor can pass (NaN < x is False)."""
    from imagesmith.errors import ParseError
    from imagesmith.validate.parsers import parse_nccl_log

    log = (H200 / "all_reduce_perf-1.log").read_text()
    row = next(ln for ln in log.splitlines() if ln.strip().startswith("1073741824"))
    parts = row.split()
    parts[7] = value  # out-of-place busbw
    bad = "  ".join(parts)
    with pytest.raises(ParseError, match=f"busbw is '{value}', not a measured figure"):
        parse_nccl_log(log.replace(row, bad), source="nccl-allreduce-1.log")


def test_a_figure_that_is_not_a_number_fails_its_judgement() -> None:
    import math

    from imagesmith.validate.expected import Bands, Expected, judge

    for expected in (Expected(value=4258.0, kind="baseline", source="perf.toml"), None):
        j = judge("hbm_copy_gbps", "GPU 0 (NVIDIA H200)", math.nan, expected, Bands())
        assert j.verdict == "fail"
        assert j.to_json()["measured"] is None
        assert "not a measured figure" in j.sentence()
        json.dumps(j.to_json(), allow_nan=False)


def test_compat_names_a_lost_gpu(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    smi = tmp_path / "smi.csv"
    smi.write_text(
        "index, name, driver_version, memory.total [MiB]\n0, NVIDIA H100 PCIe, 550.54.15, 81559 MiB\n"
        "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error\n"
    )
    r = run_cli("compat", "--nvidia-smi", str(smi), "--torch", "2.4.1", "--cuda", "12.1")
    assert r.exit_code == 7
    assert "nvidia-smi cannot reach the GPU at 0000:3B:00.0 (Unknown Error)" in r.stderr
    assert "fallen off the bus" in r.stderr


def test_nvlink_status_parser() -> None:
    from imagesmith.errors import ParseError
    from imagesmith.validate.parsers import parse_nvlink_status

    assert parse_nvlink_status("") == []  # the lent 1×H200 prints nothing (rc 0)
    head, gpu1 = NVLINK_UP.split("GPU 1")
    states = parse_nvlink_status(head + "GPU 1" + gpu1.replace("Link 17: 26.562 GB/s", "Link 17: <inactive>"))
    assert [(s.index, len(s.active), s.inactive) for s in states] == [(0, 18, ()), (1, 17, (17,))]
    with pytest.raises(ParseError, match="neither a GPU nor a link line"):
        parse_nvlink_status("\x00garbage\n")


# ------------------------------------------------------------------------------------------------------------
# torch-side faults: a fake target Python (--python) prints what a probe printed on the 2×H200 host, or
# what it prints on a degraded one, so the checks that judge probe output run for real

FAKE_PY = """#!/bin/sh
# fake target python: prints @DIR@/<probe>.probe and exits with <probe>.rc (default 0)
p=$(basename "$1" .py)
[ -f "@DIR@/$p.probe" ] && cat "@DIR@/$p.probe"
[ -f "@DIR@/$p.rc" ] && exit "$(cat "@DIR@/$p.rc")"
exit 0
"""
PERF_CHECKS = "memory_bandwidth or matmul_throughput or host_device or clocks_under_load"
PROBE = "IMAGESMITH_PROBE "


def healthy_perf() -> dict[str, Any]:
    """The perf probe's output on the lent 2×H200 host (tests/data/validate/perf/h200x2-healthy.probe)."""
    text = (DATA / "perf" / "h200x2-healthy.probe").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(PROBE))
    data: dict[str, Any] = json.loads(line.removeprefix(PROBE))
    return data


def with_python(host: Path, probe: str, output: str, rc: int = 0) -> str:
    script = host.parent / "bin" / "python-fake"
    script.write_text(FAKE_PY.replace("@DIR@", str(host)))
    script.chmod(0o755)
    (host / f"{probe}.probe").write_text(output)
    (host / f"{probe}.rc").write_text(str(rc))
    return str(script)


def run_with(
    run_cli: Callable[..., Any], tmp_path: Path, python: str, select: str, *extra: str
) -> dict[str, Any]:
    report = tmp_path / "report"
    r = run_cli("validate", "local://", "-k", select, "--python", python, "--report", str(report), *extra)
    data = json.loads((report / "report.json").read_text())
    assert r.exit_code == 7
    assert data["verdict"] != "passed"
    checks = {c["name"]: c for c in data["checks"]}
    for c in checks.values():
        assert "failure of the check itself" not in c["fix"], c
    return checks


def test_healthy_perf_capture_passes(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    py = with_python(host, "perf", PROBE + json.dumps(healthy_perf()) + "\n")
    checks = run_with(run_cli, tmp_path, py, PERF_CHECKS)
    assert {c["status"] for c in checks.values()} == {"passed"}, checks


def test_nan_figure_fails_naming_the_gpu(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    perf = healthy_perf()
    perf["devices"][1]["hbm_copy_gbps"] = float("nan")
    del perf["devices"][0]["matmul_tflops"]
    py = with_python(host, "perf", PROBE + json.dumps(perf) + "\n")
    checks = run_with(run_cli, tmp_path, py, PERF_CHECKS)
    copy, mm = checks["test_gpu_memory_bandwidth"], checks["test_matmul_throughput"]
    assert copy["status"] == "failed"
    assert "GPU 1 (NVIDIA H200): device-memory copy bandwidth came out as nan" in copy["message"]
    assert "could not time this GPU" in copy["fix"]
    assert mm["status"] == "failed"
    assert "GPU 0 (NVIDIA H200)" in mm["message"]
    measured = [j["measured"] for j in copy["figures"]["judgements"]]
    assert measured[1] is None  # report.json holds no NaN
    raw = (tmp_path / "report" / "report.json").read_text()
    assert "NaN" not in raw


def test_pcie_link_trained_lower_is_named(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    perf = healthy_perf()
    for sample in perf["devices"][0]["pcie_samples"]:
        sample["pcie.link.gen.current"], sample["pcie.link.width.current"] = "4", "8"
    perf["devices"][0]["h2d_gbps"], perf["devices"][0]["d2h_gbps"] = 13.5, 13.4
    py = with_python(host, "perf", PROBE + json.dumps(perf) + "\n")
    checks = run_with(run_cli, tmp_path, py, PERF_CHECKS)
    hd = checks["test_host_device_bandwidth"]
    assert hd["status"] == "failed"
    assert "GPU 0 (NVIDIA H200): host-to-device bandwidth 13.5 GB/s" in hd["message"]
    assert "the link runs at Gen4 x8 under load, the slot allows Gen5 x16" in hd["message"]
    assert "GPU 1" not in hd["message"]


@pytest.mark.parametrize(
    ("rc", "words", "fix"),
    [
        (139, "killed by signal 11: SIGSEGV", "died mid-run"),
        (137, "killed by signal 9: SIGKILL — usually the kernel's out-of-memory killer", "died mid-run"),
        (1, "printed no result (exit code 1)", "to see where it stops"),
    ],
)
def test_probe_that_dies_mid_run(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path, rc: int, words: str, fix: str
) -> None:
    """A perf probe that crashes after it started (a segfault in the driver, the OOM killer's SIGKILL well
    before the time limit): named as such, never "hung" and never "install torch"."""
    py = with_python(host, "perf", "measuring cuda:0\n", rc=rc)
    checks = run_with(run_cli, tmp_path, py, PERF_CHECKS)
    copy = checks["test_gpu_memory_bandwidth"]
    assert copy["status"] == "failed"
    assert words in copy["message"]
    assert "hung" not in copy["message"]
    assert fix in copy["fix"]
    assert "imports torch" not in copy["fix"]


def test_out_of_memory_on_one_gpu(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    perf = healthy_perf()
    perf["devices"][1] = {
        "index": 1,
        "name": "NVIDIA H200",
        "error": "CUDA out of memory. Tried to allocate 1.00 GiB",
    }
    py = with_python(host, "perf", PROBE + json.dumps(perf) + "\n")
    checks = run_with(run_cli, tmp_path, py, PERF_CHECKS)
    copy = checks["test_gpu_memory_bandwidth"]
    assert "cuda:1: CUDA out of memory" in copy["message"]
    assert "another process holds this GPU's memory" in copy["fix"]


def test_cuda_visible_devices_subset_fails_without_expect_count(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    """CUDA_VISIBLE_DEVICES=0 on the 2-GPU host: the multi-GPU checks would run on a GPU CUDA cannot see."""
    cuda = {
        "cuda_visible_devices": "0",
        "torch": "2.11.0+cu130",
        "torch_cuda": "13.0",
        "available": True,
        "count": 1,
        "devices": [{"index": 0, "name": "NVIDIA H200", "capability": "9.0", "arch_in_wheel": True}],
    }
    py = with_python(host, "cuda", PROBE + json.dumps(cuda) + "\n")
    checks = run_with(run_cli, tmp_path, py, "torch_sees_all_gpus")
    seen = checks["test_torch_sees_all_gpus"]
    assert seen["status"] == "failed"
    assert "torch sees 1 of the 2 GPUs nvidia-smi shows: CUDA_VISIBLE_DEVICES='0' hides" in seen["message"]
    assert "unset CUDA_VISIBLE_DEVICES" in seen["fix"]


@pytest.mark.parametrize(
    ("expect", "name", "mib", "ok"),
    [
        ("L40S 48GB", "NVIDIA L40S", 46068, True),  # 45.0 GiB = 48.3 GB
        ("A40 48GB", "NVIDIA A40", 46068, True),
        ("L4 24GB", "NVIDIA L4", 23034, True),  # 22.5 GiB = 24.2 GB
        ("B200 192GB", "NVIDIA B200", 183359, True),  # 179.1 GiB = 192.3 GB
        ("B200 180GB", "NVIDIA B200", 183359, True),
        ("H200 141GB", "NVIDIA H200", 143771, True),
        ("GH200 96GB", "NVIDIA GH200 480GB", 97871, True),
        ("RTX 5090 32GB", "NVIDIA GeForce RTX 5090", 32607, True),
        ("A100 80GB", "NVIDIA A100-SXM4-40GB", 40960, False),
        ("V100 32GB", "Tesla V100-SXM2-16GB", 16160, False),
        ("H100 94GB", "NVIDIA H100 80GB HBM3", 81559, False),
        ("L40S 24GB", "NVIDIA L40S", 46068, False),
    ],
)
def test_expect_gpu_memory_of_other_gpus(expect: str, name: str, mib: int, ok: bool) -> None:
    """--expect-gpu "L40S 48GB" on an L40S (nvidia-smi: 46068 MiB) was a false failure: vendors count GB."""
    from imagesmith.validate.criteria import Gpu, gpu_mismatches

    problems = gpu_mismatches(expect, Gpu(index=0, name=name, memory_mib=mib))
    assert (problems == []) is ok, problems


def test_suite_that_dies_leaves_no_earlier_verdict(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second run into the same folder whose suite is killed (the OOM killer takes pytest): exit 7, no
    verdict of its own, and the folder is the first run's whole bundle, untouched (issue 37 item 5: the
    bundle is put in place only when a run ends with a verdict; before, the first run's two files were
    removed and the rest of its bundle left)."""
    from imagesmith.validate import runner

    report = tmp_path / "report"
    r = run_cli("validate", "local://", "-k", GPU_CHECKS, "--report", str(report))
    assert (report / "report.md").is_file()
    first = {p.name: p.read_bytes() for p in report.iterdir()}
    monkeypatch.setattr(
        runner, "pytest_argv", lambda *a, **k: [sys.executable, "-c", "import os; os._exit(137)"]
    )
    r = run_cli("validate", "local://", "-k", GPU_CHECKS, "--report", str(report))
    assert r.exit_code == 7
    assert f"did not finish (pytest exit code 137); no report was written to {report}" in r.stderr
    assert {p.name: p.read_bytes() for p in report.iterdir()} == first
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            '<?xml version="1.0" ?>\n<nvidia_smi_log>\n\t<driver_version>550.54.15</driver_version>\n',
            "this is `nvidia-smi -q -x` XML, which imagesmith does not read",
        ),
        (
            "index, name, memory.total [MiB], driver_version\n"
            "0, NVIDIA A100-SXM4-80GB, 81920 MiB, 535.104.05\n"
            "1, NVIDIA A100-SXM4-80GB, 81920 MiB, 535.1",
            "the output ends mid-line, so it was cut short",
        ),
    ],
)
def test_compat_on_xml_and_cut_short_csv(
    run_cli: Callable[..., Any], tmp_path: Path, text: str, words: str
) -> None:
    smi = tmp_path / "smi.txt"
    smi.write_text(text)
    r = run_cli("compat", "--nvidia-smi", str(smi), "--torch", "2.4.1", "--cuda", "12.4")
    assert r.exit_code == 7
    assert words in r.stderr


def fake_pci(root: Path, devices: dict[str, tuple[str, str, str]], nodes: int) -> Path:
    """A /sys/bus/pci tree under *root* (address → vendor, class, driver) and *nodes* /dev/nvidiaN."""
    for address, (vendor, cls, driver) in devices.items():
        d = root / "sys" / "bus" / "pci" / "devices" / address
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")
        drv = root / "sys" / "bus" / "pci" / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        (d / "driver").symlink_to(drv)
    (root / "dev").mkdir()
    for n in ("nvidiactl", "nvidia-uvm", *(f"nvidia{i}" for i in range(nodes))):
        (root / "dev" / n).write_text("")
    return root


H200_PCI = {
    "0000:00:06.0": ("0x10de", "0x030200", "nvidia"),  # as the lent H200 host shows it
    "0000:00:07.0": ("0x10de", "0x030200", "nvidia"),
    "0000:00:05.0": ("0x10de", "0x068000", "nvidia-nvswitch"),  # an NVSwitch: not a GPU
    "0000:00:03.0": ("0x1af4", "0x010000", "virtio-pci"),
}


@pytest.mark.parametrize(("nodes", "status"), [(3, "failed"), (2, "passed")])
def test_gpu_bound_to_the_driver_but_missing_from_nvidia_smi(
    host: Path,
    run_cli: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    nodes: int,
    status: str,
) -> None:
    """nvidia-smi lists 2 GPUs; the PCI bus has a third bound to the nvidia driver (fell off the bus): with a
    /dev/nvidiaN for each (the host, or a container given all GPUs) that fails naming its address; with
    fewer nodes than GPUs on the bus (a container given some GPUs) it is a warning."""
    root = fake_pci(tmp_path / "root", {**H200_PCI, "0000:00:08.0": ("0x10de", "0x030200", "nvidia")}, nodes)
    monkeypatch.setenv("IMAGESMITH_HOST_ROOT", str(root))
    _, checks = validate(run_cli, tmp_path, "gpus_on_the_pci_bus")
    pci = checks["test_gpus_on_the_pci_bus"]
    assert pci["status"] == status, pci
    text = pci["message"] if status == "failed" else " ".join(pci["warnings"])
    assert (
        "1 GPU(s) bound to the nvidia driver on the PCI bus are not in nvidia-smi's list of 2: 0000:00:08.0"
        in text
    )
    if status == "failed":
        assert "reboot or the GPU a replacement" in pci["fix"]


def test_pci_bus_that_matches_nvidia_smi_passes(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGESMITH_HOST_ROOT", str(fake_pci(tmp_path / "root", H200_PCI, 2)))
    _, checks = validate(run_cli, tmp_path, "gpus_on_the_pci_bus")
    assert checks["test_gpus_on_the_pci_bus"]["status"] == "passed"
    assert checks["test_gpus_on_the_pci_bus"]["figures"]["pci_nvidia_bound"] == [
        "0000:00:06.0",
        "0000:00:07.0",
    ]


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        (
            "143771 MiB, 9.0, Disabled, Enabled, 0",
            "[GPU requires reset], 9.0, Disabled, Enabled, 0",
            "GPU 0 memory.total: [GPU requires reset]",
        ),
        (
            "Enabled, 0, 700.00 W",
            "Enabled, [GPU requires reset], 700.00 W",
            "ecc.errors.uncorrected.volatile.total: [GPU requires reset]",
        ),
        (
            "No, No, Enabled",
            "[Unknown Error], [Unknown Error], Enabled",
            "remapped_rows.pending: [Unknown Error]",
        ),
    ],
)
def test_cells_that_say_the_gpu_needs_a_reset(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path, old: str, new: str, words: str
) -> None:
    """nvidia-smi prints "[GPU requires reset]" in the fields of a GPU it cannot read until it is reset:
    they were read as "not applicable" (None) and the GPU passed."""
    q = (host / "query").read_text()
    (host / "query").write_text(q.replace(old, new, 1))
    _, checks = validate(run_cli, tmp_path)
    inv = checks["test_gpu_inventory"]
    assert inv["status"] == "failed", inv
    assert words in inv["message"]
    assert "nvidia-smi -r" in inv["fix"]


@pytest.mark.parametrize(
    ("line", "fix"),
    [
        ("gpu-host: Test CUDA failure common.cu:1279 'out of memory'", "another process holds their memory"),
        ("Invalid number of GPUs: 2 requested but only 1 were found.", "unset CUDA_VISIBLE_DEVICES"),
    ],
)
def test_nccl_log_that_aborts_says_why(line: str, fix: str) -> None:
    """all_reduce_perf out of memory, or asked for more GPUs than CUDA shows: the fix says which."""
    from imagesmith.errors import ParseError
    from imagesmith.validate.parsers import parse_nccl_log

    log = (H200 / "all_reduce_perf-1.log").read_text()
    head = log[: log.index("#       size")]
    with pytest.raises(ParseError, match="the test aborted") as caught:
        parse_nccl_log(head + line + "\n", source="nccl-allreduce-1.log")
    assert line.split(":")[0] in caught.value.message
    assert fix in (caught.value.hint or "")
