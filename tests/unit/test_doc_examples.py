"""Every ``imagesmith pick …`` / ``imagesmith compat …`` line in a code block of README.md and docs/*.md
runs as written (from the repository root, in-process) and exits as its ``# exit N`` comment says (0 when
none).

The sample inputs they use ship in docs/examples/ (issue 12, item 14): a release index and nvidia-smi
captures.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.repo import REPO

EXAMPLE_INDEX = REPO / "docs" / "examples" / "release-index.json"
_COMMAND = re.compile(r"^(?:\$\s+)?((?:[A-Z_][A-Z0-9_]*=\S+\s+)*)imagesmith\s+(pick|compat)\b(.*)$")


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of fenced code blocks and 4-space indented blocks."""
    out: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            out.append((n, line.strip()))
    return out


def _examples() -> list[Any]:
    found = []
    for md in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for n, line in _code_lines(md.read_text(encoding="utf-8")):
            m = _COMMAND.match(line)
            if not m:
                continue
            env = dict(a.split("=", 1) for a in m.group(1).split())
            words = shlex.split(f"{m.group(2)} {m.group(3)}", comments=True)
            code = re.search(r"#\s*exit (\d+)", m.group(3))
            where = f"{md.relative_to(REPO)}:{n}"
            found.append(pytest.param(env, words, int(code.group(1)) if code else 0, id=where))
    return found


EXAMPLES = _examples()


def test_the_docs_have_runnable_pick_and_compat_examples() -> None:
    ids = [p.id for p in EXAMPLES]
    assert any(i.startswith("README.md:") for i in ids)
    commands = [p.values[1][0] for p in EXAMPLES]
    assert commands.count("pick") >= 10
    assert commands.count("compat") >= 5
    assert {p.values[2] for p in EXAMPLES} >= {0, 1, 2, 3, 10}


@pytest.mark.parametrize(("env", "argv", "code"), EXAMPLES)
def test_doc_example_exits_as_documented(
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    env: dict[str, str],
    argv: list[str],
    code: int,
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    res = run_cli(*argv)
    assert res.exit_code == code, f"{shlex.join(argv)}\n{res.stdout}\n{res.stderr}"
    assert "Traceback" not in res.stderr
    if code:
        assert "error:" in res.stderr or res.stdout  # compat's "not compatible" is a verdict on stdout


def test_the_sample_index_is_valid() -> None:
    import jsonschema

    from imagesmith.index import dump_index, load_index

    schema = json.loads((REPO / "docs" / "schemas" / "release-index.schema.json").read_text())
    doc = json.loads(EXAMPLE_INDEX.read_text())
    jsonschema.validate(doc, schema)
    index = load_index(EXAMPLE_INDEX)  # imagesmith index's checks (digests, drivers, fields)
    assert dump_index(index) == EXAMPLE_INDEX.read_text()  # canonical, as imagesmith release writes it
    assert len(index.images) >= 4
    # issue 17: the publisher's registry hosts, and every copy on one of them (pick skips any other)
    assert index.registries == ("docker.io", "ghcr.io", "registry.cn-hangzhou.aliyuncs.com")
    assert {c.host for image in index.images for c in image.registries} == set(index.registries)


# ------------------------------------------------------------------------------------------ README (issue 40)
README = REPO / "README.md"
_ANY_COMMAND = re.compile(r"^(?:\$\s+)?imagesmith\s+([a-z][a-z-]*)\b(.*)$")


def _readme_commands() -> list[tuple[int, list[str]]]:
    out = []
    for n, line in _code_lines(README.read_text(encoding="utf-8")):
        m = _ANY_COMMAND.match(line)
        if m:
            out.append((n, shlex.split(f"{m.group(1)} {m.group(2)}", comments=True)))
    return out


def _console_blocks() -> list[tuple[int, list[str], list[str]]]:
    """(line, argv, shown output lines) of each ``$ imagesmith …`` in a ```console block of the README."""
    blocks: list[tuple[int, list[str], list[str]]] = []
    inside = False
    for n, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            inside = line.strip() == "```console"
            continue
        if not inside:
            continue
        if line.startswith("$ imagesmith "):
            blocks.append((n, shlex.split(line[len("$ imagesmith ") :], comments=True), []))
        elif blocks:
            blocks[-1][2].append(line)
    return blocks


def test_the_readme_is_short_and_shows_a_picture_of_its_own_evidence() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert pictures, "the README shows at least one picture"
    for pic in pictures:
        path = REPO / pic
        assert path.is_file(), pic
        assert path.suffix == ".png", pic
        assert path.relative_to(REPO).parts[:2] == ("docs", "evidence"), (
            f"{pic}: not the project's own evidence"
        )
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", pic
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (REPO / link).exists(), f"README links to {link}, which does not exist"


def test_every_command_the_readme_shows_is_a_real_command_with_real_flags() -> None:
    """pick/compat lines run (above); every other command line parses against the CLI as written (flags that
    exist, values of the right type), so the README cannot show a flag that was renamed."""
    import click
    import typer

    from imagesmith.cli import app

    root: Any = typer.main.get_command(app)
    commands = _readme_commands()
    assert {argv[0] for _, argv in commands} >= {
        "pick",
        "compat",
        "init",
        "plan",
        "build",
        "validate",
        "release",
    }
    for n, argv in commands:
        cmd = root.get_command(click.Context(root), argv[0])
        assert cmd is not None, f"README.md:{n}: no command {argv[0]!r}"
        cmd.make_context(argv[0], list(argv[1:]), resilient_parsing=False)


def test_the_readme_init_and_plan_commands_run(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    by_name = {argv[0]: argv for _, argv in _readme_commands()}
    init = by_name["init"]
    res = run_cli(*[str(tmp_path / a) if a == "my-images" else a for a in init])
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "my-images" / "imagesmith.toml").is_file()
    res = run_cli("-C", str(REPO), *by_name["plan"])
    assert res.exit_code == 0, res.stderr


@pytest.mark.parametrize(
    ("line", "argv", "shown"), [pytest.param(*b, id=f"README.md:{b[0]}") for b in _console_blocks()]
)
def test_the_output_the_readme_shows_is_what_the_command_prints(
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    line: int,
    argv: list[str],
    shown: list[str],
) -> None:
    """Each shown line is printed, in that order; ``…`` stands for lines left out."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    res = run_cli(*argv)
    assert res.exit_code == 0, res.stderr
    printed = res.stdout.splitlines()
    at = 0
    for want in shown:
        if want.strip() in ("…", "..."):
            continue
        try:
            at = printed.index(want, at) + 1
        except ValueError:
            raise AssertionError(
                f"README.md:{line}: not printed (in this order): {want!r}\n{res.stdout}"
            ) from None
