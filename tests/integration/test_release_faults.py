"""``imagesmith release`` across three real registries, one behind the fault proxy (tests/faultproxy.py)
failing for good half-way: nothing is half-published (no release tag in one registry while another lacks the
image, no index listing the cell), the error names the registry, and a rerun after the fault heals finishes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith.index import load_index
from imagesmith.refs import Registry
from imagesmith.registry import RegistryClient
from imagesmith.release import collect_reports, release_cells
from tests.faultproxy import Action, FaultProxy, Request, fault_proxy
from tests.integration.test_release import TRUSTED, cell, push_image, smoke_labels, write_report
from tests.localinfra import TempRegistry, temp_registry

pytestmark = pytest.mark.registry


@pytest.fixture
def repo() -> str:
    return f"imagesmith-test/relfault-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def three(tmp_path: Path) -> Iterator[tuple[TempRegistry, TempRegistry, TempRegistry]]:
    roots = [tmp_path / n for n in ("r1", "r2", "r3")]
    for r in roots:
        r.mkdir()
    with temp_registry(roots[0]) as a, temp_registry(roots[1]) as b, temp_registry(roots[2]) as c:
        yield a, b, c


def _setup(
    regs: tuple[TempRegistry, TempRegistry, TempRegistry], proxy: FaultProxy, repo: str
) -> tuple[tuple[Registry, ...], Callable[[Registry], Any]]:
    """Targets r1, r2 (direct) and r3 (through *proxy*), and the client factory release gets."""
    tgts = (
        Registry(name="r1", kind="generic", host=regs[0].addr, repository=repo, insecure=True),
        Registry(name="r2", kind="generic", host=regs[1].addr, repository=repo, insecure=True),
        Registry(name="r3", kind="generic", host=proxy.addr, repository=repo, insecure=True),
    )

    def make(t: Registry) -> RegistryClient:
        return RegistryClient(t.host, name=t.name, insecure=True, attempts=3, backoff=0.02, deadline=20.0)

    return tgts, make


def _candidate(
    regs: tuple[TempRegistry, TempRegistry, TempRegistry], repo: str, content: str, tmp_path: Path
) -> str:
    """Candidate *content* pushed to all three registries (as build --push leaves it), its signed report."""
    digests = {push_image(r.client(), repo, "a-candidate", content) for r in regs}
    (digest,) = digests
    write_report(tmp_path / f"rep-{content}", f"{regs[0].addr}/{repo}@{digest}", "passed")
    return digest


def _release(tgts: tuple[Registry, ...], make: Callable[[Registry], Any], tmp_path: Path) -> Any:
    return release_cells(
        [cell("a", tgts)],
        matrix="t",
        reports=collect_reports([tmp_path], TRUSTED),
        index_file=tmp_path / "index.json",
        client_for=make,
        trusted=TRUSTED,
    )


def _tag(reg: TempRegistry, repo: str) -> str | None:
    return reg.client().manifest_digest(repo, "a")


def test_one_registry_of_three_failing_for_good_mid_copy_tags_none_and_a_rerun_converges(
    three: tuple[TempRegistry, TempRegistry, TempRegistry], repo: str, tmp_path: Path
) -> None:
    digest = _candidate(three, repo, "one", tmp_path / "reports")
    broken = True

    def manifest_puts_fail(req: Request) -> Action | None:  # r3 takes blobs, then refuses every manifest
        return (
            Action("status", status=500)
            if broken and req.kind == "manifest" and req.method == "PUT"
            else None
        )

    with fault_proxy(three[2].addr, rules=[manifest_puts_fail]) as proxy:
        tgts, make = _setup(three, proxy, repo)
        out = _release(tgts, make, tmp_path / "reports")
        res = out.cells[0]
        assert res.status == "failed"
        text = " ".join(res.reasons)
        assert f"promotion to r3 failed: registry r3 ({proxy.addr})" in text
        assert "HTTP 500" in text
        assert "no release tag was moved" in text
        assert "rerun" in text
        # nothing half-published: neither healthy registry carries the release tag, no index lists the cell
        assert _tag(three[0], repo) is None
        assert _tag(three[1], repo) is None
        assert three[2].client().manifest_digest(repo, "a") is None
        assert not (tmp_path / "reports" / "index.json").exists()
        assert out.index_published == []

        broken = False  # the fault heals: the same command finishes the job
        out = _release(tgts, make, tmp_path / "reports")
        assert out.cells[0].status == "promoted", out.cells[0].reasons
        assert _tag(three[0], repo) == _tag(three[1], repo) == digest
        assert three[2].client().manifest_digest(repo, "a") == digest
        entry = load_index(tmp_path / "reports" / "index.json").images[0]
        assert sorted(c.name for c in entry.registries) == ["r1", "r2", "r3"]


def test_a_tag_refused_by_one_registry_is_rolled_back_in_the_others(
    three: tuple[TempRegistry, TempRegistry, TempRegistry], repo: str, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    old = _candidate(three, repo, "old", reports)
    broken = False

    def tag_put_fails(req: Request) -> Action | None:  # the release tag alone is refused, for good
        bad = broken and req.method == "PUT" and req.path.endswith("/manifests/a")
        return Action("status", status=503) if bad else None

    with fault_proxy(three[2].addr, rules=[tag_put_fails]) as proxy:
        tgts, make = _setup(three, proxy, repo)
        assert _release(tgts, make, reports).cells[0].status == "promoted"
        assert {_tag(r, repo) for r in three} == {old}

        new = _candidate(three, repo, "new", reports)
        broken = True
        out = _release(tgts, make, reports)
        res = out.cells[0]
        assert res.status == "failed"
        text = " ".join(res.reasons)
        assert f"tagging {proxy.addr}/{repo}:a in r3 failed" in text
        assert "rolled back" in text
        # r1 and r2 had moved to the new digest: put back, so every registry still serves the old release
        assert {_tag(r, repo) for r in three} == {old}
        index = json.loads((reports / "index.json").read_text())
        assert [i["digest"] for i in index["images"]] == [old]

        broken = False
        out = _release(tgts, make, reports)
        assert out.cells[0].status == "promoted", out.cells[0].reasons
        assert {_tag(r, repo) for r in three} == {new}
        assert load_index(reports / "index.json").images[0].digest == new


def test_a_registry_that_takes_the_tag_then_forgets_it_fails_the_cell_and_the_others_roll_back(
    three: tuple[TempRegistry, TempRegistry, TempRegistry], repo: str, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    old = _candidate(three, repo, "old", reports)
    forgetful = False

    def forgets_tag(req: Request) -> Action | None:  # PUT accepted, the tag then answers manifest unknown
        if forgetful and req.method in ("GET", "HEAD") and req.path.endswith("/manifests/a"):
            body = b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}'
            return Action("status", status=404, body=body)
        return None

    with fault_proxy(three[2].addr, rules=[forgets_tag]) as proxy:
        tgts, make = _setup(three, proxy, repo)
        assert _release(tgts, make, reports).cells[0].status == "promoted"
        _candidate(three, repo, "new", reports)
        forgetful = True
        out = _release(tgts, make, reports)
        res = out.cells[0]
        assert res.status == "failed"
        assert f"r3: {proxy.addr}/{repo}:a resolves to None" in " ".join(res.reasons)
        # manifest unknown is an answer, not a fault: asked once per read, never retried
        assert proxy.count("HEAD", "manifest", "status") <= 4
        assert _tag(three[0], repo) == _tag(three[1], repo) == old


def test_an_index_refused_by_one_registry_moves_no_registrys_index(
    three: tuple[TempRegistry, TempRegistry, TempRegistry], repo: str, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    _candidate(three, repo, "old", reports)
    broken = False

    def index_put_fails(req: Request) -> Action | None:
        bad = broken and req.method == "PUT" and req.path.endswith("/manifests/release-index")
        return Action("status", status=500) if bad else None

    with fault_proxy(three[2].addr, rules=[index_put_fails]) as proxy:
        tgts, make = _setup(three, proxy, repo)
        assert _release(tgts, make, reports).cells[0].status == "promoted"
        published = {r.client().manifest_digest(repo, "release-index") for r in three}
        assert len(published) == 1
        assert None not in published

        new = _candidate(three, repo, "new", reports)
        broken = True
        out = _release(tgts, make, reports)
        assert out.cells[0].status == "promoted"  # the cell is released; its index is not published
        (index_failure,) = [c for c in out.cells if c.cell == "(index)"]
        text = " ".join(index_failure.reasons)
        assert "publishing the index to r3 failed" in text
        assert "put back" in text
        assert out.index_published == []
        # pick reads the same index from every registry: the one before this run
        assert {r.client().manifest_digest(repo, "release-index") for r in three} == published

        broken = False
        out = _release(tgts, make, reports)
        assert [c.status for c in out.cells] == ["up-to-date"]
        after = {r.client().manifest_digest(repo, "release-index") for r in three}
        assert len(after) == 1
        assert after != published
        assert load_index(reports / "index.json").images[0].digest == new


def test_cli_release_with_one_registry_failing_exits_8_naming_it_and_tags_none(
    three: tuple[TempRegistry, TempRegistry, TempRegistry],
    repo: str,
    tmp_path: Path,
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command a user runs: three registries of a copy of the smoke matrix, the third refusing every
    manifest (HTTP 500) until it heals: exit 8 naming the registry and the fix, no traceback, no tag, no
    index; then the same command finishes."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from tests.integration.test_release import KEY
    from tests.repo import PROJECT

    ns, name = repo.split("/")
    broken = True

    def manifest_puts_fail(req: Request) -> Action | None:
        return (
            Action("status", status=500)
            if broken and req.kind == "manifest" and req.method == "PUT"
            else None
        )

    with fault_proxy(three[2].addr, rules=[manifest_puts_fail]) as proxy:
        matrix = tmp_path / "smoke.toml"
        matrix.write_text(
            (PROJECT.matrices_dir / "smoke.toml")
            .read_text()
            .replace('registries = ["local-plain", "local-tls"]', 'registries = ["r1", "r2", "r3"]')
        )
        registries = tmp_path / "registries.toml"
        registries.write_text(
            "schema = 1\n"
            + "".join(
                f'[registries.{n}]\nhost = "{h}"\nnamespace = "{ns}"\nrepository = "{name}"\n'
                "insecure = true\n"
                for n, h in (("r1", three[0].addr), ("r2", three[1].addr), ("r3", proxy.addr))
            )
        )
        monkeypatch.delenv("IMAGESMITH_SIGNING_KEY", raising=False)
        monkeypatch.setenv("IMAGESMITH_REGISTRY_ATTEMPTS", "2")
        monkeypatch.setenv("IMAGESMITH_REGISTRY_DEADLINE", "10")
        cid = build_plan(load_matrix(matrix, registries_file=registries)).cells[0].id
        labels = smoke_labels(matrix, registries)
        (digest,) = {push_image(r.client(), repo, f"{cid}-candidate", "cli", labels=labels) for r in three}
        write_report(tmp_path / "reports" / cid, f"{three[0].addr}/{repo}@{digest}", "passed")
        pub = tmp_path / "validation.pub"
        pub.write_bytes(KEY.public.pem)
        args = [
            "release",
            "--matrix",
            str(matrix),
            "--registries",
            str(registries),
            "--index-file",
            str(tmp_path / "index.json"),
            "--trusted-key",
            str(pub),
            "--reports",
            str(tmp_path / "reports"),
        ]
        res = run_cli(*args)
        assert res.exit_code == 8, res.stderr
        assert "Traceback" not in res.stderr
        assert f"promotion to r3 failed: registry r3 ({proxy.addr})" in res.stderr
        assert "no release tag was moved" in res.stderr
        assert "fix: a failed promotion converges when the command is rerun" in res.stderr
        assert [_tag_of(r, repo, cid) for r in three] == [None, None, None]
        assert not (tmp_path / "index.json").exists()

        broken = False
        res = run_cli(*args)
        assert res.exit_code == 0, res.stderr
        assert f"{cid}: promoted {digest}" in res.stdout
        assert [_tag_of(r, repo, cid) for r in three] == [digest] * 3
        assert sorted(c.name for c in load_index(tmp_path / "index.json").images[0].registries) == [
            "r1",
            "r2",
            "r3",
        ]


def _tag_of(reg: TempRegistry, repo: str, tag: str) -> str | None:
    return reg.client().manifest_digest(repo, tag)


def test_stored_evidence_that_cannot_be_read_is_a_failure_to_rerun_not_a_refusal(
    three: tuple[TempRegistry, TempRegistry, TempRegistry], repo: str, tmp_path: Path
) -> None:
    """A fresh runner (no --reports) finishes an interrupted promotion from the attestations the first run
    stored; when the registries cannot be read, the cell fails naming them (rerun), it is not refused as if
    it had never been validated."""
    reports = tmp_path / "reports"
    digest = _candidate(three, repo, "stored", reports)
    tag_fails, att_fails = True, False

    def faults(req: Request) -> Action | None:
        if tag_fails and req.method == "PUT" and req.path.endswith("/manifests/a"):
            return Action("status", status=500)
        if att_fails and req.kind == "manifest" and req.path.endswith(".att"):
            return Action("status", status=503)
        return None

    with fault_proxy(three[2].addr, rules=[faults]) as proxy:
        tgts, make = _setup(three, proxy, repo)
        assert _release(tgts, make, reports).cells[0].status == "failed"  # stored evidence, no tag
        tag_fails, att_fails = False, True
        only_r3 = (tgts[2],)  # the cell as a fresh runner sees it in r3 alone, which cannot be read now
        out = release_cells(
            [cell("a", only_r3)],
            matrix="t",
            reports=[],
            index_file=tmp_path / "fresh.json",
            client_for=make,
            trusted=TRUSTED,
        )
        res = out.cells[0]
        assert res.status == "failed", res.reasons
        text = " ".join(res.reasons)
        assert f"the attestations stored in r3 ({proxy.addr}/{repo}:sha256-" in text
        assert "could not be read" in text
        assert "HTTP 503" in text
        assert "no signed validation attestation" not in text  # before: told to validate again
        att_fails = False
        out = release_cells(
            [cell("a", only_r3)],
            matrix="t",
            reports=[],
            index_file=tmp_path / "fresh.json",
            client_for=make,
            trusted=TRUSTED,
        )
        assert out.cells[0].status == "promoted", out.cells[0].reasons
        assert three[2].client().manifest_digest(repo, "a") == digest


def test_cli_candidates_when_a_registry_cannot_be_asked_says_so_not_build_first(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.localinfra import free_port
    from tests.repo import PROJECT

    down = f"127.0.0.1:{free_port()}"
    matrix = tmp_path / "smoke.toml"
    matrix.write_text(
        (PROJECT.matrices_dir / "smoke.toml")
        .read_text()
        .replace('registries = ["local-plain", "local-tls"]', 'registries = ["gone"]')
    )
    registries = tmp_path / "registries.toml"
    registries.write_text(
        f'schema = 1\n[registries.gone]\nhost = "{down}"\nnamespace = "a"\nrepository = "b"\n'
        "insecure = true\n"
    )
    monkeypatch.setenv("IMAGESMITH_REGISTRY_ATTEMPTS", "1")
    res = run_cli("candidates", "--matrix", str(matrix), "--registries", str(registries), "--pinned")
    assert res.exit_code == 9, res.stderr
    assert f"registry gone ({down}): unreachable or failing" in res.stderr
    assert "build" not in res.stderr.split("fix:", 1)[1]  # before: "run imagesmith build … --push first"
    assert "Traceback" not in res.stderr


def test_a_release_killed_after_moving_the_tag_converges_on_a_plain_rerun_despite_a_newer_candidate(
    repo: str, tmp_path: Path
) -> None:
    """Issue 37, the real command: `imagesmith release` is SIGKILLed while it reads back the release tag it
    just moved (the registry behind the fault proxy stalls that read), so no index was written; `build`
    then pushes a newer candidate, not validated. The same plain `release` command records the promoted
    digest (from the attestation the killed run stored), says the newer candidate is not validated (exit
    8), publishes the index; a third run changes no byte of it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from tests.integration.test_release import KEY
    from tests.repo import PROJECT

    ns, name = repo.split("/")
    state = {"tagged": False, "stall": True}

    def stall_after_the_tag(req: Request) -> Action | None:
        if req.kind == "manifest" and req.method == "PUT" and req.path.endswith(f"/manifests/{cid}"):
            state["tagged"] = True
            return None
        return Action("stall", seconds=15) if state["tagged"] and state["stall"] else None

    with temp_registry(tmp_path / "reg") as reg, fault_proxy(reg.addr, max_seconds=240) as proxy:
        matrix = tmp_path / "smoke.toml"
        matrix.write_text(
            (PROJECT.matrices_dir / "smoke.toml")
            .read_text()
            .replace('registries = ["local-plain", "local-tls"]', 'registries = ["r1"]')
        )
        registries = tmp_path / "registries.toml"
        registries.write_text(
            f'schema = 1\n[registries.r1]\nhost = "{proxy.addr}"\nnamespace = "{ns}"\n'
            f'repository = "{name}"\ninsecure = true\n'
        )
        cid = build_plan(load_matrix(matrix, registries_file=registries)).cells[0].id
        proxy.rules.append(stall_after_the_tag)
        labels = smoke_labels(matrix, registries)
        d1 = push_image(reg.client(), repo, f"{cid}-candidate", "first", labels=labels)
        write_report(tmp_path / "reports" / cid, f"{reg.addr}/{repo}@{d1}", "passed")
        pub = tmp_path / "validation.pub"
        pub.write_bytes(KEY.public.pem)
        index = tmp_path / "index.json"
        args = [
            str(Path(sys.executable).with_name("imagesmith")),
            "release",
            "--matrix",
            str(matrix),
            "--registries",
            str(registries),
            "--index-file",
            str(index),
            "--trusted-key",
            str(pub),
            "--reports",
            str(tmp_path / "reports"),
        ]
        env = {
            **os.environ,
            "IMAGESMITH_CACHE": str(tmp_path / "cache"),
            "IMAGESMITH_REGISTRY_ATTEMPTS": "2",
            "IMAGESMITH_REGISTRY_DEADLINE": "30",
        }
        env.pop("IMAGESMITH_SIGNING_KEY", None)
        killed = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            until = time.monotonic() + 120
            while not proxy.count("GET", "manifest", action="stall") and killed.poll() is None:
                assert time.monotonic() < until, "the release never reached its tag read-back"
                time.sleep(0.05)
        finally:
            killed.send_signal(signal.SIGKILL)
            killed.wait(timeout=30)
        state["stall"] = False
        assert reg.client().manifest_digest(repo, cid) == d1  # the tag moved
        assert not index.exists()  # and the run died before its index
        d2 = push_image(reg.client(), repo, f"{cid}-candidate", "second", labels=labels)

        def rerun() -> subprocess.CompletedProcess[str]:
            return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)

        done = rerun()
        assert done.returncode == 8, done.stderr
        assert f"the newer candidate {d2} is not validated: {cid} stays on {d1}" in done.stderr
        assert "Traceback" not in done.stderr
        (entry,) = load_index(index).images
        assert (entry.tag, entry.digest) == (cid, d1)
        assert reg.client().manifest_digest(repo, cid) == d1
        before = index.read_bytes()
        again = rerun()
        assert again.returncode == 8, again.stderr
        assert index.read_bytes() == before
