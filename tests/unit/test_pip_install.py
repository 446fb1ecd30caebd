"""How images install wheels (issues 11 and 17): every pip install is the one macro of parts.j2 (the shared
wheel cache mount, the CA as a BuildKit secret, pip's hash-checking mode), locks carry sha256 hashes and the
data constraints (sympy<1.13 for torch<2.4), the extra CA refuses private keys, and the build refuses
unhashed locks and the sdk backend with the fix."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from imagesmith import lock as lockmod
from imagesmith.build import CA_SECRET, BuildOptions, build_secrets, preflight, run_build
from imagesmith.config import UserConfig, load_config
from imagesmith.engine import BuildKitCliBuilder, BuildRequest, SdkBuilder
from imagesmith.errors import BuildError, ConfigError
from imagesmith.lock import LockError, LockKey, lock_constraints, parse_lock
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import build_plan
from imagesmith.templating import render_cell_files
from tests.repo import PROJECT

TEMPLATES = PROJECT.root / "imagesmith" / "templates"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _cells() -> list[Cell]:
    return [
        c for name in PROJECT.matrix_names() for c in build_plan(load_matrix(name, project=PROJECT)).cells
    ]


def _runs(dockerfile: str) -> list[str]:
    """Every RUN instruction with its continuation lines joined."""
    out: list[str] = []
    lines = dockerfile.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("RUN "):
            block = [lines[i]]
            while block[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                block.append(lines[i])
            out.append("\n".join(block))
        i += 1
    return out


def test_no_template_runs_pip_outside_the_macro() -> None:
    for path in TEMPLATES.rglob("*.j2"):
        if path.name == "parts.j2":
            continue
        text = path.read_text()
        assert not re.search(r"pip (install|download)", text), f"{path.name} runs pip itself"
        assert "certs/" not in text, f"{path.name} copies the CA into the context"


@pytest.mark.parametrize("cell", _cells(), ids=lambda c: f"{c.matrix}/{c.id}")
def test_every_pip_run_is_the_macro_with_cache_secret_and_hashes(cell: Cell) -> None:
    files = render_cell_files(cell)
    text = files["Dockerfile"]
    assert "COPY certs" not in text
    # no `# syntax=` directive: it would make BuildKit pull a frontend image from Docker Hub; Debian's docker
    # 20.10 runs RUN --mount with its built-in frontend (tests/integration/e2e/test_ca_secret_layers.py)
    assert not re.search(r"^#\s*syntax\s*=", text, re.MULTILINE | re.IGNORECASE)
    pip_runs = [r for r in _runs(text) if re.search(r"-m pip (install|download)", r)]
    assert pip_runs
    for run in pip_runs:
        assert "PIP_CONFIG_FILE=/dev/null" in run
        if "--find-links /tmp/ctx/wheels" in run:  # the context's wheels: no index, no network, no CA
            assert "--no-index" in run
            assert "--mount=" not in run
            assert "download" not in run
            continue
        assert run.startswith(
            "RUN --mount=type=cache,id=imagesmith-wheelhouse,"
            "target=/var/cache/imagesmith/wheels,sharing=locked"
        )
        assert "--mount=type=secret,id=imagesmith-ca,target=/run/secrets/imagesmith-ca" in run
        assert "pip download --no-cache-dir --no-deps" in run
        assert "pip install --no-cache-dir --no-index --no-deps" in run
        # the CA bundle is gone before the RUN ends (after it only the layer plan's mtime fix may follow)
        tail = run.rstrip().rsplit("rm -f /tmp/ca.pem", 1)
        assert len(tail) == 2, run
        assert tail[1] == "" or re.fullmatch(r" \\\n && touch -h -d @\d+ [/\w. -]+", tail[1]), run
        if "uv==" in run:  # uv itself (python.source uv) is no pin of the lock
            continue
        assert ("--require-hashes" in run) == cell.lock.hashed, run
    for name in ("requirements.txt", "builder-requirements.txt", "interactive-requirements.txt"):
        if name not in files:
            continue
        pins = [ln for ln in files[name].splitlines() if re.match(r"^[a-z0-9]", ln)]
        hashed = [ln for ln in pins if ln.endswith(" \\")]
        if cell.lock.hashed:
            assert len(hashed) == len(pins), f"{name}: a pin without --hash"
            assert "# UNHASHED" not in files[name]
        else:
            assert "# UNHASHED" in files[name]


def test_cu118_cells_are_the_unhashed_ones_and_the_rest_are_hashed() -> None:
    cells = _cells()
    assert {c.stack.variant for c in cells if not c.lock.hashed} == {"cu118"}
    assert any(c.lock.hashed for c in cells)


# -- locks ---------------------------------------------------------------------------------------------------
def _key(path: Path) -> LockKey:
    torch, variant, py = path.stem.rsplit("-", 2)
    return LockKey(torch=torch, variant=variant, python=py.removeprefix("py"))


@pytest.mark.parametrize("path", sorted(PROJECT.locks_dir.glob("*.txt")), ids=lambda p: p.stem)
def test_every_lock_honours_the_data_constraints_and_carries_hashes_unless_unverified(path: Path) -> None:
    key = _key(path)
    lock = parse_lock(path.read_text(), path, key)
    assert lock.hashed == lock.verified, "uv-resolved locks carry hashes; only hand-written ones lack them"
    if key.torch == "suite":
        return
    for c in lock_constraints():
        pinned = lock.version(c.requirement.name)
        if c.applies(key.torch) and pinned is not None:
            assert c.requirement.specifier.contains(pinned), f"{c.requirement} broken by {pinned}"


def test_sympy_constraint_binds_torch_before_2_4_only() -> None:
    (sympy,) = [c for c in lock_constraints() if c.requirement.name == "sympy"]
    assert sympy.applies("2.3.1")
    assert sympy.applies("2.1.2")
    assert not sympy.applies("2.4.0")
    assert not sympy.applies("2.11.0")
    assert not sympy.requirement.specifier.contains("1.13.0")
    a100 = sorted(PROJECT.locks_dir.glob("2.[123].*.txt"))
    assert a100
    for path in a100:
        version = parse_lock(path.read_text(), path, _key(path)).version("sympy")
        assert version is not None, path.name
        assert Version(version) < Version("1.13"), path.name


def test_compile_lock_hands_uv_the_constraints_and_keeps_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[list[str], list[str]]] = []
    source = PROJECT.locks_dir / "2.3.1-cu121-py3.11.txt"
    old = parse_lock(source.read_text(), source, _key(source))
    old_sympy = replace(old, pins=tuple((n, "1.14.0" if n == "sympy" else v) for n, v in old.pins))

    def fake(
        inputs: Any, key: LockKey, extra: Any, constraints: Any = (), ca: Any = None
    ) -> tuple[str, list[str]]:
        seen.append((list(inputs), list(constraints)))
        # the reference lock as uv's answer for *key* (its torch pin and header made *key*'s)
        answer = source.read_text().replace("torch 2.3.1 cu121", f"torch {key.torch} {key.variant}")
        text = answer.replace("torch==2.3.1", f"torch=={key.torch}").split(lockmod.BUILDER_MARKER)
        body = text[0] if not any(i.startswith("nvidia-nccl") for i in inputs) else text[1].split("#")[0]
        return body, ["uv", "pip", "compile", "--generate-hashes"]

    monkeypatch.setattr(lockmod, "_compile", fake)
    key = _key(source)
    lockmod.compile_lock(key, lock_dir=tmp_path, keep=old_sympy)
    runtime_constraints = seen[0][1]
    assert "sympy<1.13" in runtime_constraints
    assert "sympy==1.14.0" not in runtime_constraints  # the kept pin a data constraint forbids is dropped
    assert "torch==2.3.1" in runtime_constraints  # every other kept version stays
    written = (tmp_path / key.filename).read_text()
    assert "# constraint: sympy<1.13 for torch <2.4" in written
    seen.clear()
    newer = LockKey(torch="2.5.1", variant="cu124", python="3.11")
    lockmod.compile_lock(newer, lock_dir=tmp_path)
    assert not any(c.startswith("sympy") for c in seen[0][1])


def test_parse_lock_reads_hashes_and_refuses_a_stray_hash(tmp_path: Path) -> None:
    key = LockKey(torch="suite", variant="any", python="3.12")
    h = "a" * 64
    lock = parse_lock(f"rich==15.0.0 \\\n    --hash=sha256:{h}\n    # via x\n", tmp_path / "l.txt", key)
    assert lock.hashes == (("rich", "15.0.0", (h,)),)
    assert lock.hashed
    assert not parse_lock("rich==15.0.0\n", tmp_path / "l.txt", key).hashed
    with pytest.raises(LockError, match=r"l\.txt:1: .*--hash=sha256"):
        parse_lock(f"--hash=sha256:{h}\nrich==1\n", tmp_path / "l.txt", key)
    with pytest.raises(LockError, match=r"l\.txt:2: "):
        parse_lock("rich==1 \\\n    --hash=sha256:zz\n", tmp_path / "l.txt", key)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[constraint]]\ntorch = "<2.4"\nwhy = "x"\n', "lacks torch, requirement or why"),
        ('[[constraint]]\ntorch = "nope"\nrequirement = "sympy<1.13"\nwhy = "x"\n', "constraint 1"),
        ('[[constraint]]\ntorch = "<2.4"\nrequirement = "sympy"\nwhy = "x"\n', "version bound only"),
        ("[[constraint]\n", "invalid TOML"),
    ],
)
def test_a_bad_constraint_row_is_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(LockError, match=message) as info:
        lock_constraints(text)
    assert "lock_constraints.toml" in info.value.message
    assert info.value.hint


# -- the extra CA --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "armour",
    ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "OPENSSH PRIVATE KEY"],
)
def test_a_ca_file_holding_a_private_key_is_refused_naming_the_file(tmp_path: Path, armour: str) -> None:
    bad = tmp_path / "bundle.pem"
    bad.write_text(PEM + f"-----BEGIN {armour}-----\nMIIE\n-----END {armour}-----\n")
    env = {"IMAGESMITH_CONFIG": str(tmp_path / "none.toml"), "IMAGESMITH_EXTRA_CA": str(bad)}
    with pytest.raises(ConfigError, match="holds a private key") as info:
        load_config(env)
    assert str(bad) in info.value.message
    assert "certificates only" in info.value.message
    with pytest.raises(ConfigError, match="holds a private key"):
        load_config({"IMAGESMITH_CONFIG": str(tmp_path / "none.toml")}).with_overrides(extra_ca=bad)


def test_the_ca_is_a_buildkit_secret_on_the_command_line_and_no_context_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text(PEM)
    assert build_secrets(UserConfig(extra_ca=ca)) == {CA_SECRET: ca}
    assert build_secrets(UserConfig()) == {}
    calls: list[list[str]] = []

    class Done(Exception):
        pass

    def popen(cmd: list[str], **kwargs: Any) -> Any:
        calls.append(cmd)
        raise Done

    monkeypatch.setattr("imagesmith.engine.subprocess.Popen", popen)
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    with pytest.raises(Done):
        BuildKitCliBuilder("docker").build(
            BuildRequest(context=tmp_path, tags=("a:b",), secrets={CA_SECRET: ca}), None
        )
    cmd = calls[0]
    assert cmd[cmd.index("--secret") + 1] == f"id={CA_SECRET},src={ca}"
    assert not any(PEM.strip() in part for part in cmd)  # the path goes to the CLI, never the bytes


def test_the_sdk_backend_refuses_secrets_and_run_mount_with_the_fix(tmp_path: Path) -> None:
    builder = SdkBuilder(client=None)  # type: ignore[arg-type]  # refuses before it talks to the engine
    (tmp_path / "Dockerfile").write_text("FROM x\nRUN --mount=type=cache,target=/c true\n")
    with pytest.raises(BuildError, match="RUN --mount") as info:
        builder.build(BuildRequest(context=tmp_path, tags=("a:b",), what="cell c1"), None)
    assert "--backend buildkit" in (info.value.hint or "")
    with pytest.raises(BuildError, match="secret") as info:
        builder.build(
            BuildRequest(context=tmp_path, tags=("a:b",), secrets={CA_SECRET: tmp_path / "x"}), None
        )
    assert "--backend buildkit" in (info.value.hint or "")


# -- the build's refusals ------------------------------------------------------------------------------------
def test_the_build_refuses_unhashed_locks_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = load_matrix("a100", project=PROJECT)
    plan = build_plan(matrix, project=PROJECT)
    monkeypatch.setattr("imagesmith.build.check_context_current", lambda m, p: None)
    monkeypatch.setattr("imagesmith.build.cached_archive", lambda *a, **k: Path("x"))
    with pytest.raises(BuildError, match="without sha256 hashes") as info:
        preflight(matrix, plan, BuildOptions(project=PROJECT))
    assert "2.2.2-cu118-py3.10.txt" in info.value.message
    assert "imagesmith lock --matrix a100 --force" in (info.value.hint or "")
    assert "--allow-unhashed" in (info.value.hint or "")
    preflight(matrix, plan, BuildOptions(project=PROJECT, allow_unhashed=True))
    hashed = replace(plan, cells=tuple(c for c in plan.cells if c.lock.hashed))
    preflight(matrix, hashed, BuildOptions(project=PROJECT))


def test_run_build_refuses_the_sdk_backend_before_building(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.test_build_push import MemoryEngine

    matrix = load_matrix("smoke", project=PROJECT)
    plan = build_plan(matrix, project=PROJECT)
    monkeypatch.setattr("imagesmith.build.preflight", lambda *a: None)
    engine = MemoryEngine(registries={}, backend="sdk")
    with pytest.raises(BuildError, match="sdk backend") as info:
        run_build(matrix, plan, BuildOptions(project=PROJECT), engine=engine)
    assert "--backend buildkit" in (info.value.hint or "")
    assert "RUN --mount" in info.value.message
    assert not engine.images


def test_the_sdk_backend_still_builds_cells_without_run_mount(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """h200-host (torch and toolkit from the base; every wheel from the context) needs no BuildKit: GPU hosts
    with a dockerd but no docker CLI build it with the sdk backend — but not with an extra CA."""
    from imagesmith.build import CellOutcome
    from tests.unit.test_build_push import MemoryEngine

    matrix = load_matrix("h200-host", project=PROJECT)
    plan = build_plan(matrix, project=PROJECT)
    text = (PROJECT.path(plan.cells[0].publish.context) / "Dockerfile").read_text()
    assert "--mount=" not in text
    monkeypatch.setattr("imagesmith.build.preflight", lambda *a: None)
    built: list[str] = []

    def fake_build_cell(cell: Cell, *args: Any, **kwargs: Any) -> CellOutcome:
        built.append(cell.id)
        return CellOutcome(cell=cell.id, tag="t", fingerprint=cell.publish.fingerprint, status="built")

    monkeypatch.setattr("imagesmith.build.build_cell", fake_build_cell)
    engine = MemoryEngine(registries={}, backend="sdk")
    pem = tmp_path / "ca.crt"
    pem.write_text(PEM)
    options = BuildOptions(project=PROJECT, config=UserConfig(extra_ca=pem), staging_root=tmp_path)
    with pytest.raises(BuildError, match="BuildKit secret"):
        run_build(matrix, plan, options, engine=engine)
    assert built == []
    _, errors = run_build(matrix, plan, BuildOptions(project=PROJECT, staging_root=tmp_path), engine=engine)
    assert errors == []
    assert built == [c.id for c in plan.cells]


def test_lock_keep_versions_re_resolves_existing_locks_with_their_pins(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, str, bool]] = []

    def compile_lock(key: LockKey, *, lock_dir: Path, keep: Any = None, **kw: Any) -> Path:
        calls.append(("compile", key.filename, keep is not None and bool(keep.pins)))
        # issue 37: the interactive section in the same write, its earlier pins kept as constraints
        earlier = kw.get("interactive")
        calls.append(("interactive", key.filename, bool(getattr(earlier, "interactive_pins", ()))))
        return lock_dir / key.filename

    monkeypatch.setattr(lockmod, "compile_lock", compile_lock)
    # --no-sizes: the wheel-size record of the checkout itself is not this test's to rewrite
    result = run_cli(
        "-C", str(PROJECT.root), "lock", "--matrix", "smoke-interactive", "--keep-versions", "--no-sizes"
    )
    assert result.exit_code == 0, result.stderr
    assert calls == [
        ("compile", "2.11.0-cu130-py3.11.txt", True),
        ("interactive", "2.11.0-cu130-py3.11.txt", True),
    ]
    assert "versions kept, hashes added" in result.stdout
