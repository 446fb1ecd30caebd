"""Issue 31: the release of one cell is a list of named steps over one state (imagesmith/release/steps.py);
each step is called here alone, on a :class:`CellRun` set up as the steps before it leave it, against the
in-memory registry of tests/fakeregistry.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.attestation import attestation_manifest, envelope_layer, sign_validation, verify_validation
from imagesmith.compat import MinDriver, parse_driver
from imagesmith.errors import ConfigError, RegistryError
from imagesmith.refs import Registry
from imagesmith.registry import OCI_MANIFEST, ManifestData
from imagesmith.release import (
    LABEL_CUDA,
    LABEL_MIN_FULL,
    LABEL_MIN_MINOR,
    LABEL_PYTHON,
    LABEL_SHM,
    LABEL_TORCH,
    LABEL_TORCH_ARCH,
    LABEL_TORCHVISION,
    LABEL_VARIANT,
    STEPS,
    CellOptions,
    CellRun,
    ReleaseCell,
    Report,
    VerifiedBlobs,
    attested_report,
    checks,
    promotion,
    release_cell,
    run_steps,
)
from imagesmith.tags import attestation_tag, cosign_attestation_tag
from tests.fakeregistry import FakeRegistry, sha256

KEY = signing.generate_key()
TRUSTED = [KEY.public]
REPO = "acme/torch"
A = Registry(name="a", host="a.example", repository=REPO)
B = Registry(name="b", host="b.example", repository=REPO)
CELL = ReleaseCell(
    matrix="m",
    id="c1",
    tag="2.5.1-cu124-py3.11",
    candidate="2.5.1-cu124-py3.11-candidate",
    targets=(A, B),
    torch="2.5.1",
    torchvision="0.20.1",
    cuda="12.4",
    python="3.11",
    min_driver=MinDriver(full=parse_driver("550.54.14"), minor_version=parse_driver("525.60.13")),
    arch=("8.0", "9.0"),
    shm_size="16g",
    fingerprint="f" * 16,
)
LABELS = {
    LABEL_TORCH: "2.5.1",
    LABEL_TORCHVISION: "0.20.1",
    LABEL_VARIANT: "cu124",
    LABEL_CUDA: "12.4",
    LABEL_PYTHON: "3.11",
    LABEL_MIN_FULL: "550.54.14",
    LABEL_MIN_MINOR: "525.60.13",
    LABEL_SHM: "16G",
    LABEL_TORCH_ARCH: "8.0,9.0",
}
LAYER = b"the torch layer"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"


def image(labels: dict[str, str] = LABELS) -> ManifestData:
    config = json.dumps({"os": "linux", "architecture": "amd64", "config": {"Labels": labels}}).encode()
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": CONFIG_TYPE, "digest": sha256(config), "size": len(config)},
            "layers": [{"mediaType": LAYER_TYPE, "digest": sha256(LAYER), "size": len(LAYER)}],
        }
    ).encode()
    IMAGES[sha256(body)] = config
    return ManifestData(body=body, media_type=OCI_MANIFEST, digest=sha256(body))


#: manifest digest → its config (what a registry holding the image stores beside it)
IMAGES: dict[str, bytes] = {}


def registries(labels: dict[str, str] = LABELS, *, in_b: bool = False) -> tuple[dict[str, Any], str]:
    """Registry a holds the candidate (image, config, layer); b holds it too with *in_b*, else nothing."""
    manifest = image(labels)
    out: dict[str, Any] = {}
    for reg, holds in ((A, True), (B, in_b)):
        fake = FakeRegistry(name=reg.name, host=reg.host)
        if holds:
            fake.add_blob(IMAGES[manifest.digest])
            fake.add_blob(LAYER)
            fake.add_manifest(REPO, CELL.candidate, manifest)
        out[reg.name] = fake
    return out, manifest.digest


def envelope(digest: str, status: str = "passed") -> bytes:
    report = {
        "schema": 2,
        "verdict": "passed" if status == "passed" else "failed",
        "target": f"a.example/{REPO}:{CELL.candidate}@{digest}",
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "driver": "570.133.20"}],
        "checks": [{"name": "test_gpu_inventory", "module": "test_02_gpus", "status": status}],
    }
    return sign_validation(report, repository=REPO, digest=digest, key=KEY)


def evidence(digest: str, status: str = "passed") -> Report:
    return attested_report(verify_validation(envelope(digest, status), TRUSTED), source=f"r/{status}")


def run_of(clients: dict[str, Any], reports: Sequence[Report] = (), **options: Any) -> CellRun:
    opts: dict[str, Any] = {"dry_run": False, "trusted": TRUSTED, "verified": VerifiedBlobs(None)} | options
    return CellRun(cell=CELL, reports=list(reports), clients=clients, options=CellOptions(**opts))


def up_to(name: str, run: CellRun) -> CellRun:
    """*run* after the steps before *name* (each must pass)."""
    for step_name, step in STEPS:
        if step_name == name:
            return run
        step(run)
        assert not run.done, (step_name, run.result.reasons)
    raise AssertionError(name)


# -- the list ------------------------------------------------------------------------------------------------


def test_the_release_of_a_cell_is_these_named_steps_in_this_order() -> None:
    assert [name for name, _ in STEPS] == [
        "find candidate",
        "collect evidence",
        "check evidence",
        "check cluster evidence",
        "scan gate",
        "signed SBOM",
        "read image",
        "cluster artifact",
        "check labels",
        "check entry",
        "copy",
        "read back",
        "promote",
        "record",
    ]


def test_the_runner_stops_at_the_first_step_that_refuses() -> None:
    seen: list[str] = []

    def ok(run: CellRun) -> None:
        seen.append("ok")

    def no(run: CellRun) -> None:
        seen.append("no")
        run.refuse("because")

    run = run_steps(run_of({}), [("one", ok), ("two", no), ("three", ok)])
    assert seen == ["ok", "no"]
    assert (run.result.status, run.result.reasons) == ("refused", ["because"])


# -- find candidate ------------------------------------------------------------------------------------------


def test_find_candidate_takes_the_digest_every_holding_registry_agrees_on() -> None:
    clients, digest = registries()
    run = run_of(clients)
    checks.find_candidate(run)
    assert (run.done, run.digest, run.result.digest, run.held) == (False, digest, digest, {"a": digest})


def test_find_candidate_refuses_none_and_different_digests() -> None:
    empty = {"a": FakeRegistry(name="a"), "b": FakeRegistry(name="b")}
    run = run_of(empty)
    checks.find_candidate(run)
    assert run.result.status == "refused"
    assert run.result.reasons[0].startswith(
        f"no candidate {CELL.candidate} in any registry of the cell (a, b)"
    )
    clients, digest = registries(in_b=True)
    other = image({**LABELS, LABEL_SHM: "8G"})
    clients["b"].add_manifest(REPO, CELL.candidate, other)
    run = run_of(clients)
    checks.find_candidate(run)
    assert run.result.status == "refused"
    assert run.result.reasons == [
        f"the candidate tag points at different digests: a={digest}, b={other.digest}: rerun imagesmith "
        f"build --matrix m --only c1 --push"
    ]


# -- collect and check evidence -----------------------------------------------------------------------------


def test_collect_evidence_takes_the_signed_reports_of_the_digest_only() -> None:
    clients, digest = registries()
    mine, other = evidence(digest), evidence("sha256:" + "9" * 64)
    run = up_to("collect evidence", run_of(clients, [mine, other]))
    checks.collect_evidence(run)
    assert run.for_digest == [mine]


def test_collect_evidence_falls_back_to_attestations_stored_beside_the_digest() -> None:
    clients, digest = registries()
    stored = envelope(digest)
    manifest, config = attestation_manifest([envelope_layer(stored)])
    for blob in (config, stored):
        clients["a"].add_blob(blob)
    clients["a"].add_manifest(REPO, cosign_attestation_tag(digest), manifest)
    run = up_to("collect evidence", run_of(clients))
    checks.collect_evidence(run)
    assert [r.envelope for r in run.for_digest] == [stored]
    checks.check_evidence(run)
    assert not run.done
    assert [r.envelope for r in run.passing] == [stored]


def test_check_evidence_passes_a_pass_and_refuses_a_failure_beside_it() -> None:
    clients, digest = registries()
    run = up_to("check evidence", run_of(clients, [evidence(digest)]))
    checks.check_evidence(run)
    assert not run.done
    assert len(run.passing) == 1
    run = up_to("check evidence", run_of(clients, [evidence(digest), evidence(digest, "failed")]))
    checks.check_evidence(run)
    assert run.result.status == "refused"
    assert run.result.reasons == [f"validation of {digest} failed (r/failed): test_gpu_inventory: failed"]


def test_check_evidence_without_evidence_names_why_and_a_registry_fault_is_a_failure() -> None:
    clients, digest = registries()
    run = up_to("check evidence", run_of(clients))
    checks.check_evidence(run)
    assert run.result.status == "refused"
    assert run.result.reasons[-1].startswith(
        f"no signed validation attestation for the candidate digest {digest}"
    )
    run = up_to("check evidence", run_of(clients))
    run.unreadable.append("the attestations stored in a could not be read")
    checks.check_evidence(run)
    assert run.result.status == "failed"
    assert run.result.reasons[0] == "the attestations stored in a could not be read"


# -- the gates -----------------------------------------------------------------------------------------------


def test_scan_gate_refuses_what_the_gate_refuses_and_an_unreadable_report() -> None:
    clients, digest = registries()
    asked: list[str] = []

    def gate(d: str) -> tuple[None, list[str]]:
        asked.append(d)
        return None, ["CVE-2026-1 is critical"]

    run = up_to("scan gate", run_of(clients, [evidence(digest)], gate=gate))
    checks.scan_gate(run)
    assert (asked, run.result.status, run.result.reasons) == ([digest], "refused", ["CVE-2026-1 is critical"])

    def broken(d: str) -> tuple[None, list[str]]:
        raise ConfigError("scan.json: not a grype report", hint="scan the digest again")

    run = up_to("scan gate", run_of(clients, [evidence(digest)], gate=broken))
    checks.scan_gate(run)
    assert run.result.reasons == ["scan.json: not a grype report (fix: scan the digest again)"]
    run = up_to("scan gate", run_of(clients, [evidence(digest)]))
    checks.scan_gate(run)
    assert not run.done
    assert run.result.vulnerabilities is None


def test_signed_sbom_refuses_one_that_does_not_verify() -> None:
    clients, digest = registries()
    run = up_to(
        "signed SBOM", run_of(clients, [evidence(digest)], sbom_for=lambda d: "x.sbom: bad signature")
    )
    checks.signed_sbom(run)
    assert run.result.status == "refused"
    assert run.result.reasons == [
        "signed SBOM x.sbom: bad signature (make it again: imagesmith sbom IMAGE@DIGEST --sign-key KEY)"
    ]


# -- the image's own word ------------------------------------------------------------------------------------


def test_read_image_reads_the_labels_and_the_blobs_of_the_digest() -> None:
    clients, digest = registries()
    run = up_to("read image", run_of(clients, [evidence(digest)]))
    checks.read_image(run)
    assert run.source == A
    assert run.result.facts is not None
    assert run.result.facts.torch == "2.5.1"
    assert {d for d, _ in run.blobs} == {sha256(LAYER), sha256(IMAGES[digest])}


def test_read_image_refuses_a_foreign_image_and_fails_on_a_registry_fault() -> None:
    clients, digest = registries({k: v for k, v in LABELS.items() if k != LABEL_CUDA})
    run = up_to("read image", run_of(clients, [evidence(digest)]))
    checks.read_image(run)
    assert run.result.status == "refused"
    assert f"its image config has no label {LABEL_CUDA}" in run.result.reasons[0]
    clients, digest = registries()
    run = up_to("read image", run_of(clients, [evidence(digest)]))
    clients["a"].fail = RegistryError("registry a: unreachable (503)", hint="retry later")
    checks.read_image(run)
    assert run.result.status == "failed"
    assert run.result.reasons == [
        f"reading the image config of {digest} from a failed: registry a: unreachable (503) "
        "(fix: retry later)"
    ]


def test_check_labels_refuses_an_image_of_another_cell() -> None:
    clients, digest = registries({**LABELS, LABEL_TORCH: "2.4.0"})
    run = up_to("check labels", run_of(clients, [evidence(digest)]))
    checks.check_labels(run)
    assert run.result.status == "refused"
    assert run.result.reasons[0].startswith(
        f"the image config of the candidate {digest} says torch 2.4.0 (the plan's cell: 2.5.1): it is not "
        "this cell's image"
    )


def test_check_entry_refuses_an_entry_the_index_would_not_read() -> None:
    clients, digest = registries()
    run = up_to("check entry", run_of(clients, [evidence(digest)]))
    checks.check_entry(run)
    assert not run.done
    run.cell = replace(CELL, fingerprint="")
    checks.check_entry(run)
    assert run.result.status == "refused"
    assert run.result.reasons[0].startswith(f"the index entry for {digest} would be invalid: ")
    assert run.result.reasons[0].endswith("; nothing was promoted")


# -- the promotion -------------------------------------------------------------------------------------------


def test_copy_puts_image_and_evidence_everywhere_and_moves_no_tag() -> None:
    clients, digest = registries()
    run = up_to("copy", run_of(clients, [evidence(digest)]))
    promotion.copy(run)
    assert not run.done
    assert run.promoting
    assert run.before == {"a": None, "b": None}
    assert run.result.tag_moves == ["a", "b"]
    b = clients["b"]
    assert b.manifest_digest(REPO, digest) == digest
    assert b.manifest_digest(REPO, cosign_attestation_tag(digest)) is not None
    assert b.manifest_digest(REPO, attestation_tag(digest)) is not None
    assert CELL.tag not in b.tagged(REPO)
    assert CELL.tag not in clients["a"].tagged(REPO)
    assert run.deferred  # the source's own blobs: read back after the copies


def test_copy_with_dry_run_says_what_it_would_do_and_writes_nothing() -> None:
    clients, digest = registries()
    run = up_to("copy", run_of(clients, [evidence(digest)], dry_run=True))
    promotion.copy(run)
    assert run.result.status == "would-promote"
    assert f"copy manifest {digest[:19]}… and its blobs from a to b" in run.result.steps
    assert clients["b"].writes == []
    assert clients["a"].writes == []


def test_copy_failing_in_one_registry_moves_no_release_tag() -> None:
    clients, digest = registries()
    run = up_to("copy", run_of(clients, [evidence(digest)]))
    clients["b"].fail = RegistryError("registry b: storage full", hint="free space in b")
    promotion.copy(run)
    assert run.result.status == "failed"
    assert run.result.reasons[0] == "b: registry b: storage full (fix: free space in b)"
    assert run.result.reasons[-1].startswith(f"no release tag was moved: {CELL.tag} is put only once")
    assert CELL.tag not in clients["a"].tagged(REPO)


def test_read_back_names_a_damaged_source_blob() -> None:
    clients, digest = registries()
    run = up_to("read back", run_of(clients, [evidence(digest)]))
    clients["a"].blobs[sha256(LAYER)] = b"damaged"
    run.streamed.clear()
    promotion.read_back(run)
    assert run.result.status == "failed"
    assert run.result.reasons[0].startswith("promotion from a failed: ")
    assert run.result.reasons[0].endswith(
        "no release tag was moved (rerun once the registry's copy is repaired)"
    )


def test_promote_tags_every_registry_and_record_says_so() -> None:
    clients, digest = registries()
    run = up_to("promote", run_of(clients, [evidence(digest)]))
    promotion.promote_tag(run)
    assert not run.done
    assert clients["a"].tagged(REPO)[CELL.tag] == clients["b"].tagged(REPO)[CELL.tag] == digest
    promotion.record(run)
    assert (run.result.status, run.result.registries) == ("promoted", {"a": digest, "b": digest})


def test_promote_that_fails_in_one_registry_rolls_back_the_other() -> None:
    clients, digest = registries()
    run = up_to("promote", run_of(clients, [evidence(digest)]))
    clients["b"].fail = RegistryError("registry b: unreachable (503)", hint="retry later")
    promotion.promote_tag(run)
    assert run.result.status == "failed"
    assert CELL.tag not in clients["a"].tagged(REPO)


# -- the runner over them ------------------------------------------------------------------------------------


def test_release_cell_runs_every_step_and_returns_the_passing_reports_once_it_copies() -> None:
    clients, digest = registries()
    report = evidence(digest)
    memory = VerifiedBlobs(None)
    result, passing = release_cell(CELL, [report], clients, dry_run=False, trusted=TRUSTED, verified=memory)
    assert (result.status, result.digest, passing) == ("promoted", digest, [report])
    again, _ = release_cell(CELL, [report], clients, dry_run=False, trusted=TRUSTED, verified=memory)
    assert (again.status, again.steps, again.tag_moves) == ("up-to-date", [], [])
    # (the attestations it stored now stand behind the digest, found with the trusted keys)
    stored, _ = release_cell(CELL, [], clients, dry_run=False, trusted=TRUSTED, verified=memory)
    assert stored.status == "up-to-date"
    refused, none = release_cell(CELL, [], clients, dry_run=False, trusted=(), verified=memory)
    assert (refused.status, none) == ("refused", [])


@pytest.mark.parametrize(("name", "step"), STEPS)
def test_every_step_is_a_short_documented_function(name: str, step: Any) -> None:
    import inspect

    assert step.__doc__, name
    assert len(inspect.getsource(step).splitlines()) <= 60, name


# -- an interrupted release converges (issue 37) -------------------------------------------------------------


@pytest.mark.parametrize("earlier", [False, True], ids=["first-release", "over-an-indexed-one"])
def test_a_release_interrupted_before_its_index_is_recorded_by_the_next_run_despite_a_newer_candidate(
    tmp_path: Any, earlier: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run moved the release tag onto D1 everywhere and was killed before it wrote the index (which records
    nothing, or an earlier D0); a newer candidate D2 was pushed meanwhile, not validated yet. The next plain
    run records D1 (its stored signed attestation verified again, its labels checked) and refuses D2 as not
    validated; a third run changes nothing, though every read of the report (which has no start time, so it
    is dated when read) is a second later than the one before (this test flaked on a second boundary)."""
    import itertools

    from imagesmith.index import load_index
    from imagesmith.release import evidence as evidence_module
    from imagesmith.release import release_cells

    seconds = itertools.count()
    monkeypatch.setattr(
        evidence_module,
        "_now",
        lambda: (lambda n: f"2026-12-02T10:{n // 60:02d}:{n % 60:02d}Z")(next(seconds)),
    )

    clients, d1 = registries(in_b=True)
    memory = VerifiedBlobs(None)
    index_file = tmp_path / "index.json"

    def push(labels: dict[str, str]) -> str:
        built = image(labels)
        for fake in clients.values():
            fake.add_blob(IMAGES[built.digest])
            fake.add_manifest(REPO, CELL.candidate, built)
        return built.digest

    if earlier:  # D0 released and recorded, then D1 built and validated
        d0 = push({**LABELS, "org.opencontainers.image.revision": "0"})
        release_cells(
            [CELL],
            matrix="m",
            reports=[evidence(d0)],
            index_file=index_file,
            client_for=lambda r: clients[r.name],
            trusted=TRUSTED,
            verified=memory,
        )
        assert load_index(index_file).images[0].digest == d0
        assert push(LABELS) == d1
    first, _ = release_cell(CELL, [evidence(d1)], clients, dry_run=False, trusted=TRUSTED, verified=memory)
    assert first.status == "promoted"  # the tag moved everywhere; then the run was killed: no index
    newer = image({**LABELS, "org.opencontainers.image.revision": "2"})
    assert push({**LABELS, "org.opencontainers.image.revision": "2"}) == newer.digest

    def rerun() -> Any:
        return release_cells(
            [CELL],
            matrix="m",
            reports=[],  # a fresh runner: the evidence of D1 is the attestation the first run stored
            index_file=index_file,
            client_for=lambda r: clients[r.name],
            trusted=TRUSTED,
            verified=memory,
        )

    out = rerun()
    (entry,) = load_index(index_file).images
    assert (entry.tag, entry.digest) == (CELL.tag, d1)
    assert len(entry.validated_on) == 1  # one report, read twice a second apart: one validation run
    assert sorted(r.name for r in entry.registries) == ["a", "b"]
    statuses = {(c.digest, c.status) for c in out.cells}
    assert statuses == {(d1, "up-to-date"), (newer.digest, "refused")}
    (refused,) = [c for c in out.cells if c.status == "refused"]
    assert refused.reasons[0].startswith(f"the newer candidate {newer.digest} is not validated")
    assert d1 in refused.reasons[0]
    before = index_file.read_bytes()
    again = rerun()
    assert index_file.read_bytes() == before
    assert not again.index_changed
