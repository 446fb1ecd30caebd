"""``imagesmith compat``: will this torch wheel run on this driver and GPU? (verdicts of imagesmith.compat)"""

from __future__ import annotations

import json
from collections.abc import Sequence

import typer
from rich.console import Console
from rich.markup import escape

from imagesmith import compat
from imagesmith.commands.flags import (
    CompatCuda,
    CompatDriver,
    CompatGpus,
    CompatJson,
    CompatNvidiaSmi,
    CompatTorch,
)
from imagesmith.compatrequest import CompatRequest, CompatResult, prepare_compat, run_compat

EPILOG = (
    "Exit status: 0 = compatible (mode full or minor-version; for --nvidia-smi: every GPU model in the "
    "file; warnings such as an end-of-life driver branch do not change it), "
    "1 = not compatible (mode none; also a torch release never published for a known CUDA), "
    "2 = bad input (unknown torch/GPU/CUDA such as --cuda 99.9 or 12.4.9, junk driver, conflicting or "
    "missing flags, an --nvidia-smi FILE that cannot be read), "
    "7 = the --nvidia-smi file is not nvidia-smi output (or shows nvidia-smi failing). "
    "Examples: imagesmith compat --driver 535.104.05 --gpu a100 --torch 2.1.2 --cuda 12.1 ; "
    "nvidia-smi > smi.txt && imagesmith compat --nvidia-smi smi.txt --torch 2.11.0 --cuda cu130 --json"
)


def _print_human(console: Console, v: compat.Verdict, g: compat.Gpu, indices: Sequence[int]) -> None:
    where = f" (GPU {', '.join(map(str, indices))})" if indices else ""
    shown = f"{g.vgpu} (vGPU slice of {g.name})" if g.vgpu else g.name
    head = f"torch {v.torch}+{v.variant} on {escape(shown)}{where}, driver {v.driver}: "
    if v.mode == "full":
        console.print(f"[bold green]✔ compatible[/] — {head}full compatibility")
    elif v.mode == "minor-version":
        console.print(f"[bold yellow]✔ compatible, with limits[/] — {head}CUDA minor-version compatibility")
    else:
        console.print(f"[bold red]✘ not compatible[/] — {head}it will not run")
    for reason in v.reasons:
        console.print(f"  • {escape(reason)}")
    if v.min_driver is not None:
        console.print(
            f"  minimum driver for CUDA {v.cuda}: {v.min_driver.full} (full), "
            f"{v.min_driver.minor_version} (minor-version compatibility)"
        )


def compat_command(
    torch: CompatTorch,
    cuda: CompatCuda = None,
    driver: CompatDriver = None,
    gpu: CompatGpus = None,
    nvidia_smi: CompatNvidiaSmi = None,
    as_json: CompatJson = False,
) -> None:
    """Say whether torch TORCH built for CUDA X.Y runs on a driver and GPU: full, minor-version or none, and
    why.

    Rules: NVIDIA's CUDA toolkit driver table and minor-version compatibility; PyTorch's per-wheel arch lists.
    Warns (text: "warning:" lines, JSON: "warnings") when the driver branch is past end of life in NVIDIA's
    data-center driver lifecycle ($IMAGESMITH_TODAY=YYYY-MM-DD sets the date) or when the GPU's last driver
    branch caps its CUDA (Maxwell/Pascal/Volta: R580, CUDA 13.0).
    With several GPU models (--nvidia-smi, or --gpu repeated), JSON keeps the single-verdict keys for the
    weakest model and adds "verdicts" (one object per model).
    """
    request = CompatRequest(
        torch=torch, cuda=cuda, driver=driver, gpu=tuple(gpu or ()), nvidia_smi=nvidia_smi, as_json=as_json
    )
    result = run_compat(prepare_compat(request))
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        _print_text(result)
    raise typer.Exit(0 if result.compatible else 1)


def _print_text(result: CompatResult) -> None:
    console = Console(highlight=False, soft_wrap=True)
    if result.cuda_origin:
        console.print(result.cuda_origin)
    if result.source is not None:
        console.print(f"{escape(result.source)}: driver {result.driver}, {len(result.verdicts)} GPU model(s)")
    for v, g, indices in result.verdicts:
        _print_human(console, v, g, indices)
    for warning in result.warnings:  # about the host, once: they never change the exit status
        console.print(f"[bold yellow]warning:[/] {escape(warning)}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("compat", epilog=EPILOG)(compat_command)
