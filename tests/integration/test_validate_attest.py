"""``imagesmith validate IMAGE@DIGEST --sign-key KEY`` on the real engine, with the smoke candidate the
local registry holds (tests/integration/e2e/test_smoke_build.py pushes it): the attestation's subject is the
digest the engine reports for the pulled image, its predicate the report the host wrote, redacted; the run is
signed whatever its verdict (here "not validated": no GPU), and release holds that digest back on it. An image
the engine has no registry digest for is refused before anything runs."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.attestation import ATTESTATION_FILE, VALIDATION_PREDICATE_TYPE, verify_validation
from imagesmith.engine import Engine
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.release import collect_reports
from imagesmith.tags import candidate_tag
from imagesmith.validate.redact import REDACTED, redact_report
from tests.localinfra import local_registries

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.registry]


@pytest.fixture(scope="module")
def pinned_smoke() -> str:
    """``127.0.0.1:5000/imagesmith/torch@sha256:…`` of the smoke candidate, pulled by digest."""
    cell = build_plan(load_matrix("smoke")).cells[0]
    target = cell.publish.registries[0]
    digest = local_registries().plain_client().manifest_digest(target.repo, candidate_tag(cell))
    if digest is None:
        pytest.fail(
            f"no {target.image}:{candidate_tag(cell)} in the local registry: run `imagesmith build --matrix "
            "smoke --push` (tests/integration/e2e/test_smoke_build.py does) first"
        )
    ref = f"{target.image}@{digest}"
    Engine().pull(ref)
    return ref


def test_validate_signs_the_digest_the_engine_reports(
    pinned_smoke: str, run_cli: Any, tmp_path: Path
) -> None:
    key_file = tmp_path / "validation.key"
    key = signing.write_keypair(key_file, tmp_path / "validation.pub")
    repo, digest = pinned_smoke.split("@")
    r = run_cli("validate", pinned_smoke, "--report", str(tmp_path / "r"), "--sign-key", str(key_file))
    assert r.exit_code == 7, r.stdout + r.stderr  # no GPU here: "not validated", never "passed"
    assert f"attests {repo}@{digest}" in r.stdout
    secret = "".join(key_file.read_text().splitlines()[1:-1])
    assert secret[:24] not in r.stdout + r.stderr  # the private key is never printed
    envelope = (tmp_path / "r" / ATTESTATION_FILE).read_bytes()
    att = verify_validation(envelope, [key.public], digest=digest)
    report = json.loads(att.report)
    assert report["verdict"] == "not validated"
    # the predicate is the report the host wrote, redacted as it is attached in registries (issue 17)
    local = json.loads((tmp_path / "r" / "report.json").read_bytes())
    assert report == redact_report(local)
    assert report["options"]["report_dir"] == REDACTED != local["options"]["report_dir"]
    assert report["target"] == local["target"] == pinned_smoke  # what the host ran
    assert report["image"] == local["image"] == {"digest": digest}  # the engine's digest, also the subject
    assert str(tmp_path) not in json.dumps(report)  # no folder of this host inside the signature
    statement = json.loads(base64.b64decode(json.loads(envelope)["payload"]))
    assert statement["subject"] == [{"name": repo, "digest": {"sha256": digest.removeprefix("sha256:")}}]
    assert statement["predicateType"] == VALIDATION_PREDICATE_TYPE
    # release reads it as signed evidence of that digest: not passed, so it can never promote it
    (found,) = collect_reports([tmp_path / "r"], [key.public])
    assert found.evidence
    assert found.digest == digest
    assert not found.passed


def test_an_image_without_a_registry_digest_is_refused_before_running(run_cli: Any, tmp_path: Path) -> None:
    engine = Engine()
    local = f"imagesmith-test/attest-local:{tmp_path.name[-12:].lower()}"
    engine.import_rootfs(_empty_rootfs(tmp_path), local)
    try:
        key_file = tmp_path / "validation.key"
        signing.write_keypair(key_file, tmp_path / "validation.pub")
        r = run_cli("validate", local, "--report", str(tmp_path / "r"), "--sign-key", str(key_file))
        assert r.exit_code == 2, r.stdout + r.stderr
        assert "no registry digest" in r.stderr
        assert "validate it by digest" in r.stderr
        assert not (tmp_path / "r" / "report.json").exists()  # nothing ran
    finally:
        engine.remove(local, force=True)


def _empty_rootfs(tmp_path: Path) -> Path:
    import io
    import tarfile

    tarball = tmp_path / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        info = tarfile.TarInfo("etc/imagesmith-attest")
        data = b"local only\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return tarball
