"""Every ``imagesmith pick …`` / ``imagesmith compat …`` line in a code block of README.md and docs/*.md
runs as written (from the repository root, in-process) and exits as its ``# exit N`` comment says (0 when
none).

The sample inputs they use ship in docs/examples/ (issue 12, item 14): a release index and nvidia-smi
captures.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.repo import REPO

EXAMPLE_INDEX = REPO / "docs" / "examples" / "release-index.json"
_COMMAND = re.compile(r"^(?:\$\s+)?((?:[A-Z_][A-Z0-9_]*=\S+\s+)*)imagesmith\s+(pick|compat)\b(.*)$")


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of fenced code blocks and 4-space indented blocks."""
    out: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            out.append((n, line.strip()))
    return out


def _examples() -> list[Any]:
    found = []
    for md in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for n, line in _code_lines(md.read_text(encoding="utf-8")):
            m = _COMMAND.match(line)
            if not m:
                continue
            env = dict(a.split("=", 1) for a in m.group(1).split())
            words = shlex.split(f"{m.group(2)} {m.group(3)}", comments=True)
            code = re.search(r"#\s*exit (\d+)", m.group(3))
            where = f"{md.relative_to(REPO)}:{n}"
            found.append(pytest.param(env, words, int(code.group(1)) if code else 0, id=where))
    return found


EXAMPLES = _examples()


def test_the_docs_have_runnable_pick_and_compat_examples() -> None:
    ids = [p.id for p in EXAMPLES]
    assert any(i.startswith("README.md:") for i in ids)
    commands = [p.values[1][0] for p in EXAMPLES]
    assert commands.count("pick") >= 10
    assert commands.count("compat") >= 5
    assert {p.values[2] for p in EXAMPLES} >= {0, 1, 2, 3, 10}


@pytest.mark.parametrize(("env", "argv", "code"), EXAMPLES)
def test_doc_example_exits_as_documented(
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    env: dict[str, str],
    argv: list[str],
    code: int,
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    res = run_cli(*argv)
    assert res.exit_code == code, f"{shlex.join(argv)}\n{res.stdout}\n{res.stderr}"
    assert "Traceback" not in res.stderr
    if code:
        assert "error:" in res.stderr or res.stdout  # compat's "not compatible" is a verdict on stdout


def test_the_sample_index_is_valid() -> None:
    import jsonschema

    from imagesmith.index import dump_index, load_index

    schema = json.loads((REPO / "docs" / "schemas" / "release-index.schema.json").read_text())
    doc = json.loads(EXAMPLE_INDEX.read_text())
    jsonschema.validate(doc, schema)
    index = load_index(EXAMPLE_INDEX)  # imagesmith index's checks (digests, drivers, fields)
    assert dump_index(index) == EXAMPLE_INDEX.read_text()  # canonical, as imagesmith release writes it
    assert len(index.images) >= 4
    # issue 17: the publisher's registry hosts, and every copy on one of them (pick skips any other)
    assert index.registries == ("docker.io", "ghcr.io", "registry.cn-hangzhou.aliyuncs.com")
    assert {c.host for image in index.images for c in image.registries} == set(index.registries)
