"""Issue 31: the release command's layer — a typed request, the flag rules in one place
(:func:`prepare_release`, in a fixed order, before the project is locked), and the run it hands the release
(:func:`release_for`), called without the CLI."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.errors import ConfigError, RegistryError
from imagesmith.release import request as release_request
from imagesmith.release.request import PreparedRelease, ReleaseRequest, prepare_release, release_for


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IMAGESMITH_SIGNING_KEY", raising=False)
    monkeypatch.delenv("IMAGESMITH_VERIFY", raising=False)


def _key(tmp_path: Path, name: str) -> tuple[Path, signing.SigningKey]:
    private = tmp_path / f"{name}.key"
    return private, signing.write_keypair(private, tmp_path / f"{name}.pub", "ed25519")


def test_a_request_without_keys_is_accepted_as_it_is() -> None:
    assert prepare_release(ReleaseRequest(reports=(Path("reports"),))) == PreparedRelease(verify="head")


def test_the_keys_are_read_and_the_verify_level_taken(tmp_path: Path) -> None:
    _, trusted = _key(tmp_path, "runner")
    sign_file, current = _key(tmp_path, "index")
    new_file, new = _key(tmp_path, "next")
    p = prepare_release(
        ReleaseRequest(
            trusted_keys=(tmp_path / "runner.pub",), sign_key=sign_file, rotate_to=new_file, verify="FULL"
        )
    )
    assert [k.fingerprint for k in p.trusted] == [trusted.public.fingerprint]
    assert p.sign_key is not None
    assert p.sign_key.public.fingerprint == current.public.fingerprint
    assert p.rotate_to is not None
    assert p.rotate_to.public.fingerprint == new.public.fingerprint
    assert p.verify == "full"


def test_the_signing_key_and_the_level_come_from_the_settings_without_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sign_file, current = _key(tmp_path, "index")
    other_file, _ = _key(tmp_path, "other")
    monkeypatch.setenv("IMAGESMITH_SIGNING_KEY", str(sign_file))
    monkeypatch.setenv("IMAGESMITH_VERIFY", "read")
    p = prepare_release(ReleaseRequest())
    assert p.sign_key is not None
    assert p.sign_key.public.fingerprint == current.public.fingerprint
    assert p.verify == "read"
    flagged = prepare_release(ReleaseRequest(sign_key=other_file, verify="head"))  # the flags win
    assert flagged.sign_key is not None
    assert flagged.sign_key.public.fingerprint != current.public.fingerprint
    assert flagged.verify == "head"


def test_an_index_file_that_cannot_be_written_is_refused_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        prepare_release(ReleaseRequest(index_file=tmp_path))
    assert info.value.message == f"--index-file {tmp_path}: is a folder"


def test_a_trusted_key_that_is_no_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runner.pub").write_text("not a key\n")
    with pytest.raises(ConfigError) as info:
        prepare_release(ReleaseRequest(trusted_keys=(tmp_path / "runner.pub",)))
    assert str(tmp_path / "runner.pub") in info.value.message


def test_a_sign_key_that_is_no_private_key_is_refused(tmp_path: Path) -> None:
    _key(tmp_path, "index")
    with pytest.raises(ConfigError):
        prepare_release(ReleaseRequest(sign_key=tmp_path / "index.pub"))


def test_rotate_to_needs_the_current_signing_key(tmp_path: Path) -> None:
    new_file, _ = _key(tmp_path, "next")
    with pytest.raises(ConfigError) as info:
        prepare_release(ReleaseRequest(rotate_to=new_file))
    assert info.value.message.startswith("--rotate-to needs --sign-key (or $IMAGESMITH_SIGNING_KEY)")
    assert info.value.hint == "pass --sign-key CURRENT.key --rotate-to NEW.key"


def test_rotate_to_the_signing_key_itself_is_refused(tmp_path: Path) -> None:
    sign_file, _ = _key(tmp_path, "index")
    with pytest.raises(ConfigError) as info:
        prepare_release(ReleaseRequest(sign_key=sign_file, rotate_to=sign_file))
    assert info.value.message == f"--rotate-to {sign_file}: the same key as --sign-key"


def test_an_unknown_verify_level_is_refused_as_the_copies_refuse_it() -> None:
    with pytest.raises(RegistryError) as info:
        prepare_release(ReleaseRequest(verify="sometimes"))
    assert info.value.message == "verify level 'sometimes' is not one of head, read, full"


def test_the_rules_hold_in_their_order(tmp_path: Path) -> None:
    """--index-file, then the trusted keys, the signing key, --rotate-to, --verify: with every flag bad, each
    error in turn, as the earlier flag is made good."""
    (tmp_path / "bad.pub").write_text("not a key\n")
    sign_file, _ = _key(tmp_path, "index")
    bad = ReleaseRequest(
        index_file=tmp_path,
        trusted_keys=(tmp_path / "bad.pub",),
        sign_key=tmp_path / "bad.pub",
        rotate_to=sign_file,
        verify="sometimes",
    )
    seen = []
    for fix in (
        {"index_file": tmp_path / "index.json"},
        {"trusted_keys": ()},
        {"sign_key": None},
        {"rotate_to": None},
    ):
        with pytest.raises((ConfigError, RegistryError)) as info:
            prepare_release(bad)
        seen.append(info.value.message.split(":")[0])
        bad = replace(bad, **fix)
    with pytest.raises(RegistryError):
        prepare_release(bad)
    assert seen[0] == "--index-file " + str(tmp_path)
    assert seen[1] == f"{tmp_path / 'bad.pub'} is not a PEM public key"  # --trusted-key
    assert seen[2].startswith(f"the signing key {tmp_path / 'bad.pub'}")  # --sign-key
    assert seen[3] == "--rotate-to needs --sign-key (or $IMAGESMITH_SIGNING_KEY)"


class _Project:
    release_index_file = Path("release/index.json")

    def resolve_matrix_name(self, matrix: str | None) -> str:
        return f"matrices/{matrix or 'default'}.toml"


def test_release_for_hands_the_request_and_what_was_prepared_to_the_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []
    outcome: Any = object()

    def release_matrix(matrix: str, **kw: Any) -> Any:
        calls.append((matrix, kw))
        return outcome

    monkeypatch.setattr(release_request, "release_matrix", release_matrix)
    project: Any = _Project()
    request = ReleaseRequest(
        reports=(Path("r1"), Path("r2")),
        matrix="a100",
        only=("*cu130*",),
        dry_run=True,
        registries=Path("registries.toml"),
        extend_from="ghcr",
        scan_reports=(Path("scans"),),
    )
    prepared = PreparedRelease(verify="read")
    assert release_for(request, prepared, project=project) is outcome
    ((matrix, kw),) = calls
    assert matrix == "matrices/a100.toml"
    assert (kw["report_dirs"], kw["only"], kw["dry_run"]) == ((Path("r1"), Path("r2")), ("*cu130*",), True)
    assert (kw["index_file"], kw["registries_file"], kw["extend_from"]) == (
        Path("release/index.json"),  # the project's, without --index-file
        Path("registries.toml"),
        "ghcr",
    )
    assert (kw["verify"], kw["trusted"], kw["sign_key"], kw["rotate_to"]) == ("read", (), None, None)
    assert (kw["scan_dirs"], kw["project"]) == ((Path("scans"),), project)
    release_for(replace(request, index_file=Path("out.json")), prepared, project=project)
    assert calls[1][1]["index_file"] == Path("out.json")


def test_the_command_checks_its_flags_before_it_looks_for_the_project(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``imagesmith release`` runs :func:`prepare_release` first: a bad flag is said even where no project is
    (before, the missing imagesmith.toml hid it; the keys were read only once the project was locked)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IMAGESMITH_PROJECT", raising=False)
    new_file, _ = _key(tmp_path, "next")
    result = run_cli("release", "--reports", "r", "--rotate-to", str(new_file))
    assert result.exit_code == 2
    assert "error: --rotate-to needs --sign-key" in result.stderr
    assert not list(tmp_path.rglob("*.lock"))
