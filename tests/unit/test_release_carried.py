"""Issue 17: carried index entries are re-verified before release republishes them (fakes for what a real
registry cannot show: an error while checking), and the index to extend is the project's file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import RegistryError
from imagesmith.index import parse_index
from imagesmith.project import load_project
from imagesmith.refs import Registry
from imagesmith.release import verify_carried
from tests.unit.test_pick import image_doc

SCHEMA = "imagesmith.release-index/v1"
REGS = [("hub", "dockerhub", "docker.io/acme/torch"), ("ghcr", "ghcr", "ghcr.io/acme/torch")]
KNOWN = {
    "hub": Registry(name="hub", host="docker.io", repository="acme/torch", kind="dockerhub"),
    "ghcr": Registry(name="ghcr", host="ghcr.io", repository="acme/torch", kind="ghcr"),
}


def _images(regs: Any = REGS) -> Any:
    doc = {
        "schema": SCHEMA,
        "generated": "2026-11-28T00:00:00Z",
        "images": [image_doc("2.11.0", "13.0", "3.11", registries=regs)],
    }
    return parse_index(json.dumps(doc), source="t").images


class FakeClient:
    def __init__(self, tags: dict[tuple[str, str], str], fail: bool = False) -> None:
        self.tags, self.fail = tags, fail
        self.asked: list[tuple[str, str]] = []

    def manifest_digest(self, repo: str, ref: str) -> str | None:
        self.asked.append((repo, ref))
        if self.fail:
            raise RegistryError("registry ghcr: unreachable or failing (503)", hint="retry later")
        return self.tags.get((repo, ref))


def test_every_copy_is_checked_against_its_tag() -> None:
    (image,) = _images()
    good = {("acme/torch", image.tag): image.digest}
    clients: dict[str, Any] = {"hub": FakeClient(good), "ghcr": FakeClient({})}
    out = verify_carried([image], KNOWN, lambda r: pytest.fail(r.name), clients)
    assert [c.name for c in out.images[0].registries] == ["hub"]
    (refusal,) = out.refusals
    assert (refusal.cell, refusal.tag, refusal.status) == (image.cell, image.tag, "refused")
    assert refusal.reasons == [
        f"carried index entry {image.tag}, registry ghcr: ghcr.io/acme/torch:{image.tag} resolves to "
        f"nothing, not the recorded {image.digest}; that copy is dropped from the index"
    ]
    assert out.unverified == ()


def test_a_registry_the_project_does_not_name_is_never_asked() -> None:
    (image,) = _images([*REGS, ("evil", "generic", "evil.example/acme/torch")])
    tagged = {("acme/torch", image.tag): image.digest}
    made: list[str] = []

    def client_for(r: Registry) -> Any:
        made.append(r.host)
        return FakeClient(tagged)

    moved = {**KNOWN, "ghcr": Registry(name="ghcr", host="ghcr.io", repository="other/torch", kind="ghcr")}
    out = verify_carried([image], moved, client_for, {})
    assert made == ["docker.io"]  # neither evil.example nor a ghcr repository the project does not name
    reasons = out.refusals[0].reasons
    assert any("registry evil is not in this project's registries file" in r for r in reasons)
    assert any("registry ghcr is ghcr.io/other/torch in this project's registries file" in r for r in reasons)
    assert [c.name for c in out.images[0].registries] == ["hub"]


def test_an_entry_with_no_copy_left_is_dropped() -> None:
    (image,) = _images()
    out = verify_carried([image], KNOWN, lambda r: FakeClient({}), {})
    assert out.images == ()
    assert len(out.refusals[0].reasons) == 2


def test_a_copy_that_cannot_be_checked_is_unverified_not_dropped() -> None:
    (image,) = _images()
    good = {("acme/torch", image.tag): image.digest}
    clients: dict[str, Any] = {"hub": FakeClient(good), "ghcr": FakeClient({}, fail=True)}
    out = verify_carried([image], KNOWN, lambda r: pytest.fail(r.name), clients)
    assert out.refusals == ()
    assert out.unverified == (
        f"{image.tag} in ghcr: registry ghcr: unreachable or failing (503) (fix: retry later)",
    )


def test_release_cells_writes_nothing_when_a_carried_entry_cannot_be_checked(tmp_path: Path) -> None:
    from imagesmith.index import ReleaseIndex, dump_index
    from imagesmith.release import release_cells

    (image,) = _images()
    index_file = tmp_path / "index.json"
    index_file.write_text(dump_index(ReleaseIndex(generated="2026-11-28T00:00:00Z", images=(image,))))
    before = index_file.read_text()
    out = release_cells(
        [],
        matrix="t",
        reports=[],
        index_file=index_file,
        client_for=lambda r: FakeClient({}, fail=True),
        known_registries=list(KNOWN.values()),
    )
    (failed,) = out.cells
    assert (failed.cell, failed.status) == ("(index)", "failed")
    assert failed.reasons[0].startswith("carried index entries could not be re-verified, so the index was")
    assert index_file.read_text() == before
    assert out.index_published == []


def test_the_project_names_its_release_index(tmp_path: Path) -> None:
    (tmp_path / "imagesmith.toml").write_text('schema = 1\n[paths]\nrelease_index = "published/index.json"\n')
    assert (
        load_project(tmp_path / "imagesmith.toml").release_index_file == tmp_path / "published" / "index.json"
    )
    (tmp_path / "imagesmith.toml").write_text("schema = 1\n")
    assert (
        load_project(tmp_path / "imagesmith.toml").release_index_file == tmp_path / "release" / "index.json"
    )
