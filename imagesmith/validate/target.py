"""What ``imagesmith validate TARGET`` points at: ``local://``, ``docker://CONTAINER``, ``ssh://user@host[:port]``
or an image reference (imagesmith starts it with the GPUs and runs the suite inside)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from imagesmith.errors import ConfigError

_IMAGE_RE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
_SSH_RE = re.compile(r"^ssh://(?:([A-Za-z0-9._-]+)@)?([A-Za-z0-9.-]+|\[[0-9a-fA-F:]+\])(?::([0-9]{1,5}))?/?$")


@dataclass(frozen=True, kw_only=True)
class Target:
    kind: str  # local | docker | ssh | image
    spec: str  # testinfra host spec (local/docker/ssh) or the image reference
    label: str


def parse_target(text: str) -> Target:
    t = text.strip()
    if t in ("local://", "local"):
        return Target(kind="local", spec="local://", label="local://")
    if t.startswith("docker://"):
        name = t.removeprefix("docker://").strip("/")
        if not name or not re.fullmatch(r"(?:[\w.-]+@)?[\w][\w.-]*", name):
            raise ConfigError(
                f"target {text!r}: docker:// needs a container name or id", hint="docker://my-container"
            )
        return Target(kind="docker", spec=f"docker://{name}", label=t)
    if t.startswith("ssh://"):
        m = _SSH_RE.match(t)
        if not m:
            raise ConfigError(
                f"target {text!r} is not ssh://user@host[:port]", hint="e.g. ssh://root@10.0.0.5:2222"
            )
        user, host, port = m.groups()
        if port and not 0 < int(port) < 65536:
            raise ConfigError(f"target {text!r}: port {port} is out of range")
        spec = "ssh://" + (f"{user}@" if user else "") + host + (f":{port}" if port else "")
        return Target(kind="ssh", spec=spec, label=t)
    if "://" in t:
        raise ConfigError(
            f"target {text!r}: unknown scheme",
            hint="use local://, docker://CONTAINER, ssh://user@host[:port] or an image",
        )
    if not _IMAGE_RE.match(t):
        raise ConfigError(
            f"target {text!r} is neither a host spec nor an image reference",
            hint="e.g. local://, docker://ctr, ssh://root@gpu-host, 127.0.0.1:5000/imagesmith/smoke:tag",
        )
    return Target(kind="image", spec=t, label=t)
