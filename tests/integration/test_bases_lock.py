"""Base images by digest against the local registry (issue 26): a copy of the local debian:bookworm under a
repository of this test's own (never the shared hub/library/debian), the project's registry-mirror map
pointed at it, re-published with one changed file under the same name.

`imagesmith lock --bases` changes one line; the plan gives the cell on it (and only it) a new fingerprint
with the reason; the build's skip decision against the real registry skips the cell on the unmoved base and
rebuilds the other, saying why; with the upstream manifest deleted, the real engine builds the cell's base
stage from the escrow copy by digest.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith.bases import escrow_registry, escrow_repo, escrow_tag, read_bases
from imagesmith.build import (
    BaseSources,
    BuildOptions,
    _moved_reason,
    base_sources,
    build_args,
    build_cell,
    suite_digest,
)
from imagesmith.config import load_config
from imagesmith.engine import Engine
from imagesmith.errors import BuildError
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import build_plan
from imagesmith.project import Project, load_project
from imagesmith.registry import RegistryClient, copy_manifest
from imagesmith.tags import candidate_tag, fingerprint_tag
from tests.localinfra import local_registries
from tests.repo import PROJECT

pytestmark = [pytest.mark.registry, pytest.mark.docker]


class NoEngine:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the engine was used ({name}): the cell should have been skipped")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    plain = local_registries().plain
    prefix = f"i26b{uuid.uuid4().hex[:10]}"
    client = RegistryClient(plain, insecure=True)
    for tag in ("bookworm", "12"):  # two names of one image: two matrices, one base moves
        copy_manifest(
            client, "hub/library/debian", "bookworm", client, f"{prefix}/library/debian", put_as=tag
        )
    root = tmp_path / "proj"
    (root / "matrices").mkdir(parents=True)
    smoke = (PROJECT.matrices_dir / "smoke.toml").read_text()
    smoke = smoke.replace('registries = ["local-plain", "local-tls"]', 'registries = ["local-plain"]')
    assert 'registries = ["local-plain"]' in smoke
    # matrix names of this test's own: the local image tag imagesmith/<matrix>:<cell> is shared by the engine
    moved_name, other_name = f"{prefix}m", f"{prefix}o"
    (root / "matrices" / f"{moved_name}.toml").write_text(
        smoke.replace('name = "smoke"', f'name = "{moved_name}"')
    )
    other = smoke.replace('name = "smoke"', f'name = "{other_name}"').replace(
        'image = "debian:bookworm"', 'image = "debian:12"'
    )
    (root / "matrices" / f"{other_name}.toml").write_text(other)
    (root / "matrices" / "registries.toml").write_text(
        f'schema = 1\n[registries.local-plain]\nhost = "{plain}"\nnamespace = "{prefix}"\n'
        'repository = "torch"\ninsecure = true\n'
    )
    (root / "locks").mkdir()
    shutil.copy(PROJECT.locks_dir / "2.11.0-cu130-py3.11.txt", root / "locks")
    (root / "imagesmith.toml").write_text('schema = 1\nname = "t"\n[bases]\nescrow = "local-plain"\n')
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("IMAGESMITH_REGISTRY_MIRRORS", f"docker.io={plain}/{prefix}")
    monkeypatch.delenv("IMAGESMITH_PROJECT", raising=False)
    monkeypatch.chdir(root)
    made: list[str] = []
    yield {
        "root": root,
        "prefix": prefix,
        "plain": plain,
        "client": client,
        "made": made,
        "smoke": moved_name,
        "other": other_name,
    }
    for ref in made:
        subprocess.run(["docker", "rmi", "-f", ref], capture_output=True, check=False)


def _cells(project: Project, world: dict[str, Any]) -> dict[str, Cell]:
    """{"smoke": the cell on the base that moves, "other": the cell on the other name of the base}."""
    out = {}
    for key in ("smoke", "other"):
        (cell,) = build_plan(load_matrix(world[key], project=project), project=project).cells
        out[key] = cell
    return out


def _republish(world: dict[str, Any]) -> None:
    """debian:bookworm again under the same name, with one file changed."""
    ref = f"{world['plain']}/{world['prefix']}/library/debian:bookworm"
    ctx = world["root"].parent / "republish"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {ref}\nRUN echo republished > /etc/imagesmith-i26b\n")
    env = {"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"}
    subprocess.run(["docker", "build", "-q", "-t", ref, str(ctx)], check=True, capture_output=True, env=env)
    world["made"].append(ref)
    subprocess.run(["docker", "push", "-q", ref], check=True, capture_output=True)


def test_moved_base_one_line_new_fingerprints_rebuild_and_escrow(
    world: dict[str, Any], run_cli: Callable[..., Any]
) -> None:
    root, prefix, client = world["root"], world["prefix"], world["client"]
    first = run_cli("lock", "--bases")
    assert first.exit_code == 0, first.stderr
    lock_file = root / "locks" / "bases.toml"
    before = lock_file.read_text().splitlines()
    project = load_project(root / "imagesmith.toml")
    lock = read_bases(project.locks_dir)
    assert lock is not None
    d1 = lock.entries["debian:bookworm"].digest
    assert d1
    assert lock.entries["debian:12"].digest == d1
    assert lock.entries["debian:bookworm"].registry == f"{world['plain']}/{prefix}"
    assert lock.entries["debian:bookworm"].read == dt.datetime.now(dt.timezone.utc).date().isoformat()
    escrow = escrow_registry(project)
    assert escrow is not None
    assert client.manifest_digest(escrow_repo(escrow, "debian:bookworm"), escrow_tag(d1)) == d1

    # both cells built and pushed on d1: their fingerprint and candidate tags are in the registry
    suite = suite_digest()
    old = _cells(project, world)
    for cell in old.values():
        for tag in (fingerprint_tag(cell.publish.fingerprint, suite), candidate_tag(cell)):
            copy_manifest(client, f"{prefix}/library/debian", d1, client, f"{prefix}/torch", put_as=tag)

    _republish(world)
    again = run_cli("lock", "--bases")
    assert again.exit_code == 0, again.stderr
    after = lock_file.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1, changed
    assert changed[0][0].startswith('"debian:bookworm"')
    d2 = read_bases(project.locks_dir).entries["debian:bookworm"].digest  # type: ignore[union-attr]
    assert d2 not in (None, d1)
    assert "moved   base debian:bookworm moved" in again.stdout

    new = _cells(project, world)
    assert new["smoke"].publish.fingerprint != old["smoke"].publish.fingerprint
    assert new["other"].publish.fingerprint == old["other"].publish.fingerprint
    explain = run_cli("plan", "--matrix", world["smoke"], "--explain")
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    reason = f"rebuilt: base debian:bookworm moved {d1[:19]}…→{d2[:19]}… (read {today})"
    assert reason in explain.stdout
    assert "rebuilt:" not in run_cli("plan", "--matrix", world["other"], "--explain").stdout

    # build --push decisions against the real registry: the unmoved cell is skipped, the moved one rebuilt
    config = load_config()
    options = BuildOptions(push=True, project=project, config=config)
    skipped = build_cell(
        new["other"], load_matrix(world["other"], project=project), NoEngine(), options, root / "st"
    )
    assert skipped.status == "skipped"
    clients = {t.name: options.client_for(t) for t in new["smoke"].publish.registries}
    assert _moved_reason(new["smoke"], clients, suite) == reason
    assert all(
        c.manifest_digest(t.repo, fingerprint_tag(new["smoke"].publish.fingerprint, suite)) is None
        for t in new["smoke"].publish.registries
        for c in [clients[t.name]]
    )

    # the upstream name is gone: the build uses the escrow copy by digest, and says so
    client.delete_manifest(f"{prefix}/library/debian", d2)
    assert client.manifest_digest(f"{prefix}/library/debian", "bookworm") is None
    without = BaseSources(config)
    with pytest.raises(BuildError, match="no longer serves"):
        without.ref(new["smoke"], "debian:bookworm")
    sources = base_sources(project, options)
    ref, note = sources.ref(new["smoke"], "debian:bookworm")
    assert ref == f"{world['plain']}/{prefix}/bases/library/debian@{d2}"
    assert note is not None
    assert "built from the escrow copy" in note
    # the real engine builds the base stage from it (the file re-published with d2 is there)
    ctx = root.parent / "from-escrow"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        "ARG BASE_IMAGE=debian:bookworm\nFROM ${BASE_IMAGE}\nRUN grep -qx republished /etc/imagesmith-i26b\n"
    )
    tag = f"imagesmith-test/{prefix}:escrow"
    world["made"] += [tag, ref]
    built = Engine().build(context=ctx, tags=[tag], build_args=build_args(new["smoke"], config, sources))
    assert built.image_id
