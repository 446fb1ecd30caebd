#!/usr/bin/env python3
"""The wheel-layer script (issue 24) on the real engine: same layer bytes as the COPY + RUN block, and one
changed pin rebuilds only its layer and those above (figures → docs/benchmarks.md, "Wheel layers as one
script").

    PYTHONPATH=. .venv/bin/python scripts/bench_layer_cache.py \\
        --extra-ca /etc/ssl/certs/ca-certificates.crt --baseline main --pin nvidia-curand==10.4.1.34 \\
        --out docs/benchmarks-layer-cache-DATE.json

Three builds of the smoke cell (torch 2.11.0 cu130, py3.11, debian:bookworm), one at a time, each through
``docker build --progress=plain`` (Debian's docker 20.10, ``DOCKER_BUILDKIT=1``, the CA as the BuildKit secret
``imagesmith-ca``), on the build context ``imagesmith build`` stages (the committed files, the nccl-tests
archive from the source cache, this checkout's imagesmith wheel):

1. ``baseline``: the cell's rendered files from a ``git worktree`` of ``--baseline`` (the COPY + RUN block);
2. ``after``: this checkout's rendered files (one RUN of wheel-layer.sh per layer, bind mounts);
3. ``changed``: a throw-away copy of this project whose lock pins ``--pin`` instead (its sha256 from the
   index), rendered by this checkout: the same layer plan with one pin file changed.

Figures: per wheel layer (by its pin file), the layer's diff_id in each image (from dockerd's image config:
``rootfs.diff_ids`` beside the non-empty ``history`` steps), whether baseline and after are the same bytes,
and for ``changed`` whether BuildKit printed CACHED for the layer's RUN; plus the generated Dockerfile's
lines and layer count. Needs scripts/setup.sh (dockerd, the base image behind the mirror map, the source
cache) and root (it reads image configs under /var/lib/docker). Leaves the build cache; removes its images
and worktree at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith.build import stage_context  # noqa: E402
from imagesmith.config import UserConfig  # noqa: E402
from imagesmith.matrix import load_matrix  # noqa: E402
from imagesmith.plan import build_plan  # noqa: E402
from imagesmith.project import load_project  # noqa: E402

DOCKER = "/usr/bin/docker"
BASE = "127.0.0.1:5000/hub/library/debian:bookworm"
IMAGEDB = Path("/var/lib/docker/image/overlay2/imagedb/content/sha256")
MATRIX = "smoke"
_PIN_FILE = re.compile(r"layers/\d+-[A-Za-z0-9._-]+\.txt")


def sh(*cmd: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def rendered_files(folder: Path) -> dict[str, bytes]:
    """The rendered files of a cell folder (not what the build step fills into sources/ and wheels/)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not (rel.startswith(("sources/", "wheels/")) and not rel.endswith("README.md")):
            out[rel] = path.read_bytes()
    return out


def overlay(staged: Path, rendered: Path, dest: Path) -> None:
    """*staged* (sources/, wheels/ filled) with the rendered files of *rendered* instead of its own."""
    shutil.copytree(staged, dest)
    for rel in rendered_files(staged):
        (dest / rel).unlink()
    for rel, data in rendered_files(rendered).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
        if rel.endswith(".sh"):
            (dest / rel).chmod(0o755)


def redact_urls(text: str) -> str:
    """Build logs are committed as evidence: apt's and pip's download lines name the package mirror this
    machine used, which belongs to the machine, not to the figures — replaced by ``<mirror>``."""
    return re.sub(r"\b(https?)://[^/\s]+", r"\1://<mirror>", text)


def build(context: Path, tag: str, extra_ca: str | None, log: Path) -> dict[str, Any]:
    cmd = [DOCKER, "build", "--progress=plain", "-t", tag, "--build-arg", f"BASE_IMAGE={BASE}"]
    cmd += ["--build-arg", f"BUILDER_IMAGE={BASE}"]
    if extra_ca:
        cmd += ["--secret", f"id=imagesmith-ca,src={extra_ca}"]
    start = time.monotonic()
    proc = subprocess.run(
        [*cmd, str(context)],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, DOCKER_BUILDKIT="1"),
    )
    wall = time.monotonic() - start
    log.write_text(redact_urls(proc.stderr + proc.stdout))
    if proc.returncode != 0:
        sys.exit(f"build of {tag} failed ({proc.returncode}); log: {log}\n{proc.stderr[-3000:]}")
    return {"wall_s": round(wall, 1), "log": str(log), "steps": steps_of(proc.stderr)}


def steps_of(log: str) -> list[dict[str, Any]]:
    """BuildKit's plain progress: each ``#N [stage i/n] INSTRUCTION`` step, and whether ``#N CACHED``
    follows."""
    names: dict[str, str] = {}
    cached: set[str] = set()
    for line in log.splitlines():
        m = re.match(r"#(\d+) (\[.*?\] .*)$", line)
        if m and m.group(1) not in names:
            names[m.group(1)] = m.group(2)
        m = re.match(r"#(\d+) CACHED$", line)
        if m:
            cached.add(m.group(1))
    return [{"step": v, "cached": k in cached} for k, v in names.items()]


def layers_of(tag: str) -> list[dict[str, str]]:
    """(step, diff_id) of each layer, bottom first, from dockerd's copy of the image config."""
    image_id = sh(DOCKER, "image", "inspect", "--format", "{{.Id}}", tag).strip().removeprefix("sha256:")
    config = json.loads((IMAGEDB / image_id).read_bytes())
    steps = [str(h.get("created_by", "")) for h in config["history"] if not h.get("empty_layer")]
    diff_ids = config["rootfs"]["diff_ids"]
    if len(steps) != len(diff_ids):
        sys.exit(f"{tag}: {len(steps)} history steps for {len(diff_ids)} layers")
    return [{"step": s, "diff_id": d} for s, d in zip(steps, diff_ids, strict=True)]


def wheel_layers(layers: list[dict[str, str]]) -> dict[str, str]:
    """``{pin file: diff_id}`` of the wheel layers: the RUN after ``COPY layers/NN…`` (baseline) or the RUN
    naming its pin file (wheel-layer.sh)."""
    out: dict[str, str] = {}
    pending = ""
    for layer in layers:
        step = layer["step"]
        m = _PIN_FILE.search(step)
        if step.startswith("COPY ") and m:
            pending = m.group(0)
        elif "wheel-layer.sh" in step and m:
            out[m.group(0)] = layer["diff_id"]
            pending = ""
        elif pending and step.startswith("RUN"):
            out[pending] = layer["diff_id"]
            pending = ""
    return out


def pin_hash(name: str, version: str, python: str, tmp: Path) -> str:
    """sha256 of the wheel pip picks for *name*==*version* on CPython *python* (manylinux, x86_64)."""
    dest = tmp / "pin-wheel"
    platform = ["--only-binary=:all:", "--python-version", python]
    for tag in (
        "manylinux_2_28",
        "manylinux_2_27",
        "manylinux2014",
        "manylinux1",
    ):  # what bookworm's pip takes
        platform += ["--platform", f"{tag}_x86_64"]
    sh(sys.executable, "-m", "pip", "download", "--no-deps", *platform, "-d", str(dest), f"{name}=={version}")
    (wheel,) = dest.glob("*.whl")
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


def changed_project(tmp: Path, lock_file: str, name: str, old: str, new: str, digest: str) -> Path:
    """A copy of this project whose lock *lock_file* pins *name*==*new* (one --hash line), rendered."""
    root = tmp / "changed-project"
    root.mkdir()
    for rel in ("imagesmith.toml", "matrices"):
        src = REPO / rel
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / rel)
    project = load_project(REPO / "imagesmith.toml")
    locks = root / project.rel(project.locks_dir)
    shutil.copytree(project.locks_dir, locks)
    lock = locks / Path(lock_file).name
    text = lock.read_text()
    pattern = re.compile(
        rf"^{re.escape(name)}=={re.escape(old)} \\\n(    --hash=sha256:[0-9a-f]{{64}}( \\)?\n)+", re.M
    )
    if not pattern.search(text):
        sys.exit(f"{lock}: no {name}=={old} with hashes")
    lock.write_text(pattern.sub(f"{name}=={new} \\\\\n    --hash=sha256:{digest}\n", text, count=1))
    sh(sys.executable, "-m", "imagesmith", "render", cwd=root, env=dict(os.environ, PYTHONPATH=str(REPO)))
    return root


def dockerfile_stats(text: str) -> dict[str, int]:
    lines = text.splitlines()
    final = text[text.rindex("\nFROM ") :]
    return {
        "lines": len(lines),
        "final_stage_layers": len(re.findall(r"^(RUN|COPY|ADD) ", final, re.M)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extra-ca", help="a CA bundle pip inside the build trusts (the BuildKit secret)")
    ap.add_argument("--baseline", default="main", help="the commit whose templates render the baseline")
    ap.add_argument("--pin", default="nvidia-curand==10.4.1.34", help="NAME==VERSION the changed lock pins")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    name, new = args.pin.split("==")
    project = load_project(REPO / "imagesmith.toml")
    matrix = load_matrix(MATRIX, project=project)
    (cell,) = [c for c in build_plan(matrix, project=project).cells if c.flavor == "runtime"]
    old = dict(cell.lock.pins)[name]
    result: dict[str, Any] = {
        "cell": cell.id,
        "baseline": args.baseline,
        "pin": {"name": name, "from": old, "to": new},
    }
    with ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix="bench-layer-cache-"))
        stack.callback(shutil.rmtree, tmp, True)
        base_tree = tmp / "baseline-tree"
        sh("git", "-C", str(REPO), "worktree", "add", "--detach", str(base_tree), args.baseline)
        stack.callback(
            lambda: subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_tree)])
        )
        result["baseline_commit"] = sh("git", "-C", str(base_tree), "rev-parse", "HEAD").strip()
        result["after_commit"] = sh("git", "-C", str(REPO), "rev-parse", "HEAD").strip()
        staged = stage_context(cell, matrix, UserConfig(), tmp / "staged", project=project)
        digest = pin_hash(name, new, cell.runtime.python, tmp)
        changed_root = changed_project(tmp, cell.lock.lock_file, name, old, new, digest)
        trees = {
            "baseline": base_tree / cell.publish.context,
            "after": project.path(cell.publish.context),
            "changed": changed_root / cell.publish.context,
        }
        images: dict[str, Any] = {}
        for label, rendered in trees.items():
            ctx = tmp / f"ctx-{label}"
            overlay(staged, rendered, ctx)
            tag = f"imagesmith-bench/layer-cache-{label}:{os.getpid()}"
            stack.callback(lambda t=tag: subprocess.run([DOCKER, "rmi", t], capture_output=True, check=False))
            print(f"building {label} …", file=sys.stderr, flush=True)
            run = build(ctx, tag, args.extra_ca, tmp / f"{label}.log")
            shutil.copy2(tmp / f"{label}.log", args.out.with_suffix(f".{label}.log"))
            run["log"] = args.out.with_suffix(f".{label}.log").name
            layers = layers_of(tag)
            images[label] = {
                **run,
                **dockerfile_stats((rendered / "Dockerfile").read_text()),
                "layers": len(layers),
                "wheel_layers": wheel_layers(layers),
            }
            print(f"  {label}: {run['wall_s']} s, {len(layers)} layers", file=sys.stderr, flush=True)
        result["images"] = images
        base, after, changed = (images[k]["wheel_layers"] for k in ("baseline", "after", "changed"))
        changed_steps = {
            m.group(0): s["cached"]
            for s in images["changed"]["steps"]
            if "wheel-layer.sh" in s["step"] and (m := _PIN_FILE.search(s["step"]))
        }
        rows = []
        for pin_file in sorted(set(base) | set(after) | set(changed)):
            rows.append(
                {
                    "pin_file": pin_file,
                    "baseline": base.get(pin_file),
                    "after": after.get(pin_file),
                    "same_bytes_as_baseline": base.get(pin_file) == after.get(pin_file),
                    "changed": changed.get(pin_file),
                    "changed_cached": changed_steps.get(pin_file),
                    "changed_same_as_after": changed.get(pin_file) == after.get(pin_file),
                }
            )
        result["wheel_layers"] = rows
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'pin file':34} {'baseline':14} {'after':14} same  {'changed':14} CACHED")
    for r in rows:
        print(
            f"{r['pin_file']:34} {str(r['baseline'])[7:19]:14} {str(r['after'])[7:19]:14} "
            f"{'yes' if r['same_bytes_as_baseline'] else 'NO':5} {str(r['changed'])[7:19]:14} "
            f"{r['changed_cached']}"
        )
    for k, v in images.items():
        print(f"{k}: {v['lines']} Dockerfile lines, {v['layers']} image layers, build {v['wall_s']} s")


if __name__ == "__main__":
    main()
