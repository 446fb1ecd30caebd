"""Every tag rule lives in imagesmith.tags: the names, and that no other module spells one out."""

from __future__ import annotations

import re
from types import SimpleNamespace

from imagesmith.tags import (
    INDEX_ARTIFACT_TAG,
    attestation_tag,
    candidate_tag,
    fingerprint_tag,
    local_ref,
    release_tag,
    staging_tag,
)
from tests.repo import REPO


def test_the_rules() -> None:
    cell = SimpleNamespace(id="2.11.0-cu130-py3.11-runtime-debian12", matrix="smoke")
    fp, suite = "a" * 64, "b" * 64
    assert fingerprint_tag(fp, suite) == f"fp-{'a' * 20}-{'b' * 12}"
    assert fingerprint_tag(fp) == f"fp-{'a' * 20}"
    assert staging_tag(fp, suite) == f"staging-{'a' * 20}-{'b' * 12}"
    assert candidate_tag(cell) == "2.11.0-cu130-py3.11-runtime-debian12-candidate"
    assert release_tag(cell) == cell.id
    assert attestation_tag("sha256:" + "c" * 64) == "sha256-" + "c" * 64 + ".validation"
    assert INDEX_ARTIFACT_TAG == "release-index"
    assert local_ref(cell) == "imagesmith/smoke:2.11.0-cu130-py3.11-runtime-debian12"
    # every tag is a valid OCI tag: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}
    tag = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
    for t in (
        fingerprint_tag(fp, suite),
        staging_tag(fp, suite),
        candidate_tag(cell),
        attestation_tag("sha256:" + "c" * 64),
    ):
        assert tag.match(t), t


def test_no_other_module_spells_a_tag_out() -> None:
    spelled = re.compile(r'"fp-|-candidate"|"staging-|\.validation"|"release-index"')
    hits = [
        f"{p.relative_to(REPO)}:{n}"
        for p in sorted((REPO / "imagesmith").rglob("*.py"))
        if p.name != "tags.py"
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if spelled.search(line)
    ]
    assert hits == []
