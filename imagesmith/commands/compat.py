"""``imagesmith compat``: will this torch wheel run on this driver and GPU? (verdicts of imagesmith.compat)"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from imagesmith import compat, nvsmi
from imagesmith.errors import ConfigError, Fault

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

_MODE_RANK = {"full": 2, "minor-version": 1, "none": 0}


def _verdict_json(v: compat.Verdict, g: compat.Gpu) -> dict[str, Any]:
    return {
        "compatible": v.compatible,
        "mode": v.mode,
        "reasons": list(v.reasons),
        "arch": None
        if v.arch is None
        else {"kind": v.arch.kind, "detail": v.arch.detail, "kernel": v.arch.kernel},
        "min_driver": None
        if v.min_driver is None
        else {
            "full": str(v.min_driver.full),
            "minor_version": str(v.min_driver.minor_version),
            "toolkit": v.min_driver.toolkit,
        },
        "driver": v.driver,
        "gpu": v.gpu,
        "gpu_name": g.name,
        "vgpu": g.vgpu or None,
        "in_gpu_table": not g.adhoc,
        "cc": g.cc,
        "torch": v.torch,
        "cuda": v.cuda,
        "variant": v.variant,
        "blockers": list(v.blockers),
        "needs_driver": None if v.needs_driver is None else str(v.needs_driver),
        "warnings": list(v.warnings),
    }


def _read(path: str) -> tuple[str, str]:
    from imagesmith.pick import read_smi_text

    return read_smi_text(path)


def _targets(
    driver: str | None, gpus: list[str], smi_file: str | None
) -> tuple[compat.DriverVersion, list[tuple[compat.Gpu, list[int]]], str | None, tuple[str, ...]]:
    """(driver, [(gpu model, nvidia-smi indices)], source) from the flags; one entry per GPU model."""
    if smi_file is None:
        missing = [flag for flag, value in (("--driver", driver), ("--gpu", gpus)) if not value]
        if missing:
            raise ConfigError(
                f"missing {' and '.join(missing)}",
                hint="give --driver and --gpu, or --nvidia-smi FILE (the saved output of nvidia-smi)",
            )
        drv = compat.parse_driver(str(driver))
        chosen: dict[str, compat.Gpu] = {}
        for name in gpus:  # every --gpu is judged (a host with two models gets two verdicts)
            model = compat.gpu(name)
            chosen.setdefault(model.key, model)
        return drv, [(model, []) for model in chosen.values()], None, ()
    if gpus:
        raise ConfigError(
            "--gpu and --nvidia-smi both name the GPU",
            hint="drop --gpu: the GPUs are read from the nvidia-smi file",
        )
    text, source = _read(smi_file)
    report = nvsmi.parse(text, source)
    if report.driver is None and driver is None:
        raise ConfigError(
            f"{source}: this nvidia-smi output shows no driver version",
            hint="add --driver, or save plain `nvidia-smi` output (or add driver_version to --query-gpu)",
        )
    if report.driver is not None and driver is not None and compat.parse_driver(driver) != report.driver:
        raise ConfigError(
            f"--driver {driver} contradicts {source}, which shows driver {report.driver}",
            hint="drop --driver: the driver is read from the nvidia-smi file",
        )
    drv = report.driver if report.driver is not None else compat.parse_driver(str(driver))
    models: dict[str, tuple[compat.Gpu, list[int]]] = {}
    for smi_gpu in report.gpus:
        try:
            # a model not in gpus.toml is judged by the compute_cap the file gives (as pick does)
            model = compat.gpu_or_adhoc(
                smi_gpu.name, memory_mib=smi_gpu.memory_mib, compute_cap=smi_gpu.compute_cap, driver=drv
            )
        except ConfigError as exc:
            hint = exc.hint
            if smi_gpu.compute_cap is None and exc.fault is Fault.UNKNOWN_GPU:
                hint = (
                    "save `nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version "
                    "--format=csv`: with compute_cap imagesmith judges a GPU it does not know; or add the "
                    "model to imagesmith/data/gpus.toml"
                )
            raise ConfigError(f"{source}: GPU {smi_gpu.index}: {exc.message}", hint=hint) from None
        models.setdefault(model.key, (model, []))[1].append(smi_gpu.index)
    from imagesmith.pick import mig_warnings

    return drv, list(models.values()), source, mig_warnings(report.gpus)


def _known_cuda(flag: str, given: str, cuda: str) -> None:
    """A CUDA imagesmith has no toolkit row for (99.9, cu999) or an update that never was (12.4.9) is bad
    input (exit 2), not a "not compatible" verdict."""
    try:
        compat.cuda_release(cuda)
    except ConfigError as exc:
        raise ConfigError(
            f"{flag} {given}: {exc.message}", hint=exc.hint or "give a CUDA X.Y, e.g. 12.1"
        ) from None


def _torch_and_cuda(torch: str, cuda: str | None) -> tuple[str, str, str]:
    """(torch version, CUDA variant, a line saying where the variant came from when --cuda was not given)."""
    version, plus, local = torch.strip().partition("+")
    if plus and not local.strip():
        raise ConfigError(
            f"--torch {torch}: nothing after the '+' (a local version such as +cu121 was cut off)",
            hint="write 2.1.2+cu121, or 2.1.2 with --cuda 12.1",
        )
    if local and not local.startswith("cu"):
        raise ConfigError(
            f"--torch {torch}: {local!r} is not a CUDA variant",
            hint="imagesmith covers CUDA wheels: write 2.1.2+cu121 or 2.1.2 with --cuda 12.1",
        )
    for flag, value in (("--cuda", cuda), ("--torch", local or None)):
        if value is not None:
            _known_cuda(flag, torch if flag == "--torch" else value, value)
    if cuda is not None:
        if local and compat.normalize_cuda(local) != compat.normalize_cuda(cuda):
            raise ConfigError(
                f"--torch {torch} and --cuda {cuda} name different CUDA variants",
                hint="give the variant once: --torch 2.1.2+cu121, or --torch 2.1.2 --cuda 12.1",
            )
        return version, cuda, ""
    if local:
        return version, local, ""
    release = compat.torch_release(version)
    return (
        version,
        release.pypi_default,
        f"--cuda not given: using {release.pypi_default}, the variant "
        f"`pip install torch=={release.version}` gets from PyPI",
    )


def _print_human(console: Console, v: compat.Verdict, g: compat.Gpu, indices: list[int]) -> None:
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
    torch: str = typer.Option(
        ..., "--torch", help="torch release, exact patch version (2.1.2), or with its variant (2.1.2+cu121)"
    ),
    cuda: str | None = typer.Option(
        None,
        "--cuda",
        help="CUDA variant of the wheel: X.Y (12.1) or its tag (cu121); default: the +cuXYZ of "
        "--torch, else the variant `pip install torch==T` gets from PyPI",
    ),
    driver: str | None = typer.Option(None, "--driver", help="NVIDIA driver version, e.g. 535.104.05"),
    gpu: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu",
            help="GPU: key (h100-sxm, a100, rtx4090) or the name nvidia-smi prints; repeatable "
            "(one verdict each)",
        ),
    ] = None,
    nvidia_smi: str | None = typer.Option(
        None,
        "--nvidia-smi",
        metavar="FILE",
        help="saved output of `nvidia-smi`, `nvidia-smi -L` or `nvidia-smi --query-gpu=... --format=csv` "
        "instead of --driver/--gpu ('-' = stdin); one verdict per GPU model in it",
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
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
    torch, cuda, cuda_origin = _torch_and_cuda(torch, cuda)
    drv, targets, source, host_warnings = _targets(driver, gpu or [], nvidia_smi)
    today = compat.today()
    results = [(compat.verdict(drv, g, torch, cuda, today=today), g, indices) for g, indices in targets]
    all_ok = all(v.compatible for v, _, _ in results)
    warnings = list(dict.fromkeys([*host_warnings, *(w for v, _, _ in results for w in v.warnings)]))

    if as_json:
        objs = []
        for v, g, indices in results:
            obj = _verdict_json(v, g)
            obj["cuda_from"] = "pypi-default" if cuda_origin else "flag"
            obj["warnings"] = [*host_warnings, *obj["warnings"]]  # MIG: about the host, whatever the wheel
            if source is not None:
                obj["gpu_indices"] = indices
            objs.append(obj)
        if len(objs) == 1:
            out: dict[str, Any] = objs[0]
            if source is not None:
                out["source"] = source
        else:
            weakest = min(objs, key=lambda o: _MODE_RANK[str(o["mode"])])
            out = {
                **weakest,
                "compatible": all_ok,
                "gpu": [o["gpu"] for o in objs],
                "gpu_name": [o["gpu_name"] for o in objs],
                "reasons": [f"{o['gpu']}: {r}" for o in objs for r in o["reasons"]],
                "source": source,
                "warnings": warnings,
                "verdicts": objs,
            }
            out.pop("gpu_indices", None)
        typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        console = Console(highlight=False, soft_wrap=True)
        if cuda_origin:
            console.print(cuda_origin)
        if source is not None:
            console.print(f"{escape(source)}: driver {drv}, {len(results)} GPU model(s)")
        for v, g, indices in results:
            _print_human(console, v, g, indices)
        for warning in warnings:  # about the host, once: they never change the exit status
            console.print(f"[bold yellow]warning:[/] {escape(warning)}")
    raise typer.Exit(0 if all_ok else 1)


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("compat", epilog=EPILOG)(compat_command)
