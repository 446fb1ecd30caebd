"""CLI command ``keygen``: a signing key pair for validation attestations and the release index.

The flags go into one :class:`~imagesmith.keyrequest.KeygenRequest`; its rules, the run and the result are
``imagesmith.keyrequest``'s (which imports ``imagesmith.signing``, and so ``cryptography``, only when it
runs: the validation suite baked into images runs ``imagesmith-validate`` without that dependency).
"""

from __future__ import annotations

import typer

from imagesmith import keyrequest
from imagesmith.commands import epilog, flags

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
    private: flags.PrivateKey,
    public: flags.PublicKey = None,
    key_type: flags.KeyType = keyrequest.DEFAULT_KEY_TYPE,
) -> None:
    """Create a signing key pair: the private key stays with validation runners, the public key goes in
    [release] trusted_keys of imagesmith.toml."""
    request = keyrequest.KeygenRequest(private=private, public=public, key_type=key_type)
    result = keyrequest.keygen(keyrequest.prepare(request))
    for line in result.lines():
        typer.echo(line)
