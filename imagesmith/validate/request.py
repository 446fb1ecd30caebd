"""The validate command's layer between its flags and the suite: one typed request (:class:`ValidateRequest`,
what ``imagesmith validate`` was given), the rules of the flags in one place (:func:`prepare`: every bad
combination is one ``ConfigError`` naming the flag, before anything runs), the run (:func:`validate`), and one
typed result (:class:`ValidateResult`) the command prints. What only the command can read — the expected
figures of a release index (``--baseline-from``, through pick's trusted fetch) — it hands in as a reader
(:data:`FleetReader`), called where the rules reach it.

Nothing heavy is imported at module level: ``imagesmith --help`` loads this; pytest and the suite are imported
when a run starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesmith import atomicio, settings
from imagesmith.errors import ConfigError
from imagesmith.inputs import is_digits, read_user_file, resolved

if TYPE_CHECKING:
    from imagesmith.validate.context import SuiteOptions
    from imagesmith.validate.target import Target

#: the largest ssh_config or private key file --ssh-config / --ssh-identity may name (both are a few KiB)
SSH_FILE_MAX_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class ValidateRequest:
    """What ``imagesmith validate`` was given: its flags as typed values (the defaults are the flags'), and
    the fleet figures of ``--baseline-from`` the command read (``fleet``, ``fleet_source``)."""

    target: str = "local://"
    expect_gpu: str | None = None
    expect_count: int | None = None
    expect_nvlink: bool = False
    listing: str | None = None
    listing_json: str | None = None
    checkpoint_size: str = "1g"
    dcgm_level: int | None = None
    report: str | None = None
    shm_min: str | None = None
    shm_size: str | None = None
    gpus: str = "auto"
    python: str = "python3"
    nccl_tests: str | None = None
    nccl_rounds: int = 3
    nccl_max_bytes: str = "1G"
    nccl_timeout: int = 300
    baseline: str | None = None
    perf_fail_ratio: float = 0.80
    perf_warn_ratio: float = 0.90
    perf_seconds: float = 0.4
    foreign_memory_max: str = "3%"
    soak: str | None = None
    soak_interval: float = 5.0
    soak_fail_ratio: float = 0.92
    soak_warn_ratio: float = 0.96
    select: str | None = None
    ssh_config: str | None = None
    ssh_identity: str | None = None
    shm_min_source: str | None = None
    label: str | None = None
    sign_key: str | None = None
    baseline_busbw: float | None = None
    baseline_source: str = ""
    baseline_figure: Sequence[str] = ()
    baseline_from: str | None = None
    baseline_fleet: str | None = None
    #: several nodes: the cluster run signs its own report (imagesmith.commands.cluster), not this request
    cluster: bool = False


def slurm_wanted(slurm: bool, targets: Sequence[str], env: Mapping[str, str] | None = None) -> bool:
    """``--slurm``, or implied: no TARGET and no ``--nodes`` inside a Slurm allocation of two or more nodes
    (``SLURM_JOB_NODELIST``, ``SLURM_JOB_NUM_NODES``); ``local://`` validates only this node there."""
    if slurm or targets:
        return slurm
    count = settings.get("SLURM_JOB_NUM_NODES", env=env) or ""
    return bool(settings.get("SLURM_JOB_NODELIST", env=env)) and is_digits(count) and int(count) >= 2


def cluster_rules(collective: str, *, slurm: bool, ddp: str = "auto") -> None:
    """The rules of a cluster run's launch flags (``imagesmith.commands.cluster.several`` applies them before
    :func:`prepare`: they decide whether this is a cluster run): ``--collective`` one of its modes; ``srun``
    only where the nodes are the allocation's (*slurm*: ``--slurm``, given or implied)."""
    from imagesmith.validate.clustercollective import MODES

    if collective not in MODES:
        raise ConfigError(
            f"--collective {collective!r}: use one of {', '.join(MODES)}",
            hint="auto runs it where the nodes have GPUs (srun inside a Slurm allocation, else mpirun)",
            field="--collective",
        )
    if collective == "srun" and not slurm:
        raise ConfigError(
            "--collective srun: srun launches on the nodes of a Slurm allocation, and these nodes were named "
            "by hand",
            hint="run inside the allocation with --slurm (salloc -N 2 imagesmith validate --slurm), or use "
            "--collective mpirun over ssh",
            field="--collective",
        )
    from imagesmith.validate.clusterddp import MODES as DDP_MODES

    if ddp not in DDP_MODES:
        raise ConfigError(
            f"--ddp {ddp!r}: use one of {', '.join(DDP_MODES)}",
            hint="auto runs it where the nodes have GPUs (srun inside a Slurm allocation, else torchrun over "
            "ssh)",
            field="--ddp",
        )
    if ddp == "srun" and not slurm:
        raise ConfigError(
            "--ddp srun: srun launches on the nodes of a Slurm allocation, and these nodes were named by "
            "hand",
            hint="run inside the allocation with --slurm, or use --ddp torchrun over ssh",
            field="--ddp",
        )


#: ``--baseline-from INDEX`` / ``--baseline-fleet JSON`` (and the baseline's source) → the fleet groups and
#: their source: read by the command (pick's trusted fetch), handed in
FleetReader = Callable[[str | None, str | None, str], tuple[list[dict[str, Any]], str]]


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A request the flag rules accepted: the target, the suite's options, and the signing of the evidence."""

    target: Target
    options: SuiteOptions
    #: the key that signs the evidence, and the engine's (repository, digest, image id) of the image
    signer: Any = None
    subject: tuple[str, str, str] | None = None
    shm_min_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class ValidateResult:
    """What a run found: the verdict and why, the report the host wrote, the soak's sentence."""

    target_label: str
    verdict: str
    reason: str
    cause: str
    report: Path  # report.md of the evidence bundle
    soak_sentence: str = ""
    data: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def passed(self) -> bool:
        from imagesmith.validate.report import PASSED

        return self.verdict == PASSED


def prepare(
    request: ValidateRequest, *, read_fleet: FleetReader, echo: Callable[[str], Any] = lambda _: None
) -> Prepared:
    """The rules of the flags, in one place: every bad value or combination is one ConfigError naming the flag
    (exit 2), found before any check runs, in this order — the target and its flags, NCCL and /dev/shm, the
    performance and soak bands, the expected figures, the report folder —; then the suite's options."""
    from imagesmith.validate.context import SuiteOptions

    r = request
    t, signer = _target_rules(r, echo)
    shm_min_bytes, shm_min_source = _shm_rules(r, t)
    soak_s = _band_rules(r)
    baseline_busbw, baseline_source, baseline_figures, fleet, fleet_source = _expected(r, read_fleet)
    promised = _listing(r.listing, r.listing_json, r.expect_gpu, r.expect_count, r.expect_nvlink)
    checkpoint_bytes = _checkpoint_bytes(r.checkpoint_size)
    report_dir = r.report or _default_report_dir()
    _writable_report_dir(Path(report_dir))
    options = SuiteOptions(
        target=t.spec,
        target_label=r.label or t.label,
        expect_gpu=promised.gpu_model,
        expect_count=promised.gpu_count,
        expect_nvlink=promised.interconnect == "nvlink",
        listing=promised.to_json() if not promised.empty else {},
        checkpoint_bytes=checkpoint_bytes,
        dcgm_level=r.dcgm_level if r.dcgm_level is not None else -1,
        shm_min_bytes=shm_min_bytes if shm_min_bytes is not None else 1024**3,
        shm_min_source=shm_min_source or ("--shm-min" if r.shm_min else "imagesmith default (1 GiB)"),
        report_dir=report_dir,
        python=r.python,
        nccl_tests=r.nccl_tests or settings.get("NCCL_TESTS_BIN") or None,
        nccl_rounds=r.nccl_rounds,
        nccl_max_bytes=r.nccl_max_bytes,
        nccl_timeout_s=r.nccl_timeout,
        baseline_busbw_gbps=baseline_busbw,
        baseline_source=baseline_source,
        baseline_figures=baseline_figures,
        fleet=fleet,
        fleet_source=fleet_source,
        perf_fail_ratio=r.perf_fail_ratio,
        perf_warn_ratio=r.perf_warn_ratio,
        perf_seconds=r.perf_seconds,
        foreign_memory_max=r.foreign_memory_max,
        soak_s=soak_s,
        soak_interval_s=r.soak_interval,
        soak_fail_ratio=r.soak_fail_ratio,
        soak_warn_ratio=r.soak_warn_ratio,
        ssh_config=str(resolved(r.ssh_config)) if r.ssh_config else None,
        ssh_identity_file=str(resolved(r.ssh_identity)) if r.ssh_identity else None,
    )
    subject: tuple[str, str, str] | None = None
    if signer is not None:  # before the run: an image that cannot be attested is refused up front
        subject = _image_subject(t.spec)
    return Prepared(target=t, options=options, signer=signer, subject=subject, shm_min_bytes=shm_min_bytes)


def _listing(
    path: str | None,
    as_json: str | None,
    expect_gpu: str | None,
    expect_count: int | None,
    expect_nvlink: bool,
) -> Any:
    """The promises of ``--listing FILE`` with the ``--expect-*`` shorthands folded in (one Listing: the
    flags and the file take the same path); ``--listing-json`` is the host's listing passed into an image."""
    from imagesmith.validate.listing import Listing, load_listing, with_flags

    if as_json is not None:
        try:
            base = Listing.from_json(json.loads(as_json))
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"--listing-json: not a listing ({exc})", hint="let imagesmith pass it"
            ) from None
    else:
        base = load_listing(path) if path else Listing()
    return with_flags(base, expect_gpu=expect_gpu, expect_count=expect_count, expect_nvlink=expect_nvlink)


def _checkpoint_bytes(checkpoint_size: str) -> int:
    """--checkpoint-size: what the storage check writes, from 16m to 64g."""
    from imagesmith.validate.parsers import parse_size

    checkpoint_bytes = parse_size(checkpoint_size, what="--checkpoint-size")
    if not 16 * 2**20 <= checkpoint_bytes <= 64 * 2**30:
        raise ConfigError(
            f"--checkpoint-size {checkpoint_size}: from 16m to 64g",
            hint="give the size of one checkpoint of your job, e.g. 8g (default 1g)",
        )
    return checkpoint_bytes


def _target_rules(r: ValidateRequest, echo: Callable[[str], Any]) -> tuple[Target, Any]:
    """-k, TARGET, --label, the signing key, and the flags that apply to one kind of target only."""
    from imagesmith.validate.target import parse_target

    if r.select is not None:
        check_select(r.select)
    t = parse_target(r.target)
    if r.label is not None and re.search(r"@[A-Za-z0-9][A-Za-z0-9+._-]*:[0-9A-Fa-f]{8,}", r.label):
        raise ConfigError(
            f"--label {r.label!r} names a digest: a label is a name for people, never evidence of what was "
            "validated",
            hint="drop the @sha256:… part; to validate an exact digest, pass IMAGE@sha256:… as TARGET",
        )
    signer = None if r.cluster else _signer(t, r.sign_key, echo)
    if t.kind != "image" and (r.shm_size or r.gpus != "auto"):
        raise ConfigError("--shm-size and --gpus apply only when TARGET is an image")
    if t.kind != "ssh" and (r.ssh_config or r.ssh_identity):
        raise ConfigError("--ssh-config and --ssh-identity apply only to ssh:// targets")
    for flag, path in (("--ssh-config", r.ssh_config), ("--ssh-identity", r.ssh_identity)):
        if path:  # ssh reads it: a device, a socket or gigabytes would hang or fail there, worded by ssh
            read_user_file(
                path,
                flag,
                hint="give the ssh_config / private key file of the target",
                max_bytes=SSH_FILE_MAX_BYTES,
            )
    if r.gpus not in ("auto", "toolkit", "devices", "none"):
        raise ConfigError(f"--gpus {r.gpus!r}: use auto, toolkit, devices or none")
    return t, signer


def _shm_rules(r: ValidateRequest, t: Target) -> tuple[int | None, str | None]:
    """--nccl-max-bytes, --shm-min and the image's IMAGESMITH_SHM_MIN_BYTES: (the /dev/shm floor in bytes,
    where it comes from)."""
    from imagesmith.matrix import SHM_MAX_BYTES
    from imagesmith.validate.context import NCCL_MIN_BYTES as nccl_min
    from imagesmith.validate.parsers import parse_size

    if parse_size(r.nccl_max_bytes, what="--nccl-max-bytes") < nccl_min:
        # all_reduce_perf -b 8 -e 0 measures nothing: the bandwidth check would fail on no data
        raise ConfigError(
            f"--nccl-max-bytes {r.nccl_max_bytes}: below the {nccl_min} bytes all_reduce_perf starts at "
            "(-b), so no size would be measured",
            hint="give the largest message size to measure, e.g. 1G (the default) or 256M",
        )
    shm_min_bytes: int | None = parse_size(r.shm_min, what="--shm-min") if r.shm_min else None
    if shm_min_bytes is not None and shm_min_bytes > SHM_MAX_BYTES:
        raise ConfigError(
            f"--shm-min {r.shm_min}: more than {SHM_MAX_BYTES // 1024**3}g, which no GPU host gives /dev/shm",
            hint="ask for what DataLoader workers and NCCL need (8g–64g on 8-GPU training hosts)",
        )
    env_shm = (settings.get("IMAGESMITH_SHM_MIN_BYTES", "") or "").strip()
    if env_shm and (not is_digits(env_shm) or len(env_shm) > 19):  # "٣" and "²" are not bytes
        raise ConfigError(
            f"IMAGESMITH_SHM_MIN_BYTES={env_shm[:40]!r} is not a number of bytes",
            hint="a whole number of bytes in ASCII digits (the image sets it), or unset it",
        )
    if shm_min_bytes is None and t.kind != "image" and is_digits(env_shm):
        return int(env_shm), r.shm_min_source or "IMAGESMITH_SHM_MIN_BYTES (the image's need)"
    return shm_min_bytes, r.shm_min_source


def _band_rules(r: ValidateRequest) -> float:
    """The performance and soak bands, --foreign-memory-max and --soak: the soak's seconds."""
    from imagesmith.validate.free import check_limit_spec

    if r.perf_fail_ratio > r.perf_warn_ratio:
        raise ConfigError(
            f"--perf-fail-ratio {r.perf_fail_ratio:g} is above --perf-warn-ratio {r.perf_warn_ratio:g}",
            hint="the fail band must be at or below the warn band: e.g. 0.8 and 0.9",
        )
    check_limit_spec(r.foreign_memory_max)
    soak = r.soak
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
    if r.soak_fail_ratio > r.soak_warn_ratio:
        raise ConfigError(
            f"--soak-fail-ratio {r.soak_fail_ratio:g} is above --soak-warn-ratio {r.soak_warn_ratio:g}",
            hint="the fail band must be at or below the warn band: e.g. 0.92 and 0.96",
        )
    return soak_s


def _expected(
    r: ValidateRequest, read_fleet: FleetReader
) -> tuple[float | None, str, dict[str, float], list[dict[str, Any]], str]:
    """The expected figures: --baseline-figure, --baseline (a good run's report.json), the fleet of
    --baseline-from (read by *read_fleet*): (busbw, its source, figures, fleet groups, their source)."""
    from imagesmith.validate.runner import load_baseline

    baseline_busbw, baseline_source = r.baseline_busbw, r.baseline_source
    baseline_figures = _figures(list(r.baseline_figure))
    if r.baseline is not None:
        found_busbw, baseline_source, baseline_figures = load_baseline(Path(r.baseline))
        baseline_busbw = found_busbw if found_busbw is not None else baseline_busbw
    fleet, fleet_source = read_fleet(r.baseline_from, r.baseline_fleet, baseline_source)
    return baseline_busbw, baseline_source, baseline_figures, fleet, fleet_source


def validate(
    request: ValidateRequest, p: Prepared, *, echo: Callable[[str], Any] = lambda _: None
) -> ValidateResult:
    """Run the suite the request asks for (*p*: what :func:`prepare` made of it), on the host or in the image
    (``validate/container.py``), sign the evidence when a key is given, and say what it found."""
    from imagesmith.validate.record import soak_sentence_of
    from imagesmith.validate.staging import discard, publish, staging_dir

    t, subject = p.target, p.subject
    final = Path(p.options.report_dir)
    staging = staging_dir(final)
    options = dataclasses.replace(p.options, report_dir=str(staging), bundle_dir=str(final))
    try:
        data = _run(request, p, options, echo)
    except BaseException:  # an error, Ctrl-C: nothing replaces the bundle a folder already holds
        discard(staging, final)
        raise
    try:
        if p.signer is not None and subject is not None:
            _attest(t.spec, subject, data, staging, p.signer, echo)
    finally:  # a verdict: the bundle goes in place, unsigned when signing refused (the report is no evidence)
        publish(staging, final)
    return ValidateResult(
        target_label=options.target_label,
        verdict=str(data["verdict"]),
        reason=str(data["verdict_reason"]),
        cause=str(data.get("verdict_cause") or ""),
        report=final / "report.md",
        soak_sentence=soak_sentence_of(data.get("checks") or []),
        data=data,
    )


def _run(
    request: ValidateRequest, p: Prepared, options: SuiteOptions, echo: Callable[[str], Any]
) -> dict[str, Any]:
    from imagesmith.validate.runner import run_suite

    t, subject = p.target, p.subject
    if t.kind == "image":
        from imagesmith.validate.container import run_in_image

        return run_in_image(
            t.spec,
            options,
            select=request.select,
            shm_override=request.shm_size,
            shm_min_override=p.shm_min_bytes,
            gpus=request.gpus,
            echo=echo,
            subject=(subject[1], subject[2]) if subject is not None else None,
        )
    return run_suite(options, select=request.select)


def _writable_report_dir(path: Path) -> None:
    """The evidence bundle's folder must be one this process can create and write, before any check runs. The
    probe leaves nothing behind: folders it made are removed again (a target that then turns out unreachable
    leaves no empty report folder).
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--report {path}: exists and is not a folder", hint="give a folder for the bundle")
    from imagesmith.validate.staging import check_replaceable

    check_replaceable(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        # the bundle is filled in a temp folder beside it (validate/staging.py): its parent is written too
        for folder in {path, path if os.path.ismount(path) else path.absolute().parent}:
            probe = folder / f".imagesmith-write-test-{os.getpid()}"
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


def _signer(t: Any, sign_key: str | None, echo: Callable[[str], Any]) -> Any:
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
        echo(f"note: {t.label} is not an image: the report is not signed ($IMAGESMITH_SIGNING_KEY unused)")
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
    image: str,
    subject: tuple[str, str, str],
    data: dict[str, Any],
    report_dir: Path,
    key: Any,
    echo: Callable[[str], Any],
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
    atomicio.write_atomic(out, envelope + b"\n")
    echo(f"signed: {out} (attests {repo}@{digest}; key {key.key_id[:16]})")


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


def check_select(select: str) -> None:
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
