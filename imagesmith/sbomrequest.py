"""The sbom command's layer between its flags and syft (issue 31): one typed request (:class:`SbomRequest`,
what ``imagesmith sbom`` was given), the rules of the flags in one place (:func:`prepare`: every bad value is
one ``ConfigError`` naming the flag — its ``field`` —, in a fixed order, before syft runs), the run
(:func:`make`: the SPDX document written, and signed when a key was given) and one typed result
(:class:`SbomResult`) the command prints.

The command imports this module when it runs; the signing key's ``cryptography`` is loaded only when a key
is read (an unsigned SBOM does not need it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagesmith import atomicio, settings
from imagesmith import sbom as sboms
from imagesmith.errors import ConfigError
from imagesmith.lock import lock_keys_in, read_lock

if TYPE_CHECKING:
    from imagesmith.signing import SigningKey

#: the setting that names the signing key when --sign-key is not given (signing.SIGNING_KEY_ENV: that module
#: loads cryptography, which an unsigned SBOM does not need)
SIGNING_KEY_ENV = "IMAGESMITH_SIGNING_KEY"


@dataclass(frozen=True, kw_only=True)
class SbomRequest:
    """What ``imagesmith sbom`` was given: IMAGE and its flags as typed values (the flags' defaults)."""

    image: str
    out: Path
    sign_key: Path | None = None
    lock: Path | None = None
    engine: bool = False
    insecure: bool = False


@dataclass(frozen=True, kw_only=True)
class PreparedSbom:
    """A request the rules accepted: the image's digest, the locked hashes of ``--lock``, the key read."""

    digest: str
    hashes: Sequence[tuple[str, str, tuple[str, ...]]] = ()
    signer: SigningKey | None = None


@dataclass(frozen=True, kw_only=True)
class SbomResult:
    """What a run wrote: the SPDX document (and what it counts, how long syft took) and, signed, the
    attestation with the key that signed it."""

    path: Path
    summary: sboms.Summary
    seconds: float
    attestation: Path | None = None
    signer: str = ""

    def lines(self) -> list[str]:
        """What the command prints."""
        s = self.summary
        out = [
            f"{self.path}: {len(s.os_packages)} OS package(s), {len(s.python_packages)} Python package(s) "
            f"({s.hashed} with a locked sha256, {s.licensed} with a license), {self.seconds:.1f} s"
        ]
        if self.attestation is not None:
            out.append(f"{self.attestation}: signed ({self.signer})")
        return out


def prepare(request: SbomRequest) -> PreparedSbom:
    """The rules of the flags, in one place and in this order, before syft runs: ``--lock`` is a lock file of
    ``imagesmith lock`` (its hashes read), ``--out`` a folder or nothing yet, ``--sign-key`` (else
    ``$IMAGESMITH_SIGNING_KEY``) a private key (read before syft runs: a bad key leaves no unsigned document
    behind), IMAGE a reference by digest."""
    r = request
    hashes: list[tuple[str, str, tuple[str, ...]]] = []
    if r.lock is not None:
        lock_key = next((k for k in lock_keys_in(r.lock.parent) if k.filename == r.lock.name), None)
        found = read_lock(lock_key, r.lock.parent) if lock_key is not None else None
        if found is None:
            raise ConfigError(
                f"--lock {r.lock}: not a lock file (TORCH-VARIANT-pyX.Y.txt of imagesmith lock)",
                hint="pass the cell's lock file from the project's locks folder",
                field="--lock",
            )
        hashes = list(found.hashes)
    if r.out.exists() and not r.out.is_dir():
        raise ConfigError(
            f"--out {r.out}: not a folder", hint="give a folder (it is made when missing)", field="--out"
        )
    signer = _signer(r.sign_key)
    return PreparedSbom(digest=sboms.image_digest(r.image), hashes=hashes, signer=signer)


def _signer(flag: Path | None) -> SigningKey | None:
    """The key of ``--sign-key``, else of ``$IMAGESMITH_SIGNING_KEY``, else None; an unusable one is a
    ConfigError whose field names where it came from."""
    setting = settings.get(SIGNING_KEY_ENV)
    key_file = flag or (Path(str(setting)) if setting else None)
    if key_file is None:
        return None
    from imagesmith import signing

    try:
        return signing.load_signing_key(key_file)
    except ConfigError as e:
        raise e.replace(field=e.field or ("--sign-key" if flag is not None else SIGNING_KEY_ENV)) from e


def make(request: SbomRequest, prepared: PreparedSbom) -> SbomResult:
    """Run syft on the image, write its SPDX document into ``--out`` (made when missing) and, with a key, the
    signed in-toto attestation beside it; each file whole or not at all (:mod:`imagesmith.atomicio`)."""
    r, p = request, prepared
    doc, digest, seconds = sboms.timed_sbom(r.image, engine=r.engine, insecure=r.insecure, hashes=p.hashes)
    r.out.mkdir(parents=True, exist_ok=True)
    path = r.out / (sboms.stem(digest) + sboms.SPDX_SUFFIX)
    atomicio.write_atomic(path, sboms.dump(doc))
    result = SbomResult(path=path, summary=sboms.summarize(doc), seconds=seconds)
    if p.signer is None:
        return result
    envelope = sboms.sign_sbom(doc, repository=r.image.rpartition("@")[0], digest=digest, key=p.signer)
    att = r.out / (sboms.stem(digest) + sboms.SBOM_ENVELOPE_SUFFIX)
    atomicio.write_atomic(att, envelope)
    return SbomResult(
        path=path, summary=result.summary, seconds=seconds, attestation=att, signer=repr(p.signer)
    )
