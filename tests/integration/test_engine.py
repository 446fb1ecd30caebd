"""The engine wrapper on the real local dockerd: both build backends, push-stream errors, run_container."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagesmith.buildlog import _BuildKitParser
from imagesmith.engine import Engine, split_tag
from imagesmith.errors import BuildError, EngineError, PushError
from imagesmith.registry import Credentials
from tests.localinfra import LocalRegistries, free_port, local_registries

BASE = "127.0.0.1:5000/hub/library/debian:bookworm"

DOCKERFILE = """\
ARG BASE_IMAGE=debian:bookworm
FROM ${BASE_IMAGE}
RUN head -c 200000 /dev/urandom > /blob && echo ok > /ok
LABEL io.imagesmith.test="yes"
CMD ["cat", "/ok"]
"""


def test_split_tag() -> None:
    assert split_tag("127.0.0.1:5000/a/b:t") == ("127.0.0.1:5000/a/b", "t")
    assert split_tag("127.0.0.1:5000/a/b") == ("127.0.0.1:5000/a/b", "latest")
    with pytest.raises(EngineError):
        split_tag("a/b@sha256:" + "0" * 64)


def test_buildkit_progress_parser_counts_steps_cache_hits_and_bytes() -> None:
    p = _BuildKitParser()
    for line in [
        "#4 [1/3] FROM 127.0.0.1:5000/hub/library/debian:bookworm",
        "#4 DONE 0.0s",
        "#5 [2/3] RUN apt-get update",
        "#5 CACHED",
        "#6 [3/3] RUN pip install torch",
        "#6 sha256:abc 10.0MB / 20.0MB 0.5s",
        "#6 DONE 12.0s",
    ]:
        p.feed(line)
    assert (p.event.steps_done, p.event.steps_cached, p.event.bytes_done) == (2, 1, 10_000_000)
    assert len(p.names) == 2  # FROM is not a build step


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture
def context(tmp_path: Path) -> Path:
    (tmp_path / "Dockerfile").write_text(DOCKERFILE)
    return tmp_path


@pytest.fixture
def image_name(engine: Engine) -> Iterator[str]:
    name = f"imagesmith-test/engine-{uuid.uuid4().hex[:8]}"
    yield name
    for img in engine.client.images.list(name=name):
        assert img.id is not None
        engine.client.images.remove(img.id, force=True)


@pytest.mark.docker
@pytest.mark.parametrize("backend", ["buildkit", "sdk"])
def test_build_both_backends_label_and_cache(
    engine: Engine, context: Path, image_name: str, backend: str, regs: LocalRegistries
) -> None:
    eng = Engine(backend=backend)  # type: ignore[arg-type]
    assert eng.backend == backend
    first = eng.build(context=context, tags=[f"{image_name}:a"], build_args={"BASE_IMAGE": BASE})
    assert eng.labels(f"{image_name}:a")["io.imagesmith.test"] == "yes"
    again = eng.build(context=context, tags=[f"{image_name}:b"], build_args={"BASE_IMAGE": BASE})
    assert again.image_id == first.image_id
    assert again.cached_steps >= 1
    assert again.cached_steps == again.steps or backend == "sdk"
    out = eng.run_container(f"{image_name}:a")
    assert (out.exit_code, out.output.strip()) == (0, "ok")


@pytest.mark.docker
def test_build_failure_names_the_cell_and_shows_the_log(
    engine: Engine, tmp_path: Path, image_name: str
) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\nRUN echo about-to-fail && false\n")
    with pytest.raises(BuildError) as info:
        engine.build(context=tmp_path, tags=[f"{image_name}:x"], what="cell demo-cell")
    assert "cell demo-cell" in str(info.value)
    assert "about-to-fail" in str(info.value)


@pytest.mark.docker
@pytest.mark.registry
def test_push_errors_in_the_stream_raise(
    engine: Engine, context: Path, image_name: str, regs: LocalRegistries
) -> None:
    ref = f"{regs.auth}/{image_name}:t"
    engine.build(context=context, tags=[ref], build_args={"BASE_IMAGE": BASE})
    with pytest.raises(PushError) as info:
        engine.push(
            ref, credentials=Credentials(regs.credentials.username, "wrong"), registry_name="local-tls"
        )
    assert "local-tls" in str(info.value)
    assert "wrong" not in str(info.value).replace("wrong-", "")
    dead = f"127.0.0.1:{free_port()}/{image_name}:t"
    engine.tag(ref, dead)
    with pytest.raises(PushError, match="failed"):
        engine.push(dead, attempts=1)
    ok = engine.push(ref, credentials=regs.credentials)
    assert regs.auth_client().manifest_digest(image_name, "t") == ok.digest
    engine.remove(dead)
    engine.remove(ref)


@pytest.mark.docker
def test_run_container_shm_env_ulimits_and_always_removed(
    engine: Engine, context: Path, image_name: str
) -> None:
    engine.build(context=context, tags=[f"{image_name}:run"], build_args={"BASE_IMAGE": BASE})
    before = {c.id for c in engine.client.containers.list(all=True)}
    out = engine.run_container(
        f"{image_name}:run",
        ["sh", "-c", "df -k /dev/shm | tail -1; echo $FOO; ulimit -s; exit 3"],
        shm_size="96m",
        env={"FOO": "bar"},
        ulimits={"stack": 67108864},
    )
    assert out.exit_code == 3
    lines = out.output.split()
    assert "98304" in lines  # 96 MiB in kB
    assert "bar" in lines
    assert "65536" in lines  # stack 64 MiB in kB
    with pytest.raises(EngineError, match="did not finish within 2 s"):
        engine.run_container(f"{image_name}:run", ["sleep", "60"], timeout_s=2)
    assert {c.id for c in engine.client.containers.list(all=True)} == before


@pytest.mark.docker
@pytest.mark.registry
def test_pull_by_digest_with_progress(
    engine: Engine, context: Path, image_name: str, regs: LocalRegistries
) -> None:
    ref = f"{regs.plain}/{image_name}:pull"
    engine.build(context=context, tags=[ref], build_args={"BASE_IMAGE": BASE})
    digest = engine.push(ref).digest
    engine.remove(ref)
    chunks: list[dict[str, object]] = []
    image_id = engine.pull(f"{regs.plain}/{image_name}@{digest}", progress=chunks.append)
    assert image_id.startswith("sha256:")
    assert any("status" in c for c in chunks)
    data = engine.inspect(f"{regs.plain}/{image_name}@{digest}")
    assert data is not None
    assert f"{regs.plain}/{image_name}@{digest}" in data["RepoDigests"]
    with pytest.raises(EngineError, match="pull of"):
        engine.pull(f"{regs.plain}/{image_name}@sha256:" + "0" * 64)
    engine.client.images.remove(image_id, force=True)
