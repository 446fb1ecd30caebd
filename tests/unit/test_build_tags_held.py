"""Two ``build --push`` runs of one matrix with separate caches push the same tags (issue 37): once every cell
is done, the run reads its final tags back. A tag another build of the same inputs holds is recorded as such;
a tag moved to other content is a PushError (the CLI exits 6) — before, the losing run exited 0 though no
tag named its digest. Real build path (``_build_cells`` → ``build_cell`` → ``push_cell``) on the typed fakes
of tests/unit/test_build_push.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from imagesmith.build import FINGERPRINT_LABEL, BuildOptions, _build_cells, suite_digest
from imagesmith.errors import PushError
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import build_plan
from imagesmith.registry import OCI_MANIFEST, ManifestData
from imagesmith.tags import candidate_tag, fingerprint_tag, staging_tag
from tests.fakeregistry import FakeRegistry, sha256
from tests.repo import PROJECT
from tests.unit.test_build_push import REPO, MemoryEngine, cell

__all__ = ["cell"]  # the fixture, reused


def _other_image(registry: FakeRegistry, fingerprint: str) -> str:
    """Store another build's image (its own layer, the given fingerprint label); its manifest digest."""
    config = json.dumps({"config": {"Labels": {FINGERPRINT_LABEL: fingerprint}}}).encode()
    layer = f"another machine's layer for {fingerprint}".encode()
    for blob in (config, layer):
        registry.add_blob(blob)
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"digest": sha256(config), "size": len(config)},
            "layers": [{"digest": sha256(layer), "size": len(layer)}],
        }
    ).encode()
    return registry.add_manifest(
        REPO, None, ManifestData(body=body, media_type=OCI_MANIFEST, digest=sha256(body))
    )


@dataclass
class SecondWriter(MemoryEngine):
    """After this run's push (its final tags put and read back: the engine's local staging tag is removed
    then), another build puts *tags* on its own image (labelled *fingerprint*) in registry *victim*."""

    victim: str = "r2.example"
    fingerprint: str = ""
    tags: tuple[str, ...] = ()
    moved_to: str = ""

    def remove(self, reference: str, *, force: bool = False) -> bool:
        if self.tags and not self.moved_to:
            registry = self.registries[self.victim]
            self.moved_to = _other_image(registry, self.fingerprint)
            for tag in self.tags:
                registry.tags[REPO, tag] = self.moved_to
        return super().remove(reference, force=force)


def _run(cell: Cell, engine: MemoryEngine, tmp_path: Path) -> tuple[list, list]:  # type: ignore[type-arg]
    by_name = {r.name: r for r in engine.registries.values()}
    matrix = load_matrix("smoke", project=PROJECT)
    plan = replace(build_plan(matrix, project=PROJECT), cells=(cell,))
    options = BuildOptions(push=True, project=PROJECT, client_for=lambda t: by_name[t.name])
    return _build_cells(matrix, plan, engine, options, tmp_path, lambda *a: None)


def _registries() -> dict[str, FakeRegistry]:
    return {"r1.example": FakeRegistry("one", "r1.example"), "r2.example": FakeRegistry("two", "r2.example")}


def test_a_candidate_moved_to_other_content_after_the_put_fails_the_run(cell: Cell, tmp_path: Path) -> None:
    engine = SecondWriter(_registries(), fingerprint="0" * 64, tags=(candidate_tag(cell),))
    (outcome,), errors = _run(cell, engine, tmp_path)
    assert engine.moved_to
    (error,) = errors
    assert isinstance(error, PushError)
    assert error.exit_code != 0
    assert (error.registry, error.repository, error.digest) == ("two", REPO, engine.moved_to)
    built = engine.registries["r1.example"].tags[REPO, candidate_tag(cell)]
    assert f"r2.example/{REPO}:{candidate_tag(cell)}" in error.message
    assert engine.moved_to in error.message
    assert built in error.message
    assert "rerun `imagesmith build --push`" in (error.hint or "")
    assert outcome.status == "failed"
    # the summary names no digest no tag names: registry two's entry is gone, one's still holds
    assert "two" not in outcome.registries
    assert outcome.registries["one"]["digest"] == built


def test_a_tag_held_by_another_build_of_the_same_inputs_is_recorded(cell: Cell, tmp_path: Path) -> None:
    tags = (candidate_tag(cell), fingerprint_tag(cell.publish.fingerprint, suite_digest()))
    engine = SecondWriter(_registries(), fingerprint=cell.publish.fingerprint, tags=tags)
    (outcome,), errors = _run(cell, engine, tmp_path)
    assert errors == []
    assert outcome.status == "pushed"
    ours = engine.registries["r1.example"].tags[REPO, candidate_tag(cell)]
    assert ours != engine.moved_to
    assert outcome.registries["two"]["digest"] == outcome.digest == engine.moved_to
    assert outcome.registries["one"]["digest"] == ours
    assert any(engine.moved_to in n and ours in n and "same inputs" in n for n in outcome.notes)


def test_without_a_second_writer_nothing_changes(cell: Cell, tmp_path: Path) -> None:
    registries = _registries()
    (outcome,), errors = _run(cell, MemoryEngine(registries), tmp_path)
    assert errors == []
    assert outcome.status == "pushed"
    assert not [n for n in outcome.notes if "same inputs" in n]
    suite = suite_digest()
    for r in registries.values():
        assert outcome.registries[r.name]["digest"] == outcome.digest
        assert r.tags[REPO, candidate_tag(cell)] == outcome.digest
        assert r.tags[REPO, fingerprint_tag(cell.publish.fingerprint, suite)] == outcome.digest
        assert r.tags[REPO, staging_tag(cell.publish.fingerprint, suite)] == outcome.digest


def test_a_tag_deleted_after_the_put_fails_the_run(cell: Cell, tmp_path: Path) -> None:
    @dataclass
    class Deleter(MemoryEngine):
        def remove(self, reference: str, *, force: bool = False) -> bool:
            self.registries["r1.example"].tags.pop((REPO, candidate_tag(cell)), None)
            return super().remove(reference, force=force)

    (outcome,), errors = _run(cell, Deleter(_registries()), tmp_path)
    (error,) = errors
    assert isinstance(error, PushError)
    assert error.registry == "one"
    assert "names no manifest" in error.message
    assert outcome.status == "failed"
    assert "one" not in outcome.registries


def test_a_staging_tag_another_build_moved_before_the_final_tags_names_the_race(
    cell: Cell, tmp_path: Path
) -> None:
    """Two builds of the same cell share the staging tag: when the other one's copy moves it in registry two
    after this run's copy put it, the run stops before any final tag (exit 6) and says what the tag names now
    (before: only "does not serve D after the push")."""
    staging = staging_tag(cell.publish.fingerprint, suite_digest())

    class Raced(FakeRegistry):
        other = ""

        def put_manifest(self, repo: str, reference: str, manifest: ManifestData) -> str:
            digest = super().put_manifest(repo, reference, manifest)
            if reference == staging and not self.other:
                self.other = _other_image(self, cell.publish.fingerprint)
                self.tags[repo, staging] = self.other
            return digest

    raced = Raced("two", "r2.example")
    registries = {"r1.example": FakeRegistry("one", "r1.example"), "r2.example": raced}
    (outcome,), (error,) = _run(cell, MemoryEngine(registries), tmp_path)
    assert isinstance(error, PushError)
    assert error.exit_code == 6
    assert f"under {staging} (it names {raced.other}: another build of the same cell" in error.message
    assert "no final tag was moved" in (error.hint or "")
    assert outcome.status == "failed"
    assert (REPO, candidate_tag(cell)) not in raced.tags
