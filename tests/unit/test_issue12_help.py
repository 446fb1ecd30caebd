"""Issue 12, item 15: every command's help has an example and its exit statuses; flags show no `<bool>`;
`imagesmith-validate --help` shows a usage that works; --nccl-rounds is documented; `release --reports` is
required; `plan --explain` with `--github` is refused, not ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from imagesmith import cli

Run = Callable[..., Any]

# pick's help belongs to the pick work (issue 12 items 8-12, 14, 16): not checked here
COMMANDS = [
    "init",
    "compat",
    "plan",
    "render",
    "lock",
    "build",
    "fetch-sources",
    "validate",
    "release",
    "candidates",
    "index",
    "schema",
]


def _help(run_cli: Run, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", "300")
    result = run_cli(*args, "--help")
    assert result.exit_code == 0, result.stderr
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stdout).split())


def test_the_root_help_lists_every_command(run_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _help(run_cli, monkeypatch)
    for name in [*COMMANDS, "pick"]:
        assert f" {name} " in text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_has_an_example_and_exit_statuses(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    text = _help(run_cli, monkeypatch, command)
    examples = text.split("Examples: ", 1)[1]
    assert examples.startswith(("imagesmith ", "nvidia-smi ")), examples[:80]
    statuses = text.split("Exit status: ", 1)[1]
    assert "0 = " in statuses
    assert "2 = " in statuses


@pytest.mark.parametrize("command", [*COMMANDS, "pick"])
def test_flags_show_no_bool_type(run_cli: Run, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    assert "<bool>" not in _help(run_cli, monkeypatch, command)


def test_nccl_rounds_is_documented(run_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _help(run_cli, monkeypatch, "validate")
    assert re.search(r"--nccl-rounds <int range> \S+ Times all_reduce_perf runs", text), text


def test_imagesmith_validate_usage_works(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    assert cli.validate_main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Usage: imagesmith-validate [OPTIONS] [TARGET]" in out
    assert "imagesmith-validate validate" not in out
    # and a usage error names the program as it is called
    assert cli.validate_main(["--no-such-flag"]) == 2
    err = capsys.readouterr().err
    assert "see `imagesmith-validate --help`" in err


def test_release_reports_is_required(run_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    assert re.search(r"\* --reports", _help(run_cli, monkeypatch, "release"))
    result = run_cli("release", "--dry-run")
    assert result.exit_code == 2
    assert "Missing option '--reports'" in result.stderr


def test_plan_explain_with_github_is_refused(run_cli: Run) -> None:
    result = run_cli("plan", "--github", "--explain")
    assert result.exit_code == 2
    assert "--explain does not apply to --github" in result.stderr
    assert result.stdout == ""


def test_usage_errors_are_one_error_and_one_fix_line(run_cli: Run) -> None:
    result = run_cli("plan", "--no-such-flag")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "error: No such option: --no-such-flag"
    assert lines[1].startswith("  fix: see `imagesmith plan --help`")
    assert len(lines) == 2
