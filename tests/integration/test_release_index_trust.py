"""Issue 17: the index ``imagesmith release`` extends comes from the place the project names, and every entry
it carries over is re-verified against its tag before it is republished — on the REAL local registries.

Before: without the index file, release read the index of the first registry that had one and republished
its entries to every registry, so an entry planted in one registry spread to all of them.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError, ReleaseError
from imagesmith.index import ReleaseIndex, dump_index, load_index, parse_index, read_index_artifact
from imagesmith.release import collect_reports, publish_index, release_cells
from imagesmith.tags import INDEX_ARTIFACT_TAG
from tests.integration.test_release import (
    TRUSTED,
    cell,
    clients_for,
    push_image,
    smoke_labels,
    smoke_setup,
    targets,
    write_report,
)
from tests.localinfra import LocalRegistries, local_registries

pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture
def repo() -> str:
    return f"imagesmith-test/trust-{uuid.uuid4().hex[:10]}"


def _release(
    regs: LocalRegistries, repo: str, tmp_path: Path, cid: str, index_file: Path, **kw: object
) -> object:
    """Push a candidate for *cid*, a passing report for it, and release it to both registries."""
    digest = push_image(regs.plain_client(), repo, f"{cid}-candidate", f"{cid} {repo} {uuid.uuid4()}")
    write_report(tmp_path / "r" / cid, f"{regs.plain}/{repo}@{digest}", "passed")
    trusted = kw.pop("trusted", TRUSTED)
    return release_cells(
        [cell(cid, targets(regs, repo))],
        matrix="t",
        reports=collect_reports([tmp_path / "r" / cid], trusted),  # type: ignore[arg-type]
        index_file=index_file,
        client_for=clients_for(regs),
        trusted=trusted,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def _plant(regs: LocalRegistries, repo: str, index: ReleaseIndex) -> ReleaseIndex:
    """An index with an extra entry "evil" (the digest of a, a tag that was never released), published to the
    plain registry only: what an attacker with push rights to one registry can do."""
    (a,) = index.images
    evil = dataclasses.replace(
        a,
        tag="evil",
        cell="evil",
        registries=tuple(dataclasses.replace(c, tag="evil") for c in a.registries),
    )
    planted = dataclasses.replace(index, images=(a, evil))
    publish_index(regs.plain_client(), repo, dump_index(planted).encode())
    return planted


def test_a_registrys_index_is_never_read_without_being_named(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    first = tmp_path / "first.json"
    _release(regs, repo, tmp_path, "a", first).raise_for_refusals()  # type: ignore[attr-defined]
    _plant(regs, repo, load_index(first))
    missing = tmp_path / "elsewhere" / "index.json"
    with pytest.raises(ReleaseError) as err:
        _release(regs, repo, tmp_path, "b", missing)
    assert f"no release index at {missing}, but registry plain publishes" in err.value.message
    assert "--extend-from plain" in (err.value.hint or "")
    assert not missing.exists()
    # the TLS registry still publishes the index of the first release, without the planted entry
    tls = read_index_artifact(regs.auth_client(), repo, INDEX_ARTIFACT_TAG)
    assert [i.tag for i in parse_index(tls, source="tls").images] == ["a"]


def test_a_planted_entry_is_refused_when_its_registry_is_named(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    first = tmp_path / "first.json"
    _release(regs, repo, tmp_path, "a", first).raise_for_refusals()  # type: ignore[attr-defined]
    _plant(regs, repo, load_index(first))
    index_file = tmp_path / "new" / "index.json"
    out = _release(regs, repo, tmp_path, "b", index_file, extend_from="plain")
    refused = {c.cell: c for c in out.cells if c.status == "refused"}  # type: ignore[attr-defined]
    reasons = refused["evil"].reasons
    assert any(
        r.startswith("carried index entry evil, registry plain: ")
        and f"{regs.plain}/{repo}:evil resolves to nothing" in r
        for r in reasons
    )
    assert any(r.startswith("carried index entry evil, registry tls: ") for r in reasons)
    with pytest.raises(ReleaseError, match="evil: refused"):
        out.raise_for_refusals()  # type: ignore[attr-defined]
    index = load_index(index_file)
    assert [i.tag for i in index.images] == ["a", "b"]  # a re-verified in both registries, b released
    assert index.registries == tuple(sorted({regs.plain, regs.auth}))
    for client in (regs.plain_client(), regs.auth_client()):
        published = parse_index(read_index_artifact(client, repo, INDEX_ARTIFACT_TAG), source="x")
        assert "evil" not in [i.tag for i in published.images]


def test_a_carried_entry_whose_tag_moved_loses_that_copy(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    index_file = tmp_path / "index.json"
    _release(regs, repo, tmp_path, "a", index_file).raise_for_refusals()  # type: ignore[attr-defined]
    (a,) = load_index(index_file).images
    moved = push_image(regs.plain_client(), repo, "a", f"moved {repo}")  # behind the index's back
    out = _release(regs, repo, tmp_path, "b", index_file)
    (refusal,) = [c for c in out.cells if c.status == "refused"]  # type: ignore[attr-defined]
    assert refusal.cell == a.cell
    assert refusal.reasons == [
        f"carried index entry a, registry plain: {regs.plain}/{repo}:a resolves to {moved}, not the recorded "
        f"{a.digest}; that copy is dropped from the index"
    ]
    carried = load_index(index_file).by_tag("a")
    assert carried is not None
    assert [c.name for c in carried.registries] == ["tls"]


def test_extend_from_names_a_registry_of_the_release(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="--extend-from nowhere: not a registry of the cells released"):
        _release(regs, repo, tmp_path, "a", tmp_path / "i.json", extend_from="nowhere")
    with pytest.raises(ConfigError, match=f"{INDEX_ARTIFACT_TAG} does not exist"):
        _release(regs, repo, tmp_path, "a", tmp_path / "i.json", extend_from="tls")


def test_cli_refuses_then_extends_the_named_registrys_index(
    regs: LocalRegistries,
    repo: str,
    tmp_path: Path,
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real command on a copy of the smoke matrix whose registries are the local ones (own repository)."""
    matrix, registries, cid = smoke_setup(regs, repo, tmp_path, monkeypatch)
    digest = push_image(
        regs.plain_client(), repo, f"{cid}-candidate", f"cli {repo}", labels=smoke_labels(matrix, registries)
    )
    write_report(tmp_path / "reports" / cid, f"{regs.plain}/{repo}@{digest}", "passed")
    base = ["release", "--matrix", str(matrix), "--registries", str(registries)]
    (tmp_path / "validation.pub").write_bytes(TRUSTED[0].pem)
    base += ["--reports", str(tmp_path / "reports"), "--trusted-key", str(tmp_path / "validation.pub")]
    res = run_cli(*base, "--index-file", str(tmp_path / "first.json"))
    assert res.exit_code == 0, res.stderr

    missing = tmp_path / "fresh" / "index.json"
    res = run_cli(*base, "--index-file", str(missing))
    assert res.exit_code == ReleaseError.exit_code
    assert f"no release index at {missing}, but registry t-plain publishes" in res.stderr
    assert "--extend-from t-plain" in res.stderr
    assert not missing.exists()

    res = run_cli(*base, "--index-file", str(missing), "--extend-from", "t-plain")
    assert res.exit_code == 0, res.stderr
    index = load_index(missing)
    assert [i.tag for i in index.images] == [i.tag for i in load_index(tmp_path / "first.json").images]
    assert index.registries == tuple(sorted({regs.plain, regs.auth}))


def test_a_carried_entry_is_kept_only_while_its_attestation_verifies(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    """Both halves of issue 17 together: a carried entry whose tags still resolve, but whose stored
    attestation no longer verifies with the keys trusted today (a revoked key), loses both registry copies."""
    from imagesmith import signing

    index_file = tmp_path / "index.json"
    _release(regs, repo, tmp_path, "a", index_file).raise_for_refusals()  # type: ignore[attr-defined]
    (a,) = load_index(index_file).images
    # the old runners' key is revoked; b is validated with the new one
    new_key = signing.generate_key()
    digest = push_image(regs.plain_client(), repo, "b-candidate", f"b {repo} {uuid.uuid4()}")
    write_report(tmp_path / "r" / "b", f"{regs.plain}/{repo}@{digest}", "passed", key=new_key)
    out = release_cells(
        [cell("b", targets(regs, repo))],
        matrix="t",
        reports=collect_reports([tmp_path / "r" / "b"], [new_key.public]),
        index_file=index_file,
        client_for=clients_for(regs),
        trusted=[new_key.public],
    )
    refused = {c.cell: c for c in out.cells if c.status == "refused"}
    assert set(refused) == {a.cell}
    reasons = refused[a.cell].reasons
    assert len(reasons) == 2  # one per registry copy
    for name in ("plain", "tls"):
        assert any(
            r.startswith(
                f"carried index entry a, registry {name}: no passing validation attestation of {a.digest}"
            )
            and "no signature verifies with a trusted key" in r
            for r in reasons
        ), reasons
    index = load_index(index_file)
    assert [i.tag for i in index.images] == ["b"]
    for client in (regs.plain_client(), regs.auth_client()):
        published = parse_index(read_index_artifact(client, repo, INDEX_ARTIFACT_TAG), source="x")
        assert [i.tag for i in published.images] == ["b"]
    # both keys trusted (a rotation): a comes back only by a new release, and b is carried with it
    again = _release(regs, repo, tmp_path, "a", index_file, trusted=[*TRUSTED, new_key.public])
    again.raise_for_refusals()  # type: ignore[attr-defined]
    assert [i.tag for i in load_index(index_file).images] == ["a", "b"]


# -- issue 34: labels bound to the plan and to the evidence; release's writes never through a link ----------


def _labelled_release(
    regs: LocalRegistries,
    repo: str,
    tmp_path: Path,
    cid: str,
    labels: dict[str, str],
    stack: dict[str, str] | None = None,
) -> Any:
    from tests.integration.test_release import image_labels

    rc = cell(cid, targets(regs, repo))
    digest = push_image(
        regs.plain_client(),
        repo,
        f"{cid}-candidate",
        f"{cid} {repo} {uuid.uuid4()}",
        labels={**image_labels(rc), **labels},
    )
    folder = tmp_path / "r" / f"{cid}-{uuid.uuid4().hex[:6]}"
    write_report(folder, f"{regs.plain}/{repo}@{digest}", "passed", stack=stack)
    return release_cells(
        [rc],
        matrix="t",
        reports=collect_reports([folder], TRUSTED),
        index_file=tmp_path / "index.json",
        client_for=clients_for(regs),
        trusted=TRUSTED,
    )


@pytest.mark.parametrize(
    ("labels", "stack", "said"),
    [
        ({"io.imagesmith.min-driver.full": "450.80.02"}, None, "min-driver 450.80.02/"),
        ({"io.imagesmith.torch-arch": "8.0,9.0"}, None, "arch 8.0,9.0 (the plan's cell: 7.5,"),
        ({"io.imagesmith.shm-min": "64m"}, None, "shm-min 64m (the plan's cell: 1g)"),
        ({}, {"torch": "2.4.1+cu121", "torch_cuda": "13.0"}, "torch 2.11.0 (the validation report "),
        ({}, {"torch": "2.11.0+cu130", "torch_cuda": "12.1"}, "torch built for CUDA 12.1"),
    ],
)
def test_lying_labels_are_refused_and_true_ones_release(
    regs: LocalRegistries,
    repo: str,
    tmp_path: Path,
    labels: dict[str, str],
    stack: dict[str, str] | None,
    said: str,
) -> None:
    """main published whatever min-driver, arch and shm labels the candidate carried, and never compared the
    torch the signed report recorded inside the image with its torch label: pick filters on exactly these."""
    out = _labelled_release(regs, repo, tmp_path, "a", labels, stack)
    (result,) = out.cells
    assert result.status == "refused", result
    assert any(said in r for r in result.reasons), result.reasons
    assert regs.plain_client().manifest_digest(repo, "a") is None  # nothing promoted
    # the correct run: the labels the plan's cell says, a report that recorded the same torch
    ok = _labelled_release(regs, repo, tmp_path, "a", {}, {"torch": "2.11.0+cu130", "torch_cuda": "13.0"})
    ok.raise_for_refusals()
    assert regs.plain_client().manifest_digest(repo, "a") is not None


@pytest.mark.parametrize("name", ["index.json.sig", "index.json.pub", "index.json"])
def test_release_never_writes_through_a_symlinked_sig_pub_or_index(
    regs: LocalRegistries, repo: str, tmp_path: Path, name: str
) -> None:
    """main wrote index.json.sig and index.json.pub through a committed symbolic link: the release job
    overwrote a file outside the project."""
    from imagesmith import signing

    outside = tmp_path / "outside.txt"
    outside.write_text("not release's\n")
    index_file = tmp_path / "release" / "index.json"
    index_file.parent.mkdir()
    (index_file.parent / name).symlink_to(outside)
    key = signing.generate_key()
    with pytest.raises(ConfigError, match="is a symbolic link") as err:
        _release(regs, repo, tmp_path, "a", index_file, sign_key=key)
    assert str(index_file.parent / name) in err.value.message
    assert outside.read_text() == "not release's\n"
    assert regs.plain_client().manifest_digest(repo, "a") is None  # refused before anything was promoted
    # the correct run: the link removed, release writes regular files
    (index_file.parent / name).unlink()
    _release(regs, repo, tmp_path, "a", index_file, sign_key=key).raise_for_refusals()  # type: ignore[attr-defined]
    for written in ("index.json", "index.json.sig", "index.json.pub"):
        assert (index_file.parent / written).is_file()
        assert not (index_file.parent / written).is_symlink()
    assert outside.read_text() == "not release's\n"


def test_release_rotate_to_moves_a_renters_pin_to_the_new_key(
    regs: LocalRegistries,
    repo: str,
    tmp_path: Path,
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The publisher's key rotation end to end: release --rotate-to NEW signs the index with the current key
    and NEW and names NEW as its successor; a renter that pinned the current key moves to NEW; the next
    release signed by NEW alone is taken; an index signed by the retired key alone is refused."""
    from imagesmith import signing

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.delenv("IMAGESMITH_INDEX_KEY", raising=False)
    old, new = signing.generate_key(), signing.generate_key()
    index_file = tmp_path / "release" / "index.json"
    said: list[str] = []
    _release(regs, repo, tmp_path, "a", index_file, sign_key=old, echo=said.append).raise_for_refusals()  # type: ignore[attr-defined]
    source = f"oci+http://{regs.plain}/{repo}"
    assert (
        f"renters: imagesmith pick --index oci://{regs.plain}/{repo}#{old.public.fingerprint} --pull" in said
    )
    first = run_cli("index", f"{source}#{old.public.fingerprint}", "--insecure")
    assert first.exit_code == 0, first.stderr
    _release(regs, repo, tmp_path, "b", index_file, sign_key=old, rotate_to=new).raise_for_refusals()  # type: ignore[attr-defined]
    assert load_index(index_file).successor_key == new.public.fingerprint
    assert index_file.with_name("index.json.pub").read_bytes() == new.public.pem
    moved = run_cli("index", source, "--insecure", "--refresh")
    assert moved.exit_code == 0, moved.stderr
    assert f"the pin moves from {old.public.fingerprint} to {new.public.fingerprint}" in moved.stderr
    _release(regs, repo, tmp_path, "c", index_file, sign_key=new).raise_for_refusals()  # type: ignore[attr-defined]
    assert load_index(index_file).successor_key == ""
    ok = run_cli("index", source, "--insecure", "--refresh")
    assert ok.exit_code == 0, ok.stderr
    assert f"index key: {new.public.fingerprint} (" in ok.stderr
    # the retired key (someone who kept it) publishes a newer index signed by it alone: refused
    _release(regs, repo, tmp_path, "d", index_file, sign_key=old).raise_for_refusals()  # type: ignore[attr-defined]
    refused = run_cli("index", source, "--insecure", "--refresh")
    assert refused.exit_code == 2
    assert f"is {old.public.fingerprint}, not {new.public.fingerprint}" in refused.stderr
