"""The cluster report: the one type (:class:`ClusterReport`) of the record ``imagesmith validate ssh://n1
ssh://n2 …`` writes (``cluster.json`` and ``cluster.md``, :func:`write_report`), signs (``cluster.dsse.json``,
:func:`sign_report`), release checks (:func:`verify_report`: read by ``release/evidence.py``, judged by the
step ``check_cluster`` of ``release/checks.py``) and a release index carries a summary of
(:meth:`ClusterReport.summary`, the entry's ``cluster``); read and written here, versioned
(:data:`imagesmith.schema.CLUSTER_REPORT`, docs/schemas/cluster-report.schema.json).

Schema 2 (written now) adds ``image`` (the reference and manifest digest the run is evidence for,
``--image IMAGE@DIGEST``; null without it) and ``summary`` (nodes, GPUs per node, fabric, verdict). The
reader never takes either at its word: the verdict is recomputed from the promises, the summary from the
nodes and the declared fabric, and a report whose own fields disagree is refused naming the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from imagesmith import inputs, schema
from imagesmith.errors import ConfigError, SignatureError
from imagesmith.index import ClusterSummary

if TYPE_CHECKING:
    from imagesmith.signing import PublicKey, SigningKey

SCHEMA: Final[int] = schema.CLUSTER_REPORT_SCHEMA
SUPPORTED: Final[tuple[int, ...]] = schema.CLUSTER_REPORT_SCHEMAS
KIND: Final[str] = schema.CLUSTER_REPORT_KIND
CLUSTER_JSON: Final[str] = "cluster.json"
CLUSTER_MD: Final[str] = "cluster.md"
#: the DSSE envelope ``validate --sign-key`` writes beside cluster.json (an in-toto statement about the image
#: digest of ``--image``, predicate: the cluster report)
CLUSTER_ATTESTATION: Final[str] = "cluster.dsse.json"
CLUSTER_PREDICATE_TYPE: Final[str] = "https://imagesmith.dev/attestation/cluster-validation/v1"
_HINT = "pass the cluster.json imagesmith validate ssh://n1 ssh://n2 … wrote"


@dataclass(frozen=True, kw_only=True)
class ClusterNode:
    name: str
    gpus: int


@dataclass(frozen=True, kw_only=True)
class ClusterPromise:
    name: str
    verdict: str
    failures: tuple[str, ...] = ()


def _fail(source: str, key: str, problem: str, hint: str = _HINT) -> ConfigError:
    return ConfigError(
        f"cluster report {source}: {key}: {problem}" if key else f"cluster report {source}: {problem}",
        hint=hint,
        file=source,
        field=key or None,
        problem=problem,
    )


def promises_verdict(promises: Sequence[ClusterPromise]) -> str:
    """validate's own rule: failed when a promise failed or none was checked, else passed."""
    checked = [p for p in promises if p.verdict != "not checked"]
    return "passed" if checked and all(p.verdict == "passed" for p in checked) else "failed"


@dataclass(frozen=True, kw_only=True)
class ClusterReport:
    schema: int
    started: str
    verdict: str
    verdict_reason: str
    fabric: str
    nodes: tuple[ClusterNode, ...]
    promises: tuple[ClusterPromise, ...]
    image_reference: str | None = None
    image_digest: str | None = None

    @property
    def gpus_per_node(self) -> int:
        """The fewest GPUs a node lists (a cluster is as wide as its narrowest node)."""
        return min((n.gpus for n in self.nodes), default=0)

    @property
    def promises_verdict(self) -> str:
        """The verdict the promises give (:func:`promises_verdict`): the ``verdict`` field is never taken at
        its word."""
        return promises_verdict(self.promises)

    def failed(self) -> tuple[str, ...]:
        """``promise: first failure`` of every promise that failed."""
        return tuple(
            f"{p.name}: {p.failures[0] if p.failures else 'failed'}"
            for p in self.promises
            if p.verdict == "failed"
        )

    def summary(self, *, report_digest: str, date: str | None = None) -> ClusterSummary:
        """What a release index records of this report (an entry's ``cluster``)."""
        return ClusterSummary(
            nodes=len(self.nodes),
            gpus_per_node=self.gpus_per_node,
            fabric=self.fabric,
            date=self.started if date is None else date,
            report_digest=report_digest,
        )

    @classmethod
    def parse(cls, body: bytes, *, source: str) -> ClusterReport:
        """A cluster.json's bytes (or a signed predicate's); *source* is named in every error (one
        ConfigError naming the file and the field)."""
        try:
            data = inputs.loads_json(body, source, hint=_HINT)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise _fail(source, "", f"not JSON ({exc.__class__.__name__})") from None
        if not isinstance(data, dict):
            raise _fail(source, "", "not a JSON object")
        schema.CLUSTER_REPORT.check(data, checker=schema.Checker(f"cluster report {source}", docs=_DOCS))
        version = data["schema"]
        if version >= 2 and "summary" not in data:
            raise _fail(source, "summary", "missing (a schema-2 cluster report records its summary)")
        if version < 2 and ("summary" in data or "image" in data):
            key = "summary" if "summary" in data else "image"
            raise _fail(source, key, "is a field of cluster report schema 2, not of schema 1")
        nodes = tuple(ClusterNode(name=n["name"], gpus=len(n["gpus"])) for n in data["nodes"])
        names = [n.name for n in nodes]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise _fail(source, "nodes", f"node {twice!r} is listed twice")
        promises = tuple(
            ClusterPromise(
                name=p["name"],
                verdict=p["verdict"],
                failures=tuple(str(f.get("message") or "") for f in p.get("failures") or ()),
            )
            for p in data["promises"]
        )
        image = data.get("image") or {}
        report = cls(
            schema=version,
            started=data["started"],
            verdict=data["verdict"],
            verdict_reason=str(data.get("verdict_reason") or ""),
            fabric=data["declared"]["fabric"],
            nodes=nodes,
            promises=promises,
            image_reference=image.get("reference"),
            image_digest=image.get("digest"),
        )
        if "summary" in data:
            _check_summary(report, data["summary"], source)
        return report


_DOCS = "docs/validation.md"


def _check_summary(report: ClusterReport, summary: Mapping[str, Any], source: str) -> None:
    """The report's ``summary`` says what its nodes, declared fabric and verdict say."""
    for key, said, fact in (
        ("nodes", summary["nodes"], len(report.nodes)),
        ("gpus_per_node", summary["gpus_per_node"], report.gpus_per_node),
        ("fabric", summary["fabric"], report.fabric),
        ("verdict", summary["verdict"], report.verdict),
    ):
        if said != fact:
            raise _fail(
                source,
                f"summary.{key}",
                f"says {said!r}, the report's own fields say {fact!r}",
                hint="the summary is written from the report: validate again (the file was changed)",
            )


def summary_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``summary`` of a cluster report document (what :meth:`ClusterReport.parse` recomputes)."""
    nodes = data["nodes"]
    return {
        "nodes": len(nodes),
        "gpus_per_node": min((len(n["gpus"]) for n in nodes), default=0),
        "fabric": data["declared"]["fabric"],
        "verdict": data["verdict"],
    }


def image_json(reference: str | None) -> dict[str, str] | None:
    """The ``image`` field of ``--image IMAGE@DIGEST`` (None without one)."""
    if reference is None:
        return None
    return {"reference": reference, "digest": reference.rsplit("@", 1)[1]}


def canonical(predicate: Mapping[str, Any]) -> bytes:
    """The bytes a signed cluster report is read as, and hashed for the index's ``report_digest``."""
    return json.dumps(predicate, indent=2, sort_keys=True, ensure_ascii=False).encode()


def report_digest(predicate_bytes: bytes) -> str:
    return "sha256:" + hashlib.sha256(predicate_bytes).hexdigest()


def sign_report(document: Mapping[str, Any], *, key: SigningKey) -> bytes:
    """The DSSE envelope of the cluster statement: subject the ``image`` of *document*, predicate the report
    redacted (:func:`imagesmith.validate.redact.redact_cluster`: no node host, address, login user or machine
    id; release attaches the envelope to the image in every registry, ``sha256-<hex>.cluster``). The local
    cluster.json keeps them. A report without an image has nothing to attest (``--image IMAGE@DIGEST``)."""
    from imagesmith import signing
    from imagesmith.validate.redact import redact_cluster

    image = document.get("image")
    if not isinstance(image, dict):
        raise ConfigError(
            "--sign-key: a cluster report attests an image, and this run names none",
            hint="give the image the cluster ran: --image REPO@sha256:…",
        )
    repository = str(image["reference"]).rsplit("@", 1)[0]
    plain = redact_cluster(json.loads(json.dumps(document, default=str)))  # what cluster.json holds, redacted
    return signing.sign_statement(repository, str(image["digest"]), CLUSTER_PREDICATE_TYPE, plain, key)


@dataclass(frozen=True, kw_only=True)
class SignedCluster:
    """A verified cluster attestation: the digest it is about, the report it carries, who signed it."""

    digest: str
    report: ClusterReport
    body: bytes  # the predicate, canonical JSON (hashed as the index's report_digest)
    signer: str
    envelope: bytes = b""  # the DSSE envelope verified (what release attaches in registries)
    key: PublicKey | None = None  # the key it verified with (its PEM is attached beside the envelope)

    @property
    def sha(self) -> str:
        return report_digest(self.body)

    @property
    def published_safe(self) -> bool:
        """The signed report names no node host, address, login user or machine id (an envelope signed
        before validate redacted it does): only then may release attach it in registries."""
        from imagesmith.validate.redact import cluster_redacted

        return cluster_redacted(json.loads(self.body))


def verify_report(envelope: bytes, trusted: Sequence[PublicKey], *, source: str) -> SignedCluster:
    """Verify a cluster envelope against *trusted* (SignatureError naming why not: altered, unknown key,
    another predicate, not one digest), then read the report it carries (ConfigError naming the field) and
    check that the report names the digest the statement is about (``image.digest``)."""
    from imagesmith.attestation import verified_statement

    st, verified, subjects = verified_statement(
        envelope, trusted, CLUSTER_PREDICATE_TYPE, where=f"{source}: "
    )
    if len(subjects) != 1:
        raise SignatureError(
            f"{source}: the signed statement names {len(subjects)} digests; a cluster names one"
        )
    body = canonical(st.predicate)
    report = ClusterReport.parse(body, source=source)
    if report.image_digest != subjects[0]:
        raise _fail(
            source,
            "image.digest",
            f"the signed report names {report.image_digest or 'no image'}, the signature is about "
            f"{subjects[0]}",
            hint="sign the report of the image the cluster ran: imagesmith validate ssh://… --image "
            "REPO@sha256:… --sign-key KEY",
        )
    return SignedCluster(
        digest=subjects[0],
        report=report,
        body=body,
        signer=verified.key.describe(),
        envelope=envelope,
        key=verified.key,
    )


def claimed_digest(envelope: bytes) -> str | None:
    """The subject digest an envelope claims, read without trusting it (to match it to a cell)."""
    from imagesmith.attestation import claimed_digest as claimed

    return claimed(envelope)


def write_report(
    folder: Path,
    document: Mapping[str, Any],
    markdown: str,
    *,
    sign: Callable[[Mapping[str, Any]], bytes] | None = None,
) -> None:
    """cluster.dsse.json (with *sign*), cluster.md, then cluster.json (last: a folder with cluster.json holds
    a complete run), each a new file renamed into place. *document* has the shape of
    :data:`imagesmith.schema.CLUSTER_REPORT` (checked here: never write what release would refuse)."""
    from imagesmith.validate.container import write_report_file

    body = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()
    ClusterReport.parse(body, source=str(folder / CLUSTER_JSON))
    if sign is not None:
        write_report_file(folder, CLUSTER_ATTESTATION, sign(document) + b"\n")
    write_report_file(folder, CLUSTER_MD, markdown.encode())
    write_report_file(folder, CLUSTER_JSON, body)
