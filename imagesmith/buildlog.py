"""A build's output, read as it comes: BuildKit's ``--progress=plain`` lines turned into progress
(:class:`BuildEvent`: steps, cache hits, bytes), the tail an error shows, and the build's output deadline —
a build that prints nothing for ``IMAGESMITH_BUILD_STALL`` seconds is stopped with one error naming the stall
(issue 37). Text and pipes only: :mod:`imagesmith.engine` talks to the engine."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imagesmith.errors import BuildError, Fault


@dataclass
class BuildEvent:
    """Progress of one build: the current step, steps done/cached, bytes downloaded so far (BuildKit)."""

    step: str = ""
    steps_done: int = 0
    steps_cached: int = 0
    bytes_done: int = 0
    line: str = ""


@dataclass
class _BuildKitParser:
    """Reads ``--progress=plain`` lines. Step ids (#N) named ``[stage k/n] …`` are build steps."""

    event: BuildEvent = field(default_factory=BuildEvent)
    names: dict[str, str] = field(default_factory=dict)
    cached: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    layer_bytes: dict[str, int] = field(default_factory=dict)

    _head = re.compile(r"^#([0-9]+) (.*)$")
    _bytes = re.compile(r"^(sha256:[0-9a-f]+) ([0-9.]+)([kMG]?B) / ([0-9.]+)([kMG]?B)")

    def feed(self, line: str) -> None:
        self.event.line = line
        m = self._head.match(line)
        if not m:
            return
        sid, rest = m.groups()
        if rest.startswith("[") and not rest.startswith("[internal]") and sid not in self.names:
            if re.match(r"^\[[^\]]*[0-9]+/[0-9]+\] (?!FROM )", rest):
                self.names[sid] = rest
                self.event.step = rest[:120]
        elif rest == "CACHED" and sid in self.names:
            self.cached.add(sid)
        elif rest.startswith("DONE") and sid in self.names:
            self.done.add(sid)
        else:
            b = self._bytes.match(rest)
            if b:
                self.layer_bytes[b.group(1)] = _to_bytes(b.group(2), b.group(3))
        self.event.steps_done = len(self.done | self.cached)
        self.event.steps_cached = len(self.cached)
        self.event.bytes_done = sum(self.layer_bytes.values())


def _to_bytes(value: str, unit: str) -> int:
    scale = {"B": 1, "kB": 1000, "MB": 1000**2, "GB": 1000**3}[unit]
    return int(float(value) * scale)


def _error_tail(lines: Sequence[str], keep: int = 25) -> list[str]:
    return [f"  | {line}" for line in lines[-keep:]]


def _build_stalled(
    what: str, stall: float, tail: Sequence[str], quiet: str, log: Path | None = None
) -> BuildError:
    last = next((line for line in reversed(tail) if line.strip()), "")
    return BuildError(
        f"build of {what}: no output for {stall:g} s from {quiet}; the build was stopped"
        + (f" (last line: {last[:200]})" if last else " (it printed nothing)"),
        hint="a step hangs (a download that never ends, a command waiting for input): see "
        + (f"the full log {log}" if log else "the output above")
        + "; IMAGESMITH_BUILD_STALL gives a long silent step more time",
        fault=Fault.UNREACHABLE,
        phase="docker build",
        stalled=stall,
    )


def _lines_within(
    proc: subprocess.Popen[str], stall: float, what: str, log: Path, tail: Sequence[str]
) -> Iterator[str]:
    """*proc*'s output lines as they come; once it prints nothing for *stall* seconds (the deadline restarts
    on each line) it is killed and a BuildError names the stall (issue 37)."""
    assert proc.stdout is not None
    out = proc.stdout
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        try:
            for raw in out:
                lines.put(raw)
        finally:
            lines.put(None)

    threading.Thread(target=pump, name="docker-build-output", daemon=True).start()
    while True:
        try:
            raw = lines.get(timeout=stall)
        except queue.Empty:
            proc.kill()
            proc.wait()
            raise _build_stalled(what, stall, tail, f"docker build (pid {proc.pid})", log) from None
        if raw is None:
            return
        yield raw
