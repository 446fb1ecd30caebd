"""build's skip / retag decisions with a fake registry behind the client_for seam: no engine, no registry."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith.build import BuildOptions, build_cell, suite_digest
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import build_plan
from imagesmith.refs import Registry
from imagesmith.tags import candidate_tag, fingerprint_tag
from tests.fakeregistry import FakeRegistry, image_manifest
from tests.repo import PROJECT

REPO = "team/torch"
CONFIG = b"{}"
MANIFEST = image_manifest(CONFIG)
DIGEST = MANIFEST.digest


def registry(name: str, *tags: str) -> FakeRegistry:
    """A registry holding the image (its config blob and manifest) under *tags* in REPO."""
    fake = FakeRegistry(name, f"{name}.example")
    fake.add_blob(CONFIG)
    for tag in tags:
        fake.add_manifest(REPO, tag, MANIFEST)
    return fake


def puts(fake: FakeRegistry) -> list[str]:
    return [w for w in fake.writes if w.startswith("manifest ")]


class NoEngine:
    """Any engine call means a build was started: the skip and retag paths must not get here."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the engine was used ({name}): the cell should not have been built")


@pytest.fixture(autouse=True)
def _staging_means_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """Staging a context is the first step of a build (it needs the source cache, which unit tests lack)."""

    def staged(*args: Any, **kwargs: Any) -> Path:
        raise AssertionError("the engine was used (stage_context): the cell is being built")

    monkeypatch.setattr("imagesmith.build.stage_context", staged)


@pytest.fixture
def cell() -> Cell:
    (plain,) = build_plan(load_matrix("smoke", project=PROJECT), project=PROJECT).cells[:1]
    targets = (
        Registry(name="one", host="r1.example", repository=REPO, kind="generic"),
        Registry(name="two", host="r2.example", repository=REPO, kind="azure-acr"),
    )
    return replace(plain, publish=replace(plain.publish, registries=targets))


def _run(cell: Cell, registries: dict[str, FakeRegistry], tmp_path: Path, force: bool = False) -> Any:
    options = BuildOptions(push=True, force=force, project=PROJECT, client_for=lambda t: registries[t.name])
    matrix = load_matrix("smoke", project=PROJECT)
    return build_cell(cell, matrix, NoEngine(), options, tmp_path)


def test_everything_already_there_is_skipped(cell: Cell, tmp_path: Path) -> None:
    fp, cand = fingerprint_tag(cell.publish.fingerprint, suite_digest()), candidate_tag(cell)
    regs = {n: registry(n, fp, cand) for n in ("one", "two")}
    outcome = _run(cell, regs, tmp_path)
    assert (outcome.status, outcome.digest) == ("skipped", DIGEST)
    assert all(not puts(r) for r in regs.values())


def test_fingerprint_there_but_no_candidate_is_only_retagged(cell: Cell, tmp_path: Path) -> None:
    fp = fingerprint_tag(cell.publish.fingerprint, suite_digest())
    regs = {n: registry(n, fp) for n in ("one", "two")}
    outcome = _run(cell, regs, tmp_path)
    assert outcome.status == "retagged"
    for r in regs.values():
        assert puts(r) == [f"manifest {REPO}:{candidate_tag(cell)}"]
        assert r.tags[REPO, candidate_tag(cell)] == DIGEST


def test_a_registry_missing_the_fingerprint_means_a_build(cell: Cell, tmp_path: Path) -> None:
    fp = fingerprint_tag(cell.publish.fingerprint, suite_digest())
    regs = {"one": registry("one", fp), "two": registry("two")}
    with pytest.raises(AssertionError, match="the engine was used"):
        _run(cell, regs, tmp_path)


def test_an_older_suite_is_rebuilt(cell: Cell, tmp_path: Path) -> None:
    """The identity is fingerprint + baked imagesmith: a tag of another suite digest does not count."""
    old = fingerprint_tag(cell.publish.fingerprint, "0" * 64)
    regs = {n: registry(n, old, candidate_tag(cell)) for n in ("one", "two")}
    with pytest.raises(AssertionError, match="the engine was used"):
        _run(cell, regs, tmp_path)


def test_force_builds_whatever_is_there(cell: Cell, tmp_path: Path) -> None:
    fp, cand = fingerprint_tag(cell.publish.fingerprint, suite_digest()), candidate_tag(cell)
    regs = {n: registry(n, fp, cand) for n in ("one", "two")}
    with pytest.raises(AssertionError, match="the engine was used"):
        _run(cell, regs, tmp_path, force=True)
