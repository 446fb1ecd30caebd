"""Issue 32, the evidence: the cluster report is one record (imagesmith/validate/clusterrecord.py) — read and
written in one place, versioned, with the image digest it is evidence for and a summary that is recomputed,
never taken at its word; signed as an attestation of that digest; refused, naming the file and the field,
when it is malformed or its fields disagree."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.errors import ConfigError, SignatureError
from imagesmith.validate import clusterrecord
from imagesmith.validate.clusterrecord import ClusterReport
from imagesmith.validate.redact import redact_cluster
from tests.clusterreports import DELETE, changed, cluster_document

DIGEST = "sha256:" + "d" * 64
OTHER = "sha256:" + "e" * 64
KEY = signing.generate_key()
TRUSTED = [KEY.public]


def body(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()


def test_a_report_reads_back_with_its_image_and_summary() -> None:
    report = ClusterReport.parse(body(cluster_document(DIGEST)), source="c.json")
    assert report.schema == clusterrecord.SCHEMA == 2
    assert report.image_digest == DIGEST
    assert report.image_reference == f"reg.example/acme/torch@{DIGEST}"
    assert (len(report.nodes), report.gpus_per_node, report.fabric) == (3, 8, "ib")
    assert report.verdict == report.promises_verdict == "passed"
    s = report.summary(report_digest="sha256:" + "1" * 64)
    assert (s.nodes, s.gpus_per_node, s.fabric, s.date) == (3, 8, "ib", "2026-12-02T10:00:00Z")


def test_the_narrowest_node_is_the_clusters_width() -> None:
    data = cluster_document(DIGEST)
    data["nodes"][1]["gpus"] = data["nodes"][1]["gpus"][:4]
    data["summary"] = clusterrecord.summary_json(data)
    assert ClusterReport.parse(body(data), source="c.json").gpus_per_node == 4


def test_a_schema_1_report_without_image_or_summary_still_reads() -> None:
    old = changed(changed(cluster_document(None), "summary", DELETE), "image", DELETE)
    old["schema"] = 1
    report = ClusterReport.parse(body(old), source="old.json")
    assert report.image_digest is None
    assert report.schema == 1


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        ("schema", 3, "schema", "unknown value 3"),
        ("kind", "a report", "kind", "unknown value"),
        ("verdict", "PASS", "verdict", "unknown value"),
        ("image.digest", "sha256:abc", "image.digest", "does not match"),
        ("nodes", [], "nodes", "must not be empty"),
        ("nodes.0.gpus", "8", "nodes[0].gpus", "expected a list"),
        ("nodes.1.boot_id", DELETE, "nodes[1].boot_id", "missing"),
        ("declared.fabric", "infiniband", "declared.fabric", "unknown value"),
        ("promises.0.verdict", "ok", "promises[0].verdict", "unknown value"),
        ("summary", DELETE, "summary", "missing"),
        ("summary.nodes", 30, "summary.nodes", "says 30, the report's own fields say 3"),
        ("summary.gpus_per_node", 16, "summary.gpus_per_node", "says 16"),
        ("summary.fabric", "roce", "summary.fabric", "says 'roce'"),
        ("summary.verdict", "failed", "summary.verdict", "says 'failed'"),
        ("nodes.1.name", "root@n1", "nodes", "listed twice"),
        ("extra", 1, "extra", "unknown key"),
    ],
)
def test_a_malformed_field_is_one_error_naming_the_file_and_the_field(
    path: str, value: Any, field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as err:
        ClusterReport.parse(
            body(changed(cluster_document(DIGEST), path, value)), source="reports/c/cluster.json"
        )
    assert "reports/c/cluster.json" in err.value.message
    assert err.value.field == field
    assert words in err.value.message
    assert err.value.hint


@pytest.mark.parametrize("text", [b"{", b"[]", "\u00ff".encode("latin-1"), b"null"])
def test_what_is_no_json_object_is_refused_naming_the_file(text: bytes) -> None:
    with pytest.raises(ConfigError, match=r"cluster report x\.json"):
        ClusterReport.parse(text, source="x.json")


def test_the_verdict_is_recomputed_from_the_promises() -> None:
    lying = changed(
        changed(cluster_document(DIGEST, failed=True), "verdict", "passed"), "summary.verdict", "passed"
    )
    report = ClusterReport.parse(body(lying), source="c.json")
    assert report.verdict == "passed"
    assert report.promises_verdict == "failed"
    assert report.failed() == ("node-to-node bandwidth: pair n1↔n2: n1→n2 2.5 Gb/s",)
    nothing = cluster_document(DIGEST)
    for p in nothing["promises"]:
        p["verdict"] = "not checked"
    assert ClusterReport.parse(body(nothing), source="c.json").promises_verdict == "failed"
    validated = changed(cluster_document(DIGEST), "promises.0.verdict", "not validated")
    assert ClusterReport.parse(body(validated), source="c.json").promises_verdict == "failed"


def test_write_report_writes_the_envelope_the_markdown_then_the_json(tmp_path: Path) -> None:
    data = cluster_document(DIGEST)
    clusterrecord.write_report(tmp_path, data, "# md\n", sign=lambda d: clusterrecord.sign_report(d, key=KEY))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.dsse.json", "cluster.json", "cluster.md"]
    assert json.loads((tmp_path / "cluster.json").read_text()) == data
    signed = clusterrecord.verify_report(
        (tmp_path / "cluster.dsse.json").read_bytes(), TRUSTED, source="cluster.dsse.json"
    )
    assert signed.digest == DIGEST
    # what is signed (and release attaches in registries) is redacted; cluster.json keeps the names
    public = redact_cluster(data)
    assert signed.report == ClusterReport.parse(body(public), source="c.json")
    assert signed.sha == clusterrecord.report_digest(clusterrecord.canonical(public))
    assert [n.name for n in signed.report.nodes] == ["node-1", "node-2", "node-3"]
    text = signed.body.decode()
    for secret in ("root", "n1", "10.0.0.1", "m-1"):
        assert not re.search(rf"(?<![\w-]){re.escape(secret)}(?![\w-])", text), secret
    assert '"boot-1"' in text
    assert "GPU-1-0" in text
    assert signed.published_safe


def test_write_report_refuses_a_document_release_would_refuse_and_writes_nothing(tmp_path: Path) -> None:
    bad = changed(cluster_document(DIGEST), "summary.nodes", 9)
    with pytest.raises(ConfigError, match=r"summary\.nodes"):
        clusterrecord.write_report(
            tmp_path, bad, "# md\n", sign=lambda d: clusterrecord.sign_report(d, key=KEY)
        )
    assert list(tmp_path.iterdir()) == []


def test_a_report_without_an_image_cannot_be_signed() -> None:
    with pytest.raises(ConfigError, match="--image"):
        clusterrecord.sign_report(cluster_document(None), key=KEY)


def test_a_signature_over_another_digest_than_the_report_names_is_refused() -> None:
    data = cluster_document(DIGEST)
    envelope = signing.sign_statement("acme/torch", OTHER, clusterrecord.CLUSTER_PREDICATE_TYPE, data, KEY)
    with pytest.raises(ConfigError) as err:
        clusterrecord.verify_report(envelope, TRUSTED, source="r/cluster.dsse.json")
    assert err.value.field == "image.digest"
    assert DIGEST in err.value.message
    assert OTHER in err.value.message


def test_an_altered_or_foreign_envelope_is_a_signature_error() -> None:
    envelope = clusterrecord.sign_report(cluster_document(DIGEST), key=KEY)
    doc = json.loads(envelope)
    doc["payload"] = doc["payload"][:-8] + "AAAAAAA="
    with pytest.raises(SignatureError):
        clusterrecord.verify_report(json.dumps(doc).encode(), TRUSTED, source="x")
    with pytest.raises(SignatureError):
        clusterrecord.verify_report(envelope, [signing.generate_key().public], source="x")
    validation = signing.sign_statement(
        "acme/torch",
        DIGEST,
        "https://imagesmith.dev/attestation/validation/v1",
        cluster_document(DIGEST),
        KEY,
    )
    with pytest.raises(SignatureError, match="predicateType"):
        clusterrecord.verify_report(validation, TRUSTED, source="x")
