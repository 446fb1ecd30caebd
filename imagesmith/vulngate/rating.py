"""How an advisory is rated: the first source that rates it (:func:`_rated`), the highest of several, and
the CVSS v3 base score of a vector (:func:`cvss3_base_score`) and its qualitative rating.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final

from imagesmith.vulngate.records import _rank, normalize_severity


def _rated(*candidates: Any) -> str:
    """The first of *candidates* (severity words, in order of authority) that rates anything: a word that
    reads as ``unknown`` ("Unknown", "", "untriaged", none) is no rating and never hides one given by a later
    source — a Debian match grype rates "Unknown" whose NVD record says Critical is critical."""
    for c in candidates:
        severity = normalize_severity(c)
        if severity != "unknown":
            return severity
    return "unknown"


def _cvss_vectors_rating(vectors: Iterable[Any]) -> str:
    """The rating of the highest CVSS v3 base score among *vectors* (computed from the vector, never a score
    field a report may fill with anything), ``unknown`` when none is a v3 vector."""
    scores = [s for v in vectors if isinstance(v, str) and (s := cvss3_base_score(v)) is not None]
    return cvss_rating(max(scores)) if scores else "unknown"


def _highest(severities: Iterable[str]) -> str:
    return max(severities, key=_rank, default="unknown")


#: CVSS v3.x base metric weights (FIRST, CVSS v3.1 Specification, section 7.4)
_CVSS3: Final[dict[str, dict[str, float]]] = {
    "AV": {"N": 0.85, "A": 0.62, "L": 0.55, "P": 0.2},
    "AC": {"L": 0.77, "H": 0.44},
    "UI": {"N": 0.85, "R": 0.62},
    "C": {"H": 0.56, "L": 0.22, "N": 0.0},
    "I": {"H": 0.56, "L": 0.22, "N": 0.0},
    "A": {"H": 0.56, "L": 0.22, "N": 0.0},
}


def _roundup(x: float) -> float:
    """CVSS v3.1's Roundup: the smallest one-decimal number >= *x* (free of float noise)."""
    n = round(x * 100000)
    return n / 100000.0 if n % 10000 == 0 else (math.floor(n / 10000) + 1) / 10.0


def cvss3_base_score(vector: str) -> float | None:
    """The base score of a CVSS v3.0/v3.1 vector (``CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H`` → 9.8),
    or None when it is not one (another version, a base metric missing or unknown)."""
    parts = vector.strip().split("/")
    if not parts or parts[0] not in ("CVSS:3.0", "CVSS:3.1"):
        return None
    metrics: dict[str, str] = {}
    for part in parts[1:]:
        key, sep, value = part.partition(":")
        if not sep or key in metrics:
            return None
        metrics[key] = value
    try:
        scope = metrics["S"]
        if scope not in ("U", "C"):
            return None
        changed = scope == "C"
        pr = {"N": 0.85, "L": 0.68 if changed else 0.62, "H": 0.5 if changed else 0.27}[metrics["PR"]]
        w = {k: table[metrics[k]] for k, table in _CVSS3.items()}
    except KeyError:
        return None
    iss = 1 - (1 - w["C"]) * (1 - w["I"]) * (1 - w["A"])
    impact = 6.42 * iss if scope == "U" else 7.52 * (iss - 0.029) - 3.25 * (iss - 0.02) ** 15
    if impact <= 0:
        return 0.0
    exploitability = 8.22 * w["AV"] * w["AC"] * pr * w["UI"]
    total = impact + exploitability if scope == "U" else 1.08 * (impact + exploitability)
    return _roundup(min(total, 10.0))


def cvss_rating(score: float) -> str:
    """CVSS's qualitative rating of a base score (None 0.0 reads as unknown here: it rates nothing)."""
    if score >= 9.0:
        return "critical"
    if score >= 7.0:
        return "high"
    if score >= 4.0:
        return "medium"
    if score > 0.0:
        return "low"
    return "unknown"
