"""The one error hierarchy of imagesmith.

Every failure a user can act on is an ``ImagesmithError`` subclass with an exit code and a message that names
the file, field, host or registry at fault and says what to do. Only ``imagesmith.cli.main`` catches them.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import TypeVar

_E = TypeVar("_E", bound="ImagesmithError")

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - exercised only on Python 3.10

    class StrEnum(str, Enum):
        """Python 3.10's stand-in: members are their values, as text and in f-strings."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


class Fault(StrEnum):
    """What went wrong, in a word: the ``fault`` of an error (issue 31). A decision compares it with a member
    (``exc.fault is Fault.UNREACHABLE``), so a renamed or misspelt value is a type error, not a branch that
    never matches; a member is its value as text (``f"{fault}"``, JSON, :meth:`ImagesmithError.fields`)."""

    # a registry or its transport
    UNREACHABLE = "unreachable"
    RATE_LIMITED = "rate limited"
    UNAUTHORIZED = "unauthorized"
    DENIED = "denied"
    READ_ONLY = "read-only"
    TOO_LARGE = "too large"
    CORRUPT = "corrupt"
    MANIFEST_UNKNOWN = "manifest unknown"
    NOT_FOUND = "not found"  # a base image the registry mirror does not serve
    INVALID_MANIFEST = "invalid manifest"
    FOREIGN_ARTIFACT = "foreign artifact"
    PROMOTION = "promotion"

    # a registry's own error body (:func:`imagesmith.registry.registry_fault`)
    STORAGE_FULL = "storage full"
    QUOTA_EXCEEDED = "quota exceeded"
    BLOB_UNKNOWN = "blob unknown"
    REPOSITORY_NAME_INVALID = "repository name invalid"
    REPOSITORY_UNKNOWN = "repository unknown"
    MANIFEST_INVALID = "manifest invalid"

    # trust in a release index (:mod:`imagesmith.indextrust`)
    NOT_SIGNED = "not signed"
    BAD_SIGNATURE = "bad signature"
    KEY_CHANGED = "key changed"
    NO_KEY = "no key"
    BAD_KEY = "bad key"
    WRONG_REPOSITORY = "wrong repository"
    NO_SERIAL = "no serial"
    EXPIRED = "expired"
    SERIAL_AHEAD = "serial ahead"
    REPLAYED = "replayed"
    SERIAL_REUSED = "serial reused"
    TRUST_RECORD_UNREADABLE = "trust record unreadable"
    NO_TRUST_ROOT = "no trust root"  # issue 34: no fingerprint, key or pin, and no --trust-first-use
    NOT_FRESH = "not fresh"  # issue 34: past the index's signed fresh_until

    # this machine's own files and processes (atomicio, projectlock: issue 37)
    STORAGE = "storage"
    BUSY = "busy"
    INDEX_MOVED = "index moved"

    # hosts, GPUs and images
    UNKNOWN_GPU = "unknown GPU"
    NO_DEVICES = "no devices"
    NOT_AN_IMAGESMITH_IMAGE = "not an imagesmith image"


class Side(StrEnum):
    """Which end of a copy failed: the ``side`` of an error, put in front of its text (``source registry r1
    …``)."""

    SOURCE = "source"
    DESTINATION = "destination"


class ImagesmithError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with.

    Besides its text an error carries what it is about as fields, for the code that handles it to decide on
    (never on the text): ``registry``/``host``/``repository``/``digest`` (and ``side``, a :class:`Side`: the
    source or destination of a copy), ``fault`` (a :class:`Fault`: what went wrong, in a word: unreachable,
    rate limited, unauthorized, storage full, unknown GPU, …), ``transient`` (waiting may help), ``problem``
    (what is wrong with the thing named, alone: a corrupt blob's hash), ``cell``, ``file``/``field`` (where in
    a file), ``said`` (a program's or service's own words, verbatim: the engine's, a registry's), ``phase``
    (the step that failed: ``manifest PUT``, ``token fetch``, ``index download``, ``docker build``) and
    ``stalled`` (the seconds it went without a byte or a line before it was given up: a deadline, issue 37),
    and the fix as data: ``hint``. The text is rendered once, at the edge (:meth:`render`,
    ``imagesmith.cli``): the ``side`` goes in front of it there.
    """

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        registry: str | None = None,
        host: str | None = None,
        repository: str | None = None,
        digest: str | None = None,
        side: Side | None = None,
        fault: Fault | None = None,
        transient: bool = False,
        problem: str | None = None,
        cell: str | None = None,
        file: str | None = None,
        field: str | None = None,
        said: str | None = None,
        phase: str | None = None,
        stalled: float | None = None,
    ) -> None:
        super().__init__(message)
        self.text = message
        self.hint = hint.strip() if hint and hint.strip() else None
        self.registry = registry
        self.host = host
        self.repository = repository
        self.digest = digest
        self.side = side
        self.fault = fault
        self.transient = transient
        self.problem = problem
        self.cell = cell
        self.file = file
        self.field = field
        self.said = said
        self.phase = phase
        self.stalled = stalled

    @property
    def message(self) -> str:
        """The error line: the text, with the side of a copy in front (``source registry r1 …``)."""
        return f"{self.side} {self.text}" if self.side else self.text

    @message.setter
    def message(self, value: str) -> None:
        self.text, self.side = value, None

    def render(self) -> tuple[str, str | None]:
        """(the ``error:`` line, the ``fix:`` line or None): what ``imagesmith.cli`` prints."""
        return self.message, self.hint

    def fields(self) -> dict[str, object]:
        """The fields that are set (for logs, summaries and tests)."""
        names = ("registry", "host", "repository", "digest", "side", "fault", "problem", "cell", "file")
        out: dict[str, object] = {
            n: getattr(self, n) for n in (*names, "field", "said", "phase", "stalled") if getattr(self, n)
        }
        if self.transient:
            out["transient"] = True
        return out

    def replace(self: _E, **changes: object) -> _E:
        """A copy of this error (same class, fix and fields) with *changes* (fields, ``hint``,
        ``message``)."""
        twin = type(self).__new__(type(self))  # not __init__: subclasses take other arguments
        twin.__dict__.update(self.__dict__)
        twin.__cause__, twin.__context__ = self.__cause__, self.__context__
        twin.__suppress_context__ = self.__suppress_context__
        for name, value in changes.items():
            if name not in ("message", "hint", *_FIELDS):
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            setattr(twin, name, value)
        twin.args = (twin.message,)
        return twin

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  fix: {self.hint}"
        return self.message


_FIELDS = (
    "registry",
    "host",
    "repository",
    "digest",
    "side",
    "fault",
    "transient",
    "problem",
    "cell",
    "file",
    "field",
    "said",
    "phase",
    "stalled",
)


def join_hints(*hints: str | None) -> str | None:
    """Fix lines joined with ``; ``, without repeats or empties (a wrapped error keeps its own fix first)."""
    out: list[str] = []
    for h in hints:
        if h and h.strip() and h.strip() not in out:
            out.append(h.strip())
    return "; ".join(out) or None


class ConfigError(ImagesmithError):
    """A matrix file, registries file, flag or data file is wrong."""

    exit_code = 2


class IndexTrustError(ConfigError):
    """A release index is not trusted (pick, index): no key to check it with, a missing or bad signature, a
    key other than the one pinned for its source, a replayed older index, an expired one. Exit 2, as any
    unusable index."""


class MatrixError(ConfigError):
    """A matrix file is malformed: syntax, unknown key, wrong type, unknown GPU or version."""


class NothingToDoError(ImagesmithError):
    """A selector matched nothing: ``--only`` no cell, or pick's ``--torch``/``--cuda``/``--python`` no image
    of the release index."""

    exit_code = 3


class RenderError(ImagesmithError):
    """A template failed, or the committed dockerfiles/ differ from what the matrices render."""

    exit_code = 4


class SourceCacheError(ImagesmithError):
    """A pinned source archive is missing from the cache or its checksum does not match."""

    exit_code = 5


class BuildError(ImagesmithError):
    """The engine failed to build an image."""

    exit_code = 5


class EngineError(BuildError):
    """No Docker engine can be reached, or it answered something unexpected."""


class PushError(ImagesmithError):
    """A push failed (read from the engine's push stream or the registry API)."""

    exit_code = 6


class RegistryError(ImagesmithError):
    """A registry answered an error: auth, denied, manifest unknown, unreachable."""

    exit_code = 9


class ManifestUnknownError(RegistryError):
    """The registry does not hold that manifest. Never retried."""


class CorruptBlobError(RegistryError):
    """A registry serves a blob whose content does not hash to its digest (or has the wrong size), and it
    could not be repaired through the API. Names the registry, the repository and the digest; never
    retried."""


class ValidationFailed(ImagesmithError):
    """The validation suite ran and at least one check failed, or nothing could be validated."""

    exit_code = 7


class ParseError(ImagesmithError):
    """Host output (nvidia-smi, topo, nccl-tests logs) could not be parsed."""

    exit_code = 7


class ReleaseError(ImagesmithError):
    """A release was refused: no passing validation for the digest, or promotion failed."""

    exit_code = 8


class SignatureError(ReleaseError):
    """A signed envelope (an attestation, the release index's signature) does not verify with a trusted key,
    or says something else than what it is taken for (another digest, another predicate)."""


class NoImageFitsError(ImagesmithError):
    """``imagesmith pick`` found no released image that runs on this host."""

    exit_code = 10


class UpstreamError(ImagesmithError):
    """A package index or file host could not be read, or answered something unexpected (refresh-compat)."""

    exit_code = 12


class StorageError(ImagesmithError):
    """A file could not be written whole: the disk is full or out of inodes, the file system is read-only,
    or the target is a symlink or not a regular file. Names the file, the free space there and what was left
    as it was (imagesmith.atomicio)."""

    exit_code = 13


class BusyError(ImagesmithError):
    """Another imagesmith command holds the project's (or a cache's) lock and did not let go within the wait
    (imagesmith.projectlock). Names the command, its pid and the lock file."""

    exit_code = 14
