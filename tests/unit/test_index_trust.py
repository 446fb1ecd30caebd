"""pick and index trust a release index only when a known key signed it, it is not older than one seen before
and it has not expired (issue 25; imagesmith/indextrust.py). File and http sources here;
tests/integration/test_index_trust_registry.py scripts the same attacks against the local registries.
"""

from __future__ import annotations

import datetime
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.errors import ConfigError, IndexTrustError
from imagesmith.index import issued, parse_index, renewal_due
from imagesmith.indextrust import Trust
from imagesmith.pick import fetch_index
from imagesmith.pick.fetching import DOWNLOADS
from tests.indexkey import KEY, save_signed_index, signed_bytes
from tests.localhttp import QuietHTTPServer
from tests.repo import REPO
from tests.unit.test_pick import make_index

#: pick's host flags; --trust-first-use: these tests start from a first use (issue 34 made it opt-in; the
#: refusal without it is tested in test_trust_root.py)
PICK = ("--driver", "580.95.05", "--gpu", "h100", "--trust-first-use")
#: fetch_index's first use, opted in
TOFU = Trust(first_use=True)


@pytest.fixture(autouse=True)
def _own_cache_and_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.delenv("IMAGESMITH_INDEX_KEY", raising=False)
    monkeypatch.delenv("IMAGESMITH_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)  # no imagesmith.toml above: no project key


def _lines(text: str) -> list[str]:
    return [ln for ln in text.strip().splitlines() if ln]


# -- key sources ---------------------------------------------------------------------------------------------


def test_an_unsigned_index_is_refused_naming_how_to_get_the_key(tmp_path: Path, run_cli: Any) -> None:
    """main picked from an unsigned index (whose own registries list it trusts) without a word, exit 0."""
    path = tmp_path / "index.json"
    path.write_bytes(signed_bytes(make_index())[0])
    for command in (["pick", "--index", str(path), *PICK], ["index", str(path)]):
        res = run_cli(*command)
        assert res.exit_code == IndexTrustError.exit_code == 2, res.stderr
        error, fix = _lines(res.stderr)
        assert error.startswith(f"error: --index {path}: no key to verify the release index with")
        assert "--verify-key F.pub" in fix
        assert "[release] index_key" in fix
        assert "--no-verify" in fix
        assert res.stdout == ""
    again = run_cli("pick", "--index", str(path), *PICK, "--no-verify")  # the rerun the fix names works ...
    assert again.exit_code == 0, again.stderr
    assert again.stderr.startswith(f"warning: --no-verify: the release index {path} is used without checking")
    twice = run_cli("pick", "--index", str(path), *PICK, "--no-verify")  # ... and warns on every run
    assert "warning: --no-verify" in twice.stderr
    conflict = run_cli("pick", "--index", str(path), *PICK, "--no-verify", "--verify-key", "x.pub")
    assert conflict.exit_code == 2
    assert "contradict" in conflict.stderr


def test_first_use_pins_the_published_key_and_prints_its_fingerprint(tmp_path: Path, run_cli: Any) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json")
    first = run_cli("pick", "--index", str(path), *PICK)
    assert first.exit_code == 0, first.stderr
    (note,) = [ln for ln in _lines(first.stderr) if KEY.public.fingerprint in ln]
    assert note.startswith(f"note: first use of --index {path}: trusting the key published beside it")
    assert "check this fingerprint with the publisher" in note
    second = run_cli("pick", "--index", str(path), *PICK)
    assert f"index key: {KEY.public.fingerprint} (ed25519, pinned on first use in " in second.stderr
    # the publisher's key "changes": the index and the key beside it replaced by someone else's
    other = signing.generate_key()
    save_signed_index(make_index(), path, serial=2, key=other)
    swapped = run_cli("pick", "--index", str(path), *PICK)
    assert swapped.exit_code == 2
    error, fix = _lines(swapped.stderr)
    assert other.public.fingerprint in error
    assert KEY.public.fingerprint in error
    assert "the key pinned for this source on first use" in error
    assert "--key-fingerprint sha256:NEW" in fix
    assert "remove " not in fix  # issue 34: the way out an attacker's message asks for is not offered
    # the fix: the new key named explicitly (after checking it with the publisher)
    new_pub = tmp_path / "new.pub"
    new_pub.write_bytes(other.public.pem)
    fixed = run_cli("pick", "--index", str(path), *PICK, "--verify-key", str(new_pub))
    assert fixed.exit_code == 0, fixed.stderr
    assert f"index key: {other.public.fingerprint} (ecdsa-p256, from --verify-key {new_pub})" in fixed.stderr


def test_a_signature_by_another_key_than_the_published_one_is_refused(tmp_path: Path, run_cli: Any) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json", key=signing.generate_key())
    path.with_name("index.json.pub").write_bytes(KEY.public.pem)  # a key beside it that did not sign it
    res = run_cli("pick", "--index", str(path), *PICK)
    assert res.exit_code == 2
    assert "bad index signature" in res.stderr
    assert "no signature verifies" in res.stderr


@pytest.mark.parametrize("form", ["path", "pem", "relative"])
def test_the_key_from_the_user_config(tmp_path: Path, run_cli: Any, form: str) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json", publish_key=False)
    (tmp_path / "keys").mkdir()
    pub = tmp_path / "keys" / "release.pub"
    pub.write_bytes(KEY.public.pem)
    value = {"path": str(pub), "pem": KEY.public.pem.decode(), "relative": "keys/release.pub"}[form]
    (tmp_path / "config.toml").write_text(f"[release]\nindex_key = '''{value}'''\n")
    res = run_cli("pick", "--index", str(path), *PICK)
    assert res.exit_code == 0, res.stderr
    assert (
        f"index key: {KEY.public.fingerprint} (ed25519, from {tmp_path / 'config.toml'}: release.index_key"
        in (res.stderr)
    )
    stranger = tmp_path / "stranger.pub"
    stranger.write_bytes(signing.generate_key().public.pem)
    refused = run_cli("pick", "--index", str(path), *PICK, "--verify-key", str(stranger))  # the flag wins
    assert refused.exit_code == 2
    assert "bad index signature" in refused.stderr


def test_the_key_from_the_project_and_the_order_of_sources(
    tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project's ``[release] index_key`` counts only for the project the renter names (``--project``,
    $IMAGESMITH_PROJECT): one found by walking up from the working directory never does (issue 34)."""
    path = save_signed_index(make_index(), tmp_path / "index.json", publish_key=False)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "release.pub").write_bytes(KEY.public.pem)
    (tmp_path / "imagesmith.toml").write_text('schema = 1\n[release]\nindex_key = "keys/release.pub"\n')
    walked = run_cli("index", str(path))  # the project file is here, but not named
    assert walked.exit_code == 2
    assert "release.index_key" not in walked.stderr
    monkeypatch.setenv("IMAGESMITH_PROJECT", str(tmp_path))
    res = run_cli("index", str(path))
    assert res.exit_code == 0, res.stderr
    assert f"from {tmp_path / 'imagesmith.toml'}: release.index_key" in res.stderr
    assert "serial 1, expires 2099-12-31T23:59:59Z" in res.stdout
    stranger = tmp_path / "stranger.pub"
    stranger.write_bytes(signing.generate_key().public.pem)
    (tmp_path / "config.toml").write_text(f'[release]\nindex_key = "{stranger}"\n')  # user config > project
    assert run_cli("index", str(path)).exit_code == 2
    monkeypatch.setenv("IMAGESMITH_INDEX_KEY", str(tmp_path / "keys" / "release.pub"))  # env > user config
    ok = run_cli("index", str(path))
    assert ok.exit_code == 0
    assert "from $IMAGESMITH_INDEX_KEY" in ok.stderr


# -- serial and expiry ---------------------------------------------------------------------------------------


def test_a_replayed_older_index_is_refused_and_a_newer_one_accepted(tmp_path: Path, run_cli: Any) -> None:
    path = tmp_path / "index.json"
    save_signed_index(make_index(), path, serial=5)
    assert run_cli("pick", "--index", str(path), *PICK).exit_code == 0
    save_signed_index(make_index(), path, serial=4)  # validly signed, older: a replay
    res = run_cli("pick", "--index", str(path), *PICK)
    assert res.exit_code == 2
    error, fix = _lines(res.stderr)[-2:]
    assert f"error: --index {path}: the index served has serial 4" in error
    assert "older than serial 5" in error
    assert "a replayed older index" in error
    assert "another registry of the publisher" in fix
    save_signed_index(make_index(), path, serial=6)
    assert run_cli("pick", "--index", str(path), *PICK).exit_code == 0
    save_signed_index(make_index([("2.4.1", "12.1", "3.11")]), path, serial=6)  # same serial, other bytes
    res = run_cli("pick", "--index", str(path), *PICK)
    assert res.exit_code == 2
    assert "two different indexes carry serial 6" in res.stderr


def test_an_expired_index_is_refused_with_its_date(tmp_path: Path, run_cli: Any) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json", expires="2026-01-01T00:00:00Z")
    res = run_cli("pick", "--index", str(path), *PICK)
    assert res.exit_code == 2
    error, fix = _lines(res.stderr)[-2:]
    assert "the index expired on 2026-01-01T00:00:00Z (serial 1, written " in error
    assert "it is now 20" in error
    assert "renews and re-signs" in fix
    save_signed_index(make_index(), path, serial=2)  # the publisher's renewed index
    assert run_cli("pick", "--index", str(path), *PICK).exit_code == 0


def test_an_index_whose_serial_lies_past_the_clock_is_refused_and_not_recorded(tmp_path: Path) -> None:
    """Serials are the times release wrote them. main took a signed index with a serial decades ahead (a
    release host whose clock ran ahead) and recorded it as the newest: every later index, by a release with a
    right clock (which does not count up from such a serial), was then refused as a replay."""
    from imagesmith.index import MAX_SERIAL

    now = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)
    clock = int(now.timestamp())
    trust = Trust(now=now, first_use=True)
    path = tmp_path / "index.json"
    for serial, when in ((clock + 2 * 86400, "2026-12-03T12:00:00Z"), (MAX_SERIAL, "past the year 9999")):
        save_signed_index(make_index(), path, serial=serial)
        with pytest.raises(IndexTrustError) as err:
            fetch_index(str(path), trust=trust)
        assert err.value.message.startswith(
            f"--index {path}: the index's serial {serial} is the time {when}, more than a day after now "
            "(2026-12-01T12:00:00Z)"
        )
        assert "check this host's clock" in (err.value.hint or "")
        assert not list((tmp_path / "cache").rglob("*.trust.json"))  # nothing recorded
    save_signed_index(make_index(), path, serial=clock + 3600)  # a clock an hour off is no problem
    assert fetch_index(str(path), trust=trust).serial == clock + 3600
    save_signed_index(make_index(), path, serial=clock + 7200)  # nor is the next release
    assert fetch_index(str(path), trust=trust).serial == clock + 7200


def test_a_signed_index_without_serial_or_expiry_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    body = signed_bytes(make_index())[0].replace(b'  "serial": 1,\n', b"")
    path.write_bytes(body)
    path.with_name("index.json.sig").write_bytes(signing.sign_envelope(body, signing.INDEX_PAYLOAD_TYPE, KEY))
    path.with_name("index.json.pub").write_bytes(KEY.public.pem)
    with pytest.raises(IndexTrustError, match="carries no serial or expiry"):
        fetch_index(str(path), trust=TOFU)


def test_serial_and_expiry_are_inside_the_signed_bytes(tmp_path: Path) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json", expires="2026-01-01T00:00:00Z")
    path.write_bytes(path.read_bytes().replace(b"2026-01-01T00:00:00Z", b"2099-01-01T00:00:00Z"))
    with pytest.raises(IndexTrustError, match="signs another index than the one served"):
        fetch_index(str(path), trust=TOFU)


@pytest.fixture
def http_index(tmp_path: Path) -> Iterator[tuple[str, dict[str, bytes]]]:
    files: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path)
            self.send_response(503 if "/down" in files else 200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/index.json", files
    server.shutdown()
    server.server_close()


def _serve(files: dict[str, bytes], serial: int, **kw: Any) -> bytes:
    body, envelope = signed_bytes(make_index(), serial=serial, **kw)
    files.update({"/index.json": body, "/index.json.sig": envelope, "/index.json.pub": KEY.public.pem})
    return body


def test_refresh_does_not_replace_a_newer_cached_index_with_an_older_one(
    http_index: tuple[str, dict[str, bytes]],
) -> None:
    """main's `pick --refresh` / `index --refresh` replaced the cached newer index silently."""
    from imagesmith import pick as picking

    url, files = http_index
    newer = _serve(files, 7)
    notes: list[str] = []
    assert fetch_index(url, insecure=True, note=notes.append, trust=TOFU).serial == 7
    assert notes[0].startswith(f"note: first use of --index {url}: trusting the key published beside it")
    _serve(files, 3)  # the mirror now serves an older, validly signed index
    for _ in range(2):
        with pytest.raises(IndexTrustError, match=r"serial 3 .* older than serial 7") as info:
            fetch_index(url, insecure=True, refresh=True, trust=TOFU)
        assert info.value.fault == "replayed"  # what it is about, as a field (never decided on the text)
    assert picking._cache_path(url).read_bytes() == newer  # the newer one stays cached
    assert fetch_index(url, insecure=True, trust=TOFU).serial == 7  # and answers within its hour
    _serve(files, 8)
    assert fetch_index(url, insecure=True, refresh=True, trust=TOFU).serial == 8  # a newer one is taken


def test_an_expired_cached_copy_is_not_used_when_the_source_is_down(
    http_index: tuple[str, dict[str, bytes]],
) -> None:
    url, files = http_index
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    _serve(files, 1, expires=soon.strftime("%Y-%m-%dT%H:%M:%SZ"))
    fetch_index(url, insecure=True, trust=TOFU)
    later = Trust(now=soon + datetime.timedelta(seconds=1))
    files["/down"] = b""  # the source fails (HTTP 503): the cached copy would answer, but it has expired
    with pytest.raises(IndexTrustError, match="the index expired on") as info:
        fetch_index(url, insecure=True, trust=later, ttl_s=0, warn=lambda _: None)
    assert info.value.fault == "expired"


# -- the sample index, and what release writes ---------------------------------------------------------------


def test_the_sample_index_is_signed_by_the_sample_key_far_from_expiry(run_cli: Any) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "sign_sample_index.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, (
        done.stdout + done.stderr
    )  # committed = what the script writes, byte for byte
    sample = REPO / "docs" / "examples" / "release-index.json"
    index = parse_index(sample.read_bytes(), source="sample")
    assert index.serial == 2  # 1 until issue 31 renamed the kind of its Aliyun copies
    assert index.expires >= "2099"
    res = run_cli("pick", "--index", str(sample), "--verify-key", f"{sample}.pub", *PICK)
    assert res.exit_code == 0, res.stderr
    pub = signing.parse_public_key((REPO / "docs/examples/release-index.json.pub").read_bytes(), source="s")
    assert _lines(res.stderr) == [f"index key: {pub.fingerprint} (ed25519, from --verify-key {sample}.pub)"]


def test_release_issues_a_higher_serial_and_renews_past_half_its_validity() -> None:
    now = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
    week2 = datetime.timedelta(days=14)
    first = issued(make_index(), previous=0, valid_for=week2, now=now)
    assert first.serial == int(now.timestamp())
    assert (first.generated, first.expires) == ("2026-12-01T12:00:00Z", "2026-12-15T12:00:00Z")
    assert issued(first, previous=first.serial, valid_for=week2, now=now).serial == first.serial + 1
    assert first.fresh_until == "2026-12-03T00:00:00Z"  # issue 34: 36 h, the freshness bound
    assert not renewal_due(first, week2, now + datetime.timedelta(hours=17))
    assert renewal_due(first, week2, now + datetime.timedelta(hours=19))  # less than half of 36 h left
    unbounded = replace(first, fresh_until="2099-01-01T00:00:00Z")
    assert not renewal_due(unbounded, week2, now + datetime.timedelta(days=6))
    assert renewal_due(unbounded, week2, now + datetime.timedelta(days=8))
    assert renewal_due(replace(first, serial=0, expires=""), week2, now)
    # a stale base (an older checkout's index file) still gets a serial above anything issued before now
    assert issued(replace(first, serial=3), previous=3, valid_for=week2, now=now).serial > 3
    # a planted base serial far ahead of the clock does not run the serials up to the maximum
    from imagesmith.index import MAX_SERIAL

    assert issued(first, previous=MAX_SERIAL - 1, valid_for=week2, now=now).serial == int(now.timestamp())


@pytest.mark.parametrize(("value", "ok"), [("14d", True), ("36h", True), ("0d", False), ("2w", False)])
def test_index_valid_for_in_the_project(tmp_path: Path, value: str, ok: bool) -> None:
    from imagesmith.project import load_project

    (tmp_path / "imagesmith.toml").write_text(f'schema = 1\n[release]\nindex_valid_for = "{value}"\n')
    if ok:
        want = datetime.timedelta(days=14) if value == "14d" else datetime.timedelta(hours=36)
        assert load_project(tmp_path / "imagesmith.toml").index_valid_for == want
    else:
        with pytest.raises(ConfigError, match="index_valid_for"):
            load_project(tmp_path / "imagesmith.toml")


def test_a_damaged_trust_record_is_one_error_with_a_fix(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json")
    assert run_cli("pick", "--index", str(path), *PICK).exit_code == 0
    (record,) = (tmp_path / "cache" / "imagesmith" / "index").glob("*.trust.json")
    data = json.loads(record.read_text())
    assert data["fingerprint"] == KEY.public.fingerprint
    assert data["newest"]["serial"] == 1
    record.write_text("{not json")
    res = run_cli("pick", "--index", str(path), *PICK)
    assert res.exit_code == 2
    assert "cannot be read" in res.stderr
    assert f"remove {record}" in res.stderr


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda d: [d], "a JSON list, not an object"),
        (lambda d: {}, "it names no source"),
        (lambda d: {**d, "source": "file:/elsewhere"}, "its source is 'file:/elsewhere'"),
        (lambda d: {**d, "newest": {**d["newest"], "serial": 10.0}}, "newest.serial is 10.0"),
        (lambda d: {**d, "newest": {**d["newest"], "serial": "10"}}, "newest.serial is '10'"),
        (lambda d: {**d, "newest": {**d["newest"], "serial": True}}, "newest.serial is True"),
        (lambda d: {**d, "newest": [d["newest"]]}, "newest is not an object"),
        (lambda d: {**d, "key": 5}, "key is not a string"),
        (lambda d: {**d, "fingerprint": "sha256:" + "0" * 64}, "the pinned key and its fingerprint disagree"),
    ],
)
def test_a_trust_record_of_another_shape_is_refused_not_read_as_nothing_seen(
    tmp_path: Path, run_cli: Callable[..., Any], damage: Callable[[Any], Any], problem: str
) -> None:
    """main read a trust record that is JSON but not what it writes (a list, another source, a serial that is
    no integer) as "nothing seen": a replayed older index and an index by another key published beside it
    were taken, and recorded over it as the newest."""
    path = save_signed_index(make_index(), tmp_path / "index.json", serial=10)
    assert run_cli("pick", "--index", str(path), *PICK).exit_code == 0
    (record,) = (tmp_path / "cache" / "imagesmith" / "index").glob("*.trust.json")
    good = json.loads(record.read_text())
    for serial, key in ((3, KEY), (11, signing.generate_key())):  # a replay; a key swapped beside the index
        record.write_text(json.dumps(damage(good)))
        save_signed_index(make_index(), path, serial=serial, key=key)
        res = run_cli("pick", "--index", str(path), *PICK)
        assert res.exit_code == 2, res.stderr
        error, fix = _lines(res.stderr)
        assert error.startswith(
            f"error: --index {path}: the trust record {record} is not one imagesmith writes ({problem}"
        )
        assert fix.strip().startswith(f"fix: remove {record}")
        assert json.loads(record.read_text()) == damage(good)  # nothing recorded over it
    record.unlink()  # the fix: the next run pins the published key again
    save_signed_index(make_index(), path, serial=12)
    assert run_cli("pick", "--index", str(path), *PICK).exit_code == 0


def test_a_pick_from_bytes_verified_before_loads_no_crypto(tmp_path: Path) -> None:
    """The cached (or unchanged file) index whose exact bytes the same key verified before is not verified
    again: no `cryptography` import on that path (tens of ms of pick's start-up); expiry still counts."""
    path = save_signed_index(make_index(), tmp_path / "index.json")
    code = (
        "import sys; from imagesmith.pick import fetch_index; from imagesmith.indextrust import Trust; "
        f"fetch_index({str(path)!r}, note=print, trust=Trust(first_use=True)); "
        "print(any(m.startswith('cryptography') for m in sys.modules))"
    )
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        for _ in range(2)
    ]
    first, second = (r.stdout.splitlines() for r in runs)
    assert first[0].startswith("note: first use of --index")
    assert first[1] == "True"
    assert second[0].startswith(f"index key: {KEY.public.fingerprint} (ed25519, pinned on first use in ")
    assert second[1] == "False"
    path.write_bytes(path.read_bytes().replace(b"2.11.0", b"2.11.1"))  # other bytes: verified again, refused
    with pytest.raises(IndexTrustError, match="signs another index"):
        fetch_index(str(path), trust=TOFU)


def test_bytes_verified_before_but_served_without_their_signature_are_refused(tmp_path: Path) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json")
    assert fetch_index(str(path), trust=TOFU).serial == 1
    path.with_name("index.json.sig").unlink()  # the same index, its signature gone
    with pytest.raises(IndexTrustError, match="the index is not signed") as info:
        fetch_index(str(path), trust=TOFU)
    assert info.value.fault == "not signed"


@pytest.mark.parametrize("beside", ["index.json.pub", "index.json.sig"])
def test_a_device_beside_the_index_is_not_read_into_memory(tmp_path: Path, beside: str) -> None:
    path = save_signed_index(make_index(), tmp_path / "index.json")
    (tmp_path / beside).unlink()
    (tmp_path / beside).symlink_to("/dev/zero")  # endless bytes: never opened (not a regular file), refused
    with pytest.raises(IndexTrustError) as info:
        fetch_index(str(path), trust=TOFU)
    assert info.value.fault == ("no key" if beside.endswith(".pub") else "not signed")


def test_one_artifact_is_one_trust_record_however_its_source_is_spelled() -> None:
    from imagesmith.pick import _trust_key

    spellings = {
        "oci://Registry.example:5000/acme/torch",
        "oci://registry.example:5000/acme/torch:release-index",
        "oci+http://registry.example:5000/acme/torch",
    }
    assert {_trust_key(s) for s in spellings} == {"oci://registry.example:5000/acme/torch:release-index"}
    assert _trust_key("oci://r.example/acme/torch:other") != _trust_key("oci://r.example/acme/torch")


def test_index_copies_and_pinned_keys_live_under_imagesmith_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., Any]
) -> None:
    """$IMAGESMITH_CACHE moves every cache of imagesmith: the index's pinned key and newest serial too (pick
    wrote them under ~/.cache whatever the variable said)."""
    monkeypatch.setenv("IMAGESMITH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    examples = REPO / "docs" / "examples"
    out = run_cli(
        "pick",
        "--index",
        str(examples / "release-index.json"),
        "--nvidia-smi",
        str(examples / "nvidia-smi-h200.txt"),
        "--trust-first-use",
    )
    assert out.exit_code == 0, out.stderr
    assert "trusting the key published beside it" in out.stderr
    assert list((tmp_path / "cache" / "index").glob("*.trust.json"))
    assert not (tmp_path / "xdg").exists()


def test_published_to_is_read_checked_and_compared_in_one_form() -> None:
    """``published_to`` (inside the signed bytes): repositories as host/repository, each once; a source's
    host/repository compared in the one form :func:`index_location` writes (Docker Hub's aliases, host
    case)."""
    from imagesmith.errors import ConfigError
    from imagesmith.index import dump_index, index_location
    from imagesmith.indextrust import check_location

    assert index_location("Registry.Example.COM:5000", "acme/torch") == "registry.example.com:5000/acme/torch"
    assert index_location("index.docker.io", "acme/torch") == "docker.io/acme/torch"
    assert index_location("docker.io", "torch") == "docker.io/library/torch"
    index = replace(make_index(), published_to=("ghcr.io/acme/torch", "docker.io/acme/torch"))
    back = parse_index(dump_index(index), source="i.json")
    assert back.published_to == ("docker.io/acme/torch", "ghcr.io/acme/torch")
    check_location(back, "ghcr.io/acme/torch", source="oci://ghcr.io/acme/torch")
    with pytest.raises(
        IndexTrustError, match=re.escape("signed for docker.io/acme/torch, ghcr.io/acme/torch, not for ")
    ):
        check_location(back, "ghcr.io/evil/torch", source="oci://ghcr.io/evil/torch")
    check_location(make_index(), "ghcr.io/evil/torch", source="x")  # written before the field: taken
    doc = json.loads(dump_index(index))
    for bad, words in (
        (["ghcr.io/acme/torch", "ghcr.io/acme/torch"], "repositories repeat"),
        (["https://ghcr.io/acme/torch"], "is not a registry host[:port]/repository"),
        (["ghcr.io/acme/torch:release-index"], "is not a registry host[:port]/repository"),
        (["ghcr.io"], "is not a registry host[:port]/repository"),
    ):
        with pytest.raises(ConfigError, match=re.escape(words)):
            parse_index(json.dumps(dict(doc, published_to=bad)), source="i.json")


# -- re-check (issue 25): the key a source is known by, the trust record, one source however spelled ---------


def test_a_key_that_verified_the_source_is_its_pin_a_published_other_key_is_refused(
    tmp_path: Path, run_cli: Any
) -> None:
    """main: after the publisher's key verified the index (``--verify-key``, ``$IMAGESMITH_INDEX_KEY`` in one
    shell), a later run without it took an index and a key layer someone else signed and published as "first
    use" (exit 0, the attacker's key pinned)."""
    path = save_signed_index(make_index(), tmp_path / "index.json", serial=10, publish_key=False)
    pub = tmp_path / "release.pub"
    pub.write_bytes(KEY.public.pem)
    first = run_cli("index", str(path), "--verify-key", str(pub))
    assert first.exit_code == 0, first.stderr
    evil = signing.generate_key()
    save_signed_index(make_index(), path, serial=11, key=evil)  # newer serial, another key beside it
    for command in (["index", str(path)], ["pick", "--index", str(path), *PICK]):
        res = run_cli(*command)
        assert res.exit_code == 2, res.stderr
        error, fix = _lines(res.stderr)
        assert error.startswith(f"error: --index {path}: the key published beside the index")
        assert f"is {evil.public.fingerprint}, not {KEY.public.fingerprint}" in error
        assert "the key that verified this source before" in error
        assert "--key-fingerprint sha256:NEW" in fix
    # the publisher's own next index (its key published beside it): taken without --verify-key, by the pin
    save_signed_index(make_index(), path, serial=12)
    ok = run_cli("pick", "--index", str(path), *PICK)
    assert ok.exit_code == 0, ok.stderr
    assert f"index key: {KEY.public.fingerprint} (ed25519, pinned in " in ok.stderr
    assert f"first verified from --verify-key {pub})" in ok.stderr


def test_a_trust_record_of_main_without_a_pin_still_binds_the_key_of_the_newest_index(
    tmp_path: Path, run_cli: Any
) -> None:
    """A record main wrote after a ``--verify-key`` run names the key of the newest index but pins none:
    that key is what the source is known by."""
    from imagesmith.indextrust import TrustStore

    path = save_signed_index(make_index(), tmp_path / "index.json", serial=10, publish_key=False)
    store = TrustStore(tmp_path / "cache" / "imagesmith" / "index", "file:" + str(path.resolve()))
    store.path.parent.mkdir(parents=True)
    store.path.write_text(
        json.dumps(
            {
                "source": store.source,
                "newest": {"serial": 10, "key": KEY.public.fingerprint, "key_type": "ed25519"},
            }
        )
    )
    evil = signing.generate_key()
    save_signed_index(make_index(), path, serial=11, key=evil)
    res = run_cli("index", str(path))
    assert res.exit_code == 2, res.stderr
    assert f"not {KEY.public.fingerprint}, the key that verified this source before" in res.stderr


@pytest.mark.parametrize("kind", ["fifo", "endless", "dangling"])
def test_a_trust_record_that_is_no_small_file_is_one_error_not_a_hang(tmp_path: Path, kind: str) -> None:
    """main: a FIFO where the trust record lives made pick and index wait forever (``read_bytes`` on a FIFO);
    a link to /dev/zero read until memory ran out."""
    from imagesmith.indextrust import TrustStore

    path = save_signed_index(make_index(), tmp_path / "index.json")
    store = TrustStore(tmp_path / "cache" / "imagesmith" / "index", "file:" + str(path.resolve()))
    store.path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(store.path)
    else:
        store.path.symlink_to("/dev/zero" if kind == "endless" else tmp_path / "gone")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), IMAGESMITH_CONFIG=str(tmp_path / "c.toml"))
    env.pop("IMAGESMITH_INDEX_KEY", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "imagesmith", "index", str(path)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"a trust record that is a {kind} hangs imagesmith index")
    assert done.returncode == 2, done.stderr
    error, fix = _lines(done.stderr)
    assert error.startswith(f"error: --index {path}: the trust record {store.path} cannot be read")
    assert fix.strip().startswith(f"fix: remove {store.path}")


def test_one_oci_source_however_spelled_shares_its_pin_and_newest_serial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main kept the pin and the newest serial under the spelling: Docker Hub's aliases in another case, or a
    one-part repository with and without ``library/``, were each a first use (another key pinned, an older
    index taken)."""
    from imagesmith import pick as picking
    from imagesmith.pick import fetching

    served: dict[str, tuple[bytes, bytes, bytes]] = {}

    def download_oci(source: str, **_: object) -> tuple[bytes, bytes, bytes]:
        return served["now"]

    monkeypatch.setattr(DOWNLOADS, "oci", download_oci)
    body, env = signed_bytes(replace(make_index(), published_to=("docker.io/library/torch",)), serial=20)
    served["now"] = (body, env, KEY.public.pem)
    fetch_index("oci://docker.io/torch", refresh=True, trust=TOFU)  # first use: KEY pinned, serial 20 seen
    evil = signing.generate_key()
    body, env = signed_bytes(
        replace(make_index(), published_to=("docker.io/library/torch",)), serial=30, key=evil
    )
    served["now"] = (body, env, evil.public.pem)
    for spelling in ("oci://Index.Docker.IO/library/torch", "oci://registry-1.docker.io/torch:release-index"):
        with pytest.raises(IndexTrustError, match="the key pinned for this source on first use") as info:
            fetch_index(spelling, refresh=True, trust=TOFU)
        assert info.value.fault == "key changed"
    body, env = signed_bytes(replace(make_index(), published_to=("docker.io/library/torch",)), serial=10)
    served["now"] = (body, env, KEY.public.pem)
    with pytest.raises(IndexTrustError, match="older than serial 20"):
        fetch_index("oci://DOCKER.IO/library/torch", refresh=True, trust=TOFU)
    assert picking._trust_key("oci://Docker.io/torch") == "oci://docker.io/library/torch:release-index"
    # the location compared with published_to is the host contacted: a one-label host is that host, not a
    # Docker Hub namespace (main: oci://acme/torch was compared as docker.io/acme/torch)
    assert fetching._oci_location("oci://acme/torch") == "acme/torch"
    assert fetching._oci_location("oci+http://LocalHost:5000/a/b:t") == "localhost:5000/a/b"


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("oci://ghcr.io/acme/torch@sha256:" + "1" * 64, "not by digest"),
        ("oci://ghcr.io/acme/torch:release-index@sha256:" + "1" * 64, "not by digest"),
        ("oci://ghcr.io/acme//torch", "empty host or path part"),
        ("oci://ghcr.io/acme/torch/", "empty host or path part"),
        ("oci:///acme/torch", "empty host or path part"),
    ],
)
def test_an_oci_source_it_cannot_read_as_written_is_refused(source: str, words: str, run_cli: Any) -> None:
    """main dropped ``@sha256:…`` of an ``oci://`` source without a word and read the tag (another index than
    the one the user named), and read an empty path part as part of the repository."""
    res = run_cli("index", source)
    assert res.exit_code == 2, res.stderr
    error, fix = _lines(res.stderr)
    assert error.startswith(f"error: --index {source}: ")
    assert words in error
    assert fix.strip().startswith("fix: ")


def _tls_server(tmp_path: Path, answer: Callable[[str], tuple[int, dict[str, str], bytes]]) -> Any:
    """An https:// server on 127.0.0.1 with a certificate made here (trusted through $REQUESTS_CA_BUNDLE)."""
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, headers, body = answer(self.path)
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_an_https_source_redirected_to_plain_http_is_refused(
    tmp_path: Path, http_index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch, run_cli: Any
) -> None:
    """main refused an http:// --index without --insecure, but followed an https:// one the server sent on
    to http:// (the index, its .sig and the .pub a first use pins, all over plain HTTP): exit 0, a key pinned
    that anyone on the path could have served."""
    plain_url, files = http_index
    _serve(files, 5)  # the plain-HTTP server holds a signed index and its key
    plain_base = plain_url.rsplit("/", 1)[0]
    server = _tls_server(tmp_path, lambda path: (302, {"Location": plain_base + path}, b""))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "cert.pem"))
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/index.json"
        for command in (["index", url], ["pick", "--index", url, *PICK], ["index", url, "--no-verify"]):
            res = run_cli(*command)
            assert res.exit_code == 2, res.stdout + res.stderr
            error, fix = _lines(res.stderr)[-2:]
            assert error.startswith(
                f"error: --index {url}: the server redirects it to {plain_url}, plain HTTP"
            )
            assert "https://" in fix
        assert not list((tmp_path / "cache").rglob("*.trust.json"))  # nothing pinned
    finally:
        server.shutdown()
        server.server_close()


def test_an_https_source_is_one_source_however_its_host_is_spelled() -> None:
    from imagesmith.pick import fetching

    one = fetching._trust_key("https://idx.example.com/a/index.json")
    for spelling in ("https://IDX.Example.COM/a/index.json", "https://idx.example.com:443/a/index.json"):
        assert fetching._trust_key(spelling) == one
    assert fetching._trust_key("https://idx.example.com:8443/a/index.json") != one
    assert fetching._trust_key("http://idx.example.com/a/index.json") != one
    assert fetching._trust_key("https://idx.example.com/A/index.json") != one  # paths are case-sensitive


def test_a_verify_key_of_a_type_imagesmith_does_not_take_is_named_once(tmp_path: Path, run_cli: Any) -> None:
    """An RSA or P-384 key as --verify-key: one error naming the option once (main said it twice)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    path = save_signed_index(make_index(), tmp_path / "index.json")
    for name, key in (
        ("rsa.pub", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        ("p384.pub", ec.generate_private_key(ec.SECP384R1())),
    ):
        pub = tmp_path / name
        pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        res = run_cli("pick", "--index", str(path), *PICK, "--verify-key", str(pub))
        assert res.exit_code == 2, res.stderr
        error, _ = _lines(res.stderr)
        assert error == f"error: --verify-key {pub}: the public key is neither ECDSA P-256 nor Ed25519"


def test_a_key_file_of_two_pem_blocks_is_refused_wherever_the_key_comes_from(
    tmp_path: Path, run_cli: Any
) -> None:
    """main took the first PEM block of a key file and ignored the rest: old and new key concatenated as
    --verify-key trusted only the old one (an index by the new one: "bad index signature"), two keys published
    beside an index pinned the first silently, and [release] trusted_keys trusted one key of two."""
    new = signing.generate_key()
    both = tmp_path / "both.pub"
    both.write_bytes(KEY.public.pem + new.public.pem)
    path = save_signed_index(make_index(), tmp_path / "index.json", key=new, publish_key=False)
    res = run_cli("pick", "--index", str(path), *PICK, "--verify-key", str(both))
    assert res.exit_code == 2, res.stderr
    error, fix = _lines(res.stderr)
    assert error == f"error: --verify-key {both} holds 2 PEM blocks, not one public key"
    assert "one public key per file" in fix
    # two keys published beside the index (the first signed it): not pinned, refused naming the file
    save_signed_index(make_index(), path)
    path.with_name("index.json.pub").write_bytes(KEY.public.pem + new.public.pem)
    published = run_cli("pick", "--index", str(path), *PICK)
    assert published.exit_code == 2, published.stderr
    assert f"{path}.pub holds 2 PEM blocks, not one public key" in published.stderr
    assert not list((tmp_path / "cache").rglob("*.trust.json"))  # nothing pinned
    with pytest.raises(ConfigError, match="holds 2 PEM blocks"):  # [release] trusted_keys
        signing.load_public_key(both)
    # the fix: one key per file
    one = tmp_path / "one.pub"
    one.write_bytes(b"# the publisher's key\n" + KEY.public.pem)  # a comment around one block is fine
    fixed = run_cli("pick", "--index", str(path), *PICK, "--verify-key", str(one))
    assert fixed.exit_code == 0, fixed.stderr
    assert f"index key: {KEY.public.fingerprint}" in fixed.stderr


def _with_figures(value: float) -> Any:
    """The test index, its first entry validated on a host that recorded a matmul figure of *value*."""
    from types import MappingProxyType

    index = make_index()
    first = index.images[0]
    host = replace(first.validated_on[0], link="NV18", figures=MappingProxyType({"matmul_tflops": value}))
    return replace(index, images=(replace(first, validated_on=(host,)), *index.images[1:]))


def test_validate_baseline_from_verifies_the_index_whose_figures_it_judges_by(
    tmp_path: Path, run_cli: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """main read ``--baseline-from INDEX`` unverified ("figures only"), but those figures are the expected
    values the performance checks pass or fail against, before imagesmith/data/perf.toml: someone who can push
    to the registry rewrote them (lowered: a throttled host passes; raised: every validation fails)."""
    from imagesmith.commands.validate import _fleet

    path = tmp_path / "index.json"
    body, _ = signed_bytes(_with_figures(1.0))  # the attacker's figures, unsigned
    path.write_bytes(body)
    res = run_cli("validate", "--baseline-from", str(path), "--report", str(tmp_path / "r"))
    assert res.exit_code == 2, res.stdout + res.stderr
    error, fix = _lines(res.stderr)
    assert error.startswith(f"error: --baseline-from {path}: no key to verify the release index with")
    assert "--baseline REPORT.json" in fix
    assert not (tmp_path / "r").exists()
    # the publisher's signed index, its key named by the fingerprint (issue 34: no first use here)
    save_signed_index(_with_figures(700.0), path, serial=5)
    first_use = run_cli("validate", "--baseline-from", str(path), "--report", str(tmp_path / "r"))
    assert first_use.exit_code == 2
    assert "no trust root for this index" in first_use.stderr
    groups, source = _fleet(f"{path}#{KEY.public.fingerprint}", None, "")
    assert source == f"{path}#{KEY.public.fingerprint}"
    assert [g["figures"] for g in groups] == [{"matmul_tflops": 700.0}]
    assert f"index key: {KEY.public.fingerprint} (ed25519, published beside it" in capsys.readouterr().err
    # the figures rewritten after signing: the signature no longer covers them
    path.write_bytes(path.read_bytes().replace(b"700", b"7"))
    rewritten = run_cli("validate", "--baseline-from", str(path), "--report", str(tmp_path / "r"))
    assert rewritten.exit_code == 2
    assert f"error: --baseline-from {path}: the signature" in rewritten.stderr
    assert "signs another index than the one served" in rewritten.stderr
