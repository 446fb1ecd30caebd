"""CLI commands ``pick`` and ``release`` (plus ``index show``).

Heavy modules are imported inside the commands: ``imagesmith pick`` with a cached index must start fast.
"""

from __future__ import annotations

import os
import platform as _platform
from pathlib import Path
from typing import Annotated

import typer

from imagesmith.commands import current_project
from imagesmith.commands.output import pick_json, pick_text, release_json, release_text
from imagesmith.commands.plan import MATRIX_HELP
from imagesmith.errors import ConfigError


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("pick")(pick)
    app.command("release")(release)
    app.command("candidates")(candidates)
    app.command("index")(index_show)


def pick(
    index: Annotated[
        str | None,
        typer.Option(
            "--index",
            help="release index: a file, an http(s) URL, or oci://HOST/REPO[:TAG] (the artifact "
            "`imagesmith release` publishes; oci+http:// for a plain-HTTP registry). "
            "Default: $IMAGESMITH_INDEX.",
        ),
    ] = None,
    nvidia_smi: Annotated[
        Path | None, typer.Option("--nvidia-smi", help="read the host from a saved nvidia-smi output")
    ] = None,
    driver: Annotated[
        str | None, typer.Option("--driver", help="offline: the host's driver, e.g. 535.104.05")
    ] = None,
    gpu: Annotated[
        list[str] | None, typer.Option("--gpu", help="offline: a GPU name or key (repeat for several GPUs)")
    ] = None,
    torch: Annotated[str | None, typer.Option("--torch", help="torch version prefix, e.g. 2.1")] = None,
    cuda: Annotated[str | None, typer.Option("--cuda", help="CUDA version prefix, e.g. 12.1")] = None,
    python: Annotated[str | None, typer.Option("--python", help="Python version, e.g. 3.10")] = None,
    platform: Annotated[
        str | None,
        typer.Option(
            "--platform",
            help="where the host runs: autodl, aliyun, tencent, huawei, runpod, vast, lambda, "
            "aws, gcp (chooses the registry)",
        ),
    ] = None,
    region: Annotated[
        str | None,
        typer.Option("--region", help="cloud region, e.g. cn-hangzhou or us-east-1 (chooses the registry)"),
    ] = None,
    pull: Annotated[
        bool, typer.Option("--pull", help="docker pull the picked image (with progress)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the pick as JSON")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="ignore the cached index")] = False,
    flavor: Annotated[
        str | None,
        typer.Option(
            "--flavor",
            help="only images of this flavor (runtime, devel, interactive); interactive also prints the run "
            "line with the ports and the variables to set",
        ),
    ] = None,
) -> None:
    """Choose the released image for this GPU host and print how to pull and run it."""
    from imagesmith import pick as picking

    source = index or os.environ.get("IMAGESMITH_INDEX")
    if not source:
        raise ConfigError(
            "no release index given",
            hint="pass --index FILE|URL|oci://HOST/REPO[:TAG] or set IMAGESMITH_INDEX",
        )
    host = picking.read_host(nvidia_smi_file=nvidia_smi, driver=driver, gpus=gpu or ())
    idx = picking.fetch_index(source, refresh=refresh)
    if flavor is not None:
        from dataclasses import replace

        idx = replace(idx, images=tuple(i for i in idx.images if picking.image_flavor(i) == flavor))
    plat = picking.platform_for(picking.load_platforms(), platform, region)
    chosen = picking.choose(
        idx,
        host,
        picking.Constraints.parse(torch=torch, cuda=cuda, python=python),
        platform=plat,
        region=region,
        machine=_platform.machine() if nvidia_smi is None and driver is None else "x86_64",
    )
    access = picking.interactive_access(platform) if flavor == "interactive" else None
    if as_json:
        typer.echo(pick_json(chosen))
    else:
        typer.echo(pick_text(chosen) + ("\n\n" + "\n".join(access.lines(chosen)) if access else ""))
    if pull:
        picking.pull_image(chosen, echo=lambda line: typer.echo(line, err=True))


def release(
    matrix: Annotated[str | None, typer.Option("--matrix", help=MATRIX_HELP)] = None,
    reports: Annotated[
        list[Path] | None,
        typer.Option(
            "--reports", help="folder(s) with validation reports (report.json, searched recursively)"
        ),
    ] = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="cell id glob(s) to release")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print what would be promoted or refused")
    ] = False,
    index_file: Annotated[
        Path | None,
        typer.Option(
            "--index-file", help="release index file to update (default: <project>/release/index.json)"
        ),
    ] = None,
    registries: Annotated[
        Path | None, typer.Option("--registries", help="registries file (default: the project's)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the outcome as JSON")] = False,
) -> None:
    """Promote candidates whose exact digest passed validation to every registry of their cell."""
    from imagesmith import release as releasing

    project = current_project(matrix)
    outcome = releasing.release_matrix(
        project.resolve_matrix_name(matrix),
        report_dirs=reports or [],
        only=only or [],
        dry_run=dry_run,
        index_file=index_file or project.root / "release" / "index.json",
        registries_file=registries,
        echo=lambda line: typer.echo(line, err=True),
        project=project,
    )
    typer.echo(release_json(outcome) if as_json else release_text(outcome))
    outcome.raise_for_refusals()


def candidates(
    matrix: Annotated[str | None, typer.Option("--matrix", help=MATRIX_HELP)] = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="cell id glob(s)")] = None,
    registries: Annotated[
        Path | None, typer.Option("--registries", help="registries file (default: the project's)")
    ] = None,
    pinned: Annotated[
        bool, typer.Option("--pinned", help="print only the first pinned reference (IMAGE@DIGEST) per cell")
    ] = False,
) -> None:
    """Each cell's candidate digest per registry (what `imagesmith validate IMAGE@DIGEST` tests)."""
    import json

    from imagesmith import release as releasing
    from imagesmith.errors import ReleaseError

    project = current_project(matrix)
    rows = releasing.candidates(
        project.resolve_matrix_name(matrix), only=only or [], registries_file=registries, project=project
    )
    if pinned:
        missing = [r["cell"] for r in rows if not r["pinned"]]
        if missing:
            raise ReleaseError(
                f"no candidate pushed for {', '.join(missing)}",
                hint="run imagesmith build --matrix MATRIX --only CELL --push first",
            )
        for r in rows:
            typer.echo(r["pinned"][0])
        return
    typer.echo(json.dumps(rows, indent=2))


def index_show(
    source: Annotated[
        str | None,
        typer.Argument(help="index file, http(s) URL or oci://HOST/REPO[:TAG]; default $IMAGESMITH_INDEX"),
    ] = None,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="ignore the cached copy of a remote index")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the index as canonical JSON")] = False,
) -> None:
    """Load and check a release index (schema, digests) and list its images."""
    from imagesmith import pick as picking
    from imagesmith.index import dump_index

    src = source or os.environ.get("IMAGESMITH_INDEX")
    if not src:
        raise ConfigError(
            "no release index given", hint="pass FILE|URL|oci://HOST/REPO[:TAG] or set IMAGESMITH_INDEX"
        )
    idx = picking.fetch_index(src, refresh=refresh)
    if as_json:
        typer.echo(dump_index(idx), nl=False)
        return
    typer.echo(f"{src}: {len(idx.images)} image(s), generated {idx.generated}")
    for img in idx.images:
        hosts = ", ".join(f"{r.name}" for r in img.registries)
        typer.echo(
            f"  {img.tag}  torch {img.torch} CUDA {img.cuda} py{img.python}  driver >= {img.min_driver.full} "
            f"(minor {img.min_driver.minor_version})  {img.digest[:19]}…  [{hosts}]"
        )
