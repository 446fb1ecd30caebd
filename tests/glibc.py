"""What glibc a binary needs: the ``GLIBC_x.y`` versions its ``.gnu.version_r`` section asks of libc.so.6 (the
versioned symbols it imports), read with pyelftools. A binary built against a newer glibc than the image it
runs in fails at load time ("version `GLIBC_2.38' not found"), so the e2e tests compare the nccl-tests
binaries they copy out of an image with that image's glibc (`getconf GNU_LIBC_VERSION`)."""

from __future__ import annotations

import re
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

_GLIBC = re.compile(r"^GLIBC_(\d+)\.(\d+)(?:\.(\d+))?$")


def _key(version: str) -> tuple[int, ...]:
    m = _GLIBC.match(version)
    if m is None:
        raise ValueError(f"not a GLIBC_ version: {version!r}")
    return tuple(int(g) for g in m.groups() if g is not None)


def glibc_needs(path: Path) -> list[str]:
    """The ``GLIBC_x.y`` versions *path* needs from libc.so.6 (and the other glibc libraries: libm,
    libpthread, libdl, librt), sorted oldest first. A static binary or one with no versioned glibc import
    needs none."""
    found: set[str] = set()
    with path.open("rb") as fh:
        elf = ELFFile(fh)
        for section in elf.iter_sections():
            if not isinstance(section, GNUVerNeedSection):
                continue
            for _verneed, auxes in section.iter_versions():
                for aux in auxes:
                    if _GLIBC.match(aux.name):
                        found.add(aux.name)
    return sorted(found, key=_key)


def too_new(path: Path, glibc: str) -> list[str]:
    """The versions *path* needs that a glibc of version *glibc* ("2.36") does not provide."""
    have = _key(f"GLIBC_{glibc}")
    return [v for v in glibc_needs(path) if _key(v) > have]
