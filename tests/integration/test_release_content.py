"""Issue 25, the release side, on the REAL local registries: what an attacker with push rights to one
registry (or a careless validation runner) can do to a release, and what release does about it.

- a carried index entry rewritten in one registry is rebuilt from its image's labels and its signed evidence,
  and the summary names each correction;
- a signed passing report that records no GPU host, or whose checks do not bear its verdict out, is refused
  naming the report (and such evidence stored by an older release poisons nothing);
- a manifest past 4 MiB is one error naming the registry and the reference, not a 200 MiB read;
- a blob the destination already holds, damaged but of the right size, is named (registry, repository,
  digest) and nothing is tagged; once repaired, the rerun releases.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import compat
from imagesmith.attestation import ATTESTATION_FILE, attach_attestations
from imagesmith.commands.output import release_text
from imagesmith.errors import RegistryError
from imagesmith.index import (
    ReleaseIndex,
    ValidatedOn,
    dump_index,
    load_index,
    parse_index,
    read_index_artifact,
)
from imagesmith.refs import Registry
from imagesmith.registry import RegistryClient, copy_manifest
from imagesmith.release import VerifiedBlobs, collect_reports, publish_index, release_cells
from imagesmith.tags import INDEX_ARTIFACT_TAG
from tests.faultproxy import Action, Request, fault_proxy
from tests.integration.test_release import (
    TRUSTED,
    cell,
    clients_for,
    push_image,
    targets,
    write_report,
)
from tests.localhttp import cli_traceback
from tests.localinfra import LocalRegistries, local_registries, temp_registry

pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture
def repo() -> str:
    return f"imagesmith-test/content-{uuid.uuid4().hex[:10]}"


def _release(
    regs: LocalRegistries, repo: str, tmp_path: Path, cids: list[str], reports: list[Path], **kw: Any
) -> Any:
    return release_cells(
        [cell(cid, kw.pop("targets", None) or targets(regs, repo)) for cid in cids],
        matrix="t",
        reports=collect_reports(reports, TRUSTED),
        index_file=kw.pop("index_file", tmp_path / "index.json"),
        client_for=kw.pop("client_for", None) or clients_for(regs),
        trusted=TRUSTED,
        verified=VerifiedBlobs(tmp_path / "verified-blobs.json"),
        **kw,
    )


def _candidate(regs: LocalRegistries, repo: str, cid: str) -> str:
    """A candidate for *cid* (unique content) in both registries."""
    content = f"{cid} {repo} {uuid.uuid4()}"
    digest = push_image(regs.plain_client(), repo, f"{cid}-candidate", content)
    assert push_image(regs.auth_client(), repo, f"{cid}-candidate", content) == digest
    return digest


def _written_and_published(regs: LocalRegistries, repo: str, index_file: Path) -> list[ReleaseIndex]:
    """The index release wrote to *index_file* and the copies it published in both registries."""
    return [
        load_index(index_file),
        *(
            parse_index(read_index_artifact(c, repo), source="x")
            for c in (regs.plain_client(), regs.auth_client())
        ),
    ]


def _tags(regs: LocalRegistries, repo: str, tag: str) -> list[str | None]:
    return [c.manifest_digest(repo, tag) for c in (regs.plain_client(), regs.auth_client())]


def test_a_rewritten_carried_entry_is_rebuilt_from_its_labels_and_evidence_and_named(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    digest = _candidate(regs, repo, "a")
    write_report(tmp_path / "r" / "a", f"{regs.plain}/{repo}@{digest}", "passed")
    _release(regs, repo, tmp_path, ["a"], [tmp_path / "r" / "a"]).raise_for_refusals()
    (honest,) = load_index(tmp_path / "index.json").images
    # the attacker rewrites the entry in one registry's published index: what pick chooses by
    forged = dataclasses.replace(
        honest,
        torch="2.99.0",
        cuda="12.1",
        min_driver=compat.MinDriver(
            full=compat.parse_driver("450.80.02"), minor_version=compat.parse_driver("450.80.02")
        ),
        arch=("5.0",),
        validated_on=(
            ValidatedOn(
                gpu="NVIDIA B200",
                count=8,
                driver="570.86.15",
                date="2026-11-30T00:00:00Z",
                report_digest="sha256:" + "ab" * 32,
            ),
        ),
    )
    index = parse_index(read_index_artifact(regs.plain_client(), repo), source="plain")
    publish_index(
        regs.plain_client(), repo, dump_index(dataclasses.replace(index, images=(forged,))).encode()
    )

    digest_b = _candidate(regs, repo, "b")
    write_report(tmp_path / "r" / "b", f"{regs.plain}/{repo}@{digest_b}", "passed")
    fresh = tmp_path / "fresh" / "index.json"
    out = _release(regs, repo, tmp_path, ["b"], [tmp_path / "r" / "b"], index_file=fresh, extend_from="plain")
    out.raise_for_refusals()
    corrected = "\n".join(out.corrections)
    for line in (
        "entry a: torch: 2.99.0 → 2.11.0",
        "entry a: cuda: 12.1 → 13.0",
        "entry a: min_driver.full: 450.80.02 → 580.65.06",
        "entry a: min_driver.minor: 450.80.02 → 580.65.06",
        "entry a: arch: 5.0 → 7.5,8.0,8.6,9.0,10.0,12.0",
        "entry a: validated_on: 8x NVIDIA B200 driver 570.86.15",
    ):
        assert line in corrected, corrected
    assert "→ 2x NVIDIA H200 driver 580.159.04" in corrected
    assert "corrected: entry a: torch: 2.99.0 → 2.11.0" in release_text(out)
    # what is written and published everywhere is the honest entry again
    for published in _written_and_published(regs, repo, fresh):
        a = published.by_tag("a")
        assert a is not None
        assert (a.torch, a.cuda, a.arch, a.min_driver) == (
            honest.torch,
            honest.cuda,
            honest.arch,
            honest.min_driver,
        )
        assert [(v.gpu, v.count) for v in a.validated_on] == [("NVIDIA H200", 2)]


def test_a_passing_report_without_gpus_is_refused_and_stored_such_evidence_poisons_nothing(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    digest = _candidate(regs, repo, "a")
    write_report(tmp_path / "bad", f"{regs.plain}/{repo}@{digest}", "passed", gpus=0)
    out = _release(regs, repo, tmp_path, ["a"], [tmp_path / "bad"])
    (res,) = out.cells
    assert res.status == "refused"
    text = " ".join(res.reasons)
    assert f"{tmp_path / 'bad' / ATTESTATION_FILE}: a passing report that records no GPU host" in text
    assert "imagesmith validate" in text
    assert _tags(regs, repo, "a") == [None, None]
    assert not (tmp_path / "index.json").exists()

    # an older release stored it (what happened before this check): it is named, never counted
    bad_envelope = (tmp_path / "bad" / ATTESTATION_FILE).read_bytes()
    attach_attestations(regs.plain_client(), repo, digest, [bad_envelope])
    out = _release(regs, repo, tmp_path, ["a"], [])
    (res,) = out.cells
    assert res.status == "refused"
    assert "records no GPU host" in " ".join(res.reasons)
    assert not (tmp_path / "index.json").exists()

    # the correct rerun: a report of a real host releases; the stored bad one stays out of the index
    write_report(tmp_path / "good", f"{regs.plain}/{repo}@{digest}", "passed")
    _release(regs, repo, tmp_path, ["a"], [tmp_path / "good"]).raise_for_refusals()
    assert _tags(regs, repo, "a") == [digest, digest]
    (entry,) = load_index(tmp_path / "index.json").images
    assert [(v.gpu, v.count) for v in entry.validated_on] == [("NVIDIA H200", 2)]
    # and every later release still writes the index (the stored evidence came back before, and broke it)
    digest_b = _candidate(regs, repo, "b")
    write_report(tmp_path / "b", f"{regs.plain}/{repo}@{digest_b}", "passed")
    _release(regs, repo, tmp_path, ["b"], [tmp_path / "b"]).raise_for_refusals()
    assert [i.tag for i in load_index(tmp_path / "index.json").images] == ["a", "b"]


def test_a_passed_verdict_with_a_failing_check_is_refused_naming_the_report(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    digest = _candidate(regs, repo, "a")
    folder = tmp_path / "lying"
    write_report(folder, f"{regs.plain}/{repo}@{digest}", "passed", failed="test_nccl_allreduce")
    (res,) = _release(regs, repo, tmp_path, ["a"], [folder]).cells
    assert res.status == "refused"
    text = " ".join(res.reasons)
    assert f"{folder / ATTESTATION_FILE}: its verdict says passed, its checks say failed" in text
    assert "test_nccl_allreduce" in text
    assert _tags(regs, repo, "a") == [None, None]
    write_report(tmp_path / "honest", f"{regs.plain}/{repo}@{digest}", "passed")
    _release(regs, repo, tmp_path, ["a"], [tmp_path / "honest"]).raise_for_refusals()
    assert _tags(regs, repo, "a") == [digest, digest]


def test_a_manifest_past_4_mib_is_one_error_naming_the_source(
    regs: LocalRegistries,
    repo: str,
    tmp_path: Path,
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from imagesmith import signing

    push_image(regs.plain_client(), repo, INDEX_ARTIFACT_TAG, "not really an index")
    pub = tmp_path / "index.pub"  # a verify key, as a renter has one: the manifest is read before any check
    pub.write_bytes(signing.generate_key().public.pem)
    monkeypatch.setenv("IMAGESMITH_INDEX_KEY", str(pub))
    huge = json.dumps({"schemaVersion": 2, "annotations": {"x": "a" * (6 << 20)}}).encode()

    def swell(req: Request) -> Action | None:
        if req.kind == "manifest" and req.method == "GET":
            return Action("rewrite", rewrite=lambda _: huge, headers=(("Docker-Content-Digest", ""),))
        return None

    with fault_proxy(regs.plain, rules=[swell]) as proxy:
        client = RegistryClient(proxy.addr, name="swollen", insecure=True, credentials=None, attempts=1)
        with pytest.raises(RegistryError) as info:
            client.get_manifest(repo, INDEX_ARTIFACT_TAG)
        text = str(info.value)
        for part in (f"registry swollen ({proxy.addr})", f"{repo}:{INDEX_ARTIFACT_TAG}", "4 MiB", "fix:"):
            assert part in text, text
        assert (info.value.registry, info.value.fault) == ("swollen", "too large")
        res = run_cli("index", f"oci+http://{proxy.addr}/{repo}:{INDEX_ARTIFACT_TAG}", "--insecure")
        assert res.exit_code == RegistryError.exit_code, res.stderr
        lines = [x.strip() for x in res.stderr.splitlines() if x.strip().startswith(("error:", "fix:"))]
        assert [x.split(":", 1)[0] for x in lines] == ["error", "fix"], res.stderr
        for part in (proxy.addr, repo, "4 MiB"):
            assert part in lines[0]
        assert cli_traceback(res.stderr) is None, res.stderr  # no traceback of the CLI's own
        # the client hung up on the oversized answer: the proxy recorded it (it prints nothing), nothing else
        assert proxy.unexpected() == [], proxy.unexpected()


def test_a_same_size_damaged_blob_in_the_destination_is_named_and_nothing_is_tagged(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    from tests.integration.test_registry_faults import blob_file

    plain = regs.plain_client()
    digest = push_image(plain, repo, "a-candidate", f"damaged {repo} {os.urandom(8).hex()}")
    layer = plain.get_manifest(repo, digest).blobs()[1][0]
    with temp_registry(tmp_path / "second") as second:
        dst = second.client()
        copy_manifest(plain, repo, digest, dst, repo)  # the destination already holds the blobs ...
        dst.delete_manifest(repo, digest)
        path = blob_file(second, layer)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # ... one of them damaged on disk, same size: HEAD cannot tell
        path.write_bytes(bytes(data))
        tgts = (
            Registry(name="plain", kind="generic", host=regs.plain, repository=repo, insecure=True),
            Registry(name="second", kind="generic", host=second.addr, repository=repo, insecure=True),
        )
        local = clients_for(regs)

        def make(t: Registry) -> Any:
            if t.name == "second":
                return RegistryClient(second.addr, name="second", insecure=True, credentials=None, attempts=2)
            return local(t)

        write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed")
        out = _release(regs, repo, tmp_path, ["a"], [tmp_path / "r"], targets=tgts, client_for=make)
        (res,) = out.cells
        assert res.status == "failed"
        text = " ".join(res.reasons)
        for part in (f"destination registry second ({second.addr})", f"blob {layer} in {repo} is corrupt"):
            assert part in text, text
        assert "no release tag was moved" in text
        assert plain.manifest_digest(repo, "a") is None
        assert dst.manifest_digest(repo, "a") is None
        assert not (tmp_path / "index.json").exists()

        path.unlink()  # the operator removes the damaged file (the registry's garbage collection)
        _release(
            regs, repo, tmp_path, ["a"], [tmp_path / "r"], targets=tgts, client_for=make
        ).raise_for_refusals()
        assert plain.manifest_digest(repo, "a") == dst.manifest_digest(repo, "a") == digest
        # remembered: the rerun reads no blob again
        again = _release(regs, repo, tmp_path, ["a"], [tmp_path / "r"], targets=tgts, client_for=make)
        assert again.cells[0].status == "up-to-date", again.cells[0].steps


def test_an_index_file_rewritten_for_a_released_cell_is_corrected_on_its_rerun(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    from imagesmith.index import save_index

    digest = _candidate(regs, repo, "a")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed")
    _release(regs, repo, tmp_path, ["a"], [tmp_path / "r"]).raise_for_refusals()
    index = load_index(tmp_path / "index.json")
    (honest,) = index.images
    save_index(
        dataclasses.replace(index, images=(dataclasses.replace(honest, torch="2.99.0", python="3.13"),)),
        tmp_path / "index.json",
    )
    out = _release(regs, repo, tmp_path, ["a"], [tmp_path / "r"])
    out.raise_for_refusals()
    assert out.cells[0].status == "up-to-date"
    assert "entry a: torch: 2.99.0 → 2.11.0 (from its image config)" in out.corrections
    assert "entry a: python: 3.13 → 3.11 (from its image config)" in out.corrections
    (again,) = load_index(tmp_path / "index.json").images
    assert (again.torch, again.python, again.released) == ("2.11.0", "3.11", honest.released)


def test_the_nightlys_full_verify_counts_as_the_read_back(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    digest = _candidate(regs, repo, "a")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed")
    _release(regs, repo, tmp_path, ["a"], [tmp_path / "r"]).raise_for_refusals()
    blobs = [d for d, _ in regs.plain_client().get_manifest(repo, digest).blobs()]
    memory = VerifiedBlobs(tmp_path / "other-machine.json")  # a runner that never read them
    out = release_cells(
        [cell("a", targets(regs, repo))],
        matrix="t",
        reports=collect_reports([tmp_path / "r"], TRUSTED),
        index_file=tmp_path / "index.json",
        client_for=clients_for(regs),
        trusted=TRUSTED,
        verified=memory,
        verify="full",
    )
    out.raise_for_refusals()
    assert all(memory.has(host, d) for host in (regs.plain, regs.auth) for d in blobs)
    assert not out.index_changed


def test_a_same_size_damaged_blob_in_the_source_registry_is_named_and_nothing_is_tagged(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    from tests.integration.test_registry_faults import blob_file

    plain = regs.plain_client()
    with temp_registry(tmp_path / "first") as first_reg:
        first = RegistryClient(first_reg.addr, name="first", insecure=True, credentials=None, attempts=2)
        digest = push_image(first, repo, "a-candidate", f"source {repo} {os.urandom(8).hex()}")
        layer = first.get_manifest(repo, digest).blobs()[1][0]
        copy_manifest(first, repo, digest, plain, repo)  # the other registry already holds good blobs ...
        plain.delete_manifest(repo, digest)
        path = blob_file(first_reg, layer)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # ... and the source's copy is damaged, same size: nothing streams it
        path.write_bytes(bytes(data))
        tgts = (
            Registry(name="first", kind="generic", host=first_reg.addr, repository=repo, insecure=True),
            Registry(name="plain", kind="generic", host=regs.plain, repository=repo, insecure=True),
        )
        local = clients_for(regs)

        def make(t: Registry) -> Any:
            if t.name == "first":
                return RegistryClient(
                    first_reg.addr, name="first", insecure=True, credentials=None, attempts=2
                )
            return local(t)

        write_report(tmp_path / "r", f"{first_reg.addr}/{repo}@{digest}", "passed")
        out = _release(regs, repo, tmp_path, ["a"], [tmp_path / "r"], targets=tgts, client_for=make)
        (res,) = out.cells
        assert res.status == "failed"
        text = " ".join(res.reasons)
        assert f"source registry first ({first_reg.addr}): blob {layer} in {repo} is corrupt" in text, text
        assert "no release tag was moved" in text
        assert first.manifest_digest(repo, "a") is None
        assert plain.manifest_digest(repo, "a") is None
        assert not (tmp_path / "index.json").exists()


def test_a_carried_copy_whose_registry_kind_was_rewritten_takes_the_kind_of_the_registries_file(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    """Re-check: a copy's ``kind`` decides which registry pick sends a renter to (a platform's preferred and
    avoided kinds). main checked a carried copy's name, host and repository against the registries file, but
    kept the kind the (rewritten) registry index gave: the attacker's registry stayed "aliyun-acr" in the next
    signed index, and pick preferred it on the platforms that prefer ACR."""
    digest = _candidate(regs, repo, "a")
    write_report(tmp_path / "r" / "a", f"{regs.plain}/{repo}@{digest}", "passed")
    _release(regs, repo, tmp_path, ["a"], [tmp_path / "r" / "a"]).raise_for_refusals()
    index = parse_index(read_index_artifact(regs.plain_client(), repo), source="plain")
    (honest,) = index.images
    assert {c.name: c.kind for c in honest.registries} == {"plain": "generic", "tls": "generic"}
    forged = dataclasses.replace(
        honest,
        registries=tuple(
            dataclasses.replace(c, registry=dataclasses.replace(c.registry, kind="aliyun-acr"))
            if c.name == "plain"
            else c
            for c in honest.registries
        ),
    )
    publish_index(
        regs.plain_client(), repo, dump_index(dataclasses.replace(index, images=(forged,))).encode()
    )
    digest_b = _candidate(regs, repo, "b")
    write_report(tmp_path / "r" / "b", f"{regs.plain}/{repo}@{digest_b}", "passed")
    fresh = tmp_path / "fresh" / "index.json"
    out = _release(regs, repo, tmp_path, ["b"], [tmp_path / "r" / "b"], index_file=fresh, extend_from="plain")
    out.raise_for_refusals()
    corrections = "\n".join(out.corrections)
    assert "entry a: registries[plain].kind: aliyun-acr → generic" in corrections, out.corrections
    for published in _written_and_published(regs, repo, fresh):
        a = published.by_tag("a")
        assert a is not None
        assert {c.name: c.kind for c in a.registries} == {"plain": "generic", "tls": "generic"}


def test_a_release_says_as_data_which_release_tags_it_moves(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    """``CellResult.tag_moves``: what decides whether ``released`` is kept (issue 24 re-check: it was read
    from the words of the steps, ``step.startswith("tag ")``)."""
    digest = _candidate(regs, repo, "a")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed")
    dry = _release(regs, repo, tmp_path, ["a"], [tmp_path / "r"], dry_run=True)
    first = _release(regs, repo, tmp_path, ["a"], [tmp_path / "r"])
    first.raise_for_refusals()
    names = sorted(first.cells[0].registries)
    assert len(names) == 2
    assert sorted(dry.cells[0].tag_moves) == sorted(first.cells[0].tag_moves) == names
    assert _tags(regs, repo, "a") == [digest, digest]
    (entry,) = load_index(tmp_path / "index.json").images
    again = _release(regs, repo, tmp_path, ["a"], [tmp_path / "r"])
    assert again.cells[0].status == "up-to-date"
    assert again.cells[0].tag_moves == []
    (kept,) = load_index(tmp_path / "index.json").images
    assert kept.released == entry.released
