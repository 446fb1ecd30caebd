"""Base images by digest against the real local registry, without the engine (issue 26 re-check): a base the
matrix names by digest, and a base that is an OCI index, each pinned, escrowed and planned through the
registry-mirror map into repositories of this test's own."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.bases import escrow_registry, escrow_repo, escrow_tag, read_bases
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.project import load_project
from imagesmith.registry import OCI_INDEX, ManifestData, RegistryClient, copy_manifest
from tests.localinfra import local_registries
from tests.repo import PROJECT

pytestmark = pytest.mark.registry


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, image: str) -> tuple[Path, str, RegistryClient]:
    plain = local_registries().plain
    prefix = f"i26r{uuid.uuid4().hex[:10]}"
    client = RegistryClient(plain, insecure=True)
    copy_manifest(
        client, "hub/library/debian", "bookworm", client, f"{prefix}/library/debian", put_as="bookworm"
    )
    root = tmp_path / "proj"
    (root / "matrices").mkdir(parents=True)
    smoke = (PROJECT.matrices_dir / "smoke.toml").read_text()
    smoke = smoke.replace('registries = ["local-plain", "local-tls"]', 'registries = ["local-plain"]')
    (root / "matrices" / "smoke.toml").write_text(
        smoke.replace('image = "debian:bookworm"', f'image = "{image.replace("PREFIX", prefix)}"')
    )
    (root / "matrices" / "registries.toml").write_text(
        f'schema = 1\n[registries.local-plain]\nhost = "{plain}"\nnamespace = "{prefix}"\n'
        'repository = "torch"\ninsecure = true\n'
    )
    (root / "locks").mkdir()
    shutil.copy(PROJECT.locks_dir / "2.11.0-cu130-py3.11.txt", root / "locks")
    (root / "locks" / "bases.toml").write_text("schema = 1\n[bases]\n")
    (root / "imagesmith.toml").write_text('schema = 1\nname = "t"\n[bases]\nescrow = "local-plain"\n')
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("IMAGESMITH_REGISTRY_MIRRORS", f"docker.io={plain}/{prefix}")
    monkeypatch.delenv("IMAGESMITH_PROJECT", raising=False)
    monkeypatch.chdir(root)
    return root, prefix, client


def test_a_base_named_by_digest_is_checked_escrowed_and_planned_by_that_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., Any]
) -> None:
    plain = local_registries().plain
    digest = RegistryClient(plain, insecure=True).manifest_digest("hub/library/debian", "bookworm")
    assert digest
    root, prefix, client = _project(tmp_path, monkeypatch, f"debian:bookworm@{digest}")
    # the tag moves to another manifest: the matrix's digest, not the tag, is what is pinned and escrowed
    other = client.get_manifest(f"{prefix}/library/debian", "bookworm")
    moved = json.loads(other.body)
    moved["annotations"] = {"i26r": "moved"}
    body = json.dumps(moved).encode()
    client.put_manifest(
        f"{prefix}/library/debian",
        "bookworm",
        ManifestData(
            body=body, media_type=other.media_type, digest="sha256:" + hashlib.sha256(body).hexdigest()
        ),
    )
    result = run_cli("lock", "--bases")
    assert result.exit_code == 0, result.stderr
    assert "the matrix pins it by digest" in result.stdout
    project = load_project(root / "imagesmith.toml")
    lock = read_bases(project.locks_dir)
    assert lock is not None
    assert dict(lock.entries) == {}
    escrow = escrow_registry(project)
    assert escrow is not None
    name = f"debian:bookworm@{digest}"
    assert client.manifest_digest(escrow_repo(escrow, name), escrow_tag(digest)) == digest
    (cell,) = build_plan(load_matrix("smoke", project=project), project=project).cells
    assert dict(cell.bases.base_digests) == {name: digest}


def test_an_index_base_is_escrowed_with_every_manifest_it_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., Any]
) -> None:
    root, prefix, client = _project(tmp_path, monkeypatch, "debian:multi")
    child = client.get_manifest(f"{prefix}/library/debian", "bookworm")
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {
                "mediaType": child.media_type,
                "digest": child.digest,
                "size": len(child.body),
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    body = json.dumps(index).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    client.put_manifest(
        f"{prefix}/library/debian", "multi", ManifestData(body=body, media_type=OCI_INDEX, digest=digest)
    )
    result = run_cli("lock", "--bases")
    assert result.exit_code == 0, result.stderr
    project = load_project(root / "imagesmith.toml")
    lock = read_bases(project.locks_dir)
    assert lock is not None
    assert lock.entries["debian:multi"].digest == digest
    escrow = escrow_registry(project)
    assert escrow is not None
    repo = escrow_repo(escrow, "debian:multi")
    assert client.manifest_digest(repo, escrow_tag(digest)) == digest
    assert client.manifest_digest(repo, child.digest) == child.digest
    for blob, size in child.blobs():
        assert client.blob_size(repo, blob) == size
