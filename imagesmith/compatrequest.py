"""The compat and refresh-compat commands' layer between their flags and the compatibility data (issue 31):
one typed request each (:class:`CompatRequest`, :class:`RefreshRequest`: what ``imagesmith compat`` /
``refresh-compat`` was given), the rules of the flags in one place (:func:`prepare_compat`,
:func:`prepare_refresh`: every bad value or combination is one error naming the flag — its ``field`` —, in a
fixed order, before a verdict is judged or an index read), the run (:func:`run_compat`, :func:`run_refresh`,
:func:`run_boards`) and one typed result (:class:`CompatResult`, :class:`RefreshResult`,
:class:`BoardsResult`) the command prints; its exit status is the result's.

A refresh run says what it reads line by line through ``progress`` (the command's stderr). Nothing heavy is
imported at module level: ``imagesmith --help`` loads this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from imagesmith.errors import ConfigError, Fault, ImagesmithError

if TYPE_CHECKING:
    from imagesmith import compat, drivertable, refresh

_T = TypeVar("_T")

_MODE_RANK = {"full": 2, "minor-version": 1, "none": 0}


def _naming(flag: str, read: Callable[[], _T]) -> _T:
    """``read()``, its error naming *flag* (its ``field``) where it names none yet."""
    try:
        return read()
    except ImagesmithError as exc:
        if exc.field is not None:
            raise
        raise exc.replace(field=flag) from None


# -- compat --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class CompatRequest:
    """What ``imagesmith compat`` was given: its flags as typed values (the defaults are the flags')."""

    torch: str
    cuda: str | None = None
    driver: str | None = None
    gpu: Sequence[str] = ()
    nvidia_smi: str | None = None
    as_json: bool = False


@dataclass(frozen=True, kw_only=True)
class CompatPrepared:
    """A request the rules accepted: the torch version and CUDA variant (with the line saying where the
    variant came from when ``--cuda`` was not given), the driver, the GPU models (with their nvidia-smi
    indices), the nvidia-smi file's name and what it says about the host (MIG)."""

    torch: str
    cuda: str
    cuda_origin: str
    driver: compat.DriverVersion
    targets: Sequence[tuple[compat.Gpu, Sequence[int]]]
    source: str | None
    host_warnings: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class CompatResult:
    """The verdicts, one per GPU model (with its nvidia-smi indices), and what the command says with them:
    where the variant came from, the file read, the driver, the warnings (about the host first, once)."""

    verdicts: Sequence[tuple[compat.Verdict, compat.Gpu, Sequence[int]]]
    cuda_origin: str
    source: str | None
    driver: compat.DriverVersion
    host_warnings: Sequence[str]
    warnings: Sequence[str]

    @property
    def compatible(self) -> bool:
        """Every GPU model can run the wheel (full or minor-version): exit 0, else 1."""
        return all(v.compatible for v, _, _ in self.verdicts)

    def to_json(self) -> dict[str, Any]:
        """``--json``: one verdict's object; with several GPU models the weakest one's keys and
        ``verdicts`` (one object per model)."""
        objs = []
        for v, g, indices in self.verdicts:
            obj = verdict_json(v, g)
            obj["cuda_from"] = "pypi-default" if self.cuda_origin else "flag"
            obj["warnings"] = [
                *self.host_warnings,
                *obj["warnings"],
            ]  # MIG: about the host, whatever the wheel
            if self.source is not None:
                obj["gpu_indices"] = list(indices)
            objs.append(obj)
        if len(objs) == 1:
            out: dict[str, Any] = objs[0]
            if self.source is not None:
                out["source"] = self.source
            return out
        weakest = min(objs, key=lambda o: _MODE_RANK[str(o["mode"])])
        out = {
            **weakest,
            "compatible": self.compatible,
            "gpu": [o["gpu"] for o in objs],
            "gpu_name": [o["gpu_name"] for o in objs],
            "reasons": [f"{o['gpu']}: {r}" for o in objs for r in o["reasons"]],
            "source": self.source,
            "warnings": list(self.warnings),
            "verdicts": objs,
        }
        out.pop("gpu_indices", None)
        return out


def verdict_json(v: compat.Verdict, g: compat.Gpu) -> dict[str, Any]:
    """One verdict as ``compat --json`` prints it."""
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


def prepare_compat(request: CompatRequest) -> CompatPrepared:
    """The rules of the flags, in one place and in this order: ``--torch`` (its ``+`` variant), ``--cuda``
    and the variant of ``--torch`` known and the same, the torch release (without ``--cuda``: its PyPI
    default); then ``--driver`` and ``--gpu``, or ``--nvidia-smi`` (not with ``--gpu``; read, parsed, its
    driver there or given and the same, each GPU model known or judged by its compute capability)."""
    torch, cuda, cuda_origin = _torch_and_cuda(request.torch, request.cuda)
    source: str | None
    host_warnings: tuple[str, ...]
    if request.nvidia_smi is None:
        driver, targets = _flag_targets(request.driver, request.gpu)
        source, host_warnings = None, ()
    else:
        driver, targets, source, host_warnings = _smi_targets(request.driver, request.gpu, request.nvidia_smi)
    return CompatPrepared(
        torch=torch,
        cuda=cuda,
        cuda_origin=cuda_origin,
        driver=driver,
        targets=tuple(targets),
        source=source,
        host_warnings=tuple(host_warnings),
    )


def run_compat(p: CompatPrepared) -> CompatResult:
    """Judge the wheel on each GPU model of *p* (``$IMAGESMITH_TODAY`` is the date of the lifecycle)."""
    from imagesmith import compat

    today = compat.today()
    verdicts = [(compat.verdict(p.driver, g, p.torch, p.cuda, today=today), g, ix) for g, ix in p.targets]
    warnings = list(dict.fromkeys([*p.host_warnings, *(w for v, _, _ in verdicts for w in v.warnings)]))
    return CompatResult(
        verdicts=tuple(verdicts),
        cuda_origin=p.cuda_origin,
        source=p.source,
        driver=p.driver,
        host_warnings=p.host_warnings,
        warnings=tuple(warnings),
    )


def _flag_targets(
    driver: str | None, gpus: Sequence[str]
) -> tuple[compat.DriverVersion, list[tuple[compat.Gpu, Sequence[int]]]]:
    """``--driver`` and ``--gpu``: the driver and one entry per GPU model (every ``--gpu`` is judged)."""
    from imagesmith import compat

    missing = [flag for flag, value in (("--driver", driver), ("--gpu", gpus)) if not value]
    if missing:
        raise ConfigError(
            f"missing {' and '.join(missing)}",
            hint="give --driver and --gpu, or --nvidia-smi FILE (the saved output of nvidia-smi)",
            field=missing[0],
        )
    drv = _naming("--driver", lambda: compat.parse_driver(str(driver)))
    chosen: dict[str, compat.Gpu] = {}
    for name in gpus:  # every --gpu is judged (a host with two models gets two verdicts)
        model = _naming("--gpu", partial(compat.gpu, name))
        chosen.setdefault(model.key, model)
    return drv, [(model, ()) for model in chosen.values()]


def _smi_targets(
    driver: str | None, gpus: Sequence[str], smi_file: str
) -> tuple[compat.DriverVersion, list[tuple[compat.Gpu, Sequence[int]]], str, tuple[str, ...]]:
    """``--nvidia-smi FILE``: (driver, [(gpu model, nvidia-smi indices)], source, MIG warnings)."""
    from imagesmith import compat, nvsmi
    from imagesmith.pick import mig_warnings, read_smi_text

    if gpus:
        raise ConfigError(
            "--gpu and --nvidia-smi both name the GPU",
            hint="drop --gpu: the GPUs are read from the nvidia-smi file",
            field="--gpu",
        )
    text, source = _naming("--nvidia-smi", lambda: read_smi_text(smi_file))
    report = _naming("--nvidia-smi", lambda: nvsmi.parse(text, source))
    if report.driver is None and driver is None:
        raise ConfigError(
            f"{source}: this nvidia-smi output shows no driver version",
            hint="add --driver, or save plain `nvidia-smi` output (or add driver_version to --query-gpu)",
            field="--driver",
        )
    given = None if driver is None else _naming("--driver", lambda: compat.parse_driver(driver))
    if report.driver is not None and given is not None and given != report.driver:
        raise ConfigError(
            f"--driver {driver} contradicts {source}, which shows driver {report.driver}",
            hint="drop --driver: the driver is read from the nvidia-smi file",
            field="--driver",
        )
    drv = report.driver if report.driver is not None else given
    assert drv is not None  # one of them is there (checked above)
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
            raise ConfigError(
                f"{source}: GPU {smi_gpu.index}: {exc.message}", hint=hint, field="--nvidia-smi"
            ) from None
        models.setdefault(model.key, (model, []))[1].append(smi_gpu.index)
    return drv, list(models.values()), source, tuple(mig_warnings(report.gpus))


def _known_cuda(flag: str, given: str, cuda: str) -> None:
    """A CUDA imagesmith has no toolkit row for (99.9, cu999) or an update that never was (12.4.9) is bad
    input (exit 2), not a "not compatible" verdict."""
    from imagesmith import compat

    try:
        compat.cuda_release(cuda)
    except ConfigError as exc:
        raise ConfigError(
            f"{flag} {given}: {exc.message}", hint=exc.hint or "give a CUDA X.Y, e.g. 12.1", field=flag
        ) from None


def _torch_and_cuda(torch: str, cuda: str | None) -> tuple[str, str, str]:
    """(torch version, CUDA variant, a line saying where the variant came from when --cuda was not given)."""
    from imagesmith import compat

    version, plus, local = torch.strip().partition("+")
    if plus and not local.strip():
        raise ConfigError(
            f"--torch {torch}: nothing after the '+' (a local version such as +cu121 was cut off)",
            hint="write 2.1.2+cu121, or 2.1.2 with --cuda 12.1",
            field="--torch",
        )
    if local and not local.startswith("cu"):
        raise ConfigError(
            f"--torch {torch}: {local!r} is not a CUDA variant",
            hint="imagesmith covers CUDA wheels: write 2.1.2+cu121 or 2.1.2 with --cuda 12.1",
            field="--torch",
        )
    for flag, value in (("--cuda", cuda), ("--torch", local or None)):
        if value is not None:
            _known_cuda(flag, torch if flag == "--torch" else value, value)
    if cuda is not None:
        if local and compat.normalize_cuda(local) != compat.normalize_cuda(cuda):
            raise ConfigError(
                f"--torch {torch} and --cuda {cuda} name different CUDA variants",
                hint="give the variant once: --torch 2.1.2+cu121, or --torch 2.1.2 --cuda 12.1",
                field="--cuda",
            )
        return version, cuda, ""
    if local:
        return version, local, ""
    release = _naming("--torch", lambda: compat.torch_release(version))
    return (
        version,
        release.pypi_default,
        f"--cuda not given: using {release.pypi_default}, the variant "
        f"`pip install torch=={release.version}` gets from PyPI",
    )


# -- refresh-compat ------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RefreshRequest:
    """What ``imagesmith refresh-compat`` was given: its flags as typed values (the files default to the
    package's data: torch.toml, driver_table.toml)."""

    releases: str | None = None
    as_json: bool = False
    write: bool = False
    no_arch: bool = False
    index_url: str | None = None
    offline: Path | None = None
    record: Path | None = None
    data_file: Path
    boards: Path | None = None
    boards_file: Path


@dataclass(frozen=True, kw_only=True)
class RefreshPrepared:
    """A request the rules accepted: ``--boards`` (the clone, the data of ``--boards-file``) or PyPI (the
    source: a recording or the index, with its transfer counters)."""

    mode: Literal["boards", "pypi"]
    clone: Path | None = None
    boards_data: dict[str, Any] | None = None
    source: refresh.LiveSource | refresh.RecordedSource | None = None
    http: refresh.Http | None = None


@dataclass(frozen=True, kw_only=True)
class RefreshResult:
    """The PyPI run: the rows compared, what was written into torch.toml, the arch lists read and the bytes
    the index sent; its exit status (0, or a difference)."""

    result: refresh.Result
    written: Sequence[str]
    fatbin_reads: Sequence[dict[str, Any]]
    http: refresh.Http | None

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    def to_json(self) -> dict[str, Any]:
        return {
            "differs": self.result.differs,
            "rows": [r.to_json() for r in self.result.rows],
            "new_releases": self.result.new,
            "written": list(self.written),
            "fatbin_reads": list(self.fatbin_reads),
            "bytes_read": self.http.bytes if self.http else 0,
        }


@dataclass(frozen=True, kw_only=True)
class BoardsResult:
    """The ``--boards`` run: the table derived from the clone, where it differs from ``--boards-file``,
    and whether that file was rewritten (``--write``)."""

    derived: drivertable.Table
    differences: Sequence[drivertable.Difference]
    written: bool
    boards_file: Path

    @property
    def exit_code(self) -> int:
        from imagesmith import refresh

        return refresh.EXIT_DIFFERENCES if self.differences else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "differs": bool(self.differences),
            "differences": [d.to_json() for d in self.differences],
            "tags_read": len(self.derived.tags_read),
            "tags_skipped": len(self.derived.tags_skipped),
            "boards": len(self.derived.boards),
            "written": self.written,
        }


def prepare_refresh(request: RefreshRequest) -> RefreshPrepared:
    """The rules of the flags, in one place and in this order. With ``--boards``: ``--boards-file``
    writable (``--write``) and read as TOML, ``--boards`` a git clone (the other flags are PyPI's). Else:
    ``--data-file`` a file there that can be written (``--write``), ``--offline`` a recording or
    ``--index-url`` an http(s) index, ``--releases`` a range."""
    import tomllib
    from packaging.version import Version

    from imagesmith import compat, drivertable, refresh
    from imagesmith.inputs import check_output_file

    r = request
    if r.boards is not None:
        if r.write:
            _naming("--boards-file", lambda: check_output_file(r.boards_file, "--boards-file"))
        try:
            data = tomllib.loads(r.boards_file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(
                f"{r.boards_file}: cannot read it as TOML ({exc})",
                hint="give the driver table (imagesmith/data/driver_table.toml) with --boards-file",
                file=str(r.boards_file),
                field="--boards-file",
            ) from None
        clone = r.boards
        _naming("--boards", lambda: drivertable.git_dir(clone))
        return RefreshPrepared(mode="boards", clone=clone, boards_data=data)
    if r.write:
        _naming("--data-file", lambda: check_output_file(r.data_file, "--data-file"))
        if not r.data_file.is_file():  # --write edits the rows of the file there
            raise ConfigError(
                f"--data-file {r.data_file}: no such file (--write edits the torch.toml there)",
                hint="give --data-file the torch.toml to edit (default: imagesmith/data/torch.toml)",
                field="--data-file",
            )
    source: refresh.LiveSource | refresh.RecordedSource
    http = None
    if r.offline is not None:
        offline = r.offline
        source = _naming("--offline", lambda: refresh.RecordedSource(offline))
    else:
        http = refresh.Http(verify=refresh.ca_bundle())
        given = r.index_url
        url = (
            _naming("--index-url", lambda: refresh.check_index_url(given, "--index-url"))
            if given
            else refresh.default_index_url()
        )
        source = refresh.LiveSource(url, http, r.record)
    newest = max((Version(t.version) for t in compat.torch_releases()), default=Version("2.0"))
    _naming("--releases", lambda: refresh.parse_releases(r.releases, f"{newest.major}.{newest.minor}"))
    return RefreshPrepared(mode="pypi", source=source, http=http)


def run_refresh(
    request: RefreshRequest, p: RefreshPrepared, *, progress: Callable[[str], None] | None = None
) -> RefreshResult:
    """Read the index (or the recording) for ``--releases``, compare with the data, and with ``--write``
    write the new releases and differing fields into ``--data-file``; *progress* told of each release."""
    from imagesmith import refresh

    source = p.source
    assert source is not None  # a PyPI request
    result = refresh.run(source, request.releases, arch=not request.no_arch, progress=progress)
    if isinstance(source, refresh.LiveSource):
        source.save_listings()
    written = refresh.write(result, request.data_file) if request.write else []
    return RefreshResult(result=result, written=tuple(written), fatbin_reads=source.fatbin_reads, http=p.http)


def run_boards(request: RefreshRequest, p: RefreshPrepared) -> BoardsResult:
    """``--boards CLONE``: every board's first driver re-derived from the clone's release tags, compared with
    ``--boards-file``; with ``--write`` that file rewritten where it differs."""
    from imagesmith import compat, drivertable

    assert p.clone is not None
    assert p.boards_data is not None
    names = {n for g in compat.gpus() for n in (g.name, *g.smi_names)}
    derived = drivertable.derive(drivertable.read_clone(p.clone), names)
    diffs = drivertable.compare(drivertable.boards_from_data(p.boards_data), derived)
    if request.write and diffs:
        request.boards_file.write_text(drivertable.render_toml(derived), encoding="utf-8")
    return BoardsResult(
        derived=derived,
        differences=tuple(diffs),
        written=bool(request.write and diffs),
        boards_file=request.boards_file,
    )
