"""One configuration layer for the environment (imagesmith/settings.py): every IMAGESMITH_* variable the tool
reads is declared there and read through settings.get; no other module reads one from the environment."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from imagesmith import settings
from tests import astcache
from tests.repo import REPO


def _constants(trees: dict[str, ast.AST]) -> dict[str, str]:
    """Module-level NAME = "IMAGESMITH_…" constants of every module (VERIFY_ENV, TODAY_ENV, …)."""
    out: dict[str, str] = {}
    for tree in trees.values():
        for node in getattr(tree, "body", []):
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            value = getattr(node, "value", None)
            if (
                isinstance(target, ast.Name)
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and value.value.startswith("IMAGESMITH_")
            ):
                out[target.id] = value.value
    return out


def findings(trees: dict[str, ast.AST]) -> list[str]:
    constants = _constants(trees)

    def imagesmith_name(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value if node.value.startswith("IMAGESMITH_") else None
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            if isinstance(head, ast.Constant) and str(head.value).startswith("IMAGESMITH_"):
                return ast.unparse(node)
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return constants.get(name)

    out = []
    for path, tree in trees.items():
        if path == "imagesmith/settings.py" or path.startswith(
            ("imagesmith/validate/suite/", "imagesmith/validate/probes/")
        ):
            # the suite and its probes run in the validation target's Python and read the target's environment
            # (what the image or the probe's caller sets), not this tool's configuration
            continue
        for node in ast.walk(tree):
            # any mapping, not only one named like the environment: ``dict(os.environ).get(…)``, an alias
            # ``e = os.environ; e[…]``, ``os.environ.copy().pop(…)`` read one just the same (only
            # ``settings.get`` may take an IMAGESMITH_* name)
            key: ast.expr | None = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                key = node.slice
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.args
                and node.func.attr in ("get", "getenv", "pop", "setdefault")
                and ast.unparse(node.func.value) != "settings"
            ):
                key = node.args[0]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getenv":
                key = node.args[0] if node.args else None
            if key is None:
                continue
            name = imagesmith_name(key) or (_setting_name(key) if _environment(node) else None)
            if name is not None:
                out.append(f"{path}:{getattr(node, 'lineno', 0)}: reads {name} from the environment")
    return out


#: what a module calls the process environment (``env = os.environ if env is None else env``)
ENVIRONMENT = frozenset({"os.environ", "environ", "env", "os", "os.environ.copy()", "dict(os.environ)"})


def _environment(node: ast.AST) -> bool:
    """*node* reads from the process environment: ``os.environ[…]``, ``env.get(…)``, ``os.getenv(…)``."""
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) in ENVIRONMENT
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return ast.unparse(node.func.value) in ENVIRONMENT
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getenv"


def _setting_name(node: ast.expr) -> str | None:
    """An environment variable's name written in the code (``"PIP_INDEX_URL"``, ``"DOCKER_CONFIG"``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isupper():
        return node.value if node.value.replace("_", "").isalnum() else None
    return None


@pytest.mark.parametrize(
    "snippet",
    [
        "import os\nx = os.environ.get('IMAGESMITH_CACHE')\n",
        "import os\nx = dict(os.environ).get('IMAGESMITH_CACHE')\n",
        "import os\ne = os.environ\nx = e['IMAGESMITH_CACHE']\n",
        "import os\nx = os.environ.copy().pop('IMAGESMITH_CACHE', None)\n",
        "from os import getenv\nx = getenv('IMAGESMITH_CACHE')\n",
        # any other tool's variable read as a setting (issue 24 re-check): declared in settings.FOREIGN
        "import os\nx = os.environ.get('PIP_INDEX_URL')\n",
        "import os\nenv = os.environ\nx = env['XDG_CACHE_HOME'] if env.get('XDG_CACHE_HOME') else None\n",
        "import os\nx = os.getenv('DOCKER_CONFIG')\n",
        "import os\nx = os.environ['NCCL_TESTS_BIN']\n",
    ],
)
def test_the_guard_finds_a_read_through_any_mapping(snippet: str) -> None:
    assert findings({"imagesmith/x.py": ast.parse(snippet)}) != []


def test_the_guard_lets_settings_and_writes_pass() -> None:
    snippet = (
        "x = settings.get('IMAGESMITH_CACHE')\nargs = {}\nargs['IMAGESMITH_PIP_INDEX_URL'] = 'u'\n"
        "env = dict(os.environ)\nenv['PATH'] = '/x'\npath = image_env.get('PATH')\n"
    )
    assert findings({"imagesmith/x.py": ast.parse(snippet)}) == []


def _trees(read: dict[str, str]) -> dict[str, ast.AST]:
    return {path: astcache.parse(text, path) for path, text in read.items()}


def test_no_module_but_settings_reads_an_imagesmith_variable() -> None:
    read = {str(p.relative_to(REPO)): p.read_text() for p in sorted((REPO / "imagesmith").rglob("*.py"))}
    assert findings(_trees(read)) == []


def test_the_guard_finds_the_reads_of_7f0dc7b() -> None:
    """Before issue 24, 12 modules read IMAGESMITH_* variables themselves (git show 7f0dc7b)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", "7f0dc7b", "imagesmith"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.split()
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"no 7f0dc7b in this checkout: {exc}")
    read = {}
    for path in listed:
        if path.endswith(".py"):
            show = ["git", "-C", str(REPO), "show", f"7f0dc7b:{path}"]
            read[path] = subprocess.run(show, capture_output=True, text=True, check=True, timeout=30).stdout
    found = findings(_trees(read))
    modules = {f.split(":")[0] for f in found}
    for module in (
        "imagesmith/config.py",
        "imagesmith/engine.py",
        "imagesmith/registry.py",
        "imagesmith/compat.py",
        "imagesmith/commands/release.py",
        "imagesmith/commands/validate.py",
        "imagesmith/project.py",
        "imagesmith/validate/plugin.py",
    ):
        assert module in modules, found


def test_every_name_the_code_reads_is_declared() -> None:
    """settings.get("…") and typer's envvar= name declared variables (settings.get refuses others)."""
    names = set()
    for path in sorted((REPO / "imagesmith").rglob("*.py")):
        for node in ast.walk(astcache.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                fn = node.func
                if isinstance(fn, ast.Attribute) and fn.attr == "get" and ast.unparse(fn.value) == "settings":
                    arg = node.args[0]
                    if isinstance(arg, ast.Constant):
                        names.add(str(arg.value))
                for kw in node.keywords:
                    if kw.arg == "envvar" and isinstance(kw.value, ast.Constant):
                        names.add(str(kw.value.value))
    assert names
    for name in sorted(names):
        settings.variable(name)  # KeyError when not declared


def test_each_variable_is_documented_where_it_says() -> None:
    for v in (*settings.VARIABLES, *settings.FOREIGN):
        text = (REPO / v.docs).read_text()
        assert (v.pattern and "IMAGESMITH_REGISTRY_" in text) or v.name in text, (v.name, v.docs)


def test_an_undeclared_variable_is_refused_and_values_come_back_as_they_are() -> None:
    with pytest.raises(KeyError, match="not a declared"):
        settings.get("IMAGESMITH_NOPE", env={})
    assert settings.get("IMAGESMITH_VERIFY", env={"IMAGESMITH_VERIFY": " full "}) == " full "
    assert settings.get("IMAGESMITH_VERIFY", "head", env={}) == "head"
    assert settings.get(
        "IMAGESMITH_REGISTRY_GHCR_IO_USERNAME", env={"IMAGESMITH_REGISTRY_GHCR_IO_USERNAME": "u"}
    )


def test_the_layer_is_the_one_named_in_the_docs() -> None:
    assert "| `settings.py` |" in Path(REPO / "docs/architecture.md").read_text()
