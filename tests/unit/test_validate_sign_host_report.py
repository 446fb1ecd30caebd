"""Issue 17, both halves together: ``validate IMAGE --sign-key`` signs the report the HOST wrote (the scratch
folder flow), redacted as it is attached in registries, as an attestation of the digest the ENGINE reports.

A fake engine plays a hostile image: its suite forges "passed", names another digest and puts the validation
host's name and a user's home folder into its messages. The attestation must carry none of that: the host's
verdict, ``image.digest`` = the engine's digest, the redacted text, and nothing the container wrote verbatim.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.attestation import ATTESTATION_FILE, verify_validation
from imagesmith.engine import RunResult
from imagesmith.validate.container import REPORT_MOUNT
from imagesmith.validate.redact import REDACTED, redact_report
from tests.unit.test_validate_scratch import OTHER_DIGEST, _check, forged_report

REPO = "127.0.0.1:5000/imagesmith/torch"
DIGEST = "sha256:" + "a" * 64
IMAGE = f"{REPO}@{DIGEST}"
IMAGE_ID = "sha256:" + "1" * 64


class SubjectEngine:
    """An engine that holds IMAGE (RepoDigests lists DIGEST) and whose container writes *claim*."""

    def __init__(self, claim: bytes, *, ids: list[str] | None = None) -> None:
        self.claim = claim
        self.ids = ids or []  # successive image ids inspect reports (the last one repeats)

    def inspect(self, reference: str) -> dict[str, Any]:
        image_id = self.ids.pop(0) if len(self.ids) > 1 else (self.ids[0] if self.ids else IMAGE_ID)
        return {
            "Id": image_id,
            "RepoDigests": [f"{REPO}@{DIGEST}"],
            "Config": {"Labels": {"io.imagesmith.validate": "1"}, "Env": []},
        }

    def has_nvidia_runtime(self) -> bool:
        return True

    def run_container(self, image: str, command: Any = None, **options: Any) -> RunResult:
        (scratch,) = [Path(m.source) for m in options.get("mounts", ()) if m.target == REPORT_MOUNT]
        (scratch / "report.json").write_bytes(self.claim)
        return RunResult(exit_code=0, output="suite ran", duration_s=1.0)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Callable[..., SubjectEngine]:
    def install(claim: bytes, **kw: Any) -> SubjectEngine:
        fake = SubjectEngine(claim, **kw)
        monkeypatch.setattr("imagesmith.engine.Engine", lambda *a, **k: fake)
        return fake

    return install


def _hostile_claim(tmp_path: Path) -> bytes:
    doc = json.loads(forged_report("passed", [_check("test_a"), _check("test_b", "failed", "bad")]))
    doc["checks"][1]["message"] = f"ran as alice@gpu-node-17 in /home/alice/{tmp_path.name}"
    return json.dumps(doc).encode()


def test_the_signed_predicate_is_the_hosts_report_redacted(
    tmp_path: Path, run_cli: Callable[..., Any], engine: Callable[..., SubjectEngine]
) -> None:
    engine(_hostile_claim(tmp_path))
    key = signing.write_keypair(tmp_path / "v.key", tmp_path / "v.pub")
    out = tmp_path / "report"
    r = run_cli(
        "validate", IMAGE, "--report", str(out), "--gpus", "toolkit", "--sign-key", str(tmp_path / "v.key")
    )
    assert r.exit_code == 7, r.stdout + r.stderr  # the host's verdict: failed, whatever the suite claimed
    assert f"attests {REPO}@{DIGEST}" in r.stdout
    local = json.loads((out / "report.json").read_bytes())
    envelope = (out / ATTESTATION_FILE).read_bytes()
    att = verify_validation(envelope, [key.public], digest=DIGEST)
    predicate = json.loads(att.report)
    # the host's report, redacted — not the claim, not the unredacted local file
    assert predicate == redact_report(local)
    assert predicate["verdict"] == local["verdict"] == "failed"
    assert predicate["suite_claim"]["verdict"] == "passed"
    assert predicate["target"] == local["target"] == IMAGE  # what the host ran
    assert predicate["image"] == local["image"] == {"digest": DIGEST}  # the engine's, not OTHER_DIGEST
    assert predicate["container"]["image_id"] == IMAGE_ID
    assert predicate["options"]["report_dir"] == REDACTED
    statement = json.loads(base64.b64decode(json.loads(envelope)["payload"]))
    text = json.dumps(statement)
    for leaked in ("alice", "gpu-node-17", str(out), OTHER_DIGEST):
        assert leaked not in text
    assert "alice@gpu-node-17" in json.dumps(local)  # the local report keeps the operator's evidence


def test_an_image_that_moves_before_the_run_is_neither_run_nor_signed(
    tmp_path: Path, run_cli: Callable[..., Any], engine: Callable[..., SubjectEngine]
) -> None:
    engine(forged_report(), ids=[IMAGE_ID, "sha256:" + "2" * 64])
    signing.write_keypair(tmp_path / "v.key", tmp_path / "v.pub")
    out = tmp_path / "report"
    r = run_cli("validate", f"{REPO}:latest", "--report", str(out), "--sign-key", str(tmp_path / "v.key"))
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "it moved before the run; nothing ran" in r.stderr
    assert not (out / "report.json").exists()
    assert not (out / ATTESTATION_FILE).exists()


def test_an_image_that_moves_during_the_run_is_not_signed(
    tmp_path: Path, run_cli: Callable[..., Any], engine: Callable[..., SubjectEngine]
) -> None:
    engine(forged_report(), ids=[IMAGE_ID, IMAGE_ID, "sha256:" + "3" * 64])
    signing.write_keypair(tmp_path / "v.key", tmp_path / "v.pub")
    out = tmp_path / "report"
    r = run_cli("validate", f"{REPO}:latest", "--report", str(out), "--sign-key", str(tmp_path / "v.key"))
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "changed while it was validated" in r.stderr
    assert "nothing signed" in r.stderr
    assert (out / "report.json").exists()  # the host's report stays: it is just not evidence
    assert not (out / ATTESTATION_FILE).exists()


def test_an_attestation_the_image_plants_is_refused_and_a_stale_one_removed(
    tmp_path: Path, run_cli: Callable[..., Any], engine: Callable[..., SubjectEngine], monkeypatch: Any
) -> None:
    """Unsigned run (no key on this host): an attestation.dsse.json the suite leaves in its scratch folder is
    never copied (it makes the verdict failed), and the one an earlier run left in the report folder is gone,
    so release never reads an old or planted envelope beside this run's report."""
    monkeypatch.delenv("IMAGESMITH_SIGNING_KEY", raising=False)
    fake = engine(forged_report())
    planted = b'{"payloadType": "application/vnd.in-toto+json", "payload": "", "signatures": []}'
    original = fake.run_container

    def run_and_plant(image: str, command: Any = None, **options: Any) -> RunResult:
        result = original(image, command, **options)
        (scratch,) = [Path(m.source) for m in options.get("mounts", ()) if m.target == REPORT_MOUNT]
        (scratch / ATTESTATION_FILE).write_bytes(planted)
        return result

    fake.run_container = run_and_plant  # type: ignore[method-assign]
    out = tmp_path / "report"
    out.mkdir()
    (out / ATTESTATION_FILE).write_bytes(b"an earlier run's envelope")
    r = run_cli("validate", IMAGE, "--report", str(out), "--gpus", "toolkit")
    assert r.exit_code == 7, r.stdout + r.stderr
    assert not (out / ATTESTATION_FILE).exists()
    local = json.loads((out / "report.json").read_bytes())
    assert local["verdict"] == "failed"
    assert f"{ATTESTATION_FILE}: only the host signs evidence" in local["verdict_reason"]
    assert "image" not in local  # unsigned: no engine digest recorded, none claimed carried


def test_the_validate_stage_names_the_attestation_file_release_reads() -> None:
    from imagesmith.validate.container import HOST_SIGNED

    assert HOST_SIGNED == ATTESTATION_FILE
