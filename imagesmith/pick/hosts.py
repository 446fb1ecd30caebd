"""The GPU host (driver, GPUs) and the user's constraints; reading the host: ``--driver/--gpu``, a saved
nvidia-smi output or nvidia-smi itself."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagesmith import inputs
from imagesmith.errors import (
    ConfigError,
    NothingToDoError,
    ParseError,
)
from imagesmith.index import (
    ReleasedImage,
)

if TYPE_CHECKING:
    from imagesmith.nvsmi import SmiGpu


# ------------------------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True, kw_only=True)
class Host:
    driver: str
    gpus: tuple[SmiGpu, ...]  # as nvidia-smi names them (maybe truncated), compute capability if known
    source: str
    cuda_umd: str | None = None


def _cuda_of(value: str) -> str:
    """``cu121`` → ``12.1``, ``cu130`` → ``13.0``; anything else as given."""
    m = re.fullmatch(r"\s*cu([0-9]{2})([0-9])\s*", value, re.IGNORECASE | re.ASCII)
    return f"{m.group(1)}.{m.group(2)}" if m else value


@dataclass(frozen=True, kw_only=True)
class Constraints:
    """User constraints; each is a version prefix: ``torch="2.1"`` accepts 2.1.0 and 2.1.2, not 2.10.0."""

    torch: str | None = None
    cuda: str | None = None
    python: str | None = None

    @classmethod
    def parse(cls, *, torch: str | None, cuda: str | None, python: str | None) -> Constraints:
        """From the flags: version prefixes (``2.1``, ``12.1``, ``3.10``); ``--cuda cu121`` means 12.1."""
        if torch is not None and "+" in torch:  # 2.4.1+cu121, as pip and compat write it
            version, _, local = torch.partition("+")
            tag = re.fullmatch(r"\s*cu([0-9]{2,3})\s*", local, re.IGNORECASE | re.ASCII)
            if tag is None:
                raise ConfigError(
                    f"--torch {torch!r}: {local!r} is not a CUDA wheel variant (cu121, cu130, …)",
                    hint="give --torch 2.4.1 and the variant as --cuda 12.1 (or --torch 2.4.1+cu121)",
                )
            as_cuda = f"cu{tag.group(1)}"
            if cuda is not None and cuda.strip().lower() != as_cuda and _cuda_of(cuda) != _cuda_of(as_cuda):
                raise ConfigError(
                    f"--torch {torch} says CUDA {_cuda_of(as_cuda)}, --cuda says {cuda}",
                    hint=f"give one of them: --torch {version} --cuda {cuda}, or --torch {torch}",
                )
            torch, cuda = version, cuda if cuda is not None else as_cuda
        if cuda is not None:
            cuda = _cuda_of(cuda)
        for flag, value, example in (
            ("--torch", torch, "2.1"),
            ("--cuda", cuda, "12.1"),
            ("--python", python, "3.10"),
        ):
            if value is not None and not re.fullmatch(r"[0-9]+(\.[0-9]+){0,2}", value.strip(), re.ASCII):
                raise ConfigError(
                    f"{flag} {value!r} is not a version", hint=f"give a version prefix, e.g. {flag} {example}"
                )
        return cls(
            torch=torch.strip() if torch else None,
            cuda=cuda.strip() if cuda else None,
            python=python.strip() if python else None,
        )

    def given(self) -> list[tuple[str, str, str]]:
        """(flag, value, the image field it filters) of every constraint given."""
        return [
            (flag, value, key)
            for flag, value, key in (
                ("--torch", self.torch, "torch"),
                ("--cuda", self.cuda, "cuda"),
                ("--python", self.python, "python"),
            )
            if value is not None
        ]

    def check_against(self, images: Sequence[ReleasedImage]) -> None:
        """NothingToDoError when the flags match no image of the index at all, naming the flag that matches
        nothing (or the combination) and listing what the index has; a host problem is :func:`choose`'s."""
        given = self.given()
        if not given or not images or any(self.rejects(img) is None for img in images):
            return
        names = {"torch": "torch", "cuda": "CUDA", "python": "Python"}
        for flag, value, key in given:
            have = sorted({getattr(img, key) for img in images}, key=_vkey)
            if any(version_matches(v, value) for v in have):
                continue
            hint = f"use one of these, e.g. {flag} {have[-1]}, or drop {flag}"
            if key == "cuda" and value.count(".") == 2:
                hint = (
                    f"the index records the wheel's CUDA as X.Y: --cuda {'.'.join(value.split('.')[:2])}"
                    f" (or one of the versions above), or drop --cuda"
                )
            raise NothingToDoError(
                f"{flag} {value} matches no image of the release index: its {names[key]} versions are "
                + ", ".join(have),
                hint=hint,
            )
        flags = " ".join(f"{flag} {value}" for flag, value, _ in given)
        combos = sorted(
            {(img.torch, img.cuda, img.python) for img in images},
            key=lambda t: (_vkey(t[0]), _vkey(t[1]), _vkey(t[2])),
        )
        raise NothingToDoError(
            f"{flags}: each matches some image, but no image matches them together; the index has "
            + ", ".join(f"torch {t} with CUDA {c}, Python {p}" for t, c, p in combos),
            hint="drop one of " + ", ".join(flag for flag, _, _ in given) + " or pick a combination above",
        )

    def rejects(self, image: ReleasedImage) -> str | None:
        for what, want, have in (
            ("torch", self.torch, image.torch),
            ("CUDA", self.cuda, image.cuda),
            ("Python", self.python, image.python),
        ):
            if want is not None and not version_matches(have, want):
                return f"{what} {have} does not match --{what.lower()} {want}"
        return None


def version_matches(version: str, prefix: str) -> bool:
    """``2.1.2`` matches ``2.1`` and ``2.1.2``; ``2.10.0`` does not match ``2.1``."""
    have = version.split("+", 1)[0].split(".")
    want = prefix.strip().split(".")
    return have[: len(want)] == want


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", version.split("+", 1)[0]))


def host_from_flags(driver: str, gpus: Sequence[str]) -> Host:
    """``--driver 535.104.05 --gpu h100 --gpu 'NVIDIA A100-SXM...'`` (names or keys compat knows)."""
    from imagesmith import compat
    from imagesmith.nvsmi import SmiGpu

    drv = compat.parse_driver(driver)
    found = []
    for i, name in enumerate(gpus):
        g = compat.gpu(name)
        # a MIG device name (NVIDIA A100-SXM4-40GB MIG 1g.5gb): the parent board, with that slice, so the host
        # gets the MIG warning as from nvidia-smi -L
        slices = (g.mig.split(" ", 1)[1],) if g.mig else ()
        found.append(
            SmiGpu(
                index=i, name=g.name, compute_cap=g.cc, memory_mib=g.memory_mib or None, mig_devices=slices
            )
        )
    return Host(driver=str(drv), gpus=tuple(found), source="--driver/--gpu")


def host_from_text(text: str, *, source: str, driver: str | None = None) -> Host:
    """Any nvidia-smi output imagesmith.nvsmi reads (default table incl. the R610 header; --query-gpu csv;
    ``-L``, which shows no driver: then *driver*, the ``--driver`` flag, gives it)."""
    from imagesmith import compat, nvsmi

    report = nvsmi.parse(text, source)
    flag = compat.parse_driver(driver) if driver is not None else None
    if report.driver is None and flag is None:
        # what is missing is a flag (as compat says for the same file): a bad invocation, exit 2, not output
        # that could not be parsed
        raise ConfigError(
            f"{source}: this nvidia-smi output does not show the driver version ({report.format} format)",
            hint="add --driver (e.g. --driver 580.95.05), or save the plain `nvidia-smi` output or "
            "`nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv`",
        )
    if report.driver is not None and flag is not None and flag != report.driver:
        raise ConfigError(
            f"--driver {driver} contradicts {source}, which shows driver {report.driver}",
            hint="drop --driver: the driver is read from the nvidia-smi output",
        )
    if not report.gpus:
        raise ParseError(f"{source}: nvidia-smi lists no GPU", hint="check the driver and the GPU (dmesg)")
    return Host(
        driver=str(report.driver if report.driver is not None else flag),
        gpus=report.gpus,
        source=source,
        cuda_umd=report.cuda_version,
    )


# ------------------------------------------------------------------------------------------------------------
# host input (thin I/O)


def read_smi_text(path: str | Path, flag: str = "--nvidia-smi") -> tuple[str, str]:
    """(text, source) of ``--nvidia-smi PATH`` (compat and pick); ``-`` reads standard input. A FIFO, a
    folder, a device, a UTF-16 capture and bytes that are not text are each one error naming the flag."""
    hint = "give the file the output was saved to (nvidia-smi > smi.txt), or - to read it from stdin"
    if str(path) == "-":
        if sys.stdin is None:  # started with stdin closed (<&-)
            raise ConfigError(
                f"{flag} -: standard input is closed, so there is nothing to read",
                hint=f"pipe the output in (nvidia-smi | imagesmith … {flag} -), or give the file it is in",
            )
        stream = getattr(sys.stdin, "buffer", None)
        try:
            if stream is None:  # a text stream without bytes under it (an embedding program's)
                text = sys.stdin.read(inputs.MAX_USER_FILE_BYTES + 1)
                data = text.encode("utf-8", "surrogateescape")
            else:
                data = stream.read(inputs.MAX_USER_FILE_BYTES + 1)
        except OSError as exc:
            raise ConfigError(
                f"{flag} - (stdin): cannot read it ({exc.strerror or exc.__class__.__name__})", hint=hint
            ) from None
        if len(data) > inputs.MAX_USER_FILE_BYTES:
            raise ConfigError(
                f"{flag} - (stdin): more than the {inputs.MAX_USER_FILE_BYTES} bytes it may have: not the "
                "output of nvidia-smi",
                hint=hint,
            )
        return inputs.decode_text(data, f"{flag} - (stdin)", hint=hint), "<stdin>"
    data = inputs.read_user_file(path, flag, hint=hint)
    return inputs.decode_text(data, f"{flag} {path}", hint=hint), str(path)


def read_host(
    *,
    nvidia_smi_file: str | Path | None = None,
    driver: str | None = None,
    gpus: Sequence[str] = (),
    run: bool = True,
) -> Host:
    """The host from ``--driver/--gpu``, a saved nvidia-smi output (``-`` = stdin; with ``--driver`` for
    ``nvidia-smi -L``), or by running nvidia-smi."""
    if nvidia_smi_file is not None:
        if gpus:
            raise ConfigError(
                "--gpu and --nvidia-smi both name the GPU",
                hint="drop --gpu: the GPUs are read from the nvidia-smi output",
            )
        text, source = read_smi_text(nvidia_smi_file)
        return host_from_text(text, source=source, driver=driver)
    if driver is not None or gpus:
        if driver is None or not gpus:
            raise ConfigError(
                "--driver and --gpu go together",
                hint="e.g. --driver 535.104.05 --gpu 'NVIDIA A100-SXM4-80GB' (or --nvidia-smi FILE, "
                "with --driver when FILE is `nvidia-smi -L` output)",
            )
        return host_from_flags(driver, gpus)
    if not run:
        raise ConfigError("no host given", hint="pass --nvidia-smi FILE or --driver/--gpu")
    query = ["nvidia-smi", "--query-gpu=index,name,memory.total,compute_cap,driver_version", "--format=csv"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        raise ConfigError(
            "nvidia-smi not found on this machine",
            hint="run pick on the GPU host, or pass --nvidia-smi FILE (its saved output) or --driver/--gpu",
        ) from None
    except subprocess.TimeoutExpired:
        raise ParseError("nvidia-smi did not answer within 30 s", hint="check the driver (dmesg)") from None
    if done.returncode != 0:
        raise ParseError(
            f"nvidia-smi failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[:300]}",
            hint="is the NVIDIA driver loaded? (nvidia-smi must work before an image can be picked)",
        )
    return host_from_text(done.stdout, source="nvidia-smi")
