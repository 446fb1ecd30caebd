"""The only module that talks to a Docker engine: build, push, pull, inspect, tag, remove, run.

Builds go through BuildKit when a docker CLI that drives it is present (Debian's ``/usr/bin/docker`` 20.10
with ``DOCKER_BUILDKIT=1``; ``--progress=plain`` is parsed for steps, cache hits and bytes), else through the
Engine API of the docker SDK (classic builder; hosts that have a ``dockerd`` but no CLI). Everything else uses
the SDK.

docker-py's ``push()`` does not raise when the push fails: the stream is read here and any ``errorDetail``
becomes a :class:`~imagesmith.errors.PushError` naming the registry and its message.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict

import docker
import docker.errors
from docker.types import DeviceRequest, Mount, Ulimit
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

from imagesmith import settings
from imagesmith.buildlog import BuildEvent as BuildEvent  # where build and its command name it
from imagesmith.buildlog import _build_stalled, _BuildKitParser, _error_tail, _lines_within
from imagesmith.credentials import Credentials
from imagesmith.errors import BuildError, ConfigError, EngineError, Fault, ImagesmithError, PushError
from imagesmith.http import timed_out
from imagesmith.refs import split_reference

if TYPE_CHECKING:
    from typing_extensions import Unpack

Backend = Literal["auto", "buildkit", "sdk"]


@dataclass(frozen=True, kw_only=True)
class GpuRequest:
    """GPUs asked of the engine's GPU runtime: ``all``, a count, or device ids (``--gpus device=0,1``)."""

    count: int | None = None  # None with no device_ids: all
    device_ids: tuple[str, ...] = ()


def _device_request(request: GpuRequest) -> DeviceRequest:
    if request.device_ids:
        return DeviceRequest(device_ids=list(request.device_ids), capabilities=[["gpu"]])
    return DeviceRequest(count=-1 if request.count is None else request.count, capabilities=[["gpu"]])


#: Debian's docker CLI (20.10) drives BuildKit with DOCKER_BUILDKIT=1 and needs no buildx plugin.
DEFAULT_CLI = "/usr/bin/docker"
_TRANSIENT_PUSH = re.compile(
    r"connection refused|connection reset|i/o timeout|timeout|EOF|50[0-9]|broken pipe|TLS handshake"
    r"|toomanyrequests|too many requests|\b429\b|service unavailable|bad gateway",
    re.IGNORECASE,
)
_RATE_LIMITED = re.compile(r"toomanyrequests|too many requests|\b429\b", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    image_id: str
    backend: str
    steps: int
    cached_steps: int
    duration_s: float
    log_tail: tuple[str, ...] = ()

    @property
    def rebuilt_steps(self) -> int:
        return self.steps - self.cached_steps


@dataclass(frozen=True, kw_only=True)
class PushResult:
    reference: str
    digest: str
    bytes_pushed: int
    layers_pushed: int
    layers_existing: int
    duration_s: float
    #: short (12 hex) layer diff ids the engine uploaded; map to manifest layers via the image's RootFS.Layers
    pushed_ids: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RunResult:
    exit_code: int
    output: str
    duration_s: float


@dataclass(frozen=True, kw_only=True)
class BindMount:
    source: str
    target: str
    read_only: bool = True


class RunOptions(TypedDict, total=False):
    """How :meth:`ContainerEngine.run_container` starts a container (all optional)."""

    gpu_request: GpuRequest | None  # GPUs through the engine's GPU runtime (``--gpus``)
    devices: Sequence[str]  # ``host:container:rwm``
    shm_size: str | None
    ulimits: Mapping[str, int | tuple[int, int]] | None
    env: Mapping[str, str] | None
    mounts: Sequence[BindMount]
    ipc_mode: str | None
    network: str | None
    entrypoint: Sequence[str] | str | None
    user: str | None
    timeout_s: float  # default 600


def buildkit_cli(path: str | None = None) -> str | None:
    """A docker CLI that can drive BuildKit, or None.

    ``$IMAGESMITH_DOCKER_CLI`` (or *path*) wins; an empty value disables the CLI. Default: Debian's
    ``/usr/bin/docker`` when its client version is < 23 (built-in BuildKit) or it has the buildx plugin.
    """
    candidate = path if path is not None else settings.get("IMAGESMITH_DOCKER_CLI", DEFAULT_CLI)
    if not candidate:
        return None
    exe = shutil.which(candidate)
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.match(r"([0-9]+)\.", out.stdout.strip())
    if m is None:  # not a docker CLI (no client version)
        return None
    if int(m.group(1)) < 23:
        return exe
    buildx = subprocess.run(
        [exe, "buildx", "version"], capture_output=True, text=True, timeout=30, check=False
    )
    return exe if buildx.returncode == 0 else None


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    """One build: what every builder gets."""

    context: Path
    tags: tuple[str, ...]
    dockerfile: str = "Dockerfile"
    build_args: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    target: str | None = None
    no_cache: bool = False
    what: str = "image"
    #: BuildKit secrets: ``{id: file}``, given to ``RUN --mount=type=secret,id=…`` and never to a layer
    secrets: Mapping[str, Path] = field(default_factory=dict)


#: A Dockerfile instruction only BuildKit runs: ``RUN --mount=…`` (cache and secret mounts).
_BUILDKIT_ONLY = re.compile(r"^\s*RUN\s+--mount=", re.MULTILINE | re.IGNORECASE)


def needs_buildkit(dockerfile: str) -> bool:
    """Whether a Dockerfile's text uses what only BuildKit runs (``RUN --mount``)."""
    return _BUILDKIT_ONLY.search(dockerfile) is not None


class PushFlags(TypedDict, total=False):
    """How :meth:`ContainerEngine.push` pushes (all optional)."""

    credentials: Credentials | None
    #: a short-lived token refused: other credentials, or None (tried once, never in a loop)
    refresh: Callable[[Credentials], Credentials | None] | None
    registry_name: str | None  # named in errors (default: the host)
    attempts: int  # transient faults: tries in all (default 4)
    deadline: float  # no new try after this many seconds (default 900)
    backoff: float  # first wait between tries, doubling with jitter (default 2)
    on_progress: Callable[[int], None] | None  # bytes pushed so far
    #: asked when the engine starts retrying a layer ("Retrying in N seconds") or a try failed with a 5xx:
    #: raises RegistryError when the registry cannot take writes for a reason waiting does not fix (storage
    #: full, quota, denied) — the push stops at once instead of retrying (:meth:`RegistryClient.probe_write`)
    probe: Callable[[], None] | None


class BuildFlags(TypedDict, total=False):
    """How :meth:`ContainerEngine.build` builds (all optional; the defaults of :class:`BuildRequest`)."""

    dockerfile: str
    build_args: Mapping[str, str] | None
    labels: Mapping[str, str] | None
    target: str | None
    no_cache: bool
    on_event: Callable[[BuildEvent], None] | None
    what: str  # named in errors: "cell <id>"
    secrets: Mapping[str, Path] | None  # BuildKit secrets {id: file} (the sdk backend refuses them)


@dataclass(frozen=True, kw_only=True)
class Built:
    image_id: str
    steps: int
    cached_steps: int
    tail: tuple[str, ...]


class ImageBuilder(Protocol):
    """How an engine builds: the BuildKit CLI or the Engine API (classic builder); one per engine."""

    name: str

    def build(self, request: BuildRequest, on_event: Callable[[BuildEvent], None] | None) -> Built: ...


class BuildKitCliBuilder:
    """``docker build`` with ``DOCKER_BUILDKIT=1`` through a CLI that drives BuildKit (Debian's docker.io)."""

    name = "buildkit"

    def __init__(self, path: str) -> None:
        self.path = path

    def build(self, request: BuildRequest, on_event: Callable[[BuildEvent], None] | None) -> Built:
        context, tags, dockerfile = request.context, request.tags, request.dockerfile
        build_args, labels, target = request.build_args, request.labels, request.target
        no_cache, what = request.no_cache, request.what
        iidfile = context / ".imagesmith-iid"
        iidfile.unlink(missing_ok=True)
        cmd = [
            self.path,
            "build",
            "--progress=plain",
            "--iidfile",
            str(iidfile),
            "-f",
            str(context / dockerfile),
        ]
        for t in tags:
            cmd += ["-t", t]
        for k, v in build_args.items():
            cmd += ["--build-arg", f"{k}={v}"]
        for k, v in labels.items():
            cmd += ["--label", f"{k}={v}"]
        if target:
            cmd += ["--target", target]
        if no_cache:
            cmd.append("--no-cache")
        for sid, src in request.secrets.items():
            cmd += ["--secret", f"id={sid},src={src}"]
        cmd.append(str(context))
        env = dict(os.environ, DOCKER_BUILDKIT="1", BUILDKIT_PROGRESS="plain")
        parser = _BuildKitParser()
        tail: list[str] = []
        log_path = context / ".imagesmith-build.log"
        stall = settings.seconds("IMAGESMITH_BUILD_STALL")
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, errors="replace"
            )
            for raw in _lines_within(proc, stall, what, log_path, tail):
                line = raw.rstrip("\n")
                log.write(raw)
                tail.append(line)  # in place: the stall's error names the last line
                del tail[:-60]
                parser.feed(line)
                if on_event:
                    on_event(parser.event)
            rc = proc.wait()
        if rc != 0 or not iidfile.is_file():
            raise BuildError(
                f"build of {what} failed (docker build exit {rc}):\n" + "\n".join(_error_tail(tail)),
                hint=f"full log: {log_path}",
            )
        image_id = iidfile.read_text().strip()
        return Built(
            image_id=image_id, steps=len(parser.names), cached_steps=len(parser.cached), tail=tuple(tail)
        )


class SdkBuilder:
    """The Engine API's classic builder (docker-py): works where no BuildKit CLI is installed."""

    name = "sdk"

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    def build(self, request: BuildRequest, on_event: Callable[[BuildEvent], None] | None) -> Built:
        context, tags, dockerfile = request.context, request.tags, request.dockerfile
        build_args, labels, target = request.build_args, request.labels, request.target
        no_cache, what = request.no_cache, request.what
        fix = (
            "build with the BuildKit backend: `--backend buildkit` (needs a docker CLI that drives "
            "BuildKit, "
            f"e.g. Debian's docker.io at {DEFAULT_CLI}, or IMAGESMITH_DOCKER_CLI naming one)"
        )
        if request.secrets:
            raise BuildError(
                f"build of {what}: the sdk backend (the Engine API's classic builder) cannot give the build "
                f"a secret ({', '.join(sorted(request.secrets))}: the extra CA certificate) without putting "
                "it into a layer",
                hint=fix,
            )
        dockerfile_path = context / dockerfile
        if dockerfile_path.is_file() and needs_buildkit(dockerfile_path.read_text(errors="replace")):
            raise BuildError(
                f"build of {what}: {dockerfile_path} uses `RUN --mount` (the shared wheel cache, the CA "
                "secret), which the sdk backend (the Engine API's classic builder) cannot run",
                hint=fix,
            )
        event = BuildEvent()
        tail: list[str] = []
        image_id = ""
        stall = settings.seconds("IMAGESMITH_BUILD_STALL")
        steps = cached = 0
        try:
            stream: Iterable[dict[str, Any]] = self.client.api.build(
                path=str(context),
                dockerfile=dockerfile,
                tag=tags[0],
                buildargs=dict(build_args),
                labels=dict(labels),
                target=target,
                nocache=no_cache,
                rm=True,
                forcerm=True,
                decode=True,
                timeout=int(stall),  # each read of the build's stream: the engine silent that long
            )
            for chunk in stream:
                if "error" in chunk or "errorDetail" in chunk:
                    msg = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error", "")
                    raise BuildError(
                        f"build of {what} failed: {msg}\n" + "\n".join(_error_tail(tail)),
                        hint="see the build output above",
                    )
                text = str(chunk.get("stream", "")).rstrip("\n")
                if "aux" in chunk and isinstance(chunk["aux"], dict) and chunk["aux"].get("ID"):
                    image_id = str(chunk["aux"]["ID"])
                for line in text.splitlines():
                    tail = [*tail[-59:], line]
                    event.line = line
                    if re.match(r"^Step [0-9]+/[0-9]+ : ", line):
                        steps += 1
                        event.step = line[:120]
                        event.steps_done = steps
                    elif "Using cache" in line:
                        cached += 1
                        event.steps_cached = cached
                    m = re.match(r"^Successfully built ([0-9a-f]+)", line)
                    if m and not image_id:
                        image_id = m.group(1)
                    if on_event:
                        on_event(event)
        except docker.errors.APIError as exc:
            raise BuildError(f"build of {what} failed: {exc.explanation or exc}") from exc
        except Exception as exc:
            if not timed_out(exc):
                raise
            raise _build_stalled(what, stall, tail, "the engine's build output") from None
        if not image_id:
            raise BuildError(f"build of {what}: the engine reported no image id", hint="see the build output")
        image = self.client.images.get(image_id)
        for t in tags:
            repo, tag = split_tag(t)
            image.tag(repo, tag)
        # steps that create no layer (ARG, ENV, LABEL…) are counted too; FROM lines never hit the cache
        steps_from = sum(1 for line in tail if re.match(r"^Step [0-9]+/[0-9]+ : FROM ", line))
        return Built(image_id=str(image.id), steps=steps - steps_from, cached_steps=cached, tail=tuple(tail))


class ContainerEngine(Protocol):
    """What build, validate and pick ask of a container engine: the seam they are typed with.

    :class:`Engine` (Docker: BuildKit CLI or Engine API for builds, the SDK for the rest) implements it; tests
    pass small in-memory fakes (``tests/unit/test_build_push.py``).
    """

    @property
    def backend(self) -> str:
        """How builds run: ``buildkit`` or ``sdk``."""
        ...

    def build(self, *, context: Path, tags: Sequence[str], **options: Unpack[BuildFlags]) -> BuildResult: ...

    def push(self, reference: str, **options: Unpack[PushFlags]) -> PushResult: ...

    def pull(
        self,
        reference: str,
        *,
        credentials: Credentials | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> str: ...

    def inspect(self, reference: str) -> dict[str, Any] | None: ...
    def labels(self, reference: str) -> dict[str, str]: ...
    def tag(self, source: str, reference: str) -> None: ...
    def remove(self, reference: str, *, force: bool = False) -> bool: ...
    def import_rootfs(self, tarball: Path, reference: str, changes: Sequence[str] = ()) -> str: ...
    def container_state(self, name: str) -> str | None: ...
    def has_nvidia_runtime(self) -> bool: ...

    def run_container(
        self, image: str, command: Sequence[str] | str | None = None, **options: Unpack[RunOptions]
    ) -> RunResult: ...


class Engine:
    """A Docker engine. ``backend`` chooses how builds run: ``auto`` (BuildKit CLI if usable, else SDK)."""

    def __init__(
        self, *, backend: Backend = "auto", base_url: str | None = None, timeout: float | None = None
    ) -> None:
        #: how long the engine may leave a call unanswered: an inspect, a tag, each read of a push's stream
        self.timeout = settings.seconds("IMAGESMITH_ENGINE_TIMEOUT") if timeout is None else timeout
        timeout = int(max(1.0, self.timeout))
        try:
            if base_url:
                self.client = docker.DockerClient(base_url=base_url, timeout=timeout)
            else:
                self.client = docker.from_env(timeout=timeout)
            with self._answered("ping"):
                self.client.ping()
        except docker.errors.DockerException as exc:
            raise EngineError(
                f"cannot reach a Docker engine ({exc})",
                hint="start dockerd (scripts/services.sh start) or set DOCKER_HOST",
            ) from exc
        self.cli: str | None = None
        if backend in ("auto", "buildkit"):
            self.cli = buildkit_cli()
            named = settings.get("IMAGESMITH_DOCKER_CLI", "") or ""
            if named and self.cli is None:  # asked for by name: never a silent fall back to the sdk backend
                found = shutil.which(named)
                raise ConfigError(
                    f"IMAGESMITH_DOCKER_CLI={named!r}: "
                    + (
                        "no such executable"
                        if found is None
                        else f"{found} is not a docker CLI that drives BuildKit"
                    )
                    + " (a docker CLI older than 23, or one with the buildx plugin)",
                    hint=f"point it at one (e.g. Debian's docker.io: {DEFAULT_CLI}), set it empty for the "
                    "sdk backend, or unset it",
                )
            if backend == "buildkit" and self.cli is None:
                raise EngineError(
                    "BuildKit was asked for, but no docker CLI that drives it was found",
                    hint=f"install Debian's docker.io ({DEFAULT_CLI}) or use the sdk backend",
                )
        self.builder: ImageBuilder = BuildKitCliBuilder(self.cli) if self.cli else SdkBuilder(self.client)
        self.backend = self.builder.name

    @contextlib.contextmanager
    def _answered(
        self, command: str, subject: str = "", error: type[ImagesmithError] = EngineError
    ) -> Iterator[None]:
        """A call of the engine (``docker`` *command* *subject*) that it left unanswered for the engine
        timeout: one *error* naming the call, the seconds and the fix, never a traceback (issue 37)."""
        try:
            yield
        except Exception as exc:
            if not timed_out(exc):
                raise
            raise error(
                f"docker {command}{' ' + subject if subject else ''}: the Docker engine gave no answer for "
                f"{self.timeout:g} s "
                f"({type(exc).__name__})",
                hint="check that dockerd is up and not stuck (`docker info`; its log: `journalctl -u "
                "docker`), then rerun; IMAGESMITH_ENGINE_TIMEOUT gives a slow engine longer",
                fault=Fault.UNREACHABLE,
                phase=f"docker {command}",
                stalled=self.timeout,
            ) from None

    def _within(
        self,
        stream: Iterable[dict[str, Any]],
        command: str,
        subject: str,
        error: type[ImagesmithError] = EngineError,
    ) -> Iterator[dict[str, Any]]:
        """The chunks of an engine stream (a push, a pull), each within the engine timeout."""
        with self._answered(command, subject, error):
            yield from stream

    # -- build ----------------------------------------------------------------------------------------------
    def build(self, *, context: Path, tags: Sequence[str], **options: Unpack[BuildFlags]) -> BuildResult:
        """Build *context* and tag it with every name in *tags*. Raises BuildError with the log's tail."""
        if not tags:
            raise BuildError("build needs at least one tag", hint="give the image a name:tag")
        request = BuildRequest(
            context=context,
            tags=tuple(tags),
            dockerfile=options.get("dockerfile", "Dockerfile"),
            build_args=dict(options.get("build_args") or {}),
            labels=dict(options.get("labels") or {}),
            target=options.get("target"),
            no_cache=options.get("no_cache", False),
            what=options.get("what", "image"),
            secrets=dict(options.get("secrets") or {}),
        )
        start = time.monotonic()
        built = self.builder.build(request, options.get("on_event"))
        return BuildResult(
            image_id=built.image_id,
            backend=self.backend,
            steps=built.steps,
            cached_steps=built.cached_steps,
            duration_s=time.monotonic() - start,
            log_tail=tuple(built.tail),
        )

    # -- push / pull ----------------------------------------------------------------------------------------
    def push(self, reference: str, **options: Unpack[PushFlags]) -> PushResult:
        """Push *reference* (``host/repo:tag``); stream errors become PushError; transient ones retried.

        When the registry refuses *credentials* and *refresh* gives other ones (a short-lived token run
        again: :meth:`imagesmith.registry.RegistryClient.refresh_credentials`), the push is tried once more.
        """
        credentials = options.get("credentials")
        refresh = options.get("refresh")
        attempts = options.get("attempts", 4)
        deadline = options.get("deadline", 900.0)
        on_progress = options.get("on_progress")
        probe = options.get("probe")
        repo, tag = split_tag(reference)
        where = options.get("registry_name") or repo.split("/", 1)[0]
        state: dict[str, Any] = {"credentials": credentials, "refreshed": False}

        def once() -> PushResult:
            start = time.monotonic()
            creds: Credentials | None = state["credentials"]
            try:
                return self._push_once(reference, repo, tag, _auth_config(creds), on_progress, start, probe)
            except PushError as exc:
                # what the engine (or, after a probe, the registry) said decides; the message is shown
                last, said = exc.message, exc.said or ""
                refused = _denied(said) or exc.fault in (Fault.DENIED, Fault.UNAUTHORIZED)
                if refused and not state["refreshed"] and creds is not None and refresh is not None:
                    state["refreshed"] = True  # once: never a loop of refusals
                    fresh = refresh(creds)
                    if fresh is not None:
                        state["credentials"] = fresh
                        raise _PushRetry(last, said, immediate=True) from None
                fault = (exc.fault, exc.hint or _PROBE_HINT) if exc.fault else _non_transient(said)
                if fault is None and probe is not None and re.search(r"\b5[0-9][0-9]\b", said):
                    fault = _probe_fault(probe)  # a bare "HTTP 500": ask the registry why
                if fault is not None:
                    raise PushError(
                        f"push of {reference} to registry {where} failed: {last} ({fault[0]})",
                        hint=fault[1],
                    ) from None
                if not _TRANSIENT_PUSH.search(said):
                    raise PushError(
                        f"push of {reference} to registry {where} failed: {last}",
                        hint=_push_hint(said, where),
                    ) from None
                raise _PushRetry(last, said) from None

        retrying = Retrying(
            stop=stop_after_attempt(attempts) | stop_after_delay(deadline),
            wait=_push_wait(options.get("backoff", 2.0)),
            retry=retry_if_exception_type(_PushRetry),
            reraise=True,
        )
        try:
            return retrying(once)
        except _PushRetry as exc:
            tries = retrying.statistics.get("attempt_number", attempts)
            raise PushError(
                f"push of {reference} to registry {where} failed: {exc.last} (gave up after {tries} tries)",
                hint=_push_hint(exc.said, where),
            ) from None

    def _push_once(
        self,
        reference: str,
        repo: str,
        tag: str,
        auth: dict[str, str] | None,
        on_progress: Callable[[int], None] | None,
        start: float,
        probe: Callable[[], None] | None = None,
    ) -> PushResult:
        probed = False
        layer_bytes: dict[str, int] = {}
        existing: set[str] = set()
        pushed: set[str] = set()
        digest = ""
        try:
            with self._answered("push", reference, PushError):
                stream = self.client.api.push(repo, tag=tag, stream=True, decode=True, auth_config=auth)
            for chunk in self._within(stream, "push", reference, PushError):
                detail = chunk.get("errorDetail")
                if detail or "error" in chunk:
                    msg = (detail or {}).get("message") or chunk.get("error") or "unknown error"
                    raise PushError(str(msg), said=str(msg))
                status = str(chunk.get("status", ""))
                lid = str(chunk.get("id", ""))
                if status == "Pushing":
                    current = int((chunk.get("progressDetail") or {}).get("current", 0))
                    layer_bytes[lid] = max(layer_bytes.get(lid, 0), current)
                    if on_progress:
                        on_progress(sum(layer_bytes.values()))
                elif status == "Pushed":
                    pushed.add(lid)
                elif status == "Layer already exists" or status.startswith("Mounted from"):
                    existing.add(lid)
                elif status.startswith("Retrying in") and probe is not None and not probed:
                    probed = True  # the engine retries a failed layer on its own (5 s, 10 s, … per layer)
                    refused = _probe_error(probe)
                    if refused is not None:
                        close = getattr(stream, "close", None)
                        if callable(close):
                            close()  # dropping the request cancels the engine's push
                        raise PushError(
                            f"the registry refused a layer upload ({refused.message})",
                            hint=refused.hint,
                            fault=refused.fault,
                            said=refused.said,
                        )
                aux = chunk.get("aux")
                if isinstance(aux, dict) and aux.get("Digest"):
                    digest = str(aux["Digest"])
                m = re.search(r"digest: (sha256:[0-9a-f]{64})", status)
                if m:
                    digest = m.group(1)
        except docker.errors.APIError as exc:
            said = str(exc.explanation or exc)
            raise PushError(said, said=said) from exc
        except docker.errors.DockerException as exc:
            said = str(exc)
            raise PushError(said, said=said) from exc
        if not digest:  # imagesmith's words, not the engine's: no ``said`` for the retry rules to read
            raise PushError("the engine's push stream ended without a manifest digest")
        return PushResult(
            reference=reference,
            digest=digest,
            bytes_pushed=sum(v for k, v in layer_bytes.items() if k in pushed),
            layers_pushed=len(pushed),
            layers_existing=len(existing),
            duration_s=time.monotonic() - start,
            pushed_ids=tuple(sorted(pushed)),
        )

    def pull(
        self,
        reference: str,
        *,
        credentials: Credentials | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> str:
        """Pull *reference* (``repo:tag`` or ``repo@sha256:…``); returns the image id.

        Stream errors become EngineError; *progress* gets each decoded chunk (status, id, progressDetail).
        """
        if "@" in reference:
            repo, tag = reference.split("@", 1)  # the Engine API takes the digest in the tag parameter
        else:
            repo, tag = split_tag(reference)
        auth = _auth_config(credentials)
        try:
            with self._answered("pull", reference):
                stream = self.client.api.pull(repo, tag=tag, stream=True, decode=True, auth_config=auth)
            for chunk in self._within(stream, "pull", reference):
                if progress is not None:
                    progress(chunk)
                if chunk.get("errorDetail") or "error" in chunk:
                    msg = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error")
                    raise EngineError(f"pull of {reference} failed: {msg}", said=str(msg))
        except docker.errors.APIError as exc:
            said = str(exc.explanation or exc)
            raise EngineError(f"pull of {reference} failed: {said}", said=said) from exc
        return str(self.client.images.get(reference).id)

    # -- images ---------------------------------------------------------------------------------------------
    def inspect(self, reference: str) -> dict[str, Any] | None:
        """The engine's image inspect data, or None when the image is not there."""
        try:
            with self._answered("image inspect", reference):
                data: dict[str, Any] = self.client.api.inspect_image(reference)  # type: ignore[no-untyped-call]
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"inspect {reference}: {exc.explanation or exc}") from exc
        return data

    def labels(self, reference: str) -> dict[str, str]:
        data = self.inspect(reference)
        if data is None:
            raise EngineError(f"image {reference} is not in the engine")
        return dict((data.get("Config") or {}).get("Labels") or {})

    def tag(self, source: str, reference: str) -> None:
        repo, tag = split_tag(reference)
        try:
            with self._answered("tag", f"{source} {reference}"):
                self.client.api.tag(source, repo, tag)
        except docker.errors.APIError as exc:
            raise EngineError(f"tag {source} as {reference}: {exc.explanation or exc}") from exc

    def remove(self, reference: str, *, force: bool = False) -> bool:
        """Remove an image reference; False when it was not there."""
        try:
            with self._answered("image rm", reference):
                self.client.api.remove_image(reference, force=force)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as exc:
            raise EngineError(f"remove {reference}: {exc.explanation or exc}") from exc
        return True

    def import_rootfs(self, tarball: Path, reference: str, changes: Sequence[str] = ()) -> str:
        """``docker import`` of a root filesystem tarball; returns the image id."""
        repo, tag = split_tag(reference)
        try:
            with self._answered("import", f"{tarball} {reference}"):
                out = self.client.api.import_image_from_file(
                    str(tarball), repository=repo, tag=tag, changes=list(changes) or None
                )
        except docker.errors.APIError as exc:
            raise EngineError(f"import {tarball} as {reference}: {exc.explanation or exc}") from exc
        if "error" in str(out).lower() and "status" not in str(out):
            raise EngineError(f"import {tarball} as {reference}: {out}")
        return str(self.client.images.get(reference).id)

    # -- run ------------------------------------------------------------------------------------------------
    def container_state(self, name: str) -> str | None:
        """``running``, ``exited``, … of container *name*, or None when the engine has no such container."""
        try:
            with self._answered("container inspect", name):
                container = self.client.containers.get(name)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(
                f"asking the engine about container {name}: {exc.explanation or exc}",
                hint="check that dockerd is up (scripts/services.sh start)",
            ) from exc
        return str(container.status)

    def has_nvidia_runtime(self) -> bool:
        with self._answered("info"):
            runtimes = self.client.info().get("Runtimes") or {}
        return "nvidia" in runtimes

    def run_container(
        self, image: str, command: Sequence[str] | str | None = None, **options: Unpack[RunOptions]
    ) -> RunResult:
        """Run *command* in a fresh container of *image* and return its exit code and output.

        *gpu_request* asks the engine's GPU runtime (the NVIDIA container toolkit, ``--gpus``) for GPUs;
        *devices* (``host:container:rwm``), *mounts* and *env* pass anything else through as they are — how
        GPUs are exposed without the toolkit is validation's business (:mod:`imagesmith.validate.devices`).
        The container is always removed, also on timeout (then killed and an EngineError raised).
        """
        gpu_request = options.get("gpu_request")
        devices = options.get("devices", ())
        shm_size = options.get("shm_size")
        ulimits = options.get("ulimits")
        mounts = options.get("mounts", ())
        ipc_mode = options.get("ipc_mode")
        network = options.get("network")
        entrypoint = options.get("entrypoint")
        user = options.get("user")
        timeout_s = options.get("timeout_s", 600)
        environment = dict(options.get("env") or {})
        kwargs: dict[str, Any] = {}
        binds = [Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only) for m in mounts]
        if gpu_request is not None:
            kwargs["device_requests"] = [_device_request(gpu_request)]
        if devices:
            kwargs["devices"] = list(devices)
        if ulimits:
            kwargs["ulimits"] = [
                Ulimit(name=n, soft=v[0], hard=v[1])
                if isinstance(v, tuple)
                else Ulimit(name=n, soft=v, hard=v)
                for n, v in ulimits.items()
            ]
        if shm_size:
            kwargs["shm_size"] = shm_size
        if ipc_mode:
            kwargs["ipc_mode"] = ipc_mode
        if network:
            kwargs["network_mode"] = network
        if entrypoint is not None:
            kwargs["entrypoint"] = entrypoint
        if user:
            kwargs["user"] = user
        start = time.monotonic()
        container = None
        try:
            container = self.client.containers.create(
                image,
                command=command if command is None or isinstance(command, str) else list(command),
                environment=environment,
                mounts=binds,
                detach=True,
                **kwargs,
            )
            container.start()
            try:
                status = container.wait(timeout=timeout_s)
            except Exception as exc:  # requests' ReadTimeout / ConnectionError from the wait call
                container.kill()
                raise EngineError(
                    f"container of {image} did not finish within {timeout_s:.0f} s; killed",
                    hint="raise the timeout or look for a hang in the command",
                ) from exc
            output = container.logs(stdout=True, stderr=True).decode(errors="replace")
            return RunResult(
                exit_code=int(status.get("StatusCode", -1)),
                output=output,
                duration_s=time.monotonic() - start,
            )
        except docker.errors.ImageNotFound as exc:
            raise EngineError(f"image {image} is not in the engine", hint="build or pull it first") from exc
        except docker.errors.APIError as exc:
            said = str(exc.explanation or exc)
            raise EngineError(f"running {image}: {said}", said=said) from exc
        finally:
            if container is not None:
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True)


_: type[ContainerEngine] = Engine  # mypy checks that Engine implements the seam


def _auth_config(credentials: Credentials | None) -> dict[str, str] | None:
    return {"username": credentials.username, "password": credentials.password} if credentials else None


def split_tag(reference: str) -> tuple[str, str]:
    """``host:5000/a/b:tag`` → (``host:5000/a/b``, ``tag``); the tag defaults to ``latest``."""
    repo, tag, digest = split_reference(reference)
    if digest is not None:
        raise EngineError(
            f"{reference}: a digest reference cannot be tagged or pushed", hint="give a name:tag reference"
        )
    return repo, tag or "latest"


class _PushRetry(Exception):
    """Push again: *last* is the failure as shown, *said* what the engine said (what decides)."""

    def __init__(self, last: str, said: str, *, immediate: bool = False) -> None:
        super().__init__(last)
        self.last = last
        self.said = said
        self.immediate = immediate


def _push_wait(backoff: float) -> Callable[[RetryCallState], float]:
    jittered = wait_exponential_jitter(multiplier=backoff, max=30.0, jitter=backoff)

    def wait(state: RetryCallState) -> float:
        failed = state.outcome.exception() if state.outcome is not None else None
        return 0.0 if isinstance(failed, _PushRetry) and failed.immediate else float(jittered(state))

    return wait


def _non_transient(message: str) -> tuple[str, str] | None:
    """(label, fix) when the push stream's error says waiting will not help (storage full, quota, denied,
    manifest or name invalid), else None."""
    from imagesmith.registry import registry_fault

    fault = registry_fault(message)
    if fault is not None and not fault.transient:
        return fault.label, fault.hint
    if _denied(message):
        return "denied", "check the registry credentials (environment or docker config) and push rights"
    return None


_PROBE_HINT = "check the registry, then rerun"


def _probe_error(probe: Callable[[], None]) -> ImagesmithError | None:
    """Ask the registry (a small write through its API) why the engine's upload failed: its error, or None."""
    try:
        probe()
    except ImagesmithError as exc:
        return exc
    return None


def _probe_fault(probe: Callable[[], None]) -> tuple[str, str] | None:
    """(what the registry said was wrong, the fix) from :func:`_probe_error`, or None."""
    refused = _probe_error(probe)
    return None if refused is None else (refused.message, refused.hint or _PROBE_HINT)


def _denied(message: str) -> bool:
    low = message.lower()
    return any(w in low for w in ("denied", "unauthorized", "authentication required", "no basic auth"))


def _push_hint(message: str, where: str) -> str:
    if _denied(message):
        return "check the registry credentials (environment or docker config) and push rights"
    if "read-only" in message.lower() or "readonly" in message.lower() or "405" in message:
        return f"registry {where} refuses writes (read-only / maintenance mode)"
    if _RATE_LIMITED.search(message):
        return (
            f"registry {where} rate-limits this account (HTTP 429): wait, or push with an account that has "
            "a higher limit, then run the build again (layers already pushed are not sent again)"
        )
    return f"check that registry {where} is up and reachable, then run the build again"
