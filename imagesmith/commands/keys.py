"""CLI command ``keygen``: a signing key pair for validation attestations and the release index.

The flags go into one :class:`~imagesmith.keyrequest.KeygenRequest`; its rules, the run and the result are
``imagesmith.keyrequest``'s, imported when the command runs: it loads ``imagesmith.signing`` (and so
``cryptography``), which ``imagesmith --help`` does not need and the validation suite baked into images
(``imagesmith-validate``) does not have.
"""

from __future__ import annotations

import typer

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
    key_type: flags.KeyType = "ecdsa-p256",
) -> None:
    """Create a signing key pair: the private key stays with validation runners, the public key goes in
    [release] trusted_keys of imagesmith.toml."""
    from imagesmith import keyrequest

    request = keyrequest.KeygenRequest(private=private, public=public, key_type=key_type)
    result = keyrequest.keygen(keyrequest.prepare(request))
    for line in result.lines():
        typer.echo(line)
