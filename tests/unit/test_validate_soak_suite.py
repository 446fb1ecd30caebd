"""The soak and the scaling checks through the real suite (``imagesmith validate local://``) on the fake
2×H200 host of test_validate_host_faults, with a fake target Python that replays what the probes printed on
the lent 1×H200 (the soak's raw records) or a DDP step timing for a healthy and a cut interconnect. No GPU
needed."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.commands.validate import parse_duration
from imagesmith.validate.container import inner_argv
from imagesmith.validate.context import SuiteOptions
from imagesmith.validate.record import report_figures, soak_sentence_of
from tests.repo import REPO
from tests.unit.test_validate_host_faults import host  # noqa: F401 - the fake 2×H200 host

CAPTURE = REPO / "tests" / "data" / "validate" / "h200x1" / "soak" / "cotenant-20pct-samples.jsonl"
LENT_UUID = "GPU-b12d1044-bf05-b762-9c8a-9c36fe89f685"
FAKE_UUID = "GPU-9bcd1a27-c06f-dec0-9201-0123d30f4101"  # GPU 0 of the fake host

#: ``-S``: no site import (the venv's .pth files): the stdlib is all the fake needs
FAKE_PY = r'''#!@PYTHON@ -S
"""fake target python: a free port, torchrun of the scaling probe, or the soak probe's records."""
import json, os, sys
D = "@DIR@"
a = sys.argv[1:]
if a[:1] == ["-c"]:
    print(29500)
    sys.exit(0)
if a[:2] == ["-m", "torch.distributed.run"]:
    n = int(next(x for x in a if x.startswith("--nproc_per_node=")).split("=")[1])
    eff = float(open(os.path.join(D, "efficiency")).read()) if n > 1 else 1.0
    fake_ranks = os.path.join(D, "ranks")  # a torchrun that starts other ranks than asked for
    ranks = range(n)
    if n > 1 and os.path.exists(fake_ranks):
        ranks = [int(x) for x in open(fake_ranks).read().split(",")]
    for rank in ranks:
        # the real one-GPU step on the lent H200: 20 steps of 16384 rows in 0.4436 s
        elapsed = 0.44364 / eff
        print("IMAGESMITH_PROBE " + json.dumps({"rank": rank, "world": n, "name": "NVIDIA H200",
              "dtype": "bfloat16", "steps": 20, "rows": 16384, "params": 134250496,
              "grad_bytes": 537001984, "elapsed_s": elapsed,
              "samples_per_s": 16384 * 20 / elapsed, "step_ms": 1000 * elapsed / 20, "loss": 1.0}))
    sys.exit(0)
if a and os.path.basename(a[0]) == "soak.py":
    for line in open(os.path.join(D, "soak.jsonl")):
        print("IMAGESMITH_PROBE " + line.strip())
    sys.exit(0)
sys.exit(3)
'''


@pytest.fixture
def python(host: Path) -> str:  # noqa: F811
    script = host.parent / "bin" / "python-fake"
    script.write_text(FAKE_PY.replace("@PYTHON@", sys.executable).replace("@DIR@", str(host)))
    script.chmod(0o755)
    (host / "soak.jsonl").write_text(CAPTURE.read_text().replace(LENT_UUID, FAKE_UUID))
    return str(script)


def run(run_cli: Callable[..., Any], tmp_path: Path, python: str, *args: str) -> tuple[Any, dict[str, Any]]:
    report = tmp_path / "report"
    r = run_cli("validate", "local://", "--python", python, "--report", str(report), *args)
    data = json.loads((report / "report.json").read_text())
    assert r.exit_code == (0 if data["verdict"] == "passed" else 7), r.stderr
    for c in data["checks"]:
        assert "failure of the check itself" not in c["fix"], c
    return r, data


def test_the_soak_check_judges_the_captured_cotenant_run(
    host: Path,  # noqa: F811
    python: str,
    run_cli: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """The lent H200's 4-minute soak with a 20 %-duty co-tenant from ~2:05, replayed: the check fails naming
    GPU 0, minute 4 and 0.89×, writes soak.csv and the timeline, and the report keeps the sentence."""
    r, data = run(run_cli, tmp_path, python, "-k", "test_soak", "--soak", "4m")
    soak = next(c for c in data["checks"] if c["name"] == "test_soak")
    assert soak["status"] == "failed"
    assert (
        "GPU 0 (NVIDIA H200): dense matmul throughput fell to 0.89× the first minute in minute 4"
        in soak["message"]
    )
    assert "soak.csv and soak-gpu*.png show when" in soak["fix"]
    # the fake host lists 2 GPUs, the replayed capture loaded one
    assert (
        "GPU 1 (NVIDIA H200): nvidia-smi listed it when the suite started, but the soak put no load"
        in (soak["message"])
    )
    sentence = soak["figures"]["sentence"]
    assert sentence.startswith(
        "Soak of 4.0 min on 1 GPU(s) (NVIDIA H200), 5 s windows; matmul 620–703 TFLOP/s"
    )
    assert f"soak: {sentence}" in r.stdout
    assert soak_sentence_of(data["checks"]) == sentence
    report = tmp_path / "report"
    assert (report / "soak.csv").read_text().splitlines()[0].startswith("gpu,name,window,t_start_s")
    assert "soak.csv" in data["logs"]
    assert "soak-samples.jsonl" in data["logs"]
    md = (report / "report.md").read_text()
    assert "## Soak" in md
    assert sentence in md
    assert "| GPU 0 (NVIDIA H200) | matmul_tflops | 700.5 TFLOP/s | 1.000 | 1.001 | 0.895 | 0.892 |" in md
    figures = report_figures(data["checks"])
    assert figures["soak_minutes"] == 4.0
    assert figures["soak_worst_minute_ratio"] == pytest.approx(0.8821, abs=1e-4)


def test_the_soak_runs_only_when_asked_for(
    host: Path,  # noqa: F811
    python: str,
    run_cli: Callable[..., Any],
    tmp_path: Path,
) -> None:
    _, without = run(run_cli, tmp_path, python, "-k", "test_gpu_inventory")
    assert "test_soak" not in without["verdict_reason"]  # not a check of a run without --soak
    _, with_soak = run(run_cli, tmp_path, python, "-k", "test_gpu_inventory", "--soak", "2m")
    assert "test_soak" in with_soak["verdict_reason"]  # left out by -k: named as such


@pytest.mark.parametrize(("efficiency", "status"), [(0.96, "passed"), (0.80, "passed"), (0.55, "failed")])
def test_scaling_efficiency_against_the_nvlink_expectation(
    host: Path,  # noqa: F811
    python: str,
    run_cli: Callable[..., Any],
    tmp_path: Path,
    efficiency: float,
    status: str,
) -> None:
    """2×H200 over NV18: expected 0.93 (perf.toml [[scaling]] nvlink); a cut interconnect (0.55) fails,
    0.80 (0.86× the expected) warns."""
    (host / "efficiency").write_text(str(efficiency))
    _, data = run(run_cli, tmp_path, python, "-k", "test_scaling_efficiency")
    c = next(c for c in data["checks"] if c["name"] == "test_scaling_efficiency")
    assert c["status"] == status, c["message"]
    assert c["figures"]["efficiency"] == pytest.approx(efficiency, abs=1e-3)
    assert c["figures"]["link"] == "NV18"
    assert c["figures"]["judgement"]["expected"] == 0.93
    assert report_figures(data["checks"])["scaling_efficiency"] == pytest.approx(efficiency, abs=1e-3)
    if status == "failed":
        assert c["message"].startswith(
            "2× NVIDIA H200 over NV18: DDP scaling efficiency 0.55 × = 0.59 × the expected 0.93 ×"
        )
        assert "2 GPUs train" in c["message"]
        assert "interconnect is slower than the topology says" in c["fix"]
    elif efficiency < 0.9 * 0.93:
        assert any("DDP scaling efficiency 0.8" in w for w in c["warnings"])
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## DDP scaling efficiency" in md


@pytest.mark.parametrize("efficiency", ["-1", "nan"])
def test_scaling_with_an_unusable_timing_fails_naming_it(
    host: Path,  # noqa: F811
    python: str,
    run_cli: Callable[..., Any],
    tmp_path: Path,
    efficiency: str,
) -> None:
    """The ranks' timings are the target's output: zero, negative or NaN seconds fail the check with what was
    reported (never a division by a bad time, or a NaN efficiency judged as a figure)."""
    (host / "efficiency").write_text(efficiency)
    _, data = run(run_cli, tmp_path, python, "-k", "test_scaling_efficiency")
    c = next(c for c in data["checks"] if c["name"] == "test_scaling_efficiency")
    assert c["status"] == "failed", c
    assert "reported elapsed_s = " in c["message"], c["message"]
    assert "not a positive number" in c["message"]


def test_a_superlinear_scaling_figure_warns_and_is_not_recorded(
    host: Path,  # noqa: F811
    python: str,
    run_cli: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """Weak scaling cannot beat N × one GPU: 1.3 says the one-GPU timing was slowed (a co-tenant's burst on
    GPU 0 during it). Before, it passed without a word and went into the report's figures, where a release
    index's fleet median learns from it."""
    (host / "efficiency").write_text("1.3")
    _, data = run(run_cli, tmp_path, python, "-k", "test_scaling_efficiency")
    c = next(c for c in data["checks"] if c["name"] == "test_scaling_efficiency")
    assert c["status"] == "passed"
    assert c["figures"]["efficiency"] == pytest.approx(1.3, abs=1e-3)
    assert any(
        w.startswith(
            "DDP scaling efficiency 1.30 × is above 1: each of the 2 GPUs trained faster (step 17.06 ms)"
        )
        and "not recorded" in w
        for w in c["warnings"]
    ), c["warnings"]
    assert "scaling_efficiency" not in report_figures(data["checks"])


@pytest.mark.parametrize("ranks", ["0,0", "0,3"])
def test_scaling_ranks_that_are_not_the_ones_asked_for_fail(
    host: Path,  # noqa: F811
    python: str,
    run_cli: Callable[..., Any],
    tmp_path: Path,
    ranks: str,
) -> None:
    """Two records for 2 GPUs, but rank 0 twice (or a rank 3): before, their rows were summed as the 2-GPU
    throughput."""
    (host / "efficiency").write_text("0.95")
    (host / "ranks").write_text(ranks)
    _, data = run(run_cli, tmp_path, python, "-k", "test_scaling_efficiency")
    c = next(c for c in data["checks"] if c["name"] == "test_scaling_efficiency")
    assert c["status"] == "failed", c
    a, b = ranks.split(",")
    assert c["message"] == (
        f"the DDP step on 2 GPU(s): the ranks reported (rank, world) ({a}, 2), ({b}, 2), not ranks 0–1 of 2"
    )


def test_soak_flags(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    for args, words in (
        (["--soak", "1m"], "shorter than 2 minutes"),
        (["--soak", "ten minutes"], "not a duration"),
        (["--soak", "2d"], "not a duration"),
        (["--soak", "25h"], "longer than a day"),
        (["--soak", "10m", "--soak-fail-ratio", "0.97"], "--soak-fail-ratio 0.97 is above --soak-warn-ratio"),
        (["--foreign-memory-max", "lots"], "not a percentage of the board or a size"),
        (["--foreign-memory-max", "150%"], "a percentage from 0 to 100"),
    ):
        r = run_cli("validate", "local://", *args, "--report", str(tmp_path / "r"))
        assert r.exit_code == 2, (args, r.stderr)
        assert words in r.stderr, (args, r.stderr)
        assert "fix:" in r.stderr


@pytest.mark.parametrize("duration", ["10m10m", "30m1h", "1m1m1m"])
def test_a_soak_with_a_unit_twice_or_out_of_order_is_not_a_duration(
    duration: str, run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    """Before, "10m10m" was silently a 20-minute soak and "30m1h" 90 minutes: a typo, not a sum."""
    r = run_cli("validate", "local://", "--soak", duration, "--report", str(tmp_path / "r"))
    assert r.exit_code == 2, r.stderr
    assert f"--soak {duration!r}: not a duration" in r.stderr
    assert parse_duration("1h 30m 5s", what="--soak") == 5405
    assert parse_duration("600", what="--soak") == 600  # what the image run passes on


def test_a_bare_number_for_the_soak_says_it_was_read_as_seconds(
    run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    """--soak 10 meant as minutes: the error says it was read as 10 s and how to write minutes."""
    r = run_cli("validate", "local://", "--soak", "10", "--report", str(tmp_path / "r"))
    assert r.exit_code == 2
    assert "--soak 10: shorter than 2 minutes (a bare number is seconds: 10 s; for minutes write 10m)" in (
        r.stderr
    )


def test_the_image_run_passes_the_soak_flags_on() -> None:
    """imagesmith validate IMAGE --soak 10m runs imagesmith-validate --soak 600 inside the image."""
    argv = inner_argv(SuiteOptions(soak_s=600, foreign_memory_max="2g", soak_fail_ratio=0.9), select=None)
    assert argv[argv.index("--soak") + 1] == "600"
    assert argv[argv.index("--foreign-memory-max") + 1] == "2g"
    assert argv[argv.index("--soak-fail-ratio") + 1] == "0.9"
    assert "--soak" not in inner_argv(SuiteOptions(), select=None)  # an older image knows no such flag


def test_the_index_records_soak_and_scaling_figures_and_pick_shows_them() -> None:
    """release copies report_figures into validated_on[].figures; the index keeps the new names and pick's
    text shows them beside the host they were measured on."""
    from imagesmith.commands.output import endurance
    from imagesmith.index import dump_index, parse_index
    from tests.unit.test_index import image, index_doc

    figures = {
        "matmul_tflops": 685.7,
        "soak_minutes": 9.0,
        "soak_matmul_tflops": 698.3,
        "soak_worst_minute_ratio": 0.9921,
        "scaling_efficiency": 0.951,
    }
    doc = index_doc(image())
    doc["images"][0]["validated_on"][0]["figures"] = figures
    parsed = parse_index(json.dumps(doc), source="index.json")
    assert dict(parsed.images[0].validated_on[0].figures) == figures
    assert parse_index(dump_index(parsed), source="again") == parsed
    assert endurance(parsed.images[0].validated_on[0].figures) == (
        " [soak 9 min at 698 TFLOP/s, worst minute 0.99× the first; DDP scaling 0.95]"
    )
    assert endurance({"matmul_tflops": 685.7}) == ""
    doc["images"][0]["validated_on"][0]["figures"] = {"soak_minutes": -1.0}
    with pytest.raises(Exception, match="not a measured figure"):
        parse_index(json.dumps(doc), source="index.json")


def test_release_reads_the_soak_figures_of_the_committed_report() -> None:
    """What release copies into the index from the lent H200's 9-minute soak report."""
    from imagesmith.validate.record import ValidationReport

    path = REPO / "docs" / "evidence" / "h200x1-soak" / "healthy-soak-9m" / "report.json"
    figures = ValidationReport.parse(path.read_bytes(), source=str(path)).figures
    assert figures == {
        "soak_minutes": 9.0,
        "soak_matmul_tflops": 697.767,
        "soak_copy_gbps": 4252.932,
        "soak_worst_minute_ratio": 0.995,
    }
