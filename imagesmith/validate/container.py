"""``imagesmith validate IMAGE``: start the image with the GPUs and its shm/ulimit needs, run the baked-in
suite
(``imagesmith-validate local://``) inside, and collect the bundle through a bind-mounted report folder.

All engine access goes through :class:`imagesmith.engine.Engine` (``run_container`` always removes the
container;
GPUs through ``--gpus`` where the NVIDIA container toolkit exists, else device nodes + read-only driver
mounts).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesmith.errors import ConfigError, ValidationFailed
from imagesmith.validate.context import MULTICAST_OFF_ENV, SuiteOptions
from imagesmith.validate.parsers import parse_size

if TYPE_CHECKING:
    from collections.abc import Sequence

    from imagesmith.engine import BindMount, ContainerEngine, RunResult
    from imagesmith.validate.devices import GpuMode

REPORT_MOUNT = "/imagesmith-report"
#: NGC/AWS practice for training containers; the image may name others in io.imagesmith.ulimits.
DEFAULT_ULIMITS: dict[str, int | tuple[int, int]] = {"memlock": -1, "stack": 67108864}
DRIVER_BIN = "/usr/local/nvidia/bin"
DRIVER_LIBS = "/usr/local/nvidia/lib64:/usr/local/nvidia/lib"


@dataclass(frozen=True, kw_only=True)
class ImageRunPlan:
    shm_size: str
    shm_min_bytes: int
    shm_source: str
    ulimits: dict[str, int | tuple[int, int]]
    env: dict[str, str]


def parse_ulimits(text: str, *, where: str) -> dict[str, int | tuple[int, int]]:
    """``memlock=-1,stack=67108864`` or ``nofile=1024:4096`` → the mapping Engine.run_container takes."""
    out: dict[str, int | tuple[int, int]] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError(item)
            if ":" in value:
                soft, hard = value.split(":", 1)
                out[name.strip()] = (int(soft), int(hard))
            else:
                out[name.strip()] = int(value)
        except ValueError:
            raise ConfigError(
                f"{where}: {item!r} is not NAME=VALUE[:HARD]", hint="e.g. memlock=-1,stack=67108864"
            ) from None
    return out


def plan_image_run(
    image_config: dict[str, Any], *, shm_override: str | None, shm_min_override: int | None
) -> ImageRunPlan:
    """The container's flags from the image: labels for shm and ulimits, its PATH/LD_LIBRARY_PATH env."""
    cfg = image_config.get("Config") or {}
    labels: dict[str, str] = dict(cfg.get("Labels") or {})
    env_list: list[str] = list(cfg.get("Env") or [])
    image_env = dict(e.split("=", 1) for e in env_list if "=" in e)
    if shm_min_override is not None:
        shm_min, source = shm_min_override, "--shm-min"
    elif labels.get("io.imagesmith.shm-min-bytes", "").isdigit():
        shm_min, source = (
            int(labels["io.imagesmith.shm-min-bytes"]),
            "image label io.imagesmith.shm-min-bytes",
        )
    elif labels.get("io.imagesmith.shm-min"):
        shm_min = parse_size(labels["io.imagesmith.shm-min"], what="image label io.imagesmith.shm-min")
        source = "image label io.imagesmith.shm-min"
    else:
        shm_min, source = 1024**3, "imagesmith default (1 GiB; the image has no io.imagesmith.shm-min label)"
    if shm_override:
        parse_size(shm_override, what="--shm-size")
        shm_size = shm_override
    else:
        shm_size = labels.get("io.imagesmith.shm-min") or f"{max(1, -(-shm_min // 1024**3))}g"
    ulimits = dict(DEFAULT_ULIMITS)
    if labels.get("io.imagesmith.ulimits"):
        ulimits.update(
            parse_ulimits(labels["io.imagesmith.ulimits"], where="image label io.imagesmith.ulimits")
        )
    env = dict(MULTICAST_OFF_ENV)
    path = image_env.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env["PATH"] = f"{DRIVER_BIN}:{path}"
    ld = image_env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = DRIVER_LIBS + (f":{ld}" if ld else "")
    return ImageRunPlan(shm_size=shm_size, shm_min_bytes=shm_min, shm_source=source, ulimits=ulimits, env=env)


def inner_argv(options: SuiteOptions, *, select: str | None) -> list[str]:
    """The ``imagesmith-validate`` command line run inside the container."""
    argv = [
        "imagesmith-validate",
        "local://",
        "--report",
        REPORT_MOUNT,
        "--shm-min",
        str(options.shm_min_bytes),
        "--shm-min-source",
        options.shm_min_source,
        "--label",
        # a label never names a digest (the suite inside cannot vouch for one); the host puts the full
        # reference back into the report
        options.target_label.split("@", 1)[0],
    ]
    if options.expect_gpu:
        argv += ["--expect-gpu", options.expect_gpu]
    if options.expect_count is not None:
        argv += ["--expect-count", str(options.expect_count)]
    if options.expect_nvlink:
        argv += ["--expect-nvlink"]
    if options.nccl_tests:
        argv += ["--nccl-tests", options.nccl_tests]
    argv += [
        "--nccl-rounds",
        str(options.nccl_rounds),
        "--nccl-max-bytes",
        options.nccl_max_bytes,
        "--nccl-timeout",
        str(options.nccl_timeout_s),
    ]
    if options.baseline_busbw_gbps:
        argv += ["--baseline-busbw", str(options.baseline_busbw_gbps)]
    for name, value in sorted(options.baseline_figures.items()):
        argv += ["--baseline-figure", f"{name}={value:g}"]
    if options.fleet:
        argv += ["--baseline-fleet", json.dumps(options.fleet, separators=(",", ":"))]
    if options.baseline_busbw_gbps or options.baseline_figures or options.fleet:
        argv += ["--baseline-source", options.fleet_source if options.fleet else options.baseline_source]
    # only what differs from the defaults: an image built by an older imagesmith knows none of these flags
    defaults = SuiteOptions()
    for flag, value, default in (
        ("--perf-fail-ratio", options.perf_fail_ratio, defaults.perf_fail_ratio),
        ("--perf-warn-ratio", options.perf_warn_ratio, defaults.perf_warn_ratio),
        ("--perf-seconds", options.perf_seconds, defaults.perf_seconds),
    ):
        if value != default:
            argv += [flag, f"{value:g}"]
    if select:
        argv += ["-k", select]
    return argv


def run_with_plan(
    engine: ContainerEngine,
    image: str,
    command: Sequence[str],
    plan: ImageRunPlan,
    *,
    gpus: str | None,
    gpu_mode: GpuMode = "auto",
    mounts: Sequence[BindMount] = (),
    timeout_s: float = 3600,
) -> tuple[RunResult, str]:
    """Run *command* in a fresh container of *image* with the plan's shm, ulimits and environment.

    An engine that may not raise limits (rootless, restricted) refuses the container: then it runs once more
    without the ulimits, and the returned note (empty otherwise) says so.
    """
    from imagesmith.errors import EngineError
    from imagesmith.validate.devices import gpu_access

    access = gpu_access(engine, gpus, gpu_mode)
    env = {**dict(access.env), **plan.env}  # the image's own settings win over the driver tree's defaults

    def run(ulimits: dict[str, int | tuple[int, int]]) -> RunResult:
        return engine.run_container(
            image,
            command,
            gpu_request=access.request,
            devices=access.devices,
            shm_size=plan.shm_size,
            ulimits=ulimits,
            env=env,
            mounts=[*mounts, *access.mounts],
            timeout_s=timeout_s,
        )

    try:
        return run(plan.ulimits), ""
    except EngineError as exc:
        if "rlimit" not in str(exc):
            raise
        note = f"the engine refused the ulimits ({exc.message.splitlines()[0][-160:]}); ran without them"
        return run({}), note


def run_in_image(
    image: str,
    options: SuiteOptions,
    *,
    select: str | None,
    shm_override: str | None,
    shm_min_override: int | None,
    gpus: str,
    echo: Any = print,
) -> dict[str, Any]:
    from imagesmith.engine import BindMount, Engine

    engine: ContainerEngine = Engine()
    config = engine.inspect(image)
    if config is None:
        raise ConfigError(
            f"image {image} is not in the Docker engine", hint="build it (imagesmith build) or pull it first"
        )
    labels = dict((config.get("Config") or {}).get("Labels") or {})
    if "io.imagesmith.validate" not in labels:
        echo(f"note: {image} has no io.imagesmith.validate label; trying imagesmith-validate anyway")
    plan = plan_image_run(config, shm_override=shm_override, shm_min_override=shm_min_override)
    opts = SuiteOptions(
        **{
            **json.loads(options.to_json()),
            "shm_min_bytes": plan.shm_min_bytes,
            "shm_min_source": plan.shm_source,
            "target_label": image,
        }
    )
    report_dir = Path(options.report_dir).resolve()
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "report.json").unlink(missing_ok=True)
    gpu_arg: str | None = None
    mode: GpuMode = "auto"
    if gpus != "none":
        if gpus in ("toolkit", "devices"):
            mode = gpus  # type: ignore[assignment]
            gpu_arg = "all"
        elif gpus == "auto":
            gpu_arg = "all" if engine.has_nvidia_runtime() or any(Path("/dev").glob("nvidia[0-9]*")) else None
    argv = inner_argv(opts, select=select)
    echo(
        f"starting {image}: shm {plan.shm_size} ({plan.shm_source}), ulimits "
        f"{','.join(f'{k}={v}' for k, v in plan.ulimits.items())}, GPUs: "
        + ("none visible on this host" if gpu_arg is None else f"all ({mode})")
    )
    echo("$ " + " ".join(shlex.quote(a) for a in argv))
    from imagesmith.errors import EngineError

    try:
        result, ulimit_note = run_with_plan(
            engine,
            image,
            argv,
            plan,
            gpus=gpu_arg,
            gpu_mode=mode,
            mounts=[BindMount(source=str(report_dir), target=REPORT_MOUNT, read_only=False)],
        )
    except EngineError as exc:
        if "imagesmith-validate" in str(exc) and "not found" in str(exc):
            raise ConfigError(
                f"image {image} has no imagesmith-validate on its PATH: it was not built by imagesmith",
                hint="validate an image built by `imagesmith build`, or start a container of it and use "
                "docker://CONTAINER (the suite then runs from here)",
            ) from None
        raise
    if ulimit_note:
        echo(f"warning: {ulimit_note}")
    echo(result.output.rstrip())
    report_json = report_dir / "report.json"
    if not report_json.exists():
        tail = "\n".join(result.output.strip().splitlines()[-15:])
        raise ValidationFailed(
            f"the suite did not run inside {image} (exit code {result.exit_code}); no report was "
            f"written:\n{tail}",
            hint="the image must carry imagesmith-validate (every image imagesmith builds does); for others "
            "start a container and use docker://CONTAINER",
        )
    data: dict[str, Any] = json.loads(report_json.read_text())
    data["target"] = image
    data["container"] = {
        "ulimits": "none (refused by the engine)" if ulimit_note else plan.ulimits,
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 1),
        "shm_size": plan.shm_size,
        "gpus": gpu_arg and mode,
    }
    report_json.write_text(json.dumps(data, indent=2) + "\n")
    return data
