"""Registry kinds live in one data file (imagesmith/data/registry_kinds.toml, read by imagesmith.kinds):
adding a kind is a row there plus the regenerated registries schema (docs/architecture.md, recipe "A
registry kind")."""

from __future__ import annotations

import ast
import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagesmith import kinds
from imagesmith.errors import ConfigError
from tests import astcache
from tests.repo import REPO

NEW_KIND = r"""

[[kind]]
name = "gitlab"
hosts = ['registry\.gitlab\.com']
hint = "a GitLab deploy token; with nothing else set imagesmith runs `{command}`"
command_example = "glab auth token"
china = true
source = "GitLab docs, container registry authentication"

[[kind.token]]
host = 'registry\.gitlab\.com'
argv = ["glab", "auth", "token"]
username = "oauth2"
valid_hours = 2
install = "install the GitLab CLI (`glab`)"
login = "run `glab auth login`"
source = "GitLab docs, glab auth token"

[[kind.realm]]
registry = 'registry\.gitlab\.com'
realm = "gitlab.com"
source = "GitLab docs: Bearer realm=\"https://gitlab.com/jwt/auth\""
"""

PROBE = """
from pathlib import Path
from imagesmith.matrix import load_registries
from imagesmith.scaffold import registry_kind
from imagesmith.credentials import credential_chain, auth_hint, realm_problem
from imagesmith.kinds import china_kinds
regs = Path("regs.toml")
regs.write_text(
    '[registries.gl]\\nhost = "registry.gitlab.com"\\nnamespace = "acme"\\nrepository = "torch"\\n'
    'kind = "gitlab"\\n'
)
assert load_registries(regs)["gl"].kind == "gitlab"
assert registry_kind("registry.gitlab.com") == "gitlab"
chain = credential_chain("registry.gitlab.com", "gitlab", name="gl")
creds = chain.resolve()
assert (creds.username, creds.password) == ("oauth2", "glab-token"), creds
assert credential_chain("registry.gitlab.com", "generic").token_command == "glab auth token"
assert auth_hint("registry.gitlab.com", "gitlab", chain.token_command).endswith("runs `glab auth token`")
base = "https://registry.gitlab.com"
assert realm_problem(base, "registry.gitlab.com", "gitlab", "https://gitlab.com/jwt/auth") is None
assert "gitlab" in china_kinds()
print("ok")
"""


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = astcache.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_no_module_but_kinds_names_a_registry_kind() -> None:
    """A kind's name appears as a string only in the data file: code asks imagesmith.kinds (``generic``, the
    kind of every registry that declares none, excepted)."""
    names = set(kinds.kind_names()) - {"generic"}
    found = [
        f"{path.relative_to(REPO)}:{line}: {value!r}"
        for path in sorted((REPO / "imagesmith").rglob("*.py"))
        if path.name != "kinds.py"
        for line, value in _string_constants(path)
        if value in names
    ]
    assert found == []


def test_a_new_kind_is_one_row_and_the_regenerated_schema(tmp_path: Path) -> None:
    """The recipe, done on a copy: one [[kind]] row (hosts, token command, realm, hint, china) and
    ``imagesmith schema``; the two files are all that change, and the kind works everywhere."""
    root = tmp_path / "copy"
    shutil.copytree(REPO / "imagesmith", root / "imagesmith", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "docs" / "schemas", root / "docs" / "schemas")
    before = tmp_path / "before"
    shutil.copytree(root, before)
    with (root / "imagesmith/data/registry_kinds.toml").open("a") as f:
        f.write(NEW_KIND)
    env = dict(os.environ, PYTHONPATH=str(root), DOCKER_CONFIG=str(tmp_path / "none"))
    run = [sys.executable, "-c", "import sys; from imagesmith.cli import main; sys.exit(main(['schema']))"]
    proc = subprocess.run(run, cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def changed(a: Path, b: Path) -> list[str]:
        cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
        out = [str((a / n).relative_to(before)) for n in cmp.diff_files + cmp.left_only + cmp.right_only]
        for sub in cmp.common_dirs:
            out += changed(a / sub, b / sub)
        return out

    assert sorted(changed(before, root)) == [
        "docs/schemas/registries.toml.schema.json",
        "imagesmith/data/registry_kinds.toml",
    ]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "glab").write_text("#!/bin/sh\necho glab-token\n")
    (bin_dir / "glab").chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.strip() == "ok", proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ('[[kind]]\nname = "Bad Name"\nsource = "s"\n', "is not a new lowercase kind name"),
        ('[[kind]]\nname = "x"\nhosts = ["("]\nsource = "s"\n', "is not a regular expression"),
        ('[[kind]]\nname = "x"\nsource = "s"\n[[kind.token]]\nhost = "h"\nusername = "u"\n', "install"),
        ('[[kind]]\nname = "x"\nunmatched = "u"\nsource = "s"\n', "unmatched needs"),
        ('[[kind]]\nname = "generic"\nsource = "s"\n', "is not a new lowercase kind name"),
    ],
)
def test_a_broken_row_is_one_error_naming_it(row: str, says: str) -> None:
    text = (REPO / "imagesmith/data/registry_kinds.toml").read_text() + "\n" + row
    with pytest.raises(ConfigError, match=r"registry_kinds\.toml") as info:
        kinds.parse(text)
    assert says in info.value.message


def test_the_packaged_kinds_keep_what_the_code_knew_before() -> None:
    """The kinds and their host rules as they were written in code before issue 24 (schema, scaffold,
    credentials, pick) are kept, first and in their order, but for ``acr``, split into Aliyun's (in China) and
    Azure's (issue 31); a kind added after them (the recipe) passes."""
    assert kinds.kind_names()[:10] == (
        "generic",
        "dockerhub",
        "ghcr",
        "aliyun-acr",
        "azure-acr",
        "tcr",
        "swr",
        "ecr",
        "quay",
        "artifact-registry",
    )
    assert {"aliyun-acr", "tcr", "swr"} <= set(kinds.china_kinds())
    assert not {"generic", "dockerhub", "ghcr", "azure-acr", "ecr", "quay", "artifact-registry"} & set(
        kinds.china_kinds()
    )
    hosts = {
        "docker.io": "dockerhub",
        "registry-1.docker.io": "dockerhub",
        "ghcr.io": "ghcr",
        "quay.io": "quay",
        "registry.cn-hangzhou.aliyuncs.com": "aliyun-acr",
        "myreg.azurecr.io": "azure-acr",
        "123456789012.dkr.ecr.eu-west-1.amazonaws.com": "ecr",
        "x.tencentcloudcr.com": "tcr",
        "ccr.ccs.tencentyun.com": "tcr",
        "europe-west4-docker.pkg.dev": "artifact-registry",
        "registry.example": "generic",
    }
    assert {h: kinds.kind_of_host(h) for h in hosts} == hosts
    assert kinds.token_kind("public.ecr.aws", "generic") == "ecr"
    command = kinds.token_command("1234.dkr.ecr.x.amazonaws.com", "ecr")
    assert command is not None
    assert command.problem.startswith("kind ecr, but host 1234.dkr.ecr.x.amazonaws.com is not ACCOUNT")
    assert kinds.token_command("registry.cn-hangzhou.aliyuncs.com", "aliyun-acr") is None


def test_the_retired_acr_kind_is_one_error_naming_the_kind_for_the_host(tmp_path: Path) -> None:
    """``acr`` covered Aliyun's and Azure's registries (issue 31): a registries file naming it gets one
    error whose fix is the kind of that host; a release index written before reads it by the host."""
    from imagesmith.index import RegistryCopy
    from imagesmith.matrix import load_registries

    for host, new in [
        ("registry.cn-hangzhou.aliyuncs.com", "aliyun-acr"),
        ("myreg.azurecr.io", "azure-acr"),
        ("registry.example", None),
    ]:
        path = tmp_path / "registries.toml"
        path.write_text(f'[registries.a]\nhost = "{host}"\nnamespace = "n"\nkind = "acr"\n')
        with pytest.raises(ConfigError) as info:
            load_registries(path)
        assert info.value.field == "registries.a.kind"
        assert "'acr' is no longer a registry kind" in info.value.message
        assert info.value.hint == (
            f'kind = "{new}"' if new else "kind = one of aliyun-acr, azure-acr, by the host's cloud"
        )
        copy = RegistryCopy.parse(
            name="a", reference=f"{host}/n/torch:t", digest="sha256:" + "0" * 64, kind="acr"
        )
        assert copy.kind == (new or "generic")
    assert kinds.get("acr") is None
    assert kinds.current("ghcr", "ghcr.io") == "ghcr"


def test_a_retired_row_must_split_into_kinds() -> None:
    text = (REPO / "imagesmith/data/registry_kinds.toml").read_text()
    bad = text.replace('split = ["aliyun-acr", "azure-acr"]', 'split = ["aliyun-acr", "nope"]')
    with pytest.raises(ConfigError, match=r"retired\[0\]"):
        kinds.parse(bad)
