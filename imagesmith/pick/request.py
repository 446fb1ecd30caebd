"""The pick command's layer between its flags and the ranking: one typed request (:class:`PickRequest`: the
host, the constraints, where it runs, the flavor), the rules it decides by in one place (the platform a live
host detects, the flavors of the index it picks among) and one typed result (:class:`PickResult`) the command
prints. Reading the host and fetching the trusted index stay with the command (they name its flags); the
platform detection is handed in (``detect``), so a test replaces it without reaching into the package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from imagesmith.errors import NothingToDoError
from imagesmith.index import ReleaseIndex
from imagesmith.pick.flavors import Access, image_flavor, interactive_access
from imagesmith.pick.hosts import Constraints, Host
from imagesmith.pick.platforms import Detected, load_platforms, platform_for
from imagesmith.pick.ranking import Pick, choose


@dataclass(frozen=True, kw_only=True)
class PickRequest:
    """What ``imagesmith pick`` was asked, but the index source and its trust (the command's)."""

    nvidia_smi: str | None = None
    driver: str | None = None
    gpus: Sequence[str] = ()
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    platform: str | None = None
    region: str | None = None
    flavor: str | None = None
    pull: bool = False

    @property
    def live(self) -> bool:
        """The host is this machine (no saved nvidia-smi output, no --driver)."""
        return self.nvidia_smi is None and self.driver is None


@dataclass(frozen=True, kw_only=True)
class PickResult:
    pick: Pick
    #: how a rental reaches the interactive flavor (``--flavor interactive`` only)
    access: Access | None = None


def platform_of(
    request: PickRequest, detect: Callable[[], Detected | None], note: Callable[[str], Any]
) -> str | None:
    """--platform, else — on the host itself, or to pull — the platform it detects (Docker Hub is not
    reachable in China: the platform decides the registry), named in a *note*."""
    if request.platform is not None or request.region is not None or not (request.live or request.pull):
        return request.platform
    found = detect()
    if found is None:
        return None
    note(f"note: platform {found.platform} detected ({found.signal}); --platform overrides")
    return found.platform


def of_flavor(index: ReleaseIndex, flavor: str | None) -> ReleaseIndex:
    """The images of *index* pick chooses among: those of --flavor (NothingToDoError naming the flavors there
    are when none is), else the plain ones where there are (devel and interactive carry more than a renter
    needs to start)."""
    if flavor is not None:
        have = sorted({image_flavor(i) or "runtime" for i in index.images})
        out = replace(index, images=tuple(i for i in index.images if image_flavor(i) == flavor))
        if not out.images and have:
            raise NothingToDoError(
                f"--flavor {flavor} matches no image of the release index: its flavors are {', '.join(have)}",
                hint=f"use one of them, e.g. --flavor {'runtime' if 'runtime' in have else have[0]}, or drop "
                "--flavor",
            )
        return out
    plain = tuple(i for i in index.images if image_flavor(i) in ("runtime", ""))
    return replace(index, images=plain or index.images)


def pick_for(
    request: PickRequest,
    host: Host,
    index: ReleaseIndex,
    *,
    detect: Callable[[], Detected | None],
    machine: Callable[[], str],
    note: Callable[[str], Any] = lambda _: None,
) -> PickResult:
    """The image of *index* for *host* as *request* asks (*machine*: this machine's CPU, for a live host)."""
    platform = platform_of(request, detect, note)
    index = of_flavor(index, request.flavor)
    plat = platform_for(load_platforms(), platform, request.region)  # (a bad --region before a bad --torch)
    chosen = choose(
        index,
        host,
        Constraints.parse(torch=request.torch, cuda=request.cuda, python=request.python),
        platform=plat,
        region=request.region,
        machine=machine() if request.live else "x86_64",
    )
    access = interactive_access(platform) if request.flavor == "interactive" else None
    return PickResult(pick=chosen, access=access)
