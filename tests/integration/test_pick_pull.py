"""``imagesmith pick --pull`` for real: a released image in the local plain registry is pulled through the
Docker engine (imagesmith.engine) and its RepoDigests must contain the released digest."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.engine import Engine
from imagesmith.release import collect_reports, release_cells
from tests.integration.test_release import TRUSTED, cell, clients_for, push_image, targets, write_report
from tests.localinfra import LocalRegistries, local_registries

pytestmark = [pytest.mark.docker, pytest.mark.registry]
#: the release key of these tests: release signs the index and publishes its .pub beside it (issue 25); the
#: renter names it by its fingerprint (issue 34: the trust root), and pick pins it then
RELEASE_KEY = signing.generate_key("ed25519")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("IMAGESMITH_INDEX_KEY", RELEASE_KEY.public.fingerprint)


def released_index(regs: LocalRegistries, tmp_path: Path, what: str) -> tuple[str, str, Path]:
    """A fresh repository with one image (cell "a") released into tmp_path/index.json through the plain
    registry with a signed passing report: (repository, digest, index file)."""
    repo = f"imagesmith-test/pick-{uuid.uuid4().hex[:10]}"
    digest = push_image(regs.plain_client(), repo, "a-candidate", f"{what} {repo}")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed")
    index = tmp_path / "index.json"
    release_cells(
        [cell("a", targets(regs, repo)[:1])],
        matrix="t",
        reports=collect_reports([tmp_path / "r"], TRUSTED),
        index_file=index,
        client_for=clients_for(regs),
        trusted=TRUSTED,
        sign_key=RELEASE_KEY,
    ).raise_for_refusals()
    return repo, digest, index


def test_pick_pull_checks_the_digest(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    regs = local_registries()
    repo, digest, index = released_index(regs, tmp_path, "pull me")
    pinned = f"{regs.plain}/{repo}@{digest}"
    engine = Engine()
    try:
        res = run_cli("pick", "--index", str(index), "--driver", "580.95.05", "--gpu", "h200", "--pull")
        assert res.exit_code == 0, res.stderr
        assert f"pulling {pinned} (released as {regs.plain}/{repo}:a)" in res.stderr
        assert f"pulled {pinned}" in res.stderr
        info = engine.inspect(pinned)
        assert info is not None
        assert pinned in info["RepoDigests"]
        engine.remove(pinned, force=True)

        # issue 17: the tag is moved behind the index's back: --pull still pulls the released digest, by
        # digest, and the moved content never reaches this host
        other = push_image(regs.plain_client(), repo, "a", f"moved {repo}")
        assert other != digest
        res = run_cli("pick", "--index", str(index), "--driver", "580.95.05", "--gpu", "h200", "--pull")
        assert res.exit_code == 0, res.stderr
        assert f"pulled {pinned}" in res.stderr
        assert engine.inspect(f"{regs.plain}/{repo}@{other}") is None
        assert engine.inspect(f"{regs.plain}/{repo}:a") is None  # nothing pulled by tag
    finally:
        engine.remove(pinned, force=True)


def test_pick_pull_falls_back_to_a_reachable_registry(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    """issue 12, item 11: the index's first-choice registry is down; --pull names it and pulls the same digest
    from the next registry that holds the image."""
    import json

    regs = local_registries()
    repo, digest, index = released_index(regs, tmp_path, "fall back")
    doc = json.loads(index.read_text())
    dead = {"name": "dead-hub", "kind": "dockerhub", "reference": f"127.0.0.1:9/{repo}:a", "digest": digest}
    doc["images"][0]["registries"].insert(0, dead)  # Docker Hub kind: the generic platform's first choice
    doc["registries"] = sorted([*doc["registries"], "127.0.0.1:9"])  # the publisher lists it (issue 17)
    index.write_text(json.dumps(doc))
    body = index.read_bytes()  # the publisher's edited index, signed again
    index.with_name("index.json.sig").write_bytes(
        signing.sign_envelope(body, signing.INDEX_PAYLOAD_TYPE, RELEASE_KEY)
    )
    ref = f"{regs.plain}/{repo}@{digest}"
    engine = Engine()
    try:
        res = run_cli(
            "pick",
            "--index",
            str(index),
            "--driver",
            "580.95.05",
            "--gpu",
            "h200",
            "--platform",
            "generic",
            "--pull",
        )
        assert res.exit_code == 0, res.stderr
        assert f"pulling 127.0.0.1:9/{repo}@{digest}" in res.stderr
        assert "pull from dead-hub (127.0.0.1:9) failed: " in res.stderr
        assert f"trying plain ({regs.plain}), same digest" in res.stderr
        assert f"pulled {ref}" in res.stderr
        info = engine.inspect(ref)
        assert info is not None
        assert ref in info["RepoDigests"]
    finally:
        engine.remove(ref, force=True)
