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
from dataclasses import dataclass, field
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

    def clock(self) -> datetime.datetime:
        return self.now or datetime.datetime.now(datetime.timezone.utc)


@dataclass(frozen=True)
class Trusted:
    """The key an index verified with (its fingerprint and type), said in one line (:meth:`line`); *key* is
    the parsed key when it was needed (to verify, or to pin on first use)."""

    fingerprint: str
    key_type: str
    how: str
    first_use: bool = False
    key: PublicKey | None = None

    @classmethod
    def of(cls, key: PublicKey, how: str, *, first_use: bool = False) -> Trusted:
        return cls(key.fingerprint, key.key_type, how, first_use, key)

    def line(self, source: str) -> str:
        if self.first_use:
            return (
                f"note: first use of {index_flag()} {source}: trusting the key published beside it, "
                f"{self.fingerprint} ({self.key_type}), pinned in {self.how}: check this fingerprint with "
                "the publisher"
            )
        return f"index key: {self.fingerprint} ({self.key_type}, {self.how})"


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

    def newest(self) -> dict[str, Any] | None:
        seen = self.data().get("newest")
        return seen if isinstance(seen, dict) and isinstance(seen.get("serial"), int) else None

    def record(
        self, index: ReleaseIndex, body: bytes, trusted: Trusted, envelope: bytes | None = None
    ) -> None:
        """Remember *index* as the newest seen (when it is; with the key that verified it) and, on first use,
        the key as this source's pin. One pick at a time per cache folder (imagesmith.projectlock): the
        record is read again under the lock, so a newer serial another pick recorded meanwhile stays."""
        with projectlock.hold(self.path.parent, command="pick"):
            self._data = None
            self._record(index, body, trusted, envelope)

    def _record(self, index: ReleaseIndex, body: bytes, trusted: Trusted, envelope: bytes | None) -> None:
        data = dict(self.data())
        data["source"] = self.source
        if "key" not in data and trusted.key is not None:
            # the first key that verified an index of this source is its pin, whichever named it: the key
            # published beside it (first use) or the user's (--verify-key, $IMAGESMITH_INDEX_KEY, config) —
            # a later run without the user's key must not trust a key the publisher never used here
            data["key"] = trusted.key.pem.decode()
            data["fingerprint"] = trusted.fingerprint
            data["key_type"] = trusted.key_type
            if not trusted.first_use:
                data["pinned_by"] = trusted.how
        newest = self.newest()
        if newest is None or index.serial > newest["serial"]:
            data["newest"] = {
                "serial": index.serial,
                "generated": index.generated,
                "expires": index.expires,
                "sha256": hashlib.sha256(body).hexdigest(),
                "envelope_sha256": hashlib.sha256(envelope or b"").hexdigest(),
                "key": trusted.fingerprint,
                "key_type": trusted.key_type,
            }
        if data == self.data():
            return
        atomicio.write_atomic(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")
        self._data = data


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
    if "newest" not in raw:
        return None
    newest = raw["newest"]
    if not isinstance(newest, dict):
        return "newest is not an object"
    serial = newest.get("serial")
    if not isinstance(serial, int) or isinstance(serial, bool) or serial < 1:
        return f"newest.serial is {serial!r}, not a positive integer"
    for name in _NEWEST_TEXT:
        if name in newest and not isinstance(newest[name], str):
            return f"newest.{name} is not a string"
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
    if trust.key is not None:
        return Trusted.of(trust.key.key, f"from {trust.key.origin}")
    pinned = store.pinned()
    offered = _published_key(published, source=source, where=published_where) if published else None
    newest = store.newest() or {}
    # the key this source is known by: its pin, else (a record written before every verifying key was pinned)
    # the key that verified the newest index seen
    known = pinned.fingerprint if pinned is not None else newest.get("key")
    if offered is not None and isinstance(known, str) and offered.fingerprint != known:
        whose = (
            "the key pinned for this source on first use"
            if pinned is not None and not store.data().get("pinned_by")
            else "the key that verified this source before"
        )
        raise IndexTrustError(
            f"{index_flag()} {source}: the key published beside the index ({published_where}) is "
            f"{offered.fingerprint}, not {known}, {whose} ({store.path}): the publisher replaced its key, or "
            "someone replaced the index and its key",
            fault=Fault.KEY_CHANGED,
            hint="ask the publisher which key is theirs; if the new one is, pass --verify-key NEW.pub "
            "(or "
            f"set [release] index_key), or remove {store.path} to pin the new key on the next run; "
            "otherwise do not use this index",
        )
    if pinned is not None:
        return Trusted.of(pinned, store.pinned_how())
    if offered is not None:
        return Trusted.of(offered, str(store.path), first_use=True)
    raise IndexTrustError(
        f"{index_flag()} {source}: no key to verify the release index with (no --verify-key, "
        f"$IMAGESMITH_INDEX_KEY or [release] index_key, no key pinned for this source, none published beside "
        f"it at {published_where})",
        fault=Fault.NO_KEY,
        hint=_HOW_TO_GET_A_KEY,
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
    newest = store.newest()
    if (
        newest is None
        or envelope is None  # served without its signature now: checked as such (refused)
        or newest.get("sha256") != hashlib.sha256(body).hexdigest()
        or newest.get("envelope_sha256") != hashlib.sha256(envelope).hexdigest()
    ):
        return None
    if trust.key is not None:
        fingerprint, how = trust.key.fingerprint, f"from {trust.key.origin}"
    else:
        fingerprint, how = store.data().get("fingerprint"), store.pinned_how()
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


def check_fresh(index: ReleaseIndex, body: bytes, *, source: str, store: TrustStore, trust: Trust) -> None:
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
    newest = store.newest()
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
