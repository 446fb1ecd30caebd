"""build's push path — build, push once through the engine, copy through the registry API, verify, tag — with
typed in-memory fakes behind the two seams (``ContainerEngine``, ``RegistryApi``): no dockerd, no registry.

The fakes implement the whole protocols (mypy checks that: the assignment below for the engine, the one in
tests/fakeregistry.py for the shared registry fake), so a build-path decision is tested against what the real
engine and registries are asked, not against mocks.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from imagesmith.build import FINGERPRINT_LABEL, BuildOptions, build_cell, suite_digest
from imagesmith.credentials import Credentials
from imagesmith.engine import (
    BuildFlags,
    BuildResult,
    ContainerEngine,
    Engine,
    PushFlags,
    PushResult,
    RunOptions,
    RunResult,
    split_tag,
)
from imagesmith.errors import PushError
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.refs import Registry
from imagesmith.registry import OCI_MANIFEST, ManifestData
from imagesmith.tags import candidate_tag, fingerprint_tag, local_ref, staging_tag
from tests.fakeregistry import FakeRegistry, sha256
from tests.repo import PROJECT

if TYPE_CHECKING:
    from typing_extensions import Unpack


_sha = sha256
#: the repository of both registries the test cell pushes to
REPO = "team/torch"


@dataclass
class _Image:
    id: str
    labels: dict[str, str]
    layer: bytes


@dataclass
class MemoryEngine:
    """A container engine in memory: a build makes one image (its labels from the Dockerfile's LABEL lines),
    a push uploads it into the :class:`FakeRegistry` of the reference's host."""

    registries: Mapping[str, FakeRegistry]
    backend: str = "memory"
    images: dict[str, _Image] = field(default_factory=dict)
    pushes: list[tuple[str, str | None]] = field(default_factory=list)  # (reference, password sent)
    #: passwords a registry refuses (what an expired token looks like to the engine)
    refused: frozenset[str] = frozenset()

    def build(self, *, context: Path, tags: Sequence[str], **options: Unpack[BuildFlags]) -> BuildResult:
        text = (context / options.get("dockerfile", "Dockerfile")).read_text()
        found = dict(re.findall(r'([\w.-]+)="([^"]*)"', text))
        labels = {**found, **dict(options.get("labels") or {})}
        image = _Image(
            id=_sha(text.encode()), labels=labels, layer=f"layer of {options.get('what')}".encode()
        )
        for tag in (image.id, *tags):
            self.images[tag] = image
        return BuildResult(image_id=image.id, backend=self.backend, steps=3, cached_steps=1, duration_s=0.0)

    def push(self, reference: str, **options: Unpack[PushFlags]) -> PushResult:
        credentials, refresh = options.get("credentials"), options.get("refresh")
        self.pushes.append((reference, credentials.password if credentials else None))
        if credentials is not None and credentials.password in self.refused:
            fresh = refresh(credentials) if refresh else None
            if fresh is None:
                raise PushError(f"push of {reference}: unauthorized", hint="check the credentials")
            return self.push(reference, credentials=fresh, registry_name=options.get("registry_name"))
        image = self.images[reference]
        repo, tag = split_tag(reference)
        host, _, path = repo.partition("/")
        registry = self.registries[host]
        config = json.dumps({"config": {"Labels": image.labels}}).encode()
        for blob in (config, image.layer):
            registry.upload_blob(path, _sha(blob), lambda blob=blob: iter([blob]))  # type: ignore[misc]
        body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"digest": _sha(config), "size": len(config)},
                "layers": [{"digest": _sha(image.layer), "size": len(image.layer)}],
            }
        ).encode()
        digest = registry.put_manifest(
            path, tag, ManifestData(body=body, media_type=OCI_MANIFEST, digest=_sha(body))
        )
        return PushResult(
            reference=reference,
            digest=digest,
            bytes_pushed=len(image.layer),
            layers_pushed=1,
            layers_existing=0,
            duration_s=0.0,
            pushed_ids=(_sha(image.layer)[7:19],),
        )

    def pull(
        self,
        reference: str,
        *,
        credentials: Credentials | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> str:
        return self.images[reference].id

    def inspect(self, reference: str) -> dict[str, Any] | None:
        image = self.images.get(reference)
        if image is None:
            return None
        return {
            "Id": image.id,
            "Size": len(image.layer),
            "Config": {"Labels": dict(image.labels)},
            "RootFS": {"Layers": [_sha(image.layer)]},
        }

    def labels(self, reference: str) -> dict[str, str]:
        return dict(self.images[reference].labels)

    def tag(self, source: str, reference: str) -> None:
        self.images[reference] = self.images[source]

    def remove(self, reference: str, *, force: bool = False) -> bool:
        return self.images.pop(reference, None) is not None

    def import_rootfs(self, tarball: Path, reference: str, changes: Sequence[str] = ()) -> str:
        self.images[reference] = _Image(id=_sha(tarball.read_bytes()), labels={}, layer=tarball.read_bytes())
        return self.images[reference].id

    def container_state(self, name: str) -> str | None:
        return None

    def has_nvidia_runtime(self) -> bool:
        return False

    def run_container(
        self, image: str, command: Sequence[str] | str | None = None, **options: Unpack[RunOptions]
    ) -> RunResult:
        return RunResult(exit_code=0, output="", duration_s=0.0)


# the fake engine implements the seam (checked by mypy, as Engine is in imagesmith/; tests/fakeregistry.py
# does the same for the registry)
_ENGINE_SEAM: type[ContainerEngine] = MemoryEngine


@pytest.fixture(autouse=True)
def _stage_only_the_dockerfile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Staging fills sources/ and wheels/ from caches unit tests lack; the fake engine reads Dockerfile."""

    def staged(cell: Cell, matrix: Any, config: Any, staging_root: Path, *args: Any, **kwargs: Any) -> Path:
        dest = staging_root / cell.id
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROJECT.path(cell.publish.context) / "Dockerfile", dest / "Dockerfile")
        return dest

    monkeypatch.setattr("imagesmith.build.stage_context", staged)


@pytest.fixture
def cell() -> Cell:
    from imagesmith.plan import build_plan

    (plain,) = build_plan(load_matrix("smoke", project=PROJECT), project=PROJECT).cells[:1]
    targets = (
        Registry(name="one", host="r1.example", repository=REPO, kind="ecr"),
        Registry(name="two", host="r2.example", repository=REPO, kind="generic"),
    )
    return replace(plain, publish=replace(plain.publish, registries=targets))


def _build(cell: Cell, engine: MemoryEngine, registries: dict[str, FakeRegistry], tmp_path: Path) -> Any:
    by_name = {r.name: r for r in registries.values()}
    options = BuildOptions(push=True, project=PROJECT, client_for=lambda t: by_name[t.name])
    return build_cell(cell, load_matrix("smoke", project=PROJECT), engine, options, tmp_path)


def test_the_engine_pushes_once_and_the_api_copies_to_the_rest(cell: Cell, tmp_path: Path) -> None:
    creds = Credentials("AWS", "token-1", origin="`aws ecr get-login-password`", provider="token command")
    registries = {
        "r1.example": FakeRegistry("one", "r1.example", credentials=creds),
        "r2.example": FakeRegistry("two", "r2.example"),
    }
    engine = MemoryEngine(registries)
    outcome = _build(cell, engine, registries, tmp_path)
    suite = suite_digest()
    assert outcome.status == "pushed"
    # one engine push, to the first registry, under the staging tag, with that registry's own credentials
    staging = f"r1.example/team/torch:{staging_tag(cell.publish.fingerprint, suite)}"
    assert engine.pushes == [(staging, "token-1")]
    one, two = registries["r1.example"], registries["r2.example"]
    # the local staging tag only carried the push: it is gone, the local tag keeps the image
    assert staging not in engine.images
    assert engine.images[local_ref(cell)].labels[FINGERPRINT_LABEL] == cell.publish.fingerprint
    # the second registry got every blob through the API, then the manifest under the staging tag (issue 18:
    # staging tags everywhere first; it was put by digest before), then the final tags
    assert outcome.bytes_copied_api == sum(len(b) for b in one.blobs.values())
    assert two.blobs == one.blobs
    assert two.writes[-3:] == [
        f"manifest {REPO}:{staging_tag(cell.publish.fingerprint, suite)}",
        f"manifest {REPO}:{fingerprint_tag(cell.publish.fingerprint, suite)}",
        f"manifest {REPO}:{candidate_tag(cell)}",
    ]
    for registry in registries.values():
        assert registry.tags[REPO, candidate_tag(cell)] == outcome.digest
        assert registry.tags[REPO, fingerprint_tag(cell.publish.fingerprint, suite)] == outcome.digest
    assert (
        two.tags[REPO, staging_tag(cell.publish.fingerprint, suite)] == outcome.digest
    )  # the staging tag only
    assert outcome.bytes_pushed_engine == len(engine.images[local_ref(cell)].layer)


def test_a_refused_push_token_is_refreshed_once_through_the_registry_seam(cell: Cell, tmp_path: Path) -> None:
    stale = Credentials("AWS", "expired", provider="token command")
    fresh = Credentials("AWS", "renewed", provider="token command")
    registries = {
        "r1.example": FakeRegistry("one", "r1.example", credentials=stale, fresh=fresh),
        "r2.example": FakeRegistry("two", "r2.example"),
    }
    engine = MemoryEngine(registries, refused=frozenset({"expired"}))
    outcome = _build(cell, engine, registries, tmp_path)
    assert outcome.status == "pushed"
    assert [password for _, password in engine.pushes] == ["expired", "renewed"]
    assert registries["r1.example"].refreshes == 1


# -- Engine.push itself: a fake docker API client (no dockerd) -----------------------------------------------
class _FakeDockerApi:
    """docker-py's low-level ``api.push``: a stream that refuses some passwords as dockerd relays it."""

    def __init__(self, accept: str) -> None:
        self.accept = accept
        self.auths: list[str | None] = []

    def push(
        self, repo: str, *, tag: str, stream: bool, decode: bool, auth_config: Any
    ) -> Iterator[dict[str, Any]]:
        password = auth_config["password"] if auth_config else None
        self.auths.append(password)
        if password != self.accept:
            yield {"errorDetail": {"message": "unauthorized: authentication required"}}
            return
        yield {"status": "Pushed", "id": "abc"}
        yield {"status": f"{tag}: digest: sha256:{'d' * 64} size: 1"}


class _FakeDockerClient:
    def __init__(self, accept: str) -> None:
        self.api = _FakeDockerApi(accept)


def _engine(accept: str) -> tuple[Engine, _FakeDockerApi]:
    engine = Engine.__new__(Engine)  # no dockerd: only the client the push path uses
    client = _FakeDockerClient(accept)
    engine.client = client  # type: ignore[assignment]
    return engine, client.api


def test_engine_push_refreshes_a_refused_token_once() -> None:
    engine, api = _engine(accept="new")
    calls: list[str] = []

    def refresh(refused: Credentials) -> Credentials | None:
        calls.append(refused.password)
        return Credentials("AWS", "new")

    result = engine.push("r.example/a/b:t", credentials=Credentials("AWS", "old"), refresh=refresh)
    assert result.digest == "sha256:" + "d" * 64
    assert api.auths == ["old", "new"]
    assert calls == ["old"]


def test_engine_push_never_loops_on_refusals() -> None:
    engine, api = _engine(accept="never")
    refreshed = iter(Credentials("AWS", f"new-{i}") for i in range(10))
    with pytest.raises(PushError) as info:
        engine.push(
            "r.example/a/b:t",
            credentials=Credentials("AWS", "old"),
            refresh=lambda _: next(refreshed),
            registry_name="one (r.example)",
            attempts=3,
        )
    assert api.auths == ["old", "new-0"]
    assert "registry one (r.example)" in str(info.value)
    assert "new-0" not in str(info.value)


def test_engine_push_without_refresh_reports_the_refusal() -> None:
    engine, api = _engine(accept="never")
    with pytest.raises(PushError, match="unauthorized"):
        engine.push("r.example/a/b:t", credentials=Credentials("AWS", "old"))
    assert api.auths == ["old"]


# -- issue 18 ------------------------------------------------------------------------------------------------
def test_a_registry_fix_line_survives_wrapping_as_push_error(
    cell: Cell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagesmith.errors import RegistryError

    registries = {
        "r1.example": FakeRegistry("one", "r1.example"),
        "r2.example": FakeRegistry("two", "r2.example"),
    }
    two = registries["r2.example"]

    def refuse(repo: str, reference: str, manifest: ManifestData) -> str:
        raise RegistryError(
            "registry two (r2.example): PUT manifest: quota exceeded", hint="raise the quota", registry="two"
        )

    monkeypatch.setattr(two, "put_manifest", refuse)
    with pytest.raises(PushError) as info:
        _build(cell, MemoryEngine(registries), registries, tmp_path)
    text = str(info.value)
    assert "fix: raise the quota" in text  # the registry's own fix, first
    assert "run the same build again" in text


def test_a_tag_phase_failure_rolls_back_where_the_registry_can_delete_a_tag(
    cell: Cell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagesmith.errors import RegistryError

    registries = {
        "r1.example": FakeRegistry("one", "r1.example"),
        "r2.example": FakeRegistry("two", "r2.example"),
    }
    one, two = registries["r1.example"], registries["r2.example"]
    original = two.put_manifest

    def refuse_candidate(repo: str, reference: str, manifest: ManifestData) -> str:
        if reference == candidate_tag(cell):
            raise RegistryError(
                "registry two (r2.example): PUT manifest: denied", hint="check rights", registry="two"
            )
        return original(repo, reference, manifest)

    monkeypatch.setattr(two, "put_manifest", refuse_candidate)
    with pytest.raises(PushError) as info:
        _build(cell, MemoryEngine(registries), registries, tmp_path)
    assert "rolled back: no final tag moved" in str(info.value)
    suite = suite_digest()
    for registry in (one, two):  # the memory registries delete tags: nothing final is left anywhere
        assert (REPO, candidate_tag(cell)) not in registry.tags
        assert (REPO, fingerprint_tag(cell.publish.fingerprint, suite)) not in registry.tags
    assert f"untag {REPO}:{candidate_tag(cell)}" in one.writes


def test_a_corrupt_destination_blob_is_repaired_where_the_registry_allows_it() -> None:
    from imagesmith.registry import copy_blob

    src, dst = FakeRegistry("one", "r1.example"), FakeRegistry("two", "r2.example")
    data = b"layer" * 1000
    digest = _sha(data)
    src.blobs[digest] = data
    dst.blobs[digest] = b"LAYER" * 1000  # same size, other bytes: HEAD cannot tell
    assert copy_blob(src, "a", dst, "a", digest, size=len(data), verify="head") == 0  # head trusts it
    assert copy_blob(src, "a", dst, "a", digest, size=len(data), verify="read") == len(
        data
    )  # read repairs it
    assert dst.blobs[digest] == data


def test_candidate_state_names_a_mixed_tag_phase() -> None:
    from imagesmith.release import candidate_state

    d = "sha256:" + "a" * 64
    assert candidate_state({"r1": d, "r2": d}) == "consistent"
    assert candidate_state({"r1": None, "r2": None}) == "none"
    assert candidate_state({"r1": d, "r2": None}).startswith("mixed: tagged in r1, not in r2")
    assert candidate_state({"r1": d, "r2": "sha256:" + "b" * 64}).startswith("differs:")


def test_registry_error_bodies_become_fix_lines() -> None:
    from imagesmith.registry import registry_fault

    full = registry_fault("UNKNOWN: unknown error (write /x/data: no space left on device)")
    assert full is not None
    assert full.label == "storage full"
    quota = registry_fault("DENIED: project quota exceeded")
    assert quota is not None
    assert quota.label == "quota exceeded"
    for text, label in (
        ("BLOB_UNKNOWN: blob unknown to registry", "blob unknown"),
        ("NAME_INVALID: invalid repository name", "repository name invalid"),
        ("DENIED: requested access to the resource is denied", "denied"),
        ("MANIFEST_INVALID: manifest invalid", "manifest invalid"),
    ):
        fault = registry_fault(text)
        assert fault is not None
        assert fault.label == label
    assert registry_fault("received unexpected HTTP status: 502 Bad Gateway") is None


def test_a_manifest_without_config_size_is_an_error_not_a_key_error() -> None:
    from imagesmith.errors import RegistryError

    body = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:" + "c" * 64}, "layers": []}).encode()
    manifest = ManifestData(
        body=body, media_type=OCI_MANIFEST, digest=_sha(body), origin="registry r (h) a@t"
    )
    with pytest.raises(RegistryError, match=r"registry r \(h\) a@t: not a valid image manifest: config.size"):
        manifest.blobs()


def test_engine_push_never_retries_a_full_disk() -> None:
    engine, api = _engine(accept="always")
    calls: list[int] = []

    def push(*args: Any, **kw: Any) -> Iterator[dict[str, Any]]:
        calls.append(1)
        yield {"errorDetail": {"message": "write /var/lib/registry: no space left on device"}}

    api.push = push  # type: ignore[method-assign]
    with pytest.raises(PushError) as info:
        engine.push("r.example/a/b:t", attempts=5, backoff=0.01)
    assert calls == [1]
    assert "fix: free space on the registry's storage" in str(info.value)


@pytest.mark.parametrize(
    "message",
    ["toomanyrequests: too many requests", "received unexpected HTTP status: 429 Too Many Requests"],
)
def test_engine_push_rides_out_a_rate_limit_and_names_it_when_it_lasts(message: str) -> None:
    engine, api = _engine(accept="always")
    calls: list[int] = []

    def push(*args: Any, **kw: Any) -> Iterator[dict[str, Any]]:
        calls.append(1)
        if len(calls) < 3:
            yield {"errorDetail": {"message": message}}
            return
        yield {"status": "Pushed", "id": "abc"}
        yield {"status": f"t: digest: sha256:{'d' * 64} size: 1"}

    api.push = push  # type: ignore[method-assign]
    assert engine.push("r.example/a/b:t", attempts=4, backoff=0.01).digest == "sha256:" + "d" * 64
    assert len(calls) == 3  # before: given up at the first 429

    def limited(*args: Any, **kw: Any) -> Iterator[dict[str, Any]]:
        calls.append(1)
        yield {"errorDetail": {"message": message}}

    api.push = limited  # type: ignore[method-assign]
    with pytest.raises(PushError) as info:
        engine.push("r.example/a/b:t", attempts=2, backoff=0.01, registry_name="hub (r.example)")
    text = str(info.value)
    assert "gave up after 2 tries" in text
    assert "registry hub (r.example) rate-limits this account" in text


def test_a_cell_on_a_moved_base_is_built_by_digest_and_says_why(
    cell: Cell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26: the base lock moved debian:bookworm from a to b; the image of the old fingerprint is in
    the registry, so the moved base is why the cell is built, and the summary says so."""
    from imagesmith.build import BaseSources
    from imagesmith.config import UserConfig
    from imagesmith.plan import with_fingerprint
    from imagesmith.templating import render_cell_files

    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    moved = with_fingerprint(
        replace(
            cell,
            bases=replace(
                cell.bases,
                base_digests=(("debian:bookworm", b),),
                base_local=(),
                base_moves=(("debian:bookworm", a),),
                base_read=(("debian:bookworm", "2026-12-01"),),
            ),
            publish=replace(cell.publish, fingerprint=""),
        )
    )
    old = with_fingerprint(
        replace(
            moved,
            bases=replace(moved.bases, base_digests=(("debian:bookworm", a),)),
            publish=replace(moved.publish, fingerprint=""),
        )
    )
    registries = {
        "r1.example": FakeRegistry("one", "r1.example"),
        "r2.example": FakeRegistry("two", "r2.example"),
    }
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {}, "layers": []}).encode()
    was = ManifestData(body=body, media_type=OCI_MANIFEST, digest=_sha(body))
    suite = suite_digest()
    for registry in registries.values():
        registry.manifests[was.digest] = was
        registry.tags[REPO, fingerprint_tag(old.publish.fingerprint, suite)] = was.digest

    class Upstream:
        def manifest_digest(self, repo: str, reference: str) -> str | None:
            assert (repo, reference) == ("hub/library/debian", b)
            return b

    config = UserConfig(registry_mirrors=(("docker.io", "127.0.0.1:5000/hub"),))
    by_name = {r.name: r for r in registries.values()}
    options = BuildOptions(
        push=True,
        project=PROJECT,
        config=config,
        client_for=lambda t: by_name[t.name],
        bases=BaseSources(config, client_for=lambda r: Upstream()),  # type: ignore[arg-type,return-value]
    )

    def staged(c: Cell, matrix: Any, cfg: Any, staging_root: Path, *args: Any, **kwargs: Any) -> Path:
        dest = staging_root / c.id  # what `imagesmith render` writes after `lock --bases` moved the base
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "Dockerfile").write_text(render_cell_files(c)["Dockerfile"])
        return dest

    monkeypatch.setattr("imagesmith.build.stage_context", staged)
    outcome = build_cell(
        moved, load_matrix("smoke", project=PROJECT), MemoryEngine(registries), options, tmp_path
    )
    assert outcome.status == "pushed"
    assert outcome.reason == f"rebuilt: base debian:bookworm moved {a[:19]}…→{b[:19]}… (read 2026-12-01)"
    assert outcome.base_moved
    assert outcome.bases == {"debian:bookworm": f"127.0.0.1:5000/hub/library/debian:bookworm@{b}"}


def test_a_push_stream_without_a_digest_is_not_the_engine_s_words() -> None:
    """``said`` holds only what the engine said (the retry rules read it): imagesmith's own sentence for a
    stream that ended without a digest is the message, never ``said`` — rewording it cannot make it
    transient (its words once decided, by not matching the engine's transient patterns)."""
    engine, api = _engine(accept="always")
    calls: list[int] = []

    def push(*args: Any, **kw: Any) -> Iterator[dict[str, Any]]:
        calls.append(1)
        yield {"status": "Pushed", "id": "abc"}

    api.push = push  # type: ignore[method-assign]
    with pytest.raises(PushError) as info:
        engine.push("r.example/a/b:t", attempts=5, backoff=0.01, registry_name="one (r.example)")
    assert calls == [1]
    assert "ended without a manifest digest" in info.value.message
    with pytest.raises(PushError) as once:  # what the retry rules get: no engine words to read
        engine._push_once("r.example/a/b:t", "r.example/a/b", "t", None, None, 0.0)
    assert once.value.said is None
    assert (
        info.value.hint == "check that registry one (r.example) is up and reachable, then run the build again"
    )
