"""Issue 18 on build's push path with the real engine and registries: the tag phase is all-or-nothing as users
see it (or says exactly what is mixed), the engine push rides out a flaky registry and stops at once on a
full disk, and the nightly's ``full`` verify catches a corrupt blob in the first registry."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from imagesmith.build import CellOutcome, push_cell, suite_digest
from imagesmith.engine import Engine
from imagesmith.errors import CorruptBlobError, PushError
from imagesmith.model import Cell
from imagesmith.registry import RegistryApi, RegistryClient, client_for
from imagesmith.release import ReleaseCell as _RC
from imagesmith.release import _candidate_digests, candidate_state
from imagesmith.tags import candidate_tag, fingerprint_tag
from tests.faultproxy import Action, fault_proxy
from tests.integration.test_build import _fake_cell, _small_image, _target
from tests.integration.test_registry_faults import blob_file, tiny_disk
from tests.localinfra import LocalRegistries, local_registries, temp_registry


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


def _quick(target: object) -> RegistryClient:
    client = client_for(target)  # type: ignore[arg-type]
    client.policy = client.policy.__class__(attempts=8, backoff=0.05, max_wait=0.5, deadline=30.0)
    return client


def _outcome(cell: Cell) -> CellOutcome:
    return CellOutcome(cell=cell.id, tag=candidate_tag(cell), fingerprint=cell.publish.fingerprint)


# -- 3. final tags all-or-nothing as users see it ------------------------------------------------------------
@pytest.mark.docker
@pytest.mark.registry
def test_a_tag_phase_failure_is_reported_as_mixed_and_a_rerun_converges(
    engine: Engine, regs: LocalRegistries, tmp_path: Path
) -> None:
    repo = f"imagesmith-test/tagphase-{uuid.uuid4().hex[:8]}"
    with temp_registry(tmp_path / "r2") as reg, fault_proxy(reg.addr, max_seconds=240) as px:
        targets = (
            _target("r1", regs.plain, repo, insecure=True),
            _target("r2", px.addr, repo, insecure=True),
        )
        cell = _fake_cell(targets)
        _small_image(engine, tmp_path, cell)
        cand = candidate_tag(cell)
        refuse = [True]
        px.rules.append(
            lambda r: (
                Action("status", status=403, body=b'{"errors":[{"code":"DENIED","message":"no"}]}')
                if refuse[0] and r.method == "PUT" and r.path.endswith(f"/manifests/{cand}")
                else None
            )
        )
        clients: dict[str, RegistryApi] = {t.name: _quick(t) for t in targets}
        suite = suite_digest()
        with pytest.raises(PushError) as info:
            push_cell(cell, engine, clients, _outcome(cell), lambda *a: None, suite)
        text = str(info.value)
        assert "tagged in r1" in text
        assert "not in r2" in text
        assert "rerun converges" in text
        assert "fix: check the account's push/pull rights" in text  # the registry's own fix kept
        found, errors = _candidate_digests(_RC_of(cell), clients)
        assert candidate_state(found, errors).startswith("mixed: tagged in r1, not in r2")
        # both registries got every fp tag before any candidate tag: r2 holds the fp tag, no candidate
        assert (
            clients["r2"].manifest_digest(repo, fingerprint_tag(cell.publish.fingerprint, suite)) is not None
        )
        assert clients["r2"].manifest_digest(repo, cand) is None
        refuse[0] = False
        outcome = _outcome(cell)
        push_cell(cell, engine, clients, outcome, lambda *a: None, suite)  # the rerun converges
        found, errors = _candidate_digests(_RC_of(cell), clients)
        assert set(found.values()) == {outcome.digest}
        assert candidate_state(found, errors) == "consistent"


def _RC_of(cell: object) -> _RC:
    from imagesmith.release import ReleaseCell

    return ReleaseCell.from_plan(cell)


# -- 2. the engine push retried like the API -----------------------------------------------------------------
@pytest.mark.docker
@pytest.mark.registry
def test_the_engine_push_rides_out_a_failing_manifest_put(
    engine: Engine, regs: LocalRegistries, tmp_path: Path
) -> None:
    repo = f"imagesmith-test/enginepush-{uuid.uuid4().hex[:8]}"
    with temp_registry(tmp_path / "r") as reg, fault_proxy(reg.addr, max_seconds=240) as px:
        # the engine does not retry a manifest PUT itself: the first two fail, imagesmith tries again
        px.rules.append(
            lambda r: (
                Action("error_before") if r.method == "PUT" and r.kind == "manifest" and r.n < 2 else None
            )
        )
        target = _target("r", px.addr, repo, insecure=True)
        cell = _fake_cell((target,))
        ref = _small_image(engine, tmp_path, cell)
        result = engine.push(ref, backoff=0.2, attempts=4, registry_name="r")
        assert result.digest.startswith("sha256:")
        assert px.count("PUT", "manifest") == 3


# -- 5. a full disk stops the engine push at once ------------------------------------------------------------
@pytest.mark.docker
@pytest.mark.registry
def test_the_engine_push_to_a_full_registry_stops_at_once_with_the_fix(
    engine: Engine, regs: LocalRegistries, tmp_path: Path
) -> None:
    repo = f"imagesmith-test/full-{uuid.uuid4().hex[:8]}"
    with tiny_disk(tmp_path / "disk", "4m") as disk, temp_registry(disk / "reg") as reg:
        target = _target("full", reg.addr, repo, insecure=True)
        cell = _fake_cell((target,))
        ref = _small_image(engine, tmp_path, cell, size=8_000_000)
        client = client_for(target)
        t = time.monotonic()
        with pytest.raises(PushError) as info:
            engine.push(ref, registry_name="full", probe=lambda: client.probe_write(repo))
        took = time.monotonic() - t
        assert took < 45, took  # before: 159 s (the engine's own retries, three times over)
        text = str(info.value)
        assert "storage full" in text
        assert "fix: free space on the registry's storage" in text


# -- 1. the nightly's full verify reads the first registry back ----------------------------------------------
@pytest.mark.docker
@pytest.mark.registry
def test_full_verify_catches_a_corrupt_blob_in_the_first_registry_and_tags_nothing(
    engine: Engine, regs: LocalRegistries, tmp_path: Path
) -> None:
    repo = f"imagesmith-test/verify-{uuid.uuid4().hex[:8]}"
    with temp_registry(tmp_path / "r1") as reg:
        target = _target("r1", reg.addr, repo, insecure=True)
        cell = _fake_cell((target,))
        ref = _small_image(engine, tmp_path, cell)
        pushed = engine.push(ref)
        client = client_for(target)
        layer = client.get_manifest(repo, pushed.digest).blobs()[-1][0]
        path = blob_file(reg, layer)
        data = bytearray(path.read_bytes())
        data[100:1124] = bytes(b ^ 0xFF for b in data[100:1124])
        path.write_bytes(bytes(data))
        with pytest.raises(PushError) as info:
            push_cell(cell, engine, {"r1": client}, _outcome(cell), lambda *a: None, suite_digest(), "full")
        assert isinstance(info.value.__cause__, CorruptBlobError)
        assert layer in str(info.value)
        assert client.manifest_digest(repo, candidate_tag(cell)) is None
