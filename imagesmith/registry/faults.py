"""The registry fault and retry policy: how hard a request is tried (:class:`RetryPolicy`, the
``IMAGESMITH_REGISTRY_ATTEMPTS`` / ``_DEADLINE`` overrides, ``Retry-After``), what is worth retrying
(:class:`_Transient`), and what a registry's error body means (:func:`registry_fault`, the fix line; storage
full, quota, invalid name or manifest are never retried)."""

from __future__ import annotations

import email.utils
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import requests
import urllib3
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base

from imagesmith import http, settings
from imagesmith.errors import ConfigError, Fault
from imagesmith.inputs import is_digits


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How hard one registry request is tried: ``attempts`` tries at most, waits from ``backoff`` doubling up
    to ``max_wait`` (plus up to ``backoff`` of jitter), never past ``deadline`` seconds for the operation (one
    request with its retries, one upload chunk, one blob commit), each request bounded by
    ``connect_timeout`` / ``read_timeout``. The defaults ride out an outage of about a minute;
    ``$IMAGESMITH_REGISTRY_ATTEMPTS`` and ``$IMAGESMITH_REGISTRY_DEADLINE`` change them."""

    attempts: int = http.REGISTRY.attempts
    backoff: float = http.REGISTRY.backoff
    max_wait: float = http.REGISTRY.max_wait
    deadline: float = http.REGISTRY.deadline
    connect_timeout: float = http.REGISTRY.connect_timeout
    read_timeout: float = http.REGISTRY.read_timeout
    #: times one blob upload may restart from its first byte: the registry lost the session, or cannot resume
    #: it (docker-registry 2.8 cannot after a PATCH whose answer was lost: its signed session state is stale)
    restarts: int = 10

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetryPolicy:
        env = os.environ if env is None else env
        policy = cls()
        attempts = (settings.get("IMAGESMITH_REGISTRY_ATTEMPTS", env=env) or "").strip()
        if attempts:
            if not is_digits(attempts) or not 1 <= int(attempts) <= 1000:
                raise ConfigError(
                    f"IMAGESMITH_REGISTRY_ATTEMPTS={attempts[:40]!r} is not a number of attempts",
                    hint=f"a whole number from 1 to 1000 (default {cls.attempts}), or unset it",
                )
            policy = replace(policy, attempts=int(attempts))
        deadline = settings.seconds("IMAGESMITH_REGISTRY_DEADLINE", env=env)
        stall = settings.seconds("IMAGESMITH_REGISTRY_STALL", env=env)
        return replace(
            policy,
            deadline=deadline,
            read_timeout=stall,
            connect_timeout=min(policy.connect_timeout, stall),
        )

    def retrying(self, retry: Any = None) -> Retrying:
        backoff = wait_exponential_jitter(multiplier=self.backoff, max=self.max_wait, jitter=self.backoff)

        def wait(state: RetryCallState) -> float:
            # a registry that says how long to wait (429/503 with Retry-After) is waited for that long
            asked = _asked_wait(state)
            return max(float(backoff(state)), asked or 0.0)

        return Retrying(
            stop=stop_after_attempt(self.attempts)
            | stop_after_delay(self.deadline)
            | _StopPastDeadline(self.deadline),
            wait=wait,
            retry=retry or retry_if_exception_type(_Transient),
            reraise=True,
        )

    def timeout(self, started: float) -> tuple[float, float]:
        """(connect, read) timeouts for a request of an operation that started at *started*."""
        left = max(1.0, self.deadline - (time.monotonic() - started))
        return (min(self.connect_timeout, left), min(self.read_timeout, left))


#: the largest manifest read (:data:`imagesmith.http.REGISTRY_MANIFEST`): registries refuse to store larger
#: ones, so a larger answer is not an image manifest and is not read into memory
MAX_MANIFEST_BYTES: int = http.REGISTRY_MANIFEST.max_bytes or 0
#: the largest other answer read whole, a tag list, a token (:data:`imagesmith.http.REGISTRY`)
MAX_ANSWER_BYTES: int = http.REGISTRY.max_bytes or 0
#: the most of an error answer read (of a streamed request: a blob GET whose error body is endless)
ERROR_BODY_BYTES = 1 << 20


class _TooLarge(http.TooLarge):
    """An answer past the size cap of what was asked for: never read further, never retried; *size* is what
    its ``Content-Length`` said, when it said it."""

    def __init__(self, limit: int, size: int | None) -> None:
        super().__init__(limit)
        self.size = size

    def describe(self, what: str = "the answer") -> str:
        said = f"{self.size} bytes (Content-Length)" if self.size is not None else "longer"
        return f"{what} is {said}, past the {self.limit >> 20} MiB cap; it was not read"


class _Transient(Exception):
    """A fault worth retrying (5xx, 429, timeout, reset). Carries the last description, the seconds the
    registry asked to wait (``Retry-After``), and the host at fault when it is not the registry's own (a token
    service, blob storage a redirect led to)."""

    def __init__(
        self,
        what: str,
        *,
        retry_after: float | None = None,
        elsewhere: str | None = None,
        stalled: float | None = None,
        phase: str | None = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.retry_after = retry_after
        #: the host at fault when it is not the registry's own, as the fix line names it
        self.elsewhere = elsewhere
        #: the seconds the registry sent no byte for, when that was the fault (a read timeout: a stall)
        self.stalled = stalled
        #: the request phase that failed (``manifest PUT``, ``token fetch``), as the error names it
        self.phase = phase


def _asked_wait(state: RetryCallState) -> float | None:
    """The ``Retry-After`` seconds of the attempt that just failed, or None."""
    exc = state.outcome.exception() if state.outcome is not None and state.outcome.failed else None
    return exc.retry_after if isinstance(exc, _Transient) else None


class _StopPastDeadline(stop_base):
    """Stop when the registry's ``Retry-After`` would end past the deadline: give up now, saying so."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        asked = _asked_wait(retry_state)
        return asked is not None and (retry_state.seconds_since_start or 0.0) + asked > self.deadline


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: delta-seconds (``120``) or an HTTP-date (``Wed, 21 Oct
    2015 07:28:00 GMT``, RFC 9110 10.2.3); None when absent or unreadable (then the backoff alone counts)."""
    if not value or not value.strip():
        return None
    text = value.strip()
    if is_digits(text):
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True)
class RegistryFault:
    """A registry error body translated: what it means, the fix, and whether waiting can help."""

    label: Fault
    hint: str
    transient: bool = False


_FAULTS: tuple[tuple[re.Pattern[str], RegistryFault], ...] = (
    (
        re.compile(r"no space left on device|ENOSPC|disk full|insufficient storage|not enough space", re.I),
        RegistryFault(
            Fault.STORAGE_FULL,
            "free space on the registry's storage (delete old tags and run its garbage collection, or grow "
            "the disk), then rerun; the upload was abandoned and cancelled",
        ),
    ),
    (
        re.compile(r"quota|storage limit|exceeds? (the )?(limit|allowance)|TOOMANYREQUESTS.*storage", re.I),
        RegistryFault(
            Fault.QUOTA_EXCEEDED,
            "raise the project/repository quota in the registry (or delete old tags), then rerun",
        ),
    ),
    (
        re.compile(r"BLOB_UNKNOWN|blob unknown", re.I),
        RegistryFault(
            Fault.BLOB_UNKNOWN,
            "the registry lacks a blob the manifest names (an interrupted copy, or garbage collection "
            "removed it): rerun, which copies the blob again",
        ),
    ),
    (
        re.compile(r"NAME_INVALID|invalid repository name", re.I),
        RegistryFault(
            Fault.REPOSITORY_NAME_INVALID,
            "repository names are lowercase [a-z0-9] parts joined by '/', '.', '_' or '-': fix namespace/"
            "repository in the registries file",
        ),
    ),
    (
        re.compile(r"NAME_UNKNOWN|repository name not known", re.I),
        RegistryFault(
            Fault.REPOSITORY_UNKNOWN,
            "create the repository first (ECR: aws ecr create-repository; Harbor/ACR/SWR: the project or "
            "namespace), or fix namespace/repository in the registries file",
        ),
    ),
    (
        re.compile(r"MANIFEST_INVALID|manifest invalid|MANIFEST_BLOB_UNKNOWN", re.I),
        RegistryFault(
            Fault.MANIFEST_INVALID,
            "the registry refused the manifest (a blob it names is missing, or the registry does not accept "
            "its media type): rerun to copy missing blobs, or drop this registry from the cell",
        ),
    ),
    (
        re.compile(r"\bDENIED\b|requested access to the resource is denied", re.I),
        RegistryFault(Fault.DENIED, "check the account's push/pull rights on this repository"),
    ),
)


def registry_fault(text: str) -> RegistryFault | None:
    """The known registry error in *text* (an error body, a push stream's message), or None."""
    for pattern, fault in _FAULTS:
        if pattern.search(text):
            return fault
    return None


def _error_body(resp: requests.Response) -> bytes:
    """The error answer's body: what was read already, or (a streamed answer) at most
    :data:`ERROR_BODY_BYTES` of it — never an endless body read whole."""
    kept = getattr(resp, "imagesmith_error_body", None)
    if isinstance(kept, bytes):
        return kept
    if getattr(resp, "_content_consumed", True) is not False or getattr(resp, "raw", None) is None:
        return resp.content or b""
    try:
        body = resp.raw.read(ERROR_BODY_BYTES, decode_content=True) or b""
    except (urllib3.exceptions.HTTPError, OSError):
        body = b""
    resp.imagesmith_error_body = body  # type: ignore[attr-defined]  # read once: the next look gets it
    return body


def _error_codes(resp: requests.Response) -> tuple[list[str], str]:
    body = _error_body(resp)
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(body)
        errors = (data.get("errors") if isinstance(data, dict) else None) or []
    except ValueError:
        return [], text[:300].strip()
    codes = [str(e.get("code", "")) for e in errors if isinstance(e, dict)]
    messages = "; ".join(
        f"{e.get('code', '')}: {e.get('message', '')}" + _detail(e.get("detail"))
        for e in errors
        if isinstance(e, dict)
    )
    return codes, messages or text[:300].strip()


def lasting_fault(status: int, message: str) -> RegistryFault | None:
    """The fault a 5xx answer's body names when waiting cannot help (storage full, quota, …): such an answer
    is not retried but reported as that fault (:func:`answer_codes`); None otherwise (429 is waited for)."""
    if status < 500:
        return None
    fault = registry_fault(message)
    return fault if fault is not None and not fault.transient else None


def answer_codes(resp: requests.Response) -> tuple[list[str], str]:
    """The error codes and message of an answer, as :meth:`~imagesmith.registry.transport.Transport._check`
    and the upload branch on them: a 5xx naming a lasting fault (:func:`lasting_fault`) has no codes (what
    counts is the fault, not an ``UNAUTHORIZED`` or ``UNSUPPORTED`` beside it) and its message cut at 300
    characters."""
    codes, message = _error_codes(resp)
    if lasting_fault(resp.status_code, message) is not None:
        return [], message[:300].strip()
    return codes, message


def _detail(detail: Any) -> str:
    """An error's ``detail`` for a message: text as is; docker-registry's storage-driver errors
    (``{"DriverName": …, "Enclosed": {"Op": "write", "Err": 28}}``) as the errno's name."""
    if isinstance(detail, str) and detail:
        return f" ({detail})"
    if isinstance(detail, dict):
        enclosed = detail.get("Enclosed")
        if isinstance(enclosed, dict) and isinstance(enclosed.get("Err"), int):
            errno_name = {
                28: "no space left on device",
                122: "disk quota exceeded",
                30: "read-only file system",
            }
            err = int(enclosed["Err"])
            what = errno_name.get(err, f"errno {err}")
            return f" ({enclosed.get('Op', 'storage')} {enclosed.get('Path', '')}: {what})"
        if detail:
            return f" ({json.dumps(detail, sort_keys=True)[:200]})"
    return ""
