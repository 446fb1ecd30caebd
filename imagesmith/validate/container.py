"""``imagesmith validate IMAGE``: start the image with the GPUs and its shm/ulimit needs, run the baked-in
suite (``imagesmith-validate local://``) inside, and collect the bundle.

The image under test is not trusted with the report folder: the container writes into an empty scratch folder
of its own; the host copies out only regular files (opened with ``O_NOFOLLOW``, size-capped, top level only,
never a symbolic link, folder or device), reads the suite's ``report.json`` as a *claim*, and writes
``report.json`` and ``report.md`` itself: the verdict is recomputed from the claimed checks and from what the
host knows (which image it ran, whether it gave the container GPUs, what the container left behind).

All engine access goes through :class:`imagesmith.engine.Engine` (``run_container`` always removes the
container;
GPUs through ``--gpus`` where the NVIDIA container toolkit exists, else device nodes + read-only driver
mounts).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesmith.errors import ConfigError, ValidationFailed
from imagesmith.inputs import is_digits, resolved
from imagesmith.validate.context import MULTICAST_OFF_ENV, SuiteOptions
from imagesmith.validate.parsers import parse_size

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

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


#: what the host copies out of the container's scratch folder: plain names at its top level only
SCRATCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: the largest file and the most bytes and files taken from a container's scratch folder
SCRATCH_MAX_FILE_BYTES = 64 * 1024**2
SCRATCH_MAX_TOTAL_BYTES = 256 * 1024**2
SCRATCH_MAX_FILES = 256
#: the files the host writes itself (the suite's report.json is read as a claim, its report.md dropped)
HOST_WRITTEN = ("report.json", "report.md")
#: only the host signs (``validate --sign-key``; imagesmith.attestation.ATTESTATION_FILE, named here because
#: this stage does not import the release stage): one left in the scratch folder is refused, and one left in
#: the report folder by an earlier run is removed before the run, so it never stands beside a new report
HOST_SIGNED = "attestation.dsse.json"


@dataclass(frozen=True, kw_only=True)
class ScratchFiles:
    """What a container left in its scratch folder: the regular files taken (name → bytes), and one
    ``name: why`` for everything refused."""

    files: Mapping[str, bytes]
    refused: tuple[str, ...]


def _kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link (not followed)"
    if stat.S_ISDIR(mode):
        return "a folder (only top-level files are taken)"
    return "not a regular file"


def read_scratch(
    scratch: Path,
    *,
    max_file_bytes: int = SCRATCH_MAX_FILE_BYTES,
    max_total_bytes: int = SCRATCH_MAX_TOTAL_BYTES,
    max_files: int = SCRATCH_MAX_FILES,
) -> ScratchFiles:
    """The regular files at the top of *scratch*, each opened with ``O_NOFOLLOW`` (a symbolic link the
    container planted is never followed, not even when it was swapped in after the listing) and read up to
    *max_file_bytes*; everything else is refused with its reason."""
    files: dict[str, bytes] = {}
    refused: list[str] = []
    total = 0
    with os.scandir(scratch) as entries:
        listed = sorted(entries, key=lambda e: e.name)
    for entry in listed:
        name = entry.name
        if not SCRATCH_NAME.fullmatch(name):
            refused.append(f"{name!r}: not a plain file name")
            continue
        if len(files) >= max_files:
            refused.append(f"{name}: more than {max_files} files")
            continue
        mode = entry.stat(follow_symlinks=False).st_mode
        if not stat.S_ISREG(mode):
            refused.append(f"{name}: {_kind_of(mode)}")
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            refused.append(f"{name}: cannot open it without following links ({exc.strerror})")
            continue
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                refused.append(f"{name}: {_kind_of(st.st_mode)}")
                continue
            data = f.read(max_file_bytes + 1)
        if len(data) > max_file_bytes:
            refused.append(f"{name}: larger than {max_file_bytes} bytes")
            continue
        if total + len(data) > max_total_bytes:
            refused.append(f"{name}: the files together pass {max_total_bytes} bytes")
            continue
        total += len(data)
        files[name] = data
    return ScratchFiles(files=files, refused=tuple(refused))


def write_report_file(folder: Path, name: str, data: bytes) -> None:
    """Write *name* in *folder* without following a link that may stand there: a new file (``O_EXCL``,
    ``O_NOFOLLOW``) renamed over the old name, so a symbolic link at that name is replaced, not written
    through."""
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(folder / name)


def host_report(
    claim: dict[str, Any],
    *,
    image: str,
    image_id: str | None,
    options: SuiteOptions,
    refused: Sequence[str],
    copied: Sequence[str],
    gpus_given: bool,
    selected: bool = False,
    container: dict[str, Any],
    image_digest: str | None = None,
) -> dict[str, Any]:
    """The report the host writes from the suite's *claim*: target, options and logs are the host's; the
    verdict is recomputed from the claimed checks and capped by what the host knows. Whatever the claim says
    of the image (a digest, a verdict) is kept only as ``suite_claim``; ``image.digest`` is written only from
    *image_digest*, the digest the engine reported for the image the host ran (``validate --sign-key``: the
    attestation's subject)."""
    from imagesmith.validate import report as r

    schema = claim.get("schema", 1)
    checks = r.outcomes_of(claim.get("checks") or [], schema if isinstance(schema, int) else 1)
    verdict, why, cause = r.verdict_of(checks)
    warnings = [w for c in checks for w in c.warnings]
    if verdict == r.PASSED and not gpus_given:
        verdict, why, cause = r.NOT_VALIDATED, "the host gave the container no GPU", r.CAUSE_NO_GPUS_GIVEN
    if verdict == r.PASSED and selected:
        verdict, why, cause = r.NOT_VALIDATED, "only the checks chosen with -k ran", r.CAUSE_LEFT_OUT
    if refused:
        verdict, cause = r.FAILED, r.CAUSE_REFUSED
        why = f"the image left {len(refused)} thing(s) in its scratch folder the host refused: " + "; ".join(
            refused[:5]
        )
    claimed = (str(claim.get("verdict")), str(claim.get("verdict_reason") or ""))
    claimed_cause = claim.get("verdict_cause")
    # the claim can only lower the verdict (a suite error, checks it knows were left out), never raise it
    rank = {r.FAILED: 0, r.NOT_VALIDATED: 1, r.PASSED: 2}
    if rank.get(claimed[0], 0) < rank[verdict]:
        verdict, why = claimed[0] if claimed[0] in rank else r.FAILED, claimed[1] or "the suite said so"
        cause = (
            claimed_cause if claimed_cause in r.CAUSES else (r.CAUSE_FAILED if verdict == r.FAILED else "")
        )
    if claimed[0] != verdict:
        warnings.append(
            f"the suite inside the image claimed {claimed[0]!r}; the host's verdict is {verdict!r}"
        )
    report: dict[str, Any] = {
        "schema": claim.get("schema", 2),
        "verdict": verdict,
        "verdict_reason": why,
        "verdict_cause": cause,
        "target": image,
        "started": str(claim.get("started") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
        "duration_s": claim.get("duration_s", container.get("duration_s", 0.0)),
        "options": options.recorded(),
        "gpus": claim.get("gpus") or [],
        "checks": [asdict(c) for c in checks],
        "warnings": warnings,
        "topology_matrix": claim.get("topology_matrix"),
        "plot": claim.get("plot", "skipped: no nccl-tests rounds ran"),
        "logs": sorted(n for n in copied if n not in HOST_WRITTEN),
        "container": {**container, "image_id": image_id, "refused_files": list(refused)},
        "suite_claim": {"verdict": claimed[0], "verdict_reason": claimed[1]},
    }
    if image_digest is not None:
        report["image"] = {"digest": image_digest}
    return report


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
    elif is_digits(labels.get("io.imagesmith.shm-min-bytes", "")):
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
    # a listing file's promises; the --expect-* shorthands alone travel as those flags (an image built by an
    # older imagesmith knows no --listing-json)
    if any(not str(o).startswith("--") for o in (options.listing.get("origin") or {}).values()):
        argv += ["--listing-json", json.dumps(options.listing, separators=(",", ":"))]
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
        ("--soak", options.soak_s, defaults.soak_s),
        ("--soak-interval", options.soak_interval_s, defaults.soak_interval_s),
        ("--soak-fail-ratio", options.soak_fail_ratio, defaults.soak_fail_ratio),
        ("--soak-warn-ratio", options.soak_warn_ratio, defaults.soak_warn_ratio),
    ):
        if value != default:
            argv += [flag, f"{value:g}"]
    if options.dcgm_level != defaults.dcgm_level:
        argv += ["--dcgm-level", str(options.dcgm_level)]
    if options.checkpoint_bytes != defaults.checkpoint_bytes:
        argv += ["--checkpoint-size", str(options.checkpoint_bytes)]
    if options.foreign_memory_max != defaults.foreign_memory_max:
        argv += ["--foreign-memory-max", options.foreign_memory_max]
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
        if "rlimit" not in (exc.said or ""):  # the engine's own words
            raise
        note = f"the engine refused the ulimits ({exc.message.splitlines()[0][-160:]}); ran without them"
        return run({}), note


def _inspected(engine: ContainerEngine, image: str, subject: tuple[str, str] | None) -> dict[str, Any]:
    """The engine's record of *image*; with *subject* (digest, image id) it must still be that image."""
    config = engine.inspect(image)
    if config is None:
        raise ConfigError(
            f"image {image} is not in the Docker engine", hint="build it (imagesmith build) or pull it first"
        )
    if subject is not None and str(config.get("Id") or "") != subject[1]:
        raise ConfigError(
            f"{image} is image {config.get('Id')} now, not {subject[1]} whose digest {subject[0]} is to be "
            "attested: it moved before the run; nothing ran",
            hint="validate the image by digest (IMAGE@sha256:…), which cannot move",
        )
    return config


def _fresh_report_dir(options: SuiteOptions) -> Path:
    """The report folder, made, with nothing left in it of what the host writes or signs."""
    report_dir = resolved(options.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    for name in (*HOST_WRITTEN, HOST_SIGNED):
        (report_dir / name).unlink(missing_ok=True)
    return report_dir


def _gpu_choice(gpus: str, engine: ContainerEngine) -> tuple[str | None, GpuMode]:
    """(the engine's GPU argument, how GPUs are given) for ``--gpus`` *gpus*: none gives none; toolkit and
    devices give all that way; auto gives all only where the host has the NVIDIA runtime or device nodes."""
    if gpus in ("toolkit", "devices"):
        return "all", gpus  # type: ignore[return-value]
    if gpus == "auto" and (engine.has_nvidia_runtime() or any(Path("/dev").glob("nvidia[0-9]*"))):
        return "all", "auto"
    return None, "auto"


def _run_suite(
    engine: ContainerEngine,
    image: str,
    argv: Sequence[str],
    plan: ImageRunPlan,
    *,
    gpu_arg: str | None,
    mode: GpuMode,
) -> tuple[RunResult, str, ScratchFiles]:
    """Run the suite in a container of *image* that writes only to an empty scratch folder of ours (never the
    report folder); return the run, the ulimit note and what the container left there."""
    from imagesmith.engine import BindMount
    from imagesmith.errors import EngineError

    scratch = Path(tempfile.mkdtemp(prefix="imagesmith-scratch-"))
    try:
        try:
            result, ulimit_note = run_with_plan(
                engine,
                image,
                argv,
                plan,
                gpus=gpu_arg,
                gpu_mode=mode,
                mounts=[BindMount(source=str(scratch), target=REPORT_MOUNT, read_only=False)],
            )
        except EngineError as exc:
            said = exc.said or ""  # the engine's own words
            if "imagesmith-validate" in said and "not found" in said:
                raise ConfigError(
                    f"image {image} has no imagesmith-validate on its PATH: it was not built by imagesmith",
                    hint="validate an image built by `imagesmith build`, or start a container of it and use "
                    "docker://CONTAINER (the suite then runs from here)",
                ) from None
            raise
        return result, ulimit_note, read_scratch(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _unsigned(taken: ScratchFiles) -> ScratchFiles:
    """*taken* without a signature file: the suite never signs, so an image that plants one is hostile (it is
    refused, with why)."""
    if HOST_SIGNED not in taken.files:
        return taken
    return ScratchFiles(
        files={k: v for k, v in taken.files.items() if k != HOST_SIGNED},
        refused=(*taken.refused, f"{HOST_SIGNED}: only the host signs evidence; the suite never writes one"),
    )


def _claim_bytes(taken: ScratchFiles, result: RunResult, image: str) -> bytes:
    """The suite's report.json from the scratch folder; none means the suite did not run (the output's tail
    says why)."""
    claim_bytes = taken.files.get("report.json")
    if claim_bytes is None:
        tail = "\n".join(result.output.strip().splitlines()[-15:])
        extra = f" (refused: {'; '.join(taken.refused)})" if taken.refused else ""
        raise ValidationFailed(
            f"the suite did not run inside {image} (exit code {result.exit_code}); it left no regular "
            f"report.json{extra}:\n{tail}",
            hint="the image must carry imagesmith-validate (every image imagesmith builds does); for others "
            "start a container and use docker://CONTAINER",
        )
    return claim_bytes


def run_in_image(
    image: str,
    options: SuiteOptions,
    *,
    select: str | None,
    shm_override: str | None,
    shm_min_override: int | None,
    gpus: str,
    echo: Any = print,
    engine: ContainerEngine | None = None,
    subject: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Run the suite in a container of *image* and write the host's report (:func:`host_report`).

    *subject*: (digest, image id) the engine reported for *image* before the run (``validate --sign-key``):
    the image about to run must have that id, and the digest is recorded as the report's ``image.digest``."""
    from imagesmith.engine import Engine

    if engine is None:
        engine = Engine()
    config = _inspected(engine, image, subject)
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
    report_dir = _fresh_report_dir(options)
    gpu_arg, mode = _gpu_choice(gpus, engine)
    argv = inner_argv(opts, select=select)
    echo(
        f"starting {image}: shm {plan.shm_size} ({plan.shm_source}), ulimits "
        f"{','.join(f'{k}={v}' for k, v in plan.ulimits.items())}, GPUs: "
        + ("none visible on this host" if gpu_arg is None else f"all ({mode})")
    )
    echo("$ " + " ".join(shlex.quote(a) for a in argv))
    result, ulimit_note, taken = _run_suite(engine, image, argv, plan, gpu_arg=gpu_arg, mode=mode)
    taken = _unsigned(taken)
    if ulimit_note:
        echo(f"warning: {ulimit_note}")
    echo(result.output.rstrip())
    for why in taken.refused:
        echo(f"warning: refused from the container's scratch folder: {why}")
    claim = _read_claim(_claim_bytes(taken, result, image), image=image)
    for name, body in taken.files.items():
        if name not in HOST_WRITTEN:
            write_report_file(report_dir, name, body)
    data = host_report(
        claim,
        image=image,
        image_id=str(config.get("Id") or "") or None,
        options=opts,
        refused=taken.refused,
        copied=list(taken.files),
        gpus_given=gpu_arg is not None,
        selected=bool(select),
        container={
            "ulimits": "none (refused by the engine)" if ulimit_note else plan.ulimits,
            "exit_code": result.exit_code,
            "duration_s": round(result.duration_s, 1),
            "shm_size": plan.shm_size,
            "gpus": gpu_arg and mode,
        },
        image_digest=subject[0] if subject is not None else None,
    )
    write_report_file(report_dir, "report.json", (json.dumps(data, indent=2, default=str) + "\n").encode())
    write_report_file(report_dir, "report.md", _markdown(data).encode())
    return data


def _read_claim(body: bytes, *, image: str) -> dict[str, Any]:
    """The suite's report.json, checked against the report schema; a claim that does not fit fails."""
    from imagesmith.errors import ImagesmithError
    from imagesmith.validate.record import ValidationReport

    source = f"the report.json the suite inside {image} wrote"
    try:
        ValidationReport.parse(body, source=source)
    except ImagesmithError as exc:
        raise ValidationFailed(
            f"{exc.message}",
            hint="validate an image built by `imagesmith build` (its suite writes a valid report)",
        ) from None
    data: dict[str, Any] = json.loads(body)
    return data


def _markdown(report: dict[str, Any]) -> str:
    from imagesmith.validate.report import outcomes_of, render_markdown

    checks = outcomes_of(report["checks"], report.get("schema", 1))
    try:
        return render_markdown(report, checks, None)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # figures of a claim it cannot lay out
        return (
            f"# Validation: {report['verdict'].upper()}\n\n**Verdict: {report['verdict']}** — "
            f"{report['verdict_reason']}.\n\n- target: `{report['target']}`\n\n(the figures the suite "
            f"claimed could not be laid out: {exc!r}; read report.json)\n"
        )
