"""Issue 17: carried index entries are re-verified before release republishes them (fakes for what a real
registry cannot show: an error while checking), and the index to extend is the project's file."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.attestation import attestation_manifest, envelope_layer, sign_validation
from imagesmith.errors import RegistryError
from imagesmith.index import parse_index
from imagesmith.project import load_project
from imagesmith.refs import Registry
from imagesmith.registry import OCI_MANIFEST, ManifestData
from imagesmith.release import verify_carried
from imagesmith.tags import cosign_attestation_tag
from tests.fakeregistry import FakeRegistry, sha256
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


KEY = signing.generate_key()
TRUSTED = [KEY.public]


def envelope(digest: str, verdict: str = "passed", key: signing.SigningKey = KEY) -> bytes:
    """A validation attestation of *digest* (the predicate is a minimal report with *verdict*)."""
    status = "passed" if verdict == "passed" else "failed"
    report = {
        "schema": 2,
        "verdict": verdict,
        "target": f"acme/torch@{digest}",
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "driver": "570.133.20"}],
        "checks": [{"name": "test_gpu_inventory", "module": "test_02_gpus", "status": status}],
    }
    return sign_validation(report, repository="acme/torch", digest=digest, key=key)


def fake_client(
    tags: dict[tuple[str, str], str],
    fail: bool = False,
    attested: dict[str, list[bytes]] | None = None,
) -> FakeRegistry:
    """A registry whose *tags* ((repository, tag) → digest) resolve, holding the validation attestations
    *attested* (digest → envelopes) in cosign's layout (``sha256-<hex>.att``); down (503) with *fail*."""
    down = RegistryError("registry ghcr: unreachable or failing (503)", hint="retry later")
    fake = FakeRegistry(fail=down if fail else None)
    for (repo, tag), digest in tags.items():
        fake.add_manifest(repo, tag, ManifestData(body=b"{}", media_type=OCI_MANIFEST, digest=digest))
    for digest, envelopes in (attested or {}).items():
        manifest, config = attestation_manifest([envelope_layer(e) for e in envelopes])
        for blob in (config, *envelopes):
            fake.add_blob(blob)
        fake.add_manifest("acme/torch", cosign_attestation_tag(digest), manifest)
    return fake


def rewrite(client: FakeRegistry, tag: str, doc: Any) -> None:
    """The manifest *tag* resolves to, served with another body (a hostile registry)."""
    digest = client.tags["acme/torch", tag]
    client.manifests[digest] = replace(client.manifests[digest], body=json.dumps(doc).encode())


def test_every_copy_is_checked_against_its_tag() -> None:
    (image,) = _images()
    good = {("acme/torch", image.tag): image.digest}
    clients: dict[str, Any] = {
        "hub": fake_client(good, attested={image.digest: [envelope(image.digest)]}),
        "ghcr": fake_client({}),
    }
    out = verify_carried([image], KNOWN, lambda r: pytest.fail(r.name), clients, trusted=TRUSTED)
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
        return fake_client(tagged, attested={image.digest: [envelope(image.digest)]})

    moved = {**KNOWN, "ghcr": Registry(name="ghcr", host="ghcr.io", repository="other/torch", kind="ghcr")}
    out = verify_carried([image], moved, client_for, {}, trusted=TRUSTED)
    assert made == ["docker.io"]  # neither evil.example nor a ghcr repository the project does not name
    reasons = out.refusals[0].reasons
    assert any("registry evil is not in this project's registries file" in r for r in reasons)
    assert any("registry ghcr is ghcr.io/other/torch in this project's registries file" in r for r in reasons)
    assert [c.name for c in out.images[0].registries] == ["hub"]


def test_an_entry_with_no_copy_left_is_dropped() -> None:
    (image,) = _images()
    out = verify_carried([image], KNOWN, lambda r: fake_client({}), {}, trusted=TRUSTED)
    assert out.images == ()
    assert len(out.refusals[0].reasons) == 2


def test_a_copy_that_cannot_be_checked_is_unverified_not_dropped() -> None:
    (image,) = _images()
    good = {("acme/torch", image.tag): image.digest}
    clients: dict[str, Any] = {
        "hub": fake_client(good, attested={image.digest: [envelope(image.digest)]}),
        "ghcr": fake_client({}, fail=True),
    }
    out = verify_carried([image], KNOWN, lambda r: pytest.fail(r.name), clients, trusted=TRUSTED)
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
        client_for=lambda r: fake_client({}, fail=True),
        known_registries=list(KNOWN.values()),
        trusted=TRUSTED,
    )
    (failed,) = out.cells
    assert (failed.cell, failed.status) == ("(index)", "failed")
    assert failed.reasons[0].startswith("carried index entries could not be re-verified, so the index was")
    assert index_file.read_text() == before
    assert out.index_published == []


def _tagged_both(image: Any, **attested: list[bytes]) -> dict[str, Any]:
    tagged = {("acme/torch", image.tag): image.digest}
    return {name: fake_client(tagged, attested={image.digest: envs}) for name, envs in attested.items()}


def test_a_copy_keeps_its_place_only_with_a_trusted_passing_attestation() -> None:
    """The tag still resolves in both registries; what decides is the signed evidence stored beside it."""
    (image,) = _images()
    stranger = signing.generate_key()
    clients = _tagged_both(image, hub=[envelope(image.digest)], ghcr=[envelope(image.digest, key=stranger)])
    out = verify_carried([image], KNOWN, lambda r: pytest.fail(r.name), clients, trusted=TRUSTED)
    assert [c.name for c in out.images[0].registries] == ["hub"]
    (reason,) = out.refusals[0].reasons
    assert reason.startswith(
        f"carried index entry {image.tag}, registry ghcr: no passing validation attestation of "
        f"{image.digest} stored as {cosign_attestation_tag(image.digest)} verifies with a trusted key "
        "(fake.example/acme/torch:"
    )
    assert "no signature verifies with a trusted key" in reason
    assert reason.endswith("; that copy is dropped from the index")


def test_a_signed_failure_or_an_attestation_of_another_digest_drops_the_copy() -> None:
    (image,) = _images()
    other = "sha256:" + "e" * 64
    clients = _tagged_both(
        image,
        hub=[envelope(image.digest), envelope(image.digest, "failed")],  # one GPU family failed it
        ghcr=[envelope(other)],  # stored under this digest's tag, but signed for another digest
    )
    out = verify_carried([image], KNOWN, lambda r: pytest.fail(r.name), clients, trusted=TRUSTED)
    assert out.images == ()
    hub, ghcr = out.refusals[0].reasons
    assert f"registry hub: a signed validation attestation of {image.digest} (" in hub
    assert "says failed" in hub
    assert f"registry ghcr: no passing validation attestation of {image.digest}" in ghcr
    assert f"not {image.digest}" in ghcr


def test_without_a_trusted_key_nothing_carried_counts_as_verified() -> None:
    (image,) = _images()
    clients = _tagged_both(image, hub=[envelope(image.digest)], ghcr=[envelope(image.digest)])
    out = verify_carried([image], KNOWN, lambda r: pytest.fail(r.name), clients, trusted=[])
    assert out.refusals == ()
    assert len(out.unverified) == 2
    assert all("no trusted public key is configured" in u for u in out.unverified)
    assert all(c.asked == [] for c in clients.values())  # nothing asked: nothing could be believed


def test_the_project_names_its_release_index(tmp_path: Path) -> None:
    (tmp_path / "imagesmith.toml").write_text('schema = 1\n[paths]\nrelease_index = "published/index.json"\n')
    assert (
        load_project(tmp_path / "imagesmith.toml").release_index_file == tmp_path / "published" / "index.json"
    )
    (tmp_path / "imagesmith.toml").write_text("schema = 1\n")
    assert (
        load_project(tmp_path / "imagesmith.toml").release_index_file == tmp_path / "release" / "index.json"
    )


# -- attestation layers are descriptors a hostile registry may write: read with care -------------------------
@pytest.mark.parametrize(
    ("damage", "expect"),
    [
        (lambda layer: layer | {"size": 10**12}, "size is 1000000000000, not a byte count up to"),
        (lambda layer: layer | {"size": "big"}, "size is 'big'"),
        (lambda layer: layer | {"digest": "sha256:../../etc"}, "digest is not a sha256 digest"),
        (lambda layer: layer | {"size": layer["size"] - 1}, "arrived with a different size"),
    ],
)
def test_a_hostile_attestation_layer_is_a_reason_not_a_traceback_nor_a_huge_read(
    damage: Any, expect: str
) -> None:
    from imagesmith.attestation import attested_in_registry

    digest = "sha256:" + "a" * 64
    env = envelope(digest)
    client = fake_client({}, attested={digest: [env]})
    tag = cosign_attestation_tag(digest)
    doc = client.get_manifest("acme/torch", tag).json()
    doc["layers"] = [damage(layer) for layer in doc["layers"]]
    rewrite(client, tag, doc)
    client.blobs["sha256:../../etc"] = env
    good, bad = attested_in_registry(client, "acme/torch", digest, TRUSTED)
    assert good == []
    assert len(bad) == 1
    assert expect in bad[0]


def test_annotations_of_the_wrong_type_are_skipped() -> None:
    from imagesmith.attestation import attested_in_registry

    digest = "sha256:" + "b" * 64
    client = fake_client({}, attested={digest: [envelope(digest)]})
    tag = cosign_attestation_tag(digest)
    doc = client.get_manifest("acme/torch", tag).json()
    doc["layers"] = [layer | {"annotations": ["predicateType"]} for layer in doc["layers"]] + ["junk", 3]
    rewrite(client, tag, doc)
    assert attested_in_registry(client, "acme/torch", digest, TRUSTED) == ([], [])


class _KeepsDamage(FakeRegistry):
    """A registry that says yes to DELETE and PUT of a blob but keeps serving the damaged copy it holds."""

    def delete_blob(self, repo: str, digest: str) -> bool:
        self.writes.append(f"delete blob {digest}")
        return True

    def upload_blob(self, repo: str, digest: str, chunks: Callable[[], Iterator[bytes]]) -> None:
        b"".join(chunks())
        self.writes.append(f"blob {digest[:15]}")


def test_a_small_blob_the_registry_holds_damaged_is_uploaded_again_or_reported() -> None:
    from imagesmith.errors import CorruptBlobError
    from imagesmith.registry import ensure_blob

    data = b'{"verdict": "passed"}'
    digest = sha256(data)
    ok = FakeRegistry(blobs={digest: data})
    ensure_blob(ok, "r", data)  # held with its size: trusted as is
    assert ok.writes == []
    cut = FakeRegistry(blobs={digest: data[:3]})  # before: trusted because HEAD found it
    ensure_blob(cut, "r", data)
    assert cut.writes == [f"delete blob {digest}", f"blob {digest[:15]}"]
    assert cut.blobs[digest] == data
    stuck = _KeepsDamage(name="dst", blobs={digest: data[:3]})
    with pytest.raises(CorruptBlobError, match="registry dst") as info:
        ensure_blob(stuck, "r", data)
    assert info.value.hint
    missing = FakeRegistry()
    ensure_blob(missing, "r", data)
    assert missing.writes == [f"blob {digest[:15]}"]
    assert missing.blobs[digest] == data


@pytest.mark.parametrize(
    "doc",
    [
        {"subject": "sha256:x", "annotations": {}},
        {"subject": {"digest": "d"}, "annotations": ["io.imagesmith.verdict"]},
        {"subject": None},
        {},
    ],
)
def test_a_foreign_report_artifact_is_put_again_not_a_traceback(doc: dict[str, Any]) -> None:
    from imagesmith.release import attached_report_ok
    from imagesmith.tags import attestation_tag

    digest = "sha256:" + "c" * 64
    client = fake_client({("acme/torch", attestation_tag(digest)): "sha256:" + "e" * 64})
    rewrite(client, attestation_tag(digest), doc)
    assert attached_report_ok(client, "acme/torch", digest) is False
