"""imagesmith.registry.promote: tags moved across registries, read back, rolled back on failure — the one
primitive build (final tags), release (the release tag) and the release index (``release-index``) use."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import pytest

from imagesmith.errors import RegistryError
from imagesmith.registry import OCI_MANIFEST, ManifestData, PromotionError, PromotionTarget, promote


def _manifest(n: int) -> ManifestData:
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "n": n}).encode()
    return ManifestData(
        body=body, media_type=OCI_MANIFEST, digest="sha256:" + hashlib.sha256(body).hexdigest()
    )


NEW, OLD = _manifest(1), _manifest(2)


@dataclass
class Tags:
    """A registry's tags in memory; ``fail`` names operations that raise, ``keeps`` False drops every put
    (a registry that does not keep what it was given), ``deletes`` False refuses deleting a tag alone
    (Debian's docker-registry 2.8)."""

    name: str
    tags: dict[str, str] = field(default_factory=dict)
    manifests: dict[str, ManifestData] = field(default_factory=lambda: {NEW.digest: NEW, OLD.digest: OLD})
    fail: set[str] = field(default_factory=set)
    keeps: bool = True
    deletes: bool = True
    calls: list[str] = field(default_factory=list)

    def _maybe_fail(self, op: str) -> None:
        self.calls.append(op)
        if op in self.fail:
            raise RegistryError(f"registry {self.name} (h): {op}: HTTP 503", hint="retry", registry=self.name)

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        self._maybe_fail(f"head {reference}")
        return reference if reference.startswith("sha256:") else self.tags.get(reference)

    def get_manifest(self, repo: str, reference: str) -> ManifestData:
        self._maybe_fail(f"get {reference[:12]}")
        return self.manifests[reference if reference.startswith("sha256:") else self.tags[reference]]

    def put_manifest(self, repo: str, reference: str, manifest: ManifestData) -> str:
        self._maybe_fail(f"put {reference}")
        if self.keeps:
            self.tags[reference] = manifest.digest
        return manifest.digest

    def delete_tag(self, repo: str, tag: str) -> bool:
        self._maybe_fail(f"untag {tag}")
        if self.deletes:
            self.tags.pop(tag, None)
        return self.deletes


def _targets(*regs: Tags) -> list[PromotionTarget]:
    return [PromotionTarget(name=r.name, repo="acme/torch", client=r) for r in regs]  # type: ignore[arg-type]


def test_each_tag_goes_everywhere_read_back_and_an_unchanged_tag_is_not_written() -> None:
    r1, r2 = Tags("r1"), Tags("r2", tags={"v1": NEW.digest})
    done = promote(_targets(r1, r2), ["v1", "latest"], NEW.digest, manifest=NEW)
    assert r1.tags == r2.tags == {"v1": NEW.digest, "latest": NEW.digest}
    assert [(t.name, tag) for t, tag in done.moved] == [("r1", "v1"), ("r1", "latest"), ("r2", "latest")]
    assert "put v1" not in r2.calls  # already there: not written, still read back
    # each tag in every registry before the next tag; each read back right after it is put
    assert r1.calls == ["head v1", "head latest", "put v1", "head v1", "put latest", "head latest"]


def test_without_a_manifest_each_registry_puts_its_own_copy_of_the_digest() -> None:
    r1 = Tags("r1")
    promote(_targets(r1), ["v1"], NEW.digest)
    assert f"get {NEW.digest[:12]}" in r1.calls
    assert r1.tags == {"v1": NEW.digest}


def test_a_failed_put_rolls_back_what_this_run_moved() -> None:
    r1 = Tags("r1", tags={"v1": OLD.digest})
    r2 = Tags("r2", tags={"latest": OLD.digest})
    r3 = Tags("r3", fail={"put v1"})
    with pytest.raises(PromotionError) as info:
        promote(_targets(r1, r2, r3), ["v1"], NEW.digest, manifest=NEW)
    err = info.value
    assert (err.step, err.target.name, err.tag) == ("put", "r3", "v1")
    assert err.cause is not None
    assert err.cause.registry == "r3"
    assert r1.tags == {"v1": OLD.digest}  # put back on the manifest it named
    assert r2.tags == {"latest": OLD.digest}  # the new tag deleted
    assert [(t.name, tag) for t, tag in err.moved] == [("r1", "v1"), ("r2", "v1")]
    assert err.left == ()
    assert err.rolled_back == err.moved
    assert (err.registry, err.digest, err.fault) == ("r3", NEW.digest, "promotion")


def test_a_registry_that_cannot_delete_a_tag_alone_is_named_where_the_tag_stays() -> None:
    r1, r2 = Tags("r1", deletes=False), Tags("r2", fail={"put v1"})
    with pytest.raises(PromotionError) as info:
        promote(_targets(r1, r2), ["v1"], NEW.digest, manifest=NEW)
    assert [(t.name, tag) for t, tag in info.value.left] == [("r1", "v1")]
    assert r1.tags == {"v1": NEW.digest}


def test_a_failed_roll_back_is_left_moved_not_a_second_error() -> None:
    r1 = Tags("r1", tags={"v1": OLD.digest}, fail={f"get {OLD.digest[:12]}"})
    r2 = Tags("r2", fail={"put v1"})
    with pytest.raises(PromotionError) as info:
        promote(_targets(r1, r2), ["v1"], NEW.digest, manifest=NEW)
    assert info.value.step == "put"
    assert [(t.name, tag) for t, tag in info.value.left] == [("r1", "v1")]


def test_a_registry_that_does_not_keep_the_tag_fails_the_read_back() -> None:
    r1, r2 = Tags("r1"), Tags("r2", keeps=False, tags={"v1": OLD.digest})
    with pytest.raises(PromotionError) as info:
        promote(_targets(r1, r2), ["v1"], NEW.digest, manifest=NEW)
    err = info.value
    assert (err.step, err.target.name, err.cause, err.got) == ("read back", "r2", None, OLD.digest)
    assert r1.tags == {}  # rolled back
    assert err.message == f"r2: acme/torch:v1 resolves to {OLD.digest}, not {NEW.digest}"


def test_a_read_back_that_fails_rolls_back() -> None:
    r1, r2 = Tags("r1"), Tags("r2", fail={"head v1"})
    targets = _targets(r1, r2)
    with pytest.raises(PromotionError) as info:
        promote(targets, ["v1"], NEW.digest, manifest=NEW, before={(t, "v1"): None for t in targets})
    # before= given: nothing is read first, so the failing HEAD is the read back of r2
    assert (info.value.step, info.value.target.name) == ("read back", "r2")
    assert r1.tags == {}


def test_a_failure_reading_what_tags_name_first_moves_nothing() -> None:
    r1, r2 = Tags("r1"), Tags("r2", fail={"head v1"})
    with pytest.raises(PromotionError) as info:
        promote(_targets(r1, r2), ["v1"], NEW.digest, manifest=NEW)
    assert info.value.step == "before"
    assert info.value.moved == ()
    assert not any(c.startswith("put") for c in r1.calls + r2.calls)


def test_before_given_by_the_caller_is_not_read_again() -> None:
    r1 = Tags("r1", tags={"v1": NEW.digest})
    targets = _targets(r1)
    done = promote(targets, ["v1"], NEW.digest, manifest=NEW, before={(targets[0], "v1"): NEW.digest})
    assert done.moved == ()
    assert r1.calls == ["head v1"]  # the read back only


def test_a_manifest_of_another_digest_is_refused() -> None:
    with pytest.raises(ValueError, match="not sha256"):
        promote(_targets(Tags("r1")), ["v1"], NEW.digest, manifest=OLD)


# -- every tag move goes through promote (issue 24 re-check) ----------------------------------------------

#: (module, function) that may call ``put_manifest`` (or delete a tag or manifest): promote itself, and puts
#: that move no promoted tag
#: (a manifest by digest, a staging tag, an attestation or report artifact keyed by the image's digest)
PUTS = {
    ("imagesmith/registry/promote.py", "promote"),  # the release/final/index tags
    ("imagesmith/registry/promote.py", "roll_back"),  # putting a tag back where it was, or deleting it
    ("imagesmith/registry/copy.py", "copy_manifest"),  # by digest, or as build's staging tag (put_as)
    ("imagesmith/attestation.py", "attach_attestations"),  # sha256-<hex>.att
    ("imagesmith/release/artifacts.py", "attach_report"),  # sha256-<hex>.validation
    ("imagesmith/release/artifacts.py", "stage_index"),  # the index artifact by digest
    ("imagesmith/release/clusterartifact.py", "attach_cluster"),  # sha256-<hex>.cluster, read back whole
}


def _put_sites() -> set[tuple[str, str]]:
    import ast

    from tests import astcache
    from tests.repo import REPO

    sites: set[tuple[str, str]] = set()
    for path in sorted((REPO / "imagesmith").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        tree = astcache.parse(path.read_text(), rel)
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("put_manifest", "delete_tag", "delete_manifest")
                    and not (rel.startswith("imagesmith/registry/") and fn.name == node.func.attr)
                ):
                    sites.add((rel, fn.name))
    return sites


def test_no_tag_moves_outside_promote() -> None:
    """A new ``put_manifest``/``delete_tag``/``delete_manifest`` outside :data:`PUTS` is a tag moved without
    read-back or roll-back (the release index's ``publish_index`` was one): route it through promote, or
    list it here with why."""
    sites = _put_sites()
    assert sites - PUTS == set()
    assert PUTS - sites == set()  # a listed site that is gone: drop it


def test_publishing_the_index_to_one_registry_reads_the_tag_back() -> None:
    """publish_index moves ``release-index`` through promote: a registry that does not keep the tag is an
    error, not a silent success (it put the manifest and returned its digest)."""
    from imagesmith.release import publish_index
    from imagesmith.tags import INDEX_ARTIFACT_TAG
    from tests.fakeregistry import FakeRegistry

    class Forgets(FakeRegistry):
        def put_manifest(self, repo: str, reference: str, manifest: ManifestData) -> str:
            digest = super().put_manifest(repo, reference, manifest)
            self.tags.pop((repo, reference), None)  # took the manifest, dropped the tag
            return digest

    reg = Forgets()
    with pytest.raises(PromotionError) as info:
        publish_index(reg, "acme/index", b'{"schema": "x"}')
    assert (info.value.step, info.value.tag, info.value.got) == ("read back", INDEX_ARTIFACT_TAG, None)
    kept = FakeRegistry()
    digest = publish_index(kept, "acme/index", b'{"schema": "x"}')
    assert kept.tagged("acme/index") == {INDEX_ARTIFACT_TAG: digest}
