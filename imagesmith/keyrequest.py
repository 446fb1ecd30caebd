"""The keygen command's layer between its flags and the key pair (issue 31): one typed request
(:class:`KeygenRequest`, what ``imagesmith keygen`` was given), the rules of the flags in one place
(:func:`prepare`: every bad value is one ``ConfigError`` naming the flag — its ``field`` —, in a fixed order,
before a file is written), the run (:func:`keygen`) and one typed result (:class:`KeygenResult`) the command
prints.

``imagesmith.signing`` (and so ``cryptography``) is imported here: the command imports this module only when
it runs (the validation suite baked into images runs ``imagesmith-validate``, the CLI, without that
dependency).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from imagesmith import signing
from imagesmith.errors import ConfigError
from imagesmith.signing import KeyType

#: the key type of ``--type`` when it is not given (cosign's own key type)
DEFAULT_KEY_TYPE: KeyType = signing.DEFAULT_KEY_TYPE


@dataclass(frozen=True, kw_only=True)
class KeygenRequest:
    """What ``imagesmith keygen`` was given: PRIVATE, ``--public``, ``--type`` (the flags' defaults)."""

    private: Path
    public: Path | None = None
    key_type: str = DEFAULT_KEY_TYPE


@dataclass(frozen=True, kw_only=True)
class PreparedKeygen:
    """A request the rules accepted: the two files, the folders to make for them, and whether this run only
    finishes the pair of an earlier keygen killed between its two files."""

    private: Path
    public: Path
    key_type: KeyType
    created: tuple[str, ...] = ()
    finishing: bool = False


@dataclass(frozen=True, kw_only=True)
class KeygenResult:
    """The key pair written: its files, its type and id, the folders made, whether it was finished."""

    private: Path
    public: Path
    key_type: str
    key_id: str
    created: tuple[str, ...] = ()
    finishing: bool = False

    def lines(self) -> list[str]:
        """What the command prints."""
        if self.finishing:  # an earlier keygen was killed between its two files
            return [
                f"public key:  {self.public} ({self.key_type}, id {self.key_id}; written from the existing "
                f"{self.private})"
            ]
        return [
            *(f"created folder {folder}/" for folder in self.created),
            f"private key: {self.private} (mode 0600; keep it on validation runners only)",
            f"public key:  {self.public} ({self.key_type}, id {self.key_id})",
            f'trust it:    add "{self.public}" to [release] trusted_keys in imagesmith.toml',
        ]


def prepare(request: KeygenRequest) -> PreparedKeygen:
    """The rules of the flags, in one place and in this order: ``--type`` is a key type imagesmith signs
    with, PRIVATE (``keygen FILE``) and then ``--public`` name a file to create (not a folder, not a path
    under a file); the public key's path defaults to PRIVATE with the suffix ``.pub``. A file that exists
    already is refused by the run (:func:`imagesmith.signing.write_keypair`: created exclusively)."""
    r = request
    key_type = next((t for t in signing.KEY_TYPES if t == r.key_type), None)
    if key_type is None:
        raise ConfigError(
            f"--type {r.key_type!r} is not a key type imagesmith signs with",
            hint=f"use one of: {', '.join(signing.KEY_TYPES)}",
            field="--type",
        )
    _check_key_path(r.private, "keygen FILE")
    if r.public is not None:
        _check_key_path(r.public, "--public")
    pub = r.public or r.private.with_name(
        r.private.name + ".pub" if r.private.suffix == "" else r.private.stem + ".pub"
    )
    created = [str(p.parent) for p in dict.fromkeys((r.private, pub)) if not p.parent.exists()]
    finishing = r.private.is_file() and r.private.stat().st_size > 0 and not os.path.lexists(pub)
    return PreparedKeygen(
        private=r.private,
        public=pub,
        key_type=key_type,
        created=tuple(dict.fromkeys(created)),
        finishing=finishing,
    )


def keygen(prepared: PreparedKeygen) -> KeygenResult:
    """Write the key pair (or, *finishing*, the public key of the private one there)."""
    p = prepared
    key = signing.write_keypair(p.private, p.public, p.key_type, finish=True)
    return KeygenResult(
        private=p.private,
        public=p.public,
        key_type=key.key_type,
        key_id=key.key_id,
        created=p.created,
        finishing=p.finishing,
    )


def _check_key_path(path: Path, flag: str) -> None:
    """A key file's path names a file to create: a folder (``.``, ``/``, ``..``, ``dir/``) or a path under a
    file is refused here, naming it (``with_suffix`` would fail on ``.``, and ``dir/`` read as "exists")."""
    text = str(path)
    example = "keys/validation.key" if flag != "--public" else "keys/validation.pub"
    if path.name in ("", ".", "..") or text.endswith("/") or path.is_dir():
        inside = path / "validation.key" if path.is_dir() else example
        raise ConfigError(
            f"{flag} {text}: is a folder; keygen writes a key file",
            hint=f"give a file name for the key, e.g. {inside}",
            field=_field(flag),
        )
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(
                    f"{flag} {text}: {parent} is a file, not a folder",
                    hint=f"give a path in a folder, e.g. {example}",
                    field=_field(flag),
                )
            break


def _field(flag: str) -> str:
    """The ``field`` of an error about *flag*: the argument PRIVATE, or ``--public`` itself."""
    return "PRIVATE" if flag == "keygen FILE" else flag
