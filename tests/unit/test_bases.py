"""The base lock (``bases.toml``): reading, writing, validation, the plan's use of it (fingerprint, rendered
``FROM name@digest``, plan --explain), and the build's choice of where each base is pulled from (escrow)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith.bases import (
    BaseEntry,
    BaseLockError,
    Resolved,
    escrow_repo,
    read_bases,
    refreshed,
    write_bases,
)
from imagesmith.build import BaseSources, build_args
from imagesmith.config import UserConfig
from imagesmith.errors import BuildError, RegistryError
from imagesmith.matrix import load_matrix
from imagesmith.model import BuildPlan
from imagesmith.plan import build_plan
from imagesmith.refs import Registry
from imagesmith.render import render_cell_files
from tests.localhttp import QuietHTTPServer
from tests.repo import PROJECT

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def _write(tmp_path: Path, body: str) -> Path:
    (tmp_path / "bases.toml").write_text("schema = 1\n[bases]\n" + body + "\n")
    return tmp_path


def test_round_trip_one_line_per_base(tmp_path: Path) -> None:
    entries = [
        BaseEntry(name="debian:bookworm", digest=A, registry="127.0.0.1:5000/hub", read="2026-12-01"),
        BaseEntry(name="ubuntu:24.04", origin="local"),
    ]
    path = write_bases(tmp_path, entries)
    lock = read_bases(tmp_path)
    assert lock is not None
    assert dict(lock.entries) == {e.name: e for e in entries}
    lines = path.read_text().splitlines()
    assert (
        f'"debian:bookworm" = {{ digest = "{A}", registry = "127.0.0.1:5000/hub", read = "2026-12-01" }}'
        in lines
    )
    assert '"ubuntu:24.04" = { origin = "local" }' in lines


def test_no_lock_reads_as_none(tmp_path: Path) -> None:
    assert read_bases(tmp_path) is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('"debian:bookworm" = { digest = "sha256:abc", registry = "r", read = "2026-12-01" }', ".digest"),
        (
            '"debian:bookworm" = { digest = "sha512:'
            + "a" * 128
            + '", registry = "r", read = "2026-12-01" }',
            ".digest",
        ),
        ('"debian:bookworm" = { digest = "' + A + '\\n", registry = "r", read = "2026-12-01" }', ".digest"),
        (
            '"debian:bookworm" = { digest = "' + A.upper() + '", registry = "r", read = "2026-12-01" }',
            ".digest",
        ),
        (
            '"debian:bookworm" = { digest = "' + A + ' ; rm -rf /", registry = "r", read = "2026-12-01" }',
            ".digest",
        ),
        ('"debian:bookworm" = { registry = "r", read = "2026-12-01" }', ".digest is missing"),
        ('"debian:bookworm" = { digest = "' + A + '", read = "2026-12-01" }', ".registry is missing"),
        ('"debian:bookworm" = { digest = "' + A + '", registry = "r" }', ".read is missing"),
        ('"debian:bookworm" = { digest = "' + A + '", registry = "r", read = "2026-13-01" }', ".read"),
        ('"debian:bookworm" = { digest = "' + A + '", registry = "a b", read = "2026-12-01" }', ".registry"),
        ('"debian:bookworm" = { digest = "' + A + '", registry = "r", read = "2026-12-01", x = "1" }', ".x"),
        (
            '"debian:bookworm" = { digest = "'
            + A
            + '", registry = "r", read = "2026-12-01", previous = "1" }',
            ".previous",
        ),
        ('"debian:bookworm" = { digest = 1, registry = "r", read = "2026-12-01" }', ".digest"),
        ('"debian:bookworm" = { origin = "local", digest = "' + A + '" }', ".digest"),
        ('"debian:bookworm" = { origin = "mirror" }', ".origin"),
        ('"debian:bookworm@' + A + '" = { origin = "local" }', "carries a digest"),
        ('"debian bookworm" = { origin = "local" }', "not an image reference"),
        ('"debian:bookworm" = "' + A + '"', "must be a table"),
    ],
)
def test_hostile_or_incomplete_entries_name_file_and_field(tmp_path: Path, body: str, field: str) -> None:
    _write(tmp_path, body)
    with pytest.raises(BaseLockError) as err:
        read_bases(tmp_path, "locks/bases.toml")
    assert err.value.message.startswith("locks/bases.toml: bases.")
    assert field in err.value.message
    assert err.value.hint
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    ("text", "what"),
    [("schema = 2\n[bases]\n", "schema = 2"), ("[bases\n", "not valid TOML"), ("schema = 1\nx = 1\n", "'x'")],
)
def test_malformed_file(tmp_path: Path, text: str, what: str) -> None:
    (tmp_path / "bases.toml").write_text(text)
    with pytest.raises(BaseLockError, match=what):
        read_bases(tmp_path)


def test_refresh_keeps_an_unmoved_line_and_records_a_move() -> None:
    old = BaseEntry(name="debian:bookworm", digest=A, registry="m", read="2026-11-01")
    assert refreshed(old, old.name, Resolved(A, "m"), today="2026-12-01") is old
    new = refreshed(old, old.name, Resolved(B, "m"), today="2026-12-01")
    assert (new.digest, new.previous, new.read) == (B, A, "2026-12-01")
    assert new.moved() == f"base debian:bookworm moved {A[:19]}…→{B[:19]}… (read 2026-12-01)"
    assert refreshed(None, "x:1", Resolved(A, "m"), today="2026-12-01").previous is None


# -- the plan ---------------------------------------------------------------------------------------------
def _smoke_project(tmp_path: Path) -> Path:
    """The smoke matrix and its locks in a project of its own."""
    (tmp_path / "matrices").mkdir()
    shutil.copy(PROJECT.matrices_dir / "smoke.toml", tmp_path / "matrices")
    shutil.copy(PROJECT.registries_file, tmp_path / "matrices" / "registries.toml")
    (tmp_path / "locks").mkdir()
    for lock in PROJECT.locks_dir.glob("2.11.0-cu130-py3.11.txt"):
        shutil.copy(lock, tmp_path / "locks")
    (tmp_path / "imagesmith.toml").write_text('schema = 1\nname = "t"\n')
    return tmp_path


def _plan(root: Path) -> BuildPlan:
    from imagesmith.project import load_project

    project = load_project(root / "imagesmith.toml")
    return build_plan(load_matrix("smoke", project=project), project=project)


def test_a_moved_base_moves_the_fingerprint_and_the_rendered_from(tmp_path: Path) -> None:
    root = _smoke_project(tmp_path)
    (by_name,) = _plan(root).cells
    assert by_name.bases.base_digests == ()
    write_bases(root / "locks", [BaseEntry(name="debian:bookworm", origin="local")])
    (local,) = _plan(root).cells
    # made locally: nothing machine-specific in the plan, the fingerprint or the Dockerfile
    assert local.bases.base_local == ("debian:bookworm",)
    assert local.publish.fingerprint == by_name.publish.fingerprint
    write_bases(
        root / "locks", [BaseEntry(name="debian:bookworm", digest=A, registry="m", read="2026-12-01")]
    )
    (at_a,) = _plan(root).cells
    assert at_a.publish.fingerprint != by_name.publish.fingerprint
    assert f"ARG BASE_IMAGE=debian:bookworm@{A}\n" in render_cell_files(at_a)["Dockerfile"]
    write_bases(
        root / "locks",
        [BaseEntry(name="debian:bookworm", digest=B, registry="m", read="2026-12-02", previous=A)],
    )
    (at_b,) = _plan(root).cells
    assert at_b.publish.fingerprint not in {at_a.publish.fingerprint, by_name.publish.fingerprint}
    assert at_b.bases.moved_notes() == [f"base debian:bookworm moved {A[:19]}…→{B[:19]}… (read 2026-12-02)"]


def test_a_cell_whose_base_the_lock_lacks_is_dropped_naming_the_fix(tmp_path: Path) -> None:
    """A project that pins its bases builds no cell by a moving name (as no wheel floats): the cell is
    dropped with the file and the command that pins it; the matrix's other cells still plan."""
    root = _smoke_project(tmp_path)
    write_bases(root / "locks", [BaseEntry(name="debian:trixie", origin="local")])
    plan = _plan(root)
    assert not plan.cells
    (dropped,) = plan.dropped
    assert dropped.reason.startswith("base image debian:bookworm has no entry in locks/bases.toml: run ")
    assert "`imagesmith lock --bases --matrix smoke`" in dropped.reason
    assert '"debian:bookworm" = { origin = "local" }' in dropped.reason


def test_plan_explain_says_the_base_moved(
    tmp_path: Path, run_cli: Callable[..., object], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _smoke_project(tmp_path)
    write_bases(
        root / "locks",
        [BaseEntry(name="debian:bookworm", digest=B, registry="m", read="2026-12-02", previous=A)],
    )
    monkeypatch.chdir(root)
    result = run_cli("plan", "--explain")
    out: str = result.stdout  # type: ignore[attr-defined]
    assert result.exit_code == 0, out  # type: ignore[attr-defined]
    assert f"rebuilt: base debian:bookworm moved {A[:19]}…→{B[:19]}… (read 2026-12-02)" in out


def test_this_projects_bases_are_all_made_locally() -> None:
    """Its CI imports a debootstrap of Debian on each machine: the committed lock must not pin a digest of
    the machine that wrote it, and every matrix's bases are in it (the plan refuses one that is not)."""
    lock = read_bases(PROJECT.locks_dir)
    assert lock is not None
    assert all(e.origin == "local" for e in lock.entries.values())
    for name in PROJECT.matrix_names():
        for cell in build_plan(load_matrix(name, project=PROJECT), project=PROJECT).cells:
            assert cell.bases.base_digests == ()
            assert cell.bases.base_image in cell.bases.base_local


# -- the build: where each base is pulled from ------------------------------------------------------------
class _Reg:
    def __init__(self, held: dict[tuple[str, str], str] | None = None, down: bool = False) -> None:
        self.held, self.down, self.asked = held or {}, down, 0

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        self.asked += 1
        if self.down:
            raise RegistryError("registry m (127.0.0.1:9): connection refused", hint="x")
        return self.held.get((repo, reference))


def _pinned_cell(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = _smoke_project(tmp_path)
    write_bases(
        root / "locks", [BaseEntry(name="debian:bookworm", digest=A, registry="m", read="2026-12-01")]
    )
    (cell,) = _plan(root).cells
    return cell


CONFIG = UserConfig(registry_mirrors=(("docker.io", "127.0.0.1:5000/hub"),))
ESCROW = Registry(name="esc", host="127.0.0.1:5000", repository="proj/torch", insecure=True)


def test_build_pulls_a_pinned_base_by_digest_through_the_mirror(tmp_path: Path) -> None:
    cell = _pinned_cell(tmp_path)
    up = _Reg({("hub/library/debian", A): A})
    sources = BaseSources(CONFIG, client_for=lambda r: up)  # type: ignore[arg-type,return-value]
    args = build_args(cell, CONFIG, sources)
    assert args["BASE_IMAGE"] == f"127.0.0.1:5000/hub/library/debian:bookworm@{A}"
    assert args["BUILDER_IMAGE"] == args["BASE_IMAGE"]
    assert up.asked == 1  # one HEAD per base per run


@pytest.mark.parametrize("down", [False, True])
def test_build_falls_back_to_escrow_by_digest_and_says_so(tmp_path: Path, down: bool) -> None:
    cell = _pinned_cell(tmp_path)
    up = _Reg({}, down=down)
    esc = _Reg({(escrow_repo(ESCROW, "debian:bookworm"), A): A})
    sources = BaseSources(
        CONFIG,
        escrow=ESCROW,
        client_for=lambda r: esc if r.name == "esc" else up,  # type: ignore[arg-type,return-value]
    )
    ref, note = sources.ref(cell, "debian:bookworm")
    assert ref == f"127.0.0.1:5000/proj/bases/library/debian@{A}"
    assert note is not None
    assert "built from the escrow copy" in note
    assert ("unreachable" if down else "no longer serves") in note


def test_build_without_upstream_or_escrow_refuses(tmp_path: Path) -> None:
    cell = _pinned_cell(tmp_path)
    sources = BaseSources(CONFIG, client_for=lambda r: _Reg({}))  # type: ignore[arg-type,return-value]
    with pytest.raises(BuildError, match="no longer serves") as err:
        sources.ref(cell, "debian:bookworm")
    assert "imagesmith lock --bases" in (err.value.hint or "")
    sources = BaseSources(CONFIG, escrow=ESCROW, client_for=lambda r: _Reg({}))  # type: ignore[arg-type,return-value]
    with pytest.raises(BuildError, match="holds no proj/bases/library/debian@"):
        sources.ref(replace(cell), "debian:bookworm")


def test_lock_bases_takes_no_wheel_flags(run_cli: Callable[..., Any]) -> None:
    result = run_cli("lock", "--bases", "--force")
    assert result.exit_code == 2
    assert "--bases and --force do not go together" in result.stderr


def test_escrow_must_name_a_registry_of_the_project(tmp_path: Path) -> None:
    from imagesmith.bases import escrow_registry
    from imagesmith.errors import ConfigError
    from imagesmith.project import load_project

    root = _smoke_project(tmp_path)
    (root / "imagesmith.toml").write_text('schema = 1\nname = "t"\n[bases]\nescrow = "nowhere"\n')
    with pytest.raises(
        ConfigError, match=re.escape("bases.escrow = 'nowhere' is no registry of matrices/registries.toml")
    ):
        escrow_registry(load_project(root / "imagesmith.toml"))
    (root / "imagesmith.toml").write_text('schema = 1\nname = "t"\n[bases]\nescrow = "local-plain"\n')
    esc = escrow_registry(load_project(root / "imagesmith.toml"))
    assert esc is not None
    assert escrow_repo(esc, "debian:bookworm") == "imagesmith/bases/library/debian"


def test_a_base_made_locally_is_built_by_name_without_a_request(tmp_path: Path) -> None:
    root = _smoke_project(tmp_path)
    write_bases(root / "locks", [BaseEntry(name="debian:bookworm", origin="local")])
    (cell,) = _plan(root).cells

    def no_registry(r: Registry) -> Any:
        raise AssertionError(f"a registry was asked ({r.host}) for a base made locally")

    sources = BaseSources(CONFIG, escrow=ESCROW, client_for=no_registry)
    assert build_args(cell, CONFIG, sources)["BASE_IMAGE"] == "127.0.0.1:5000/hub/library/debian:bookworm"
    _ref, note = sources.ref(cell, "debian:bookworm")
    assert note == 'base debian:bookworm is made locally (bases.toml origin = "local"): built by name'


def test_planning_every_matrix_parses_each_lock_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cached plan of every matrix stays well under a second: each wheel lock (read by every matrix's plan
    for the layer order) and the size table are parsed once per content, not once per matrix."""
    import imagesmith.lock as lock_mod
    import imagesmith.wheelsizes as sizes_mod

    lock_mod._parsed.cache_clear()
    sizes_mod._parsed_sizes.cache_clear()
    calls: list[str] = []
    real_lock, real_sizes = lock_mod.parse_lock, sizes_mod.parse_sizes

    def counted_lock(t: str, p: Path, k: Any) -> Any:
        calls.append(str(p))
        return real_lock(t, p, k)

    def counted_sizes(t: str, p: Path) -> Any:
        calls.append(str(p))
        return real_sizes(t, p)

    monkeypatch.setattr(lock_mod, "parse_lock", counted_lock)
    monkeypatch.setattr(sizes_mod, "parse_sizes", counted_sizes)
    for name in PROJECT.matrix_names():
        build_plan(load_matrix(name, project=PROJECT), project=PROJECT)
    assert len(PROJECT.matrix_names()) >= 8
    assert calls
    assert len(calls) == len(set(calls)), "a lock or the size table was parsed twice"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('[bases]\n"debian:bookworm" = { origin = "local" }\n', "no `schema` key"),
        ('schema = "1"\n[bases]\n', 'schema = "1"'),
        ("schema = 2\n[bases]\n", "schema = 2"),
    ],
)
def test_a_base_lock_of_no_or_another_schema_says_so_without_python_reprs(
    tmp_path: Path, body: str, said: str
) -> None:
    (tmp_path / "bases.toml").write_text(body)
    with pytest.raises(BaseLockError) as err:
        read_bases(tmp_path, "locks/bases.toml")
    assert said in err.value.message
    assert "None" not in err.value.message


# -- a base the matrix names by digest (issue 26 re-check) ------------------------------------------------
class _Asked:
    """A registry that records each manifest reference asked for and holds *held* (reference → digest)."""

    def __init__(self, held: dict[str, str]) -> None:
        self.held = held
        self.asked: list[str] = []

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        self.asked.append(reference)
        return self.held.get(reference)


def _digest_named_project(tmp_path: Path, digest: str) -> Path:
    root = _smoke_project(tmp_path)
    smoke = root / "matrices" / "smoke.toml"
    smoke.write_text(
        smoke.read_text().replace('image = "debian:bookworm"', f'image = "debian:bookworm@{digest}"')
    )
    return root


def test_resolving_a_digest_named_base_asks_for_that_digest_not_its_tag() -> None:
    """Before: `debian:bookworm@A` was resolved by its tag (`debian@A` by "latest"), so the lock recorded
    what the tag served now, under a name that already says another digest."""
    from imagesmith.bases import resolve

    reg = _Asked({A: A, "bookworm": B, "latest": B})
    got = resolve(f"debian:bookworm@{A}", CONFIG, client=reg)  # type: ignore[arg-type]
    assert (got.digest, reg.asked) == (A, [A])
    reg.asked.clear()
    assert resolve(f"debian@{A}", CONFIG, client=reg).digest == A  # type: ignore[arg-type]
    assert reg.asked == [A]
    with pytest.raises(BaseLockError, match="no longer served or never pushed"):
        resolve(f"debian:bookworm@{B}", CONFIG, client=_Asked({"bookworm": B}))  # type: ignore[arg-type]


def test_lock_bases_writes_no_line_for_a_digest_named_base_and_the_lock_stays_readable(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: lock --bases wrote `"debian:bookworm@sha256:…" = { digest = <the tag's digest> }`, a line the
    next read refuses ("the name carries a digest"): every command of the project failed from then on."""
    import imagesmith.registry as registry

    root = _digest_named_project(tmp_path, A)
    write_bases(root / "locks", [])
    reg = _Asked({A: A, "bookworm": B})
    monkeypatch.setattr(registry, "client_for", lambda target, **kw: reg)
    monkeypatch.chdir(root)
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "none.toml"))
    result = run_cli("lock", "--bases")
    assert result.exit_code == 0, result.stderr
    assert reg.asked == [A]
    assert "the matrix pins it by digest" in result.stdout
    lock = read_bases(root / "locks")
    assert lock is not None
    assert dict(lock.entries) == {}
    reg.held = {"bookworm": B}  # the registry no longer serves the matrix's digest: said, not pinned anew
    result = run_cli("lock", "--bases")
    assert result.exit_code == 2
    assert "no longer served or never pushed" in result.stderr
    assert read_bases(root / "locks") is not None


def test_a_digest_named_base_plans_and_builds_by_its_own_digest_under_a_base_lock(tmp_path: Path) -> None:
    """Before: with a base lock, the cell was dropped ("has no entry"); with a line for it, the Dockerfile
    and the build said `name@A@A`."""
    root = _digest_named_project(tmp_path, A)
    write_bases(root / "locks", [BaseEntry(name="debian:trixie", origin="local")])
    (cell,) = _plan(root).cells
    assert dict(cell.bases.base_digests) == {f"debian:bookworm@{A}": A}
    assert f"ARG BASE_IMAGE=debian:bookworm@{A}\n" in render_cell_files(cell)["Dockerfile"]
    up = _Reg({("hub/library/debian", A): A})
    sources = BaseSources(CONFIG, client_for=lambda r: up)  # type: ignore[arg-type,return-value]
    pulled = build_args(cell, CONFIG, sources)["BASE_IMAGE"]
    assert pulled == f"127.0.0.1:5000/hub/library/debian:bookworm@{A}"
    esc = _Reg({(escrow_repo(ESCROW, f"debian:bookworm@{A}"), A): A})
    sources = BaseSources(
        CONFIG,
        escrow=ESCROW,
        client_for=lambda r: esc if r.name == "esc" else _Reg({}),  # type: ignore[arg-type,return-value]
    )
    ref, note = sources.ref(cell, cell.bases.base_image)
    assert ref == f"127.0.0.1:5000/proj/bases/library/debian@{A}"
    assert note is not None
    assert "escrow copy" in note


class _Mirror:
    """A registry mirror on 127.0.0.1 serving one manifest for every name; ``named`` is the digest its HEAD
    answers name (the real one unless told otherwise)."""

    BODY = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "layers": []}'

    def __init__(self, named: str | None = None) -> None:
        import hashlib
        import http.server
        import threading

        self.real = "sha256:" + hashlib.sha256(self.BODY).hexdigest()
        self.named = named or self.real
        self.log: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _answer(self, body: bool) -> None:
                outer.log.append(f"{self.command} {self.path}")
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                self.send_header("Content-Length", "0" if self.path == "/v2/" else str(len(outer.BODY)))
                if self.path != "/v2/":
                    self.send_header("Docker-Content-Digest", outer.named)
                self.end_headers()
                if body and self.path != "/v2/":
                    self.wfile.write(outer.BODY)

            def do_HEAD(self) -> None:
                self._answer(False)

            def do_GET(self) -> None:
                self._answer(True)

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.config = UserConfig(
            registry_mirrors=(("docker.io", f"127.0.0.1:{self.server.server_address[1]}/hub"),)
        )
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def __enter__(self) -> _Mirror:
        return self

    def __exit__(self, *args: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_digest_the_registry_names_but_does_not_serve_never_becomes_a_lock_line() -> None:
    """Before: the HEAD's Docker-Content-Digest was written as it came — a lock line no build could pull (a
    cache in front of the registry answering for another manifest)."""
    from imagesmith.bases import resolve

    with (
        _Mirror(named="sha256:" + "e" * 64) as liar,
        pytest.raises(BaseLockError, match="does not serve that manifest") as err,
    ):
        resolve("debian:bookworm", liar.config)
    assert err.value.digest == "sha256:" + "e" * 64
    assert "the lock keeps its line" in (err.value.hint or "")


def test_a_new_or_moved_digest_is_read_once_an_unchanged_one_costs_one_head() -> None:
    from imagesmith.bases import resolve

    with _Mirror() as honest:
        assert resolve("debian:bookworm", honest.config).digest == honest.real
        manifests = [r for r in honest.log if "/manifests/" in r]
        assert manifests == [
            "HEAD /v2/hub/library/debian/manifests/bookworm",
            f"GET /v2/hub/library/debian/manifests/{honest.real}",
        ]
        honest.log.clear()
        assert resolve("debian:bookworm", honest.config, pinned=honest.real).digest == honest.real
        assert [r for r in honest.log if "/manifests/" in r] == [
            "HEAD /v2/hub/library/debian/manifests/bookworm"
        ]


def test_a_base_that_moves_and_moves_back_gets_its_first_fingerprint_again(tmp_path: Path) -> None:
    """A→B→A: the lock line says previous = B, but what is built is A again — the same fingerprint as the
    first time, so the build finds it in its registries and skips it (nothing of `previous` or `read` is
    hashed or rendered)."""
    root = _smoke_project(tmp_path)
    write_bases(
        root / "locks", [BaseEntry(name="debian:bookworm", digest=A, registry="m", read="2026-11-01")]
    )
    (first,) = _plan(root).cells
    line = BaseEntry(name="debian:bookworm", digest=A, registry="m", read="2026-11-01")
    moved = refreshed(line, line.name, Resolved(B, "m"), today="2026-11-15")
    back = refreshed(moved, line.name, Resolved(A, "other-mirror"), today="2026-12-01")
    assert (back.digest, back.previous, back.read) == (A, B, "2026-12-01")
    write_bases(root / "locks", [moved])
    (at_b,) = _plan(root).cells
    write_bases(root / "locks", [back])
    (again,) = _plan(root).cells
    assert at_b.publish.fingerprint != first.publish.fingerprint
    assert again.publish.fingerprint == first.publish.fingerprint
    assert render_cell_files(again) == render_cell_files(first)
    assert again.bases.moved_notes() == [f"base debian:bookworm moved {B[:19]}…→{A[:19]}… (read 2026-12-01)"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("1", "digest = 1 (a number) must be a quoted string"),
        ("{ a = 1 }", "digest = a table must be a quoted string"),
        ("true", "digest = true (a boolean)"),
        ("2026-12-01", "digest = 2026-12-01 (an unquoted TOML date or time)"),
        ("[1]", "digest = a list"),
    ],
)
def test_a_value_of_another_type_is_shown_as_the_file_wrote_it(
    tmp_path: Path, value: str, shown: str
) -> None:
    """Before: `digest = '1' must be a plain string` (the number shown as if it were the string "1"),
    `"{'a': 1}"`, `read = '2026-12-01' must be a plain string` for an unquoted date: Python reprs."""
    _write(tmp_path, f'"debian:bookworm" = {{ digest = {value}, registry = "r", read = "2026-12-01" }}')
    with pytest.raises(BaseLockError) as err:
        read_bases(tmp_path, "locks/bases.toml")
    assert shown in err.value.message
    assert "'" not in err.value.message


def test_a_malformed_lock_says_how_to_repair_it_not_to_rerun_what_just_failed(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """lock --bases reads the lock first: its fix line was `run imagesmith lock --bases …` — the command that
    had just printed it."""
    root = _smoke_project(tmp_path)
    (root / "locks" / "bases.toml").write_text(
        f'schema = 1\n[bases]\n"debian:bookworm" = {{ digest = "{A}", registry = "r", read = "2026-12-01", '
        f'previous = "{A}" }}\n'
    )
    monkeypatch.chdir(root)
    result = run_cli("lock", "--bases")
    assert result.exit_code == 2
    assert "previous" in result.stderr
    assert "a base does not move to where it was" in result.stderr
    fix = next(line for line in result.stderr.splitlines() if line.strip().startswith("fix:"))
    assert "delete it and run `imagesmith lock --bases`" in fix
    for text in ("schema = 2\n[bases]\n", "[bases]\n"):
        (root / "locks" / "bases.toml").write_text(text)
        result = run_cli("lock", "--bases")
        fix = next(line for line in result.stderr.splitlines() if line.strip().startswith("fix:"))
        assert (
            fix.strip()
            != "fix: "
            + "run `imagesmith lock --bases` where the base's registry (or its mirror) is reachable"
        )


@pytest.mark.parametrize("kind", ["dangling symlink", "folder", "fifo"])
def test_a_base_lock_that_is_no_regular_file_is_an_error_not_no_lock(tmp_path: Path, kind: str) -> None:
    """Before: `is_file()` was False, so read_bases answered "no lock" and every base silently went by its
    moving name again (a bases.toml symlinked to a checkout that is not there, say). A FIFO is never
    opened."""
    import os

    path = tmp_path / "bases.toml"
    if kind == "dangling symlink":
        path.symlink_to(tmp_path / "elsewhere" / "bases.toml")
    elif kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)
    with pytest.raises(BaseLockError) as err:
        read_bases(tmp_path, "locks/bases.toml")
    assert err.value.message.startswith("locks/bases.toml: ")
    assert "restore it from git" in (err.value.hint or "")
    assert read_bases(tmp_path / "none") is None  # no file at all: no lock, as before


def test_upstream_and_escrow_both_unreachable_is_one_error_naming_both_and_the_fix(tmp_path: Path) -> None:
    """Before: "…; escrow registry esc failed too (…); escrow registry esc (…) holds no proj/bases/…@sha256:…"
    — a copy it could not ask about was said to be missing, and the fix sent the user to `lock --bases`,
    which needs the same registries."""
    cell = _pinned_cell(tmp_path)
    sources = BaseSources(
        CONFIG,
        escrow=ESCROW,
        client_for=lambda r: _Reg({}, down=True),  # type: ignore[arg-type,return-value]
    )
    with pytest.raises(BuildError) as err:
        sources.ref(cell, "debian:bookworm")
    msg, hint = err.value.message, err.value.hint or ""
    assert "127.0.0.1:5000 is unreachable" in msg  # upstream (through the mirror)
    assert "escrow registry esc (127.0.0.1:5000)" in msg
    assert "is unreachable too" in msg
    assert "holds no" not in msg
    assert "lock --bases" not in hint
    assert "rerun the build" in hint
    assert err.value.exit_code == 5


def test_lock_bases_over_every_matrix_says_which_lines_no_matrix_names(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a line for a base no matrix names any more (renamed, or spelled another way:
    docker.io/library/debian:bookworm beside debian:bookworm) stayed in bases.toml unsaid. It is kept (a
    matrix may come back), and named."""
    root = _smoke_project(tmp_path)
    write_bases(
        root / "locks",
        [
            BaseEntry(name="debian:bookworm", origin="local"),
            BaseEntry(name="alpine:3.20", digest=A, registry="m", read="2026-12-01"),
        ],
    )
    monkeypatch.chdir(root)
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "none.toml"))
    result = run_cli("lock", "--bases", "--matrix", "smoke")  # one matrix: the others may name it
    assert result.exit_code == 0, result.stderr
    assert "unused" not in result.stdout
    result = run_cli("lock", "--bases")
    assert result.exit_code == 0, result.stderr
    assert "unused  alpine:3.20 (no matrix of the project names it: kept" in result.stdout
    lock = read_bases(root / "locks")
    assert lock is not None
    assert set(lock.entries) == {"debian:bookworm", "alpine:3.20"}
