"""Writing drafts into ``data/torch.toml``: a new release's rows, or one field edited in place with its
source note (:func:`write`).
"""

from __future__ import annotations

import datetime
import itertools
import json
from pathlib import Path

from imagesmith.errors import ConfigError
from imagesmith.refresh.diff import Result, _excluded
from imagesmith.refresh.drafts import Draft
from imagesmith.refresh.pypi import CUDA_LIBRARY

# ------------------------------------------------------------------------------------------------------------
# writing drafts into torch.toml


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _filename_source(d: Draft, today: str) -> str:
    return f"PyPI file {d.wheel.filename} (METADATA Requires-Dist, cp tags), read {today} by refresh-compat"


def release_toml(d: Draft, today: str) -> str:
    """A ``[[release]]`` block for a release the data lacks: ``verified = false``, the file in ``source``."""
    tv = d.torchvision[0] if d.torchvision else "?"
    lines = ["", "[[release]]", f"version = {_q(d.version)}", f"torchvision = {_q(tv)}"]
    if _excluded(d.torchvision_python):
        lines.append(f"torchvision_python = {_q(d.torchvision_python or '')}")
    if d.torchaudio:
        lines.append(f"torchaudio = {_q(d.torchaudio[0])}")
        if not any(t.platform != "any" for t in d.torchaudio[1].tags) or d.torchaudio[1].cpython is None:
            lines.append("torchaudio_local = false")
    pair = "; ".join(
        f"{name} {c[0]}: PyPI file {c[1].filename} requires torch{c[2]}"
        for name, c in (("torchvision", d.torchvision), ("torchaudio", d.torchaudio))
        if c
    )
    lines += [
        f"python = {_q(d.python or '')}",
        f"pypi_default = {_q(d.variant or '')}",
        "verified = false",
        f"source = {_q(_filename_source(d, today) + ('; ' + pair if pair else ''))}",
        "",
        "[[release.variant]]",
        f"name = {_q(d.variant or '')}",
        f"cuda = {_q(d.pins.cuda or '')}",
        "arch_list = [" + ", ".join(_q(a) for a in (d.arch.arch_list() if d.arch else [])) + "]",
        f"nccl = {_q(d.pins.nccl or '')}",
        f"cudnn = {_q(d.pins.cudnn or '')}",
        "verified = false",
        f"source = {_q(_variant_source(d, today))}",
    ]
    return "\n".join(lines) + "\n"


def _variant_source(d: Draft, today: str) -> str:
    text = f"nccl/cudnn/cuda: {_filename_source(d, today)}"
    if d.pins.cuda_pin:
        text += f" ({d.pins.cuda_pin})"
    if d.arch:
        text += (
            f"; arch: fatbin headers of {CUDA_LIBRARY} in that wheel ({d.arch.fatbins} fatbins"
            + (f"; also {', '.join(d.arch.extras())}" if d.arch.extras() else "")
            + ")"
        )
    return text


def edit_field(text: str, version: str, variant: str | None, key: str, value: str, note: str) -> str:
    """Set ``key`` of release *version* (or of its *variant*) to *value*, mark that row ``verified = false``
    and append *note* to its ``source``; every other line stays as it is."""
    lines = text.split("\n")
    blocks = [i for i, line in enumerate(lines) if line.strip() in ("[[release]]", "[[release.variant]]")]
    blocks.append(len(lines))
    target = None
    in_release = False
    for start, end in itertools.pairwise(blocks):
        body = lines[start:end]
        if lines[start].strip() == "[[release]]":
            in_release = any(line == f"version = {_q(version)}" for line in body)
            if in_release and variant is None:
                target = (start, end)
                break
        elif in_release and variant is not None and any(line == f"name = {_q(variant)}" for line in body):
            target = (start, end)
            break
    if target is None:
        raise ConfigError(
            f"torch.toml has no row for torch {version} {variant or ''}".strip(),
            hint="add the row by hand (its variant block), then run refresh-compat --write again",
        )
    start, end = target
    rendered = (
        "[" + ", ".join(_q(a.strip()) for a in value.split(",")) + "]" if key == "arch_list" else _q(value)
    )
    seen = set()
    for i in range(start, end):
        name = lines[i].split("=", 1)[0].strip()
        if name == key:
            lines[i] = f"{key} = {rendered}"
            seen.add(key)
        elif name == "verified":
            lines[i] = "verified = false"
            seen.add("verified")
        elif name == "source":
            old = json.loads(lines[i].split("=", 1)[1].strip())
            lines[i] = f"source = {_q(old + '; ' + note)}"
            seen.add("source")
    if "verified" not in seen:
        at = next(i for i in range(start, end) if lines[i].startswith("source ="))
        lines.insert(at, "verified = false")
    if key not in seen:
        at = next(i for i in range(start, end) if lines[i].startswith("verified ="))
        lines.insert(at, f"{key} = {rendered}")
    return "\n".join(lines)


def write(result: Result, path: Path, today: str | None = None) -> list[str]:
    """Apply *result* to the torch.toml at *path*: new releases appended, differing fields edited in place
    (rows never removed). Returns one line per change."""
    today = today or datetime.datetime.now(datetime.timezone.utc).date().isoformat()  # UTC, as every date
    text = path.read_text()
    done = []
    missing = {r.release for r in result.rows if r.field == "variant" and r.status == "differs"}
    for row in result.rows:
        if (
            row.status != "differs"
            or row.pypi is None
            or row.field in ("variant", "torchvision", "torchvision_python", "torchaudio")
        ):
            continue
        if row.field == "pypi_default" and row.release in missing:
            continue  # the data has no such variant: a person adds it (printed)
        d = result.drafts[row.release]
        note = f"refresh-compat {today}: {row.field} {row.data} → {row.pypi} per PyPI file {d.wheel.filename}"
        text = edit_field(
            text,
            row.release,
            row.variant if row.field not in ("python", "pypi_default") else None,
            row.field,
            row.pypi,
            note,
        )
        done.append(
            f"torch {row.release} {row.variant or ''} {row.field}: {row.data} → {row.pypi}".replace("  ", " ")
        )
    for version in result.new:
        text = text.rstrip("\n") + "\n" + release_toml(result.drafts[version], today)
        done.append(f"torch {version}: new release row (verified = false)")
    path.write_text(text)
    return done
