"""Issue 32, the cluster evidence in the registries (imagesmith/release/clusterartifact.py): release attaches
the signed cluster report beside the image in every registry (``sha256-<hex>.cluster``, subject the image
manifest; blobs before the manifest; the same evidence, the same digest), reads it back whole, and records its
digest in the entry's ``cluster.artifact``; ``verify_cluster_artifact`` (release's read-back, and ``pick
--verify-cluster``) refuses whatever a registry serves that the signed index does not vouch for, naming the
registry, the tag and the field. Against the in-memory registry of tests/fakeregistry.py."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.attestation import DSSE_MEDIA_TYPE
from imagesmith.errors import ConfigError, Fault, RegistryError
from imagesmith.index import ClusterSummary, RegistryCopy
from imagesmith.registry import ManifestData
from imagesmith.release.artifacts import artifact_manifest
from imagesmith.release.base import CLUSTER_ARTIFACT_TYPE, CLUSTER_KEY_MEDIA_TYPE, EMPTY_BLOB
from imagesmith.release.clusterartifact import (
    MAX_ENVELOPE_BYTES,
    attach_cluster,
    cluster_manifest,
    verify_cluster_artifact,
)
from imagesmith.tags import cluster_tag
from imagesmith.validate import clusterrecord
from tests.clusterreports import cluster_document
from tests.fakeregistry import FakeRegistry, sha256
from tests.unit.test_release_cluster import OTHER, release, write_cluster
from tests.unit.test_release_steps import CELL, KEY, REPO, TRUSTED, registries


def released(tmp_path: Path, **doc: Any) -> tuple[dict[str, Any], str, Any]:
    """A cell released with a passing signed cluster report of its digest: (clients, digest, result)."""
    clients, digest = registries()
    write_cluster(tmp_path / "cluster", cluster_document(digest, **doc))
    result = release(tmp_path, clients, digest)
    assert result.status == "promoted", result.reasons
    return clients, digest, result


def signed_of(digest: str, key: signing.SigningKey = KEY, **doc: Any) -> clusterrecord.SignedCluster:
    env = clusterrecord.sign_report(cluster_document(digest, **doc), key=key)
    return clusterrecord.verify_report(env, [key.public], source="c")


def _refused(client: Any, digest: str, summary: ClusterSummary) -> RegistryError:
    with pytest.raises(RegistryError) as err:
        verify_cluster_artifact(client, REPO, digest, summary)
    e = err.value
    assert e.registry == client.name  # the registry, the tag and the field are named
    assert cluster_tag(digest) in e.message
    assert e.field is not None
    assert e.field in e.message
    return e


# -- attach -----------------------------------------------------------------------------------------------


def test_release_attaches_the_signed_report_in_every_registry_blobs_first(tmp_path: Path) -> None:
    clients, digest, result = released(tmp_path)
    tag = cluster_tag(digest)
    assert tag == digest.replace(":", "-") + ".cluster"
    assert result.cluster.artifact
    for name in ("a", "b"):
        fake = clients[name]
        assert fake.tagged(REPO)[tag] == result.cluster.artifact  # the same digest everywhere
        doc = json.loads(fake.get_manifest(REPO, tag).body)
        assert doc["artifactType"] == CLUSTER_ARTIFACT_TYPE
        assert doc["subject"]["digest"] == digest
        assert [x["mediaType"] for x in doc["layers"]] == [DSSE_MEDIA_TYPE, CLUSTER_KEY_MEDIA_TYPE]
        put = fake.writes.index(f"manifest {REPO}:{tag}")
        for layer in doc["layers"]:  # every blob is there before the manifest that names it
            assert fake.blobs[layer["digest"]]
        assert all(not w.startswith("blob") for w in fake.writes[put + 1 :] if "cluster" in w)
        signed = verify_cluster_artifact(fake, REPO, digest, result.cluster)
        assert signed.sha == result.cluster.report_digest
        assert signed.key is not None
        assert signed.key.fingerprint == KEY.public.fingerprint
    # the release tag moved only after the artifact was served in both registries
    assert clients["b"].writes.index(f"manifest {REPO}:{tag}") < clients["b"].writes.index(
        f"manifest {REPO}:{CELL.tag}"
    )


def test_what_is_attached_names_no_node_host_address_or_user(tmp_path: Path) -> None:
    clients, digest, _ = released(tmp_path)
    doc = json.loads(clients["b"].get_manifest(REPO, cluster_tag(digest)).body)
    envelope = clients["b"].blobs[doc["layers"][0]["digest"]]
    statement = base64.b64decode(json.loads(envelope)["payload"]).decode()
    for secret in ("root@", "@n1", "10.0.0.", '"m-1"'):
        assert secret not in statement, secret
    assert "node-1" in statement
    assert "root@n1" in (tmp_path / "cluster" / "cluster.json").read_text()  # the local file keeps them


def test_an_envelope_that_names_the_hosts_refuses_the_cell_and_nothing_is_attached(tmp_path: Path) -> None:
    clients, digest = registries()
    data = cluster_document(digest)  # signed as it is: what an imagesmith that did not redact signed
    env = signing.sign_statement(REPO, digest, clusterrecord.CLUSTER_PREDICATE_TYPE, data, KEY)
    write_cluster(tmp_path / "cluster", data, envelope=env)
    result = release(tmp_path, clients, digest)
    assert result.status == "refused"
    assert "names the nodes' hosts" in " ".join(result.reasons)
    assert cluster_tag(digest) not in clients["a"].tagged(REPO)
    assert cluster_tag(digest) not in clients["b"].tagged(REPO)


def test_attach_is_idempotent_the_same_evidence_the_same_digest_and_no_write(tmp_path: Path) -> None:
    clients, digest, result = released(tmp_path)
    again = release(tmp_path, clients, digest)  # a rerun: everything is there
    assert again.status in ("up-to-date", "promoted"), again.reasons  # (the test's evidence is re-signed)
    assert again.cluster == result.cluster
    assert not any("attach the signed cluster report" in s for s in again.steps)
    # another release of the same evidence, into fresh registries: the same manifest digest
    other, digest2 = registries()
    assert digest2 == digest
    assert release(tmp_path, other, digest).cluster.artifact == result.cluster.artifact
    fake = clients["a"]
    writes = list(fake.writes)
    subject = fake.get_manifest(REPO, digest)
    envelope = (tmp_path / "cluster" / clusterrecord.CLUSTER_ATTESTATION).read_bytes()
    signed = clusterrecord.verify_report(envelope, TRUSTED, source="c")  # the same evidence, read again
    assert cluster_manifest(subject, signed).digest == result.cluster.artifact
    assert attach_cluster(fake, REPO, subject, signed, result.cluster) == result.cluster.artifact
    assert fake.writes == writes  # served whole already: nothing put


def test_a_damaged_artifact_in_a_registry_is_put_again(tmp_path: Path) -> None:
    clients, digest, result = released(tmp_path)
    fake = clients["a"]
    fake.add_manifest(REPO, cluster_tag(digest), _foreign_manifest(fake, digest))  # another artifact there
    again = release(tmp_path, clients, digest)
    assert again.status == "promoted", again.reasons
    assert any("attach the signed cluster report as" in s for s in again.steps)
    assert fake.tagged(REPO)[cluster_tag(digest)] == result.cluster.artifact


class _Forgetful(FakeRegistry):
    """Takes the cluster artifact's manifest PUT and keeps nothing under the tag."""

    def put_manifest(self, repo: str, reference: str, manifest: ManifestData) -> str:
        digest = super().put_manifest(repo, reference, manifest)
        if reference.endswith(".cluster"):
            del self.tags[repo, reference]
        return digest


def test_a_registry_that_does_not_keep_the_artifact_fails_the_cell_before_any_tag_moves(
    tmp_path: Path,
) -> None:
    clients, digest = registries()
    b = clients["b"]
    clients["b"] = _Forgetful(name=b.name, host=b.host)
    write_cluster(tmp_path / "cluster", cluster_document(digest))
    result = release(tmp_path, clients, digest)
    assert result.status == "failed"
    text = " ".join(result.reasons)
    assert "no cluster artifact is attached" in text
    assert cluster_tag(digest) in text
    assert CELL.tag not in clients["a"].tagged(REPO)  # no release tag moved anywhere
    assert CELL.tag not in clients["b"].tagged(REPO)


# -- what a registry serves that the signed index does not vouch for -----------------------------------------


def _foreign_manifest(fake: FakeRegistry, digest: str, **change: Any) -> ManifestData:
    """A cluster artifact of *digest* (2 nodes: another report than the released one), its blobs stored."""
    signed = change.pop("signed", None) or signed_of(digest, nodes=2)
    assert signed.key is not None
    key = change.pop("key", None) or signed.key.pem
    subject = change.pop("subject", None) or fake.get_manifest(REPO, digest)
    layers = change.pop("layers", None) or [(DSSE_MEDIA_TYPE, signed.envelope), (CLUSTER_KEY_MEDIA_TYPE, key)]
    for _, blob in layers:
        fake.add_blob(blob)
    fake.add_blob(EMPTY_BLOB)
    m = artifact_manifest(
        artifact_type=change.pop("artifact_type", CLUSTER_ARTIFACT_TYPE),
        layer_media_type=layers[0][0],
        layer=layers[0][1],
        subject=subject,
        annotations={},
        extra_layers=layers[1:],
    )
    return replace(m, media_type=change.pop("media_type", m.media_type))


def _serve(fake: FakeRegistry, digest: str, summary: ClusterSummary, **change: Any) -> ClusterSummary:
    """Serve a foreign artifact under the cluster tag; the summary of an index that records its digest (so
    the checks after the digest's are reached)."""
    m = _foreign_manifest(fake, digest, **change)
    fake.add_manifest(REPO, cluster_tag(digest), m)
    return replace(summary, artifact=m.digest)


def test_a_missing_artifact_or_an_entry_that_records_none_is_refused(tmp_path: Path) -> None:
    clients, digest, result = released(tmp_path)
    fake = clients["a"]
    e = _refused(fake, digest, replace(result.cluster, artifact=""))
    assert e.field == "cluster.artifact"
    assert "records no cluster artifact (released before" in e.message
    del fake.tags[REPO, cluster_tag(digest)]
    e = _refused(fake, digest, result.cluster)
    assert (e.field, e.fault) == ("manifest", Fault.FOREIGN_ARTIFACT)


def test_a_swapped_artifact_is_refused_by_the_digest_the_signed_index_records(tmp_path: Path) -> None:
    clients, digest, result = released(tmp_path)
    fake = clients["a"]
    _serve(fake, digest, result.cluster)  # a valid, signed report of the digest, but not the released one
    e = _refused(fake, digest, result.cluster)
    assert e.field == "cluster.artifact"
    assert result.cluster.artifact in e.message


def _other_image(fake: FakeRegistry, digest: str) -> dict[str, Any]:
    other = ManifestData(body=b"{}", media_type=fake.get_manifest(REPO, digest).media_type, digest=OTHER)
    return {"subject": other, "signed": signed_of(OTHER)}


def _envelope_of_another_key(fake: FakeRegistry, digest: str) -> dict[str, Any]:
    return {"signed": signed_of(digest, key=signing.generate_key()), "key": KEY.public.pem}


def _statement_about_another_digest(fake: FakeRegistry, digest: str) -> dict[str, Any]:
    return {"signed": signed_of(OTHER)}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda f, d: {"artifact_type": "application/vnd.example+json"}, "artifactType", "not application"),
        (
            lambda f, d: {"media_type": "application/vnd.docker.distribution.manifest.v2+json"},
            "mediaType",
            "not an OCI image manifest",
        ),
        (_other_image, "subject.digest", "another image"),
        (
            lambda f, d: {"layers": [(DSSE_MEDIA_TYPE, signed_of(d).envelope)]},
            "layers",
            "not one application/vnd.dsse",
        ),
        (
            lambda f, d: {
                "layers": [
                    (DSSE_MEDIA_TYPE, signed_of(d).envelope),
                    (CLUSTER_KEY_MEDIA_TYPE, KEY.public.pem),
                    ("application/octet-stream", b"x"),
                ]
            },
            "layers",
            "not one",
        ),
        (_envelope_of_another_key, "envelope", "signature"),
        (lambda f, d: {"key": b"not a key"}, "envelope", "key layer"),
        (_statement_about_another_digest, "envelope", f"the signed statement is about {OTHER}"),
    ],
    ids=[
        "artifact-type",
        "media-type",
        "another-image",
        "no-key-layer",
        "extra-layer",
        "another-key",
        "bad-key",
        "another-digest",
    ],
)
def test_what_an_attacker_can_push_is_refused_naming_the_field(
    tmp_path: Path, change: Any, field: str, words: str
) -> None:
    clients, digest, result = released(tmp_path)
    fake = clients["a"]
    summary = _serve(fake, digest, result.cluster, **change(fake, digest))
    e = _refused(fake, digest, summary)
    assert e.field == field, e.message
    assert words in e.message, e.message


def test_a_report_other_than_the_one_the_index_summarises_is_refused(tmp_path: Path) -> None:
    clients, digest, result = released(tmp_path)
    fake = clients["a"]
    summary = _serve(fake, digest, result.cluster)  # 2 nodes, signed by the trusted key
    e = _refused(fake, digest, summary)
    assert e.field == "cluster.report_digest"
    same = replace(summary, report_digest=signed_of(digest, nodes=2).sha)
    e = _refused(fake, digest, same)
    assert e.field == "cluster.nodes"
    assert "the signed report gives 2, the index records 3" in e.message
    failed = _serve(fake, digest, result.cluster, signed=signed_of(digest, failed=True))
    e = _refused(fake, digest, replace(failed, report_digest=signed_of(digest, failed=True).sha))
    assert e.field == "verdict"


def test_a_huge_envelope_is_refused_before_it_is_read(tmp_path: Path) -> None:
    clients, digest, result = released(tmp_path)
    fake = clients["a"]
    m = json.loads(fake.get_manifest(REPO, cluster_tag(digest)).body)
    m["layers"][0]["size"] = MAX_ENVELOPE_BYTES + 1
    body = json.dumps(m).encode()
    served = ManifestData(
        body=body, media_type=fake.get_manifest(REPO, digest).media_type, digest=sha256(body)
    )
    fake.add_manifest(REPO, cluster_tag(digest), served)
    with pytest.raises(RegistryError) as err:
        verify_cluster_artifact(fake, REPO, digest, replace(result.cluster, artifact=served.digest))
    assert err.value.field == "size"
    assert "registry a" in err.value.message
    assert cluster_tag(digest) in err.value.message


# -- the renter: pick --verify-cluster -----------------------------------------------------------------------


def _pick_of(fake: FakeRegistry, digest: str, cluster: ClusterSummary | None) -> Any:
    from types import SimpleNamespace

    copy = RegistryCopy.parse(name=fake.name, reference=f"{fake.host}/{REPO}:{CELL.tag}", digest=digest)
    image = SimpleNamespace(tag=CELL.tag, digest=digest, cluster=cluster)
    return SimpleNamespace(image=image, registry=copy)


def test_pick_verify_cluster_fetches_and_checks_the_picked_digests_report(tmp_path: Path) -> None:
    from imagesmith.pick import verify_cluster

    clients, digest, result = released(tmp_path)
    fake = clients["b"]
    lines = verify_cluster(_pick_of(fake, digest, result.cluster), client_for=lambda _r: fake)
    assert lines[0].startswith(f"cluster evidence verified: {fake.host}/{REPO}:{cluster_tag(digest)}")
    assert "validated on 3 nodes × 8 GPUs, fabric ib" in lines[1]
    assert KEY.public.fingerprint in lines[2]
    _serve(fake, digest, result.cluster)  # swapped in the registry
    with pytest.raises(RegistryError) as err:
        verify_cluster(_pick_of(fake, digest, result.cluster), client_for=lambda _r: fake)
    assert err.value.field == "cluster.artifact"
    assert err.value.exit_code == 9
    with pytest.raises(ConfigError) as none:
        verify_cluster(_pick_of(fake, digest, None), client_for=lambda _r: fake)
    assert none.value.field == "cluster"


def test_pick_refuses_verify_cluster_with_an_unverified_index(run_cli: Any, tmp_path: Path) -> None:
    index = tmp_path / "index.json"
    index.write_text("{}")  # never read: the flags are refused first
    out = run_cli("pick", "--index", str(index), "--no-verify", "--verify-cluster", "--driver", "580.95.05")
    assert out.exit_code == 2
    assert "--verify-cluster checks the cluster evidence against the signed index" in out.stderr
    assert "drop --no-verify" in out.stderr
