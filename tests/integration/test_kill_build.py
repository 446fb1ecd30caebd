"""Kill ``build --push`` anywhere, and run it twice at once (issue 37, item 7), on the real engine and the two
local registries (127.0.0.1:5000 plain, :5443 TLS + htpasswd), each test in repositories of its own.

The cell is the smoke matrix's, built small: ``tests/tinydocker.py`` is the docker CLI imagesmith drives, and
builds a few MB ``FROM scratch`` with the cell's labels instead of the real Dockerfile (fresh random bytes
each build: two builds of the same inputs give two digests, as real builds do). Everything else is the real
command: the project lock, staging under ``<cache>/contexts/run-XXXX`` (a flock per run), BuildKit, the engine
push, the copy to the second registry, the final tags and their read-back (imagesmith/tagcheck.py).

After every kill: every tag in either registry names a manifest the registry serves whole (its config and
every layer blob there, of the size the manifest says), and a final tag names an image of this cell's
fingerprint. Every few kills a plain ``build --push`` (no ``--force``) converges: exit 0, the candidate and
fingerprint tags name the digest its summary records on both registries, no staging folder of a dead run is
left under the cache. Bounded and seeded like tests/integration/test_kill_anywhere.py (``IMAGESMITH_KILLS``,
``IMAGESMITH_KILL_BUDGET_S``, ``IMAGESMITH_KILL_SEED``; the seed is printed).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagesmith.build import RUN_PREFIX, suite_digest
from imagesmith.matrix import load_matrix
from imagesmith.plan import Cell, build_plan
from imagesmith.project import load_project
from imagesmith.registry import RegistryClient
from imagesmith.sources import sources_dir
from imagesmith.tags import candidate_tag, fingerprint_tag
from tests import tinydocker
from tests.integration.test_kill_anywhere import (
    BUDGET_S,
    IMAGESMITH,
    KILLS,
    SEED,
    _env,
    _harness,
    _run,
    _temps,
)
from tests.localinfra import LocalRegistries, local_registries
from tests.unit.test_lock_whole import _project

pytestmark = [pytest.mark.docker, pytest.mark.registry]

MATRIX = "killbuild"
FINGERPRINT_LABEL = "io.imagesmith.fingerprint"
#: how a losing `build --push` of a pair says it lost: its final tag moved by the other run (the read-back,
#: imagesmith/tagcheck.py), or the engine pushed the other run's image under the local staging tag both runs
#: share on one engine (push_cell's check that the registry serves the digest this run built: "does not serve
#: … after the push", or "serves D2 for … the engine pushed D1" when the other run's push landed on the
#: staging tag between this run's push and its read of the tag)
LOST = ("that this run built and tagged there", "after the push", "the engine pushed")


@dataclass
class World:
    root: Path
    env: dict[str, str]
    cell: Cell
    repo: str
    clients: dict[str, RegistryClient]
    cache: Path

    @property
    def tags(self) -> tuple[str, str]:
        return candidate_tag(self.cell), fingerprint_tag(self.cell.publish.fingerprint, suite_digest())


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def _world(tmp_path: Path, regs: LocalRegistries, name: str = "p", repo: str | None = None) -> World:
    """A project of the smoke matrix (named killbuild: its local tag is imagesmith/killbuild:CELL, no other
    test's) pushing to both local registries under *repo*; a cache of its own holding the nccl-tests
    archive."""
    repo = repo or f"imagesmith-test/killbuild-{uuid.uuid4().hex[:8]}"
    ns, leaf = repo.split("/")
    root = _project(tmp_path / name)
    smoke = root / "matrices" / "smoke.toml"
    (root / "matrices" / f"{MATRIX}.toml").write_text(
        smoke.read_text().replace('name = "smoke"', f'name = "{MATRIX}"')
    )
    smoke.unlink()
    (root / "imagesmith.toml").write_text(f'schema = 1\ndefault_matrix = "{MATRIX}"\n')
    (root / "matrices" / "registries.toml").write_text(
        f'schema = 1\n[registries.local-plain]\nhost = "{regs.plain}"\nnamespace = "{ns}"\n'
        f'repository = "{leaf}"\ninsecure = true\n'
        f'[registries.local-tls]\nhost = "{regs.auth}"\nnamespace = "{ns}"\nrepository = "{leaf}"\n'
    )
    env = _env(tmp_path / f"{name}-env")
    env.update(tinydocker.install(tmp_path / f"{name}-env" / "docker"))
    env.update(regs.auth_env())
    config = tmp_path / f"{name}-env" / "config.toml"
    config.write_text(f'[registry_mirrors]\n"docker.io" = "{regs.plain}/hub"\n')
    env["IMAGESMITH_CONFIG"] = str(config)
    env["IMAGESMITH_REGISTRY_ATTEMPTS"] = "2"
    env["IMAGESMITH_REGISTRY_DEADLINE"] = "30"
    env.pop("IMAGESMITH_PROJECT", None)
    cache = Path(env["XDG_CACHE_HOME"]) / "imagesmith"
    (cache / "sources").mkdir(parents=True)
    for archive in sources_dir().glob("nccl-tests-*.tar"):
        shutil.copy(archive, cache / "sources" / archive.name)
    done = _run(["-C", str(root), "render"], env)
    assert done.returncode == 0, done.stderr
    project = load_project(root / "imagesmith.toml")
    (cell,) = build_plan(load_matrix(MATRIX, project=project), project=project).cells
    clients = {"local-plain": regs.plain_client(), "local-tls": regs.auth_client()}
    return World(root, env, cell, repo, clients, cache)


def _build(w: World, *extra: str, summary: str = "summary.json") -> list[str]:
    return [
        "-C",
        str(w.root),
        "build",
        "--matrix",
        MATRIX,
        "--push",
        "--summary",
        str(w.root / summary),
        *extra,
    ]


def _whole(client: RegistryClient, repo: str, tag: str) -> dict[str, str]:
    """The manifest *tag* names, whole: its config and every layer in the registry, of their sizes."""
    manifest = client.get_manifest(repo, tag)
    doc = manifest.json()
    for blob in [doc["config"], *doc["layers"]]:
        size = client.blob_size(repo, blob["digest"])
        assert size == blob["size"], f"{client.host} {repo}:{tag} names blob {blob['digest']} ({size})"
    config = json.loads(b"".join(client.get_blob(repo, doc["config"]["digest"]).iter_content(1 << 16)))
    labels: dict[str, str] = config.get("config", {}).get("Labels") or {}
    return {"digest": manifest.digest, **labels}


def _check_registries(w: World) -> dict[str, dict[str, str]]:
    """Every tag in either registry names a whole manifest; a final tag an image of the cell's fingerprint.
    Returns {registry: {tag: digest}}."""
    seen: dict[str, dict[str, str]] = {}
    for name, client in w.clients.items():
        seen[name] = {}
        for tag in client.list_tags(w.repo):
            held = _whole(client, w.repo, tag)
            seen[name][tag] = held["digest"]
            if tag in w.tags:
                assert held.get(FINGERPRINT_LABEL) == w.cell.publish.fingerprint, (name, tag, held)
    return seen


def _runs_left(w: World) -> list[Path]:
    return sorted((w.cache / "contexts").glob(RUN_PREFIX + "*"))


def _converged(w: World, done: subprocess.CompletedProcess[str], summary: str = "summary.json") -> str:
    """Exit 0; both final tags name the digest the summary records, on both registries, whole. The digest."""
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    assert "Traceback" not in done.stderr
    (cell,) = json.loads((w.root / summary).read_text())["cells"]
    digest = cell["digest"]
    seen = _check_registries(w)
    for name in w.clients:
        for tag in w.tags:
            assert seen[name].get(tag) == digest, (name, tag, seen, done.stdout[-2000:])
        assert cell["registries"][name]["digest"] == digest
    return str(digest)


def _forget(w: World) -> None:
    """Untag everything in both repositories (a fresh start for the next kills)."""
    for client in w.clients.values():
        for digest in {client.manifest_digest(w.repo, t) for t in client.list_tags(w.repo)} - {None}:
            client.delete_manifest(w.repo, str(digest))


@pytest.fixture
def cleanup() -> Iterator[list[World]]:
    worlds: list[World] = []
    yield worlds
    refs = {f"imagesmith/{MATRIX}"} | {
        f"{r}/{w.repo}" for w in worlds for r in (w.clients["local-plain"].host,)
    }
    for ref in refs:
        ids = subprocess.run(
            ["docker", "images", "-q", "--filter", f"reference={ref}"], capture_output=True, text=True
        ).stdout.split()
        if ids:
            subprocess.run(["docker", "rmi", "-f", *set(ids)], capture_output=True, check=False)


def test_build_push_killed_anywhere_leaves_no_tag_on_a_partial_manifest_and_a_plain_rerun_converges(
    tmp_path: Path, regs: LocalRegistries, cleanup: list[World]
) -> None:
    """Killed runs are `build --push --force` (each one builds and pushes a new image over the tags the runs
    before left); the rerun that must converge is the plain `build --push`."""
    w = _world(tmp_path, regs)
    cleanup.append(w)
    print(f"build --push kill harness: seed {SEED + 4}, {KILLS} kills / {BUDGET_S:g} s at most")
    left_by_kills: list[Path] = []

    def check() -> None:
        _check_registries(w)
        left_by_kills.extend(p for p in _runs_left(w) if p not in left_by_kills)

    def converge() -> None:
        _converged(w, _run(_build(w), w.env))
        assert _runs_left(w) == [], "a staging folder of a dead run was left"
        assert _temps(w.root) == []

    started = time.monotonic()
    tally = _harness(
        random.Random(SEED + 4), _build(w, "--force"), w.env, lambda: _forget(w), check, converge
    )
    print(
        f"build --push: {tally}; {len(left_by_kills)} staging folders left by kills, all removed; "
        f"{time.monotonic() - started:.0f} s"
    )
    assert left_by_kills, "no kill landed while a run staged: the harness did not test the staging cleanup"


def _pair(
    a: list[str], b: list[str], env_a: dict[str, str], env_b: dict[str, str]
) -> list[subprocess.CompletedProcess[str]]:
    procs = [
        subprocess.Popen(
            [str(IMAGESMITH), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for args, env in ((a, env_a), (b, env_b))
    ]
    out = []
    for args, p in zip((a, b), procs, strict=True):
        stdout, stderr = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(args, p.returncode, stdout, stderr))
    return out


def test_two_build_push_of_one_project_at_once_both_finish_and_the_tags_name_one_build(
    tmp_path: Path, regs: LocalRegistries, cleanup: list[World]
) -> None:
    """Same project, same cache: the project lock puts one after the other (the second waits, then finds the
    fingerprint pushed and skips); with no wait allowed the second exits 14 naming the holder."""
    w = _world(tmp_path, regs)
    cleanup.append(w)
    one, two = _pair(_build(w, summary="one.json"), _build(w, summary="two.json"), w.env, w.env)
    first = _converged(w, one, "one.json")
    assert _converged(w, two, "two.json") == first
    statuses = sorted(
        json.loads((w.root / s).read_text())["cells"][0]["status"] for s in ("one.json", "two.json")
    )
    assert statuses == ["pushed", "skipped"], statuses
    assert _runs_left(w) == []

    _forget(w)
    quick = {**w.env, "IMAGESMITH_LOCK_WAIT": "0"}
    one, two = _pair(
        _build(w, "--force", summary="one.json"), _build(w, "--force", summary="two.json"), quick, quick
    )
    won, lost = (one, two) if one.returncode == 0 else (two, one)
    _converged(w, won, "one.json" if won is one else "two.json")
    assert lost.returncode == 14, lost.stderr
    assert "error: another imagesmith build (pid " in lost.stderr, lost.stderr
    assert f"holds {w.root}/.imagesmith.lock" in lost.stderr, lost.stderr


def test_two_build_push_of_two_copies_at_once_never_leave_a_summary_naming_a_digest_no_tag_names(
    tmp_path: Path, regs: LocalRegistries, cleanup: list[World]
) -> None:
    """Two copies of one project (no shared project lock) with one cache, pushing the same cell to the same
    repositories: two builds of the same inputs, two digests. Each run reads its final tags back
    (tagcheck.check_held): both exit 0 and each summary records, per registry, the digest that registry's tags
    name (the other build's, when it moved them), or a run exits 6 naming the tag that moved."""
    repo = f"imagesmith-test/killpair-{uuid.uuid4().hex[:8]}"
    a = _world(tmp_path, regs, "a", repo)
    b = _world(tmp_path, regs, "b", repo)
    b.env["XDG_CACHE_HOME"] = a.env["XDG_CACHE_HOME"]  # one cache: staging folders of their own
    b.cache = a.cache
    cleanup.extend([a, b])
    assert a.tags == b.tags
    rounds = 2
    digests_differ = losses = 0
    for n in range(rounds):
        _forget(a)
        one, two = _pair(_build(a, "--force"), _build(b, "--force"), a.env, b.env)
        seen = _check_registries(a)
        for w, done in ((a, one), (b, two)):
            assert "Traceback" not in done.stderr
            assert "Directory not empty" not in done.stderr
            if done.returncode != 0:  # the loser: one clear error, no final tag moved onto its image
                assert done.returncode == 6, done.stderr
                assert any(why in done.stderr for why in LOST), done.stderr
                losses += 1
            (cell,) = json.loads((w.root / "summary.json").read_text())["cells"]
            for name, held in cell["registries"].items():  # the summary names no digest no tag names
                for tag in a.tags:
                    assert seen[name][tag] == held["digest"], (n, name, tag, seen, done.stdout[-1500:])
        built = {
            json.loads((w.root / "summary.json").read_text())["cells"][0].get("image_id") for w in (a, b)
        }
        digests_differ += len(built) == 2
        assert _runs_left(a) == []
        _converged(a, _run(_build(a), a.env))  # a plain rerun makes both registries agree
    assert digests_differ, "the two builds never made two images: the pair tested nothing"
    print(f"two copies at once: {rounds} rounds, {digests_differ} with two images, {losses} runs lost")
