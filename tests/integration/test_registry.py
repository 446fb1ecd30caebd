"""The registry client against the real local registries (Debian's docker-registry): plain :5000, TLS+htpasswd
:5443, plus throw-away registries for the fault cases."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import pytest

from imagesmith.errors import ManifestUnknownError, RegistryError
from imagesmith.registry import MANIFEST_V2, ManifestData, RegistryClient, copy_manifest
from tests.localinfra import LocalRegistries, local_registries, temp_registry


def _push_image(client: RegistryClient, repo: str, tag: str, payload: bytes) -> ManifestData:
    """Push a small but real image (config + one layer blob) through the API."""
    layer_digest = "sha256:" + hashlib.sha256(payload).hexdigest()
    client.upload_blob(
        repo, layer_digest, lambda: iter([payload[: len(payload) // 2], payload[len(payload) // 2 :]])
    )
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"t": tag}}}).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    client.upload_blob(repo, config_digest, lambda: iter([config]))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_V2,
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": len(config),
            "digest": config_digest,
        },
        "layers": [
            {
                "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                "size": len(payload),
                "digest": layer_digest,
            }
        ],
    }
    body = json.dumps(manifest).encode()
    data = ManifestData(
        body=body, media_type=MANIFEST_V2, digest="sha256:" + hashlib.sha256(body).hexdigest()
    )
    client.put_manifest(repo, tag, data)
    return data


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture
def repo() -> str:
    return f"imagesmith-test/reg-{uuid.uuid4().hex[:10]}"


# the pure parts (challenge parsing, credential lookup, the Bearer flow against a fake) are in
# tests/unit/test_credentials.py and tests/unit/test_registry_auth.py


# -- real registries ---------------------------------------------------------------------------------------
@pytest.mark.registry
def test_auth_registry_push_get_tags_and_digest(regs: LocalRegistries, repo: str) -> None:
    client = regs.auth_client()
    pushed = _push_image(client, repo, "one", os.urandom(300_000))
    assert client.manifest_digest(repo, "one") == pushed.digest
    got = client.get_manifest(repo, "one")
    assert got.digest == pushed.digest
    assert got.media_type == MANIFEST_V2
    assert client.list_tags(repo) == ["one"]
    assert client.blob_size(repo, got.blobs()[1][0]) == 300_000


@pytest.mark.registry
def test_wrong_password_is_a_clear_error_naming_registry_and_fix(regs: LocalRegistries, repo: str) -> None:
    client = regs.auth_client(password="wrong-password")
    with pytest.raises(RegistryError) as info:
        client.list_tags(repo)
    text = str(info.value)
    assert regs.auth in text
    assert "unauthorized" in text
    assert "IMAGESMITH_REGISTRY_127_0_0_1_5443_PASSWORD" in text
    assert "wrong-password" not in text


@pytest.mark.registry
def test_no_credentials_for_auth_registry(regs: LocalRegistries, repo: str, tmp_path: Path) -> None:
    client = RegistryClient(regs.auth, ca_file=regs.ca, env={"DOCKER_CONFIG": str(tmp_path)})
    with pytest.raises(RegistryError, match="wants credentials and none are set"):
        client.ping()


@pytest.mark.registry
def test_untrusted_tls_is_refused_not_ignored(regs: LocalRegistries, tmp_path: Path) -> None:
    client = RegistryClient(regs.auth, credentials=regs.credentials, env={"DOCKER_CONFIG": str(tmp_path)})
    client.verify = True  # system bundle only: the test CA is not in it
    with pytest.raises(RegistryError, match="TLS"):
        client.ping()


@pytest.mark.registry
def test_manifest_unknown_is_not_retried(regs: LocalRegistries, repo: str) -> None:
    client = regs.plain_client(attempts=5)
    _push_image(client, repo, "present", b"x" * 1000)
    calls: list[str] = []
    original = client.session.request

    def counting(method: str, url: str, **kw: object):  # type: ignore[no-untyped-def]
        calls.append(f"{method} {url}")
        return original(method, url, **kw)  # type: ignore[arg-type]

    client.session.request = counting  # type: ignore[assignment]
    with pytest.raises(ManifestUnknownError, match="manifest unknown"):
        client.get_manifest(repo, "absent")
    assert len(calls) == 1
    assert client.manifest_digest(repo, "absent") is None


@pytest.mark.registry
def test_copy_between_registries_keeps_the_digest_and_tags_nothing(regs: LocalRegistries, repo: str) -> None:
    src, dst = regs.plain_client(), regs.auth_client()
    pushed = _push_image(src, repo, "src", os.urandom(2_000_000))
    digest, sent = copy_manifest(src, repo, "src", dst, repo)
    assert digest == pushed.digest
    assert sent >= 2_000_000
    assert dst.manifest_digest(repo, pushed.digest) == pushed.digest
    assert dst.list_tags(repo) == []  # by digest only
    again_digest, again_sent = copy_manifest(src, repo, "src", dst, repo)
    assert (again_digest, again_sent) == (pushed.digest, 0)  # blobs already there: nothing re-sent


@pytest.mark.registry
def test_cross_repo_mount_on_the_same_registry(regs: LocalRegistries, repo: str) -> None:
    client = regs.auth_client()
    pushed = _push_image(client, repo, "a", os.urandom(100_000))
    layer = pushed.blobs()[1][0]
    other = repo + "-mounted"
    assert client.mount_blob(other, layer, repo) is True
    assert client.blob_size(other, layer) == 100_000


@pytest.mark.registry
def test_read_only_registry_refuses_with_a_clear_error(tmp_path: Path) -> None:
    with temp_registry(tmp_path, readonly=True) as reg:
        client = reg.client(attempts=2, backoff=0.05)
        with pytest.raises(RegistryError) as info:
            _push_image(client, "ro/repo", "t", b"data")
        assert reg.addr in str(info.value)
        assert "read-only" in str(info.value) or "UNSUPPORTED" in str(info.value) or "405" in str(info.value)
        assert client.list_tags("ro/repo") == []


@pytest.mark.registry
def test_registry_stopped_mid_copy_fails_clearly_and_tags_nothing(
    regs: LocalRegistries, tmp_path: Path
) -> None:
    src = regs.plain_client()
    repo = f"imagesmith-test/midcopy-{uuid.uuid4().hex[:8]}"
    _push_image(src, repo, "big", os.urandom(24_000_000))
    with temp_registry(tmp_path) as reg:
        dst = reg.client(attempts=2, backoff=0.05)
        original = dst.upload_blob

        def upload_then_die(r: str, digest: str, chunks):  # type: ignore[no-untyped-def]
            def dying():  # type: ignore[no-untyped-def]
                for i, chunk in enumerate(chunks()):
                    if i == 1:
                        reg.stop()  # the registry goes away in the middle of the blob
                    yield chunk

            return original(r, digest, dying)

        dst.upload_blob = upload_then_die  # type: ignore[assignment]
        with pytest.raises(RegistryError) as info:
            copy_manifest(src, repo, "big", dst, repo, put_as="final")
        assert reg.addr in str(info.value)
        assert "unreachable" in str(info.value)
        reg.start()
        assert reg.client().list_tags(repo) == []  # no tag points at a partial image
        assert reg.client().manifest_digest(repo, "final") is None
