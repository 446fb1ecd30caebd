"""A resolver that needs no network: ``uv pip compile`` answered from a reference lock.

:func:`answer` is the section of a reference lock (runtime, builder or interactive) that ``uv pip compile``
would print for the inputs given; :func:`install` puts an executable ``uv`` doing that first on ``PATH`` (for
``imagesmith lock`` run as a real process: the kill harness), with ``FAKE_UV_LOCK`` naming the reference lock.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

BUILDER = "# --- builder ---"
INTERACTIVE = "# --- interactive ---"
END = "# --- end of lock ---"


def _sections(text: str) -> tuple[str, str, str]:
    text = text.replace("\n" + END + "\n", "\n")
    runtime, _, rest = text.partition("\n" + BUILDER + "\n")
    builder, _, interactive = rest.partition("\n" + INTERACTIVE + "\n")
    lines = runtime.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    return "\n".join(lines[first:]) + "\n", builder, interactive


def answer(reference: str, inputs: list[str]) -> str:
    """What uv prints for *inputs* (the requirements.in lines), from the reference lock text."""
    runtime, builder, interactive = _sections(reference)
    if any(i.startswith("jupyterlab") for i in inputs):
        return interactive
    if any(i.startswith("nvidia-nccl") for i in inputs):
        return builder
    return runtime


def main(argv: list[str]) -> int:
    """The ``uv`` program. ``FAKE_UV_PIDFILE``: where it writes its pid first; ``FAKE_UV_SLEEP``: seconds it
    takes (a resolver that is still running when the command is stopped); ``FAKE_UV_CERTS``: a folder where
    each call leaves what its ``SSL_CERT_FILE`` was (``N.path``) and held (``N.pem``; none when unset)."""
    if os.environ.get("FAKE_UV_PIDFILE"):
        Path(os.environ["FAKE_UV_PIDFILE"]).write_text(str(os.getpid()))
    if os.environ.get("FAKE_UV_CERTS"):
        seen = Path(os.environ["FAKE_UV_CERTS"])
        n = len(list(seen.glob("*.path")))
        cert = os.environ.get("SSL_CERT_FILE")
        (seen / f"{n}.path").write_text(cert or "")
        if cert:
            (seen / f"{n}.pem").write_bytes(Path(cert).read_bytes())
    if os.environ.get("FAKE_UV_SLEEP"):
        import time

        time.sleep(float(os.environ["FAKE_UV_SLEEP"]))
    reference = Path(os.environ["FAKE_UV_LOCK"]).read_text(encoding="utf-8")
    inputs = Path(argv[-1]).read_text(encoding="utf-8").splitlines()
    sys.stdout.write(answer(reference, inputs))
    return 0


def install(bin_dir: Path, reference: Path) -> dict[str, str]:
    """An executable ``uv`` in *bin_dir*; returns the environment (PATH, FAKE_UV_LOCK) that uses it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    uv = bin_dir / "uv"
    here = Path(__file__).resolve().parents[1]
    uv.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(here)!r})\n"
        "from tests.fakeuv import main\nsys.exit(main(sys.argv))\n"
    )
    uv.chmod(uv.stat().st_mode | stat.S_IXUSR)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "FAKE_UV_LOCK": str(reference),
    }
