"""A release index as pick trusts it (issue 25), for tests: signed with the tests' key, a serial, an expiry.

``save_signed_index`` writes INDEX, INDEX.sig (the DSSE envelope) and INDEX.pub (the key, as release publishes
it beside the index), so pick verifies it by the key pinned on first use; ``KEY_FILE`` fixtures pass it as
``--verify-key`` instead.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from imagesmith import signing
from imagesmith.index import ReleaseIndex, dump_index

#: the tests' index key: Ed25519 from a fixed seed (deterministic signatures, no key file in the repository)
KEY = signing.ed25519_from_seed(hashlib.sha256(b"imagesmith tests: the index key").digest(), source="tests")
#: an expiry no test run reaches
FAR = "2099-12-31T23:59:59Z"


def signed_bytes(
    index: ReleaseIndex, *, serial: int = 1, expires: str = FAR, key: signing.SigningKey = KEY
) -> tuple[bytes, bytes]:
    """(index JSON with *serial* and *expires*, its DSSE envelope by *key*)."""
    body = dump_index(replace(index, serial=serial, expires=expires)).encode()
    return body, signing.sign_envelope(body, signing.INDEX_PAYLOAD_TYPE, key)


def save_signed_index(
    index: ReleaseIndex,
    path: Path,
    *,
    serial: int = 1,
    expires: str = FAR,
    key: signing.SigningKey = KEY,
    publish_key: bool = True,
) -> Path:
    """Write *index* to *path* signed (``path.sig``), with the key published beside it (``path.pub``)."""
    body, envelope = signed_bytes(index, serial=serial, expires=expires, key=key)
    path.write_bytes(body)
    path.with_name(path.name + ".sig").write_bytes(envelope)
    if publish_key:
        path.with_name(path.name + ".pub").write_bytes(key.public.pem)
    return path
