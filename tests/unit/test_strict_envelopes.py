"""Strict DSSE / in-toto parsing (issue 25): what is signed is read one way only.

Standard base64 only (no junk characters, no URL-safe alphabet, canonical padding: the text must be what
encoding the bytes gives back), no repeated JSON key, no two keys that differ only in case (Go's encoding/json
matches keys case-insensitively, Unicode-folded: ``PayloadType`` fills ``payloadType``, the Kelvin sign reads
as ``k``), exactly one subject in a statement. The same rules for an envelope read from a registry and one
read from a file: both go through :func:`imagesmith.signing.verify_envelope`. Every case here was accepted
before issue 25.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.attestation import VALIDATION_PREDICATE_TYPE, verify_validation
from imagesmith.errors import ConfigError, SignatureError
from imagesmith.index import parse_index

KEY = signing.generate_key("ed25519")
D = "sha256:" + "d" * 64
E = "sha256:" + "e" * 64
#: a payload whose standard base64 holds '+' and '/' (so its URL-safe form differs) and ends in '=' padding
PAYLOAD = b"\xfb\xff\xfe" + b'{"x": 1}' + b"\xfb\xef"
PTYPE = signing.INDEX_PAYLOAD_TYPE


def _envelope(payload_text: str, *, sig: str | None = None, raw: str | None = None) -> bytes:
    """An envelope whose payload field is *payload_text* verbatim and whose signature signs PAYLOAD."""
    good_sig = base64.b64encode(KEY.sign(signing.pae(PTYPE, PAYLOAD))).decode()
    if raw is not None:
        filled = raw.replace("PTYPE", PTYPE).replace("EVIL", base64.b64encode(b"evil").decode())
        return filled.replace("PAYLOAD", payload_text).replace("SIG", good_sig).encode()
    doc = {
        "payloadType": PTYPE,
        "payload": payload_text,
        "signatures": [{"keyid": "k", "sig": sig or good_sig}],
    }
    return json.dumps(doc).encode()


def test_the_standard_envelope_verifies() -> None:
    env = _envelope(base64.b64encode(PAYLOAD).decode())
    assert signing.verify_envelope(env, [KEY.public], payload_type=PTYPE).payload == PAYLOAD
    assert "+" in base64.b64encode(PAYLOAD).decode()
    assert "/" in base64.b64encode(PAYLOAD).decode()


_STD = base64.b64encode(PAYLOAD).decode()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (_STD[:4] + "*" + _STD[4:], "characters outside standard base64 ('*')"),
        (_STD[:4] + "\n" + _STD[4:], "characters outside standard base64 ('\\n')"),
        (_STD[:4] + " " + _STD[4:], "characters outside standard base64 (' ')"),
        (base64.urlsafe_b64encode(PAYLOAD).decode(), "characters outside standard base64 ('-', '_')"),
        (_STD + "=", "wrong or missing padding"),
    ],
    ids=["junk-star", "newline", "space", "url-safe", "extra-padding"],
)
def test_a_payload_in_other_base64_than_the_standard_is_refused(text: str, why: str) -> None:
    # each of these decodes (leniently) to exactly the signed bytes: the stored envelope differs from what
    # was signed, and another reader may decode it otherwise
    assert base64.urlsafe_b64decode(text.encode()) == PAYLOAD or text.endswith("==")
    with pytest.raises(SignatureError, match="not standard base64") as info:
        signing.verify_envelope(_envelope(text), [KEY.public], payload_type=PTYPE)
    assert why in info.value.message


def test_non_canonical_trailing_bits_and_a_junk_signature_are_refused() -> None:
    # 'YR==' decodes to b'a' as 'YQ==' does: bits past the last byte make two texts for one payload
    payload = b"a"
    sig = base64.b64encode(KEY.sign(signing.pae(PTYPE, payload))).decode()
    doc = {"payloadType": PTYPE, "payload": "YR==", "signatures": [{"keyid": "k", "sig": sig}]}
    with pytest.raises(SignatureError, match="not standard base64: wrong or missing padding, or bits past"):
        signing.verify_envelope(json.dumps(doc).encode(), [KEY.public], payload_type=PTYPE)
    doc["payload"] = "YQ=="
    doc["signatures"] = [{"keyid": "k", "sig": sig[:8] + "*" + sig[8:]}]
    with pytest.raises(SignatureError, match="signature is not standard base64"):
        signing.verify_envelope(json.dumps(doc).encode(), [KEY.public], payload_type=PTYPE)
    doc["signatures"] = [{"keyid": "k", "sig": sig.rstrip("=")}]  # missing padding: refused (as before)
    with pytest.raises(SignatureError, match="not standard base64"):
        signing.verify_envelope(json.dumps(doc).encode(), [KEY.public], payload_type=PTYPE)


EVIL = base64.b64encode(b"evil").decode()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (
            '{"payloadType": "PTYPE", "payload": "EVIL", "payload": "PAYLOAD", '
            '"signatures": [{"keyid": "k", "sig": "SIG"}]}',
            "the key 'payload' appears twice",
        ),
        (
            '{"payloadType": "PTYPE", "PayloadType": "text/plain", "payload": "PAYLOAD", "signatures": '
            '[{"keyid": "k", "sig": "SIG"}]}',
            "the keys 'payloadType' and 'PayloadType' differ only in case",
        ),
        (
            '{"payloadType": "PTYPE", "payload": "PAYLOAD", "signatures": [{"keyid": "k", "\u212aeyid": "x", '
            '"sig": "SIG"}]}',
            "differ only in case",
        ),
        (
            '{"payloadType": "PTYPE", "payload": "PAYLOAD", "Signatures": [], "signatures": [{"keyid": "k", '
            '"sig": "SIG"}]}',
            "the keys 'Signatures' and 'signatures' differ only in case",
        ),
        (
            '{"payloadType": "PTYPE", "payload": "PAYLOAD", "signatures": [{"keyid": "k", "sig": "SIG", '
            '"\u017fig": "x"}]}',
            "differ only in case",
        ),
    ],
    ids=["duplicate-payload", "PayloadType", "kelvin-keyid", "Signatures", "long-s-sig"],
)
def test_repeated_and_case_colliding_envelope_keys_are_refused(raw: str, why: str) -> None:
    env = _envelope(_STD, raw=raw)
    with pytest.raises(SignatureError) as info:
        signing.verify_envelope(env, [KEY.public], payload_type=PTYPE)
    assert why in info.value.message


def _signed_statement(doc: dict[str, Any] | str) -> bytes:
    payload = (doc if isinstance(doc, str) else json.dumps(doc)).encode()
    return signing.sign_envelope(payload, signing.INTOTO_PAYLOAD_TYPE, KEY)


def _statement(*digests: str, report: str = '{"verdict": "passed"}') -> str:
    subjects = ", ".join(f'{{"name": "r", "digest": {{"sha256": "{d.split(":")[1]}"}}}}' for d in digests)
    return (
        f'{{"_type": "{signing.STATEMENT_TYPE}", "subject": [{subjects}], '
        f'"predicateType": "{VALIDATION_PREDICATE_TYPE}", "predicate": {report}}}'
    )


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (_statement(D, E), "names 2 subjects; an attestation imagesmith accepts names exactly one"),
        (_statement(E, D), "names 2 subjects"),
        (
            _statement(E).replace('"subject":', '"subject": [], "subject":'),
            "the key 'subject' appears twice",
        ),
        (
            _statement(D, report='{"verdict": "failed", "verdict": "passed"}'),
            "the key 'verdict' appears twice",
        ),
        (
            _statement(D).replace('"predicateType":', '"PredicateType": "x", "predicateType":'),
            "differ only in case",
        ),
        (_statement(D).replace('"name": "r"', '"Name": "r", "name": "r"'), "differ only in case"),
    ],
    ids=[
        "two-subjects",
        "two-subjects-reversed",
        "duplicate-subject",
        "duplicate-verdict",
        "PredicateType",
        "Name",
    ],
)
def test_statements_are_read_strictly(payload: str, why: str) -> None:
    """A statement naming two digests counted for both (from a registry) before; a repeated key resolved to
    its last value; a case variant was ignored here and read by Go."""
    with pytest.raises(SignatureError) as info:
        verify_validation(_signed_statement(payload), [KEY.public], digest=D)
    assert why in info.value.message


def test_one_subject_still_verifies_and_a_bad_digest_is_refused() -> None:
    assert verify_validation(_signed_statement(_statement(D)), [KEY.public], digest=D).digest == D
    short = _statement(D).replace("d" * 64, "D" * 64)
    with pytest.raises(SignatureError, match="no sha256 digest"):
        verify_validation(_signed_statement(short), [KEY.public], digest=D)


def test_the_release_index_refuses_a_repeated_key() -> None:
    from imagesmith.index import dump_index
    from tests.indexkey import signed_bytes
    from tests.unit.test_pick import make_index

    body = signed_bytes(make_index())[0].decode()
    twice = body.replace('"serial": 1,', '"serial": 1,\n  "serial": 1,', 1)
    with pytest.raises(ConfigError, match="the key 'serial' appears twice"):
        parse_index(twice, source="idx.json")
    assert dump_index(parse_index(body, source="ok")) == body


@pytest.mark.parametrize(
    "reader",
    [signing.parse_statement, lambda b: signing.verify_envelope(b, [KEY.public], payload_type=PTYPE)],
)
def test_deeply_nested_or_non_json_is_one_signature_error(reader: Callable[[bytes], Any]) -> None:
    with pytest.raises(SignatureError):
        reader(b"[" * 100_000)
    with pytest.raises(SignatureError):
        reader(b"\xff\xfe")
