"""Build orchestration on the real engine and registries: push once + API copy, parity before tags, skip and
retag by fingerprint, and the faults (read-only registry, registry gone, wrong password) leave no final tag on
a partial image. A small real image stands in for a cell's image (the e2e test builds the real one)."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.build import (
    BuildOptions,
    CellOutcome,
    build_args,
    build_cell,
    push_cell,
    suite_digest,
)
from imagesmith.config import UserConfig
from imagesmith.engine import Engine
from imagesmith.errors import PushError
from imagesmith.matrix import load_matrix
from imagesmith.plan import Cell, build_plan
from imagesmith.refs import Registry
from imagesmith.registry import RegistryApi, client_for
from imagesmith.tags import candidate_tag, fingerprint_tag, staging_tag
from tests.localinfra import LocalRegistries, TempRegistry, local_registries, temp_registry
from tests.repo import PROJECT

BASE = "127.0.0.1:5000/hub/library/debian:bookworm"


def _smoke_cell() -> Cell:
    return build_plan(load_matrix("smoke")).cells[0]


def test_build_args_apply_the_mirror_map_and_nothing_else() -> None:
    cell = _smoke_cell()
    cfg = UserConfig(registry_mirrors=(("docker.io", "127.0.0.1:5000/hub"),))
    args = build_args(cell, cfg)
    assert args["BASE_IMAGE"] == "127.0.0.1:5000/hub/library/debian:bookworm"
    assert args["BUILDER_IMAGE"] == "127.0.0.1:5000/hub/library/debian:bookworm"
    assert "TORCH_INDEX_URL" not in args  # PyPI's default variant: pip's default index
    assert build_args(cell, UserConfig())["BASE_IMAGE"] == cell.bases.base_image


def _target(name: str, host: str, repo: str, *, insecure: bool) -> Registry:
    return Registry(name=name, host=host, repository=repo, insecure=insecure, kind="generic")


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


@pytest.fixture
def auth_env(regs: LocalRegistries, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in regs.auth_env().items():
        monkeypatch.setenv(k, v)


def _fake_cell(targets: tuple[Registry, ...]) -> Cell:
    fp = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    cell = _smoke_cell()
    return dataclasses.replace(
        cell, publish=dataclasses.replace(cell.publish, registries=targets, fingerprint=fp)
    )


def _small_image(engine: Engine, tmp_path: Path, cell: Cell, size: int = 300_000) -> str:
    """Build a small real image under the cell's staging ref (what build_cell would have built)."""
    ctx = tmp_path / "ctx"
    ctx.mkdir(exist_ok=True)
    (ctx / "Dockerfile").write_text(
        f"FROM {BASE}\nRUN echo {cell.publish.fingerprint} > /fp && head -c {size} /dev/urandom > /blob\n"
        f"LABEL io.imagesmith.fingerprint={cell.publish.fingerprint}\n"
    )
    ref = f"{cell.publish.registries[0].image}:{staging_tag(cell.publish.fingerprint, suite_digest())}"
    engine.build(context=ctx, tags=[ref])
    return ref


def _tags(target: Registry, cell: Cell) -> list[str]:
    return sorted(client_for(target).list_tags(target.repo))


@pytest.mark.docker
@pytest.mark.registry
@pytest.mark.usefixtures("auth_env")
def test_push_once_copy_verify_then_tag_and_skip_next_time(
    engine: Engine, regs: LocalRegistries, tmp_path: Path
) -> None:
    repo = f"imagesmith-test/build-{uuid.uuid4().hex[:8]}"
    targets = (
        _target("plain", regs.plain, repo, insecure=True),
        _target("tls", regs.auth, repo, insecure=False),
    )
    cell = _fake_cell(targets)
    ref = _small_image(engine, tmp_path, cell)
    outcome = CellOutcome(cell=cell.id, tag=candidate_tag(cell), fingerprint=cell.publish.fingerprint)
    clients: dict[str, RegistryApi] = {t.name: client_for(t) for t in targets}
    suite = suite_digest()
    push_cell(cell, engine, clients, outcome, lambda *a: None, suite)
    assert outcome.bytes_pushed_engine > 300_000  # compressed + uploaded by the engine once …
    assert outcome.bytes_copied_api > 300_000  # … and copied registry to registry, not pushed twice
    # issue 19: the summary's per-layer report — every manifest layer, its step, what this push uploaded
    manifest_layers = clients["plain"].get_manifest(repo, outcome.digest).json()["layers"]
    assert [x["digest"] for x in outcome.layers] == [x["digest"] for x in manifest_layers]
    assert all(x["step"] for x in outcome.layers)
    assert outcome.layers_pushed == sum(1 for x in outcome.layers if x["pushed"]) >= 1
    assert sum(x["size"] for x in outcome.layers if x["pushed"]) == outcome.bytes_pushed_engine
    for t in targets:
        assert clients[t.name].manifest_digest(repo, candidate_tag(cell)) == outcome.digest
        assert (
            clients[t.name].manifest_digest(repo, fingerprint_tag(cell.publish.fingerprint, suite))
            == outcome.digest
        )
    # issue 18: the copy puts the staging tag in every registry before the final tags (before: nothing)
    assert _tags(targets[1], cell) == sorted(
        [
            candidate_tag(cell),
            fingerprint_tag(cell.publish.fingerprint, suite),
            staging_tag(cell.publish.fingerprint, suite),
        ]
    )

    # the next build of the same fingerprint: nothing built, nothing pushed
    engine.remove(ref)
    again = build_cell(cell, load_matrix("smoke"), engine, BuildOptions(push=True), tmp_path / "staging")
    assert (again.status, again.digest, again.bytes_pushed_engine, again.steps) == (
        "skipped",
        outcome.digest,
        0,
        0,
    )

    # a missing candidate tag with the fingerprint present: only the tag is put back, no build
    clients["tls"].delete_manifest(repo, outcome.digest)
    clients["tls"].put_manifest(
        repo,
        fingerprint_tag(cell.publish.fingerprint, suite),
        clients["plain"].get_manifest(repo, outcome.digest),
    )
    retag = build_cell(cell, load_matrix("smoke"), engine, BuildOptions(push=True), tmp_path / "staging")
    assert retag.status == "retagged"
    assert clients["tls"].manifest_digest(repo, candidate_tag(cell)) == outcome.digest


@pytest.mark.docker
@pytest.mark.registry
def test_read_only_second_registry_fails_and_no_final_tag_anywhere(
    engine: Engine, regs: LocalRegistries, tmp_path: Path
) -> None:
    repo = f"imagesmith-test/ro-{uuid.uuid4().hex[:8]}"
    with temp_registry(tmp_path / "ro", readonly=True) as ro:
        targets = (
            _target("plain", regs.plain, repo, insecure=True),
            _target("ro", ro.addr, repo, insecure=True),
        )
        cell = _fake_cell(targets)
        ref = _small_image(engine, tmp_path, cell)
        ro_client = client_for(targets[1])
        # the read-only registry's refusals are not worth a minute of retries (this line set an attribute
        # RegistryClient does not have, `attempts`, until mypy read tests/)
        ro_client.policy = dataclasses.replace(ro_client.policy, attempts=2)
        clients: dict[str, RegistryApi] = {"plain": client_for(targets[0]), "ro": ro_client}
        with pytest.raises(PushError) as info:
            push_cell(
                cell,
                engine,
                clients,
                CellOutcome(cell="c", tag="t", fingerprint="f"),
                lambda *a: None,
                suite_digest(),
            )
        assert "registry ro" in str(info.value)
        assert ro.addr in str(info.value)
        # nothing final anywhere: only the complete staging manifest in the first registry
        assert _tags(targets[0], cell) == [staging_tag(cell.publish.fingerprint, suite_digest())]
        assert _tags(targets[1], cell) == []
        engine.remove(ref)


@pytest.mark.docker
@pytest.mark.registry
def test_first_registry_stopped_mid_push_is_a_clear_error_and_tags_nothing(
    engine: Engine, regs: LocalRegistries, tmp_path: Path
) -> None:
    repo = f"imagesmith-test/stop-{uuid.uuid4().hex[:8]}"
    with temp_registry(tmp_path / "reg") as reg:
        targets = (
            _target("dying", reg.addr, repo, insecure=True),
            _target("plain", regs.plain, repo, insecure=True),
        )
        cell = _fake_cell(targets)
        ref = _small_image(engine, tmp_path, cell, size=60_000_000)
        clients: dict[str, RegistryApi] = {t.name: client_for(t) for t in targets}
        stopper = _stop_when_upload_starts(reg)
        with pytest.raises(PushError) as info:
            push_cell(
                cell, engine, clients, CellOutcome(cell="c", tag="t", fingerprint="f"), lambda *a: stopper()
            )
        assert "dying" in str(info.value)
        assert reg.addr in str(info.value)
        reg.start()
        assert reg.client().list_tags(repo) == []
        assert client_for(targets[1]).list_tags(repo) == []
        engine.remove(ref)


def _stop_when_upload_starts(reg: TempRegistry):  # type: ignore[no-untyped-def]
    """push_cell reports 'push → …' right before the engine push; stop the registry shortly after."""
    import threading

    def stop() -> None:
        threading.Timer(0.3, reg.stop).start()

    return stop


@pytest.mark.docker
@pytest.mark.registry
def test_wrong_password_names_the_registry_and_pushes_nothing(
    engine: Engine, regs: LocalRegistries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in regs.auth_env():
        monkeypatch.setenv(k, "wrong-password" if k.endswith("PASSWORD") else regs.credentials.username)
    repo = f"imagesmith-test/pw-{uuid.uuid4().hex[:8]}"
    targets = (
        _target("tls", regs.auth, repo, insecure=False),
        _target("plain", regs.plain, repo, insecure=True),
    )
    cell = _fake_cell(targets)
    ref = _small_image(engine, tmp_path, cell)
    clients: dict[str, RegistryApi] = {t.name: client_for(t) for t in targets}
    with pytest.raises(PushError) as info:
        push_cell(
            cell,
            engine,
            clients,
            CellOutcome(cell="c", tag="t", fingerprint="f"),
            lambda *a: None,
            suite_digest(),
        )
    assert "tls" in str(info.value)
    assert "wrong-password" not in str(info.value)
    assert regs.auth_client().list_tags(repo) == []
    assert regs.plain_client().list_tags(repo) == []
    engine.remove(ref)


def test_build_without_the_source_in_the_cache_is_one_clear_error(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGESMITH_CACHE", str(tmp_path / "empty"))
    result = run_cli("build", "--matrix", "smoke")
    assert result.exit_code == 5
    assert "is not in the source cache" in result.stderr
    assert "imagesmith fetch-sources --matrix smoke --from-git DIR" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_jobs_and_backend_flags(run_cli: Callable[..., Any]) -> None:
    assert run_cli("build", "--matrix", "smoke", "--backend", "podman").exit_code == 2
    result = run_cli("build", "--matrix", "smoke", "--jobs", "0")
    assert result.exit_code == 5
    assert "--jobs 0: must be at least 1" in result.stderr


def test_stage_context_fills_sources_and_wheels_never_the_ca(tmp_path: Path) -> None:
    from imagesmith.build import stage_context

    matrix = load_matrix("smoke")
    cell = build_plan(matrix).cells[0]
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    extra = tmp_path / "wheels"
    extra.mkdir()
    (extra / "demo-1.0-py3-none-any.whl").write_bytes(b"PK")
    ctx = stage_context(cell, matrix, UserConfig(extra_ca=ca), tmp_path / "staging", extra, project=PROJECT)
    assert (ctx / "Dockerfile").read_text() == (PROJECT.path(cell.publish.context) / "Dockerfile").read_text()
    assert (ctx / "sources" / f"nccl-tests-{cell.toolkit.nccl_tests_commit}.tar").is_file()
    names = sorted(p.name for p in (ctx / "wheels").glob("*.whl"))
    assert len(names) == 2
    assert names[0] == "demo-1.0-py3-none-any.whl"
    assert names[1].startswith("imagesmith-")
    # the extra CA goes to the build as a BuildKit secret (build_secrets), never into the context
    assert not (ctx / "certs").exists()
    assert not any(p.is_file() and p.read_bytes() == ca.read_bytes() for p in ctx.rglob("*")), (
        "the CA was copied into the context"
    )
