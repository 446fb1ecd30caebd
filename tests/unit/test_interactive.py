"""The interactive flavor without Docker: its lock section, its rendered files (every runtime layer shared,
the start command's convention, secure defaults), the plan's reasons, `imagesmith pick --flavor interactive`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith import lock as locking
from imagesmith.lock import INTERACTIVE_MARKER, LockError, LockKey, parse_lock, read_lock
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.pick import image_flavor, interactive_access
from imagesmith.plan import build_plan
from imagesmith.templating import INTERACTIVE_DEFAULTS, render_cell_files
from tests.repo import PROJECT
from tests.unit.test_pick import image_doc

KEY = LockKey(torch="2.11.0", variant="cu130", python="3.11")


def _cells() -> tuple[Cell, Cell]:
    (runtime,) = build_plan(load_matrix("smoke", project=PROJECT)).cells
    (interactive,) = build_plan(load_matrix("smoke-interactive", project=PROJECT)).cells
    return runtime, interactive


# -- lock ----------------------------------------------------------------------------------------------------


def test_the_smoke_lock_has_an_interactive_section_on_top_of_the_runtime_pins() -> None:
    lock = read_lock(KEY, PROJECT.locks_dir)
    assert lock is not None
    names = dict(lock.interactive_pins)
    assert {"jupyterlab", "tensorboard", "jupyter-server", "tornado"} <= set(names)
    assert not set(names) & {n for n, _ in lock.pins}  # nothing twice: numpy etc. are the runtime's
    assert lock.interactive_version("numpy") == lock.version("numpy")
    header = dict(lock.header)
    assert "--constraint constraints.txt" in header["interactive-command"]
    assert header["interactive-inputs"] == "jupyterlab; tensorboard"


def test_a_package_in_both_sections_is_refused(tmp_path: Path) -> None:
    text = f"# date: x\nnumpy==2.0.0\n{INTERACTIVE_MARKER}\nnumpy==2.0.0\n"
    with pytest.raises(LockError, match="pins numpy again"):
        parse_lock(text, tmp_path / "x.txt", KEY)


def test_add_interactive_keeps_the_runtime_pins_and_checks_the_constraints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = (PROJECT.locks_dir / KEY.filename).read_text().split("\n" + INTERACTIVE_MARKER + "\n")[0]
    base = "\n".join(ln for ln in base.splitlines() if not ln.startswith("# interactive-")) + "\n"
    (tmp_path / KEY.filename).write_text(base)
    seen: dict[str, Any] = {}

    def fake(
        inputs: list[str], key: LockKey, extra: str | None, constraints: Any = (), ca: Any = None
    ) -> tuple[str, list[str]]:
        seen.update(inputs=inputs, extra=extra, constraints=list(constraints))
        return "jupyterlab==9.9.9  # via -r requirements.in\nnumpy==2.4.6  # via tensorboard\n", ["uv"]

    monkeypatch.setattr(locking, "_compile", fake)
    locking.add_interactive(KEY, lock_dir=tmp_path)
    after = read_lock(KEY, tmp_path)
    before = parse_lock(base, tmp_path / KEY.filename, KEY)
    assert after is not None
    assert (after.pins, after.builder_pins) == (before.pins, before.builder_pins)
    assert after.interactive_pins == (("jupyterlab", "9.9.9"),)
    assert seen["inputs"] == ["jupyterlab", "tensorboard"]
    assert seen["extra"] is None
    assert "torch==2.11.0" in seen["constraints"]
    locking.add_interactive(KEY, lock_dir=tmp_path)  # again: one section, one set of header lines
    text = (tmp_path / KEY.filename).read_text()
    assert text.count(INTERACTIVE_MARKER) == 1
    assert text.count("# interactive-date:") == 1

    def moved(*a: Any, **k: Any) -> tuple[str, list[str]]:
        return "numpy==1.0.0\n", ["uv"]

    monkeypatch.setattr(locking, "_compile", moved)
    with pytest.raises(LockError, match=r"resolved numpy==1\.0\.0"):
        locking.add_interactive(KEY, lock_dir=tmp_path)


# -- plan and render -----------------------------------------------------------------------------------------


def test_an_interactive_cell_without_the_lock_section_is_dropped_with_the_fix(tmp_path: Path) -> None:
    text = (PROJECT.locks_dir / KEY.filename).read_text().split("\n" + INTERACTIVE_MARKER + "\n")[0]
    (tmp_path / KEY.filename).write_text(text + "\n")
    plan = build_plan(load_matrix("smoke-interactive", project=PROJECT), project=PROJECT, lock_dir=tmp_path)
    assert plan.cells == ()
    (dropped,) = plan.dropped
    assert "has no interactive section" in dropped.reason
    assert "imagesmith lock --matrix smoke-interactive" in dropped.reason


def test_the_interactive_image_is_every_runtime_instruction_then_its_own() -> None:
    runtime, interactive = _cells()
    rt, it = render_cell_files(runtime), render_cell_files(interactive)
    # the files the runtime layers COPY are byte for byte the runtime cell's (the entrypoint names that cell)
    for name in ("requirements.txt", "entrypoint.sh", "apt-mirror.sh", "builder-requirements.txt"):
        assert it[name] == rt[name], name

    def stage(text: str) -> list[str]:
        return [ln for ln in text.split("# Stage 2:")[1].splitlines()[1:] if ln and not ln.startswith("#")]

    shared = stage(rt["Dockerfile"])
    shared = shared[: shared.index(" && rm -rf /tmp/ctx") + 1]
    assert stage(it["Dockerfile"])[: len(shared)] == shared
    own = "\n".join(stage(it["Dockerfile"])[len(shared) :])
    assert "apt-get install -y --no-install-recommends openssh-server tini" in own
    assert "rm -f /etc/ssh/ssh_host_*" in own  # in the same RUN as the install: no layer holds a host key
    assert "-r /tmp/ctx/interactive-requirements.txt" in own
    assert "EXPOSE 22 8888 6006" in own
    assert 'CMD ["/usr/bin/tini", "-g", "--", "/usr/local/bin/imagesmith-start"]' in it["Dockerfile"]
    assert 'CMD ["/bin/bash"]' in rt["Dockerfile"]
    assert "jupyterlab==" in it["interactive-requirements.txt"]
    assert "numpy==" not in it["interactive-requirements.txt"]
    for name in ("interactive-requirements.txt", "imagesmith-start.sh", "sshd-imagesmith.conf"):
        assert name not in rt


def test_sshd_and_the_start_command_are_secure_by_default() -> None:
    _, interactive = _cells()
    files = render_cell_files(interactive)
    conf = files["sshd-imagesmith.conf"].splitlines()
    for line in (
        "PasswordAuthentication no",
        "PermitRootLogin prohibit-password",
        "AuthenticationMethods publickey",
    ):
        assert line in conf
    start = files["imagesmith-start.sh"]
    assert "ssh-keygen -A" in start
    assert 'chmod 0600 "$keys"' in start
    assert 'JUPYTER_TOKEN="$JUPYTER_PASSWORD"' in start  # the token through the environment, never argv
    assert "--IdentityProvider.token=" in start.split('[ "${IMAGESMITH_JUPYTER_NO_TOKEN:-}" = 1 ]')[1]
    assert "echo" not in "\n".join(
        ln for ln in start.splitlines() if "JUPYTER_PASSWORD" in ln and "log" in ln
    )
    assert "trap stop TERM INT HUP" in start
    assert f'workspace="${{IMAGESMITH_WORKSPACE:-{INTERACTIVE_DEFAULTS["workspace"]}}}"' in start
    assert "PUBLIC_KEY | JUPYTER_PASSWORD | JUPYTER_TOKEN" in start  # never in the ssh sessions' environment
    assert "ENV PUBLIC_KEY" not in files["Dockerfile"]
    assert "ENV JUPYTER" not in files["Dockerfile"]


# -- pick ----------------------------------------------------------------------------------------------------


def _index_file(tmp_path: Path) -> Path:
    from imagesmith.index import SCHEMA

    runtime = image_doc("2.7.1", "12.6", "3.11", n=0)
    inter = image_doc("2.7.1", "12.6", "3.11", n=1)
    inter["tag"] += "-interactive"
    inter["cell"] = inter["cell"].replace("-runtime-", "-interactive-")
    inter["digest"] = "sha256:" + "e" * 64
    for r in inter["registries"]:
        r["reference"] += "-interactive"
        r["digest"] = inter["digest"]
    doc = {"schema": SCHEMA, "generated": "2026-11-28T00:00:00Z", "images": [runtime, inter]}
    from imagesmith.index import parse_index
    from tests.indexkey import save_signed_index

    return save_signed_index(parse_index(json.dumps(doc), source="t"), tmp_path / "index.json")


def test_platform_data_the_image_defaults_and_autodl() -> None:
    generic = interactive_access(None)
    assert (generic.workspace, generic.ssh_port, generic.jupyter_port, generic.tensorboard_port) == (
        INTERACTIVE_DEFAULTS["workspace"],
        int(INTERACTIVE_DEFAULTS["ssh_port"]),
        int(INTERACTIVE_DEFAULTS["jupyter_port"]),
        int(INTERACTIVE_DEFAULTS["tensorboard_port"]),
    )
    assert interactive_access("runpod").workspace == "/workspace"
    autodl = interactive_access("autodl")
    assert autodl.workspace == "/root/autodl-tmp"
    assert autodl.tensorboard_port == 6006
    assert ("IMAGESMITH_WORKSPACE", "/root/autodl-tmp") in autodl.variables()
    assert interactive_access("aws").platform == "generic"  # no table of its own: the image's defaults


def test_pick_flavor_interactive_prints_ports_and_variables(
    tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.indexkey import KEY

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the key pinned stays here
    index = _index_file(tmp_path)
    # the trust root: the tests' key by its fingerprint, in the --index value (issue 34)
    args = [
        "pick",
        "--index",
        f"{index}#{KEY.public.fingerprint}",
        "--driver",
        "580.95.05",
        "--gpu",
        "h100-sxm",
    ]
    r = run_cli(*args, "--flavor", "interactive", "--platform", "autodl")
    assert r.exit_code == 0, r.stderr
    assert "picked: 2.7.1-cu126-py3.11-interactive" in r.stdout
    run = next(ln for ln in r.stdout.splitlines() if ln.startswith("docker run -d"))
    for part in ("-p 2222:22", "-p 8888:8888", "-p 6006:6006", "-e PUBLIC_KEY ", "-e JUPYTER_PASSWORD "):
        assert part in run, part
    assert "-v imagesmith-workspace:/root/autodl-tmp" in run
    assert "-e IMAGESMITH_WORKSPACE=/root/autodl-tmp" in run
    assert "set PUBLIC_KEY:" in r.stdout
    assert "set JUPYTER_PASSWORD:" in r.stdout
    plain = run_cli(*args, "--flavor", "runtime")
    assert "picked: 2.7.1-cu126-py3.11  " in plain.stdout
    assert "docker run -d" not in plain.stdout


def test_image_flavor_reads_the_cell_id() -> None:
    from imagesmith.index import SCHEMA, parse_index

    doc = image_doc("2.7.1", "12.6", "3.11")
    index = parse_index(
        json.dumps({"schema": SCHEMA, "generated": "2026-11-28T00:00:00Z", "images": [doc]}), source="t"
    )
    image = index.images[0]
    assert image_flavor(image) == "runtime"
    assert image_flavor(replace(image, cell="2.11.0-cu130-py3.11-interactive-debian12")) == "interactive"


def test_pick_without_flavor_prefers_the_runtime_image(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped sample index holds a runtime and an interactive image of torch 2.11 cu130: the plain one is
    picked unless --flavor asks for another."""
    from tests.repo import REPO

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    index = str(REPO / "docs/examples/release-index.json")
    args = [
        "pick",
        "--index",
        index,
        "--verify-key",
        index + ".pub",
        "--driver",
        "580.159.04",
        "--gpu",
        "h200",
    ]
    plain = run_cli(*args)
    assert plain.exit_code == 0, plain.stderr
    assert "picked: 2.11.0-cu130-py3.12-runtime-" in plain.stdout
    asked = run_cli(*args, "--flavor", "interactive")
    assert asked.exit_code == 0, asked.stderr
    assert "picked: 2.11.0-cu130-py3.12-interactive-" in asked.stdout
