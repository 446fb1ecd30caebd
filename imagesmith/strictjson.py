"""JSON read the strict way, for signed bytes: a key twice in one object, or two keys that differ only in
case, is refused instead of resolved.

Python's ``json`` keeps the last of two equal keys; other readers keep the first, and Go's ``encoding/json``
(cosign, registries, policy engines) matches object keys to fields *case-insensitively* (``PayloadType``
fills ``payloadType``; with Unicode folding, so the Kelvin sign reads as ``k`` and ``ſ`` as ``s``). A signed
document with such keys means one thing to imagesmith and another to the next tool that reads the same bytes,
so it is not accepted at all. Key comparison uses :meth:`str.casefold`, which folds those two letters too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any


class StrictJSONError(ValueError):
    """The text is JSON, but an object repeats a key or holds two keys that differ only in case."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    folded: dict[str, str] = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError(f"the key {key!r} appears twice in one object")
        other = folded.get(key.casefold())
        if other is not None:
            raise StrictJSONError(
                f"the keys {other!r} and {key!r} differ only in case (a case-insensitive reader such as Go's "
                "encoding/json takes one for the other)"
            )
        folded[key.casefold()] = key
        out[key] = value
    return out


def loads(text: str | bytes, *, parse_int: Callable[[str], Any] | None = None) -> Any:
    """:func:`json.loads` that raises :class:`StrictJSONError` on a repeated or case-colliding key (and
    ``ValueError``/``UnicodeDecodeError`` as json does on text that is no JSON). *parse_int*: as json's
    (``imagesmith.inputs.json_int_parser`` bounds integers before ``int()`` sees them)."""
    return json.loads(text, object_pairs_hook=_pairs, parse_int=parse_int)


def exact_keys(obj: dict[str, Any], known: Iterable[str], what: str) -> None:
    """Refuse a key of *obj* that is one of *known* in another case (``Payload`` for ``payload``): a
    case-insensitive reader takes it for that field, imagesmith would not."""
    names = {k.casefold(): k for k in known}
    for key in obj:
        want = names.get(key.casefold())
        if want is not None and want != key:
            raise StrictJSONError(
                f"{what} has the key {key!r}, not {want!r} (a case-insensitive reader such as Go's "
                f"encoding/json reads it as {want!r})"
            )
