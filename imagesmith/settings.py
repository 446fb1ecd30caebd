"""The configuration layer of the environment: every ``IMAGESMITH_*`` variable the host tool reads is declared
here (:data:`VARIABLES`), and so is every other tool's variable it reads as its own setting (:data:`FOREIGN`:
pip's index and CA, the XDG folders, docker's config folder, an image's nccl-tests folder); all are read
through :func:`get` — no other module reads one from ``os.environ`` (``tests/unit/test_settings.py``). What
a value means is checked where it is used (the retry policy, the verify level, the config file's rules …),
each with its own error naming the variable; a variable read here that is not declared is a programming
error.

Variables that only pass *through* imagesmith into an image or a child process
(``IMAGESMITH_APT_MIRROR``, ``IMAGESMITH_PIP_INDEX_URL`` as build arguments, ``IMAGESMITH_NCCL_LIBDIR`` and
``IMAGESMITH_HOST_ROOT`` of the validation target, labels, the probe markers) are not configuration of this
process and are not listed.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name (or, for a family, a regular expression over names), what it
    sets, and where it is documented."""

    name: str
    what: str
    docs: str
    pattern: str = ""

    def matches(self, name: str) -> bool:
        return name == self.name or bool(self.pattern and re.fullmatch(self.pattern, name))


@dataclass(frozen=True)
class Seconds(Variable):
    """A deadline: seconds from *low* to *high*, *default* when unset (read with :func:`seconds`). Every
    deadline of imagesmith is one of these (docs/interrupts.md, *Deadlines*): the one place they are set."""

    default: float = 0.0
    low: float = 1.0
    high: float = 86400.0


VARIABLES: tuple[Variable, ...] = (
    Variable("IMAGESMITH_PROJECT", "the project root (folder with imagesmith.toml)", "docs/project.md"),
    Variable("IMAGESMITH_CONFIG", "the user config file", "imagesmith/config.py"),
    Variable("IMAGESMITH_CACHE", "the cache folder (source archives, index copies)", "docs/build.md"),
    Variable("IMAGESMITH_REGISTRY_MIRRORS", "registry mirrors for builds (HOST=MIRROR,…)", "docs/build.md"),
    Variable("IMAGESMITH_EXTRA_CA", "a CA bundle trusted by pip/apt inside builds", "docs/build.md"),
    Variable(
        "IMAGESMITH_SOURCE_MIRRORS", "URL templates tried before a source's pinned URL", "docs/build.md"
    ),
    Variable(
        "IMAGESMITH_INDEX_KEY",
        "the release index's key: its fingerprint sha256:<hex> (the trust root) or a path to it",
        "docs/release.md",
    ),
    Variable("IMAGESMITH_INDEX", "the release index pick and keys read", "docs/release.md"),
    Variable("IMAGESMITH_INDEX_URL", "the package index refresh-compat reads", "docs/compat.md"),
    Variable("IMAGESMITH_SIGNING_KEY", "the private key release and validate sign with", "docs/release.md"),
    Variable("IMAGESMITH_VERIFY", "how far copies trust blobs: head, read, full", "docs/build.md"),
    Variable("IMAGESMITH_REGISTRY_ATTEMPTS", "tries of one registry request (1-1000)", "docs/build.md"),
    Seconds(
        "IMAGESMITH_REGISTRY_DEADLINE",
        "seconds one registry operation may take (a request with its retries; a blob: with no byte moved)",
        "docs/build.md",
        default=180.0,
    ),
    Seconds(
        "IMAGESMITH_REGISTRY_STALL",
        "seconds one registry request may go without a byte from the registry (default 60)",
        "docs/interrupts.md",
        default=60.0,
    ),
    Seconds(
        "IMAGESMITH_INDEX_STALL",
        "seconds pick's download of the index, its .sig or .pub may go without a byte (default 30)",
        "docs/interrupts.md",
        default=30.0,
    ),
    Seconds(
        "IMAGESMITH_INDEX_DEADLINE",
        "seconds one download of pick's index, its .sig or .pub may take in all (default 120)",
        "docs/interrupts.md",
        default=120.0,
    ),
    Seconds(
        "IMAGESMITH_BUILD_STALL",
        "seconds a build may print nothing before it is stopped (default 3600)",
        "docs/interrupts.md",
        default=3600.0,
    ),
    Seconds(
        "IMAGESMITH_ENGINE_TIMEOUT",
        "seconds the Docker engine may leave a call (inspect, tag, a push's stream) unanswered (default 600)",
        "docs/interrupts.md",
        default=600.0,
    ),
    Variable(
        "IMAGESMITH_CERTS_D",
        "where registry CAs live (default /etc/docker/certs.d)",
        "imagesmith/registry/transport.py",
    ),
    Variable(
        "IMAGESMITH_REGISTRY_<HOST>_USERNAME / _PASSWORD",
        "a registry's credentials",
        "docs/build.md",
        pattern=r"IMAGESMITH_REGISTRY_.+_(USERNAME|PASSWORD)",
    ),
    Variable(
        "IMAGESMITH_DOCKER_CLI", "the docker CLI that drives BuildKit (empty: the SDK)", "docs/build.md"
    ),
    Variable("IMAGESMITH_SHM_MIN_BYTES", "the /dev/shm size validation asks for", "docs/validation.md"),
    Variable(
        "IMAGESMITH_VALIDATE_OPTIONS",
        "the suite's options (set by imagesmith validate)",
        "imagesmith/validate/context.py",
    ),
    Variable(
        "IMAGESMITH_LOCK_WAIT",
        "seconds a command waits for another one's project or cache lock (default 30)",
        "docs/interrupts.md",
    ),
    Variable("IMAGESMITH_TODAY", "the date support windows are judged on (tests)", "docs/compat.md"),
)
#: other tools' variables imagesmith reads as settings of its own (the environment of a child process it
#: starts is that process's, and the cloud markers ``pick`` looks for are named by ``data/platforms.toml``)
FOREIGN: tuple[Variable, ...] = (
    Variable("PIP_INDEX_URL", "the package index refresh-compat and lock --sizes read", "docs/compat.md"),
    Variable("REQUESTS_CA_BUNDLE", "the CA the package index is verified with", "docs/compat.md"),
    Variable("PIP_CERT", "pip's CA, used when REQUESTS_CA_BUNDLE is unset", "docs/compat.md"),
    Variable("SSL_CERT_FILE", "the CA used when neither of those is set", "docs/compat.md"),
    Variable("UV_NATIVE_TLS", "uv trusts the system's roots (lock adds the extra CA)", "docs/build.md"),
    Variable("UV_SYSTEM_CERTS", "the same, as newer uv releases name it", "docs/build.md"),
    Variable("XDG_CONFIG_HOME", "where the user config lives (imagesmith/config.toml)", "docs/project.md"),
    Variable("XDG_CACHE_HOME", "where the cache lives (imagesmith/)", "docs/release.md"),
    Variable("DOCKER_CONFIG", "docker's config folder (credentials)", "docs/build.md"),
    Variable("NCCL_TESTS_BIN", "an image's nccl-tests folder (its Dockerfile sets it)", "docs/validation.md"),
    Variable("SLURM_JOB_NODELIST", "the nodes of the Slurm allocation it runs in", "docs/validation.md"),
    Variable("SLURM_NODELIST", "the same, as older Slurm releases name it", "docs/validation.md"),
    Variable("SLURM_JOB_NUM_NODES", "how many nodes the Slurm allocation has", "docs/validation.md"),
)


def variable(name: str) -> Variable:
    """The declaration of *name*; KeyError when it is not declared (a bug: declare it in VARIABLES)."""
    for v in (*VARIABLES, *FOREIGN):
        if v.matches(name):
            return v
    raise KeyError(f"{name} is not a declared variable (imagesmith/settings.py: VARIABLES or FOREIGN)")


def get(name: str, default: str | None = None, *, env: Mapping[str, str] | None = None) -> str | None:
    """The value of the declared variable *name* in *env* (default: this process's environment), else
    *default*; the value as it is (callers treat an empty one as unset, as they did).

    A value that is only blanks (``" "``, a newline) or holds a control character (a newline, an ANSI escape
    sequence pasted with it) is one :class:`~imagesmith.errors.ConfigError` naming the variable, the value
    shown escaped: no value of a setting has one, and taken as it is such a value became a folder named
    ``" "`` or ``"\\n"``, or reached the terminal raw in a message. Secrets (the credential family) are
    exempt and never shown."""
    declared = variable(name)
    value = (os.environ if env is None else env).get(name)
    if value is None:
        return default
    if value and not declared.pattern:
        _check_value(name, value)
    return value


def default_seconds(name: str) -> float:
    """The default of the deadline *name* (what the HTTP policies start from: :mod:`imagesmith.http`)."""
    declared = variable(name)
    assert isinstance(declared, Seconds), name
    return declared.default


def seconds(name: str, *, env: Mapping[str, str] | None = None) -> float:
    """The deadline *name* (a :class:`Seconds` variable) in seconds: its value, else its default. A value that
    is not a number of seconds from its ``low`` to its ``high`` (``0``, ``-1``, ``nan``, ``inf``, text) is one
    :class:`~imagesmith.errors.ConfigError` naming the variable and the range."""
    declared = variable(name)
    if not isinstance(declared, Seconds):
        raise KeyError(f"{name} is not a deadline (declare it as Seconds in imagesmith/settings.py)")
    text = (get(name, env=env) or "").strip()
    if not text:
        return declared.default
    value = float(text) if re.fullmatch(r"[0-9]{1,9}(\.[0-9]{1,9})?", text, re.ASCII) else -1.0
    if not declared.low <= value <= declared.high:
        from imagesmith.errors import ConfigError

        raise ConfigError(
            f"{name}={text[:40]!r} is not a number of seconds",
            hint=f"seconds from {declared.low:g} to {declared.high:g} (default {declared.default:g}), "
            f"or unset it",
            field=name,
        )
    return value


def _check_value(name: str, value: str) -> None:
    from imagesmith.errors import ConfigError

    shown = value if len(value) <= 60 else value[:60] + "…"
    if not value.strip():
        raise ConfigError(
            f"{name}={shown!r} is blank: no value of it is only spaces or line breaks",
            hint=f"give {name} a value, or unset it (unset {name}) for the default",
        )
    control = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf")), None)
    if control is not None:
        raise ConfigError(
            f"{name}={shown!r}: holds a control character ({control!r}), which no value of it has (a "
            "newline or an escape sequence pasted with it?)",
            hint=f"set {name} to the value alone, without line breaks or control characters",
        )
