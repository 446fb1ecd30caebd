"""``imagesmith-validate``: the suite's console script, baked into every image. Same flags as ``imagesmith
validate``; TARGET defaults to ``local://`` (this host, or the container it runs in)."""

from __future__ import annotations

import sys


def run() -> None:
    from imagesmith.cli import validate_main

    sys.exit(validate_main(sys.argv[1:]))
