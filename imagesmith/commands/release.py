"""CLI commands ``pick`` and ``release`` (plus ``index show``).

Heavy modules are imported inside the commands: ``imagesmith pick`` with a cached index must start fast.
"""

from __future__ import annotations

import os
import platform as _platform
from pathlib import Path
from typing import Annotated

import typer

from imagesmith.errors import ConfigError


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("pick")(pick)


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
    plat = picking.platform_for(picking.load_platforms(), platform, region)
    chosen = picking.choose(
        idx,
        host,
        picking.Constraints(torch=torch, cuda=cuda, python=python),
        platform=plat,
        region=region,
        machine=_platform.machine() if nvidia_smi is None and driver is None else "x86_64",
    )
    typer.echo(picking.render_json(chosen) if as_json else picking.render_text(chosen))
    if pull:
        picking.pull_image(chosen, echo=lambda line: typer.echo(line, err=True))
