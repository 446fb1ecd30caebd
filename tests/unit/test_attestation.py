"""Validation attestations (imagesmith/attestation.py) and how release reads evidence (release.read_evidence):
the digest comes from the engine, only a trusted signature makes a report count, the registry layout is
cosign's."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.attestation import (
    ATTESTATION_FILE,
    COSIGN_SIGNATURE_ANNOTATION,
    DSSE_MEDIA_TYPE,
    VALIDATION_PREDICATE_TYPE,
    attestation_manifest,
    claimed_digest,
    envelope_layer,
    image_subject,
    sign_validation,
    verify_validation,
)
from imagesmith.cli import main
from imagesmith.errors import SignatureError
from imagesmith.release import collect_reports
from imagesmith.tags import cosign_attestation_tag

D = "sha256:" + "d" * 64
E = "sha256:" + "e" * 64
KEY = signing.generate_key()
REPORT: dict[str, Any] = {
    "schema": 2,
    "verdict": "passed",
    "target": "reg.example/team/torch:x-candidate",
    "started": "2026-12-01T00:00:00Z",
    "gpus": [{"index": 0, "name": "NVIDIA H200", "driver": "580.159.04"}],
}


def test_subject_is_the_digest_the_engine_reports() -> None:
    inspect = {"Id": "sha256:" + "1" * 64, "RepoDigests": [f"reg.example/team/torch@{D}"]}
    assert image_subject(inspect, f"reg.example/team/torch@{D}") == ("reg.example/team/torch", D)
    assert image_subject(inspect, "reg.example/team/torch:x-candidate") == ("reg.example/team/torch", D)
    # asked for a digest the engine does not list: refused, whatever the reference says
    with pytest.raises(SignatureError, match=f"does not report digest {E}"):
        image_subject(inspect, f"reg.example/team/torch@{E}")
    # another repository's digest never stands in
    with pytest.raises(SignatureError, match="no registry digest"):
        image_subject(inspect, "other.example/torch:x")


def test_a_local_only_or_ambiguous_image_cannot_be_attested() -> None:
    with pytest.raises(SignatureError, match="no registry digest") as info:
        image_subject({"RepoDigests": []}, "imagesmith/smoke:cell")
    assert "validate it by digest" in str(info.value)
    two = {"RepoDigests": [f"r.example/t@{D}", f"r.example/t@{E}"]}
    with pytest.raises(SignatureError, match="2 registry digests"):
        image_subject(two, "r.example/t:latest")
    assert image_subject(two, f"r.example/t@{E}") == ("r.example/t", E)


def test_signed_validation_round_trip_and_binding() -> None:
    env = sign_validation(REPORT, repository="reg.example/team/torch", digest=D, key=KEY)
    att = verify_validation(env, [KEY.public], digest=D)
    assert att.digest == D
    assert json.loads(att.report) == REPORT
    assert claimed_digest(env) == D
    with pytest.raises(SignatureError, match=f"about {D}, not {E}"):
        verify_validation(env, [KEY.public], digest=E)
    payload = json.loads(base64.b64decode(json.loads(env)["payload"]))
    assert payload["predicateType"] == VALIDATION_PREDICATE_TYPE
    assert payload["subject"] == [{"name": "reg.example/team/torch", "digest": {"sha256": "d" * 64}}]


def test_another_predicate_type_is_not_a_validation() -> None:
    env = signing.sign_statement("r", D, "https://slsa.dev/provenance/v1", REPORT, KEY)
    with pytest.raises(SignatureError, match="predicateType"):
        verify_validation(env, [KEY.public], digest=D)


def test_cosign_layout() -> None:
    env = sign_validation(REPORT, repository="r", digest=D, key=KEY)
    layer = envelope_layer(env)
    assert layer["mediaType"] == DSSE_MEDIA_TYPE == "application/vnd.dsse.envelope.v1+json"
    assert layer["annotations"] == {
        COSIGN_SIGNATURE_ANNOTATION: "",
        "predicateType": VALIDATION_PREDICATE_TYPE,
    }
    manifest, config = attestation_manifest([layer])
    doc = manifest.json()
    assert doc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert doc["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert json.loads(config)["rootfs"] == {"type": "layers", "diff_ids": [layer["digest"]]}
    assert cosign_attestation_tag(D) == "sha256-" + "d" * 64 + ".att"


def _folder(tmp_path: Path, name: str, report: dict[str, Any], envelope: bytes | None) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "report.json").write_text(json.dumps(report))
    if envelope is not None:
        (d / ATTESTATION_FILE).write_bytes(envelope)
    return d


def test_release_reads_only_signed_evidence(tmp_path: Path) -> None:
    forged = {**REPORT, "image": {"digest": D}}
    _folder(tmp_path, "forged", forged, None)
    _folder(tmp_path, "good", forged, sign_validation(REPORT, repository="r", digest=D, key=KEY))
    _folder(tmp_path, "other", forged, sign_validation(REPORT, repository="r", digest=E, key=KEY))
    stranger = signing.generate_key("ed25519")
    _folder(tmp_path, "unknown", forged, sign_validation(REPORT, repository="r", digest=D, key=stranger))
    env = json.loads(sign_validation({**REPORT, "verdict": "failed"}, repository="r", digest=D, key=KEY))
    body = base64.b64decode(env["payload"]).replace(b'"verdict":"failed"', b'"verdict":"passed"')
    env["payload"] = base64.b64encode(body).decode()
    _folder(tmp_path, "tampered", forged, json.dumps(env).encode())

    by = {Path(r.path).parent.name: r for r in collect_reports([tmp_path], [KEY.public])}
    assert by["good"].evidence
    assert by["good"].digest == D
    assert by["good"].passed
    assert by["other"].evidence
    assert by["other"].digest == E
    assert by["other"].claimed == D
    for name, why in (
        ("forged", "not signed"),
        ("unknown", "unknown key"),
        ("tampered", "no signature verifies"),
    ):
        assert not by[name].evidence, name
        assert why in str(by[name].problem), (name, by[name].problem)
    # no trusted key: nothing is evidence
    assert not any(r.evidence for r in collect_reports([tmp_path], []))


@pytest.mark.parametrize(
    "label", [f"x@{D}", f"reg.example/t:tag@{D}", "x@sha512:" + "a" * 128, "y@sha256:abcdef12"]
)
def test_validate_label_cannot_name_a_digest(label: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "local://", "--label", label]) == 2
    err = capsys.readouterr().err
    assert "names a digest" in err
    assert "fix:" in err


def test_validate_sign_key_needs_an_image_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "v.key"
    signing.write_keypair(key, tmp_path / "v.pub")
    assert main(["validate", "local://", "--sign-key", str(key)]) == 2
    assert "only an image has a digest to attest" in capsys.readouterr().err


def test_validate_refuses_a_bad_sign_key_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "v.key"
    signing.write_keypair(key, tmp_path / "v.pub")
    key.chmod(0o644)
    assert main(["validate", "reg.example/t@" + D, "--sign-key", str(key)]) == 2
    assert "chmod 600" in capsys.readouterr().err


def test_project_trusted_keys_are_relative_paths(tmp_path: Path) -> None:
    from imagesmith.attestation import load_trusted_keys
    from imagesmith.errors import ConfigError
    from imagesmith.project import ProjectError, load_project

    (tmp_path / "matrices").mkdir()
    toml = tmp_path / "imagesmith.toml"
    toml.write_text('schema = 1\n[release]\ntrusted_keys = ["keys/validation.pub"]\n')
    project = load_project(toml)
    assert project.trusted_keys == ((tmp_path / "keys" / "validation.pub").resolve(),)
    with pytest.raises(ConfigError, match=r"release\.trusted_keys: cannot read the public key"):
        load_trusted_keys(project.trusted_keys, origin=f"{toml}: release.trusted_keys")
    signing.write_keypair(tmp_path / "keys" / "validation.key", tmp_path / "keys" / "validation.pub")
    assert len(load_trusted_keys(project.trusted_keys, origin="x")) == 1
    toml.write_text('schema = 1\n[release]\ntrusted_keys = ["/etc/validation.pub"]\n')
    with pytest.raises(ProjectError, match=r"release\.trusted_keys\[0\] = '/etc/validation.pub' is absolute"):
        load_project(toml)
    toml.write_text('schema = 1\n[release]\ntrusted_keys = "keys/validation.pub"\n')
    with pytest.raises(ConfigError, match="trusted_keys"):
        load_project(toml)
