"""CLI command ``sbom``: the SBOM of a built image, made from the image by syft, signed for release.

The flags go into one :class:`~imagesmith.sbomrequest.SbomRequest`; its rules, the run and the result are
``imagesmith.sbomrequest``'s, imported when the command runs (``imagesmith --help`` does not need it).
"""

from __future__ import annotations

import typer

from imagesmith.commands import epilog, flags

SBOM_EPILOG = epilog(
    [
        "imagesmith sbom 127.0.0.1:5000/team/torch@sha256:<hex> --out scans/ --insecure",
        "imagesmith sbom ghcr.io/acme/torch@sha256:<hex> --out scans/ --sign-key keys/validation.key "
        "--lock locks/2.11.0-cu130-py3.11.txt",
    ],
    [
        "0 = the SBOM (and its signed attestation) was written",
        "2 = bad reference or flags, syft missing or failed, or its document is about another digest",
    ],
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("sbom", epilog=SBOM_EPILOG)(sbom)


def sbom(
    image: flags.SbomImage,
    out: flags.SbomOut,
    sign_key: flags.SbomSignKey = None,
    lock: flags.SbomLock = None,
    engine: flags.SbomEngine = False,
    insecure: flags.SbomInsecure = False,
) -> None:
    """Make the SPDX 2.3 SBOM of an image (every OS and Python package, version, license, locked hash)."""
    from imagesmith import sbomrequest

    request = sbomrequest.SbomRequest(
        image=image, out=out, sign_key=sign_key, lock=lock, engine=engine, insecure=insecure
    )
    result = sbomrequest.make(request, sbomrequest.prepare(request))
    for line in result.lines():
        typer.echo(line)
