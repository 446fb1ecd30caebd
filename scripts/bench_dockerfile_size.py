#!/usr/bin/env python3
"""Generated Dockerfile lines and image layers per image, before/after side by side (issue 24).

    .venv/bin/python scripts/bench_dockerfile_size.py --baseline main [--markdown]

*before*: what ``--baseline``'s templates render — its committed ``dockerfiles/`` (``render --check`` holds on
it), read with ``git show``; *after*: what this checkout's templates render for the same matrices, in memory
(``imagesmith.render.render_plan``; nothing is written). Per image (cell): the Dockerfile's lines and the
layers its final stage adds to the base image (RUN, COPY and ADD instructions after the last FROM: the
image's own layers; the base image's are the same on both sides); totals over all cells, and every generated
line under dockerfiles/ (Dockerfiles, pin files, scripts, READMEs).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith.matrix import load_matrix  # noqa: E402
from imagesmith.plan import build_plan  # noqa: E402
from imagesmith.project import load_project  # noqa: E402
from imagesmith.render import render_plan  # noqa: E402


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout


def image_layers(dockerfile: str) -> int:
    """Layers the final stage adds: its RUN, COPY and ADD instructions."""
    final = dockerfile[dockerfile.rindex("\nFROM ") :]
    return len(re.findall(r"^(RUN|COPY|ADD)\s", final, re.MULTILINE))


def lines(text: str) -> int:
    return len(text.splitlines())


def before(baseline: str, folder: str) -> dict[str, str]:
    """``{path under dockerfiles/: text}`` of *baseline*'s committed rendering."""
    paths = git("ls-tree", "-r", "--name-only", baseline, "--", folder).split()
    return {p.removeprefix(folder + "/"): git("show", f"{baseline}:{p}") for p in paths}


def after(project_root: Path) -> dict[str, str]:
    project = load_project(project_root / "imagesmith.toml")
    out: dict[str, str] = {}
    for name in project.matrix_names():
        plan = build_plan(load_matrix(name, project=project), project=project)
        for path, text in render_plan(plan, project).items():
            out[path.relative_to(project.dockerfiles_dir).as_posix()] = text
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="main", help="the commit whose rendering is *before*")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = ap.parse_args()
    project = load_project(REPO / "imagesmith.toml")
    folder = project.rel(project.dockerfiles_dir)
    sides = {"before": before(args.baseline, folder), "after": after(REPO)}
    cells = sorted(
        {p.rsplit("/", 1)[0] for side in sides.values() for p in side if p.endswith("/Dockerfile")}
    )
    rows = []
    for cell in cells:
        b, a = (sides[k].get(f"{cell}/Dockerfile", "") for k in ("before", "after"))
        rows.append((cell, lines(b), lines(a), image_layers(b) if b else 0, image_layers(a) if a else 0))
    commit = git("rev-parse", "--short", args.baseline).strip()
    head = git("rev-parse", "--short", "HEAD").strip()
    sep = " | " if args.markdown else "  "
    print(
        f"before: {args.baseline} ({commit})   after: this checkout's templates (HEAD {head}, working tree)"
    )
    header = ["image (matrix/cell)", "Dockerfile lines before", "after", "image layers before", "after"]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print(f"{header[0]:58}{sep}{'lines':>13}{sep}{'layers':>9}")
    for cell, lb, la, yb, ya in rows:
        if args.markdown:
            print(f"| {cell} | {lb} | {la} | {yb} | {ya} |")
        else:
            print(f"{cell:58}{sep}{lb:>5} → {la:<5}{sep}{yb:>3} → {ya:<3}")
    n = len(rows)
    tot = [sum(r[i] for r in rows) for i in range(1, 5)]
    all_b = sum(lines(t) for t in sides["before"].values())
    all_a = sum(lines(t) for t in sides["after"].values())
    files_b, files_a = len(sides["before"]), len(sides["after"])
    print()
    print(f"images: {n}")
    ratio, per = tot[1] / tot[0], f"{tot[0] / n:.0f} → {tot[1] / n:.0f}"
    print(f"Dockerfile lines, total: {tot[0]} → {tot[1]} ({ratio:.2f}×); per image {per}")
    print(f"image layers, total: {tot[2]} → {tot[3]}; per image {tot[2] / n:.1f} → {tot[3] / n:.1f}")
    print(f"every generated line under {folder}/: {all_b} → {all_a} ({files_b} → {files_a} files)")


if __name__ == "__main__":
    main()
