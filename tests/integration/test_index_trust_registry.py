"""Issue 25, the renter's end, on the REAL local registry (127.0.0.1:5000): each attack of someone with push
rights to one registry, scripted through ``imagesmith pick`` / ``imagesmith index``, is refused with one error
naming the source and the fix — and the correct rerun afterwards works.

Attacks: an unsigned index (naming its own registry hosts); a validly signed older index replayed after a
newer one was cached (``--refresh`` too); an expired index; an index signature envelope with junk base64, a
repeated key, a case-colliding key; and, for release, a stored validation attestation whose statement names
two subjects. On main, each attack went through (pick exit 0 with the attacker's choice, release promoted).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.attestation import VALIDATION_PREDICATE_TYPE, attach_attestations
from imagesmith.index import ReleaseIndex
from imagesmith.registry import RegistryClient
from imagesmith.release import collect_reports, publish_index, release_cells
from tests.indexkey import FAR, KEY, signed_bytes
from tests.integration.test_release import TRUSTED, cell, clients_for, push_image, targets, write_report
from tests.localinfra import LocalRegistries, local_registries
from tests.unit.test_pick import make_index

pytestmark = pytest.mark.registry

PICK = ("--insecure", "--driver", "580.95.05", "--gpu", "h100")


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture
def repo() -> str:
    return f"imagesmith-test/i25pick-{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def _renter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh rental: its own cache (pinned keys, newest serials), no user config, no project; the trust root
    the renter pasted from the publisher's announcement (issue 34): the tests' key by its fingerprint."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("IMAGESMITH_INDEX_KEY", KEY.public.fingerprint)
    monkeypatch.delenv("IMAGESMITH_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)


def _source(regs: LocalRegistries, repo: str) -> str:
    return f"oci+http://{regs.plain}/{repo}"


def _publish(
    regs: LocalRegistries,
    repo: str,
    *,
    serial: int = 1,
    expires: str = FAR,
    index: ReleaseIndex | None = None,
    envelope: Callable[[bytes], bytes] | None = None,
    signed: bool = True,
) -> None:
    """Publish an index artifact as release does (index, DSSE envelope, the key), or a forged one."""
    body, env = signed_bytes(index or make_index(), serial=serial, expires=expires)
    if envelope is not None:
        env = envelope(env)
    publish_index(
        regs.plain_client(), repo, body, env if signed else None, KEY.public.pem if signed else None
    )


def _refused(res: Any, source: str, *words: str) -> tuple[str, str]:
    """One error line naming the source, one fix line; exit 2; nothing on stdout."""
    assert res.exit_code == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    fixes = [ln for ln in lines if ln.startswith("  fix:")]
    assert len(errors) == 1, res.stderr
    assert len(fixes) == 1, res.stderr
    assert errors[0].startswith(f"error: --index {source}"), errors[0]
    for word in words:
        assert word in errors[0] + fixes[0], (word, res.stderr)
    assert "docker pull" not in res.stdout
    assert "Traceback" not in res.stderr
    return errors[0], fixes[0]


def test_an_unsigned_index_naming_its_own_hosts_is_refused(
    regs: LocalRegistries, repo: str, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main: one unsigned index pushed to one registry made pick print `docker pull evil.example.com/…`, exit
    0, nothing on stderr."""
    monkeypatch.delenv("IMAGESMITH_INDEX_KEY")  # a rental with no trust root at all
    source = _source(regs, repo)
    evil = make_index(registries=[("evil", "generic", "evil.example.com/torch")])
    evil = dataclasses.replace(evil, registries=("evil.example.com",))
    _publish(regs, repo, index=evil, signed=False)
    _refused(run_cli("pick", "--index", source, *PICK), source, "no key to verify", "--verify-key")
    _refused(run_cli("index", source, "--insecure"), source, "no key to verify")
    pub = Path("release.pub")
    pub.write_bytes(KEY.public.pem)
    _refused(
        run_cli("pick", "--index", source, *PICK, "--verify-key", str(pub)),
        source,
        "the index is not signed",
    )
    # the publisher's signed index: without a root still refused (issue 34: the key beside it is whatever
    # the registry serves), nothing pinned or pulled
    _publish(regs, repo)
    _refused(
        run_cli("pick", "--index", source, *PICK, "--refresh"), source, "no trust root", "--trust-first-use"
    )
    # the rerun with the fingerprint the publisher announces works, and pins the key published with it
    ok = run_cli("pick", "--index", f"{source}#{KEY.public.fingerprint}", *PICK, "--refresh")
    assert ok.exit_code == 0, ok.stderr
    assert f"index key: {KEY.public.fingerprint} (ed25519, published beside it, the fingerprint " in ok.stderr
    assert "evil.example.com" not in ok.stdout
    assert "docker pull docker.io/imagesmith/torch:" in ok.stdout


def test_a_replayed_older_signed_index_is_refused_after_a_newer_one_was_cached(
    regs: LocalRegistries, repo: str, run_cli: Any
) -> None:
    """main: `pick --refresh` and `index --refresh` replaced the cached newer index with the replayed one."""
    source = _source(regs, repo)
    _publish(regs, repo, serial=20)
    assert run_cli("index", source, "--insecure").exit_code == 0  # seen and cached: serial 20
    _publish(regs, repo, serial=10, index=make_index([("2.0.1", "11.7", "3.10")]))  # an old, signed index
    for command in (
        ["pick", "--index", source, *PICK, "--refresh"],
        ["index", source, "--insecure", "--refresh"],
    ):
        _refused(
            run_cli(*command), source, "serial 10", "older than serial 20", "replayed", "another registry"
        )
    within_ttl = run_cli("pick", "--index", source, *PICK)  # the cached newer index still answers
    assert within_ttl.exit_code == 0, within_ttl.stderr
    assert "picked: 2.11.0-cu130" in within_ttl.stdout
    _publish(regs, repo, serial=21)  # the publisher's next index: taken
    ok = run_cli("index", source, "--insecure", "--refresh")
    assert ok.exit_code == 0, ok.stderr
    assert ", serial 21, expires " in ok.stdout


def test_an_expired_index_is_refused_with_its_date(regs: LocalRegistries, repo: str, run_cli: Any) -> None:
    source = _source(regs, repo)
    _publish(regs, repo, expires="2026-01-02T03:04:05Z")
    _, fix = _refused(run_cli("pick", "--index", source, *PICK), source, "expired on 2026-01-02T03:04:05Z")
    assert "renews and re-signs the index" in fix
    _publish(regs, repo, serial=2)  # renewed by the publisher's release run
    assert run_cli("pick", "--index", source, *PICK, "--refresh").exit_code == 0


def _tamper(how: str) -> Callable[[bytes], bytes]:
    def change(envelope: bytes) -> bytes:
        doc = json.loads(envelope)
        text = json.dumps(doc)
        if (
            how == "junk-base64"
        ):  # a '*' in the payload: a lenient decoder drops it, the signature still verifies
            doc["payload"] = doc["payload"][:8] + "*" + doc["payload"][8:]
            return json.dumps(doc).encode()
        if how == "duplicate-key":  # a second "payload": one reader takes the first, another the last
            evil = base64.b64encode(b'{"schema": "evil"}').decode()
            return text.replace('"payload":', f'"payload": "{evil}", "payload":', 1).encode()
        assert how == "case-colliding-key"  # Go's encoding/json reads PayloadType as payloadType
        return text.replace('"payloadType":', '"PayloadType": "text/plain", "payloadType":', 1).encode()

    return change


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("junk-base64", "not standard base64: characters outside standard base64 ('*')"),
        ("duplicate-key", "the key 'payload' appears twice"),
        ("case-colliding-key", "the keys 'PayloadType' and 'payloadType' differ only in case"),
    ],
)
def test_a_lenient_signature_envelope_is_refused(
    regs: LocalRegistries, repo: str, run_cli: Any, how: str, why: str
) -> None:
    source = _source(regs, repo)
    _publish(regs, repo, envelope=_tamper(how))
    _refused(run_cli("pick", "--index", source, *PICK), source, "bad index signature", why)
    _publish(regs, repo)  # the envelope as release writes it: the rerun works
    assert run_cli("pick", "--index", source, *PICK, "--refresh").exit_code == 0


def test_a_stored_attestation_naming_two_subjects_is_refused_by_release(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    """main: a statement with two subjects was accepted from a registry (refused only from a local file), so
    one signature could count for an image it was never about."""
    plain = regs.plain_client()
    digest = push_image(plain, repo, "a-candidate", f"two subjects {uuid.uuid4()}")
    other = "sha256:" + "0" * 64
    report = json.loads(write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed").read_text())
    statement = {
        "_type": signing.STATEMENT_TYPE,
        "subject": [
            {"name": f"{regs.plain}/{repo}", "digest": {"sha256": other.split(":")[1]}},
            {"name": f"{regs.plain}/{repo}", "digest": {"sha256": digest.split(":")[1]}},
        ],
        "predicateType": VALIDATION_PREDICATE_TYPE,
        "predicate": report,
    }
    from tests.integration.test_release import KEY as RUNNER_KEY

    two = signing.sign_envelope(
        json.dumps(statement, sort_keys=True).encode(), signing.INTOTO_PAYLOAD_TYPE, RUNNER_KEY
    )
    attach_attestations(plain, repo, digest, [two])  # stored beside the candidate, as a fresh runner reads it
    index_file = tmp_path / "index.json"

    def release() -> Any:
        return release_cells(
            [cell("a", targets(regs, repo)[:1])],
            matrix="t",
            reports=[],  # no local evidence: release reads the attestations stored in the registry
            index_file=index_file,
            client_for=clients_for(regs),
            trusted=TRUSTED,
        )

    out = release()
    (result,) = out.cells
    assert result.status == "refused", result
    reasons = " ".join(result.reasons)
    assert f"stored attestation {regs.plain}/{repo}:sha256-{digest.split(':')[1]}.att#" in reasons
    assert "names 2 subjects; an attestation imagesmith accepts names exactly one" in reasons
    assert plain.manifest_digest(repo, "a") is None  # nothing tagged
    # the correct rerun: the runner's attestation of this digest alone
    good = collect_reports([tmp_path / "r"], TRUSTED)
    again = release_cells(
        [cell("a", targets(regs, repo)[:1])],
        matrix="t",
        reports=good,
        index_file=index_file,
        client_for=clients_for(regs),
        trusted=TRUSTED,
    )
    assert [c.status for c in again.cells] == ["promoted"], again.cells
    assert plain.manifest_digest(repo, "a") == digest


def _signed_release(
    regs: LocalRegistries, repo: str, tmp_path: Path, label: str, said: list[str] | None = None
) -> tuple[RegistryClient, Path, signing.SigningKey, Callable[[], None]]:
    """One passing candidate in the plain registry and the release of it signed with a fresh release key:
    (the plain client, the index file, the key, the release run — called once here, again by the caller)."""
    plain = regs.plain_client()
    digest = push_image(plain, repo, "a-candidate", f"{label} {uuid.uuid4()}")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed")
    index_file = tmp_path / "release" / "index.json"
    release_key = signing.generate_key()

    def release() -> None:
        release_cells(
            [cell("a", targets(regs, repo)[:1])],
            matrix="t",
            reports=collect_reports([tmp_path / "r"], TRUSTED),
            index_file=index_file,
            client_for=clients_for(regs),
            trusted=TRUSTED,
            sign_key=release_key,
            echo=(said if said is not None else []).append,
        ).raise_for_refusals()

    release()
    return plain, index_file, release_key, release


def test_release_publishes_serial_expiry_and_key_and_pick_trusts_it_on_first_use(
    regs: LocalRegistries, repo: str, tmp_path: Path, run_cli: Any
) -> None:
    """What release writes is what pick accepts by default: serial and expiry inside the signed bytes, the key
    beside the index (file: index.json.pub; artifact: its key layer), and the line a renter pastes (issue 34:
    the index by its repository with the key's fingerprint as the trust root)."""
    said: list[str] = []
    _, index_file, release_key, _ = _signed_release(regs, repo, tmp_path, "release then pick", said)
    doc = json.loads(index_file.read_text())
    assert doc["serial"] > 1_700_000_000
    assert doc["expires"] > doc["generated"]
    assert index_file.with_name("index.json.pub").read_bytes() == release_key.public.pem
    (line,) = [ln for ln in said if ln.startswith("renters: ")]
    pasted = f"oci://{regs.plain}/{repo}#{release_key.public.fingerprint}"
    assert line == f"renters: imagesmith pick --index {pasted} --pull"
    source = _source(regs, repo)
    refused = run_cli("index", source, "--insecure")  # the root of another publisher ($IMAGESMITH_INDEX_KEY)
    assert refused.exit_code == 2
    assert f"is {release_key.public.fingerprint}, not {KEY.public.fingerprint}" in refused.stderr
    res = run_cli("index", pasted.replace("oci://", "oci+http://"), "--insecure")  # the line, pasted
    assert res.exit_code == 0, res.stderr
    assert release_key.public.fingerprint in res.stderr
    assert f", serial {doc['serial']}, expires {doc['expires']}" in res.stdout


def test_a_rerun_past_half_the_validity_renews_and_re_signs_the_index(
    regs: LocalRegistries, repo: str, tmp_path: Path, run_cli: Any
) -> None:
    """What the nightly relies on: a release run with nothing new to release re-issues the index once less
    than half of its validity is left (serial up, expiry moved, signed again, published), so renters never
    see it expire while the nightly runs; a run before that changes nothing."""
    plain, index_file, release_key, release = _signed_release(regs, repo, tmp_path, "renew")
    first = json.loads(index_file.read_text())
    before = index_file.read_bytes(), plain.manifest_digest(repo, "release-index")
    release()  # the same day: nothing to renew, byte for byte
    assert (index_file.read_bytes(), plain.manifest_digest(repo, "release-index")) == before
    source = f"{_source(regs, repo)}#{release_key.public.fingerprint}"  # the root the release printed
    assert run_cli("index", source, "--insecure").exit_code == 0  # a renter has seen this one
    # ten days later (as far as the index can tell): less than half of its 14 days is left
    aged = dict(first, expires="2000-01-01T00:00:00Z")
    index_file.write_text(json.dumps(aged, indent=2) + "\n")
    release()
    renewed = json.loads(index_file.read_text())
    assert renewed["serial"] > first["serial"]
    assert renewed["expires"] > first["generated"]
    assert renewed["images"] == first["images"]
    res = run_cli("index", source, "--insecure", "--refresh")
    assert res.exit_code == 0, res.stderr
    assert f"serial {renewed['serial']}, expires {renewed['expires']}" in res.stdout


def test_a_signed_index_copied_to_another_repository_is_refused_there(
    regs: LocalRegistries, repo: str, tmp_path: Path, run_cli: Any
) -> None:
    """The publisher's own valid, current, signed index of one repository, copied by someone who can push to
    another repository of the same publisher (same key: signature, serial and expiry all pass): the index
    names where it is published (``published_to``, inside the signed bytes) and pick refuses it elsewhere."""
    plain, index_file, release_key, _ = _signed_release(regs, repo, tmp_path, "published_to")
    doc = json.loads(index_file.read_text())
    assert doc["published_to"] == [f"{regs.plain}/{repo}"]
    other = f"{repo}-other"
    body = index_file.read_bytes()
    envelope = index_file.with_name("index.json.sig").read_bytes().strip()
    publish_index(plain, other, body, envelope, release_key.public.pem)  # the copy
    pub = tmp_path / "release.pub"
    pub.write_bytes(release_key.public.pem)
    source = _source(regs, other)
    for command in (
        ["pick", "--index", source, *PICK, "--verify-key", str(pub)],
        ["index", source, "--insecure", "--verify-key", str(pub)],
        # the publisher's root, the copied key layer matches it: the same answer
        ["index", f"{source}#{release_key.public.fingerprint}", "--insecure"],
    ):
        _refused(
            run_cli(*command),
            source,
            f"signed for {regs.plain}/{repo}, not for {regs.plain}/{other}",
            "another repository's index",
        )
    ok = run_cli("index", _source(regs, repo), "--insecure", "--verify-key", str(pub))
    assert ok.exit_code == 0, ok.stderr


def test_a_key_layer_swapped_after_the_renter_verified_with_its_key_is_refused(
    regs: LocalRegistries, repo: str, tmp_path: Path, run_cli: Any
) -> None:
    """Re-check: the renter verified the index with the publisher's key (``--verify-key``, or
    ``$IMAGESMITH_INDEX_KEY`` in one shell); someone who can push to the repository then publishes a newer
    index signed by their own key with that key beside it. main took it on the next run without the key as a
    "first use" (exit 0, their key pinned from then on)."""
    source = _source(regs, repo)
    _publish(regs, repo, serial=20)
    pub = tmp_path / "release.pub"
    pub.write_bytes(KEY.public.pem)
    seen = run_cli("pick", "--index", source, *PICK, "--verify-key", str(pub))
    assert seen.exit_code == 0, seen.stderr
    evil_key = signing.generate_key()
    evil = dataclasses.replace(
        make_index(registries=[("evil", "generic", "evil.example.com/torch")]),
        registries=("evil.example.com",),
    )
    body, env = signed_bytes(evil, serial=30, key=evil_key)
    publish_index(regs.plain_client(), repo, body, env, evil_key.public.pem)
    for command in (
        ["pick", "--index", source, *PICK, "--refresh"],
        ["index", source, "--insecure", "--refresh"],
    ):
        _refused(
            run_cli(*command),
            source,
            f"is {evil_key.public.fingerprint}, not {KEY.public.fingerprint}",
            "the key that verified this source before",
            "--key-fingerprint sha256:NEW",
        )
    _publish(regs, repo, serial=40)  # the publisher's next index: the rerun works, by the pinned key
    ok = run_cli("pick", "--index", source, *PICK, "--refresh")
    assert ok.exit_code == 0, ok.stderr
    assert f"index key: {KEY.public.fingerprint} (ed25519, pinned in " in ok.stderr
    assert "evil.example.com" not in ok.stdout


def test_an_index_source_by_digest_is_refused_not_read_by_its_tag(
    regs: LocalRegistries, repo: str, run_cli: Any
) -> None:
    """main dropped ``@sha256:…`` and read the tag: asked for one index (an older one), it used another."""
    _publish(regs, repo, serial=10, index=make_index([("2.0.1", "11.7", "3.10")]))
    old = regs.plain_client().get_manifest(repo, "release-index").digest
    _publish(regs, repo, serial=20)
    source = f"{_source(regs, repo)}@{old}"
    res = run_cli("index", source, "--insecure")
    assert res.exit_code == 2, res.stdout + res.stderr
    assert f"error: --index {source}: an index is read by its tag, not by digest" in res.stderr
    assert "2.7.1" not in res.stdout
    ok = run_cli("index", _source(regs, repo), "--insecure")
    assert ok.exit_code == 0, ok.stderr
    assert "serial 20" in ok.stdout


def test_published_to_written_into_a_registry_index_is_not_signed_into_the_next_one(
    regs: LocalRegistries, repo: str, tmp_path: Path, run_cli: Any
) -> None:
    """Re-check of published_to: release --extend-from read the registry's index unverified and carried its
    ``published_to`` into the index it signs. Someone who can push to that registry added their repository
    there; the publisher's next signed index named it, and the publisher's current index copied into it
    passed pick (signature, serial, expiry, location). Now: carried only when the release key signed it."""
    plain = regs.plain_client()
    digest = push_image(plain, repo, "a-candidate", f"extend published_to {uuid.uuid4()}")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed")
    release_key = signing.generate_key()
    here = f"{regs.plain}/{repo}"
    other = f"{repo}-elsewhere"

    def release(index_file: Path, **kw: Any) -> list[str]:
        said: list[str] = []
        release_cells(
            [cell("a", targets(regs, repo)[:1])],
            matrix="t",
            reports=collect_reports([tmp_path / "r"], TRUSTED),
            index_file=index_file,
            client_for=clients_for(regs),
            trusted=TRUSTED,
            sign_key=release_key,
            echo=said.append,
            **kw,
        ).raise_for_refusals()
        return said

    release(tmp_path / "first" / "index.json")
    honest = json.loads((tmp_path / "first" / "index.json").read_text())
    assert honest["published_to"] == [here]
    # the push: the same index, its published_to naming the attacker's repository too (unsigned; or re-signed
    # by a key of theirs: the same answer)
    forged = json.dumps(dict(honest, published_to=sorted([here, f"{regs.plain}/{other}"]))).encode()
    attacker = signing.generate_key()
    for envelope in (None, signing.sign_envelope(forged, signing.INDEX_PAYLOAD_TYPE, attacker)):
        publish_index(plain, repo, forged, envelope, attacker.public.pem)
        fresh = tmp_path / f"fresh-{envelope is None}" / "index.json"
        said = release(fresh, extend_from="plain")
        assert json.loads(fresh.read_text())["published_to"] == [here]
        assert any(f"{regs.plain}/{other}) are not carried" in line for line in said), said
        # the publisher's current index, copied where the attacker can push: refused there
        publish_index(
            plain, other, fresh.read_bytes(), fresh.with_name("index.json.sig").read_bytes().strip(), None
        )
        pub = tmp_path / "release.pub"
        pub.write_bytes(release_key.public.pem)
        _refused(
            run_cli("index", _source(regs, other), "--insecure", "--verify-key", str(pub), "--refresh"),
            _source(regs, other),
            f"signed for {here}, not for {regs.plain}/{other}",
        )
    # the publisher's own signed index naming a second repository of theirs: carried, as before
    mine = json.dumps(dict(honest, published_to=sorted([here, f"{regs.plain}/{other}"]))).encode()
    publish_index(
        plain, repo, mine, signing.sign_envelope(mine, signing.INDEX_PAYLOAD_TYPE, release_key), None
    )
    said = release(tmp_path / "kept" / "index.json", extend_from="plain")
    assert json.loads((tmp_path / "kept" / "index.json").read_text())["published_to"] == sorted(
        [here, f"{regs.plain}/{other}"]
    )
    assert not any("are not carried" in line for line in said), said


# -- issue 34: the trust root a brand-new rental has, and pins per publisher, against a real registry --------


def test_a_new_rental_refuses_an_attacker_published_index_and_the_publishers_second_registry_is_covered(
    regs: LocalRegistries, repo: str, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main: a new rental (empty cache) running README's `pick --index oci://HOST/REPO --pull` pinned whatever
    key was published beside the index, and a pin of registry A made the same publisher's registry B a first
    use again."""
    monkeypatch.delenv("IMAGESMITH_INDEX_KEY")  # a brand-new rental: nothing named yet
    other = f"{repo}-b"
    a, b = _source(regs, repo), _source(regs, other)
    evil_key = signing.generate_key()
    evil = dataclasses.replace(
        make_index(registries=[("evil", "generic", "evil.example.com/torch")]),
        registries=("evil.example.com",),
    )
    body, env = signed_bytes(evil, serial=50, key=evil_key)
    publish_index(regs.plain_client(), repo, body, env, evil_key.public.pem)  # the attacker's, with its key
    refused = run_cli("pick", "--index", a, *PICK, "--pull")
    _refused(refused, a, "no trust root", evil_key.public.fingerprint, "--key-fingerprint")
    assert not list(Path("cache").rglob("*.trust.json"))  # nothing pinned
    rooted = run_cli("pick", "--index", f"{a}#{KEY.public.fingerprint}", *PICK)
    _refused(rooted, a, f"is {evil_key.public.fingerprint}, not {KEY.public.fingerprint} that ")
    # the publisher's index, published to both repositories; the renter pastes the fingerprint once, for A
    both = dataclasses.replace(make_index(), published_to=(f"{regs.plain}/{repo}", f"{regs.plain}/{other}"))
    body, env = signed_bytes(both, serial=60)
    for r in (repo, other):
        publish_index(regs.plain_client(), r, body, env, KEY.public.pem)
    ok = run_cli("pick", "--index", f"{a}#{KEY.public.fingerprint}", *PICK, "--refresh")
    assert ok.exit_code == 0, ok.stderr
    assert "docker pull docker.io/imagesmith/torch:" in ok.stdout
    assert len(list(Path("cache").rglob("*.trust.json"))) == 2  # A's pin, and B's from A's signed index
    # B after the pin of A: someone who can push to B serves its own index and key — refused, not a first use
    body_b, env_b = signed_bytes(
        dataclasses.replace(evil, published_to=both.published_to), serial=70, key=evil_key
    )
    publish_index(regs.plain_client(), other, body_b, env_b, evil_key.public.pem)
    _refused(
        run_cli("pick", "--index", b, *PICK, "--trust-first-use"),
        b,
        f"is {evil_key.public.fingerprint}, not {KEY.public.fingerprint}",
    )
    # the correct run: B serves the publisher's index, taken with no root by the pin A's index put there
    publish_index(regs.plain_client(), other, body, env, KEY.public.pem)
    fine = run_cli("pick", "--index", b, *PICK, "--refresh")
    assert fine.exit_code == 0, fine.stderr
    assert f"index key: {KEY.public.fingerprint} (ed25519, pinned in " in fine.stderr
