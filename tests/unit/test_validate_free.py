"""The GPU-free check (issue 28): nvidia-smi captures of free, held, busy and set-aside GPUs replayed through
the pure criteria (imagesmith.validate.free) and, with a fake nvidia-smi, through the real suite."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError
from imagesmith.nvsmi import SmiGpu
from imagesmith.validate.free import FREE_COMMAND, foreign_limit_mib, judge_free, parse_free
from imagesmith.validate.report import CheckOutcome, _free_section
from tests.repo import REPO
from tests.unit.test_validate_host_faults import host, validate  # noqa: F401 - the fake 2×H200 host

CAPTURES = REPO / "tests" / "data" / "validate" / "h200x1" / "free"
H200 = SmiGpu(index=0, name="NVIDIA H200", memory_mib=143771, uuid="GPU-9bcd1a27-c06f-dec0-9201-0123d30f4101")
UUID = H200.uuid
#: the GPU of the lent 1×H200 the captures come from
LENT = SmiGpu(index=0, name="NVIDIA H200", memory_mib=143771, uuid="GPU-b12d1044-bf05-b762-9c8a-9c36fe89f685")


def capture(
    *,
    used: int = 0,
    util: tuple[int, ...] = (0,) * 6,
    mode: str = "Default",
    mig: str = "Disabled",
    apps: str = "",
) -> str:
    lines = []
    for i, u in enumerate(util, start=1):
        lines += [f"# sample {i}", f"0, {UUID}, {used}, 143771, {u}, {mode}, {mig}"]
    return "\n".join([*lines, "# apps", apps]) + "\n"


def test_the_real_h200_captures() -> None:
    """Captured on the lent 1×H200 (docs/evidence/h200x1-soak): idle, 100 GiB held by another process, and a
    matmul loop of another process."""
    free = judge_free(parse_free((CAPTURES / "free-healthy.txt").read_text()), [LENT])
    assert free.failures == []
    assert free.warnings == []
    assert free.rows[0]["verdict"] == "free"
    assert free.rows[0]["memory_used_mib"] == 0
    held = judge_free(parse_free((CAPTURES / "free-memory-held.txt").read_text()), [LENT])
    assert len(held.failures) == 1, held.failures
    assert "GPU 0 (NVIDIA H200)" in held.failures[0]
    assert "GiB" in held.failures[0]
    assert "pid " in held.failures[0]
    assert "python" in held.failures[0]
    assert held.rows[0]["memory_used_mib"] > 100 * 1024
    busy = judge_free(parse_free((CAPTURES / "free-busy.txt").read_text()), [LENT])
    assert any("busy while nothing of the suite runs" in f for f in busy.failures), busy.failures


def test_memory_held_by_an_invisible_process_fails_naming_the_amount() -> None:
    """In a container the neighbour's process is not listed, but its memory still shows."""
    v = judge_free(parse_free(capture(used=112_000)), [H200])
    assert v.failures == [
        "GPU 0 (NVIDIA H200): 109.4 GiB (78% of 140.4 GiB) of its memory is held by other processes, "
        "above the --foreign-memory-max 3% (4.2 GiB) — no process visible here: it belongs to another "
        "container or VM on the same GPU"
    ]
    assert v.rows[0]["verdict"] == "held"


def test_the_threshold_is_a_flag() -> None:
    text = capture(used=3000, apps=f"{UUID}, 4242, /usr/bin/python3, 3000")
    warned = judge_free(parse_free(text), [H200])  # 2.9 GiB < 3 % of 140 GiB: a warning, naming the process
    assert not warned.failures
    assert "pid 4242 /usr/bin/python3, 2.9 GiB" in warned.warnings[0]
    failed = judge_free(parse_free(text), [H200], limit="2g")
    assert "above the --foreign-memory-max 2g (2.0 GiB) — pid 4242 /usr/bin/python3" in failed.failures[0]
    assert foreign_limit_mib("1%", 143771) == pytest.approx(1437.71)
    assert foreign_limit_mib("512m", 1) == 512
    with pytest.raises(ConfigError, match="not a percentage"):
        foreign_limit_mib("lots", 1)


def test_busy_idle_utilization_fails_and_a_little_warns() -> None:
    busy = judge_free(parse_free(capture(util=(100, 100, 98, 100, 100, 100))), [H200])
    assert (
        "utilization 100 % on average over 6 samples in 3 s (100, 100, 98, 100, 100, 100 %)"
        in busy.failures[0]
    )
    blip = judge_free(parse_free(capture(util=(0, 0, 7, 0, 0, 0))), [H200])
    assert not blip.failures
    assert "utilization up to 7 %" in blip.warnings[0]


def test_compute_mode_and_mig() -> None:
    assert (
        "compute mode is Prohibited" in judge_free(parse_free(capture(mode="Prohibited")), [H200]).failures[0]
    )
    alone = judge_free(parse_free(capture(mode="Exclusive_Process")), [H200])
    assert not alone.failures
    assert "one process at a time" in alone.warnings[0]
    taken = judge_free(
        parse_free(capture(mode="Exclusive_Process", used=500, apps=f"{UUID}, 77, train.py, 500")), [H200]
    )
    assert any("Exclusive_Process and another process holds it (pid 77 train.py" in f for f in taken.failures)
    assert "MIG is enabled" in judge_free(parse_free(capture(mig="Enabled")), [H200]).warnings[0]


def test_memory_in_use_not_reported_warns_and_the_visible_processes_still_count() -> None:
    """A board whose nvidia-smi prints [N/A] for memory.used (some vGPU/virtualised boards) is not taken as
    free without a word: it warns, and the memory its visible processes hold is judged against the limit."""
    unknown = judge_free(parse_free(capture().replace(f"{UUID}, 0, ", f"{UUID}, [N/A], ")), [H200])
    assert not unknown.failures
    assert "reports no figure for its memory in use ([N/A])" in unknown.warnings[0]
    text = capture(apps=f"{UUID}, 4242, /usr/bin/python3, 9000").replace(f"{UUID}, 0, ", f"{UUID}, [N/A], ")
    held = judge_free(parse_free(text), [H200])
    assert "8.8 GiB" in held.failures[0]
    assert "pid 4242 /usr/bin/python3" in held.failures[0]


def test_a_gpu_nvidia_smi_did_not_sample_fails() -> None:
    other = SmiGpu(index=1, name="NVIDIA H200", uuid="GPU-other")
    v = judge_free(parse_free(capture()), [H200, other])
    assert v.failures == ["GPU 1 (NVIDIA H200): nvidia-smi gave no memory/utilization sample for it"]


@pytest.mark.parametrize("said", ["[N/A]", "nan", "-3", "inf"])
def test_utilization_nvidia_smi_does_not_give_is_unknown_not_idle(said: str) -> None:
    """MIG-enabled and some virtualised boards print [N/A] for utilization.gpu (a broken one nan): before,
    that was silently an idle GPU (mean 0.0, no word; nan landed in report.json as a bare NaN)."""
    v = judge_free(parse_free(capture(util=(0,) * 6).replace(", 0, Default", f", {said}, Default")), [H200])
    assert v.failures == []
    assert v.warnings == [
        f"GPU 0 (NVIDIA H200): nvidia-smi reports no figure for its utilization ({said}): whether someone "
        "else runs kernels on it cannot be told from here"
    ]
    assert v.rows[0]["utilization_mean"] is None
    assert v.rows[0]["utilization_samples"] == []
    outcome = CheckOutcome(name="test_gpus_free", module="m", figures={"gpus": v.rows, "limit": "3%"})
    table = "\n".join(_free_section(outcome))
    assert "| not reported by nvidia-smi |" in table
    assert "None %" not in table


@pytest.mark.parametrize("said", ["nan", "inf", "-5000", "1e999"])
def test_memory_in_use_that_is_not_a_figure_is_unknown_not_free(said: str) -> None:
    """A NaN compared with the limit is never above it, a negative amount is below every limit: before, both
    were a free GPU without a word, and the record kept NaN / -5000 MiB."""
    v = judge_free(parse_free(capture().replace(f"{UUID}, 0, ", f"{UUID}, {said}, ")), [H200])
    assert v.failures == []
    assert v.warnings == [
        f"GPU 0 (NVIDIA H200): nvidia-smi reports no figure for its memory in use ({said}): whether others "
        "hold its memory cannot be told from here — no process"
    ]
    assert v.rows[0]["memory_used_mib"] == 0


def test_exclusive_process_held_by_a_process_this_container_cannot_see_fails() -> None:
    """Exclusive_Process allows one CUDA context: 600 MiB in use is one, listed or not (in a container the
    holder is hidden). Before: two warnings, then every CUDA check failed with 'busy or unavailable'."""
    v = judge_free(parse_free(capture(mode="Exclusive_Process", used=600)), [H200])
    assert v.failures == [
        "GPU 0 (NVIDIA H200): compute mode Exclusive_Process and another process holds it (no process "
        "visible here: it belongs to another container or VM on the same GPU; 600 MiB of its memory in use): "
        "your process gets 'CUDA-capable device is busy or unavailable'"
    ]
    assert v.rows[0]["verdict"] == "held"
    # an idle board's own few MiB are not a holder
    assert judge_free(parse_free(capture(mode="Exclusive_Process", used=3)), [H200]).failures == []


def test_a_process_name_with_commas_is_one_process() -> None:
    """nvidia-smi does not quote its CSV: before, a process whose path has a comma was dropped, and the free
    check said no process was visible ("it belongs to another container or VM")."""
    text = capture(used=9000, apps=f"{UUID}, 4242, /srv/a,b/venv/bin/python3, 9000")
    cap = parse_free(text)
    assert cap.problems == []
    assert [(a.pid, a.name, a.mib) for a in cap.apps] == [(4242, "/srv/a,b/venv/bin/python3", 9000.0)]
    v = judge_free(cap, [H200])
    assert v.failures[0].endswith("— pid 4242 /srv/a,b/venv/bin/python3, 8.8 GiB")


# -- through the real suite, with the fake nvidia-smi of test_validate_host_faults ---------------------------


def _free_host(host: Path, *, used: str = "0", util: str = "0", apps: str = "") -> None:  # noqa: F811
    rows = (host / "query").read_text().splitlines()
    head = rows[0] + ", memory.used [MiB], utilization.gpu [%], compute_mode"
    body = [r + f", {used} MiB, {util} %, Default" for r in rows[1:]]
    (host / "query").write_text("\n".join([head, *body]) + "\n")
    key = "query-compute-apps=gpu_uuid,pid,process_name,used_memory-format=csv,noheader,nounits"
    (host / key).write_text(apps)


def test_the_suite_fails_a_held_gpu_and_keeps_the_record(
    host: Path,  # noqa: F811
    run_cli: Callable[..., Any],
    tmp_path: Path,
) -> None:
    uuid0 = "GPU-9bcd1a27-c06f-dec0-9201-0123d30f4101"
    _free_host(host, used="110000", apps=f"{uuid0}, 31337, python3, 110000 MiB\n")
    r, checks = validate(run_cli, tmp_path, select="test_gpus_free")
    c = checks["test_gpus_free"]
    assert c["status"] == "failed"
    assert "GPU 0 (NVIDIA H200): 107.4 GiB (77% of 140.4 GiB)" in c["message"]
    assert "pid 31337 python3" in c["message"]
    assert "ask for GPUs that are yours alone" in c["fix"]
    rows = c["figures"]["gpus"]
    assert [row["verdict"] for row in rows] == ["held", "held"]  # the fake shows the same memory on both
    assert rows[0]["processes"] == [{"pid": 31337, "name": "python3", "mib": 110000.0}]
    assert (tmp_path / "report" / "gpu-free.txt").read_text().startswith(f"$ {FREE_COMMAND}")
    assert r.exit_code == 7


def test_the_suite_passes_free_gpus(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:  # noqa: F811
    _free_host(host)
    _, checks = validate(run_cli, tmp_path, select="test_gpus_free")
    assert checks["test_gpus_free"]["status"] == "passed", checks["test_gpus_free"]
    assert checks["test_gpus_free"]["figures"]["limit"] == "3%"
