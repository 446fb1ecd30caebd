"""Issue 27 re-checked (round five): input variants earlier rounds did not try — special files and symbolic
link loops as every kind of path, settings in the environment that are blank or carry control characters,
control characters that reach an error message from a file, ``COLUMNS=0`` and a deleted working folder —
each failing on the code before this change. In-process (``run_cli``) throughout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesmith import inputs, settings
from imagesmith.errors import ConfigError
from tests.repo import REPO
from tests.unit.test_input_round3 import Run, _copy_project, _deadline, _one_error

DEVICE = "/dev/null"


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    """A symbolic link that points at itself through a second one: ``Path.resolve()`` raises RuntimeError."""
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    return tmp_path / "loop-a"


# ------------------------------------------------------------------------ symbolic link loops as paths


def test_a_symlink_loop_as_any_path_is_one_error_naming_the_loop(
    run_cli: Run, loop: Path, tmp_path: Path
) -> None:
    """``init LOOP`` ended in ``RuntimeError: Symlink loop`` (a traceback, exit 1): ``Path.resolve()`` raises
    for a loop, and every user path went through it. Now ``inputs.resolved`` (os.path.realpath) never raises
    and the command's own check names the loop."""
    assert inputs.resolved(loop) == loop  # a loop stays as it is, for the check after it to name
    for argv in (
        ["init", str(loop)],
        ["-C", str(loop), "plan"],
        ["-C", str(REPO), "schema", "--check", "--out", str(loop)],
        ["-C", str(REPO), "release", "--dry-run", "--reports", str(loop)],
        ["validate", "ssh://user@host", "--ssh-config", str(loop)],
    ):
        error, _ = _one_error(run_cli(*argv), 2)
        assert str(loop) in error, (argv, error)
        named = ("loop" in error, "symbolic link" in error.lower(), "Too many levels" in error)
        assert any(named), (argv, error)
    assert not (tmp_path / "loop-b" / "imagesmith.toml").exists()


# --------------------------------------------------------------- folders and files named by the wrong kind


def test_a_folder_flag_given_a_device_a_file_or_a_loop_names_what_it_is(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``release --reports /dev/null`` was taken silently (``rglob`` in a device finds nothing; the release
    then went to the registries and asked for --reports); ``--scan-reports FILE`` said "no such folder";
    ``schema --check --out FILE`` listed FILE/x.schema.json as differing; ``build --wheels /dev/null`` said
    "no *.whl files there". Each now says what the path is."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.setenv("IMAGESMITH_REGISTRY_ATTEMPTS", "1")
    a_file = tmp_path / "report.txt"
    a_file.write_text("not a folder\n")
    cases = [
        (["release", "--dry-run", "--reports", DEVICE], "--reports", "is a device, not a folder"),
        (["schema", "--check", "--out", str(a_file)], "--out", "is a file, not a folder"),
        (["schema", "--check", "--out", DEVICE], "--out", "is a device, not a folder"),
        (["build", "--wheels", DEVICE], "--wheels", "is a device, not a folder"),
        (["build", "--wheels", str(a_file)], "--wheels", "is a file, not a folder"),
    ]
    for argv, flag, words in cases:
        with _deadline(60):
            error, _ = _one_error(run_cli("-C", str(REPO), *argv), 2)
        assert flag in error, (argv, error)
        assert words in error, (argv, error)
    assert inputs.folder_problem(tmp_path / "missing") == "no such folder"
    assert inputs.folder_problem(tmp_path / "missing", may_be_missing=True) is None
    assert inputs.folder_problem(tmp_path) is None


def test_a_scan_reports_file_is_named_a_file(tmp_path: Path) -> None:
    from imagesmith.vulngate import find_scan

    a_file = tmp_path / "scan.json"
    a_file.write_text("{}")
    with pytest.raises(ConfigError) as caught:
        find_scan([a_file], "sha256:" + "0" * 64, None)
    assert "is a file, not a folder" in caught.value.message


def test_ssh_files_are_read_as_user_files(run_cli: Run, tmp_path: Path) -> None:
    """``--ssh-config /dev/zero`` said "no such file"; a 20 GB sparse file as --ssh-config passed the check
    and ssh read it for minutes (the command hung); ``/proc/self/mem`` passed too. They are read as every user
    file is now: the kind named, the size capped, an unreadable file said so."""
    sparse = tmp_path / "ssh_config"
    with sparse.open("wb") as f:
        f.truncate(20 << 20)  # sparse: no disk used
    for flag in ("--ssh-config", "--ssh-identity"):
        error, _ = _one_error(run_cli("validate", "ssh://user@host", flag, DEVICE), 2)
        assert f"{flag} {DEVICE}: is a device" in error, error
        with _deadline(30):
            error, _ = _one_error(run_cli("validate", "ssh://user@host", flag, str(sparse)), 2)
        assert "bytes, more than" in error, error
        error, _ = _one_error(run_cli("validate", "ssh://user@host", flag, str(tmp_path)), 2)
        assert "is a folder" in error, error


def test_init_into_a_device_names_it(run_cli: Run, tmp_path: Path) -> None:
    error, _ = _one_error(run_cli("init", DEVICE), 2)
    assert "is not a folder (a device)" in error, error


# -------------------------------------------------------------------------- settings in the environment


@pytest.mark.parametrize("value", [" ", "\n", "\t", "a\x1b[31mred", "x\ny", "ok\r"])
def test_every_setting_refuses_a_blank_value_or_control_characters(value: str) -> None:
    """``IMAGESMITH_CACHE=" "`` made a cache folder named " " in the working folder (and ``"\\n"`` one named
    by a line break); ``IMAGESMITH_PROJECT=$'a\\e[31m'`` reached the terminal raw in the error. Every
    declared setting (the credential family excepted: secrets are never shown) refuses both, naming it."""
    for var in settings.VARIABLES:
        if var.pattern:
            continue
        with pytest.raises(ConfigError) as caught:
            settings.get(var.name, env={var.name: value})
        message = caught.value.message
        assert var.name in message
        for raw in ("\x1b", "\n", "\r"):
            assert raw not in message, message
    assert settings.get("IMAGESMITH_CACHE", env={"IMAGESMITH_CACHE": ""}) == ""  # empty: unset, as before
    assert settings.get("IMAGESMITH_VERIFY", env={"IMAGESMITH_VERIFY": " full "}) == " full "


def test_a_blank_cache_setting_makes_no_folder(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IMAGESMITH_CACHE", " ")
    error, _ = _one_error(run_cli("-C", str(REPO), "fetch-sources"), 2)
    assert "IMAGESMITH_CACHE" in error, error
    assert "blank" in error, error
    assert not (tmp_path / " ").exists()


def test_a_setting_with_an_escape_sequence_is_shown_escaped(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGESMITH_PROJECT", "a\x1b[31mred")
    r = run_cli("plan")
    _one_error(r, 2)
    assert "\x1b" not in r.stderr
    assert "\\x1b[31m" in r.stderr


# -------------------------------------------------------------- control characters from files, in errors


def test_an_escape_sequence_from_a_file_never_reaches_the_terminal_raw(run_cli: Run, tmp_path: Path) -> None:
    """A matrix listing ``registries = ["main\\u001b[31m"]`` (TOML's escape) printed the fix line
    ``add [registries.main<ESC>[31m] there`` with the escape raw: the terminal turned red. Every error line
    is shown with its control characters escaped now, whatever they came from."""
    root = _copy_project(tmp_path / "p")
    matrix = root / "matrices" / "smoke.toml"
    text = matrix.read_text()
    assert "registries = [" in text
    start = text.index("registries = [")
    end = text.index("]", start)
    matrix.write_text(text[:start] + 'registries = ["main\\u001b[31m"' + text[end:])
    r = run_cli("-C", str(root), "plan")
    _one_error(r, 2)
    assert "\x1b" not in r.stderr, r.stderr
    assert "\\x1b[31m" in r.stderr


def test_shown_plain_escapes_control_characters_but_line_breaks() -> None:
    from imagesmith.cli import shown_plain

    assert shown_plain("a\x1b[2Jb\rc\x07d\u200be") == "a\\x1b[2Jb\\rc\\x07d\\u200be"
    assert shown_plain("two\nlines") == "two\nlines"
    assert shown_plain("✔ ünïcode ok") == "✔ ünïcode ok"


# ------------------------------------------------------------------------- the terminal and the process


@pytest.mark.parametrize("columns", ["0", "-5", "abc", "99999999999999999999"])
def test_an_error_is_printed_whatever_columns_says(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    """With ``COLUMNS=0`` every error printed as nothing: exit 2 and an empty stderr (rich took a width of
    0). A COLUMNS that is no size is dropped before rich reads it."""
    monkeypatch.setenv("COLUMNS", columns)
    error, _ = _one_error(run_cli("-C", str(REPO), "plan", "--matrix", "no-such-matrix"), 2)
    assert "no-such-matrix" in error


def test_a_deleted_working_folder_is_named(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mkdir d; cd d; rmdir ../d; imagesmith plan`` said "error: No such file or directory / fix: check
    that path" with no path at all."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    monkeypatch.delenv("IMAGESMITH_PROJECT", raising=False)
    for argv in (["plan"], ["keygen", "k"], ["schema"]):
        error, fix = _one_error(run_cli(*argv), 2)
        assert "working folder no longer exists" in error, (argv, error)
        assert "cd " in fix


def test_nccl_max_bytes_below_the_smallest_size_measured_is_refused(run_cli: Run) -> None:
    """``validate --nccl-max-bytes 0`` was taken: all_reduce_perf -b 8 -e 0 measures nothing, and the
    bandwidth check then failed on no data, on the GPU host, after the rest of the suite."""
    error, fix = _one_error(run_cli("validate", "--nccl-max-bytes", "0"), 2)
    assert "--nccl-max-bytes 0" in error, error
    assert "1G" in fix
    error, _ = _one_error(run_cli("validate", "--nccl-max-bytes", "7"), 2)
    assert "below the 8 bytes" in error, error
