"""Credentials out of every message imagesmith prints (issue 34).

A message may quote what came from the user or a server: a URL with a password in it
(``https://user:secret@host/…``), a token in a query (``?token=…``, a presigned ``X-Amz-Signature=…``), a
registry's error body that echoes the request's ``Authorization: Basic …`` header. :func:`scrub` replaces the
secret part of each with ``<redacted>`` and leaves the rest (host, path, digest) readable. It is applied where
text leaves the program: the CLI's error rendering (:mod:`imagesmith.cli`), the warnings and notes commands
print, and release's outcome. It is pure and idempotent.
"""

from __future__ import annotations

import re
from typing import Final

REDACTED: Final[str] = "<redacted>"

#: ``scheme://userinfo@`` (userinfo holds no ``/``: ``oci://host/repo@sha256:…`` is no userinfo)
_USERINFO: Final = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)(?!<redacted>@)([^/\s@?#\"'<>]+)@")
#: a query parameter that carries a credential
_QUERY: Final = re.compile(
    r"(?i)([?&;](?:access_token|refresh_token|id_token|token|password|passwd|pwd|secret|client_secret|api_key|"
    r"apikey|key|auth|sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|"
    r"x-goog-credential)=)(?!<redacted>)[^&\s#\"'<>]+"
)
#: an Authorization (or Proxy-Authorization) header echoed in a body or a log line, with or without its scheme
_AUTHORIZATION: Final = re.compile(
    r"(?i)((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"
    r"(?!(?:(?:basic|bearer|token|digest)\s+)?<redacted>)(?:(basic|bearer|token|digest)\s+)?[^\s\"',;]+"
)
#: a JSON or form field holding a credential (``"password": "…"``, ``"token":"…"``)
_FIELD: Final = re.compile(
    r"(?i)([\"'](?:password|passwd|secret|token|access_token|refresh_token|identitytoken|auth)[\"']\s*:\s*[\"'])"
    r"(?!<redacted>)[^\"']+"
)


def _userinfo(m: re.Match[str]) -> str:
    """An ``ssh://user@host`` target's user name is no secret (it names the account validate logs in as, and
    every message about the target needs it): kept, unless a password follows it. Any other scheme's
    userinfo may be a token (``https://TOKEN@host``): redacted whole."""
    scheme, info = m.group(1), m.group(2)
    if scheme.lower() == "ssh://" and ":" not in info:
        return m.group(0)
    return f"{scheme}{REDACTED}@"


def scrub(text: str) -> str:
    """*text* with every URL password or user, credential query value, echoed Authorization header and
    credential JSON field replaced by ``<redacted>``."""
    if not text:
        return text
    text = _USERINFO.sub(_userinfo, text)
    text = _QUERY.sub(lambda m: m.group(1) + REDACTED, text)
    text = _AUTHORIZATION.sub(
        lambda m: m.group(1) + (f"{m.group(2)} " if m.group(2) else "") + REDACTED, text
    )
    return _FIELD.sub(lambda m: m.group(1) + REDACTED, text)
