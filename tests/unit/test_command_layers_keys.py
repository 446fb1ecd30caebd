"""Issue 31: the command layers of ``keygen`` (keyrequest.py), ``sbom`` (sbomrequest.py), ``index``
(pick/indexrequest.py) and ``candidates`` (release/request.py) — a typed request, every flag rule in
``prepare`` (one ConfigError naming its ``field``, in a fixed order, before anything runs), the run and a
typed result — called without the CLI."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith import keyrequest, sbom, sbomrequest, signing
from imagesmith.errors import ConfigError, NothingToDoError, RegistryError, ReleaseError
from imagesmith.pick import indexrequest
from imagesmith.project import discover
from imagesmith.release import request as release_request
from tests.repo import REPO

SAMPLE = REPO / "docs" / "examples" / "release-index.json"
SAMPLE_KEY = SAMPLE.with_name(SAMPLE.name + ".pub")
LOCKS = REPO / "imagesmith" / "data" / "locks"
DIGEST = "sha256:" + "ab" * 32  # the digest tests/data/vuln/sbom.spdx.json describes
IMAGE = f"127.0.0.1:5000/team/torch@{DIGEST}"


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("IMAGESMITH_SIGNING_KEY", "IMAGESMITH_INDEX", "IMAGESMITH_INDEX_KEY", "IMAGESMITH_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _field(call: Any) -> str | None:
    with pytest.raises(ConfigError) as caught:
        call()
    return caught.value.field


# -- keygen --------------------------------------------------------------------------------------------------
def _keygen(tmp_path: Path, **kw: Any) -> keyrequest.PreparedKeygen:
    return keyrequest.prepare(keyrequest.KeygenRequest(**{"private": tmp_path / "v.key", **kw}))


def test_keygen_a_type_imagesmith_does_not_sign_with_is_refused(tmp_path: Path) -> None:
    assert _field(lambda: _keygen(tmp_path, key_type="rsa")) == "--type"
    assert not list(tmp_path.iterdir())


def test_keygen_private_a_folder_is_refused(tmp_path: Path) -> None:
    assert _field(lambda: _keygen(tmp_path, private=tmp_path)) == "PRIVATE"
    assert _field(lambda: _keygen(tmp_path, private=Path())) == "PRIVATE"


def test_keygen_private_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert _field(lambda: _keygen(tmp_path, private=tmp_path / "f" / "v.key")) == "PRIVATE"


def test_keygen_public_a_folder_is_refused(tmp_path: Path) -> None:
    assert _field(lambda: _keygen(tmp_path, public=tmp_path)) == "--public"


def test_keygen_public_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert _field(lambda: _keygen(tmp_path, public=tmp_path / "f" / "v.pub")) == "--public"


def test_keygen_rules_run_in_their_order(tmp_path: Path) -> None:
    """--type, then PRIVATE, then --public: with all three bad the first one is said."""
    bad = {"key_type": "rsa", "private": tmp_path, "public": tmp_path}
    assert _field(lambda: _keygen(tmp_path, **bad)) == "--type"
    assert _field(lambda: _keygen(tmp_path, **{**bad, "key_type": "ed25519"})) == "PRIVATE"


def test_keygen_prepare_names_the_files_and_folders_and_writes_nothing(tmp_path: Path) -> None:
    p = _keygen(tmp_path, private=tmp_path / "a" / "b" / "v.key")
    assert p.public == tmp_path / "a" / "b" / "v.pub"
    assert p.created == (str(tmp_path / "a" / "b"),)
    assert p.key_type == "ecdsa-p256"
    assert not p.finishing
    assert _keygen(tmp_path, private=tmp_path / "plain").public == tmp_path / "plain.pub"
    assert not list(tmp_path.iterdir())


def test_keygen_writes_the_pair_and_finishes_a_half_one(tmp_path: Path) -> None:
    done = keyrequest.keygen(_keygen(tmp_path, key_type="ed25519"))
    assert done.key_type == "ed25519"
    assert signing.load_public_key(tmp_path / "v.pub").key_id == done.key_id
    assert (
        done.lines()[-1]
        == f'trust it:    add "{tmp_path / "v.pub"}" to [release] trusted_keys in imagesmith.toml'
    )
    (tmp_path / "v.pub").unlink()
    half = _keygen(tmp_path)
    assert half.finishing
    again = keyrequest.keygen(half)
    assert again.key_id == done.key_id
    assert again.lines() == [
        f"public key:  {tmp_path / 'v.pub'} (ed25519, id {done.key_id}; written from the existing "
        f"{tmp_path / 'v.key'})"
    ]


# -- sbom ----------------------------------------------------------------------------------------------------
def _sbom(tmp_path: Path, **kw: Any) -> sbomrequest.SbomRequest:
    return sbomrequest.SbomRequest(**{"image": IMAGE, "out": tmp_path / "scans", **kw})


@pytest.fixture
def no_syft(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(source: str, **kw: Any) -> dict[str, Any]:
        raise AssertionError("prepare ran syft")

    monkeypatch.setattr(sbom, "run_syft", refuse)


def _key_file(tmp_path: Path) -> Path:
    private = tmp_path / "sign.key"
    signing.write_keypair(private, tmp_path / "sign.pub", "ed25519")
    return private


def test_sbom_lock_not_a_lock_file_is_refused(tmp_path: Path, no_syft: None) -> None:
    (tmp_path / "notes.txt").write_text("hi\n")
    assert _field(lambda: sbomrequest.prepare(_sbom(tmp_path, lock=tmp_path / "notes.txt"))) == "--lock"


def test_sbom_lock_hashes_are_read(tmp_path: Path, no_syft: None) -> None:
    lock = next(LOCKS.glob("*.txt"))
    p = sbomrequest.prepare(_sbom(tmp_path, lock=lock))
    assert p.hashes
    assert all(len(h) == 64 for _, _, hs in p.hashes for h in hs)


def test_sbom_out_a_file_is_refused(tmp_path: Path, no_syft: None) -> None:
    (tmp_path / "scans").write_text("x")
    assert _field(lambda: sbomrequest.prepare(_sbom(tmp_path))) == "--out"


def test_sbom_sign_key_unusable_is_refused(tmp_path: Path, no_syft: None) -> None:
    assert (
        _field(lambda: sbomrequest.prepare(_sbom(tmp_path, sign_key=tmp_path / "none.key"))) == "--sign-key"
    )


def test_sbom_signing_key_setting_unusable_is_refused_naming_it(
    tmp_path: Path, no_syft: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGESMITH_SIGNING_KEY", str(tmp_path / "none.key"))
    assert _field(lambda: sbomrequest.prepare(_sbom(tmp_path))) == "IMAGESMITH_SIGNING_KEY"


def test_sbom_the_signing_key_comes_from_the_setting(
    tmp_path: Path, no_syft: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGESMITH_SIGNING_KEY", str(_key_file(tmp_path)))
    signer = sbomrequest.prepare(_sbom(tmp_path)).signer
    assert signer is not None
    assert signer.public.fingerprint == signing.load_public_key(tmp_path / "sign.pub").fingerprint


def test_sbom_image_not_by_digest_is_refused(tmp_path: Path, no_syft: None) -> None:
    assert _field(lambda: sbomrequest.prepare(_sbom(tmp_path, image="127.0.0.1:5000/x/y:latest"))) == "IMAGE"


def test_sbom_rules_run_in_their_order(tmp_path: Path, no_syft: None) -> None:
    """--lock, --out, --sign-key, IMAGE: each bad one is said only once those before it are good."""
    (tmp_path / "notes.txt").write_text("hi\n")
    (tmp_path / "scans").write_text("x")
    bad = _sbom(tmp_path, image="nodigest", lock=tmp_path / "notes.txt", sign_key=tmp_path / "none.key")
    assert _field(lambda: sbomrequest.prepare(bad)) == "--lock"
    bad = replace(bad, lock=None)
    assert _field(lambda: sbomrequest.prepare(bad)) == "--out"
    bad = replace(bad, out=tmp_path / "out")
    assert _field(lambda: sbomrequest.prepare(bad)) == "--sign-key"
    bad = replace(bad, sign_key=None)
    assert _field(lambda: sbomrequest.prepare(bad)) == "IMAGE"
    assert not (tmp_path / "out").exists()


def test_sbom_make_writes_the_document_and_its_signed_attestation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = json.loads((REPO / "tests" / "data" / "vuln" / "sbom.spdx.json").read_text())
    monkeypatch.setattr(sbom, "run_syft", lambda source, **kw: doc)
    request = _sbom(tmp_path, sign_key=_key_file(tmp_path))
    prepared = sbomrequest.prepare(request)
    result = sbomrequest.make(request, prepared)
    assert result.path == tmp_path / "scans" / f"{sbom.stem(DIGEST)}.spdx.json"
    assert json.loads(result.path.read_text())["packages"]
    assert result.attestation is not None
    public = signing.load_public_key(tmp_path / "sign.pub")
    assert sbom.verify_sbom(result.attestation.read_bytes(), [public], digest=DIGEST)
    lines = result.lines()
    assert lines[0].startswith(f"{result.path}: 4 OS package(s), 2 Python package(s) (0 with a locked sha256")
    assert lines[1] == f"{result.attestation}: signed ({prepared.signer!r})"
    unsigned = sbomrequest.make(replace(request, out=tmp_path / "plain"), replace(prepared, signer=None))
    assert unsigned.attestation is None
    assert len(unsigned.lines()) == 1
    assert [p.name for p in (tmp_path / "plain").iterdir()] == [unsigned.path.name]


# -- index ---------------------------------------------------------------------------------------------------
def test_index_without_a_source_is_refused() -> None:
    assert _field(lambda: indexrequest.prepare(indexrequest.IndexRequest())) == "SOURCE"


def test_index_the_source_comes_from_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGESMITH_INDEX", str(SAMPLE))
    assert indexrequest.prepare(indexrequest.IndexRequest(verify_key=SAMPLE_KEY)).source == str(SAMPLE)


@pytest.mark.parametrize(
    "given",
    [{"verify_key": SAMPLE_KEY}, {"key_fingerprint": "sha256:" + "a" * 64}],
    ids=["key", "fingerprint"],
)
def test_index_a_key_with_no_verify_is_refused(given: dict[str, Any]) -> None:
    request = indexrequest.IndexRequest(source=str(SAMPLE), no_verify=True, **given)
    assert _field(lambda: indexrequest.prepare(request)) == "--no-verify"


def test_index_no_verify_alone_trusts_nothing() -> None:
    prepared = indexrequest.prepare(indexrequest.IndexRequest(source=str(SAMPLE), no_verify=True))
    assert not prepared.trust.verify


def test_index_a_bad_fingerprint_is_refused() -> None:
    request = indexrequest.IndexRequest(source=str(SAMPLE), key_fingerprint="nothex")
    with pytest.raises(ConfigError, match="--key-fingerprint"):
        indexrequest.prepare(request)


def test_index_a_verify_key_that_is_no_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--verify-key"):
        indexrequest.prepare(indexrequest.IndexRequest(source=str(SAMPLE), verify_key=SAMPLE))
    with pytest.raises(ConfigError, match="--verify-key"):
        indexrequest.prepare(indexrequest.IndexRequest(source=str(SAMPLE), verify_key=tmp_path / "none.pub"))


def test_index_rules_run_in_their_order() -> None:
    """The source first, then the trust."""
    request = indexrequest.IndexRequest(verify_key=SAMPLE_KEY, no_verify=True)
    assert _field(lambda: indexrequest.prepare(request)) == "SOURCE"


def test_index_the_named_project_s_key_is_taken_only_from_the_function_handed_in(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(SAMPLE_KEY, root / "index.pub")
    (root / "imagesmith.toml").write_text('[release]\nindex_key = "index.pub"\n')
    project = discover(root)
    request = indexrequest.IndexRequest(source=str(SAMPLE))
    assert indexrequest.prepare(request).trust.key is None  # the default: no project named
    named = indexrequest.prepare(request, named_project=lambda: project).trust
    assert named.key is not None
    assert named.key.pem == SAMPLE_KEY.read_bytes()


def test_index_show_lists_the_verified_index() -> None:
    request = indexrequest.IndexRequest(source=str(SAMPLE), verify_key=SAMPLE_KEY)
    notes: list[str] = []
    result = indexrequest.show(request, indexrequest.prepare(request), note=notes.append)
    lines = result.lines()
    assert lines[0].startswith(f"{SAMPLE}: {len(result.index.images)} image(s), generated ")
    assert len(lines) == 2 + len(result.index.images)
    assert json.loads(result.json())["images"]


def test_index_show_without_verifying_warns() -> None:
    request = indexrequest.IndexRequest(source=str(SAMPLE), no_verify=True)
    warned: list[str] = []
    indexrequest.show(request, indexrequest.prepare(request), warn=warned.append)
    assert len(warned) == 1
    assert warned[0].startswith(f"--no-verify: the release index {SAMPLE} is used without checking")


# -- candidates ----------------------------------------------------------------------------------------------
def _project_of(matrix: str | None) -> Any:
    return discover(REPO)


def test_candidates_the_project_of_the_matrix_comes_first() -> None:
    def refuse(matrix: str | None) -> Any:
        raise ConfigError("--matrix is empty", hint="give a matrix", field="--matrix")

    request = release_request.CandidatesRequest(matrix="", only=("nomatch*",))
    assert _field(lambda: release_request.prepare_candidates(request, project_of=refuse)) == "--matrix"


def test_candidates_a_matrix_not_in_the_project_is_refused() -> None:
    request = release_request.CandidatesRequest(matrix="nothere")
    with pytest.raises(ConfigError, match="nothere"):
        release_request.prepare_candidates(request, project_of=_project_of)


def test_candidates_a_registries_file_that_is_no_file_is_refused(tmp_path: Path) -> None:
    request = release_request.CandidatesRequest(matrix="smoke", registries=tmp_path)
    with pytest.raises(ConfigError, match=str(tmp_path)):
        release_request.prepare_candidates(request, project_of=_project_of)


def test_candidates_only_matching_no_cell_is_refused() -> None:
    request = release_request.CandidatesRequest(matrix="smoke", only=("nomatch*",))
    with pytest.raises(NothingToDoError):
        release_request.prepare_candidates(request, project_of=_project_of)


def test_candidates_for_asks_each_cell_s_registries_and_prints_the_pinned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = release_request.CandidatesRequest(matrix="smoke")
    prepared = release_request.prepare_candidates(request, project_of=_project_of)
    assert prepared.cells
    monkeypatch.setattr(release_request, "candidate_rows", lambda cells, client_for: _rows(cells, DIGEST))
    result = release_request.candidates_for(replace(request, pinned=True), prepared)
    result.raise_for_missing()
    assert result.lines() == [f"{c.targets[0].image}@{DIGEST}" for c in prepared.cells]
    plain = release_request.candidates_for(request, prepared)
    assert json.loads("\n".join(plain.lines()))[0]["cell"] == prepared.cells[0].id


def _rows(cells: Any, digest: str | None, errors: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [
        {
            "cell": c.id,
            "pinned": [f"{c.targets[0].image}@{digest}"] if digest else [],
            "errors": list(errors),
        }
        for c in cells
    ]


def test_candidates_pinned_without_a_candidate_is_refused() -> None:
    request = release_request.CandidatesRequest(matrix="smoke", pinned=True)
    prepared = release_request.prepare_candidates(request, project_of=_project_of)
    missing = release_request.CandidatesResult(rows=_rows(prepared.cells, None), pinned=True)
    with pytest.raises(ReleaseError):
        missing.raise_for_missing()
    unasked = release_request.CandidatesResult(rows=_rows(prepared.cells, None, ("r: down",)), pinned=True)
    with pytest.raises(RegistryError, match="r: down"):
        unasked.raise_for_missing()
    release_request.CandidatesResult(rows=_rows(prepared.cells, None), pinned=False).raise_for_missing()
