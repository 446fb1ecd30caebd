"""Issue 31: the compat and refresh-compat commands' layer — a typed request, the flag rules in one place
(``prepare_compat``, ``prepare_refresh``), the run, called without the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesmith import refresh
from imagesmith.compatrequest import (
    CompatRequest,
    RefreshRequest,
    prepare_compat,
    prepare_refresh,
    run_boards,
    run_compat,
    run_refresh,
)
from imagesmith.errors import ConfigError, ImagesmithError, ParseError
from tests.repo import REPO

SMI = REPO / "tests" / "data" / "nvsmi"
RECORDING = REPO / "tests" / "data" / "refresh"


def ok(torch: str, cuda: str | None = None) -> CompatRequest:
    """A request whose driver and GPU are good: only *torch* and *cuda* can be wrong."""
    return CompatRequest(torch=torch, cuda=cuda, driver="535.104.05", gpu=("a100",))


@pytest.mark.parametrize(
    ("request_", "field", "says"),
    [
        (ok("2.1.2+"), "--torch", "--torch 2.1.2+: nothing after the '+'"),
        (ok("2.1.2+rocm5"), "--torch", "--torch 2.1.2+rocm5: 'rocm5' is not a CUDA"),
        (ok("2.1.2", cuda="99.9"), "--cuda", "--cuda 99.9: "),
        (ok("2.1.2", cuda="12.4.9"), "--cuda", "--cuda 12.4.9: "),
        (ok("2.1.2+cu999"), "--torch", "--torch 2.1.2+cu999: "),
        (
            ok("2.1.2+cu121", cuda="11.8"),
            "--cuda",
            "--torch 2.1.2+cu121 and --cuda 11.8",
        ),
        (ok("9.9.9"), "--torch", ""),
        (CompatRequest(torch="2.1.2"), "--driver", "missing --driver and --gpu"),
        (CompatRequest(torch="2.1.2", driver="535.104.05"), "--gpu", "missing --gpu"),
        (CompatRequest(torch="2.1.2", driver="junk", gpu=("a100",)), "--driver", ""),
        (CompatRequest(torch="2.1.2", driver="535.104.05", gpu=("nosuchgpu",)), "--gpu", ""),
        (
            CompatRequest(torch="2.1.2", gpu=("a100",), nvidia_smi=str(SMI / "r535_h100_sxm_x4.txt")),
            "--gpu",
            "--gpu and --nvidia-smi both name the GPU",
        ),
        (CompatRequest(torch="2.1.2", nvidia_smi="/nonexistent/smi.txt"), "--nvidia-smi", "--nvidia-smi "),
        (
            CompatRequest(torch="2.1.2", nvidia_smi=str(SMI / "list_a100_mig.txt")),
            "--driver",
            "shows no driver version",
        ),
        (
            CompatRequest(torch="2.1.2", driver="999.1", nvidia_smi=str(SMI / "r535_h100_sxm_x4.txt")),
            "--driver",
            "--driver 999.1 contradicts",
        ),
        (
            CompatRequest(torch="2.1.2", driver="junk", nvidia_smi=str(SMI / "r535_h100_sxm_x4.txt")),
            "--driver",
            "",
        ),
        # the first rule first: a bad --torch is said before the missing --driver/--gpu
        (CompatRequest(torch="2.1.2+"), "--torch", "--torch 2.1.2+"),
    ],
)
def test_each_bad_value_is_one_error_naming_the_flag(request_: CompatRequest, field: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        prepare_compat(request_)
    assert info.value.field == field
    assert says in info.value.message, info.value.message
    assert info.value.exit_code == 2


def test_a_file_that_is_not_nvidia_smi_output_is_exit_7_naming_the_flag() -> None:
    with pytest.raises(ParseError) as info:
        prepare_compat(CompatRequest(torch="2.4.0", nvidia_smi=str(SMI / "garbage_html.txt")))
    assert (info.value.field, info.value.exit_code) == ("--nvidia-smi", 7)


def test_an_unknown_gpu_of_the_file_names_the_file_flag(tmp_path: Path) -> None:
    smi = tmp_path / "smi.txt"
    smi.write_text("GPU 0: Quantum GPU 9000 (UUID: GPU-5b3c1f0e-8a2d-4f7e-9c61-2d0a7b4e9f13)\n")
    with pytest.raises(ConfigError) as info:
        prepare_compat(CompatRequest(torch="2.4.0", driver="535.104.05", nvidia_smi=str(smi)))
    assert info.value.field == "--nvidia-smi"
    assert info.value.message.startswith(f"{smi}: GPU 0: ")
    assert "compute_cap" in (info.value.hint or "")


def test_without_cuda_the_variant_is_pypis_and_said() -> None:
    p = prepare_compat(ok("2.1.2"))
    assert (p.torch, p.cuda) == ("2.1.2", "cu121")
    assert p.cuda_origin.startswith("--cuda not given: using cu121")
    given = prepare_compat(ok("2.1.2+cu118"))
    assert (given.cuda, given.cuda_origin) == ("cu118", "")


def test_every_gpu_is_judged_once_and_the_weakest_leads_the_json() -> None:
    p = prepare_compat(
        CompatRequest(torch="2.4.0", cuda="12.4", driver="535.104.05", gpu=("a100", "a100", "rtx4090"))
    )
    keys = [g.key for g, _ in p.targets]
    assert len(keys) == 2  # a100 given twice: one verdict
    assert keys[1] == "rtx4090"
    result = run_compat(p)
    data = result.to_json()
    assert len(data["verdicts"]) == 2
    assert data["compatible"] is result.compatible
    assert data["gpu"] == [v["gpu"] for v in data["verdicts"]]


def test_the_file_gives_the_driver_and_the_gpus_with_their_indices() -> None:
    p = prepare_compat(CompatRequest(torch="2.4.0", nvidia_smi=str(SMI / "r535_h100_sxm_x4.txt")))
    assert p.source == str(SMI / "r535_h100_sxm_x4.txt")
    assert str(p.driver).startswith("535.")
    ((_, indices),) = p.targets
    assert list(indices) == [0, 1, 2, 3]
    data = run_compat(p).to_json()
    assert (data["source"], data["gpu_indices"]) == (p.source, [0, 1, 2, 3])


# -- refresh-compat ------------------------------------------------------------------------------------------
def _refresh(tmp_path: Path, **given: object) -> RefreshRequest:
    fields: dict[str, object] = {
        "data_file": tmp_path / "torch.toml",
        "boards_file": REPO / "imagesmith" / "data" / "driver_table.toml",
        "no_arch": True,
    }
    fields.update(given)
    return RefreshRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "field"),
    [
        (
            {"boards": "CLONE", "write": True, "boards_file": Path("/nonexistent/x/driver_table.toml")},
            "--boards-file",
        ),
        ({"boards": "CLONE", "boards_file": "README"}, "--boards-file"),
        ({"boards": "README"}, "--boards"),
        ({"write": True, "data_file": REPO, "offline": RECORDING}, "--data-file"),
        ({"offline": Path("/nonexistent")}, "--offline"),
        ({"index_url": "ftp://x/simple"}, "--index-url"),
        ({"offline": RECORDING, "releases": "x.y-"}, "--releases"),
        # the first rule first: a bad --offline is said before a bad --releases
        ({"offline": Path("/nonexistent"), "releases": "x.y-"}, "--offline"),
    ],
)
def test_each_bad_refresh_flag_is_one_error_naming_it(
    tmp_path: Path, given: dict[str, object], field: str
) -> None:
    for key, value in list(given.items()):
        if value == "CLONE":
            given[key] = tmp_path  # not a clone: the --boards-file rules come first
        elif value == "README":
            given[key] = REPO / "README.md"
    with pytest.raises(ImagesmithError) as info:
        prepare_refresh(_refresh(tmp_path, **given))
    assert info.value.field == field, info.value.message
    assert info.value.exit_code == 2


def test_write_needs_the_data_file_there_before_the_index_is_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        prepare_refresh(_refresh(tmp_path, write=True, offline=RECORDING, data_file=tmp_path / "none.toml"))
    assert info.value.field == "--data-file"
    assert "no such file" in info.value.message


def test_bad_releases_are_found_before_the_index_is_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(refresh.LiveSource, "files", lambda *a, **k: pytest.fail("the index was asked"))
    with pytest.raises(ConfigError) as info:
        prepare_refresh(_refresh(tmp_path, index_url="https://index.invalid/simple/", releases="2.x"))
    assert info.value.field == "--releases"


def test_the_recording_is_replayed(tmp_path: Path) -> None:
    request = _refresh(tmp_path, offline=RECORDING, releases="2.10-2.15")
    p = prepare_refresh(request)
    assert (p.mode, p.http) == ("pypi", None)
    result = run_refresh(request, p)
    assert result.exit_code == 0
    assert result.written == ()
    counts = {s: sum(r.status == s for r in result.result.rows) for s in ("match", "differs", "new")}
    assert counts["differs"] == counts["new"] == 0
    assert result.to_json()["bytes_read"] == 0


def test_boards_reads_no_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from imagesmith import drivertable

    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    request = _refresh(tmp_path, boards=clone, offline=Path("/nonexistent"), releases="x.y-")
    p = prepare_refresh(request)  # the PyPI flags are not read with --boards
    assert p.mode == "boards"
    assert p.clone == clone
    table = drivertable.boards_from_data(p.boards_data or {})
    monkeypatch.setattr(drivertable, "read_clone", lambda path: [])
    monkeypatch.setattr(drivertable, "derive", lambda releases, names: table)
    result = run_boards(request, p)
    assert (result.exit_code, result.written, result.differences) == (0, False, ())
    assert result.to_json()["boards"] == len(table.boards)
