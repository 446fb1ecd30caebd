"""The trust root a brand-new rental has before its first pick (issue 34; imagesmith/indextrust.py): the
publisher's key named out of band by its fingerprint, pins per publisher, serials per key, no walked-up
project key. Each scripted attack is followed by the correct run that works.
tests/integration/test_index_trust_registry.py scripts the registry side."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.errors import ConfigError, IndexTrustError
from imagesmith.indextrust import Trust, TrustStore, renter_line, split_root
from imagesmith.pick import fetch_index
from imagesmith.pick.fetching import DOWNLOADS
from tests.indexkey import KEY, save_signed_index, signed_bytes
from tests.unit.test_pick import make_index

PICK = ("--driver", "580.95.05", "--gpu", "h100")
FP = KEY.public.fingerprint


@pytest.fixture(autouse=True)
def _own_cache_and_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.delenv("IMAGESMITH_INDEX_KEY", raising=False)
    monkeypatch.delenv("IMAGESMITH_INDEX", raising=False)
    monkeypatch.delenv("IMAGESMITH_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)


def _lines(text: str) -> list[str]:
    return [ln for ln in text.strip().splitlines() if ln]


def _records(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache").rglob("*.trust.json"))


def test_a_new_rental_refuses_an_attacker_published_index_and_key_then_the_root_works(
    tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main: a new rental (empty cache) pinned whatever key was published beside the index: an attacker who
    republished index, signature and key got exit 0 and its image pulled, with one note line."""
    evil = signing.generate_key()
    path = save_signed_index(make_index(), tmp_path / "index.json", key=evil)
    pulled: list[Any] = []
    from imagesmith import pick as picking

    monkeypatch.setattr(picking, "pull_image", lambda *a, **k: pulled.append(a))
    for command in (["pick", "--index", str(path), *PICK, "--pull"], ["index", str(path)]):
        res = run_cli(*command)
        assert res.exit_code == IndexTrustError.exit_code == 2, res.stderr
        error, fix = _lines(res.stderr)
        assert error.startswith(f"error: --index {path}: no trust root for this index")
        assert evil.public.fingerprint in error
        assert "nothing was pinned or pulled" in error
        assert "--index SRC#sha256:<fp>" in fix
        assert "--key-fingerprint" in fix
        assert "--trust-first-use" in fix
        assert res.stdout == ""
    assert pulled == []
    assert _records(tmp_path) == []
    # the attacker's index with the publisher's fingerprint as the root: refused, naming both
    for root in ([f"{path}#{FP}"], [str(path), "--key-fingerprint", FP]):
        res = run_cli("pick", "--index", *root, *PICK, "--pull")
        assert res.exit_code == 2, res.stderr
        assert f"is {evil.public.fingerprint}, not {FP} that " in res.stderr
        assert pulled == []
        assert _records(tmp_path) == []
    # the correct run: the publisher's index, its fingerprint pasted from the publisher's announcement
    save_signed_index(make_index(), path)
    ok = run_cli("pick", "--index", f"{path}#{FP}", *PICK)
    assert ok.exit_code == 0, ok.stderr
    assert (
        f"index key: {FP} (ed25519, published beside it, the fingerprint --index {path}#sha256:" in ok.stderr
    )
    assert "picked: " in ok.stdout
    # pinned now: the next run needs no root, and an attacker's key swap is refused
    again = run_cli("pick", "--index", str(path), *PICK)
    assert again.exit_code == 0, again.stderr
    assert f"index key: {FP} (ed25519, pinned in " in again.stderr
    save_signed_index(make_index(), path, serial=2, key=evil)
    swapped = run_cli("pick", "--index", str(path), *PICK)
    assert swapped.exit_code == 2
    assert "remove " not in swapped.stderr


@pytest.mark.parametrize("where", ["env", "config", "flag", "index"])
def test_each_place_a_root_is_named(
    tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json")
    args = ["pick", "--index", str(path), *PICK]
    if where == "env":
        monkeypatch.setenv("IMAGESMITH_INDEX_KEY", FP.upper().replace("SHA256", "sha256"))
    elif where == "config":
        (tmp_path / "config.toml").write_text(f'[release]\nindex_key = "{FP}"\n')
    elif where == "flag":
        args += ["--key-fingerprint", FP]
    else:
        monkeypatch.setenv("IMAGESMITH_INDEX", f"{path}#{FP}")
        args = ["pick", *PICK]
    res = run_cli(*args)
    assert res.exit_code == 0, res.stderr
    assert f"index key: {FP} (ed25519, published beside it" in res.stderr


def test_a_malformed_root_is_refused_not_dropped(tmp_path: Path, run_cli: Any) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json")
    for args in (["--index", f"{path}#sha256:abc"], ["--index", str(path), "--key-fingerprint", "md5:00"]):
        res = run_cli("pick", *args, *PICK)
        assert res.exit_code == 2, res.stderr
        assert "is not a key fingerprint" in res.stderr
    assert _records(tmp_path) == []
    with pytest.raises(ConfigError, match="not a key fingerprint"):
        split_root("oci://r.example/a#sha256:zz")
    assert split_root(f"oci://r.example/a#{FP.upper().replace('SHA256', 'sha256')}") == (
        "oci://r.example/a",
        FP,
    )
    assert split_root("oci://r.example/a") == ("oci://r.example/a", None)
    # the contradiction of two roots is said
    other = signing.generate_key().public.fingerprint
    res = run_cli("pick", "--index", f"{path}#{FP}", "--key-fingerprint", other, *PICK)
    assert res.exit_code == 2
    assert "differs from" in res.stderr


def test_trust_first_use_is_an_explicit_opt_in(tmp_path: Path, run_cli: Any) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json")
    res = run_cli("pick", "--index", str(path), *PICK, "--trust-first-use")
    assert res.exit_code == 0, res.stderr
    assert "note: first use of --index" in res.stderr
    assert "(--trust-first-use)" in res.stderr
    assert len(_records(tmp_path)) == 1


def test_the_same_publishers_second_registry_is_covered_by_the_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main: a pin was per source: the machine that pinned the publisher's key for registry A treated the same
    publisher's registry B as a first use again (whatever key B served was pinned)."""

    places = ("a.example/acme/torch", "b.example/acme/torch")
    served: dict[str, tuple[bytes, bytes, bytes]] = {}
    monkeypatch.setattr(DOWNLOADS, "oci", lambda source, **_: served[source.split("//")[1]])
    index = replace(make_index(), published_to=places)
    body, env = signed_bytes(index, serial=5)
    served["a.example/acme/torch"] = (body, env, KEY.public.pem)
    fetch_index(f"oci://a.example/acme/torch#{FP}", refresh=True)  # the root, once, for registry A
    evil = signing.generate_key()
    body_b, env_b = signed_bytes(index, serial=9, key=evil)
    served["b.example/acme/torch"] = (body_b, env_b, evil.public.pem)
    with pytest.raises(IndexTrustError, match=f"is {evil.public.fingerprint}, not {FP}") as info:
        fetch_index("oci://b.example/acme/torch", refresh=True)  # no root, no opt-in: the pin of A covers B
    assert info.value.fault == "key changed"
    with pytest.raises(IndexTrustError, match="not"):
        fetch_index("oci://b.example/acme/torch", refresh=True, trust=Trust(first_use=True))
    # the correct run: B serves the publisher's index, verified by the pin A's index put there
    served["b.example/acme/torch"] = (body, env, KEY.public.pem)
    notes: list[str] = []
    assert fetch_index("oci://b.example/acme/torch", refresh=True, note=notes.append).serial == 5
    assert notes[0].startswith(f"index key: {FP} (ed25519, pinned in ")
    assert "by the index of oci://a.example/acme/torch its key signed" in notes[0]
    # one record per repository the signed index names, each pinned to the publisher's key; none else
    records = _records(tmp_path)
    assert len(records) == 2
    assert {json.loads(r.read_text())["source"] for r in records} == {
        f"oci://{p}:release-index" for p in places
    }
    c = TrustStore(records[0].parent, "oci://c.example/acme/torch:release-index")
    assert c.pinned() is None
    assert not c.path.exists()


def test_a_planted_parent_imagesmith_toml_is_ignored_by_pick_and_locks_nothing_out(
    tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main: an imagesmith.toml in a parent folder with ``[release] index_key`` replaced the pinned key; the
    index it let in was recorded as the newest serial, so the real index was then refused as replayed."""
    path = save_signed_index(make_index(), tmp_path / "index.json", serial=10)
    assert run_cli("pick", "--index", f"{path}#{FP}", *PICK).exit_code == 0  # pinned, serial 10
    evil = signing.generate_key()
    (tmp_path / "evil.pub").write_bytes(evil.public.pem)
    (tmp_path / "imagesmith.toml").write_text('schema = 1\n[release]\nindex_key = "evil.pub"\n')
    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    save_signed_index(make_index(), path, serial=4_000_000_000 - 1, key=evil, publish_key=False)
    res = run_cli("pick", "--index", str(path), *PICK)
    assert res.exit_code == 2  # the pin, not the planted key, verifies: the attacker's index is refused
    assert "bad index signature" in res.stderr
    assert "evil.pub" not in res.stderr
    # the correct run: the publisher's next index is taken
    save_signed_index(make_index(), path, serial=11)
    ok = run_cli("pick", "--index", str(path), *PICK)
    assert ok.exit_code == 0, ok.stderr
    assert f"index key: {FP} (ed25519, pinned in " in ok.stderr


def test_serials_are_per_key_another_keys_index_never_locks_the_pinned_one_out(
    tmp_path: Path, run_cli: Any
) -> None:
    """A serial is recorded for the key that verified it: an index verified by another key the renter named
    once (``--verify-key``) never makes the pinned key's real index look replayed."""
    path = save_signed_index(make_index(), tmp_path / "index.json", serial=10)
    assert run_cli("pick", "--index", f"{path}#{FP}", *PICK).exit_code == 0
    other = signing.generate_key()
    (tmp_path / "other.pub").write_bytes(other.public.pem)
    save_signed_index(make_index(), path, serial=50, key=other, publish_key=False)
    res = run_cli("pick", "--index", str(path), *PICK, "--verify-key", str(tmp_path / "other.pub"))
    assert res.exit_code == 0, res.stderr
    assert f"not the key pinned for this source ({FP}): pin kept" in res.stderr
    (record,) = _records(tmp_path)
    data = json.loads(record.read_text())
    assert data["fingerprint"] == FP
    assert data["newest"]["serial"] == 10
    assert data["by_key"][other.public.fingerprint]["serial"] == 50
    # the publisher's index, serial 11 (below 50): taken by the pin
    save_signed_index(make_index(), path, serial=11)
    ok = run_cli("pick", "--index", str(path), *PICK)
    assert ok.exit_code == 0, ok.stderr
    # and the pinned key's own replay protection still holds
    save_signed_index(make_index(), path, serial=10)
    assert "older than serial 11" in run_cli("pick", "--index", str(path), *PICK).stderr


def test_release_prints_the_line_a_renter_pastes() -> None:
    line = renter_line(("b.example/acme/torch", "a.example/acme/torch"), FP)
    assert line == f"renters: imagesmith pick --index oci://a.example/acme/torch#{FP} --pull"
    source, root = split_root(line.split("--index ", 1)[1].split()[0])
    assert (source, root) == ("oci://a.example/acme/torch", FP)


# -- rotation and freshness (issue 34, item 3: as TUF does them) --------------------------------------------


def _save(path: Path, index: Any, keys: list[Any], published: Any, *, serial: int) -> None:
    from imagesmith.index import dump_index
    from tests.indexkey import FAR

    body = dump_index(replace(index, serial=serial, expires=FAR)).encode()
    path.write_bytes(body)
    path.with_name(path.name + ".sig").write_bytes(
        signing.sign_envelope_by(body, signing.INDEX_PAYLOAD_TYPE, keys)
    )
    path.with_name(path.name + ".pub").write_bytes(published.public.pem)


def test_a_rotation_the_pinned_key_signs_moves_the_pin_an_unsigned_claim_is_refused(
    tmp_path: Path, run_cli: Any
) -> None:
    """main: an index signed by both the old (pinned) and the new key was refused, and the only way out —
    deleting the record — was what an attacker's message asked for too. TUF: the new root is signed by the
    old root's key and its own; a claim the old key did not sign is no rotation."""
    path = save_signed_index(make_index(), tmp_path / "index.json", serial=10)
    assert run_cli("pick", "--index", f"{path}#{FP}", *PICK).exit_code == 0  # KEY pinned
    new = signing.generate_key()
    rotating = replace(make_index(), successor_key=new.public.fingerprint)
    # unsigned claims, each refused and nothing moved: the new key alone names itself; the pinned key names a
    # successor that did not sign; both sign, but the index names no successor
    for index, keys, said in (
        (rotating, [new], f"is {new.public.fingerprint}, not {FP}"),
        (rotating, [KEY], "but that key did not sign it"),
        (make_index(), [KEY, new], f"is {new.public.fingerprint}, not {FP}"),
    ):
        _save(path, index, keys, new, serial=11)
        res = run_cli("pick", "--index", str(path), *PICK)
        assert res.exit_code == 2, res.stderr
        assert said in res.stderr
        (record,) = _records(tmp_path)
        assert json.loads(record.read_text())["fingerprint"] == FP
    # the rotation: the pinned key and its successor sign an index naming it; the pin moves
    _save(path, rotating, [KEY, new], new, serial=12)
    moved = run_cli("pick", "--index", str(path), *PICK)
    assert moved.exit_code == 0, moved.stderr
    assert f"key rotation: the pin moves from {FP} to {new.public.fingerprint}" in moved.stderr
    (record,) = _records(tmp_path)
    data = json.loads(record.read_text())
    assert (data["fingerprint"], data["chain"]) == (new.public.fingerprint, [FP, new.public.fingerprint])
    # the publisher's next index, signed by the new key alone: taken by the pin — also for a renter whose
    # root still names the old key (the pin descends from it)
    _save(path, make_index(), [new], new, serial=13)
    for args in ([str(path)], [f"{path}#{FP}"]):
        ok = run_cli("pick", "--index", *args, *PICK)
        assert ok.exit_code == 0, ok.stderr
        assert f"index key: {new.public.fingerprint} (" in ok.stderr
    # the old key, now retired, publishing beside a newer index it alone signed: refused
    _save(path, make_index(), [KEY], KEY, serial=14)
    assert run_cli("pick", "--index", str(path), *PICK).exit_code == 2


def test_a_valid_signature_by_the_pinned_key_among_others_verifies(tmp_path: Path, run_cli: Any) -> None:
    path = tmp_path / "index.json"
    other = signing.generate_key()
    _save(path, make_index(), [other, KEY], KEY, serial=3)
    res = run_cli("pick", "--index", f"{path}#{FP}", *PICK)
    assert res.exit_code == 0, res.stderr
    _save(path, make_index(), [other], KEY, serial=4)  # the other key alone: not the pinned key's index
    assert "no signature verifies with a trusted key" in run_cli("pick", "--index", str(path), *PICK).stderr


def test_a_frozen_index_past_its_freshness_bound_is_refused(tmp_path: Path, run_cli: Any) -> None:
    """main: a renter that never saw the newest index took an older unexpired one for up to 14 days. The
    signed ``fresh_until`` (36 h after release issued it; the nightly renews it) bounds that window."""
    import datetime

    from imagesmith.index import DEFAULT_FRESH_FOR, issued

    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    week2 = datetime.timedelta(days=14)
    old = issued(make_index(), previous=0, valid_for=week2, now=now - datetime.timedelta(hours=40))
    assert old.expires > now.strftime("%Y-%m-%dT%H:%M:%SZ")  # not expired: only frozen
    path = tmp_path / "index.json"
    _save(path, old, [KEY], KEY, serial=old.serial)
    res = run_cli("pick", "--index", f"{path}#{FP}", *PICK)
    assert res.exit_code == 2, res.stderr
    assert f"was fresh until {old.fresh_until}" in res.stderr
    assert "a frozen copy" in res.stderr
    assert datetime.timedelta(hours=36) == DEFAULT_FRESH_FOR
    # the correct run: the index the nightly re-issued
    fresh = issued(old, previous=old.serial, valid_for=week2, now=now)
    _save(path, fresh, [KEY], KEY, serial=fresh.serial)
    ok = run_cli("pick", "--index", f"{path}#{FP}", *PICK)
    assert ok.exit_code == 0, ok.stderr
