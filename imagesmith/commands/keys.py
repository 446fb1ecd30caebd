"""CLI command ``keygen``: a signing key pair for validation attestations and the release index.

``imagesmith.signing`` (and so ``cryptography``) is imported inside the command: the validation suite baked
into images runs ``imagesmith-validate`` without that dependency.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from imagesmith.commands import epilog
from imagesmith.errors import ConfigError

KEYGEN_EPILOG = epilog(
    [
        "imagesmith keygen keys/validation.key",
        "imagesmith keygen ~/.imagesmith/release.key --public keys/release.pub --type ed25519",
    ],
    ["0 = the key pair was written", "2 = a file exists already (never overwritten) or a bad --type"],
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("keygen", epilog=KEYGEN_EPILOG)(keygen)


def keygen(
    private: Annotated[
        Path, typer.Argument(help="private key file to create (mode 0600; never overwritten, never printed)")
    ],
    public: Annotated[
        Path | None,
        typer.Option("--public", help="public key file to create (PEM; default: PRIVATE with suffix .pub)"),
    ] = None,
    key_type: Annotated[
        str, typer.Option("--type", help="ecdsa-p256 (default; cosign's own key type) or ed25519")
    ] = "ecdsa-p256",
) -> None:
    """Create a signing key pair: the private key stays with validation runners, the public key goes in
    [release] trusted_keys of imagesmith.toml."""
    from imagesmith import signing

    if key_type not in signing.KEY_TYPES:
        raise ConfigError(
            f"--type {key_type!r} is not a key type imagesmith signs with",
            hint=f"use one of: {', '.join(signing.KEY_TYPES)}",
        )
    _check_key_path(private, "keygen FILE")
    if public is not None:
        _check_key_path(public, "--public")
    pub = public or private.with_name(
        private.name + ".pub" if private.suffix == "" else private.stem + ".pub"
    )
    created = [str(p.parent) for p in dict.fromkeys((private, pub)) if not p.parent.exists()]
    finishing = private.is_file() and private.stat().st_size > 0 and not os.path.lexists(pub)
    key = signing.write_keypair(private, pub, key_type, finish=True)
    if finishing:  # an earlier keygen was killed between its two files
        typer.echo(
            f"public key:  {pub} ({key.key_type}, id {key.key_id}; written from the existing {private})"
        )
        return
    for folder in dict.fromkeys(created):
        typer.echo(f"created folder {folder}/")
    typer.echo(f"private key: {private} (mode 0600; keep it on validation runners only)")
    typer.echo(f"public key:  {pub} ({key.key_type}, id {key.key_id})")
    typer.echo(f'trust it:    add "{pub}" to [release] trusted_keys in imagesmith.toml')


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
        )
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(
                    f"{flag} {text}: {parent} is a file, not a folder",
                    hint=f"give a path in a folder, e.g. {example}",
                )
            break
