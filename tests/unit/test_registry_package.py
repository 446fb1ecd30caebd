"""imagesmith.registry is a package of layers (docs/architecture.md "Where each thing lives"): what callers
import from it stays importable from the package, and RegistryClient is built by client_for alone."""

from __future__ import annotations

import ast
import http.server
import json
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

import imagesmith.registry as registry
from imagesmith.errors import RegistryError
from imagesmith.refs import Registry
from tests import astcache
from tests.localhttp import QuietHTTPServer
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
        for node in ast.walk(astcache.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if name == "RegistryClient":
                    calls.append(f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}")
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


def test_no_module_writes_requests_private_response_state() -> None:
    """The transport reads bodies through requests' own ``content`` (only the raw stream is the deadline's):
    nothing in imagesmith/ assigns ``_content`` or ``_content_consumed`` on a response."""
    writes = []
    for path in sorted((REPO / "imagesmith").rglob("*.py")):
        tree = astcache.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("_content")
            ):
                writes.append(f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}")
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr.startswith("_content"):
                    writes.append(f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}")
    assert writes == []


class _Answers:
    """An HTTP server answering every GET with one status and JSON body, a few bytes at a time."""

    def __init__(self, status: int, body: Mapping[str, object]) -> None:
        data = json.dumps(body).encode()
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                outer.requests += 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                for i in range(0, len(data), 7):
                    self.wfile.write(data[i : i + 7])
                    self.wfile.flush()

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def __enter__(self) -> _Answers:
        return self

    def __exit__(self, *args: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_5xx_naming_a_lasting_fault_is_that_fault_at_once_not_its_codes() -> None:
    """A 507 whose body names storage full (beside an UNAUTHORIZED code) is reported as storage full, with
    its fix, on the first answer: not retried, not read as unauthorized."""
    body = {"errors": [{"code": "UNAUTHORIZED", "message": "write failed: no space left on device"}]}
    with _Answers(507, body) as srv:
        client = registry.RegistryClient(srv.addr, insecure=True, credentials=None, attempts=3, backoff=0.01)
        with pytest.raises(RegistryError) as info:
            client.ping()
    assert srv.requests == 1
    assert info.value.message == (
        f"registry {srv.addr} ({srv.addr}): ping /v2/: storage full: UNAUTHORIZED: write failed: no space "
        "left on device"
    )
    assert info.value.hint is not None
    assert info.value.hint.startswith("free space on the registry's storage")


def test_a_whole_answer_read_within_the_deadline_is_kept_by_requests() -> None:
    body = {"name": "org/app", "tags": [f"t{i}" for i in range(200)]}
    with _Answers(200, body) as srv:
        client = registry.RegistryClient(srv.addr, insecure=True, credentials=None)
        assert client.list_tags("org/app") == body["tags"]
