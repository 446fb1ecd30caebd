"""Issue 27, every input round three: each finding of the hostile-input audit (except finding 3 and the
compatibility data) as a test that fails on the code before the fix. In-process (``run_cli``) wherever the
behaviour is the same; a real process only for closed pipes, output encodings and Ctrl-C.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from imagesmith import compat, inputs
from imagesmith.compat import hardware
from imagesmith.errors import ConfigError, MatrixError
from imagesmith.matrix import load_matrix, load_registries
from imagesmith.project import PROJECT_FILE, load_project
from tests.conftest import CliResult
from tests.repo import PROJECT, REPO

Run = Callable[..., CliResult]
EXAMPLES = REPO / "docs" / "examples"
INDEX = str(EXAMPLES / "release-index.json")
#: the sample index with its key's fingerprint as the trust root (issue 34: no first use without an opt-in)
ROOTED = INDEX + "#sha256:8ef7b6a1821dab01f46945bf3251f54ae014acc8a7064590ecd4d309f3fdcb68"
H200 = EXAMPLES / "nvidia-smi-h200.txt"
H100 = EXAMPLES / "nvidia-smi-535-h100.txt"
BIG = "9" * 5000
EXE = [sys.executable, "-m", "imagesmith"]


def _one_error(r: CliResult, code: int) -> tuple[str, str]:
    assert r.exit_code == code, (r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    fixes = [line for line in lines if line.strip().startswith("fix:")]
    assert len(errors) == 1, r.stderr
    assert len(fixes) == 1, r.stderr
    return errors[0], fixes[0]


def _copy_project(root: Path) -> Path:
    (root / "matrices").mkdir(parents=True)
    (root / PROJECT_FILE).write_text('schema = 1\ndefault_matrix = "smoke"\n')
    shutil.copy(PROJECT.matrices_dir / "smoke.toml", root / "matrices" / "smoke.toml")
    shutil.copy(PROJECT.registries_file, root / "matrices" / "registries.toml")
    shutil.copytree(PROJECT.locks_dir, root / "locks")
    return root


class _Blocked(BaseException):
    """Not an OSError (TimeoutError is one, and the CLI turns those into exit 2): a blocked read fails the
    test."""


@contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the body blocks, as a FIFO opened for reading does."""

    def expired(*_: Any) -> None:
        raise _Blocked(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------------------ 1: huge integers


def _smi_variants() -> list[tuple[str, str]]:
    table = H200.read_text()
    return [
        ("table-memory", table.replace("143771MiB", f"{BIG}MiB")),
        ("table-index", table.replace("|   0  NVIDIA H200", f"| {BIG}  NVIDIA H200")),
        (
            "csv-memory",
            f"index, name, memory.total [MiB], driver_version\n0, NVIDIA H200, {BIG} MiB, 580.159.04\n",
        ),
        (
            "csv-index",
            f"index, name, memory.total [MiB], driver_version\n{BIG}, NVIDIA H200, 1 MiB, 580.159.04\n",
        ),
        ("list-index", f"GPU {BIG}: NVIDIA H200 (UUID: GPU-8f8ec75d-437d-b98b-303a-920620c683d9)\n"),
    ]


@pytest.mark.parametrize(("name", "text"), _smi_variants(), ids=[n for n, _ in _smi_variants()])
def test_a_huge_integer_in_an_nvidia_smi_capture_is_one_error(
    run_cli: Run, tmp_path: Path, name: str, text: str
) -> None:
    smi = tmp_path / "smi.txt"
    smi.write_text(text)
    r = run_cli(
        "compat", "--nvidia-smi", str(smi), "--driver", "580.159.04", "--torch", "2.5.1", "--cuda", "12.4"
    )
    error, _ = _one_error(r, 7)
    assert str(smi) in error
    assert "digits" in error


@pytest.mark.parametrize("rel", [PROJECT_FILE, "matrices/smoke.toml", "matrices/registries.toml"])
def test_a_huge_integer_in_a_toml_file_names_the_file(run_cli: Run, tmp_path: Path, rel: str) -> None:
    root = _copy_project(tmp_path / "p")
    path = root / rel
    path.write_text(f"huge = {BIG}\n" + path.read_text())
    error, _ = _one_error(run_cli("-C", str(root), "plan"), 2)
    assert rel.split("/")[-1] in error
    assert "64-bit" in error


def test_an_integer_past_64_bits_in_toml_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "registries.toml"
    path.write_text(f'[registries.x]\nhost = "ghcr.io"\nnamespace = "a"\nport = {"9" * 40}\n')
    with pytest.raises(ConfigError, match=r"registries\.x\.port: an integer of 40 digits"):
        load_registries(path)


def test_a_huge_integer_in_a_release_index_or_report_is_one_error(run_cli: Run, tmp_path: Path) -> None:
    index = tmp_path / "index.json"
    index.write_text(Path(INDEX).read_text().replace('"generated"', f'"count": {BIG}, "generated"', 1))
    error, _ = _one_error(
        run_cli("pick", "--index", str(index), "--no-verify", "--driver", "535.104.05", "--gpu", "a100"), 2
    )
    assert "release index" in error
    assert "digits" in error
    from imagesmith.validate.record import ValidationReport

    with pytest.raises(ConfigError, match="digits"):
        ValidationReport.parse(f'{{"schema": {BIG}}}'.encode(), source="report.json")


def test_parse_int_takes_ascii_digits_only_and_bounds_the_length() -> None:
    assert inputs.parse_int(" 42 ", "x", hint="h") == 42
    for bad in ("५३५", "4_2", "", "1e3", BIG):
        with pytest.raises(ConfigError):
            inputs.parse_int(bad, "x", hint="h")


# ------------------------------------------------------------------------------ 2: keygen names


@pytest.mark.parametrize("name", ["", ".", "/", "..", "somedir/", "somedir"])
def test_keygen_refuses_a_folder_as_the_key_file(
    run_cli: Run, tmp_path: Path, name: str, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "somedir").mkdir()
    error, _ = _one_error(run_cli("keygen", name), 2)
    assert "is empty" in error or "is a folder" in error
    assert "already exists" not in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["somedir"]


def test_keygen_public_under_a_file_names_the_file(run_cli: Run, tmp_path: Path) -> None:
    (tmp_path / "existing.key").write_text("x")
    error, _ = _one_error(
        run_cli("keygen", str(tmp_path / "k"), "--public", str(tmp_path / "existing.key" / "x.pub")), 2
    )
    assert "existing.key is a file, not a folder" in error
    assert not (tmp_path / "k").exists()


def test_keygen_says_which_folder_it_created(run_cli: Run, tmp_path: Path) -> None:
    r = run_cli("keygen", str(tmp_path / "k"), "--public", str(tmp_path / "new" / "k.pub"))
    assert r.exit_code == 0, r.stderr
    assert f"created folder {tmp_path / 'new'}/" in r.stdout


# ------------------------------------------------------------------------------ 4: two tables


def test_two_nvidia_smi_tables_in_one_file_are_refused(run_cli: Run, tmp_path: Path) -> None:
    two = tmp_path / "two.txt"
    two.write_text(H200.read_text() + H100.read_text())
    error, fix = _one_error(run_cli("pick", "--index", INDEX, "--nvidia-smi", str(two)), 7)
    assert "580.159.04" in error
    assert "535.104.05" in error
    assert "2 nvidia-smi outputs" in error
    assert "one" in fix


# ------------------------------------------------------------------------------ 5: FIFOs


@pytest.mark.parametrize(
    "argv",
    [
        ["compat", "--nvidia-smi", "{fifo}", "--torch", "2.5.1", "--cuda", "12.4"],
        ["pick", "--index", "{fifo}", "--driver", "535.104.05", "--gpu", "a100"],
        ["pick", "--index", INDEX, "--nvidia-smi", "{fifo}"],
        ["pick", "--index", INDEX, "--driver", "535.104.05", "--gpu", "a100", "--verify-key", "{fifo}"],
        ["validate", "--baseline", "{fifo}"],
        ["plan", "--matrix", "{fifo}.toml"],
        ["release", "--matrix", "smoke", "--reports", "{tmp}", "--sign-key", "{fifo}", "--dry-run"],
        ["build", "--matrix", "smoke", "--extra-ca", "{fifo}"],
        ["fetch-sources", "--from", "{fifo}"],
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_a_fifo_as_a_file_input_is_refused_at_once(run_cli: Run, tmp_path: Path, argv: list[str]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    os.mkfifo(tmp_path / "pipe.toml")
    args = [a.format(fifo=fifo, tmp=tmp_path) for a in argv]
    with _deadline(20):
        r = run_cli(*args)
    assert r.exit_code not in (0, 1), r.stderr
    assert "Traceback" not in r.stderr


def test_read_user_file_words_each_kind_of_path(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path, words in (
        (tmp_path / "fifo", "FIFO"),
        (tmp_path, "is a folder"),
        (tmp_path / "missing", "no such file"),
        (Path("/dev/null"), "a device"),
    ):
        with _deadline(5), pytest.raises(ConfigError, match=words):
            inputs.read_user_file(path, "--x", hint="h")


# ---------------------------------------------------------------------- 6, 7: pick --flavor, matrix torch


def test_pick_flavor_that_matches_nothing_names_the_flavors(run_cli: Run) -> None:
    r = run_cli("pick", "--index", ROOTED, "--driver", "535.104.05", "--gpu", "a100", "--flavor", "bogus")
    error, fix = _one_error(r, 3)
    assert "runtime" in error
    assert "interactive" in error
    assert "release" not in fix


@pytest.mark.parametrize("version", ["2.11.0+cu121", " 2.11.0", "2.11.0\n", "2.11.0+$(touch x)"])
def test_matrix_torch_versions_must_be_exact(tmp_path: Path, version: str) -> None:
    root = _copy_project(tmp_path / "p")
    path = root / "matrices" / "smoke.toml"
    text = path.read_text()
    assert 'versions = ["2.11.0"]' in text
    path.write_text(text.replace('versions = ["2.11.0"]', f"versions = [{json_str(version)}]", 1))
    with pytest.raises(MatrixError, match=r"torch\.versions\[0\]") as info:
        load_matrix("smoke", project=load_project(root / PROJECT_FILE))
    assert "2.11.0" in info.value.message


def json_str(value: str) -> str:
    import json

    return json.dumps(value)


# ------------------------------------------------------------------------------ 8, 16, Ctrl-C: real processes


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESMITH_")}
    return {**env, **extra}


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--matrix", "a100", "--explain"],
        ["schema", "--help"],
        ["compat", "--driver", "535.104.05", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1"],
    ],
    ids=["plan", "schema-help", "compat"],
)
def test_a_closed_pipe_exits_141_quietly(argv: list[str]) -> None:
    proc = subprocess.Popen(
        [*EXE, "-C", str(REPO), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()  # the reader went away, as `| head -c 1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 141), err
    assert "Traceback" not in err
    assert "error:" not in err


def test_ascii_output_encoding_never_raises() -> None:
    r = subprocess.run(
        [*EXE, "compat", "--driver", "535.104.05", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1"],
        capture_output=True,
        env=_env(PYTHONIOENCODING="ascii"),
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert b"compatible" in r.stdout
    assert b"Traceback" not in r.stderr


@pytest.mark.parametrize("delay", [0.0, 2.5], ids=["while-importing", "while-running"])
def test_ctrl_c_is_one_aborted_line_and_exit_130(delay: float) -> None:
    # pick reading the capture from stdin waits for it: Ctrl-C lands while it waits (or while it imports).
    # "While importing" is timed by Python's own import log (PYTHONPROFILEIMPORTTIME), not by the clock: the
    # signal goes at the first module imported after imagesmith.entry, i.e. once entry.run() imports
    # imagesmith.cli and its libraries. A fixed delay landed, on a loaded machine, inside Python's start-up or
    # the pip-made console script's own first lines, before any line of imagesmith ran (nothing a program
    # can catch there: docs/README "Ctrl-C").
    script = Path(sys.executable).with_name("imagesmith")  # the console script: what a user runs
    proc = subprocess.Popen(
        [str(script), "pick", "--index", INDEX, "--nvidia-smi", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(PYTHONPROFILEIMPORTTIME="1"),
    )
    assert proc.stderr is not None
    head: list[bytes] = []
    entry_seen = False
    for line in iter(proc.stderr.readline, b""):
        head.append(line)
        if entry_seen and line.startswith(b"import time:"):
            break
        entry_seen = entry_seen or line.rstrip().endswith(b"| imagesmith.entry")
    else:
        raise AssertionError(b"".join(head).decode(errors="replace"))
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    text = "".join(
        line
        for line in (b"".join(head) + rest).decode().splitlines(keepends=True)
        if not line.startswith("import time:")
    )
    assert proc.returncode == 130, text
    assert "Traceback" not in text
    assert "KeyboardInterrupt" not in text
    assert "error: aborted" in text


# ------------------------------------------------------------------------------ 9, 10, 11


def test_schema_honours_the_project_and_refuses_an_empty_out(
    run_cli: Run, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    r = run_cli("-C", str(REPO), "schema", "--check")
    assert r.exit_code == 0, r.stderr
    assert str(REPO / "docs" / "schemas") in r.stdout
    monkeypatch.chdir(REPO / "matrices")
    r = run_cli("schema", "--check")
    assert r.exit_code == 0, r.stderr
    assert not (REPO / "matrices" / "docs").exists()
    error, _ = _one_error(run_cli("schema", "--out", ""), 2)
    assert "--out" in error


def test_validate_select_syntax_error_is_a_bad_flag(run_cli: Run) -> None:
    error, _ = _one_error(run_cli("validate", "--select", "((("), 2)
    assert "--select" in error


def test_lock_help_lists_12_and_a_bad_index_url_is_a_bad_setting(run_cli: Run, monkeypatch: Any) -> None:
    r = run_cli("lock", "--help")
    assert "12 = (--sizes)" in " ".join(r.stdout.split())
    monkeypatch.setenv("PIP_INDEX_URL", "not a url")
    error, _ = _one_error(run_cli("-C", str(REPO), "lock", "--sizes"), 2)
    assert "PIP_INDEX_URL" in error


# ------------------------------------------------------------------------------ 12, 13: registries


def test_a_registry_kind_in_capitals_names_the_lowercase_one(tmp_path: Path) -> None:
    path = tmp_path / "registries.toml"
    path.write_text('[registries.a]\nhost = "x.azurecr.io"\nnamespace = "n"\nkind = "AZURE-ACR"\n')
    with pytest.raises(ConfigError) as info:
        load_registries(path)
    assert "'azure-acr'" in info.value.message
    assert info.value.hint == 'kind = "azure-acr"'


def test_two_registries_with_one_image_name_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "registries.toml"
    path.write_text(
        '[registries.a]\nhost = "ghcr.io"\nnamespace = "me"\n\n'
        '[registries.b]\nhost = "ghcr.io"\nnamespace = "me"\n'
    )
    with pytest.raises(ConfigError, match=r"ghcr\.io/me/torch as registries\.a"):
        load_registries(path)


def test_a_matrix_registry_whose_cells_match_nothing_is_refused(run_cli: Run, tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "p")
    reg = root / "matrices" / "registries.toml"
    reg.write_text(
        reg.read_text().replace(
            'repository = "torch"\ninsecure = true',
            'repository = "torch"\ninsecure = true\ncells = ["*-devel-*"]',
            1,
        )
    )
    error, _ = _one_error(run_cli("-C", str(root), "plan"), 2)
    assert "local-plain" in error
    assert "match none" in error


def test_init_registry_given_twice_is_refused(run_cli: Run, tmp_path: Path) -> None:
    error, _ = _one_error(
        run_cli("init", str(tmp_path / "p"), "--registry", "ghcr.io/me", "--registry", "ghcr.io/me"), 2
    )
    assert "ghcr.io/me" in error
    assert not (tmp_path / "p").exists()


# ------------------------------------------------------------------------------ 14, 15: captures


def test_utf16_random_bytes_and_query_text_are_named(run_cli: Run, tmp_path: Path) -> None:
    cases = {
        "utf16.txt": (H200.read_text().encode("utf-16"), "UTF-16"),
        "random.bin": (bytes(range(256)) * 4, "not UTF-8 text"),
        "q.txt": (
            b"\n==============NVSMI LOG==============\n\nDriver Version : 535.104.05\nAttached GPUs : 1\n",
            "nvidia-smi -q",
        ),
    }
    for name, (body, words) in cases.items():
        (tmp_path / name).write_bytes(body)
        error, _ = _one_error(
            run_cli("compat", "--nvidia-smi", str(tmp_path / name), "--torch", "2.5.1", "--cuda", "12.4"),
            2 if name != "q.txt" else 7,
        )
        assert words in error
        assert "cut short" not in error


def test_a_cut_short_name_fix_does_not_ask_for_a_refused_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        compat.gpu("NVIDIA GeForce ...", memory_mib=24576)
    assert "--query-gpu" in (info.value.hint or "")
    assert "give the key" not in (info.value.hint or "")


def test_the_driver_narrows_a_cut_short_name(monkeypatch: Any) -> None:
    from dataclasses import replace

    a, b = compat.gpu("rtx3090"), compat.gpu("rtx4090")
    b = replace(b, min_driver=compat.parse_driver("525.60.13"))
    monkeypatch.setattr(hardware, "gpu_candidates", lambda _name: (a, b))
    assert compat.gpu("NVIDIA GeForce ...", memory_mib=24576, driver=compat.parse_driver("470.82.01")) == a


# ------------------------------------------------------------------------------ 17, 18


def test_fetch_sources_from_missing_is_a_bad_flag_and_a_key_is_no_archive(
    run_cli: Run, tmp_path: Path
) -> None:
    error, _ = _one_error(run_cli("-C", str(REPO), "fetch-sources", "--from", "/nonexistent"), 2)
    assert "/nonexistent" in error
    from imagesmith.errors import SourceCacheError
    from imagesmith.sources import fetch_from_paths, nccl_tests_archive

    key = tmp_path / "somekey.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n")
    archive = nccl_tests_archive(load_matrix("smoke", project=PROJECT).nccl_tests)
    with pytest.raises(SourceCacheError) as info:
        fetch_from_paths(archive, [key], cache=tmp_path / "cache")
    assert "not a gzip or tar archive" in info.value.message
    assert "gave" not in info.value.message


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--index-url", "ftp://x"], "not an http(s)://"),
        (["--releases", ""], "--releases is empty"),
        (["--index-url", ""], "--index-url is empty"),
    ],
)
def test_refresh_compat_index_url_and_empty_values(run_cli: Run, args: list[str], words: str) -> None:
    error, _ = _one_error(run_cli("refresh-compat", *args), 2)
    assert words in error


# ------------------------------------------------------------------------------ low: one rule per class


def test_bare_imagesmith_says_what_is_wrong(run_cli: Run) -> None:
    r = run_cli()
    assert r.exit_code == 2
    assert "error: no command given" in r.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["init", ""],
        ["-C", str(REPO), "fetch-sources", "--from", ""],
        ["-C", str(REPO), "release", "--matrix", "smoke", "--reports", ""],
        ["validate", "--report", ""],
        ["validate", "--shm-min", ""],
        ["validate", "--python", ""],
        ["validate", "--expect-gpu", ""],
        ["compat", "--nvidia-smi", "", "--torch", "2.1.2"],
        ["-C", str(REPO), "plan", "--only", ""],
        ["schema", "--out", " "],
        ["pick", "--index", INDEX, "--torch", ""],
        ["keygen", "k", "--public", ""],
        ["-C", "", "plan"],
    ],
    ids=lambda a: "-".join(a[2:4] if a[0] == "-C" and len(a) > 3 else a[:2]),
)
def test_an_empty_flag_value_is_an_error_naming_the_flag(
    run_cli: Run, tmp_path: Path, argv: list[str], monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    error, _ = _one_error(run_cli(*argv), 2)
    assert "empty" in error
    assert list(tmp_path.iterdir()) == []


def test_every_text_and_path_flag_refuses_an_empty_value(
    run_cli: Run, tmp_path: Path, monkeypatch: Any
) -> None:
    """The rule holds for every command's text and path flags, enumerated from the app."""
    import typer

    from imagesmith.cli import app

    monkeypatch.chdir(tmp_path)
    group: Any = typer.main.get_command(app)
    checked = 0
    for name, cmd in group.commands.items():
        for param in cmd.params:
            annotation = str(getattr(param.type_descriptor, "annotation", ""))
            if (
                param.param_type_name != "option"
                or param.is_flag
                or not ("str" in annotation or "Path" in annotation)
            ):
                continue
            flag = next(o for o in param.opts if o.startswith("--"))
            r = run_cli(name, flag, "")
            assert r.exit_code == 2, (name, flag, r.stderr)
            assert f"{flag} is empty" in r.stderr, (name, flag, r.stderr)
            checked += 1
    assert checked > 50
    assert list(tmp_path.iterdir()) == []


def test_numbers_on_the_command_line(run_cli: Run) -> None:
    error, _ = _one_error(run_cli("validate", "--perf-fail-ratio", "nan"), 2)
    assert "not a finite number" in error
    error, _ = _one_error(run_cli("validate", "--expect-count", "99999999999999999999"), 2)
    assert "--expect-count" in error
    assert run_cli("validate", "--expect-count", "2000").exit_code == 2


def test_a_driver_in_non_ascii_digits_is_refused(run_cli: Run) -> None:
    error, _ = _one_error(
        run_cli("compat", "--driver", "५३५.१०४.०५", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1"), 2
    )
    assert "driver" in error


def test_a_compute_capability_no_architecture_has_is_refused(run_cli: Run, tmp_path: Path) -> None:
    smi = tmp_path / "cc.csv"
    smi.write_text(
        "index, name, memory.total [MiB], compute_cap, driver_version\n"
        "0, NVIDIA Foo 9000, 81920 MiB, 99.9, 580.159.04\n"
    )
    error, _ = _one_error(
        run_cli("compat", "--nvidia-smi", str(smi), "--torch", "2.5.1", "--cuda", "12.4"), 2
    )
    assert "99.9" in error
    assert "sm_999" not in error


def test_toml_type_errors_show_values_as_written(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "p")
    path = root / "matrices" / "smoke.toml"
    original = path.read_text()
    path.write_text(original.replace("schema = 1", "schema = 1979-05-27T07:32:00", 1))
    project = load_project(root / PROJECT_FILE)
    with pytest.raises(MatrixError) as info:
        load_matrix("smoke", project=project)
    assert "datetime" not in info.value.message
    assert "1979-05-27T07:32:00" in info.value.message
    path.write_text(original.replace("[labels]\n", '[labels]\norg.opencontainers.image.vendor = "x"\n', 1))
    with pytest.raises(MatrixError) as info:
        load_matrix("smoke", project=project)
    assert "{'" not in info.value.message
    assert '"org.opencontainers.image.vendor"' in (info.value.hint or "")


def test_a_public_key_as_the_signing_key_says_so(tmp_path: Path) -> None:
    from imagesmith import signing

    signing.write_keypair(tmp_path / "k", tmp_path / "k.pub")
    (tmp_path / "k.pub").chmod(0o644)
    with pytest.raises(ConfigError) as info:
        signing.load_signing_key(tmp_path / "k.pub")
    assert "is a public key" in info.value.message
    assert "chmod" not in (info.value.hint or "")


def test_the_wrong_object_is_named_as_what_it_is(run_cli: Run, tmp_path: Path, monkeypatch: Any) -> None:
    error, _ = _one_error(run_cli("-C", str(REPO), "plan", "--matrix", "registries"), 2)
    assert "registries file, not a matrix" in error
    root = _copy_project(tmp_path / "p")
    (root / "matrices" / "x.toml").mkdir()
    error, _ = _one_error(run_cli("-C", str(root), "plan", "--matrix", "x"), 2)
    assert "is a folder" in error
    os.mkfifo(root / "matrices" / "y.toml")
    with _deadline(20):
        error, _ = _one_error(run_cli("-C", str(root), "plan", "--matrix", "y"), 2)
    assert "not a regular file" in error
    os.mkfifo(tmp_path / "fifo")
    error, fix = _one_error(run_cli("-C", str(tmp_path / "fifo"), "plan"), 2)
    assert "not a folder" in error
    assert "init" not in fix
    (tmp_path / "q" / PROJECT_FILE).mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "q")
    error, _ = _one_error(run_cli("plan"), 2)
    assert "is a folder" in error
    (root / PROJECT_FILE).write_text('schema = 1\n[paths]\nmatrices = "."\n')
    error, _ = _one_error(run_cli("-C", str(root), "plan"), 2)
    assert "paths.matrices" in error
    assert "dockerfiles" not in error


def test_pick_torch_with_a_local_version_and_repeated_flags(run_cli: Run) -> None:
    r = run_cli(
        "pick", "--index", ROOTED, "--driver", "535.104.05", "--gpu", "a100", "--torch", "2.4.1+cu121"
    )
    assert r.exit_code == 0, r.stderr
    assert "picked: 2.4.1-cu121" in r.stdout
    error, _ = _one_error(
        run_cli(
            "compat",
            "--driver",
            "535.104.05",
            "--gpu",
            "a100",
            "--torch",
            "2.1.2",
            "--cuda",
            "12.1",
            "--cuda",
            "11.8",
        ),
        2,
    )
    assert "--cuda is given 2 times" in error


def test_a_torch_series_suggests_its_newest_patch(run_cli: Run) -> None:
    error, _ = _one_error(
        run_cli("compat", "--driver", "535.104.05", "--gpu", "a100", "--torch", "2.1", "--cuda", "12.1"), 2
    )
    assert "2.1.2" in error


def test_pick_index_with_an_unknown_scheme(run_cli: Run) -> None:
    error, _ = _one_error(
        run_cli("pick", "--index", "ftp://x/index.json", "--driver", "535.104.05", "--gpu", "a100"), 2
    )
    assert "ftp://" in error
    assert "ftp:/x" not in error


def test_exclude_rules_reason_and_star(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "p")
    path = root / "matrices" / "smoke.toml"
    original = path.read_text()
    project = load_project(root / PROJECT_FILE)
    path.write_text(original + '\n[[exclude]]\npython = "3.11"\nreason = ""\n')
    with pytest.raises(MatrixError, match=r"exclude\[0\]\.reason"):
        load_matrix("smoke", project=project)
    path.write_text(original + '\n[[exclude]]\ntorch = "*"\nreason = "x"\n')
    with pytest.raises(MatrixError) as info:
        load_matrix("smoke", project=project)
    assert 'torch = "*"' in info.value.message


def test_init_names_the_driver_given_and_explains_a_refusal(run_cli: Run, tmp_path: Path) -> None:
    r = run_cli("init", str(tmp_path / "a"), "--gpu", "a100", "--driver", "550.54.14", "--no-render")
    assert r.exit_code == 0, r.stderr
    header = (tmp_path / "a" / "matrices" / "a100.toml").read_text()
    assert "--driver 550.54.14" in header
    assert "--driver 535.104.05" not in header
    _, fix = _one_error(run_cli("init", str(tmp_path / "b"), "--gpu", "a100", "--driver", "470.82.01"), 2)
    assert "minor-version compatibility" in fix
    assert "another GPU" not in fix


def test_examples_readme_counts_the_h200_capture_right() -> None:
    text = (EXAMPLES / "README.md").read_text()
    assert "2× H200" not in text
    assert H200.read_text().count("NVIDIA H200 ") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "--nccl-max-bytes", "9" * 5000 + "G"],
        ["validate", "--shm-min", "9" * 30 + "g"],
        [
            "compat",
            "--driver",
            "535.104.05",
            "--gpu",
            "a100",
            "--torch",
            "2.1." + "9" * 4000,
            "--cuda",
            "12.1",
        ],
        ["compat", "--driver", "535.104.05", "--gpu", "a100", "--torch", "x" * 5000],
    ],
    ids=["size-huge", "shm-30-digits", "torch-4000-digits", "flag-5000-chars"],
)
def test_huge_numbers_and_values_on_the_command_line(run_cli: Run, argv: list[str]) -> None:
    _one_error(run_cli(*argv), 2)


def test_a_huge_shm_min_in_a_matrix_names_the_key(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "p")
    path = root / "matrices" / "smoke.toml"
    text = path.read_text()
    assert "shm_min = " in text
    path.write_text(re.sub(r'shm_min = "[^"]*"', f'shm_min = "{"9" * 5000}g"', text, count=1))
    with pytest.raises(MatrixError, match="shm_min"):
        load_matrix("smoke", project=load_project(root / PROJECT_FILE))


@pytest.mark.parametrize(
    "argv",
    [
        ["-C", str(REPO), "release", "--matrix", "smoke", "--reports", "{tmp}", "--index-file", "{fifo}"],
        ["refresh-compat", "--write", "--data-file", "{fifo}", "--offline", "{tmp}"],
        ["-C", str(REPO), "build", "--matrix", "smoke", "--summary", "{fifo}"],
    ],
    ids=["release-index-file", "refresh-data-file", "build-summary"],
)
def test_a_fifo_as_a_file_a_command_writes_is_refused_at_once(
    run_cli: Run, tmp_path: Path, argv: list[str]
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with _deadline(20):
        error, _ = _one_error(run_cli(*[a.format(fifo=fifo, tmp=tmp_path) for a in argv]), 2)
    assert "not a regular file" in error
