"""Keys, DSSE envelopes and in-toto statements (imagesmith/signing.py): what verifies and what is refused."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from imagesmith import signing
from imagesmith.cli import main
from imagesmith.errors import ConfigError, SignatureError

D = "sha256:" + "d" * 64
E = "sha256:" + "e" * 64
PT = "https://example.com/predicate/v1"


@pytest.fixture(params=signing.KEY_TYPES)
def key(request: pytest.FixtureRequest) -> signing.SigningKey:
    return signing.generate_key(request.param)


def test_pae_matches_the_dsse_spec() -> None:
    # the example of DSSE protocol.md
    assert signing.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_signed_statement_verifies(key: signing.SigningKey) -> None:
    env = signing.sign_statement("reg/repo", D, PT, {"verdict": "passed"}, key)
    st = signing.verify_statement(env, [key.public], digest=D, predicate_type=PT)
    assert st.predicate == {"verdict": "passed"}
    assert st.subjects == (("reg/repo", D),)
    doc = json.loads(env)
    assert doc["payloadType"] == "application/vnd.in-toto+json"
    assert doc["signatures"][0]["keyid"] == key.key_id
    payload = json.loads(base64.b64decode(doc["payload"]))
    assert payload["_type"] == "https://in-toto.io/Statement/v0.1"
    assert payload["subject"] == [{"name": "reg/repo", "digest": {"sha256": "d" * 64}}]


def test_one_flipped_byte_anywhere_in_the_payload_is_refused(key: signing.SigningKey) -> None:
    env = json.loads(signing.sign_statement("r", D, PT, {"verdict": "passed"}, key))
    payload = bytearray(base64.b64decode(env["payload"]))
    for i in range(0, len(payload), 7):
        tampered = bytearray(payload)
        tampered[i] ^= 0x01
        bad = dict(env, payload=base64.b64encode(bytes(tampered)).decode())
        with pytest.raises(SignatureError, match="no signature verifies"):
            signing.verify_envelope(
                json.dumps(bad).encode(), [key.public], payload_type=signing.INTOTO_PAYLOAD_TYPE
            )


def test_a_flipped_signature_byte_is_refused(key: signing.SigningKey) -> None:
    env = json.loads(signing.sign_statement("r", D, PT, {"verdict": "passed"}, key))
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[len(sig) // 2] ^= 0x80
    env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    with pytest.raises(SignatureError, match="no signature verifies"):
        signing.verify_statement(json.dumps(env).encode(), [key.public], digest=D, predicate_type=PT)


def test_the_payload_type_is_signed(key: signing.SigningKey) -> None:
    env = json.loads(signing.sign_envelope(b"{}", signing.INDEX_PAYLOAD_TYPE, key))
    env["payloadType"] = signing.INTOTO_PAYLOAD_TYPE
    with pytest.raises(SignatureError, match="no signature verifies"):
        signing.verify_envelope(
            json.dumps(env).encode(), [key.public], payload_type=signing.INTOTO_PAYLOAD_TYPE
        )
    good = signing.sign_envelope(b"{}", signing.INDEX_PAYLOAD_TYPE, key)
    with pytest.raises(SignatureError, match="payloadType"):
        signing.verify_envelope(good, [key.public], payload_type=signing.INTOTO_PAYLOAD_TYPE)


def test_an_unknown_key_is_refused(key: signing.SigningKey) -> None:
    other = signing.generate_key("ecdsa-p256")
    env = signing.sign_statement("r", D, PT, {"verdict": "passed"}, other)
    with pytest.raises(SignatureError, match="unknown key"):
        signing.verify_statement(env, [key.public], digest=D, predicate_type=PT)
    assert signing.verify_statement(env, [key.public, other.public], digest=D, predicate_type=PT)


def test_no_trusted_key_accepts_nothing(key: signing.SigningKey) -> None:
    env = signing.sign_statement("r", D, PT, {}, key)
    with pytest.raises(SignatureError, match="no trusted public key"):
        signing.verify_statement(env, [], digest=D, predicate_type=PT)


def test_a_statement_about_another_digest_or_predicate_is_refused(key: signing.SigningKey) -> None:
    env = signing.sign_statement("r", E, PT, {"verdict": "passed"}, key)
    with pytest.raises(SignatureError, match=f"about {E}, not {D}"):
        signing.verify_statement(env, [key.public], digest=D, predicate_type=PT)
    env = signing.sign_statement("r", D, "https://example.com/other/v1", {}, key)
    with pytest.raises(SignatureError, match="predicateType"):
        signing.verify_statement(env, [key.public], digest=D, predicate_type=PT)


@pytest.mark.parametrize(
    "envelope",
    [
        b"",
        b"[]",
        b"{}",
        b'{"payloadType":"x","payload":"!!","signatures":[]}',
        b'{"payloadType":"x","payload":""}',
    ],
)
def test_malformed_envelopes_are_refused(envelope: bytes, key: signing.SigningKey) -> None:
    with pytest.raises(SignatureError):
        signing.verify_envelope(envelope, [key.public], payload_type="x")


def test_a_signed_non_statement_is_refused(key: signing.SigningKey) -> None:
    env = signing.sign_envelope(b'{"verdict":"passed"}', signing.INTOTO_PAYLOAD_TYPE, key)
    with pytest.raises(SignatureError, match="not an in-toto statement"):
        signing.verify_statement(env, [key.public], digest=D, predicate_type=PT)


def test_keypair_files_round_trip_and_are_never_overwritten(tmp_path: Path) -> None:
    priv, pub = tmp_path / "k.key", tmp_path / "k.pub"
    key = signing.write_keypair(priv, pub, "ed25519")
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert b"PRIVATE" not in pub.read_bytes()
    loaded = signing.load_signing_key(priv)
    assert loaded.key_id == key.key_id == signing.load_public_key(pub).key_id
    env = signing.sign_statement("r", D, PT, {}, loaded)
    signing.verify_statement(env, [signing.load_public_key(pub)], digest=D, predicate_type=PT)
    before = priv.read_bytes()
    with pytest.raises(ConfigError, match="never overwrites"):
        signing.write_keypair(priv, tmp_path / "other.pub")
    with pytest.raises(ConfigError, match="never overwrites"):
        signing.write_keypair(tmp_path / "new.key", pub)
    assert priv.read_bytes() == before
    assert not (tmp_path / "new.key").exists()


def test_private_key_material_never_appears_in_reprs(tmp_path: Path) -> None:
    priv = tmp_path / "k.key"
    key = signing.write_keypair(priv, tmp_path / "k.pub")
    pem = priv.read_text()
    body = "".join(pem.splitlines()[1:-1])
    for text in (repr(key), str(key), repr(key.public), repr(signing.load_signing_key(priv))):
        assert body not in text
        assert body[:20] not in text
        assert "PRIVATE" not in text


def test_a_group_readable_private_key_is_refused(tmp_path: Path) -> None:
    priv = tmp_path / "k.key"
    signing.write_keypair(priv, tmp_path / "k.pub")
    priv.chmod(0o640)
    with pytest.raises(ConfigError, match="chmod 600"):
        signing.load_signing_key(priv)


@pytest.mark.parametrize(
    "content", [b"", b"not a key", b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"]
)
def test_bad_key_files_name_the_file(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "bad.pem"
    p.write_bytes(content)
    p.chmod(0o600)
    with pytest.raises(ConfigError, match=r"bad\.pem"):
        signing.load_signing_key(p)
    with pytest.raises(ConfigError, match=r"bad\.pem"):
        signing.load_public_key(p)


def test_other_key_types_are_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    k = ec.generate_private_key(ec.SECP384R1())
    p = tmp_path / "p384.pub"
    p.write_bytes(
        k.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    with pytest.raises(ConfigError, match="neither ECDSA P-256 nor Ed25519"):
        signing.load_public_key(p)


def test_keygen_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    priv = tmp_path / "keys" / "release.key"
    assert main(["keygen", str(priv), "--type", "ed25519"]) == 0
    out = capsys.readouterr().out
    assert "release.pub" in out
    assert "ed25519" in out
    assert "PRIVATE" not in out
    assert signing.load_public_key(tmp_path / "keys" / "release.pub").key_type == "ed25519"
    assert main(["keygen", str(priv)]) == 2
    assert "never overwrites" in capsys.readouterr().err
