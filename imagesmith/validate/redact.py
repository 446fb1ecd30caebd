"""What of a validation report may leave the validation host: the copy ``imagesmith release`` attaches to
images in registries carries no host names, ssh targets, identity-file or ssh-config paths, user names or
local folders (issue 17). The local ``report.json`` keeps them: it is the operator's evidence.

:func:`redact_report` is pure and idempotent (a redacted report redacts to itself), so a report read back from
a registry hashes the same as the one attached.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable
from typing import Any, Final

REDACTED: Final[str] = "<redacted>"
#: option fields that name this machine's files, folders or the target's login
_OPTION_PATHS: Final[tuple[str, ...]] = ("ssh_config", "ssh_identity_file", "report_dir", "nccl_tests")
#: figure names that hold the target's own name
_HOST_FIGURES: Final[tuple[str, ...]] = ("hostname", "host", "nodename")
#: a user's home folder in a path (/home/alice/…, /Users/alice/…, /root is not a user name)
_HOME: Final = re.compile(r"(/home/|/Users/)(?!<redacted>)[^/\s\"'<>]+")
#: user@host (an ssh target, an e-mail address), never repository@sha256:… nor a pip "name @ url" line
_USER_AT_HOST: Final = re.compile(r"(?<![\w/.@-])[A-Za-z_][\w.-]*@(?!sha256:)[A-Za-z0-9][\w.-]*(:[0-9]+)?")
#: an ssh:// target in any text
_SSH_URL: Final = re.compile(r"ssh://(?!<redacted>)[^\s\"']+")


def _ssh_parts(target: str) -> list[str]:
    """The user, host and host:port of an ``ssh://user@host:port`` target (what must not leave)."""
    if not target.startswith("ssh://"):
        return []
    rest = target.removeprefix("ssh://").split("?", 1)[0].rstrip("/")
    user, _, hostport = rest.rpartition("@")
    host = hostport.rsplit(":", 1)[0] if hostport.count(":") == 1 else hostport
    return [p for p in (rest, hostport, host, user) if len(p) >= 2]


def _checks(report: dict[str, Any]) -> list[dict[str, Any]]:
    checks = report.get("checks")
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []


def _secrets(report: dict[str, Any]) -> list[str]:
    """The literal values to scrub from every string of *report*, longest first."""
    raw = report.get("options")
    options: dict[str, Any] = raw if isinstance(raw, dict) else {}
    found: list[str] = []
    for value in (report.get("target"), options.get("target"), options.get("target_label")):
        if isinstance(value, str):
            found += _ssh_parts(value)
    for key in _OPTION_PATHS:
        value = options.get(key)
        if isinstance(value, str) and len(value) >= 2:
            found.append(value)
    for check in _checks(report):
        figures = check.get("figures")
        if isinstance(figures, dict):
            found += [
                v
                for k in _HOST_FIGURES
                if isinstance(v := figures.get(k), str) and len(v) >= 2 and v != REDACTED
            ]
    return sorted(set(found), key=len, reverse=True)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """*text* with each of *secrets* and every ssh target, user@host and home-folder user name replaced."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    text = _SSH_URL.sub("ssh://" + REDACTED, text)
    text = _USER_AT_HOST.sub(REDACTED, text)
    return _HOME.sub(lambda m: m.group(1) + REDACTED, text)


def _walk(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, list):
        return [_walk(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, secrets) for k, v in value.items()}
    return value


def redact_report(report: dict[str, Any]) -> dict[str, Any]:
    """A copy of *report* fit to be pushed to a registry: the fields that name the machine, its users and its
    files are replaced by ``<redacted>``, and so is every occurrence of their values in any other string
    (messages, logs, fixes); ssh targets, ``user@host`` and home-folder user names anywhere as well. Verdict,
    checks, figures and the GPU inventory are kept."""
    secrets = _secrets(report)
    out: dict[str, Any] = _walk(report, secrets)
    options = out.get("options")
    if isinstance(options, dict):
        for key in _OPTION_PATHS:
            if options.get(key):
                options[key] = REDACTED
    for check in _checks(out):
        figures = check.get("figures")
        if isinstance(figures, dict):
            for key in _HOST_FIGURES:
                if isinstance(figures.get(key), str) and figures[key]:
                    figures[key] = REDACTED
    return out


def redact_report_bytes(body: bytes) -> bytes:
    """:func:`redact_report` of a report.json's bytes, as canonical JSON (two-space indent, newline)."""
    data = json.loads(body)
    if not isinstance(data, dict):
        return body
    return (json.dumps(redact_report(data), indent=2, ensure_ascii=False) + "\n").encode()


# ------------------------------------------------------------------------------------------------------------
# the cluster report (issue 32): what ``imagesmith validate ssh://n1 ssh://n2 … --sign-key`` signs, and
# ``imagesmith release`` attaches to the image in every registry (``sha256-<hex>.cluster``)

#: an IPv4 address anywhere in a text (a node's address, an OOB interface in an NCCL line)
_IPV4: Final = re.compile(
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(?![\w.])"
)
#: a run of hex digits, colons and dots with two colons or more: an IPv6 address when ``ipaddress`` says so
#: (a PCI bus id, a MAC address, a time of day are not); also after ``name:`` (NCCL's ``ib0:fe80::…<0>``)
_IPV6_CANDIDATE: Final = re.compile(
    r"(?:(?<![\w:.%])|(?<=\w:))[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[\w.-]+)?"
)


def _redact_ipv6(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        body = token.rstrip(".")
        address = body.partition("%")[0]
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return token
        return REDACTED + token[len(body) :]

    return _IPV6_CANDIDATE.sub(one, text)


#: node fields that name the machine itself (its address, its systemd machine id, the local folder of its
#: suite's report, named after its ssh target): replaced whole
_NODE_IDS: Final[tuple[str, ...]] = ("address", "machine_id", "node_report")


def _node_pseudonyms(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(value, pseudonym) of every node name, its ssh host and host:port, its address, and every host a
    collective rank names, longest value first: node *i* is ``node-<i>`` (in the report's order), a rank host
    that is no node's ssh host ``host-<k>`` (in order of first appearance); a login user is ``<redacted>``."""
    nodes = report.get("nodes")
    pairs: dict[str, str] = {}
    for i, node in enumerate(n for n in (nodes if isinstance(nodes, list) else []) if isinstance(n, dict)):
        alias = f"node-{i + 1}"
        name = node.get("name")
        if isinstance(name, str) and name:
            parts = _ssh_parts("ssh://" + name)
            user = name.rpartition("@")[0]
            for part in [name, *parts]:
                if part and part != user:
                    pairs.setdefault(part, alias)
            if len(user) >= 2:
                pairs.setdefault(user, REDACTED)
        address = node.get("address")
        if isinstance(address, str) and len(address) >= 2 and address != REDACTED:
            pairs.setdefault(address, alias)
    collective = report.get("collective")
    runs = collective.get("runs") if isinstance(collective, dict) else None
    hosts = [
        rank["host"]
        for run in (runs if isinstance(runs, list) else [])
        if isinstance(run, dict) and isinstance(run.get("ranks"), list)
        for rank in run["ranks"]
        if isinstance(rank, dict) and isinstance(rank.get("host"), str) and rank["host"]
    ]
    others = [h for h in dict.fromkeys(hosts) if h not in pairs]
    for k, host in enumerate(others):
        pairs[host] = f"host-{k + 1}"
    return sorted(pairs.items(), key=lambda p: len(p[0]), reverse=True)


def _as_word(value: str) -> re.Pattern[str]:
    """*value* where it stands alone (``n1`` in ``n1↔n2`` or ``root@n1:22``, never in ``ens1n1``)."""
    return re.compile(r"(?<![\w.-])" + re.escape(value) + r"(?![\w-])")


def _walk_cluster(value: Any, words: list[tuple[re.Pattern[str], str]]) -> Any:
    if isinstance(value, str):
        for pattern, alias in words:
            value = pattern.sub(alias, value)
        return _IPV4.sub(REDACTED, _redact_ipv6(redact_text(value)))
    if isinstance(value, list):
        return [_walk_cluster(v, words) for v in value]
    if isinstance(value, dict):
        return {k: _walk_cluster(v, words) for k, v in value.items()}
    return value


def redact_cluster(report: dict[str, Any]) -> dict[str, Any]:
    """A copy of a cluster report fit to leave the cluster (signed, attached to the image in registries):
    each node's name, ssh host and address is ``node-<i>`` wherever it appears (promises, bandwidth pairs,
    the collective's argv and ranks), another host a rank names ``host-<k>``, login users, IPv4 and IPv6
    addresses, ssh targets and home-folder user names ``<redacted>``; each node's ``address``, ``machine_id``
    and ``node_report`` and its RoCE GIDs (which embed its IPv4 address) ``<redacted>``. Node count, GPU
    inventory, fabric, figures and verdicts are kept (the summary is unchanged). Pure and idempotent (a
    redacted report redacts to itself: release checks a signed report that way, :func:`cluster_redacted`)."""
    words = [(_as_word(value), alias) for value, alias in _node_pseudonyms(report)]
    out: dict[str, Any] = _walk_cluster(report, words)
    for node in out.get("nodes") or ():
        if not isinstance(node, dict):
            continue
        for key in _NODE_IDS:
            if isinstance(node.get(key), str) and node[key]:
                node[key] = REDACTED
        for port in node.get("rdma_ports") or ():
            if isinstance(port, dict) and isinstance(port.get("roce_v2_gids"), list):
                port["roce_v2_gids"] = [REDACTED for _ in port["roce_v2_gids"]]
    return out


def cluster_redacted(report: dict[str, Any]) -> bool:
    """*report* names no node host, address or user (:func:`redact_cluster` leaves it as it is)."""
    return redact_cluster(report) == report
