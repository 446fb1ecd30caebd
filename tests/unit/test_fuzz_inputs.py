"""Property-based tests (issue 12): whatever text reaches imagesmith's input parsers — nvidia-smi output,
matrix files, registries files, imagesmith.toml, the user config (file and environment), the release index, a
validation report — the answer is a result or one of imagesmith's errors with a message and a non-empty fix,
never another exception.

Inputs are real samples mutated as text (bytes inserted, deleted, replaced) and as structure (a value swapped
for any other TOML/JSON value, a key dropped or added), plus free text. CI runs a few examples per target
(``IMAGESMITH_FUZZ_EXAMPLES``, default 25); a long run: ``IMAGESMITH_FUZZ_EXAMPLES=2000 pytest
tests/unit/test_fuzz_inputs.py``.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from imagesmith import nvsmi
from imagesmith.config import load_config
from imagesmith.errors import ImagesmithError
from imagesmith.index import SCHEMA, parse_index
from imagesmith.matrix import load_matrix, load_registries
from imagesmith.project import load_project
from imagesmith.validate.listing import load_listing
from imagesmith.validate.record import ValidationReport
from tests.repo import PROJECT, REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXAMPLES = int(os.environ.get("IMAGESMITH_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

NVSMI_SAMPLES = [
    p.read_text(encoding="utf-8", errors="replace")
    for d in (REPO / "tests" / "data" / "nvsmi", REPO / "tests" / "data" / "pick")
    for p in sorted(d.iterdir())
    if p.suffix in (".txt", ".csv")
]
SMOKE = (REPO / "matrices" / "smoke.toml").read_text(encoding="utf-8")
REGISTRIES = (REPO / "matrices" / "registries.toml").read_text(encoding="utf-8")
PROJECT_TOML = (REPO / "imagesmith.toml").read_text(encoding="utf-8")
CONFIG_TOML = (
    '[registry_mirrors]\n"docker.io" = "mirror.example/dockerhub"\n\n'
    '[sources]\nmirrors = ["https://mirror.example/{url}"]\n'
)
REPORT = (REPO / "docs" / "evidence" / "h200x2-host" / "report.json").read_text(encoding="utf-8")
D1 = "sha256:" + "a" * 64
INDEX = {
    "schema": SCHEMA,
    "generated": "2026-11-28T03:00:00Z",
    "images": [
        {
            "tag": "2.5.1-cu124-py3.11",
            "matrix": "h100",
            "cell": "torch2.5.1-cu124-py3.11-ubuntu22.04-runtime",
            "digest": D1,
            "registries": [
                {"name": "ghcr", "kind": "ghcr", "reference": "ghcr.io/acme/pytorch:2.5.1", "digest": D1}
            ],
            "torch": "2.5.1",
            "torchvision": "0.20.1",
            "cuda": "12.4",
            "python": "3.11",
            "min_driver": {"full": "550.54.14", "minor": "525.60.13"},
            "arch": ["5.0", "8.0", "9.0"],
            "shm": {"size": "16g", "ipc_host": False},
            "validated_on": [
                {
                    "gpu": "NVIDIA H100 80GB HBM3",
                    "count": 8,
                    "driver": "550.90.07",
                    "date": "2026-11-28",
                    "report_digest": "sha256:" + "b" * 64,
                }
            ],
            "fingerprint": "f" * 16,
            "released": "2026-11-28T03:00:00Z",
        }
    ],
}

# ------------------------------------------------------------------------------------------ strategies

_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)  # no surrogates
_HOSTILE = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "\x1b[31m",
        "\r\n",
        "..",
        "/",
        "-1",
        "0",
        "1e309",
        "nan",
        "9" * 40,
        "é" * 300,
        "a" * 5000,
        # issue 27: integers past Python's int-string limit (4300 digits) and past 64 bits, non-ASCII digits
        "9" * 5000,
        "-" + "1" * 4400,
        "9" * 25,
        "५३५",
    ]
)


def _mutated(samples: list[str]) -> st.SearchStrategy[str]:
    """A sample with up to 6 edits (replace a span by hostile or random text), or free text."""

    def edit(sample: str) -> st.SearchStrategy[str]:
        span = st.tuples(st.integers(0, len(sample)), st.integers(0, 12), st.one_of(_TEXT, _HOSTILE))

        def apply(edits: list[tuple[int, int, str]]) -> str:
            text = sample
            for at, cut, new in edits:
                at = min(at, len(text))
                text = text[:at] + new + text[at + cut :]
            return text

        return st.lists(span, max_size=6).map(apply)

    return st.one_of(
        st.sampled_from(samples).flatmap(edit),
        st.sampled_from(samples).flatmap(_huge_number),
        _TEXT,
        _HOSTILE,
    )


_HUGE = st.sampled_from(["9" * 5000, "1" * 4301, "9" * 20, "18446744073709551616", "-" + "9" * 4400])


def _huge_number(sample: str) -> st.SearchStrategy[str]:
    """*sample* with one of its numbers (a run of digits: memory, an index, a version part, a TOML integer)
    made huge (issue 27: every number parsed from a file)."""
    runs = [m.span() for m in re.finditer(r"[0-9]+", sample)]
    if not runs:
        return st.just(sample)
    return st.tuples(st.sampled_from(runs), _HUGE).map(lambda p: sample[: p[0][0]] + p[1] + sample[p[0][1] :])


_SCALARS = st.one_of(
    _TEXT,
    _HOSTILE,
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=6,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def _restructured(draw: st.DrawFn, seed: dict[str, Any]) -> dict[str, Any]:
    """*seed* with up to 3 changes: a node replaced by any value, a key dropped, an unknown key added."""
    doc = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            continue
        parent: Any = doc
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(_VALUES)
        elif action == "drop":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(_TEXT)] = draw(_VALUES)
        else:
            parent.append(draw(_VALUES))
    return doc


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"


def _toml(doc: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(str(k))} = {_toml_value(v)}\n" for k, v in doc.items())


def _toml_inputs(sample: str) -> st.SearchStrategy[str]:
    return st.one_of(_mutated([sample]), _restructured(tomllib.loads(sample)).map(_toml))


def _json_inputs(seed: dict[str, Any]) -> st.SearchStrategy[str]:
    return st.one_of(_mutated([json.dumps(seed, indent=1)]), _restructured(seed).map(json.dumps))


# ------------------------------------------------------------------------------------------ the property


def _event(name: str) -> None:
    if currently_in_test_context():
        event(name)


def _result_or_fix(call: Callable[[], Any]) -> None:
    """*call* returns, or raises an ImagesmithError with a message and a fix; anything else fails the test."""
    try:
        call()
    except ImagesmithError as exc:
        _event(type(exc).__name__)  # --hypothesis-show-statistics: how far the inputs got
        name = type(exc).__name__
        problem = None if exc.message.strip() else f"{name} without a message"
        problem = problem or (None if exc.hint else f"{name} without a fix: {exc.message}")
    else:
        _event("accepted")
        problem = None
    assert problem is None, problem


def _in_file(name: str, text: str, call: Callable[[Path], Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="imagesmith-fuzz-") as tmp:
        path = Path(tmp) / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        _result_or_fix(lambda: call(path))


# ------------------------------------------------------------------------------------------ targets


@FUZZ
@given(text=_mutated(NVSMI_SAMPLES))
def test_fuzz_nvidia_smi_parsers(text: str) -> None:
    _result_or_fix(lambda: nvsmi.parse(text, "fuzz"))
    _result_or_fix(lambda: nvsmi.parse_table(text, "fuzz"))
    _result_or_fix(lambda: nvsmi.parse_list(text, "fuzz"))
    _result_or_fix(lambda: nvsmi.parse_query_csv(text, "fuzz"))
    _result_or_fix(lambda: nvsmi.parse_query_csv(text, "fuzz", fields=["index", "name", "memory.total"]))


@FUZZ
@given(text=_toml_inputs(SMOKE))
def test_fuzz_matrix_loader(text: str) -> None:
    registries = REPO / "matrices" / "registries.toml"
    _in_file("smoke.toml", text, lambda p: load_matrix(p, project=PROJECT, registries_file=registries))


@FUZZ
@given(text=_toml_inputs(REGISTRIES))
def test_fuzz_registries_loader(text: str) -> None:
    _in_file("registries.toml", text, load_registries)


@FUZZ
@given(text=_toml_inputs(PROJECT_TOML))
def test_fuzz_project_loader(text: str) -> None:
    _in_file("imagesmith.toml", text, load_project)


def _listing_sample() -> str:
    return (REPO / "docs" / "examples" / "listing.toml").read_text(encoding="utf-8")


@FUZZ
@given(text=_toml_inputs(_listing_sample()))
def test_fuzz_listing(text: str) -> None:
    """A rental's listing (issue 33, ``validate --listing``): any mutation is a listing or one error."""
    _in_file("listing.toml", text, load_listing)


@FUZZ
@given(
    text=_toml_inputs(CONFIG_TOML),
    mirrors=st.one_of(_TEXT, _HOSTILE),
    sources=st.one_of(_TEXT, _HOSTILE),
    ca=st.one_of(st.just(""), _TEXT, _HOSTILE),
)
def test_fuzz_user_config(text: str, mirrors: str, sources: str, ca: str) -> None:
    def load(path: Path) -> Any:
        env = {
            "IMAGESMITH_CONFIG": str(path),
            "IMAGESMITH_REGISTRY_MIRRORS": mirrors,
            "IMAGESMITH_SOURCE_MIRRORS": sources,
            "IMAGESMITH_EXTRA_CA": ca.replace("\x00", ""),  # an environment cannot hold NUL
        }
        return load_config(env)

    _in_file("config.toml", text, load)


@FUZZ
@given(text=_json_inputs(INDEX))
def test_fuzz_release_index(text: str) -> None:
    _result_or_fix(lambda: parse_index(text, source="fuzz"))
    _result_or_fix(lambda: parse_index(text.encode("utf-8", "surrogatepass"), source="fuzz"))


@FUZZ
@given(text=_json_inputs(json.loads(REPORT)))
def test_fuzz_validation_report(text: str) -> None:
    _result_or_fix(lambda: ValidationReport.parse(text.encode("utf-8", "surrogatepass"), source="fuzz"))


def test_the_seeds_are_accepted() -> None:  # so that mutations start from inputs that get all the way through
    parse_index(json.dumps(INDEX), source="seed")
    ValidationReport.parse(REPORT.encode(), source="seed")
    nvsmi.parse(
        (REPO / "tests/data/nvsmi/real_580.159.04_h200_default.txt").read_text(encoding="utf-8"), "seed"
    )


@FUZZ
@given(body=st.binary(max_size=200))
def test_fuzz_binary_bytes(body: bytes) -> None:
    _result_or_fix(lambda: ValidationReport.parse(body, source="fuzz"))
    _result_or_fix(lambda: parse_index(body, source="fuzz"))


LOCK_NAME = "2.11.0-cu130-py3.11.txt"
LOCK_TEXT = (PROJECT.locks_dir / LOCK_NAME).read_text(encoding="utf-8")


def _read_lock_file(data: bytes) -> None:
    from imagesmith.lock import LockKey, read_lock

    with tempfile.TemporaryDirectory(prefix="imagesmith-fuzz-") as tmp:
        (Path(tmp) / LOCK_NAME).write_bytes(data)
        _result_or_fix(lambda: read_lock(LockKey(torch="2.11.0", variant="cu130", python="3.11"), Path(tmp)))


@FUZZ
@given(text=_mutated([LOCK_TEXT]))
def test_fuzz_lock_file(text: str) -> None:
    """Lock files (input-recheck): a hand-edited lock is read by every plan of the project."""
    _read_lock_file(text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(body=st.one_of(st.binary(max_size=200), st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\xe9"])))
def test_fuzz_binary_user_files(body: bytes) -> None:
    """Bytes that are not UTF-8 (a BOM, UTF-16, Latin-1) in every file a user edits (they crashed the lock
    reader)."""
    seed = body + LOCK_TEXT.encode()[: len(body) % 64]
    _read_lock_file(seed)
    for name, call in (
        ("smoke.toml", lambda p: load_matrix(p, project=PROJECT, registries_file=PROJECT.registries_file)),
        ("registries.toml", load_registries),
        ("imagesmith.toml", load_project),
        ("config.toml", lambda p: load_config({"IMAGESMITH_CONFIG": str(p)})),
    ):
        with tempfile.TemporaryDirectory(prefix="imagesmith-fuzz-") as tmp:
            path = Path(tmp) / name
            path.write_bytes(seed)
            _result_or_fix(functools.partial(call, path))


# what long runs found (kept as plain tests): paths longer than the file system allows raised OSError


def test_a_default_matrix_name_too_long_for_the_file_system(tmp_path: Path) -> None:
    (tmp_path / "imagesmith.toml").write_text(
        f'schema = 1\ndefault_matrix = "{"é" * 300}"\n', encoding="utf-8"
    )
    _result_or_fix(lambda: load_project(tmp_path / "imagesmith.toml"))


def test_an_extra_ca_path_too_long_for_the_file_system(tmp_path: Path) -> None:
    env = {"IMAGESMITH_CONFIG": str(tmp_path / "none.toml"), "IMAGESMITH_EXTRA_CA": "é" * 300}
    _result_or_fix(lambda: load_config(env))


# ------------------------------------------------------------------------------ issue 27: the CLI edge

#: every flag that names a file imagesmith reads, with the rest of a command line that gets that far
FILE_FLAGS: list[list[str]] = [
    ["compat", "--torch", "2.5.1", "--cuda", "12.4", "--nvidia-smi", "{path}"],
    ["pick", "--index", "{path}", "--driver", "535.104.05", "--gpu", "a100"],
    ["pick", "--index", str(REPO / "docs/examples/release-index.json"), "--nvidia-smi", "{path}"],
    ["pick", "--index", str(REPO / "docs/examples/release-index.json"), "--verify-key", "{path}"],
    ["index", "{path}"],
    ["index", str(REPO / "docs/examples/release-index.json"), "--verify-key", "{path}"],
    ["validate", "--baseline", "{path}"],
    ["plan", "--matrix", "{path}.toml"],
    [
        "-C",
        str(REPO),
        "release",
        "--matrix",
        "smoke",
        "--reports",
        "{dir}",
        "--registries",
        "{path}",
        "--dry-run",
    ],
    [
        "-C",
        str(REPO),
        "release",
        "--matrix",
        "smoke",
        "--reports",
        "{dir}",
        "--trusted-key",
        "{path}",
        "--dry-run",
    ],
    [
        "-C",
        str(REPO),
        "release",
        "--matrix",
        "smoke",
        "--reports",
        "{dir}",
        "--sign-key",
        "{path}",
        "--dry-run",
    ],
    ["-C", str(REPO), "build", "--matrix", "smoke", "--extra-ca", "{path}"],
    ["-C", str(REPO), "fetch-sources", "--from", "{path}"],
    ["-C", str(REPO), "candidates", "--matrix", "smoke", "--registries", "{path}"],
]


class _Blocked(BaseException):
    """A read that blocked (not an OSError: the CLI would turn a TimeoutError into exit 2)."""


def _cli_in_process(argv: list[str], seconds: int = 20) -> tuple[int, str]:
    import contextlib
    import io

    from imagesmith.cli import main

    def expired(*_: Any) -> None:
        raise _Blocked(f"{argv}: blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, err.getvalue()


@settings(FUZZ, max_examples=min(EXAMPLES, len(FILE_FLAGS) * 2))
@given(argv=st.sampled_from(FILE_FLAGS), kind=st.sampled_from(["fifo", "folder", "huge", "utf16"]))
def test_fuzz_every_file_flag_with_a_fifo_a_folder_or_a_huge_number(argv: list[str], kind: str) -> None:
    """Each file-reading flag given a FIFO (must not block: a deadline fails the test), a folder, a file of
    one 5000-digit number or a UTF-16 file: one error and one fix, exit neither 0 nor 1, no traceback."""
    with tempfile.TemporaryDirectory(prefix="imagesmith-fuzz-") as tmp:
        path = Path(tmp) / "input"
        if kind == "fifo":
            os.mkfifo(path)
            os.mkfifo(Path(tmp) / "input.toml")
        elif kind == "folder":
            path.mkdir()
            (Path(tmp) / "input.toml").mkdir()
        else:
            body = ("9" * 5000 + "\n") if kind == "huge" else "schema = 1\n"
            data = body.encode() if kind == "huge" else body.encode("utf-16")
            path.write_bytes(data)
            (Path(tmp) / "input.toml").write_bytes(b"x = " + data if kind == "huge" else data)
        (Path(tmp) / "reports").mkdir()
        args = [a.format(path=path, dir=Path(tmp) / "reports") for a in argv]
        code, err = _cli_in_process(args)
    if code == 0 and "fetch-sources" in args and kind != "fifo":
        return  # the pinned archive is cached already: --from is not read (not an error)
    assert code not in (0, 1), (args, code, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert sum(line.startswith("error:") for line in lines) == 1, err
    assert sum(line.strip().startswith("fix:") for line in lines) == 1, err


#: commands that print (stdout), each ending without a host, registry or network
PRINTING: list[list[str]] = [
    ["compat", "--driver", "535.104.05", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1"],
    ["compat", "--driver", "535.104.05", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1", "--json"],
    ["-C", str(REPO), "plan", "--matrix", "a100", "--explain"],
    ["-C", str(REPO), "plan", "--matrix", "a100", "--github"],
    [
        "pick",
        "--index",
        str(REPO / "docs/examples/release-index.json"),
        "--driver",
        "535.104.05",
        "--gpu",
        "a100",
    ],
    ["index", str(REPO / "docs/examples/release-index.json")],
    ["-C", str(REPO), "schema", "--check"],
    ["-C", str(REPO), "render", "--check", "--matrix", "smoke"],
    ["--help"],
    ["validate", "--help"],
    ["compat", "--driver", "535.104.05", "--gpu", "nosuchgpu", "--torch", "2.1.2"],
]


@settings(FUZZ, max_examples=min(EXAMPLES, 6))
@given(
    argv=st.sampled_from(PRINTING),
    encoding=st.sampled_from(["ascii", "latin-1", "utf-8"]),
    closed=st.booleans(),
)
def test_fuzz_output_to_a_closed_pipe_or_a_narrow_encoding(
    argv: list[str], encoding: str, closed: bool
) -> None:
    """A real process (pipes and encodings need one): output in ascii or latin-1 never raises
    UnicodeEncodeError; a reader that goes away (``| head -c 1``) ends it quietly with 0 or 141, never 1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESMITH_")}
    env.update(PYTHONIOENCODING=encoding, LC_ALL="C")
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagesmith", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    if closed:
        proc.stdout.read(1)
        proc.stdout.close()
    else:
        proc.stdout.read()
    err = proc.stderr.read().decode(errors="replace")
    code = proc.wait(timeout=120)
    assert "Traceback" not in err, err
    assert "UnicodeEncodeError" not in err, err
    assert code != 1, err
    if closed:
        assert code in (0, 2, 141), (code, err)


_NAMED_SETTINGS = [v.name for v in __import__("imagesmith.settings").settings.VARIABLES if not v.pattern]


def _controls(text: str) -> list[str]:
    import unicodedata

    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf") and c != "\n"]


@FUZZ
@given(name=st.sampled_from(_NAMED_SETTINGS), value=st.text(max_size=80).map(lambda t: t.replace("\x00", "")))
def test_fuzz_every_setting_value(name: str, value: str) -> None:
    """Any value of any declared setting is taken as it is, or refused with one ConfigError naming the
    variable whose message shows no raw control character; a value taken holds none and is not blank; the
    CLI's error line never prints one raw (issue 27 round 5)."""
    from imagesmith import settings as imagesmith_settings
    from imagesmith.cli import shown_plain
    from imagesmith.errors import ConfigError

    message = ""
    try:
        got = imagesmith_settings.get(name, env={name: value})
    except ConfigError as exc:
        message = exc.message
    if message:
        assert name in message
        assert not _controls(message), message
        assert "\n" not in message
    else:
        assert got == value
        assert value == "" or value.strip()
        assert not _controls(value)
        assert "\n" not in value
    assert not _controls(shown_plain(f"error: {value}"))
