"""The CLI's click command is built once per process (issue 31: typer rebuilt it from every command's
signature on each ``main()`` call, most of an in-process run's time); later calls still refuse bad raw values
(the hardening stays on the one command) and carry nothing over from the call before."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from imagesmith import cli


def test_main_builds_the_click_command_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    built: list[Any] = []
    real = typer.main.get_command

    def counting(application: typer.Typer) -> Any:
        built.append(application)
        return real(application)

    monkeypatch.setattr(typer.main, "get_command", counting)
    monkeypatch.setattr(cli, "_CLICK_COMMANDS", {}, raising=False)
    for _ in range(3):
        assert cli.main(["keygen", "k", "--public", ""]) == 2
        assert "--public is empty" in capsys.readouterr().err
    assert cli.main(["schema", "--help"]) == 0
    assert built == [cli.app]


def test_each_call_parses_its_own_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """A value given to one call is not a default of the next (click makes a new context for each)."""
    argv = ["compat", "--gpu", "a100", "--torch", "2.1.2", "--driver"]
    assert cli.main([*argv, "535.104.05"]) == 0
    first = capsys.readouterr().out
    assert "driver 535.104.05: full compatibility" in first
    assert cli.main([*argv, "470.57.02"]) != 0
    assert "driver 470.57.02: it will not run" in capsys.readouterr().out
    assert cli.main([*argv, "535.104.05"]) == 0
    assert capsys.readouterr().out == first


def test_the_validate_program_has_its_own_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.validate_main(["--help"]) == 0
    assert "imagesmith-validate [OPTIONS]" in capsys.readouterr().out
    assert cli.main(["--help"]) == 0
    assert "Usage: imagesmith [OPTIONS] COMMAND" in capsys.readouterr().out
    assert cli.validate_main(["--shm-min", ""]) == 2
    assert "--shm-min is empty" in capsys.readouterr().err
