"""CLI command ``sbom``: the SBOM of a built image, made from the image by syft, signed for release."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imagesmith import atomicio, settings
from imagesmith.commands import epilog

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
    image: Annotated[str, typer.Argument(help="the image by digest: HOST/REPO@sha256:<hex>")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="folder for sha256-<hex>.spdx.json (and, signed, sha256-<hex>.sbom.dsse.json): what "
            "release --scan-reports reads",
        ),
    ],
    sign_key: Annotated[
        Path | None,
        typer.Option(
            "--sign-key",
            help="private key that signs the in-toto SBOM attestation (predicateType "
            "https://spdx.dev/Document); default $IMAGESMITH_SIGNING_KEY",
        ),
    ] = None,
    lock: Annotated[
        Path | None,
        typer.Option("--lock", help="the cell's lock file: its --hash=sha256 lines go into the SBOM"),
    ] = None,
    engine: Annotated[
        bool, typer.Option("--engine", help="read the image from the local Docker engine, not the registry")
    ] = False,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="the registry speaks plain HTTP (a local test registry)")
    ] = False,
) -> None:
    """Make the SPDX 2.3 SBOM of an image (every OS and Python package, version, license, locked hash)."""
    from imagesmith import sbom as sboms

    hashes: list[tuple[str, str, tuple[str, ...]]] = []
    if lock is not None:
        from imagesmith.errors import ConfigError
        from imagesmith.lock import lock_keys_in, read_lock

        lock_key = next((k for k in lock_keys_in(lock.parent) if k.filename == lock.name), None)
        found = read_lock(lock_key, lock.parent) if lock_key is not None else None
        if found is None:
            raise ConfigError(
                f"--lock {lock}: not a lock file (TORCH-VARIANT-pyX.Y.txt of imagesmith lock)",
                hint="pass the cell's lock file from the project's locks folder",
            )
        hashes = list(found.hashes)
    if out.exists() and not out.is_dir():
        from imagesmith.errors import ConfigError

        raise ConfigError(f"--out {out}: not a folder", hint="give a folder (it is made when missing)")
    key_file = sign_key or (
        Path(str(settings.get("IMAGESMITH_SIGNING_KEY"))) if settings.get("IMAGESMITH_SIGNING_KEY") else None
    )
    signer = None
    if key_file is not None:  # read before syft runs: a bad key leaves no unsigned document behind
        from imagesmith import signing

        signer = signing.load_signing_key(key_file)
    doc, digest, seconds = sboms.timed_sbom(image, engine=engine, insecure=insecure, hashes=hashes)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (sboms.stem(digest) + sboms.SPDX_SUFFIX)
    atomicio.write_atomic(path, sboms.dump(doc))
    s = sboms.summarize(doc)
    typer.echo(
        f"{path}: {len(s.os_packages)} OS package(s), {len(s.python_packages)} Python package(s) "
        f"({s.hashed} with a locked sha256, {s.licensed} with a license), {seconds:.1f} s"
    )
    if signer is not None:
        envelope = sboms.sign_sbom(doc, repository=image.rpartition("@")[0], digest=digest, key=signer)
        att = out / (sboms.stem(digest) + sboms.SBOM_ENVELOPE_SUFFIX)
        atomicio.write_atomic(att, envelope)
        typer.echo(f"{att}: signed ({signer!r})")
