"""imagesmith.registry is a package of layers (docs/architecture.md "Where each thing lives"): what callers
import from it stays importable from the package, and RegistryClient is built by client_for alone."""

from __future__ import annotations

import ast
from pathlib import Path

import imagesmith.registry as registry
from imagesmith.refs import Registry
from tests.repo import REPO

#: the public names of imagesmith/registry.py before it became a package (7f0dc7b)
PUBLIC = [
    "ACCEPT_MANIFESTS",
    "INDEX_TYPES",
    "MANIFEST_LIST_V2",
    "MANIFEST_V2",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "UPLOAD_CHUNK",
    "VERIFY_ENV",
    "VERIFY_LEVELS",
    "BlobStat",
    "BlobStream",
    "Credentials",
    "Endpoint",
    "ManifestData",
    "RegistryApi",
    "RegistryClient",
    "RegistryFault",
    "RetryPolicy",
    "SizedChunks",
    "Verify",
    "blob_digest",
    "client_for",
    "copy_blob",
    "copy_manifest",
    "docker_ca_file",
    "ensure_blob",
    "lookup_credentials",
    "parse_challenge",
    "read_blob",
    "read_small_blob",
    "registry_fault",
    "retry_after_seconds",
    "verify_blobs",
    "verify_level",
]


def test_every_public_name_is_importable_from_the_package() -> None:
    missing = [name for name in PUBLIC if not hasattr(registry, name)]
    assert missing == []
    assert sorted(registry.__all__) == sorted(set(registry.__all__))


def test_registry_client_is_built_by_client_for_alone() -> None:
    """Outside imagesmith/registry/, no module calls RegistryClient(...) (pick's index artifact included)."""
    calls = []
    for path in sorted((REPO / "imagesmith").rglob("*.py")):
        if Path("imagesmith/registry") in path.relative_to(REPO).parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if name == "RegistryClient":
                    calls.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert calls == []


def test_client_for_takes_the_quick_policy_pick_asks_for() -> None:
    client = registry.client_for(
        Registry(name="127.0.0.1:5000", host="127.0.0.1:5000", repository="x/idx", insecure=True),
        attempts=2,
        backoff=0.2,
        timeout=20.0,
    )
    assert (client.policy.attempts, client.policy.backoff, client.policy.read_timeout) == (2, 0.2, 20.0)
    assert client.name == client.host == "127.0.0.1:5000"
    assert client.base == "http://127.0.0.1:5000"
