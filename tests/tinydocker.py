"""A docker CLI for tests that build a matrix's cell for real but small (issue 37's kill-anywhere harness).

``imagesmith build`` drives BuildKit through the docker CLI (``IMAGESMITH_DOCKER_CLI``). This one passes every
command to the real CLI unchanged except ``build``: there it writes a small Dockerfile into the staged context
(``FROM scratch``, imagesmith's wheel and the cell's sources as imagesmith staged them, a file of fresh random
bytes, and the cell's own ``LABEL`` instruction with its fingerprint) and builds that instead. Everything
else of ``build --push`` is the real thing: staging under ``<cache>/contexts/run-XXXX``, BuildKit, the engine
push, the registry-to-registry copy, the final tags and their read-back. Two builds of the same inputs give
two different digests (the random bytes), as two real builds of a cell do.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import NoReturn

REAL = os.environ.get("TINY_DOCKER_REAL", "/usr/bin/docker")
#: bytes of the random file of each build (the engine push and the copy each move about this much)
SIZE = int(os.environ.get("TINY_DOCKER_BYTES", str(2 << 20)))


def label_instruction(dockerfile: str) -> str:
    """The cell's ``LABEL`` instruction (its continuation lines too)."""
    lines = dockerfile.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("LABEL "))
    end = start
    while lines[end].rstrip().endswith("\\"):
        end += 1
    return "\n".join(lines[start : end + 1])


def small_dockerfile(context: Path) -> Path:
    real = (context / "Dockerfile").read_text()
    (context / "tiny-random.bin").write_bytes(os.urandom(SIZE))
    tiny = context / "Dockerfile.tiny"
    tiny.write_text(
        "FROM scratch\nCOPY wheels/ /opt/wheels/\nCOPY sources/ /opt/sources/\n"
        f"COPY tiny-random.bin /tiny-random.bin\n{label_instruction(real)}\n"
    )
    return tiny


def main(argv: list[str]) -> NoReturn:
    args = argv[1:]
    if args[:1] == ["build"]:
        at = args.index("-f") + 1
        args[at] = str(small_dockerfile(Path(args[at]).parent))
    os.execv(REAL, [REAL, *args])


def install(bin_dir: Path) -> dict[str, str]:
    """An executable ``docker`` in *bin_dir*; returns the environment that makes imagesmith build with it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "docker"
    here = Path(__file__).resolve().parents[1]
    exe.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(here)!r})\n"
        "from tests.tinydocker import main\nmain(sys.argv)\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return {"IMAGESMITH_DOCKER_CLI": str(exe)}
