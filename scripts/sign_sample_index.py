"""Sign the sample release index of docs/examples with the SAMPLE key, deterministically.

The README's and docs' `imagesmith pick` examples verify docs/examples/release-index.json as pick verifies
every index: a DSSE signature (release-index.json.sig) by a known key (release-index.json.pub, passed with
--verify-key), a serial and an expiry inside the signed bytes. The sample key is an Ed25519 key derived from
the public seed below, so anyone can rebuild it: it is a SAMPLE, it proves nothing about any image, and no
real index must ever be trusted with it. Ed25519 signatures are deterministic (RFC 8032), so this script
writes the same three files every time and no private key is committed.

The sample's expiry is far away (2099) on purpose: a real index is valid for [release] index_valid_for (14
days) and renewed by every release run; the sample is a fixed file that CI picks from every day, and must not
start failing two weeks after it was committed. Its serial is 2 (1 before issue 31 renamed a kind).

usage: .venv/bin/python scripts/sign_sample_index.py [--check]   (--check: exit 1 when the committed files
differ from what this script writes; tests/unit/test_index_trust.py runs it)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith import signing  # noqa: E402
from imagesmith.index import dump_index, load_index  # noqa: E402

INDEX = REPO / "docs" / "examples" / "release-index.json"
SEED_TEXT = b"imagesmith SAMPLE release-index key: the seed is public, never trust this key for real images"
SERIAL = 2  # 2: issue 31 split the kind acr (a changed index gets a new serial, as release gives it)
#: far away on purpose (see the module docstring): CI picks from this file every day
EXPIRES = "2099-12-31T23:59:59Z"


def sample_key() -> signing.SigningKey:
    return signing.ed25519_from_seed(hashlib.sha256(SEED_TEXT).digest(), source="the SAMPLE key")


def files() -> dict[Path, bytes]:
    """What the sample's three files hold: the index (canonical, serial and expiry set), its signature, the
    sample public key."""
    key = sample_key()
    index = replace(load_index(INDEX), serial=SERIAL, expires=EXPIRES)
    body = dump_index(index).encode()
    envelope = signing.sign_envelope(body, signing.INDEX_PAYLOAD_TYPE, key)
    return {
        INDEX: body,
        INDEX.with_name(INDEX.name + ".sig"): envelope + b"\n",
        INDEX.with_name(INDEX.name + ".pub"): key.public.pem,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    args = ap.parse_args()
    stale = []
    for path, data in files().items():
        if not path.is_file() or path.read_bytes() != data:
            stale.append(path)
            if not args.check:
                path.write_bytes(data)
    for path in stale:
        print(f"{'differs' if args.check else 'wrote'}: {path.relative_to(REPO)}")
    print(f"sample key: {sample_key().public.fingerprint} (ed25519; SAMPLE, public seed)")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
