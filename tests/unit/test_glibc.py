"""tests/glibc.py reads the GLIBC_ versions a binary needs (the e2e tests check the nccl-tests binaries of a
built image against that image's glibc with it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.glibc import glibc_needs, too_new


def _binary() -> Path:
    """A dynamically linked binary every machine that runs these tests has: coreutils' ls (dozens of glibc
    imports, so the x86_64 / aarch64 baseline version is among them)."""
    ls = shutil.which("ls")
    assert ls is not None
    return Path(os.path.realpath(ls))


def test_reads_a_binarys_glibc_needs() -> None:
    needs = glibc_needs(_binary())
    assert needs, "ls imports versioned glibc symbols"
    assert all(re.fullmatch(r"GLIBC_\d+\.\d+(\.\d+)?", v) for v in needs)
    assert "GLIBC_2.2.5" in needs or "GLIBC_2.17" in needs  # the x86_64 / aarch64 baseline


def test_matches_objdump_where_binutils_is_installed() -> None:
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("binutils (objdump) is not installed: nothing to cross-check against")
    out = subprocess.run([objdump, "-p", str(_binary())], capture_output=True, text=True, check=True)
    want = set(re.findall(r"\b(GLIBC_\d+\.\d+(?:\.\d+)?)\b", out.stdout.split("Version References:")[-1]))
    assert set(glibc_needs(_binary())) == want


def test_too_new_against_older_and_newer_glibc() -> None:
    needs = glibc_needs(_binary())
    newest = needs[-1].removeprefix("GLIBC_")
    assert too_new(_binary(), newest) == []
    assert too_new(_binary(), "99.0") == []
    # a glibc older than the binary's newest need: that need (and any other newer one) is reported
    assert too_new(_binary(), "2.0") == [v for v in needs if v != "GLIBC_2.0"]
    assert needs[-1] in too_new(_binary(), "2.0")


def test_a_file_that_is_not_elf_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "script.sh"
    bad.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(Exception, match=r"[Mm]agic"):
        glibc_needs(bad)
