"""Errors carry fields (issue 24): code decides on them, never on the text; the text is rendered once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagesmith.errors import ConfigError, CorruptBlobError, EngineError, Fault, RegistryError, Side


def test_a_copy_with_a_side_keeps_class_fix_and_fields_and_renders_the_side_in_front() -> None:
    exc = CorruptBlobError("registry r1 (h): blob x is corrupt: y", hint="repair", registry="r1", problem="y")
    sided = exc.replace(side="destination")
    assert type(sided) is CorruptBlobError
    assert sided.render() == ("destination registry r1 (h): blob x is corrupt: y", "repair")
    assert str(sided) == "destination registry r1 (h): blob x is corrupt: y\n  fix: repair"
    assert sided.fields() == {"registry": "r1", "side": "destination", "problem": "y"}
    assert exc.side is None  # the original is not changed
    with pytest.raises(TypeError, match="no field"):
        exc.replace(colour="red")


def test_appending_to_the_message_keeps_what_was_rendered() -> None:
    exc = RegistryError("registry r (h): x", side=Side.SOURCE)
    exc.message += "\n  (2 more)"
    assert exc.render() == ("source registry r (h): x\n  (2 more)", None)


def test_an_unknown_gpu_says_so_as_a_field() -> None:
    from imagesmith import compat

    with pytest.raises(ConfigError) as info:
        compat.gpu_or_adhoc("Quantum GPU 9000")
    assert info.value.fault == "unknown GPU"


def test_the_registry_an_error_is_about_decides_whether_build_names_the_target() -> None:
    from imagesmith.build import _where
    from imagesmith.refs import Registry

    target = Registry(name="r", host="r.example", repository="a/b")
    # the text happens to contain "r" (every word does): the field, not the text, says it is about another one
    other = RegistryError("registry primary (p.example): PUT manifest: denied", registry="primary")
    assert (
        _where(target, other) == "registry r (r.example): registry primary (p.example): PUT manifest: denied"
    )
    own = RegistryError("registry r (r.example): PUT manifest: denied", registry="r")
    assert _where(target, own) == own.message


class _Chain:
    def __init__(self) -> None:
        self.refreshed = 0

    def resolve(self) -> Any:
        from imagesmith.credentials import Credentials

        return Credentials("u", "old", origin="test", provider="docker config")

    def refresh(self, refused: Any) -> Any:
        from imagesmith.credentials import Credentials

        self.refreshed += 1
        return Credentials("u", "new", origin="test", provider="docker config")


class _Engine:
    def __init__(self, said: str) -> None:
        self.said, self.calls = said, 0

    def pull(self, reference: str, *, credentials: Any = None, progress: Any = None) -> str:
        self.calls += 1
        if self.calls == 1:
            raise EngineError(f"pull of {reference} failed: {self.said}", said=self.said)
        return "sha256:" + "e" * 64

    def inspect(self, reference: str) -> dict[str, Any]:
        return {"RepoDigests": [reference]}


@pytest.mark.parametrize(
    ("said", "refreshed"),
    [("unauthorized: authentication required", 1), ("dial tcp: i/o timeout", 0)],
)
def test_pull_refreshes_credentials_on_what_the_engine_said_not_on_the_reference(
    said: str, refreshed: int
) -> None:
    """A digest full of "401" and "403" no longer reads as a refusal: what the engine said decides."""
    from imagesmith.index import RegistryCopy
    from imagesmith.pick import _pull_one

    digest = "sha256:" + "401403" * 10 + "abcd"
    copy = RegistryCopy.parse(name="hub", kind="generic", reference="r.example/a/b:t", digest=digest)
    chain, engine = _Chain(), _Engine(said)
    if refreshed:
        _pull_one(copy, engine, chain, lambda _: None)  # type: ignore[arg-type]
    else:
        with pytest.raises(EngineError):
            _pull_one(copy, engine, chain, lambda _: None)  # type: ignore[arg-type]
    assert chain.refreshed == refreshed


def test_a_failed_check_is_a_pytest_failure_with_its_fields() -> None:
    from imagesmith.validate.context import CheckFailed, fail

    with pytest.raises(pytest.fail.Exception) as info:
        fail("GPU 0 is hot", "cool it")
    assert isinstance(info.value, CheckFailed)
    assert (info.value.what, info.value.fix) == ("GPU 0 is hot", "cool it")
    assert info.value.msg == "GPU 0 is hot\nfix: cool it"  # what pytest prints, as before


def test_a_file_error_names_its_file_and_field_as_fields(tmp_path: Any) -> None:
    from imagesmith.errors import MatrixError
    from imagesmith.matrix import load_registries

    path = tmp_path / "registries.toml"
    path.write_text('[registries.gl]\nhost = "ghcr.io"\nnamespace = "a"\nrepository = "b"\nkind = "nope"\n')
    with pytest.raises(MatrixError) as info:
        load_registries(path)
    assert (info.value.file, info.value.field) == (str(path), "registries.gl.kind")
    assert info.value.message.startswith(f"{path}: registries.gl.kind: ")  # the text as before


def test_an_error_whose_class_takes_other_arguments_is_copied_too() -> None:
    from imagesmith.registry import PromotionError, PromotionTarget

    target = PromotionTarget(name="r1", repo="a/b", client=None)  # type: ignore[arg-type]
    exc = PromotionError(step="put", target=target, tag="v1", digest="sha256:x", cause=RegistryError("down"))
    sided = exc.replace(side="destination")
    assert type(sided) is PromotionError
    assert (sided.step, sided.target, sided.side) == ("put", target, "destination")
    assert sided.message == "destination r1: a/b:v1: put failed: down"


# -- fault and side are enums (issue 31): what the type does not cover ---------------------------------------
#: the enum each field holds
ENUMS = {"fault": "Fault", "side": "Side"}


def _decisions(field: str) -> tuple[set[str], list[tuple[str, str]]]:
    """(the members of the field's enum imagesmith names outside decisions — raises, the registry's fault
    table —, the decisions on the field: where, and the member or literal it is compared with)."""
    import ast

    from tests import astcache
    from tests.repo import REPO

    enum = ENUMS[field]
    made: set[str] = set()
    decided: list[tuple[str, str]] = []
    for path in sorted((REPO / "imagesmith").rglob("*.py")):
        tree = astcache.parse(path.read_text(), str(path))
        in_decision: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                isinstance(s, ast.Attribute) and s.attr == field for s in [node.left, *node.comparators]
            ):
                for c in (c for s in [node.left, *node.comparators] for c in ast.walk(s)):
                    in_decision.add(id(c))
                    if isinstance(c, ast.Constant) and isinstance(c.value, str):
                        decided.append((f"{path.relative_to(REPO)}:{node.lineno}", repr(c.value)))
                    if isinstance(c, ast.Attribute) and isinstance(c.value, ast.Name) and c.value.id == enum:
                        decided.append((f"{path.relative_to(REPO)}:{node.lineno}", c.attr))
        for node in ast.walk(tree):
            is_member = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if is_member and node.value.id == enum and id(node) not in in_decision:  # type: ignore[attr-defined]
                made.add(node.attr)  # type: ignore[attr-defined]
    return made, decided


@pytest.mark.parametrize("field", ["fault", "side"])
def test_a_decision_on_the_field_compares_it_with_a_member(field: str) -> None:
    """A raise with a misspelt or renamed ``fault``/``side`` is a mypy error (the parameters are typed
    :class:`Fault` / :class:`Side`); a comparison with a literal is not (a member is a ``str``): it would
    miss silently, never matching. Decisions name the member."""
    _, decided = _decisions(field)
    assert [d for d in decided if d[1].startswith("'")] == []


@pytest.mark.parametrize("field", ["fault", "side"])
def test_every_member_a_decision_compares_with_is_raised_somewhere(field: str) -> None:
    """A member no error is raised with (left over after its raise went) is a decision that never matches:
    the type cannot tell."""
    made, decided = _decisions(field)
    assert decided or field == "side"  # the fault decisions exist (engine push, pick's index, compat, …)
    assert [(where, member) for where, member in decided if member not in made] == []


def test_a_fault_is_its_word_as_text() -> None:
    """What the error fields show (summaries, JSON) and the side in front of the message are the words."""
    exc = RegistryError("registry r (h): x", side=Side.DESTINATION, fault=Fault.STORAGE_FULL)
    assert exc.fields() == {"side": "destination", "fault": "storage full"}
    assert f"{exc.fault}" == "storage full"
    assert json.dumps(exc.fields()) == '{"side": "destination", "fault": "storage full"}'
    assert exc.message == "destination registry r (h): x"
