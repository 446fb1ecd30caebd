"""``imagesmith-validate``: the suite's console script, baked into every image. Same flags as ``imagesmith
validate``; TARGET defaults to ``local://`` (this host, or the container it runs in)."""

from __future__ import annotations

import sys


def run() -> None:
    """Ctrl-C while imagesmith still imports ends as at any later time: one ``aborted`` line, exit 130."""
    try:
        from imagesmith.cli import validate_main

        code = validate_main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.stderr.write("\nerror: aborted (Ctrl-C)\n  fix: run the command again to finish it\n")
        sys.exit(130)
    sys.exit(code)
