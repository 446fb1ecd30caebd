"""Issue 27 re-checked (round four): variants of the round-three findings' classes that its tests did not
cover, each failing on the code before this change. In-process (``run_cli``) wherever the behaviour is the
same; a real process only for closed standard streams and a full disk behind stdout.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from imagesmith import inputs, nvsmi
from imagesmith.bases import BaseLockError, read_bases
from imagesmith.errors import ConfigError, ParseError
from imagesmith.lock import LockError, LockKey, lock_path, read_lock
from imagesmith.registry.faults import RetryPolicy
from imagesmith.validate.criteria import visible_count
from imagesmith.wheelsizes import SIZES_FILE, read_sizes
from tests import astcache
from tests.repo import REPO
from tests.unit.test_input_round3 import (
    EXE,
    H100,
    H200,
    INDEX,
    Run,
    _copy_project,
    _deadline,
    _env,
    _one_error,
)

PACKAGE = REPO / "imagesmith"


# ------------------------------------------------------------------------------ non-ASCII digits, the class


_RE_FUNCS = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _unicode_digit_sites() -> list[str]:
    """Every ``\\d`` in a regex literal given to ``re`` without re.ASCII, and every ``str.isdigit`` /
    ``isdecimal`` / ``isnumeric`` call, in imagesmith's sources (``inputs.is_digits`` excepted)."""
    sites: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        tree = astcache.parse(source, str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            if node.func.attr in ("isdigit", "isdecimal", "isnumeric"):
                if "isascii()" not in lines[node.lineno - 1]:  # `x.isascii() and x.isdigit()` is ASCII
                    sites.append(f"{where}: .{node.func.attr}()")
                continue
            target = node.func.value
            if not (isinstance(target, ast.Name) and target.id == "re" and node.func.attr in _RE_FUNCS):
                continue
            if not node.args or not isinstance(node.args[0], ast.Constant):
                continue
            pattern = node.args[0].value
            flags = " ".join(ast.unparse(a) for a in node.args[1:]) + " ".join(
                ast.unparse(k) for k in node.keywords
            )
            if isinstance(pattern, str) and "\\d" in pattern and "ASCII" not in flags:
                sites.append(f"{where}: {pattern[:50]}")
    return sites


def test_no_digit_test_takes_unicode_digits() -> None:
    """``\\d`` and ``str.isdigit`` take ``٣``, ``５`` and ``²`` too: ``int()`` then reads some as digits (a
    driver, a CUDA tag, a port, a count) and raises a bare ValueError on others (a traceback). Every digit
    test is ASCII: ``[0-9]`` or re.ASCII, and :func:`inputs.is_digits`."""
    assert _unicode_digit_sites() == []


def test_is_digits_is_ascii_only() -> None:
    assert inputs.is_digits("0123456789")
    for text in ("", "٣", "５", "²", "1²", "1_0", " 1", "-1"):
        assert not inputs.is_digits(text), text


@pytest.mark.parametrize("value", ["²", "٣", "１0"])
def test_registry_attempts_in_other_digits_is_one_error(value: str) -> None:
    # "²".isdigit() was True and int("²") a ValueError traceback; "٣" was 3 attempts
    with pytest.raises(ConfigError, match="IMAGESMITH_REGISTRY_ATTEMPTS"):
        RetryPolicy.from_env({"IMAGESMITH_REGISTRY_ATTEMPTS": value})


@pytest.mark.parametrize("value", ["١٠", "1_0", "²"])
def test_registry_deadline_in_other_digits_is_one_error(value: str) -> None:
    # float("١٠") is 10.0 and float("1_0") too: the deadline was taken
    with pytest.raises(ConfigError, match="IMAGESMITH_REGISTRY_DEADLINE"):
        RetryPolicy.from_env({"IMAGESMITH_REGISTRY_DEADLINE": value})


def test_is_decimal_is_ascii_decimal_only() -> None:
    for text in ("12", "0.5", ".5", "1e3", "-2", " 7 "):
        assert inputs.is_decimal(text), text
    for text in ("", "١٠", "1_0", "nan", "inf", "0x8", "1e", "²"):
        assert not inputs.is_decimal(text), text


def test_cuda_visible_devices_in_other_digits_count_nothing() -> None:
    assert visible_count("٠", []) == 0  # was int("٠") = 0 against an empty list: fine; "²" raised
    assert visible_count("²", []) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--torch", "2.4.1", "--cuda", "１２.1"],
        ["--torch", "2.4.1+cu１21"],
        ["--torch", "2.4.1+"],
    ],
    ids=["cuda-fullwidth", "variant-fullwidth", "empty-local"],
)
def test_compat_refuses_other_digits_and_an_empty_local_version(run_cli: Run, argv: list[str]) -> None:
    error, _ = _one_error(run_cli("compat", *argv, "--driver", "580.95.05", "--gpu", "h100"), 2)
    assert "--torch" in error or "--cuda" in error


def _index_copy(tmp_path: Path, change: Any) -> str:
    data = json.loads(Path(INDEX).read_text())
    change(data)
    path = tmp_path / "index.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("arch", lambda d: d["images"][0].__setitem__("arch", ["９.0"])),
        ("expires", lambda d: d.__setitem__("expires", "２099-12-31T23:59:59Z")),
    ],
)
def test_a_release_index_with_other_digits_is_refused(
    run_cli: Run, tmp_path: Path, field: str, change: Any
) -> None:
    index = _index_copy(tmp_path, change)
    error, _ = _one_error(run_cli("index", index, "--no-verify"), 2)
    assert field in error


def test_a_duration_in_other_digits_is_refused() -> None:
    from imagesmith.commands.validate import parse_duration

    assert parse_duration("10m", what="--soak") == 600
    with pytest.raises(ConfigError, match="not a duration"):
        parse_duration("１0m", what="--soak")


# ------------------------------------------------------------------------------ numbers and text on flags


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["validate", "--expect-count", "1_6"], "not a whole number"),
        (["validate", "--expect-count", "8.0"], "not a whole number"),
        (["build", "--jobs", "0x8"], "not a whole number"),
        (["validate", "--soak-interval", "1_0"], "not a decimal number"),
        (["validate", "--nccl-timeout", "999999999"], "--nccl-timeout"),
        (["keygen", "k\n"], "control character"),
        (["compat", "--torch", "2.4.1", "--gpu", "h100\n", "--driver", "580.95.05"], "control character"),
        (
            ["pick", "--index", INDEX, "--driver", "580.95.05", "--gpu", "h100", "--flavor", "run\x1btime"],
            "control",
        ),
    ],
)
def test_flag_values_are_plain(
    run_cli: Run, tmp_path: Path, monkeypatch: Any, argv: list[str], words: str
) -> None:
    monkeypatch.chdir(tmp_path)
    error, _ = _one_error(run_cli(*argv), 2)
    assert words in error
    assert not any(p.name.startswith("k") for p in tmp_path.iterdir())  # keygen wrote nothing


# ------------------------------------------------------------------------------ files: nesting, kinds, text


def test_toml_nested_thousands_deep_is_one_error(run_cli: Run, tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "p")
    with (root / "matrices" / "smoke.toml").open("a") as f:
        f.write("x = " + "[" * 5000 + "]" * 5000 + "\n")
    error, _ = _one_error(run_cli("-C", str(root), "plan"), 2)
    assert "smoke.toml" in error
    assert "nested" in error


def test_loads_json_nested_deep_is_one_error() -> None:
    with pytest.raises(ConfigError, match=r"report\.json: JSON nested deeper"):
        inputs.loads_json("[" * 100000 + "]" * 100000, "report.json", hint="x")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("schema = 1\nx = " + "9" * 5000 + "\n", "thousands of digits"),
        ("x = " + "[" * 3000 + "]" * 3000 + "\n", "nested"),
        ("fifo", "not a regular file"),
        ("folder", "not a regular file"),
    ],
    ids=["huge-int", "deep", "fifo", "folder"],
)
def test_bases_lock_bad_file_is_one_error_never_none(tmp_path: Path, body: str, words: str) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    path = locks / "bases.toml"
    if body == "fifo":
        os.mkfifo(path)
    elif body == "folder":
        path.mkdir()
    else:
        path.write_text(body)
    with _deadline(20), pytest.raises(BaseLockError, match=words):
        read_bases(locks)  # a FIFO/folder was None: bases by name, unpinned, without a word


@pytest.mark.parametrize("kind", ["fifo", "folder", "schema"])
def test_wheel_sizes_bad_file_is_one_error(tmp_path: Path, kind: str) -> None:
    path = tmp_path / SIZES_FILE
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text("schema = -5\n")
    with _deadline(20), pytest.raises(ConfigError, match=SIZES_FILE):
        read_sizes(tmp_path)


@pytest.mark.parametrize("kind", ["folder", "fifo", "utf16", "dangling"])
def test_a_lock_that_is_not_a_readable_text_file_is_an_error_not_no_lock(tmp_path: Path, kind: str) -> None:
    key = LockKey(torch="2.11.0", variant="cu130", python="3.11")
    path = lock_path(key, tmp_path)
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "utf16":
        path.write_bytes("torch==2.11.0\n".encode("utf-16"))
    else:
        path.symlink_to(tmp_path / "nothere")
    with _deadline(20), pytest.raises(LockError) as info:
        read_lock(key, tmp_path)  # was None: the cell dropped as "no lock", render removed its files
    assert str(path) in info.value.message
    if kind == "utf16":
        assert "UTF-16" in info.value.message


def test_nul_bytes_are_not_called_utf16_and_the_utf16_fix_fits_any_file() -> None:
    with pytest.raises(ConfigError, match="NUL byte") as info:
        inputs.decode_text(b"\x00" * 64, "--nvidia-smi - (stdin)", hint="h")
    assert "UTF-16" not in info.value.message
    with pytest.raises(ConfigError, match="UTF-16") as info:
        inputs.decode_text("schema = 1\n".encode("utf-16-le"), "imagesmith.toml", hint="h")
    assert "nvidia-smi" not in (info.value.hint or "")


def test_the_wrong_object_is_named_for_project_paths(run_cli: Run, tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "p")
    smoke = root / "matrices" / "smoke.toml"
    smoke.unlink()
    os.mkfifo(smoke)
    with _deadline(20):
        error, _ = _one_error(run_cli("-C", str(root), "plan"), 2)
    assert "FIFO" in error  # was "default_matrix = 'smoke' but …/smoke.toml does not exist"
    smoke.unlink()
    smoke.mkdir()
    error, _ = _one_error(run_cli("-C", str(root), "plan"), 2)
    assert "is a folder" in error
    smoke.rmdir()
    shutil.copy(REPO / "matrices" / "smoke.toml", smoke)
    registries = root / "matrices" / "registries.toml"
    registries.unlink()
    os.mkfifo(registries)
    with _deadline(20):
        error, _ = _one_error(run_cli("-C", str(root), "plan"), 2)
    assert "FIFO" in error
    assert "does not exist" not in error
    registries.unlink()
    os.mkfifo(root / "ff")
    (root / "imagesmith.toml").write_text('schema = 1\ndefault_matrix = "smoke"\n[paths]\nmatrices = "ff"\n')
    with _deadline(20):
        error, _ = _one_error(run_cli("-C", str(root), "plan"), 2)
    assert "paths.matrices" in error
    assert "FIFO" in error
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    error, fix = _one_error(run_cli("-C", str(tmp_path / "loop"), "plan"), 2)
    assert "symbolic link" in error
    assert "init" not in fix
    q = tmp_path / "q"
    q.mkdir()
    os.mkfifo(q / "imagesmith.toml")
    error, _ = _one_error(run_cli("-C", str(q), "plan"), 2)
    assert "is a FIFO (named pipe), not the project file" in error  # was "is a not a regular file"


# ------------------------------------------------------------------------------ nvidia-smi captures


def test_a_table_cut_at_a_line_end_is_refused() -> None:
    lines = H100.read_text().splitlines(keepends=True)
    cut = "".join(lines[:11])  # GPU 0's rows, no '+----' after them: the file stopped there
    with pytest.raises(ParseError, match="cut short"):
        nvsmi.parse(cut, "cut.txt")
    whole = "".join(lines[:16]) + "\n"  # GPU 0 and 1, closed: a 2-GPU table, as printed
    assert len(nvsmi.parse(whole, "two.txt").gpus) == 2


@pytest.mark.parametrize("capture", ["list", "csv"])
def test_compat_and_pick_answer_a_capture_without_driver_alike(
    run_cli: Run, tmp_path: Path, capture: str
) -> None:
    path = tmp_path / "smi.txt"
    if capture == "list":
        path.write_text("GPU 0: NVIDIA H200 (UUID: GPU-8f8ec75d-437d-b98b-303a-920620c683d9)\n")
    else:
        path.write_text("index, name, memory.total [MiB]\n0, NVIDIA H200, 143771 MiB\n")
    compat_error, _ = _one_error(run_cli("compat", "--torch", "2.4.1", "--nvidia-smi", str(path)), 2)
    pick_error, _ = _one_error(run_cli("pick", "--index", INDEX, "--nvidia-smi", str(path)), 2)  # was 7
    assert "driver version" in compat_error
    assert "driver version" in pick_error


def test_a_gpu_twice_in_one_table_is_refused() -> None:
    lines = H100.read_text().splitlines(keepends=True)
    pasted = "".join(lines[:12] + lines[8:12] + lines[23:])
    with pytest.raises(ParseError, match="GPU 0 appears more than once"):
        nvsmi.parse(pasted, "pasted.txt")


# ------------------------------------------------------------------------------ closed standard streams


def _cli(*argv: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXE, "-C", str(REPO), *argv], capture_output=True, text=True, env=_env(), timeout=60, **kw
    )


def _one_error_proc(r: subprocess.CompletedProcess[str], code: int) -> str:
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len([x for x in lines if x.startswith("error:")]) == 1, r.stderr
    assert len([x for x in lines if x.strip().startswith("fix:")]) == 1, r.stderr
    return next(x for x in lines if x.startswith("error:"))


def test_closed_stdout_is_one_error() -> None:
    r = subprocess.run(
        [*EXE, "-C", str(REPO), "plan"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        timeout=60,
        # close fd 1 in the child, as `>&-` does
        preexec_fn=lambda: os.close(1),
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert "standard output is closed" in r.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_disk_behind_stdout_says_so() -> None:
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [*EXE, "-C", str(REPO), "plan"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            timeout=60,
        )
    error = _one_error_proc(r, 2)
    assert "cannot write" in error
    assert "check that path" not in r.stderr


def test_nvidia_smi_from_a_closed_stdin_is_one_error() -> None:
    r = _cli(
        "compat",
        "--torch",
        "2.4.1",
        "--cuda",
        "12.1",
        "--nvidia-smi",
        "-",
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: os.close(0),
    )
    error = _one_error_proc(r, 2)
    assert "standard input is closed" in error


def test_nvidia_smi_from_stdin_is_capped() -> None:
    r = subprocess.run(
        [*EXE, "compat", "--torch", "2.4.1", "--cuda", "12.1", "--nvidia-smi", "-"],
        input=b"GPU 0: x\n" * (inputs.MAX_USER_FILE_BYTES // 9 + 10),
        capture_output=True,
        env=_env(),
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert b"more than the" in r.stderr


def test_the_h200_capture_still_reads(run_cli: Run) -> None:
    r = run_cli("compat", "--torch", "2.4.1", "--cuda", "12.1", "--nvidia-smi", str(H200))
    assert r.exit_code == 0, r.stderr


# ------------------------------------------------------------------------------ recordings and reports


RECORDING = REPO / "tests" / "data" / "refresh"


def _recording(tmp_path: Path, rel: str, kind: str) -> Path:
    root = tmp_path / "rec"
    shutil.copytree(RECORDING, root)
    path = root / rel
    if kind == "deep":
        path.write_text("[" * 100000 + "]" * 100000)
    elif kind == "utf16":
        path.write_bytes(path.read_text().encode("utf-16"))
    elif kind == "latin1":
        path.write_bytes(path.read_bytes() + b"Summary: caf\xe9\n")
    elif kind == "nan-size":
        path.write_text(re.sub(r'"size": [0-9]+', '"size": NaN', path.read_text(), count=1))
    elif kind in ("fifo", "folder"):
        path.unlink()
        os.mkfifo(path) if kind == "fifo" else path.mkdir()
    return root


@pytest.mark.parametrize(
    ("rel", "kind"),
    [
        ("simple/torch.json", "deep"),
        ("simple/torch.json", "utf16"),
        ("simple/torch.json", "fifo"),
        ("simple/torch.json", "folder"),
        ("metadata/torch-2.12.0-cp312-cp312-manylinux_2_28_x86_64.whl.METADATA", "latin1"),
        ("metadata/torch-2.12.0-cp312-cp312-manylinux_2_28_x86_64.whl.METADATA", "fifo"),
    ],
)
def test_a_hostile_recording_is_one_error_naming_its_file(
    run_cli: Run, tmp_path: Path, rel: str, kind: str
) -> None:
    # were RecursionError / UnicodeDecodeError tracebacks, or (FIFO, folder) "torch: not on PyPI"
    root = _recording(tmp_path, rel, kind)
    with _deadline(60):
        r = run_cli(
            "-C", str(REPO), "refresh-compat", "--offline", str(root), "--releases", "2.12", "--no-arch"
        )
    error, _ = _one_error(r, 2)
    assert Path(rel).name in error


def test_a_nan_size_in_a_recording_is_no_traceback(run_cli: Run, tmp_path: Path) -> None:
    root = _recording(tmp_path, "simple/torch.json", "nan-size")
    r = run_cli("-C", str(REPO), "refresh-compat", "--offline", str(root), "--releases", "2.12", "--no-arch")
    assert r.exit_code in (0, 2), r.stderr  # int(nan) was a ValueError traceback


def test_a_report_json_that_is_a_fifo_is_one_error(run_cli: Run, tmp_path: Path) -> None:
    reports = tmp_path / "reports" / "run1"
    reports.mkdir(parents=True)
    os.mkfifo(reports / "report.json")
    with _deadline(20):
        error, _ = _one_error(
            run_cli("-C", str(REPO), "release", "--reports", str(tmp_path / "reports"), "--dry-run"), 2
        )
    assert "FIFO" in error  # was an AssertionError traceback


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("[" * 100000 + "]" * 100000, "nested"),
        ("[]", "not a docker config"),
        ('{"auths": []}', "not a docker config"),
        ('{"auths": {}, "n": ' + "9" * 5000 + "}", "more than any real value"),
    ],
    ids=["deep", "list", "auths-list", "huge-int"],
)
def test_a_hostile_docker_config_is_one_error(tmp_path: Path, body: str, words: str) -> None:
    from imagesmith.credentials import DockerConfigProvider
    from imagesmith.errors import RegistryError

    (tmp_path / "config.json").write_text(body)
    with pytest.raises(RegistryError, match=words):  # were RecursionError / AttributeError tracebacks
        DockerConfigProvider({"DOCKER_CONFIG": str(tmp_path)}).get("127.0.0.1:5443")


@pytest.mark.parametrize("kind", ["deep", "fifo"])
def test_a_hostile_trust_record_is_one_error(tmp_path: Path, kind: str) -> None:
    from imagesmith.errors import IndexTrustError
    from imagesmith.indextrust import TrustStore

    store = TrustStore(tmp_path, "https://example.invalid/index.json")
    if kind == "fifo":
        os.mkfifo(store.path)
    else:
        store.path.write_text("[" * 100000 + "]" * 100000)
    with _deadline(20), pytest.raises(IndexTrustError, match="trust record"):  # RecursionError; blocked
        store.data()


@pytest.mark.parametrize(
    "source", ["oci://bad_host!/x/y:idx", "oci://127.0.0.1:５000/x/y:idx", "oci://h.example/X/y"]
)
def test_a_malformed_oci_index_source_is_a_bad_flag(run_cli: Run, source: str) -> None:
    error, _ = _one_error(run_cli("index", source), 2)  # was exit 9 (a registry's failure) or a network try
    assert "--index" in error


@pytest.mark.parametrize("value", ["²", "٣", "9" * 30])
def test_shm_min_bytes_from_the_environment_is_ascii_bytes(
    run_cli: Run, monkeypatch: Any, tmp_path: Path, value: str
) -> None:
    monkeypatch.setenv("IMAGESMITH_SHM_MIN_BYTES", value)  # "²" was a ValueError traceback, "٣" 3 bytes
    error, _ = _one_error(run_cli("validate", "--report", str(tmp_path / "r"), "--select", "x"), 2)
    assert "IMAGESMITH_SHM_MIN_BYTES" in error
    assert not (tmp_path / "r").exists()  # nothing half-written
