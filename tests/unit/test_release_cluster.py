"""Issue 32, the evidence in the release: the step "check cluster evidence" (``check_cluster``,
imagesmith/release/checks.py; the evidence read by imagesmith/release/evidence.py) takes the signed cluster
reports under --reports that claim the cell's digest; a passing one becomes the entry's ``cluster`` (index
schema v2, shown by pick); one for another digest, with a bad signature, a failed verdict or a malformed
signed field refuses the cell, naming the file, before anything is copied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.errors import ConfigError
from imagesmith.index import ClusterSummary, ReleaseIndex, dump_index, parse_index
from imagesmith.release import VerifiedBlobs, release_cell
from imagesmith.release.checks import check_cluster
from imagesmith.release.evidence import collect_cluster_reports
from imagesmith.release.outcome import index_entry
from imagesmith.tags import cluster_tag
from imagesmith.validate import clusterrecord
from imagesmith.validate.redact import redact_cluster
from tests.clusterreports import changed, cluster_document
from tests.unit.test_release_steps import CELL, KEY, REPO, TRUSTED, evidence, registries, run_of, up_to

OTHER = "sha256:" + "e" * 64


def write_cluster(
    folder: Path, data: dict[str, Any], *, envelope: bytes | None = None, signed: bool = True
) -> Path:
    """cluster.json (and, *signed*, cluster.dsse.json: *envelope*, else *data* signed by KEY) in *folder*."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / clusterrecord.CLUSTER_JSON).write_text(json.dumps(data, indent=2))
    if signed:
        env = envelope if envelope is not None else clusterrecord.sign_report(data, key=KEY)
        (folder / clusterrecord.CLUSTER_ATTESTATION).write_bytes(env)
    return folder


def release(tmp_path: Path, clients: dict[str, Any], digest: str) -> Any:
    result, _ = release_cell(
        CELL,
        [evidence(digest)],
        clients,
        dry_run=False,
        trusted=TRUSTED,
        verified=VerifiedBlobs(None),
        cluster_reports=collect_cluster_reports([tmp_path], TRUSTED),
    )
    return result


def test_a_passing_signed_cluster_report_of_the_digest_is_the_entrys_cluster(tmp_path: Path) -> None:
    clients, digest = registries()
    data = cluster_document(digest)
    write_cluster(tmp_path / "cluster", data)
    result = release(tmp_path, clients, digest)
    assert result.status == "promoted", result.reasons
    assert result.cluster == ClusterSummary(
        nodes=3,
        gpus_per_node=8,
        fabric="ib",
        date="2026-12-02T10:00:00Z",
        report_digest=clusterrecord.report_digest(clusterrecord.canonical(redact_cluster(data))),
        artifact=clients["a"].tagged(REPO)[cluster_tag(digest)],  # the signed report attached beside it
    )
    entry = index_entry(CELL, result, [evidence(digest)], "2026-12-02T11:00:00Z")
    assert entry.cluster == result.cluster
    text = dump_index(ReleaseIndex(generated="2026-12-02T11:00:00Z", images=(entry,)))
    assert json.loads(text)["schema"] == "imagesmith.release-index/v2"
    assert parse_index(text, source="i.json").images[0].cluster == result.cluster


def test_without_cluster_evidence_the_entry_has_none_and_the_index_stays_v1(tmp_path: Path) -> None:
    clients, digest = registries()
    write_cluster(tmp_path / "other", cluster_document(OTHER))  # another image's: not this cell's business
    result = release(tmp_path, clients, digest)
    assert (result.status, result.cluster) == ("promoted", None)
    entry = index_entry(CELL, result, [evidence(digest)], "2026-12-02T11:00:00Z")
    text = dump_index(ReleaseIndex(generated="2026-12-02T11:00:00Z", images=(entry,)))
    assert json.loads(text)["schema"] == "imagesmith.release-index/v1"


def _foreign(digest: str) -> tuple[dict[str, Any], bytes | None, bool]:
    """cluster.json says *digest*; the envelope beside it is signed for another digest."""
    return cluster_document(digest), clusterrecord.sign_report(cluster_document(OTHER), key=KEY), True


def _altered(digest: str) -> tuple[dict[str, Any], bytes | None, bool]:
    env = json.loads(clusterrecord.sign_report(cluster_document(digest), key=KEY))
    env["signatures"][0]["sig"] = env["signatures"][0]["sig"][::-1]
    return cluster_document(digest), json.dumps(env).encode(), True


def _unknown_key(digest: str) -> tuple[dict[str, Any], bytes | None, bool]:
    return (
        cluster_document(digest),
        clusterrecord.sign_report(cluster_document(digest), key=signing.generate_key()),
        True,
    )


def _failed(digest: str) -> tuple[dict[str, Any], bytes | None, bool]:
    return cluster_document(digest, failed=True), None, True


def _lying_verdict(digest: str) -> tuple[dict[str, Any], bytes | None, bool]:
    data = changed(
        changed(cluster_document(digest, failed=True), "verdict", "passed"), "summary.verdict", "passed"
    )
    return data, None, True


def _malformed_signed(digest: str) -> tuple[dict[str, Any], bytes | None, bool]:
    bad = changed(cluster_document(digest), "summary.gpus_per_node", 80)
    env = signing.sign_statement(REPO, digest, clusterrecord.CLUSTER_PREDICATE_TYPE, bad, KEY)
    return cluster_document(digest), env, True


def _statement_for_other(digest: str) -> tuple[dict[str, Any], bytes | None, bool]:
    env = signing.sign_statement(
        REPO, OTHER, clusterrecord.CLUSTER_PREDICATE_TYPE, cluster_document(digest), KEY
    )
    return cluster_document(digest), env, True


def _unsigned(digest: str) -> tuple[dict[str, Any], bytes | None, bool]:
    return cluster_document(digest), None, False


def _no_gpus(digest: str) -> tuple[dict[str, Any], bytes | None, bool]:
    return cluster_document(digest, gpus=0), None, True


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_foreign, f"but cluster.dsse.json beside it is signed for {OTHER}"),
        (_altered, "cluster.dsse.json"),
        (_unknown_key, "cluster.dsse.json"),
        (_failed, "failed (node-to-node bandwidth: pair node-1↔node-2"),  # the signed report is redacted
        (_lying_verdict, "failed (node-to-node bandwidth"),
        (_malformed_signed, "summary.gpus_per_node: says 80"),
        (_statement_for_other, "image.digest"),
        (_unsigned, "not signed: no cluster.dsse.json"),
        (_no_gpus, "lists no GPU (nodes[].gpus)"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_a_cluster_report_that_cannot_stand_behind_the_digest_refuses_the_cell_before_any_copy(
    tmp_path: Path, make: Any, words: str
) -> None:
    clients, digest = registries()
    data, env, signed = make(digest)
    write_cluster(tmp_path / "cluster", data, envelope=env, signed=signed)
    result = release(tmp_path, clients, digest)
    assert result.status == "refused"
    assert result.cluster is None
    text = " ".join(result.reasons)
    assert words in text, text
    assert str(tmp_path / "cluster") in text  # the file is named
    assert "imagesmith validate ssh://n1 ssh://n2" in result.reasons[-1]  # and the fix
    assert CELL.tag not in clients["a"].tagged(REPO)  # nothing copied, no tag moved
    assert CELL.tag not in clients["b"].tagged(REPO)


def test_the_step_alone_refuses_and_records(tmp_path: Path) -> None:
    """check_cluster over a run the steps before it left: each rule is its own (removing one fails here)."""
    clients, digest = registries()
    good = write_cluster(tmp_path / "good", cluster_document(digest))
    run = up_to("check cluster evidence", run_of(clients, [evidence(digest)]))
    run.cluster_reports = collect_cluster_reports([good], TRUSTED)
    check_cluster(run)
    assert not run.done
    assert run.result.cluster is not None
    assert run.result.cluster.nodes == 3
    failed = write_cluster(tmp_path / "failed", cluster_document(digest, failed=True))
    run = up_to("check cluster evidence", run_of(clients, [evidence(digest)]))
    run.cluster_reports = collect_cluster_reports([good, failed], TRUSTED)
    check_cluster(run)
    assert run.result.status == "refused"  # one failing cluster holds the digest back, whatever passed
    assert run.result.cluster is None


def test_a_malformed_cluster_json_stops_the_run_naming_the_file_and_field(tmp_path: Path) -> None:
    _clients, digest = registries()
    write_cluster(tmp_path / "c", changed(cluster_document(digest), "nodes.0.boot_id", ""), signed=False)
    with pytest.raises(ConfigError) as err:
        collect_cluster_reports([tmp_path], TRUSTED)
    assert err.value.field == "nodes[0].boot_id"
    assert str(tmp_path / "c" / "cluster.json") in err.value.message


def test_without_trusted_keys_a_cluster_report_is_not_evidence(tmp_path: Path) -> None:
    _clients, digest = registries()
    write_cluster(tmp_path / "c", cluster_document(digest))
    (found,) = collect_cluster_reports([tmp_path], ())
    assert found.claims == (digest,)
    assert found.signed is None
    assert "no trusted public key" in (found.problem or "")


# -- the index records it, old indexes still read, pick shows it --------------------------------------------

CLUSTER_DOC = {
    "nodes": 3,
    "gpus_per_node": 8,
    "fabric": "ib",
    "date": "2026-12-02T10:00:00Z",
    "report_digest": "sha256:" + "a" * 64,
}


def _index_doc(schema: str, cluster: dict[str, Any] | None) -> dict[str, Any]:
    from tests.unit.test_pick import image_doc

    doc = image_doc("2.11.0", "13.0", "3.11")
    if cluster is not None:
        doc["cluster"] = cluster
    return {"schema": schema, "generated": "2026-12-02T11:00:00Z", "images": [doc]}


def test_an_old_v1_index_still_reads_and_a_v1_index_cannot_carry_a_cluster() -> None:
    old = parse_index(json.dumps(_index_doc("imagesmith.release-index/v1", None)), source="old.json")
    assert old.images[0].cluster is None
    assert json.loads(dump_index(old))["schema"] == "imagesmith.release-index/v1"  # rewritten as it was
    with pytest.raises(ConfigError) as err:
        parse_index(json.dumps(_index_doc("imagesmith.release-index/v1", CLUSTER_DOC)), source="i.json")
    assert err.value.field == "images[0].cluster"
    with pytest.raises(ConfigError, match=r"imagesmith\.release-index/v3"):
        parse_index(json.dumps(_index_doc("imagesmith.release-index/v3", None)), source="i.json")


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("nodes", 1, "2 or more nodes, got 1"),
        ("gpus_per_node", 0, "1 or more GPUs, got 0"),
        ("fabric", "infiniband", "unknown value"),
        ("report_digest", "sha256:1", "sha256 of the signed cluster report"),
        ("extra", 1, "unknown field"),
    ],
)
def test_a_malformed_cluster_summary_in_an_index_names_the_field(key: str, value: Any, words: str) -> None:
    bad = dict(CLUSTER_DOC) | {key: value}
    with pytest.raises(ConfigError) as err:
        parse_index(json.dumps(_index_doc("imagesmith.release-index/v2", bad)), source="i.json")
    assert err.value.field == f"images[0].cluster.{key}"
    assert words in err.value.message


def test_pick_prints_the_cluster_line_of_the_picked_image() -> None:
    from imagesmith.commands.output import pick_text
    from imagesmith.pick import Constraints, choose
    from tests.unit.test_pick import GENERIC, host

    index = parse_index(json.dumps(_index_doc("imagesmith.release-index/v2", CLUSTER_DOC)), source="i.json")
    pick = choose(index, host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC)
    line = (
        "validated on 3 nodes × 8 GPUs, fabric ib (InfiniBand) (2026-12-02; cluster report "
        "sha256:aaaaaaaaaaaa…)"
    )
    assert pick.cluster_line == line
    assert f"  {line}" in pick_text(pick).splitlines()
    assert pick.to_json()["cluster"] == CLUSTER_DOC | {"artifact": None}  # released before it was attached
    plain = parse_index(json.dumps(_index_doc("imagesmith.release-index/v2", None)), source="i.json")
    none = choose(plain, host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC)
    assert none.cluster_line == ""
    assert "nodes ×" not in pick_text(none)
    assert none.to_json()["cluster"] is None
