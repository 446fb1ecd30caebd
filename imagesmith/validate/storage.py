"""Storage: what the data folder, the checkpoint folder and /dev/shm deliver — sequential 1 MiB read and
write, 4 KiB random-read IOPS and their p99 latency (fio, ``--output-format=json``, each job time-bounded), a
checkpoint-sized write + fsync + read timed with dd, and the free space against a declared need.

Without fio on the target, dd's write+fsync and read (O_DIRECT where the file system allows it) give the
sequential figures and IOPS/latency are "not measured" (the report says so). Judged against the listing's
promises (:mod:`imagesmith.validate.listing`), else against :data:`DEFAULT_READ_FLOOR` /
:data:`DEFAULT_WRITE_FLOOR` (a warning).

Pure: :func:`storage_command` is what the check runs, :func:`parse_storage` reads its output, so unit tests
replay recorded fio JSON and dd lines.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from imagesmith.inputs import is_digits

#: sequential throughput below which a data or checkpoint folder warns when the listing promised none:
#: a local NVMe gives 2–7 GB/s, network storage of a GPU cloud 1–10 GB/s; below 1 GB/s read, an 8-GPU job
#: waits on its data, below 0.5 GB/s write a 100 GB checkpoint takes minutes
DEFAULT_READ_FLOOR = 1e9
DEFAULT_WRITE_FLOOR = 0.5e9
#: seconds per fio job (write, read, random read); the size of fio's file and of the timed checkpoint
#: (``--checkpoint-size``)
FIO_RUNTIME_S = 5
CHECKPOINT_MIB = 1024
MARK = "# imagesmith-storage "


def dd_timeout_s(checkpoint_mib: int) -> int:
    """Seconds one dd of *checkpoint_mib* may take (a folder slower than 20 MB/s fails on its figures)."""
    return 120 + checkpoint_mib * 2**20 // (20 * 10**6)


def storage_timeout_s(checkpoint_mib: int) -> int:
    """The bound of the whole :func:`storage_command` (fio's three jobs, two dd, the file's layout)."""
    return 2 * dd_timeout_s(checkpoint_mib) + FIO_RUNTIME_S * 3 + 180


def storage_command(path: str, *, direct: bool = True, checkpoint_mib: int = CHECKPOINT_MIB) -> str:
    """The shell command measuring *path*: free space, fio (when on PATH) and dd, on one file in a scratch
    folder it removes; the file is at most a third of the folder's free space (a measurement never fills a
    disk; the size used is printed). Every step is bounded by ``timeout``."""
    q = shlex.quote(path)
    d = f"{q}/.imagesmith-storage.$$"
    dflag = "1" if direct else "0"
    fio = (
        f"timeout -k 5 {FIO_RUNTIME_S * 3 + 150} fio --output-format=json --filename={d}/fio.dat "
        f'--size="$n"M --runtime={FIO_RUNTIME_S} --time_based --direct={dflag} --end_fsync=1 '
        "--name=seqwrite --rw=write --bs=1M --ioengine=psync "
        "--name=seqread --stonewall --rw=read --bs=1M --ioengine=psync "
        "--name=randread --stonewall --rw=randread --bs=4k --ioengine=libaio --iodepth=32"
    )
    oflag = " oflag=direct" if direct else ""
    iflag = " iflag=direct" if direct else ""
    t = dd_timeout_s(checkpoint_mib)
    dd_w = f'dd if=/dev/zero of={d}/ckpt bs=1M count="$n" conv=fsync'
    dd_r = f"dd if={d}/ckpt of=/dev/null bs=1M"
    return (
        f"export LC_ALL=C; echo '{MARK}df'; df -B1 --output=avail,size {q} | tail -n 1; "
        f"a=$(df -B1M --output=avail {q} | tail -n 1 | tr -dc 0-9); n={int(checkpoint_mib)}; "
        f'[ -n "$a" ] && [ $((a / 3)) -lt "$n" ] && n=$((a / 3)); '
        f"echo '{MARK}size'; echo \"$n\"; "
        f"[ \"$n\" -ge 16 ] || {{ echo '{MARK}no-space'; exit 0; }}; "
        f"mkdir -p {d} || exit 3; "
        f"if command -v fio >/dev/null 2>&1; then echo '{MARK}fio'; {fio} 2>&1; "
        f"else echo '{MARK}no-fio'; fi; rm -f {d}/fio.dat; "
        f"echo '{MARK}dd-write'; timeout -k 5 {t} {dd_w}{oflag} 2>&1 || "
        f"{{ echo '{MARK}dd-write'; timeout -k 5 {t} {dd_w} 2>&1; }}; "
        f"echo '{MARK}dd-read'; timeout -k 5 {t} {dd_r}{iflag} 2>&1 || "
        f"{{ echo '{MARK}dd-read'; timeout -k 5 {t} {dd_r} 2>&1; }}; "
        f"rm -rf {d}"
    )


@dataclass
class StorageFigures:
    path: str
    free_bytes: int | None = None
    size_bytes: int | None = None
    #: MiB of the file fio and dd used (``--checkpoint-size``, or a third of the free space where less)
    size_mib: int | None = None
    tool: str = ""
    fio: bool = False
    read_bps: float | None = None
    write_bps: float | None = None
    randread_iops: float | None = None
    randread_p99_ms: float | None = None
    checkpoint_write_s: float | None = None
    checkpoint_write_bps: float | None = None
    checkpoint_read_s: float | None = None
    checkpoint_read_bps: float | None = None
    checkpoint_bytes: int | None = None
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


_DD = re.compile(r"([0-9]+) bytes .*copied, ([0-9.]+(?:e-?[0-9]+)?) s")


def parse_fio_json(text: str) -> dict[str, dict[str, float | None]]:
    """fio's ``--output-format=json`` → per job name: bw (bytes/s of its read or write side), iops, p99
    completion latency in ms. fio may print warnings before the JSON: they are skipped."""
    start = text.find("{")
    if start < 0:
        raise ValueError("fio printed no JSON")
    data, _ = json.JSONDecoder().raw_decode(text[start:])
    out: dict[str, dict[str, float | None]] = {}
    for job in data.get("jobs") or []:
        if not isinstance(job, dict):
            continue
        name = str(job.get("jobname", ""))
        side = job.get("write") if "write" in name else job.get("read")
        if not isinstance(side, dict):
            continue
        pct = (side.get("clat_ns") or {}).get("percentile") or {}
        p99 = pct.get("99.000000")
        bw = side.get("bw_bytes")
        if bw is None and isinstance(side.get("bw"), int | float):
            bw = side["bw"] * 1024  # older fio: KiB/s only
        out[name] = {
            "bw": float(bw) if isinstance(bw, int | float) else None,
            "iops": float(side["iops"]) if isinstance(side.get("iops"), int | float) else None,
            "p99_ms": float(p99) / 1e6 if isinstance(p99, int | float) else None,
        }
    return out


def parse_storage(path: str, text: str) -> StorageFigures:
    """The output of :func:`storage_command` for *path*."""
    fig = StorageFigures(path=path)
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK) :].strip()
            sections[current] = []  # a retried dd replaces the first attempt
        elif current:
            sections[current].append(line)
    size = " ".join(sections.get("size", [])).strip()
    fig.size_mib = int(size) if is_digits(size) else None
    if "no-space" in sections:
        fig.problems.append(
            "less than 48 MiB free: not measured (the measurement uses at most a third of the free space)"
        )
    df = " ".join(sections.get("df", [])).split()
    if len(df) >= 2 and is_digits(df[0]) and is_digits(df[1]):
        fig.free_bytes, fig.size_bytes = int(df[0]), int(df[1])
    elif "df" in sections:
        fig.problems.append("df: " + " ".join(df)[:200])
    if "fio" in sections:
        fig.fio = True
        try:
            jobs = parse_fio_json("\n".join(sections["fio"]))
        except ValueError as exc:
            fig.problems.append(f"fio: {exc}: " + " ".join(sections["fio"])[-300:])
            jobs = {}
        fig.write_bps = (jobs.get("seqwrite") or {}).get("bw")
        fig.read_bps = (jobs.get("seqread") or {}).get("bw")
        fig.randread_iops = (jobs.get("randread") or {}).get("iops")
        fig.randread_p99_ms = (jobs.get("randread") or {}).get("p99_ms")
    for name in ("dd-write", "dd-read"):
        body = "\n".join(sections.get(name, []))
        m = _DD.search(body)
        if m is None:
            if name in sections:
                fig.problems.append(f"{name}: {body.strip()[-200:] or 'no output'}")
            continue
        n, secs = int(m.group(1)), float(m.group(2))
        rate = n / secs if secs > 0 else None
        fig.checkpoint_bytes = n
        if name == "dd-write":
            fig.checkpoint_write_s, fig.checkpoint_write_bps = secs, rate
        else:
            fig.checkpoint_read_s, fig.checkpoint_read_bps = secs, rate
    if fig.fio and fig.read_bps is not None:
        fig.tool = "fio"
    else:
        fig.tool = "dd (write + fsync, read)" + ("" if fig.fio else ": fio is not on this host")
        fig.read_bps = fig.read_bps if fig.read_bps is not None else fig.checkpoint_read_bps
        fig.write_bps = fig.write_bps if fig.write_bps is not None else fig.checkpoint_write_bps
    return fig
