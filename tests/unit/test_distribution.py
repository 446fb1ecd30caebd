"""imagesmith's own wheel, made from the running installation: reproducible, complete, installable."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from imagesmith import __version__
from imagesmith.build import suite_digest
from imagesmith.distribution import build_suite_wheel, package_dir, package_files, suite_wheel


def test_wheel_is_reproducible_and_names_its_digest() -> None:
    one, two = build_suite_wheel(), build_suite_wheel()
    assert one.data == two.data
    assert one.sha256 == hashlib.sha256(one.data).hexdigest()
    assert one.name == f"imagesmith-{__version__}-py3-none-any.whl"
    assert suite_digest() == suite_wheel().sha256 == one.sha256


def test_wheel_holds_the_package_data_and_suite(tmp_path: Path) -> None:
    with zipfile.ZipFile(build_suite_wheel().write(tmp_path)) as zf:
        names = set(zf.namelist())
        info = f"imagesmith-{__version__}.dist-info"
        for needed in (
            "imagesmith/__init__.py",
            "imagesmith/validate/suite/test_07_nccl.py",
            "imagesmith/data/gpus.toml",
            "imagesmith/data/locks/2.11.0-cu130-py3.11.txt",
            "imagesmith/templates/Dockerfile.j2",
            f"{info}/METADATA",
            f"{info}/WHEEL",
            f"{info}/RECORD",
            f"{info}/entry_points.txt",
        ):
            assert needed in names, needed
        assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
        assert (
            "imagesmith-validate = imagesmith.validate.cli:run"
            in zf.read(f"{info}/entry_points.txt").decode()
        )
        record = zf.read(f"{info}/RECORD").decode()
        assert all(line.split(",")[0] in names for line in record.splitlines())
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_a_changed_file_changes_the_digest(tmp_path: Path) -> None:
    copy = tmp_path / "imagesmith"
    shutil.copytree(package_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = build_suite_wheel(copy).sha256
    assert before == build_suite_wheel(package_dir()).sha256  # same files, same bytes
    (copy / "validate" / "suite" / "test_07_nccl.py").write_text("# changed\n", encoding="utf-8")
    assert build_suite_wheel(copy).sha256 != before
    assert len(package_files(copy)) == len(package_files())


def test_pip_installs_it(tmp_path: Path) -> None:
    wheel = build_suite_wheel().write(tmp_path / "w")
    target = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (target / "imagesmith" / "validate" / "suite" / "conftest.py").is_file()
    assert (target / "bin" / "imagesmith-validate").is_file()


def test_image_metadata_drops_only_host_only_requirements() -> None:
    """The suite wheel baked into images does not require the host-only signing library (the image's lock does
    not pin it, and `pip check` in the image would fail); every other requirement stays."""
    from imagesmith.distribution import _image_metadata

    meta = (
        "Metadata-Version: 2.1\nName: imagesmith\nVersion: 0.1.0\n"
        "Requires-Dist: docker>=7.1\nRequires-Dist: cryptography>=42\n"
        "Requires-Dist: Cryptography ; extra == 'x'\n"
        'Requires-Dist: jinja2>=3.1\nRequires-Dist: uv>=0.4; extra == "lock"\n\nlong description\n'
    )
    out = _image_metadata(meta)
    assert "cryptography" not in out.lower()
    kept = ("docker>=7.1", "jinja2>=3.1", 'uv>=0.4; extra == "lock"', "long description", "Version: 0.1.0")
    assert all(k in out for k in kept)


def test_the_digest_does_not_depend_on_the_folder_it_runs_from(tmp_path: Path) -> None:
    """An ``imagesmith.egg-info`` in the working folder (setuptools leaves one in a checkout's root, and
    ``python -m`` puts the working folder first on sys.path) must not change the suite's digest: the image
    identity would differ between a run from the checkout and one from anywhere else."""
    egg = tmp_path / "imagesmith.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text(
        f"Metadata-Version: 2.1\nName: imagesmith\nVersion: {__version__}\nSummary: x\n"
    )
    code = "from imagesmith.build import suite_digest; print(suite_digest())"
    here = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    elsewhere = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path.parent, capture_output=True, text=True, check=True
    )
    assert here.stdout.strip() == elsewhere.stdout.strip() == suite_digest()
