"""Issue 17: the report release attaches in registries is redacted (host names, ssh targets, identity-file
paths, user names); the local report keeps them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from imagesmith.release import parse_report
from imagesmith.validate.redact import REDACTED, redact_report, redact_report_bytes, redact_text

SECRETS = (
    "gpu-node-17.corp.example",
    "alice",
    "/home/alice/.ssh/id_ed25519",
    "/home/alice/.ssh/config",
    "/home/alice/reports/run-3",
    "ssh://alice@gpu-node-17.corp.example:2222",
)


def ssh_report() -> dict[str, Any]:
    return {
        "schema": 2,
        "verdict": "passed",
        "verdict_reason": "18 check(s) passed",
        "target": "ssh://alice@gpu-node-17.corp.example:2222",
        "started": "2026-12-01T00:00:00Z",
        "options": {
            "target": "ssh://alice@gpu-node-17.corp.example:2222",
            "target_label": "ssh://alice@gpu-node-17.corp.example:2222",
            "ssh_identity_file": "/home/alice/.ssh/id_ed25519",
            "ssh_config": "/home/alice/.ssh/config",
            "report_dir": "/home/alice/reports/run-3",
            "shm_min_bytes": 1073741824,
        },
        "gpus": [{"index": 0, "name": "NVIDIA H200", "driver": "580.159.04", "memory_mib": 143771}],
        "checks": [
            {
                "name": "test_record_stack",
                "module": "test_01_record",
                "status": "passed",
                "message": "",
                "figures": {"hostname": "gpu-node-17", "kernel": "6.8.0-45-generic", "torch": "2.11.0"},
            },
            {
                "name": "test_nccl_allreduce",
                "module": "test_07_nccl",
                "status": "passed",
                "message": "ran on gpu-node-17.corp.example as alice; log in "
                "/home/alice/reports/run-3/nccl.log",
                "fix": "ssh -i /home/alice/.ssh/id_ed25519 alice@gpu-node-17.corp.example true",
                "figures": {"busbw": 330.9},
            },
        ],
        "warnings": ["bob@10.0.0.5 also reachable; see /Users/bob/notes"],
        "logs": ["nccl.log"],
    }


def test_nothing_that_names_the_machine_or_its_users_is_left() -> None:
    out = json.dumps(redact_report(ssh_report()))
    for secret in (*SECRETS, "gpu-node-17", "bob@10.0.0.5", "/Users/bob"):
        assert secret not in out, secret
    red = redact_report(ssh_report())
    assert red["target"] == f"ssh://{REDACTED}"
    assert red["options"]["ssh_identity_file"] == REDACTED
    assert red["options"]["report_dir"] == REDACTED
    assert red["checks"][0]["figures"]["hostname"] == REDACTED


def test_the_evidence_itself_is_kept() -> None:
    red = redact_report(ssh_report())
    assert (red["verdict"], red["verdict_reason"]) == ("passed", "18 check(s) passed")
    assert red["gpus"] == ssh_report()["gpus"]
    assert red["checks"][0]["figures"]["kernel"] == "6.8.0-45-generic"
    assert red["checks"][1]["figures"] == {"busbw": 330.9}
    assert red["options"]["shm_min_bytes"] == 1073741824
    assert red["logs"] == ["nccl.log"]


def test_image_references_and_digests_are_not_mangled() -> None:
    digest = "sha256:" + "a" * 64
    for text in (
        f"ghcr.io/acme/torch@{digest}",
        f"127.0.0.1:5000/acme/torch:2.11@{digest}",
        "torch @ file:///wheels/torch-2.11.0.whl",
        "docker://imagesmith-validate-1",
    ):
        assert redact_text(text) == text


def test_redaction_is_idempotent() -> None:
    once = redact_report_bytes(json.dumps(ssh_report()).encode())
    assert redact_report_bytes(once) == once


def test_release_attaches_the_redacted_report_and_indexes_its_digest(tmp_path: Path) -> None:
    body = json.dumps(ssh_report()).encode()
    report = parse_report(body, source="report.json")
    assert report.body == body  # the local file is untouched
    published = report.published_body.decode()
    for secret in SECRETS:
        assert secret not in published
    assert report.validated_on().report_digest == report.sha
    # read back from a registry (already redacted), the digest is the same: the index entry still matches
    again = parse_report(report.published_body, source="registry artifact")
    assert again.sha == report.sha


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
_TEXT = st.sampled_from(
    ["ssh://u@h.example:22", "/home/u/.ssh/id", "a@b.example", "x@sha256:" + "a" * 64, "<redacted>", "h"]
)


@settings(max_examples=int(os.environ.get("IMAGESMITH_FUZZ_EXAMPLES", "25")), deadline=None)
@given(
    extra=st.dictionaries(st.text(max_size=12), _JSON, max_size=5),
    target=_TEXT | st.text(max_size=30),
    options=st.dictionaries(
        st.sampled_from(["target", "ssh_identity_file", "report_dir", "ssh_config", "other"]),
        _TEXT | _JSON,
        max_size=5,
    ),
    checks=st.lists(st.dictionaries(st.sampled_from(["name", "figures", "message"]), _JSON), max_size=3)
    | _JSON,
)
def test_any_report_shape_redacts_without_error_and_idempotently(
    extra: dict[str, Any], target: str, options: Any, checks: Any
) -> None:
    report = {**extra, "target": target, "options": options, "checks": checks}
    once = redact_report(report)
    assert redact_report(once) == once
    assert "ssh://u@h.example" not in json.dumps(once)
