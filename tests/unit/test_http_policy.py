"""One HTTP policy (imagesmith/http.py): every HTTP path takes its timeouts, retries and caps from a named
policy there; no other module sets them inline or calls requests' module functions."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagesmith import http
from imagesmith.registry import RetryPolicy
from tests import astcache
from tests.repo import REPO

HTTP_CALLS = frozenset({"get", "head", "post", "put", "patch", "delete", "request", "options"})
#: calls whose numeric keywords are an HTTP policy
POLICY_KEYWORDS = {"timeout", "attempts", "backoff", "deadline", "max_bytes"}


def _numeric(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    return isinstance(node, ast.Tuple) and any(_numeric(e) for e in node.elts)


def findings(source: str, path: str) -> list[str]:
    out = []
    for node in ast.walk(astcache.parse(source, path)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute | ast.Name):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        owner = node.func.value if isinstance(node.func, ast.Attribute) else None
        if isinstance(owner, ast.Name) and owner.id == "requests" and name in HTTP_CALLS:
            out.append(f"{path}:{node.lineno}: requests.{name}(…) outside imagesmith/http.py")
        spoken = owner is not None and any(w in ast.unparse(owner) for w in ("session", "requests", "http"))
        if name in {"client_for", "RegistryClient"} or (name in HTTP_CALLS and spoken):
            for kw in node.keywords:
                if kw.arg in POLICY_KEYWORDS and _numeric(kw.value):
                    out.append(f"{path}:{node.lineno}: {name}({kw.arg}={ast.unparse(kw.value)}) inline")
    return out


def test_no_http_path_sets_its_own_policy() -> None:
    found = []
    for path in sorted((REPO / "imagesmith").rglob("*.py")):
        if path.name == "http.py" and path.parent.name == "imagesmith":
            continue
        found += findings(path.read_text(), str(path.relative_to(REPO)))
    assert found == []


#: the modules that send HTTP requests themselves: the policy's own, and the registry transport (it follows
#: redirects hop by hop with :data:`imagesmith.http.REGISTRY`'s timeouts, retries and caps)
SENDERS = frozenset(
    {
        "imagesmith/http.py",
        "imagesmith/registry/transport.py",
        "imagesmith/registry/upload.py",
        "imagesmith/registry/client.py",
        "imagesmith/registry/copy.py",
        "imagesmith/registry/faults.py",  # the fault table: urllib3's exception types
    }
)
#: what opens a connection or sends a request without a policy: another HTTP client, a raw socket
RAW_CALLS = frozenset(
    {
        "urlopen",
        "urlretrieve",
        "HTTPConnection",
        "HTTPSConnection",
        "PoolManager",
        "ProxyManager",
        "connection_from_url",
        "create_connection",
        "socket",
    }
)
RAW_MODULES = frozenset({"urllib.request", "http.client", "urllib3", "httpx", "aiohttp", "socket", "ftplib"})


def raw_findings(source: str, path: str) -> list[str]:
    """Requests sent around the policy: a session's or requests' own ``get``/``post``/… (with or without a
    timeout: :func:`imagesmith.http.get` takes the session), another HTTP client or a socket."""
    out = []
    for node in ast.walk(astcache.parse(source, path)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            out += [
                f"{path}:{node.lineno}: imports {n}"
                for n in names
                if n.split(".")[0] in RAW_MODULES or n in RAW_MODULES
            ]
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute | ast.Name):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        owner = ast.unparse(node.func.value) if isinstance(node.func, ast.Attribute) else ""
        if name in HTTP_CALLS and (owner == "requests" or "session" in owner.lower()):
            out.append(f"{path}:{node.lineno}: {owner}.{name}(…): send it with imagesmith.http.get")
        elif name in RAW_CALLS:
            out.append(f"{path}:{node.lineno}: {ast.unparse(node.func)}(…) opens a connection of its own")
    return out


def test_every_http_request_goes_through_the_policy() -> None:
    """Outside imagesmith/http.py and the registry transport, no module sends a request itself: a
    ``session.get(url)`` without a timeout waits for ever, a ``urlopen`` has no CA, cap or retry of ours.
    (The validation suite and its probes run in the target's Python, not this tool: they open no HTTP
    connection, and take a free port for torch's rendezvous with a socket.)"""
    found = []
    for path in sorted((REPO / "imagesmith").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel in SENDERS or rel.startswith(("imagesmith/validate/suite/", "imagesmith/validate/probes/")):
            continue
        found += raw_findings(path.read_text(), rel)
    assert found == []


@pytest.mark.parametrize(
    "snippet",
    [
        "self.session.get(url)\n",
        "import requests\nrequests.post(url, data=b'')\n",
        "from urllib.request import urlopen\nurlopen(url)\n",
        "import http.client\nhttp.client.HTTPSConnection(host)\n",
        "import urllib3\nurllib3.PoolManager().request('GET', url)\n",
        "import socket\nsocket.create_connection((host, 443))\n",
    ],
)
def test_the_guard_finds_a_request_sent_around_the_policy(snippet: str) -> None:
    assert raw_findings(snippet, "x.py") != []


def test_the_guard_lets_the_policy_and_url_parsing_pass() -> None:
    snippet = (
        "from urllib.parse import urlsplit\nimport requests\nfrom imagesmith import http\n"
        "s = requests.Session()\nr = http.get(url, http.PACKAGE_INDEX, session=s)\n"
        "try:\n    pass\nexcept requests.RequestException:\n    pass\n"
    )
    assert raw_findings(snippet, "x.py") == []


@pytest.mark.parametrize(
    "snippet",
    [
        "import requests\nrequests.get(url, timeout=30, stream=True)\n",
        "client = client_for(target, attempts=2, backoff=0.2, timeout=20.0)\n",
        "self.session.get(url, timeout=(15.0, 120.0))\n",
    ],
)
def test_the_guard_finds_an_inline_policy(snippet: str) -> None:
    """What pick (`requests.get(url, timeout=30)`, `client_for(…, attempts=2, …)`), sources and refresh did
    before issue 24."""
    assert findings(snippet, "x.py") != []


def test_each_path_keeps_the_timeouts_it_had() -> None:
    assert http.PACKAGE_INDEX.timeout == (15.0, 120.0)  # refresh-compat, lock --sizes
    assert http.SOURCE_ARCHIVE.with_timeout(60.0).timeout == (10.0, 60.0)  # fetch-sources
    assert http.SOURCE_ARCHIVE.with_timeout(5.0).timeout == (5.0, 5.0)
    assert http.RELEASE_INDEX.timeout == (30.0, 30.0)  # pick --index https://
    quick = http.INDEX_ARTIFACT  # pick --index oci://
    assert (quick.attempts, quick.backoff, quick.read_timeout) == (2, 0.2, 20.0)
    policy = RetryPolicy()  # the registry API
    assert (policy.attempts, policy.deadline, policy.connect_timeout, policy.read_timeout) == (
        10,
        180.0,
        10.0,
        60.0,
    )


def test_an_answer_past_its_cap_is_refused_without_reading_on() -> None:
    read: list[int] = []

    def chunks() -> Iterator[bytes]:
        for i in range(10):
            read.append(i)
            yield b"x" * 100

    policy = http.HttpPolicy(name="t", connect_timeout=1, read_timeout=1, max_bytes=250)
    with pytest.raises(http.TooLarge):
        b"".join(http.capped(chunks(), policy))
    assert read == [0, 1, 2]


def test_the_module_is_the_one_named_in_the_docs() -> None:
    assert "| `http.py` |" in Path(REPO / "docs/architecture.md").read_text()


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("imagesmith/pick.py", 1037),  # requests.get(url, timeout=30, stream=True): pick --index https://
        ("imagesmith/refresh.py", 144),  # self.session.get(…): the package index
        ("imagesmith/sources.py", 219),  # requests.get(…): source archives
    ],
)
def test_the_guard_finds_the_paths_of_7f0dc7b(path: str, line: int) -> None:
    """The HTTP paths with policies of their own that issue 24 names (git show 7f0dc7b)."""
    import subprocess

    try:
        source = subprocess.run(
            ["git", "-C", str(REPO), "show", f"7f0dc7b:{path}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"no 7f0dc7b in this checkout: {exc}")
    assert f"{path}:{line}:" in " ".join(raw_findings(source, path))
