"""imagesmith.sbom without syft: the recorded syft-shaped SPDX document tests/data/vuln/sbom.spdx.json (the
local debian:bookworm's document, trimmed, with two Python packages), its signed attestation, and what
release accepts of it."""

from __future__ import annotations

import copy
import datetime
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from imagesmith import sbom, signing, vulngate
from imagesmith.errors import SignatureError

DATA = Path(__file__).parent.parent / "data" / "vuln"
RECORDED = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
KEY = signing.generate_key()


@pytest.fixture
def doc() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / "sbom.spdx.json").read_text())
    return loaded


def test_the_document_describes_the_digest(doc: dict[str, Any]) -> None:
    assert sbom.described_digests(doc) == {RECORDED}
    doc["packages"][0] = json.loads(json.dumps(doc["packages"][0]).replace(RECORDED, OTHER))
    assert sbom.described_digests(doc) == {OTHER}


def test_a_described_hex_run_longer_than_a_digest_is_no_digest(doc: dict[str, Any]) -> None:
    """Before: the first 64 characters after "sha256:" were taken, whatever followed: a document whose root
    package says `sha256:<digest>00` (or `sha256:<digest>` cut from a longer value) passed as the digest's."""
    doc["packages"][0] = json.loads(json.dumps(doc["packages"][0]).replace(RECORDED, RECORDED + "00"))
    assert sbom.described_digests(doc) == set()


def test_summary_and_locked_hashes(doc: dict[str, Any]) -> None:
    s = sbom.summarize(doc)
    assert {n for n, _ in s.os_packages} == {"apt", "base-files", "libc6", "libexpat1"}
    assert s.python_packages == (("requests", "2.31.0"), ("torch", "2.11.0"))
    assert s.hashed == 0
    assert s.licensed == 6
    h = "1" * 64
    # a lock pin of another version adds nothing; names compare canonicalized
    assert sbom.add_locked_hashes(doc, [("Torch", "2.11.0", [h]), ("requests", "2.32.0", ["2" * 64])]) == 1
    torch = next(p for p in doc["packages"] if p["name"] == "torch")
    assert torch["checksums"] == [{"algorithm": "SHA256", "checksumValue": h}]
    assert sbom.add_locked_hashes(doc, [("torch", "2.11.0", [h])]) == 1  # idempotent: no second entry
    assert len(torch["checksums"]) == 1
    assert sbom.summarize(doc).hashed == 1


def test_packages_only_drops_files_and_their_relationships(doc: dict[str, Any]) -> None:
    big = copy.deepcopy(doc)
    big["files"] = [{"SPDXID": "SPDXRef-File-x", "fileName": "/etc/x"}]
    big["relationships"].append(
        {
            "spdxElementId": "SPDXRef-DOCUMENT",
            "relatedSpdxElement": "SPDXRef-File-x",
            "relationshipType": "CONTAINS",
        }
    )
    small = sbom.packages_only(big)
    assert "files" not in small
    assert small["relationships"] == doc["relationships"]


def test_signed_sbom_round_trip_and_refusals(doc: dict[str, Any], tmp_path: Path) -> None:
    env = sbom.sign_sbom(doc, repository="127.0.0.1:5000/imagesmith-test/torch", digest=RECORDED, key=KEY)
    statement = json.loads(
        signing.verify_envelope(env, [KEY.public], payload_type=signing.INTOTO_PAYLOAD_TYPE).payload
    )
    assert statement["predicateType"] == "https://spdx.dev/Document"  # cosign's --type spdxjson
    assert sbom.verify_sbom(env, [KEY.public], digest=RECORDED)["packages"] == doc["packages"]
    with pytest.raises(SignatureError, match="not " + OTHER):
        sbom.verify_sbom(env, [KEY.public], digest=OTHER)
    with pytest.raises(SignatureError):
        sbom.verify_sbom(env, [signing.generate_key().public], digest=RECORDED)
    # what release finds in --scan-reports
    (tmp_path / f"{sbom.stem(RECORDED)}.sbom.dsse.json").write_bytes(env)
    found = sbom.find_signed_sbom([tmp_path], RECORDED, [KEY.public])
    assert isinstance(found, sbom.SignedSbom)
    assert found.packages == 6
    assert sbom.find_signed_sbom([tmp_path], OTHER, [KEY.public]) is None
    tampered = json.loads(env)
    tampered["payload"] = tampered["payload"][:-8] + "AAAAAAA="
    (tmp_path / f"{sbom.stem(RECORDED)}.sbom.dsse.json").write_text(json.dumps(tampered))
    why = sbom.find_signed_sbom([tmp_path], RECORDED, [KEY.public])
    assert isinstance(why, str)
    assert f"{sbom.stem(RECORDED)}.sbom.dsse.json" in why


def test_make_sbom_refuses_a_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    from imagesmith.errors import ConfigError

    with pytest.raises(ConfigError, match="IMAGE@sha256"):
        sbom.make_sbom("127.0.0.1:5000/x/y:latest")


def test_make_sbom_refuses_a_document_of_another_digest(
    doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sbom, "run_syft", lambda source, **kw: doc)
    with pytest.raises(sbom.SbomError, match=f"describes {RECORDED}, not {OTHER}"):
        sbom.make_sbom(f"h/r@{OTHER}")
    got, digest = sbom.make_sbom(f"h/r@{RECORDED}", hashes=[("requests", "2.31.0", ["3" * 64])])
    assert digest == RECORDED
    assert sbom.summarize(got).hashed == 1


def test_spdx_sbom_matched_against_osv(tmp_path: Path) -> None:
    shutil.copy(DATA / "osv.json", tmp_path / "osv.json")
    (tmp_path / "imagesmith.toml").write_text('[release.vulnerabilities]\nosv = "osv.json"\n')
    policy = vulngate.load_policy(tmp_path / "imagesmith.toml")
    scans = tmp_path / "scans"
    scans.mkdir()
    shutil.copy(DATA / "sbom.spdx.json", scans / f"{sbom.stem(RECORDED)}.spdx.json")
    verdict, reasons = vulngate.gate([scans], RECORDED, policy, today=datetime.date(2026, 12, 1))
    assert verdict is not None
    assert [f.id for f in verdict.blocking] == ["DEBIAN-CVE-2024-45491"]
    assert "libexpat1 2.5.0-1" in reasons[0]


# -- issue 26 re-check ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reference",
    [
        "h/r@sha256:" + "Z" * 64,  # 71 characters, starts with sha256: — not hex
        "h/r@sha256:" + "AB" * 32,  # upper-case hex is no digest either
        "@sha256:" + "ab" * 32,  # no image at all
    ],
)
def test_a_reference_whose_digest_is_not_hex_is_refused_before_syft(
    reference: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagesmith.errors import ConfigError

    def no_syft(source: str, **kw: object) -> dict[str, Any]:
        raise AssertionError(f"syft ran for {source}")

    monkeypatch.setattr(sbom, "run_syft", no_syft)
    with pytest.raises(ConfigError, match="is not IMAGE@sha256:<64 hex>"):
        sbom.make_sbom(reference)


def test_syft_failing_says_what_syft_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: syft ran with -q, which silences its error lines too: `failed (exit 1): no message` for a
    digest the registry does not hold. Its colours are dropped, not printed as escape codes."""
    fake = tmp_path / "syft"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = "-q" ] && exit 1; done\n'
        "printf '[0000] ERROR \\033[31mcould not determine source: MANIFEST_UNKNOWN\\033[0m\\n' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sbom, "syft_binary", lambda: str(fake))
    with pytest.raises(sbom.SbomError) as err:
        sbom.run_syft("registry:h/r@" + RECORDED)
    assert err.value.message == (
        f"syft registry:h/r@{RECORDED} failed (exit 1): [0000] ERROR could not determine source: "
        "MANIFEST_UNKNOWN"
    )


def test_a_bad_signing_key_or_out_file_stops_before_syft_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Any
) -> None:
    """Before: syft ran (seconds), the unsigned document was written, then the key was refused."""
    ran: list[str] = []

    def syft(source: str, **kw: object) -> dict[str, Any]:
        ran.append(source)
        return {}

    monkeypatch.setattr(sbom, "run_syft", syft)
    key = tmp_path / "k.key"
    key.write_text("not a key\n")
    key.chmod(0o600)
    out = tmp_path / "out"
    result = run_cli("sbom", f"h/r@{RECORDED}", "--out", str(out), "--sign-key", str(key))
    assert result.exit_code not in (0, 1), result.stderr
    assert ran == []
    assert not out.exists()
    (tmp_path / "file").write_text("x")
    result = run_cli("sbom", f"h/r@{RECORDED}", "--out", str(tmp_path / "file"))
    assert result.exit_code == 2
    assert "not a folder" in result.stderr
    assert ran == []


def test_syft_missing_is_one_error_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Any
) -> None:
    """Neither on PATH nor beside this Python: one error and the install line; nothing written (held)."""
    monkeypatch.setattr("imagesmith.sbom.shutil.which", lambda *a, **kw: None)
    out = tmp_path / "out"
    result = run_cli("sbom", f"h/r@{RECORDED}", "--out", str(out))
    assert result.exit_code == 2
    assert "error: syft is not installed" in result.stderr
    assert "pip install 'imagesmith[sbom]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("bad_first", [True, False])
def test_several_signed_sboms_of_one_digest_do_not_hang_on_their_path_order(
    doc: dict[str, Any], tmp_path: Path, bad_first: bool
) -> None:
    """Before: only the first file (by path) counted: a good SBOM in a/ and one signed by a retired key in b/
    released the cell, the same two the other way round refused it; two good ones with different documents
    recorded whichever sorted first."""
    good = sbom.sign_sbom(doc, repository="r", digest=RECORDED, key=KEY)
    stale = sbom.sign_sbom(doc, repository="r", digest=RECORDED, key=signing.generate_key())
    name = f"{sbom.stem(RECORDED)}.sbom.dsse.json"
    for folder, env in (("a", stale if bad_first else good), ("b", good if bad_first else stale)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_bytes(env)
    why = sbom.find_signed_sbom([tmp_path], RECORDED, [KEY.public])
    assert isinstance(why, str)
    assert str(tmp_path / ("a" if bad_first else "b") / name) in why


def test_two_good_signed_sboms_with_different_documents_are_refused(
    doc: dict[str, Any], tmp_path: Path
) -> None:
    other = copy.deepcopy(doc)
    other["packages"] = other["packages"][:-1]
    name = f"{sbom.stem(RECORDED)}.sbom.dsse.json"
    for folder, d in (("a", doc), ("b", other)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_bytes(sbom.sign_sbom(d, repository="r", digest=RECORDED, key=KEY))
    why = sbom.find_signed_sbom([tmp_path], RECORDED, [KEY.public])
    assert isinstance(why, str)
    assert "two signed SBOMs of " + RECORDED in why
    # the same document twice (copied into two report folders) is one SBOM
    (tmp_path / "b" / name).write_bytes((tmp_path / "a" / name).read_bytes())
    assert isinstance(sbom.find_signed_sbom([tmp_path], RECORDED, [KEY.public]), sbom.SignedSbom)
