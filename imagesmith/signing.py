"""Keys, in-toto statements and DSSE envelopes: the signed evidence that release and pick trust.

Through ``cryptography`` (no hand-written crypto). Two key types:

* **ECDSA P-256** (the default of ``imagesmith keygen``, and cosign's own default): signatures are DER
  ECDSA over SHA-256, what ``cosign verify-attestation --key`` checks with every cosign version.
* **Ed25519** (accepted everywhere, ``imagesmith keygen --type ed25519``): pure Ed25519 over the DSSE
  pre-authentication encoding; cosign loads an Ed25519 ``--key`` as a pure-Ed25519 verifier for
  attestations (docs/release.md says which versions and why ECDSA stays the default).

Keys are PEM: the private key PKCS #8 unencrypted (file mode 0600, refused when group/other can read it), the
public key SubjectPublicKeyInfo (what ``cosign verify --key`` reads). A key's id is the SHA-256 of its DER
SubjectPublicKeyInfo. Private key material is never printed: ``SigningKey`` has no field that holds it and its
repr names only the key id.

DSSE (https://github.com/secure-systems-lab/dsse, envelope.md and protocol.md): the signature covers
``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``; the envelope is
``{"payloadType", "payload": base64, "signatures": [{"keyid", "sig": base64}]}``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from imagesmith import inputs
from imagesmith.errors import ConfigError, SignatureError

KeyType = Literal["ecdsa-p256", "ed25519"]
KEY_TYPES: Final[tuple[KeyType, ...]] = ("ecdsa-p256", "ed25519")
DEFAULT_KEY_TYPE: Final[KeyType] = "ecdsa-p256"

#: the environment variable a validation runner (or release host) names its private key file with
SIGNING_KEY_ENV: Final[str] = "IMAGESMITH_SIGNING_KEY"

DSSE_MEDIA_TYPE: Final[str] = "application/vnd.dsse.envelope.v1+json"
INTOTO_PAYLOAD_TYPE: Final[str] = "application/vnd.in-toto+json"
#: the statement type cosign writes and reads (``cosign attest``); in-toto verifiers accept it too
STATEMENT_TYPE: Final[str] = "https://in-toto.io/Statement/v0.1"
STATEMENT_TYPES: Final[frozenset[str]] = frozenset({STATEMENT_TYPE, "https://in-toto.io/Statement/v1"})
#: payloadType of the release index's detached envelope (the payload is the index JSON itself)
INDEX_PAYLOAD_TYPE: Final[str] = "application/vnd.imagesmith.release-index.v1+json"

_PRIVATE = "private key"
_PUBLIC = "public key"


def _key_id(public: ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey) -> str:
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def _public_pem(public: ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class PublicKey:
    """A trusted public key: ``source`` says where it came from (a path, for messages)."""

    key: ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey = field(repr=False, compare=False)
    key_type: KeyType
    key_id: str
    source: str

    @property
    def pem(self) -> bytes:
        return _public_pem(self.key)

    def verify(self, signature: bytes, message: bytes) -> bool:
        try:
            if isinstance(self.key, ed25519.Ed25519PublicKey):
                self.key.verify(signature, message)
            else:
                self.key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True

    def describe(self) -> str:
        return f"{self.source} ({self.key_type}, id {self.key_id[:16]})"

    @property
    def fingerprint(self) -> str:
        """``sha256:<hex>`` of the DER public key: what pick prints and pins (the full key id)."""
        return f"sha256:{self.key_id}"


@dataclass(frozen=True)
class SigningKey:
    """A private key. Its repr names the key id and the file, never the key material."""

    _key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey = field(repr=False, compare=False)
    key_type: KeyType
    key_id: str
    source: str

    def __repr__(self) -> str:
        return f"SigningKey(key_type={self.key_type!r}, key_id={self.key_id!r}, source={self.source!r})"

    @property
    def public(self) -> PublicKey:
        return PublicKey(
            key=self._key.public_key(), key_type=self.key_type, key_id=self.key_id, source=self.source
        )

    def sign(self, message: bytes) -> bytes:
        if isinstance(self._key, ed25519.Ed25519PrivateKey):
            return self._key.sign(message)
        return self._key.sign(message, ec.ECDSA(hashes.SHA256()))

    def private_pem(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def _wrap_private(
    key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey, source: str, *, what: str = _PRIVATE
) -> SigningKey:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return SigningKey(_key=key, key_type="ed25519", key_id=_key_id(key.public_key()), source=source)
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return SigningKey(_key=key, key_type="ecdsa-p256", key_id=_key_id(key.public_key()), source=source)
    raise ConfigError(
        f"{source}: the {what} is neither ECDSA P-256 nor Ed25519",
        hint="create a key with `imagesmith keygen` (ECDSA P-256, or --type ed25519)",
    )


def generate_key(key_type: KeyType = DEFAULT_KEY_TYPE, *, source: str = "<new key>") -> SigningKey:
    if key_type == "ed25519":
        return _wrap_private(ed25519.Ed25519PrivateKey.generate(), source)
    if key_type == "ecdsa-p256":
        return _wrap_private(ec.generate_private_key(ec.SECP256R1()), source)
    raise ConfigError(f"unknown key type {key_type!r}", hint=f"use one of: {', '.join(KEY_TYPES)}")


def ed25519_from_seed(seed: bytes, *, source: str) -> SigningKey:
    """The Ed25519 key of a 32-byte *seed* (RFC 8032): the same seed, the same key and, Ed25519 being
    deterministic, the same signatures. Only for the documentation's sample key
    (scripts/sign_sample_index.py), whose seed is public: never for a key anything should trust."""
    return _wrap_private(ed25519.Ed25519PrivateKey.from_private_bytes(seed), source)


def write_keypair(
    private_path: Path, public_path: Path, key_type: KeyType = DEFAULT_KEY_TYPE, *, finish: bool = False
) -> SigningKey:
    """Create a key pair: *private_path* (mode 0600, created exclusively) and *public_path* (PEM).

    Refuses to overwrite either file; nothing is written when one exists. Each file is created whole or not at
    all (imagesmith.atomicio.write_exclusive), the private key first: a run killed between the two leaves a
    whole private key without its public one, and a rerun with *finish* (``imagesmith keygen``) writes the
    missing public key from it (the private key is never replaced, nor anything overwritten). A 0-byte
    file (left by an imagesmith before that, killed mid-write) holds no key and is replaced."""
    from imagesmith import atomicio

    for p in (private_path, public_path):
        if not p.is_symlink() and p.is_file() and p.stat().st_size == 0:
            p.unlink()  # an empty file holds no key: what a kill mid-write left
    if inputs.resolved(private_path) == inputs.resolved(public_path):
        raise ConfigError(
            f"the private and the public key would both be written to {private_path}",
            hint="give the public key another path (--public)",
        )
    half = private_path.is_file() and not private_path.is_symlink() and not os.path.lexists(public_path)
    if finish and half:
        # a keygen killed after writing the private key: finish it (the key itself is never replaced)
        key = load_signing_key(private_path)
        atomicio.write_exclusive(public_path, key.public.pem, mode=0o644)
        return key
    for p in (private_path, public_path):
        if p.exists() or p.is_symlink():
            raise ConfigError(
                f"{p} already exists; keygen never overwrites a key",
                hint="choose another path, or remove the old key pair first if it is really no longer used",
            )
    key = generate_key(key_type, source=str(private_path))
    atomicio.write_exclusive(private_path, key.private_pem(), mode=0o600)
    try:
        atomicio.write_exclusive(public_path, key.public.pem, mode=0o644)
    except BaseException:
        private_path.unlink()
        raise
    return key


def load_signing_key(path: Path) -> SigningKey:
    """Read a private key file (unencrypted PKCS #8 PEM, not readable by group or others)."""
    hint = f"pass the private key file of `imagesmith keygen` (--sign-key FILE or {SIGNING_KEY_ENV})"
    data = inputs.read_user_file(path, "cannot read the signing key", hint=hint, max_bytes=1 << 20)
    st = path.stat()
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        private = path.with_suffix("") if path.suffix == ".pub" else None
        raise ConfigError(
            f"the signing key {path} is a public key: signing needs the private key",
            hint=f"pass the private key of the pair (`imagesmith keygen` wrote {private} beside it)"
            if private is not None
            else hint,
        )
    if os.name == "posix" and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"the signing key {path} is accessible by group or others (mode {stat.S_IMODE(st.st_mode):04o})",
            hint=f"chmod 600 {path}",
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        detail = "it is encrypted" if isinstance(exc, TypeError) else "it is not a PEM PKCS #8 private key"
        raise ConfigError(
            f"the signing key {path} cannot be loaded: {detail}",
            hint="use the private key file written by `imagesmith keygen` (PEM, unencrypted, mode 0600)",
        ) from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)):
        raise ConfigError(
            f"{path}: the private key is neither ECDSA P-256 nor Ed25519",
            hint="create a key with `imagesmith keygen` (ECDSA P-256, or --type ed25519)",
        )
    return _wrap_private(key, str(path))


def parse_public_key(data: bytes, *, source: str) -> PublicKey:
    """The one PEM public key *data* holds. Text around it is allowed (a comment line), a second PEM block
    is not: ``cryptography`` would take one of them silently (a file of two concatenated keys trusts only the
    first), and a reader that takes another block would name another key than the one that verifies."""
    blocks = pem_blocks(data)
    if blocks > 1:
        raise ConfigError(
            f"{source} holds {blocks} PEM blocks, not one public key",
            hint="keep one public key per file (a .pub of `imagesmith keygen`); to trust several keys, list "
            "one file each ([release] trusted_keys)",
        )
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise ConfigError(
            f"{source} is not a PEM public key",
            hint="use the .pub file of `imagesmith keygen` (or cosign.pub of `cosign generate-key-pair`)",
        ) from None
    if isinstance(key, ed25519.Ed25519PublicKey):
        return PublicKey(key=key, key_type="ed25519", key_id=_key_id(key), source=source)
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return PublicKey(key=key, key_type="ecdsa-p256", key_id=_key_id(key), source=source)
    raise ConfigError(
        f"{source}: the public key is neither ECDSA P-256 nor Ed25519",
        hint="trust keys made by `imagesmith keygen` (ECDSA P-256 or Ed25519)",
    )


def pem_blocks(data: bytes) -> int:
    """How many PEM blocks (``-----BEGIN …-----`` lines) *data* holds."""
    return len(_PEM_BEGIN.findall(data))


_PEM_BEGIN: Final[re.Pattern[bytes]] = re.compile(rb"-----BEGIN [^\r\n]*-----")


def load_public_key(path: Path, origin: str | None = None) -> PublicKey:
    """The public key at *path*; *origin* (``--verify-key``, ``$IMAGESMITH_INDEX_KEY`` …) is what named it,
    for the fix line (default: ``[release] trusted_keys`` of imagesmith.toml)."""
    data = inputs.read_user_file(
        path,
        f"cannot read the public key ({origin})" if origin else "cannot read the public key",
        hint=f"point {origin} at the PEM public key (`imagesmith keygen` writes one)"
        if origin
        else "check [release] trusted_keys in imagesmith.toml (paths relative to the project root)",
        max_bytes=1 << 20,
    )
    # the origin named too: the file alone does not say which setting to fix
    return parse_public_key(data, source=f"{origin} {path}" if origin else str(path))


# DSSE


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding (lengths in bytes, as ASCII decimals)."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def sign_envelope(payload: bytes, payload_type: str, key: SigningKey) -> bytes:
    """A DSSE envelope (JSON bytes) over *payload* signed by *key*."""
    sig = key.sign(pae(payload_type, payload))
    envelope = {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": key.key_id, "sig": base64.b64encode(sig).decode()}],
    }
    return json.dumps(envelope, separators=(",", ":")).encode()


def sign_envelope_by(payload: bytes, payload_type: str, keys: Sequence[SigningKey]) -> bytes:
    """A DSSE envelope over *payload* signed by each of *keys* (one signature each, in order): a key rotation
    (issue 34) is signed by the current key and its successor, as TUF signs a new root with the old root's
    keys and its own."""
    message = pae(payload_type, payload)
    envelope = {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": k.key_id, "sig": base64.b64encode(k.sign(message)).decode()} for k in keys],
    }
    return json.dumps(envelope, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Verified:
    """What a good envelope said, and which trusted key signed it."""

    payload: bytes
    payload_type: str
    key: PublicKey


def _b64(value: Any, what: str) -> bytes:
    """Standard base64 (RFC 4648 section 4, with its padding) and nothing else: no character outside the
    alphabet (json would keep a newline or a junk byte the signature never covered), no URL-safe ``-_``, no
    missing or extra padding. The text must be exactly what encoding the decoded bytes gives back, so the
    stored envelope and the signed bytes cannot differ."""
    if not isinstance(value, str):
        raise SignatureError(f"the envelope's {what} is not a base64 string")
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        decoded = None
    if decoded is None or base64.b64encode(decoded).decode("ascii") != value:
        bad = sorted({c for c in value if c not in _B64_ALPHABET})
        why = (
            f"characters outside standard base64 ({', '.join(repr(c) for c in bad[:5])})"
            if bad
            else "wrong or missing padding, or bits past the last byte"
        )
        raise SignatureError(f"the envelope's {what} is not standard base64: {why}")
    return decoded


_B64_ALPHABET: Final[frozenset[str]] = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
)
#: the keys of a DSSE envelope and of one of its signatures (DSSE envelope.md)
_ENVELOPE_KEYS: Final[tuple[str, ...]] = ("payloadType", "payload", "signatures")
_SIGNATURE_KEYS: Final[tuple[str, ...]] = ("keyid", "sig")


def _strict_json(data: bytes | str, what: str) -> Any:
    from imagesmith import strictjson

    try:
        return strictjson.loads(data)
    except strictjson.StrictJSONError as exc:
        raise SignatureError(f"{what}: {exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise SignatureError(f"{what} is not JSON") from None


def verify_envelope(envelope: bytes, trusted: Sequence[PublicKey], *, payload_type: str) -> Verified:
    """Check a DSSE envelope against the *trusted* keys; raise ``SignatureError`` naming why not.

    At least one signature must verify with a trusted key, and the envelope's payloadType must be
    *payload_type* (it is signed too: PAE covers it)."""
    if not trusted:
        raise SignatureError("no trusted public key is configured, so no signature can be accepted")
    from imagesmith import strictjson

    doc = _strict_json(envelope, "the envelope")
    if not isinstance(doc, dict):
        raise SignatureError("the envelope is not a JSON object")
    try:
        strictjson.exact_keys(doc, _ENVELOPE_KEYS, "the envelope")
        for entry in doc.get("signatures") or []:
            if isinstance(entry, dict):
                strictjson.exact_keys(entry, _SIGNATURE_KEYS, "a signature of the envelope")
    except strictjson.StrictJSONError as exc:
        raise SignatureError(str(exc)) from None
    ptype = doc.get("payloadType")
    if not isinstance(ptype, str):
        raise SignatureError("the envelope has no payloadType")
    payload = _b64(doc.get("payload"), "payload")
    sigs = doc.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise SignatureError("the envelope carries no signature")
    message = pae(ptype, payload)
    for entry in sigs:
        if not isinstance(entry, dict):
            raise SignatureError("a signature of the envelope is not a JSON object")
        sig = _b64(entry.get("sig"), "signature")
        for key in trusted:
            if key.verify(sig, message):
                if ptype != payload_type:
                    raise SignatureError(
                        f"the envelope's payloadType is {ptype!r}, not {payload_type!r} "
                        f"(signed by {key.describe()})"
                    )
                return Verified(payload=payload, payload_type=ptype, key=key)
    ids = sorted({str(e.get("keyid") or "?")[:16] for e in sigs if isinstance(e, dict)})
    raise SignatureError(
        "no signature verifies with a trusted key (the envelope was altered, or signed by an unknown key: "
        f"key id(s) {', '.join(ids)}; trusted: {', '.join(k.key_id[:16] for k in trusted)})"
    )


# in-toto statements


@dataclass(frozen=True)
class Statement:
    subjects: tuple[tuple[str, str], ...]  # (name, "sha256:<hex>")
    predicate_type: str
    predicate: Mapping[str, Any]

    def covers(self, digest: str) -> bool:
        return any(d == digest for _, d in self.subjects)


def statement(subject_name: str, digest: str, predicate_type: str, predicate: Mapping[str, Any]) -> bytes:
    """An in-toto statement (v0.1, as cosign writes) of *digest* (``sha256:<hex>``)."""
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise SignatureError(
            f"{digest!r} is not a sha256 digest", hint="sign the digest the registry reports"
        )
    doc = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name, "digest": {"sha256": hexpart}}],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def parse_statement(payload: bytes) -> Statement:
    """The in-toto statement of a verified payload, read strictly: no repeated or case-colliding key
    (:mod:`imagesmith.strictjson`), and exactly one subject with a sha256 digest — a validation is about one
    image, and a statement naming two would count for both."""
    from imagesmith import strictjson

    doc = _strict_json(payload, "the signed payload")
    if not isinstance(doc, dict) or doc.get("_type") not in STATEMENT_TYPES:
        raise SignatureError("the signed payload is not an in-toto statement")
    raw = doc.get("subject")
    try:
        strictjson.exact_keys(doc, _STATEMENT_KEYS, "the statement")
        for s in raw if isinstance(raw, list) else []:
            if isinstance(s, dict):
                strictjson.exact_keys(s, ("name", "digest"), "the statement's subject")
    except strictjson.StrictJSONError as exc:
        raise SignatureError(str(exc)) from None
    if not isinstance(raw, list) or len(raw) != 1:
        count = len(raw) if isinstance(raw, list) else 0
        raise SignatureError(
            f"the statement names {count} subjects; an attestation imagesmith accepts names exactly one"
        )
    subject = raw[0]
    digest = subject.get("digest") if isinstance(subject, dict) else None
    hexpart = digest.get("sha256") if isinstance(digest, dict) else None
    if not isinstance(hexpart, str) or not _SHA256_HEX.fullmatch(hexpart):
        raise SignatureError("the statement's subject has no sha256 digest (64 lowercase hex digits)")
    name = subject.get("name", "")
    subjects = ((name if isinstance(name, str) else str(name), "sha256:" + hexpart),)
    ptype = doc.get("predicateType")
    predicate = doc.get("predicate")
    if not isinstance(ptype, str) or not isinstance(predicate, dict):
        raise SignatureError("the statement has no predicateType or no object predicate")
    return Statement(subjects=subjects, predicate_type=ptype, predicate=predicate)


#: the keys of an in-toto statement (v0.1 and v1)
_STATEMENT_KEYS: Final[tuple[str, ...]] = ("_type", "subject", "predicateType", "predicate")
_SHA256_HEX: Final[re.Pattern[str]] = re.compile(r"[0-9a-f]{64}")


def sign_statement(
    subject_name: str, digest: str, predicate_type: str, predicate: Mapping[str, Any], key: SigningKey
) -> bytes:
    return sign_envelope(statement(subject_name, digest, predicate_type, predicate), INTOTO_PAYLOAD_TYPE, key)


def verify_statement(
    envelope: bytes, trusted: Sequence[PublicKey], *, digest: str, predicate_type: str
) -> Statement:
    """Verify the envelope, then that its statement is about *digest* with *predicate_type*."""
    verified = verify_envelope(envelope, trusted, payload_type=INTOTO_PAYLOAD_TYPE)
    st = parse_statement(verified.payload)
    if st.predicate_type != predicate_type:
        raise SignatureError(
            f"the statement's predicateType is {st.predicate_type!r}, not {predicate_type!r}"
        )
    if not st.covers(digest):
        raise SignatureError(
            f"the signed statement is about {', '.join(d for _, d in st.subjects)}, not {digest} "
            f"(signed by {verified.key.describe()})"
        )
    return st
