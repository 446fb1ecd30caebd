"""CLI command ``validate``: run the GPU-host acceptance suite against a host, a container or an image.

``imagesmith-validate`` (baked into every image) is the same command with TARGET defaulting to ``local://``.
Exit codes: 0 when the verdict is "passed"; 7 (ValidationFailed) when it is "failed" or "not validated" (no
GPU
visible: a run that could not prove the GPUs is never a pass); 2 for bad flags or targets.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from imagesmith import settings
from imagesmith.commands import epilog
from imagesmith.errors import ConfigError, ValidationFailed
from imagesmith.inputs import is_digits, read_user_file, resolved

#: the largest ssh_config or private key file --ssh-config / --ssh-identity may name (both are a few KiB)
SSH_FILE_MAX_BYTES = 1 << 20

EPILOG = epilog(
    [
        "imagesmith validate --expect-gpu 'H100 80GB' --expect-count 8 --report reports/h100",
        "imagesmith validate ssh://me@gpu-host --nccl-tests /opt/nccl-tests/build",
        "imagesmith validate ghcr.io/me/torch@sha256:<digest> --shm-size 16g",
        "imagesmith validate local:// --soak 10m --report reports/soak",
        "imagesmith-validate (inside an image: TARGET defaults to local://)",
    ],
    [
        "0 = passed",
        "2 = bad flags or TARGET",
        "5 = (IMAGE) no Docker engine, or the image could not start",
        "7 = failed or not validated (no GPU visible: never a pass)",
    ],
)


def _writable_report_dir(path: Path) -> None:
    """The evidence bundle's folder must be one this process can create and write, before any check runs. The
    probe leaves nothing behind: folders it made are removed again (a target that then turns out unreachable
    leaves no empty report folder).
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--report {path}: exists and is not a folder", hint="give a folder for the bundle")
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".imagesmith-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"--report {path}: cannot write the evidence bundle there ({exc.strerror or exc})",
            hint="give a folder you can write to (default: reports/validate-<time>)",
        ) from None
    finally:
        for folder in missing:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()


def parse_duration(text: str, *, what: str) -> float:
    """``10m``, ``90s``, ``1h``, ``1h30m``, ``600`` (seconds) → seconds."""
    t = text.strip().lower()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", t):
        return float(t)
    # each unit at most once, hours before minutes before seconds: "10m10m" or "30m1h" is a typo, not a sum
    number = r"([0-9]+(?:\.[0-9]+)?)\s*"
    m = re.fullmatch(rf"(?:{number}h)?\s*(?:{number}m)?\s*(?:{number}s)?", t, flags=re.ASCII)
    if not t or m is None:
        raise ConfigError(
            f"{what} {text!r}: not a duration",
            hint="give e.g. 10m, 90s, 1h or 1h30m (a bare number is seconds)",
        )
    return sum(float(n) * unit for n, unit in zip(m.groups(), (3600, 60, 1), strict=True) if n is not None)


def _default_report_dir() -> str:
    return str(Path("reports") / time.strftime("validate-%Y%m%d-%H%M%S"))


def validate_command(
    target: str = typer.Argument(
        "local://",
        metavar="TARGET",
        help="local://, docker://CONTAINER, ssh://user@host[:port], or an IMAGE (started with the GPUs).",
    ),
    expect_gpu: str | None = typer.Option(
        None, "--expect-gpu", help='GPU model/memory/form, e.g. "A100 80GB".'
    ),
    expect_count: int | None = typer.Option(
        None, "--expect-count", min=1, max=1024, help="Number of GPUs that must be there (1-1024)."
    ),
    expect_nvlink: bool = typer.Option(
        False, "--expect-nvlink", help="Fail when a GPU pair is not NVLink (NV#)."
    ),
    report: str | None = typer.Option(
        None, "--report", help="Folder for the evidence bundle (default reports/validate-<time>)."
    ),
    shm_min: str | None = typer.Option(
        None,
        "--shm-min",
        help="Least /dev/shm (e.g. 8g). Default: the image's io.imagesmith.shm-min label, else 1g.",
    ),
    shm_size: str | None = typer.Option(
        None, "--shm-size", help="IMAGE only: start the container with this /dev/shm."
    ),
    gpus: str = typer.Option("auto", "--gpus", help="IMAGE only: auto | toolkit | devices | none."),
    python: str = typer.Option("python3", "--python", help="The target's Python that has torch."),
    nccl_tests: str | None = typer.Option(
        None, "--nccl-tests", help="nccl-tests build folder or all_reduce_perf path."
    ),
    nccl_rounds: int = typer.Option(
        3,
        "--nccl-rounds",
        min=1,
        max=100,
        help="Times all_reduce_perf runs: every round must reach the bus-bandwidth floor, the slowest is "
        "judged against the expected figure, and a hung round fails.",
    ),
    nccl_max_bytes: str = typer.Option("1G", "--nccl-max-bytes", help="all_reduce_perf -e."),
    nccl_timeout: int = typer.Option(
        300,
        "--nccl-timeout",
        min=5,
        max=86400,
        help="Seconds before a round counts as hung (5 to 86400: a round is minutes, never a day).",
    ),
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        help="report.json of a good run on the same kind of host: its figures are the expected ones.",
    ),
    baseline_from: str | None = typer.Option(
        None,
        "--baseline-from",
        help="Release index (file, URL, oci://): expect the median of its validated hosts with the same GPU "
        "model, count and link. Verified as pick verifies it ($IMAGESMITH_INDEX_KEY / [release] index_key, "
        "else the key pinned for the source or published beside it).",
    ),
    perf_fail_ratio: float = typer.Option(
        0.80, "--perf-fail-ratio", min=0.01, max=1.5, help="Fail a figure below this × its expected value."
    ),
    perf_warn_ratio: float = typer.Option(
        0.90, "--perf-warn-ratio", min=0.01, max=1.5, help="Warn below this × the expected value."
    ),
    perf_seconds: float = typer.Option(
        0.4, "--perf-seconds", min=0.05, max=30, help="Seconds per bandwidth measure (matmul: 3×)."
    ),
    foreign_memory_max: str = typer.Option(
        "3%",
        "--foreign-memory-max",
        help="Memory other processes may hold on a GPU before the free check fails: a % of the board or a "
        "size (4g); less than that, or any process seen, warns.",
    ),
    soak: str | None = typer.Option(
        None,
        "--soak",
        help="Also load every GPU for this long (10m, 90s, 1h; at least 2m): bf16 matmul, memory copies and, "
        "with 2+ GPUs, NCCL all_reduce, sampled every few seconds; fails on a sustained drop against the "
        "first minute or the expected figures, and on hardware/thermal slowdown or a new Xid.",
    ),
    soak_interval: float = typer.Option(
        5.0, "--soak-interval", min=1, max=20, help="Seconds per soak window (each a point of the series)."
    ),
    soak_fail_ratio: float = typer.Option(
        0.92, "--soak-fail-ratio", min=0.01, max=1.0, help="Fail a soak minute below this × the first minute."
    ),
    soak_warn_ratio: float = typer.Option(
        0.96, "--soak-warn-ratio", min=0.01, max=1.0, help="Warn below this × the first minute."
    ),
    select: str | None = typer.Option(
        None, "-k", "--select", help="pytest -k expression: run only matching checks."
    ),
    ssh_config: str | None = typer.Option(None, "--ssh-config", help="ssh:// only: ssh_config file to use."),
    ssh_identity: str | None = typer.Option(None, "--ssh-identity", help="ssh:// only: private key file."),
    shm_min_source: str | None = typer.Option(None, "--shm-min-source", hidden=True),
    label: str | None = typer.Option(None, "--label", hidden=True),
    sign_key: str | None = typer.Option(
        None,
        "--sign-key",
        help="Private key (imagesmith keygen) that signs the evidence: an in-toto attestation of the image's "
        "digest, written beside report.json; only validation runners hold it. Default: "
        "$IMAGESMITH_SIGNING_KEY (image targets only).",
    ),
    baseline_busbw: float | None = typer.Option(None, "--baseline-busbw", hidden=True),
    baseline_source: str = typer.Option("", "--baseline-source", hidden=True),
    baseline_figure: Annotated[list[str] | None, typer.Option("--baseline-figure", hidden=True)] = None,
    baseline_fleet: str | None = typer.Option(None, "--baseline-fleet", hidden=True),
) -> None:
    """Validate a GPU host or image: GPUs, topology, CUDA, shm, NCCL, DDP, checkpoints; write the evidence."""
    # imported here: pytest and the suite cost ~200 ms that other commands must not pay
    from imagesmith.matrix import SHM_MAX_BYTES
    from imagesmith.validate.context import SuiteOptions
    from imagesmith.validate.parsers import parse_size
    from imagesmith.validate.report import PASSED, verdict_fix
    from imagesmith.validate.runner import load_baseline, run_suite
    from imagesmith.validate.target import parse_target

    if select is not None:
        _check_select(select)
    t = parse_target(target)
    if label is not None and re.search(r"@[A-Za-z0-9][A-Za-z0-9+._-]*:[0-9A-Fa-f]{8,}", label):
        raise ConfigError(
            f"--label {label!r} names a digest: a label is a name for people, never evidence of what was "
            "validated",
            hint="drop the @sha256:… part; to validate an exact digest, pass IMAGE@sha256:… as TARGET",
        )
    signer = _signer(t, sign_key)
    if t.kind != "image" and (shm_size or gpus != "auto"):
        raise ConfigError("--shm-size and --gpus apply only when TARGET is an image")
    if t.kind != "ssh" and (ssh_config or ssh_identity):
        raise ConfigError("--ssh-config and --ssh-identity apply only to ssh:// targets")
    for flag, path in (("--ssh-config", ssh_config), ("--ssh-identity", ssh_identity)):
        if path:  # ssh reads it: a device, a socket or gigabytes would hang or fail there, worded by ssh
            read_user_file(
                path,
                flag,
                hint="give the ssh_config / private key file of the target",
                max_bytes=SSH_FILE_MAX_BYTES,
            )
    if gpus not in ("auto", "toolkit", "devices", "none"):
        raise ConfigError(f"--gpus {gpus!r}: use auto, toolkit, devices or none")
    from imagesmith.validate.context import NCCL_MIN_BYTES as nccl_min

    if parse_size(nccl_max_bytes, what="--nccl-max-bytes") < nccl_min:
        # all_reduce_perf -b 8 -e 0 measures nothing: the bandwidth check would fail on no data
        raise ConfigError(
            f"--nccl-max-bytes {nccl_max_bytes}: below the {nccl_min} bytes all_reduce_perf starts at "
            "(-b), so no size would be measured",
            hint="give the largest message size to measure, e.g. 1G (the default) or 256M",
        )
    shm_min_bytes: int | None = parse_size(shm_min, what="--shm-min") if shm_min else None
    if shm_min_bytes is not None and shm_min_bytes > SHM_MAX_BYTES:
        raise ConfigError(
            f"--shm-min {shm_min}: more than {SHM_MAX_BYTES // 1024**3}g, which no GPU host gives /dev/shm",
            hint="ask for what DataLoader workers and NCCL need (8g–64g on 8-GPU training hosts)",
        )
    env_shm = (settings.get("IMAGESMITH_SHM_MIN_BYTES", "") or "").strip()
    if env_shm and (not is_digits(env_shm) or len(env_shm) > 19):  # "٣" and "²" are not bytes
        raise ConfigError(
            f"IMAGESMITH_SHM_MIN_BYTES={env_shm[:40]!r} is not a number of bytes",
            hint="a whole number of bytes in ASCII digits (the image sets it), or unset it",
        )
    if shm_min_bytes is None and t.kind != "image" and is_digits(env_shm):
        shm_min_bytes, shm_min_source = (
            int(env_shm),
            shm_min_source or "IMAGESMITH_SHM_MIN_BYTES (the image's need)",
        )
    if perf_fail_ratio > perf_warn_ratio:
        raise ConfigError(
            f"--perf-fail-ratio {perf_fail_ratio:g} is above --perf-warn-ratio {perf_warn_ratio:g}",
            hint="the fail band must be at or below the warn band: e.g. 0.8 and 0.9",
        )
    from imagesmith.validate.free import check_limit_spec

    check_limit_spec(foreign_memory_max)
    soak_s = parse_duration(soak, what="--soak") if soak else 0.0
    if soak is not None and soak_s < 120:
        bare = re.fullmatch(r"\s*[0-9]+(\.[0-9]+)?\s*", soak) is not None
        raise ConfigError(
            f"--soak {soak}: shorter than 2 minutes"
            + (
                f" (a bare number is seconds: {soak_s:g} s; for minutes write {soak.strip()}m)"
                if bare
                else ""
            )
            + ": the first minute is the reference the rest is judged against",
            hint="give --soak 2m or longer (10m catches what throttles or a neighbour's load after minutes)",
        )
    if soak_s > 24 * 3600:
        raise ConfigError(f"--soak {soak}: longer than a day", hint="give e.g. --soak 10m or --soak 1h")
    if soak_fail_ratio > soak_warn_ratio:
        raise ConfigError(
            f"--soak-fail-ratio {soak_fail_ratio:g} is above --soak-warn-ratio {soak_warn_ratio:g}",
            hint="the fail band must be at or below the warn band: e.g. 0.92 and 0.96",
        )
    baseline_figures = _figures(baseline_figure or [])
    if baseline is not None:
        found_busbw, baseline_source, baseline_figures = load_baseline(Path(baseline))
        baseline_busbw = found_busbw if found_busbw is not None else baseline_busbw
    fleet, fleet_source = _fleet(baseline_from, baseline_fleet, baseline_source)
    report_dir = report or _default_report_dir()
    _writable_report_dir(Path(report_dir))
    options = SuiteOptions(
        target=t.spec,
        target_label=label or t.label,
        expect_gpu=expect_gpu,
        expect_count=expect_count,
        expect_nvlink=expect_nvlink,
        shm_min_bytes=shm_min_bytes if shm_min_bytes is not None else 1024**3,
        shm_min_source=shm_min_source or ("--shm-min" if shm_min else "imagesmith default (1 GiB)"),
        report_dir=report_dir,
        python=python,
        nccl_tests=nccl_tests or settings.get("NCCL_TESTS_BIN") or None,
        nccl_rounds=nccl_rounds,
        nccl_max_bytes=nccl_max_bytes,
        nccl_timeout_s=nccl_timeout,
        baseline_busbw_gbps=baseline_busbw,
        baseline_source=baseline_source,
        baseline_figures=baseline_figures,
        fleet=fleet,
        fleet_source=fleet_source,
        perf_fail_ratio=perf_fail_ratio,
        perf_warn_ratio=perf_warn_ratio,
        perf_seconds=perf_seconds,
        foreign_memory_max=foreign_memory_max,
        soak_s=soak_s,
        soak_interval_s=soak_interval,
        soak_fail_ratio=soak_fail_ratio,
        soak_warn_ratio=soak_warn_ratio,
        ssh_config=str(resolved(ssh_config)) if ssh_config else None,
        ssh_identity_file=str(resolved(ssh_identity)) if ssh_identity else None,
    )
    data: dict[str, Any]
    subject: tuple[str, str, str] | None = None
    if signer is not None:  # before the run: an image that cannot be attested is refused up front
        subject = _image_subject(t.spec)
    from imagesmith.attestation import ATTESTATION_FILE

    # an attestation of an earlier run never stands beside this run's report (release reads the pair)
    (Path(report_dir) / ATTESTATION_FILE).unlink(missing_ok=True)
    if t.kind == "image":
        from imagesmith.validate.container import run_in_image

        data = run_in_image(
            t.spec,
            options,
            select=select,
            shm_override=shm_size,
            shm_min_override=shm_min_bytes,
            gpus=gpus,
            echo=typer.echo,
            subject=(subject[1], subject[2]) if subject is not None else None,
        )
    else:
        data = run_suite(options, select=select)
    where = Path(options.report_dir) / "report.md"
    if signer is not None and subject is not None:
        _attest(t.spec, subject, data, Path(options.report_dir), signer)
    from imagesmith.validate.record import soak_sentence_of

    sentence = soak_sentence_of(data.get("checks") or [])
    if sentence:
        typer.echo(f"soak: {sentence}")
    typer.echo(f"verdict: {data['verdict']} — {data['verdict_reason']} (report: {where})")
    if data["verdict"] != PASSED:
        raise ValidationFailed(
            f"validation of {options.target_label} {data['verdict']}: {data['verdict_reason']}",
            hint=f"{verdict_fix(data['verdict'], str(data.get('verdict_cause') or ''))} (report: {where})",
        )


def _signer(t: Any, sign_key: str | None) -> Any:
    """The signing key of this run (--sign-key, else $IMAGESMITH_SIGNING_KEY for image targets), loaded
    before anything runs; None when the evidence is not to be signed."""
    from imagesmith.validate.target import Target

    assert isinstance(t, Target)
    env_key = (settings.get("IMAGESMITH_SIGNING_KEY") or "").strip()
    if sign_key is None and not env_key:
        return None
    if t.kind != "image":
        if sign_key is not None:
            raise ConfigError(
                f"--sign-key: {t.label} is a host, not an image: only an image has a digest to attest",
                hint="validate the image by digest (imagesmith validate REPO@sha256:… --sign-key KEY), or "
                "drop --sign-key",
            )
        typer.echo(
            f"note: {t.label} is not an image: the report is not signed ($IMAGESMITH_SIGNING_KEY unused)"
        )
        return None
    from imagesmith import signing

    return signing.load_signing_key(Path(sign_key or env_key))


def _image_subject(image: str) -> tuple[str, str, str]:
    """(repository, digest, image id) the engine reports for *image* (attestation.image_subject)."""
    from imagesmith.attestation import image_subject
    from imagesmith.engine import Engine
    from imagesmith.errors import SignatureError

    inspect = Engine().inspect(image)
    if inspect is None:
        raise ConfigError(
            f"image {image} is not in the Docker engine", hint="pull it first: docker pull IMAGE@sha256:…"
        )
    try:
        repo, digest = image_subject(inspect, image)
    except SignatureError as exc:  # a flag/target problem here, not a refused release
        raise ConfigError(exc.message, hint=exc.hint) from None
    return repo, digest, str(inspect.get("Id") or "")


def _attest(
    image: str, subject: tuple[str, str, str], data: dict[str, Any], report_dir: Path, key: Any
) -> None:
    """Sign the report the host wrote (*data*, what ``run_in_image`` returned: never a file the container
    wrote), redacted as it is attached in registries, as an attestation of the digest the engine reported
    before the run (and still reports after it: the same image id, the one the host ran), and write it
    beside the report."""
    from imagesmith.attestation import ATTESTATION_FILE, sign_validation
    from imagesmith.validate.redact import redact_report

    repo, digest, image_id = subject
    after = _image_subject(image)
    ran = str((data.get("container") or {}).get("image_id") or "")
    if after != subject or ran != image_id:
        raise ConfigError(
            f"{image} changed while it was validated (engine digest/id {digest} {image_id} → {after[1]} "
            f"{after[2]}; the container ran {ran or 'an unknown image'}): nothing signed",
            hint="validate the image by digest (IMAGE@sha256:…), which cannot move",
        )
    if data.get("target") != image or (data.get("image") or {}).get("digest") != digest:
        # run_in_image writes both from what the host ran: a mismatch is a bug, and is never signed
        raise ConfigError(
            f"the host's report names {data.get('target')!r} / {data.get('image')!r}, not {image} / "
            f"{digest}: nothing signed",
            hint="report this as a bug of imagesmith validate",
        )
    # exactly what the host wrote to report.json (the same serialisation), then redacted
    written = json.loads(json.dumps(data, default=str))
    envelope = sign_validation(redact_report(written), repository=repo, digest=digest, key=key)
    out = report_dir / ATTESTATION_FILE
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_bytes(envelope + b"\n")
    tmp.replace(out)
    typer.echo(f"signed: {out} (attests {repo}@{digest}; key {key.key_id[:16]})")


def _fleet(index: str | None, passed: str | None, source: str) -> tuple[list[dict[str, Any]], str]:
    """``--baseline-from INDEX`` → the fleet groups; ``--baseline-fleet JSON`` is how ``validate IMAGE`` hands
    them to the suite inside the image."""
    if passed:
        try:
            groups = json.loads(passed)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--baseline-fleet: not JSON ({exc})", hint="use --baseline-from INDEX"
            ) from None
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise ConfigError(
                "--baseline-fleet: expected a JSON list of groups", hint="use --baseline-from INDEX"
            )
        return groups, source
    if not index:
        return [], ""
    from imagesmith.pick import fetch_index
    from imagesmith.validate.expected import fleet_groups

    if index.startswith(("http://", "oci+http://")):
        raise ConfigError(
            f"--baseline-from {index}: plain HTTP (anyone on the path can change the expected figures)",
            hint="use an https:// or oci:// source, or download the index (imagesmith index SRC --insecure "
            "--json > index.json) and pass the file",
        )
    from imagesmith.commands.release import _index_trust
    from imagesmith.errors import IndexTrustError

    # the figures of validated hosts are the expected values this run's performance checks pass or fail
    # against (before imagesmith/data/perf.toml): an index someone who can push to the registry rewrote would
    # let a throttled host pass (figures lowered) or fail every run (raised). Verified as pick verifies it:
    # the key (or fingerprint, issue 34) of $IMAGESMITH_INDEX_KEY / [release] index_key or INDEX#sha256:…,
    # else the key pinned for the source; never a first use (no --trust-first-use here)
    from imagesmith.indextrust import reading_as

    try:
        with reading_as("--baseline-from"):  # its errors name the flag the user gave
            read = fetch_index(
                index, trust=_index_trust(None, False), note=lambda line: typer.echo(line, err=True)
            )
    except IndexTrustError as exc:
        raise exc.replace(
            hint="name the publisher's index key by its fingerprint (--baseline-from SRC#sha256:<fp>, or "
            'once: [release] index_key = "sha256:<fp>" in ~/.config/imagesmith/config.toml or '
            "$IMAGESMITH_INDEX_KEY; its release prints it), or give the expected figures as --baseline "
            "REPORT.json",
        ) from None
    groups = fleet_groups(read)
    if not groups:
        raise ConfigError(
            f"--baseline-from {index}: no validated host in it recorded performance figures",
            hint="release images with reports of this imagesmith version (it records the figures), or use "
            "--baseline REPORT.json",
        )
    return groups, index


def _figures(pairs: list[str]) -> dict[str, float]:
    """``--baseline-figure NAME=VALUE``: how ``validate IMAGE`` hands a baseline to the suite in the image."""
    from imagesmith.validate.expected import FIGURES

    out: dict[str, float] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if name not in FIGURES or not number > 0:
            raise ConfigError(
                f"--baseline-figure {pair!r}: expected NAME=VALUE with NAME one of {', '.join(FIGURES)}",
                hint="e.g. --baseline-figure hbm_copy_gbps=4258",
            )
        out[name] = number
    return out


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("validate", epilog=EPILOG)(validate_command)


def _check_select(select: str) -> None:
    """``-k/--select`` is a pytest ``-k`` expression: one that pytest cannot parse is a bad flag (exit 2,
    naming it), found before any target is touched — not "the suite could not run" (exit 7)."""
    try:
        from _pytest.mark.expression import Expression
    except ImportError:  # pytest runs the suite; without it the runner says so
        return
    try:
        Expression.compile(select)
    except SyntaxError as exc:
        raise ConfigError(
            f"-k/--select {select[:80]!r}: not a pytest -k expression ({exc.msg})",
            hint="give check names joined by and/or/not with balanced parentheses, e.g. -k 'gpu and not "
            "nccl'",
        ) from None
