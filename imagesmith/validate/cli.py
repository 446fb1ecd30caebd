"""``imagesmith-validate``: the suite's console script, baked into every image. Same flags as ``imagesmith
validate``; TARGET defaults to ``local://`` (this host, or the container it runs in)."""

from __future__ import annotations

import sys


def run() -> None:
    from imagesmith.cli import main

    sys.exit(main(["validate", *sys.argv[1:]]))
