"""dpkg's version ordering (deb-version(7); lib/dpkg/version.c ``verrevcmp``): :func:`dpkg_compare`."""

from __future__ import annotations

from imagesmith.inputs import is_digits

# ------------------------------------------------------------------------------------------------------------
# dpkg's version ordering (deb-version(7); lib/dpkg/version.c verrevcmp)


def _order(c: str) -> int:
    if c == "~":
        return -1
    if is_digits(c):
        return 0
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not is_digits(a[i])) or (j < len(b) and not is_digits(b[j])):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and is_digits(a[i]) and j < len(b) and is_digits(b[j]):
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and is_digits(a[i]):
            return 1
        if j < len(b) and is_digits(b[j]):
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_deb(v: str) -> tuple[int, str, str]:
    epoch = 0
    if ":" in v:
        e, v = v.split(":", 1)
        epoch = int(e) if is_digits(e) else 0
    upstream, _, revision = v.rpartition("-") if "-" in v else (v, "", "")
    return epoch, upstream, revision


def dpkg_compare(a: str, b: str) -> int:
    """-1, 0 or 1 as dpkg --compare-versions orders Debian versions *a* and *b*."""
    ea, ua, ra = _split_deb(a)
    eb, ub, rb = _split_deb(b)
    if ea != eb:
        return -1 if ea < eb else 1
    r = _verrevcmp(ua, ub) or _verrevcmp(ra, rb)
    return (r > 0) - (r < 0)
