"""Trust in a release index, the renter's end (``imagesmith pick``, ``imagesmith index``; issue 25).

An index is used only when

1. **a known key signed exactly its bytes** (a DSSE envelope, :mod:`imagesmith.signing`). The key is, in
   this order: ``--verify-key F.pub``; ``$IMAGESMITH_INDEX_KEY``; ``[release] index_key`` of the user config,
   then of the project's ``imagesmith.toml`` (a path or the PEM text); else the key **pinned** for this index
   source on first use; else, on first use, the key the publisher puts beside the index (``INDEX.pub``
   beside a file or URL, a layer of the ``release-index`` artifact), pinned then with its fingerprint
   printed, as ssh does with a host key. A later index whose published key differs from the pinned one is
   refused naming both fingerprints. No key at all: refused, unless the user passes ``--no-verify`` (then
   warned on every run);
2. **it is not older than one already seen** for the source: the signed ``serial`` must be at least the newest
   one recorded (a lower one is a replayed index; the same serial with other bytes is refused too);
3. **it has not expired**: the signed ``expires`` lies in the future.

Per source, one JSON file under the cache (``~/.cache/imagesmith/index/<hash>.trust.json``) keeps the pinned
key and the newest index seen (serial, generated, expires, sha256). It is written only after an index passed
all three checks. Every failure is one :class:`~imagesmith.errors.IndexTrustError` (exit 2) naming the source
and the fix. Nothing here imports a heavy module at import time: ``cryptography`` is loaded only to verify.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from imagesmith import atomicio, inputs, projectlock
from imagesmith.errors import Fault, ImagesmithError, IndexTrustError

#: the flag the index being read came from, as errors name it: ``--index`` (pick, index) or another command's
#: (``validate --baseline-from``): :func:`reading_as` sets it around a fetch
_FLAG: ContextVar[str] = ContextVar("imagesmith_index_flag", default="--index")


def index_flag() -> str:
    """The flag errors about the index being read name (``--index`` unless :func:`reading_as` says)."""
    return _FLAG.get()


@contextmanager
def reading_as(flag: str) -> Iterator[None]:
    """Errors about the index read inside the block name *flag* (e.g. ``--baseline-from``) as the user gave
    it, not ``--index``."""
    token = _FLAG.set(flag)
    try:
        yield
    finally:
        _FLAG.reset(token)


if TYPE_CHECKING:
    from imagesmith.index import ReleaseIndex
    from imagesmith.signing import PublicKey

#: the suffix of the public key the publisher puts beside an index file or URL (``index.json.pub``)
KEY_SUFFIX: Final[str] = ".pub"
#: the largest published key read (a PEM public key takes a few hundred bytes)
MAX_KEY_BYTES: Final[int] = 64 << 10
#: the largest trust record read (one key and one newest-index line take about 2 KiB)
MAX_TRUST_RECORD_BYTES: Final[int] = 1 << 20
_STAMP: Final[str] = "%Y-%m-%dT%H:%M:%SZ"
_HOW_TO_GET_A_KEY: Final[str] = (
    "get the publisher's public key (the .pub of its `imagesmith release --sign-key`) and pass --verify-key "
    "F.pub, or set it once: [release] index_key in ~/.config/imagesmith/config.toml (a path or the PEM "
    "text) or $IMAGESMITH_INDEX_KEY; --no-verify uses the index unchecked (not for a real rental)"
)


@dataclass(frozen=True)
class IndexKey:
    """A key the user named (its PEM text), and what named it (for messages): ``--verify-key F``,
    ``$IMAGESMITH_INDEX_KEY`` or a config file's ``release.index_key``. Parsed (``cryptography``) only when a
    signature must be checked: a pick from a cached index that this key verified before needs no crypto."""

    pem: bytes
    origin: str
    _parsed: list[PublicKey] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def of(cls, key: PublicKey, origin: str) -> IndexKey:
        return cls(key.pem, origin, [key])

    @property
    def key(self) -> PublicKey:
        """The parsed key; ConfigError naming the origin when the text is no PEM public key imagesmith
        takes."""
        if not self._parsed:
            from imagesmith import signing
            from imagesmith.errors import ConfigError

            try:
                self._parsed.append(signing.parse_public_key(self.pem, source=self.origin))
            except ConfigError as exc:  # its message names the origin already
                raise exc.replace(
                    hint="give the PEM public key (the .pub of `imagesmith keygen`) or a path to it"
                ) from None
        return self._parsed[0]

    @property
    def fingerprint(self) -> str | None:
        return pem_fingerprint(self.pem)


def pem_fingerprint(pem: bytes) -> str | None:
    """``sha256:<hex>`` of the DER inside a PEM public key (what :attr:`PublicKey.fingerprint` says of it),
    computed without ``cryptography``; None when *pem* holds no such block, or more than one PEM block (then
    :func:`imagesmith.signing.parse_public_key` refuses it: this key would be the one it does not take)."""
    text = pem.decode("ascii", "replace")
    match = _PEM_PUBLIC.search(text)
    if match is None or len(_PEM_BEGIN.findall(text)) != 1:
        return None
    try:
        der = base64.b64decode("".join(match.group(1).split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    return "sha256:" + hashlib.sha256(der).hexdigest()


#: a PEM block's first line (as :func:`imagesmith.signing.pem_blocks` counts them)
_PEM_BEGIN: Final[re.Pattern[str]] = re.compile(r"-----BEGIN [^\r\n]*-----")
_PEM_PUBLIC: Final[re.Pattern[str]] = re.compile(
    r"-----BEGIN PUBLIC KEY-----([A-Za-z0-9+/=\s]*)-----END PUBLIC KEY-----"
)


@dataclass(frozen=True, kw_only=True)
class Trust:
    """What the user decided: a key (None: the pinned or published one), or ``verify=False`` (--no-verify).
    *now*: the clock expiry is judged by (None: the system's, in UTC)."""

    key: IndexKey | None = None
    verify: bool = True
    now: datetime.datetime | None = None
    #: issue 34: the trust root named out of band, ``sha256:<64 hex>`` of the publisher's key (``--index
    #: SRC#sha256:…``, ``--key-fingerprint``, ``[release] index_key`` of the user config,
    #: ``$IMAGESMITH_INDEX_KEY``): the key published beside the index is taken only when it has it
    fingerprint: str | None = None
    #: what named :attr:`fingerprint`, for messages
    fingerprint_origin: str = ""
    #: ``--trust-first-use``: with no root and no pin, trust (and pin) the key published beside the index, as
    #: ssh does a host key; without it such an index is refused (a new rental would trust whoever can push)
    first_use: bool = False

    def clock(self) -> datetime.datetime:
        return self.now or datetime.datetime.now(datetime.timezone.utc)


@dataclass(frozen=True)
class Trusted:
    """The key an index verified with (its fingerprint and type), said in one line (:meth:`line`); *key* is
    the parsed key when it was needed (to verify, or to pin on first use). *pins*: recording the index makes
    this key the source's pin (first use, the renter's root, a successor the pinned key signed); *aside*: a
    note for the line (the pin kept when the renter's own key differs from it)."""

    fingerprint: str
    key_type: str
    how: str
    first_use: bool = False
    key: PublicKey | None = None
    pins: bool = False
    aside: str = ""
    #: a key published beside the index that is not the pin: taken only as the successor the index this key
    #: signed names, and that signed it too (:func:`check_rotation`); refused otherwise
    offered: PublicKey | None = None

    @classmethod
    def of(
        cls,
        key: PublicKey,
        how: str,
        *,
        first_use: bool = False,
        pins: bool = False,
        aside: str = "",
        offered: PublicKey | None = None,
    ) -> Trusted:
        return cls(key.fingerprint, key.key_type, how, first_use, key, pins or first_use, aside, offered)

    def line(self, source: str) -> str:
        if self.first_use:
            return (
                f"note: first use of {index_flag()} {source}: trusting the key published beside it "
                f"(--trust-first-use), {self.fingerprint} ({self.key_type}), pinned in {self.how}: check "
                "this fingerprint with the publisher"
            )
        return f"index key: {self.fingerprint} ({self.key_type}, {self.how})" + (
            f"; {self.aside}" if self.aside else ""
        )


#: a key's fingerprint as imagesmith prints it: ``sha256:`` and the 64 hex digits of the SHA-256 of its DER
FINGERPRINT: Final[re.Pattern[str]] = re.compile(r"sha256:[0-9a-f]{64}")
#: the trust root a ``--index`` value (or $IMAGESMITH_INDEX) may carry: ``SRC#sha256:<64 hex>``
_ROOT_SUFFIX: Final[re.Pattern[str]] = re.compile(r"#(sha256:[0-9A-Fa-f]{64})\Z")
#: where a renter gets the fingerprint (every refusal for want of a trust root says it)
HOW_TO_GET_THE_FINGERPRINT: Final[str] = (
    "get the publisher's key fingerprint from a channel the registry does not control (its `imagesmith "
    "release` prints `renters: imagesmith pick --index SRC#sha256:<64 hex> …`; the publisher's README or "
    "announcement) and pass --index SRC#sha256:<fp> or --key-fingerprint sha256:<fp>, or set it once: "
    '[release] index_key = "sha256:<fp>" in ~/.config/imagesmith/config.toml or $IMAGESMITH_INDEX_KEY; '
    "--trust-first-use trusts the key the source serves (whoever can push there chooses it)"
)


def is_fingerprint(text: str) -> bool:
    """Whether *text* is a key fingerprint (``sha256:<64 hex>``, any case), not a path or PEM text."""
    return bool(FINGERPRINT.fullmatch(text.strip().lower()))


def parse_fingerprint(text: str, *, origin: str) -> str:
    """*text* as a fingerprint (``sha256:`` + 64 lowercase hex); ConfigError naming *origin* otherwise."""
    value = text.strip().lower()
    if not FINGERPRINT.fullmatch(value):
        from imagesmith.errors import ConfigError

        raise ConfigError(
            f"{origin}: {text[:100]!r} is not a key fingerprint (sha256: and 64 hex digits)",
            hint="give the fingerprint exactly as the publisher's `imagesmith release` prints it (`renters: "
            "imagesmith pick --index SRC#sha256:<64 hex>`)",
        )
    return value


def split_root(source: str, *, flag: str = "--index") -> tuple[str, str | None]:
    """``SRC#sha256:<hex>`` → (SRC, the fingerprint); a source without one → (source, None). A ``#sha256:``
    that is no fingerprint is refused (a typo must not fall back to no root at all)."""
    match = _ROOT_SUFFIX.search(source)
    if match is not None:
        return source[: match.start()], match.group(1).lower()
    if "#sha256:" in source:
        parse_fingerprint(source.rsplit("#", 1)[1], origin=f"{flag} {source[:200]}")
    return source, None


def renter_line(published_to: tuple[str, ...] | list[str], fingerprint: str) -> str:
    """The one line release prints for renters to paste (issue 34): the index by its first repository,
    with the key's fingerprint as its trust root."""
    where = f"oci://{sorted(published_to)[0]}" if published_to else "INDEX"
    return f"renters: imagesmith pick --index {where}#{fingerprint} --pull"


def parse_timestamp(text: str) -> datetime.datetime | None:
    """``YYYY-MM-DDTHH:MM:SSZ`` as a UTC time (through fromisoformat: strptime would cost pick an import)."""
    if not _TIMESTAMP.fullmatch(text):
        return None
    try:
        return datetime.datetime.fromisoformat(text[:-1]).replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


_TIMESTAMP: Final[re.Pattern[str]] = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def timestamp(when: datetime.datetime) -> str:
    return when.astimezone(datetime.timezone.utc).strftime(_STAMP)


class TrustStore:
    """The pinned key and the newest index seen, for one index source (one JSON file under *folder*)."""

    def __init__(self, folder: Path, source: str, *, shown: str | None = None) -> None:
        self.source = source
        #: the source as the user gave it (``--index …`` in messages); *source* is the key it is kept under
        self.shown = shown or source
        self.path = folder / (hashlib.sha256(source.encode()).hexdigest()[:24] + ".trust.json")
        self._data: dict[str, Any] | None = None

    def data(self) -> dict[str, Any]:
        if self._data is None:
            try:
                # never blocks (a FIFO put there), never reads past the cap (a link to /dev/zero), JSON depth
                # and integers bounded: one error below
                raw = (
                    inputs.loads_json(
                        inputs.read_user_file(
                            self.path, "trust record", hint="", max_bytes=MAX_TRUST_RECORD_BYTES
                        ),
                        str(self.path),
                        hint="",
                    )
                    if os.path.lexists(self.path)
                    else None
                )
            except (ValueError, RecursionError, ImagesmithError):
                raise IndexTrustError(
                    f"{index_flag()} {self.shown}: the trust record {self.path} cannot be read",
                    fault=Fault.TRUST_RECORD_UNREADABLE,
                    hint=f"remove {self.path}: the next run pins the published key again (check its "
                    "fingerprint)",
                ) from None
            if raw is not None:
                problem = record_problem(raw, self.source)
                if problem is not None:
                    # a record read as "nothing seen" would turn replay protection and the key pin off,
                    # and the next index (an older one, or one by another key) would be recorded over it
                    raise IndexTrustError(
                        f"{index_flag()} {self.shown}: the trust record {self.path} is not one imagesmith "
                        f"writes ({problem})",
                        fault=Fault.TRUST_RECORD_UNREADABLE,
                        hint=f"remove {self.path}: the next run pins the published key again (check its "
                        "fingerprint)",
                    )
            self._data = raw if raw is not None else {}
        return self._data

    def pinned(self) -> PublicKey | None:
        pem = self.data().get("key")
        if not isinstance(pem, str):
            return None
        from imagesmith import signing
        from imagesmith.errors import ConfigError

        try:
            return signing.parse_public_key(pem.encode(), source=f"the key pinned in {self.path}")
        except ConfigError:
            raise IndexTrustError(
                f"{index_flag()} {self.shown}: the key pinned in {self.path} is damaged",
                fault=Fault.TRUST_RECORD_UNREADABLE,
                hint=f"remove {self.path} and check the fingerprint the next run prints with the publisher",
            ) from None

    def pinned_how(self) -> str:
        """How the pinned key came to be pinned, for the ``index key:`` line."""
        by = self.data().get("pinned_by")
        if isinstance(by, str) and by:
            return f"pinned in {self.path}, first verified {by}"
        return f"pinned on first use in {self.path}"

    def newest(self, fingerprint: str | None = None) -> dict[str, Any] | None:
        """The newest index seen that the key *fingerprint* verified (None: the pinned key's). Serials are
        kept per key (issue 34): an index another key verified (the renter's own ``--verify-key``, a root
        named for another publisher) never counts for the pinned key's, nor the other way round — an
        attacker's high serial cannot lock the real index out as "replayed"."""
        data = self.data()
        want = fingerprint or data.get("fingerprint")
        return _newest_in(data, want) if isinstance(want, str) else _newest_in(data, None)

    def chain(self) -> list[str]:
        """The fingerprints this source was pinned to, oldest first, ending with the current pin: a root
        the renter names that is one of them still covers the pin (the publisher rotated to a successor its
        key signed)."""
        data = self.data()
        pins = (
            [f for f in data.get("chain", []) if isinstance(f, str)]
            if isinstance(data.get("chain"), list)
            else []
        )
        pin = data.get("fingerprint")
        if isinstance(pin, str) and (not pins or pins[-1] != pin):
            pins.append(pin)
        return pins

    def record(
        self, index: ReleaseIndex, body: bytes, trusted: Trusted, envelope: bytes | None = None
    ) -> None:
        """Remember *index* as the newest seen by the key that verified it and, on first use (or when
        *trusted* pins: the renter's root, a successor the pinned key signed), that key as this source's
        pin. One pick at a time per cache folder (imagesmith.projectlock): the record is read again under
        the lock, so a newer serial another pick recorded meanwhile stays."""
        with projectlock.hold(self.path.parent, command="pick"):
            self._data = None
            self._record(index, body, trusted, envelope)

    def _record(self, index: ReleaseIndex, body: bytes, trusted: Trusted, envelope: bytes | None) -> None:
        data = dict(self.data())
        data["source"] = self.source
        old_pin = data.get("fingerprint")
        if trusted.key is not None and (
            "key" not in data or (trusted.pins and old_pin != trusted.fingerprint)
        ):
            # the first key that verified an index of this source is its pin, whichever named it (the renter's
            # root or key, or the key published beside it with --trust-first-use); a pin moves only to a key
            # the renter named out of band or the successor the pinned key signed
            chain = self.chain()
            by_key = dict(data["by_key"]) if isinstance(data.get("by_key"), dict) else {}
            if isinstance(old_pin, str) and isinstance(data.get("newest"), dict):
                by_key[old_pin] = data.pop("newest")  # the old key's serials stay its own
            moved = by_key.pop(trusted.fingerprint, None)
            if moved is not None:
                data["newest"] = moved
            data["by_key"] = by_key
            data["key"] = trusted.key.pem.decode()
            data["fingerprint"] = trusted.fingerprint
            data["key_type"] = trusted.key_type
            data["chain"] = [*(f for f in chain if f != trusted.fingerprint), trusted.fingerprint][-16:]
            data.pop("pinned_by", None)
            if not trusted.first_use:
                data["pinned_by"] = trusted.how
            if not data["by_key"]:
                del data["by_key"]
        newest = _newest_in(data, trusted.fingerprint)
        if newest is None or index.serial > newest["serial"]:
            line = {
                "serial": index.serial,
                "generated": index.generated,
                "expires": index.expires,
                "sha256": hashlib.sha256(body).hexdigest(),
                "envelope_sha256": hashlib.sha256(envelope or b"").hexdigest(),
                "key": trusted.fingerprint,
                "key_type": trusted.key_type,
            }
            if trusted.fingerprint == data.get("fingerprint"):
                data["newest"] = line
            else:  # a key other than the pin (the renter's own --verify-key): its serials, kept apart
                data["by_key"] = {**(data.get("by_key") or {}), trusted.fingerprint: line}
        if data == self.data():
            return
        self._write(data)

    def pin_if_unpinned(self, pinned: TrustStore, how: str) -> bool:
        """Pin here the key pinned in *pinned* when nothing is pinned here yet (a pin per publisher: the index
        its key signed names this repository among those it is published to); True when it did. Copies the
        record's text: no key is parsed (a pick from bytes verified before loads no crypto)."""
        if "key" in self.data() or self.newest() is not None:
            return False
        theirs = pinned.data()
        data = {
            "source": self.source,
            "key": theirs["key"],
            "fingerprint": theirs["fingerprint"],
            "key_type": theirs.get("key_type", ""),
            "chain": pinned.chain(),
            "pinned_by": how,
        }
        self._write(data)
        return True

    def _write(self, data: dict[str, Any]) -> None:
        atomicio.write_atomic(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")
        self._data = data


def _newest_in(data: dict[str, Any], fingerprint: str | None) -> dict[str, Any] | None:
    """The newest line of the key *fingerprint* in the trust record *data* (None: the pinned key's)."""
    pin = data.get("fingerprint")
    want = fingerprint or pin
    seen = data.get("newest")
    if (
        isinstance(seen, dict)
        and isinstance(seen.get("serial"), int)
        and (want is None or seen.get("key", pin) == want)
    ):
        return seen
    others = data.get("by_key")
    other = others.get(want) if isinstance(others, dict) and isinstance(want, str) else None
    return other if isinstance(other, dict) and isinstance(other.get("serial"), int) else None


#: the fields of a trust record and of its ``newest`` line that hold text (each may be absent: a record
#: written by an earlier imagesmith lacks some)
_RECORD_TEXT: Final[tuple[str, ...]] = ("key", "fingerprint", "key_type", "pinned_by")
_NEWEST_TEXT: Final[tuple[str, ...]] = (
    "generated",
    "expires",
    "sha256",
    "envelope_sha256",
    "key",
    "key_type",
)


def record_problem(raw: Any, source: str) -> str | None:
    """What makes *raw* (a trust record's JSON) other than a record :meth:`TrustStore.record` writes for
    *source*, or None. Fields a later imagesmith may add are let through; those read here must have their
    type, the pinned key its fingerprint."""
    if not isinstance(raw, dict):
        return f"a JSON {type(raw).__name__}, not an object"
    if "source" not in raw:
        return "it names no source"
    if raw["source"] != source:
        return f"its source is {str(raw.get('source'))[:200]!r}, not {source[:200]!r}"
    for name in _RECORD_TEXT:
        if name in raw and not isinstance(raw[name], str):
            return f"{name} is not a string"
    if "key" in raw and raw.get("fingerprint") != pem_fingerprint(raw["key"].encode()):
        return "the pinned key and its fingerprint disagree"
    chain = raw.get("chain", [])
    if not isinstance(chain, list) or not all(isinstance(f, str) and FINGERPRINT.fullmatch(f) for f in chain):
        return "chain is not a list of fingerprints"
    lines: list[tuple[str, Any]] = [("newest", raw["newest"])] if "newest" in raw else []
    by_key = raw.get("by_key", {})
    if not isinstance(by_key, dict):
        return "by_key is not an object"
    lines += [(f"by_key.{name}", line) for name, line in by_key.items()]
    for where, newest in lines:
        problem = _newest_problem(where, newest)
        if problem is not None:
            return problem
    return None


def _newest_problem(where: str, newest: Any) -> str | None:
    if not isinstance(newest, dict):
        return f"{where} is not an object"
    serial = newest.get("serial")
    if not isinstance(serial, int) or isinstance(serial, bool) or serial < 1:
        return f"{where}.serial is {serial!r}, not a positive integer"
    for name in _NEWEST_TEXT:
        if name in newest and not isinstance(newest[name], str):
            return f"{where}.{name} is not a string"
    return None


def check_signature(
    body: bytes, envelope: bytes | None, keys: list[PublicKey], *, source: str, where: str
) -> PublicKey:
    """The key of *keys* whose DSSE envelope signs exactly *body*; IndexTrustError otherwise."""
    from imagesmith import signing
    from imagesmith.errors import SignatureError

    hint = (
        "use the index the release publishes with its signature (release --sign-key), or check the key "
        "(--verify-key / $IMAGESMITH_INDEX_KEY / [release] index_key in the user config)"
    )
    if envelope is None:
        raise IndexTrustError(
            f"{index_flag()} {source}: the index is not signed (no {where}), but a key is set",
            fault=Fault.NOT_SIGNED,
            hint=hint,
        )
    try:
        verified = signing.verify_envelope(envelope, keys, payload_type=signing.INDEX_PAYLOAD_TYPE)
    except SignatureError as exc:
        raise IndexTrustError(
            f"{index_flag()} {source}: bad index signature ({where}): {exc.message}",
            fault=Fault.BAD_SIGNATURE,
            hint=hint,
        ) from None
    if verified.payload != body:
        raise IndexTrustError(
            f"{index_flag()} {source}: the signature ({where}) is valid but signs another index than the one "
            "served",
            fault=Fault.BAD_SIGNATURE,
            hint=hint,
        )
    return verified.key


def choose_key(
    trust: Trust, store: TrustStore, published: bytes | None, *, source: str, published_where: str
) -> Trusted:
    """The key to verify with (see the module docstring for the order)."""
    pinned = store.pinned()
    if trust.key is not None:
        chosen = Trusted.of(trust.key.key, f"from {trust.key.origin}")
        if trust.fingerprint is not None and chosen.fingerprint != trust.fingerprint:
            raise IndexTrustError(
                f"{index_flag()} {source}: the key of {trust.key.origin} is {chosen.fingerprint}, not "
                f"{trust.fingerprint} that {trust.fingerprint_origin} names",
                fault=Fault.KEY_CHANGED,
                hint="give one trust root: the publisher's key or its fingerprint, not two that disagree",
            )
        if pinned is not None and pinned.fingerprint != chosen.fingerprint:
            # the renter's own key verifies; the pin stays (and its serials stay apart: serials per key)
            return replace(
                chosen, aside=f"not the key pinned for this source ({pinned.fingerprint}): pin kept"
            )
        return chosen
    offered = _published_key(published, source=source, where=published_where) if published else None
    newest = store.newest() or {}
    # the key this source is known by: its pin, else (a record written before every verifying key was pinned)
    # the key that verified the newest index seen
    known = pinned.fingerprint if pinned is not None else newest.get("key")
    if trust.fingerprint is not None:
        root = trust.fingerprint
        if pinned is not None and root in store.chain():
            # the pin is the root, or a successor a pinned key signed (rotation): the pin verifies; another
            # key published beside it is taken only as a successor the index names (check_rotation)
            return Trusted.of(pinned, store.pinned_how(), offered=_other(offered, pinned))
        if offered is None:
            raise IndexTrustError(
                f"{index_flag()} {source}: no key with the fingerprint {root} ({trust.fingerprint_origin}) "
                f"is published beside the index ({published_where}) or pinned for this source",
                fault=Fault.NO_KEY,
                hint="read the index from its source again (--refresh), or check the fingerprint with the "
                "publisher",
            )
        if offered.fingerprint != root:
            raise IndexTrustError(
                f"{index_flag()} {source}: the key published beside the index ({published_where}) is "
                f"{offered.fingerprint}, not {root} that {trust.fingerprint_origin} names: someone replaced "
                "the index and its key, or the publisher changed its key without a signed rotation",
                fault=Fault.KEY_CHANGED,
                hint="do not use this index; ask the publisher for its current fingerprint (through the "
                "channel you got the first one from)",
            )
        aside = (
            f"the key pinned before ({pinned.fingerprint}) is replaced by the one {trust.fingerprint_origin} "
            "names"
            if pinned is not None
            else ""
        )
        return Trusted.of(
            offered,
            f"published beside it, the fingerprint {trust.fingerprint_origin} names",
            pins=True,
            aside=aside,
        )
    if pinned is not None:
        return Trusted.of(pinned, store.pinned_how(), offered=_other(offered, pinned))
    if isinstance(known, str):
        refuse_other_published(offered, known, store, source, published_where)
    if offered is not None:
        if trust.first_use:
            return Trusted.of(offered, str(store.path), first_use=True)
        raise IndexTrustError(
            f"{index_flag()} {source}: no trust root for this index: no fingerprint or key named "
            "(--index SRC#sha256:…, --key-fingerprint, --verify-key, $IMAGESMITH_INDEX_KEY, [release] "
            f"index_key of the user config) and none pinned for this source; the key published beside it "
            f"({published_where}, {offered.fingerprint}) is whatever the source serves, so it is not trusted "
            "on its own (nothing was pinned or pulled)",
            fault=Fault.NO_TRUST_ROOT,
            hint=HOW_TO_GET_THE_FINGERPRINT,
        )
    raise IndexTrustError(
        f"{index_flag()} {source}: no key to verify the release index with (no --verify-key, "
        f"$IMAGESMITH_INDEX_KEY or [release] index_key, no key pinned for this source, none published beside "
        f"it at {published_where})",
        fault=Fault.NO_KEY,
        hint=_HOW_TO_GET_A_KEY,
    )


def _other(offered: PublicKey | None, pinned: PublicKey) -> PublicKey | None:
    return offered if offered is not None and offered.fingerprint != pinned.fingerprint else None


def check_rotation(
    index: ReleaseIndex,
    body: bytes,
    envelope: bytes | None,
    trusted: Trusted,
    *,
    store: TrustStore,
    source: str,
    where: str,
    published_where: str,
) -> Trusted:
    """*trusted* (the pin, which verified *index*) when no other key is published beside it; else the
    published key as the pin's successor (TUF's root rotation: the new root is signed by the old root's key
    and by its own) — when the index the pinned key signed names it in ``successor_key`` **and** it signed
    the same bytes too. Anything else is refused: an unsigned claim (a key published beside an index that
    does not name it, or that it did not sign) is someone replacing the key."""
    offered = trusted.offered
    if offered is None:
        return trusted
    if index.successor_key != offered.fingerprint:
        refuse_other_published(offered, trusted.fingerprint, store, source, published_where)
    try:
        check_signature(body, envelope, [offered], source=source, where=where)
    except IndexTrustError:
        raise IndexTrustError(
            f"{index_flag()} {source}: the index the pinned key {trusted.fingerprint} signed names "
            f"{offered.fingerprint} as its successor, but that key did not sign it ({where}): a rotation is "
            "signed by both keys",
            fault=Fault.KEY_CHANGED,
            hint="the publisher signs the rotation index with both keys (release --sign-key OLD --rotate-to "
            "NEW.key); until then this index is not used",
        ) from None
    return Trusted.of(
        offered,
        f"the successor the index signed by {trusted.fingerprint} names",
        pins=True,
        aside=f"key rotation: the pin moves from {trusted.fingerprint} to {offered.fingerprint}",
    )


def refuse_other_published(
    offered: PublicKey | None, known: str, store: TrustStore, source: str, published_where: str
) -> None:
    """Refuse a key published beside the index that is not *known* (the pin): the publisher replaced its
    key without a signed rotation, or someone replaced the index and its key."""
    if offered is None or offered.fingerprint == known:
        return
    whose = (
        "the key pinned for this source on first use"
        if store.pinned() is not None and not store.data().get("pinned_by")
        else "the key that verified this source before"
    )
    raise IndexTrustError(
        f"{index_flag()} {source}: the key published beside the index ({published_where}) is "
        f"{offered.fingerprint}, not {known}, {whose} ({store.path}): the publisher replaced its key, or "
        "someone replaced the index and its key",
        fault=Fault.KEY_CHANGED,
        hint="do not use this index until the publisher confirms the new key through a channel the registry "
        "does not control; a real rotation is an index the pinned key signs naming its successor (the pin "
        "then moves by itself); if the publisher gives you the new fingerprint, pass --key-fingerprint "
        "sha256:NEW (or --index SRC#sha256:NEW)",
    )


def _published_key(data: bytes, *, source: str, where: str) -> PublicKey:
    from imagesmith import signing
    from imagesmith.errors import ConfigError

    try:
        return signing.parse_public_key(data[:MAX_KEY_BYTES], source=where)
    except ConfigError as exc:
        raise IndexTrustError(
            f"{index_flag()} {source}: the key published beside the index is unusable: {exc.message}",
            fault=Fault.BAD_KEY,
            hint=_HOW_TO_GET_A_KEY,
        ) from None


def verified_before(body: bytes, envelope: bytes | None, trust: Trust, store: TrustStore) -> Trusted | None:
    """The key that verified exactly *body* and its signature *envelope* before, when it is the key chosen
    now (the user's, else the pinned one): then the signature need not be checked again (nor ``cryptography``
    loaded) — these are the bytes that passed. None when that is not known: verify as usual. Serial and
    expiry are checked either way."""
    if trust.key is not None:
        fingerprint, how = trust.key.fingerprint, f"from {trust.key.origin}"
    else:
        fingerprint, how = store.data().get("fingerprint"), store.pinned_how()
        if trust.fingerprint is not None and trust.fingerprint not in store.chain():
            return None  # a root that is not the pin's: the published key is checked against it
    newest = store.newest(fingerprint) if isinstance(fingerprint, str) else None
    if (
        newest is None
        or envelope is None  # served without its signature now: checked as such (refused)
        or newest.get("sha256") != hashlib.sha256(body).hexdigest()
        or newest.get("envelope_sha256") != hashlib.sha256(envelope).hexdigest()
    ):
        return None
    if fingerprint is None or fingerprint != newest.get("key"):
        return None
    return Trusted(fingerprint, str(newest.get("key_type", "")), how)


def check_location(index: ReleaseIndex, location: str, *, source: str) -> None:
    """Refuse an index read from the repository *location* (``host/repository``) that its signed
    ``published_to`` does not name: someone who can push to this repository copied another repository's
    signed index here (same publisher, same key: the signature and serial alone cannot tell). An index
    written before ``published_to`` existed names none and is taken (its expiry bounds it)."""
    if not index.published_to or location in index.published_to:
        return
    raise IndexTrustError(
        f"{index_flag()} {source}: the index is signed for {', '.join(index.published_to)}, not for "
        f"{location}: "
        "a copy of another repository's index (someone who can push here put it there)",
        hint="point --index at a repository the publisher releases to (one of those named), and tell the "
        f"publisher that {location} serves another repository's index",
        fault=Fault.WRONG_REPOSITORY,
    )


def check_fresh(
    index: ReleaseIndex,
    body: bytes,
    *,
    source: str,
    store: TrustStore,
    trust: Trust,
    fingerprint: str | None = None,
) -> None:
    """Refuse an index without serial/expiry, an expired one, and one older than the newest seen."""
    if not index.serial or not index.expires:
        raise IndexTrustError(
            f"{index_flag()} {source}: the index carries no serial or expiry (written by an imagesmith "
            "before issue "
            "25), so a replayed or frozen copy cannot be told from the current one",
            fault=Fault.NO_SERIAL,
            hint="the publisher reruns imagesmith release, which adds both and signs them; --no-verify uses "
            "this index unchecked",
        )
    now = trust.clock()
    expires = parse_timestamp(index.expires)
    if expires is None or now >= expires:
        raise IndexTrustError(
            f"{index_flag()} {source}: the index expired on {index.expires} (serial {index.serial}, written "
            f"{index.generated}); it is now {timestamp(now)}: its publisher has not renewed it, or a "
            "mirror serves a frozen copy",
            fault=Fault.EXPIRED,
            hint="the publisher's release run (the nightly) renews and re-signs the index: check that it "
            "runs "
            "and publishes; read the index from another registry of the publisher, or pass --refresh to ask "
            "the source again",
        )
    fresh = parse_timestamp(index.fresh_until) if index.fresh_until else None
    if index.fresh_until and (fresh is None or now >= fresh):
        raise IndexTrustError(
            f"{index_flag()} {source}: the index (serial {index.serial}, written {index.generated}) was "
            f"fresh until {index.fresh_until}; it is now {timestamp(now)}: a frozen copy (a mirror or "
            "registry that stopped at an older index), or its publisher's nightly release has not re-issued "
            "it",
            fault=Fault.NOT_FRESH,
            hint="pass --refresh to ask the source again, or read the index from another registry of the "
            "publisher; tell the publisher if its release job has not run",
        )
    from imagesmith.index import SERIAL_AHEAD_S

    if index.serial > now.timestamp() + SERIAL_AHEAD_S:
        try:
            when = timestamp(datetime.datetime.fromtimestamp(index.serial, datetime.timezone.utc))
        except (OverflowError, OSError, ValueError):
            when = "past the year 9999"
        raise IndexTrustError(
            f"{index_flag()} {source}: the index's serial {index.serial} is the time {when}, more "
            f"than a day after now ({timestamp(now)}): release writes the time it runs, so its host's clock "
            "ran ahead, or this host's clock is behind; recorded as the newest seen, it would make every "
            "later index look like a replay (nothing was recorded)",
            fault=Fault.SERIAL_AHEAD,
            hint="check this host's clock (date -u); if it is right, tell the publisher that its release "
            "host's clock is wrong: its next release (with a right clock) is taken",
        )
    newest = store.newest(fingerprint)
    if newest is None:
        return
    digest = hashlib.sha256(body).hexdigest()
    if index.serial < newest["serial"]:
        raise IndexTrustError(
            f"{index_flag()} {source}: the index served has serial {index.serial} (written "
            f"{index.generated}), "
            "older "
            f"than serial {newest['serial']} (written {newest.get('generated', '?')}) already seen for this "
            "source: a replayed older index (its signature is valid, but it may list images since withdrawn)",
            fault=Fault.REPLAYED,
            hint="ask another registry of the publisher, or wait until the mirror has the current index (the "
            "newer one stays cached); if the publisher really started its index over, remove "
            f"{store.path}",
        )
    if index.serial == newest["serial"] and digest != newest.get("sha256"):
        raise IndexTrustError(
            f"{index_flag()} {source}: two different indexes carry serial {index.serial} (the one served now "
            "and "
            "the one seen before): the publisher's key signed both, or its release ran twice from one base",
            fault=Fault.SERIAL_REUSED,
            hint=f"report it to the publisher; if they confirm the one served now, remove {store.path}",
        )
