"""``imagesmith pick``: choose the released image for a GPU host (a fresh rental), and say how to run it.

Pure core: :func:`choose` takes a :class:`~imagesmith.index.ReleaseIndex`, a :class:`Host` and the user's
:class:`Constraints` and returns a :class:`Pick` (or raises ``NoImageFitsError`` saying why and which driver
would be needed). Compatibility verdicts come from :mod:`imagesmith.compat` (driver ↔ CUDA, GPU arch ↔ the
wheel's arch list); this module only ranks them. Thin I/O around it: :func:`read_host` (nvidia-smi, a saved
output file, or ``--driver/--gpu``) and :func:`fetch_index` (file, URL or registry artifact, cached under
~/.cache/imagesmith).

Ranking rule (documented in docs/release.md):

1. an image that runs with the *full* CUDA feature set on this driver beats one that runs only through CUDA
   minor-version compatibility (MVC: no JIT of newer PTX, limited features), whatever their torch versions:
   a 535 driver gets the cu121 image over a newer cu124 one (12.4 needs 550.54.14 for full support) and the
   user is told which driver would unlock the newer one;
2. then the newest torch, then the newest CUDA, then the newest Python, then the tag (for a stable order).

Nothing here imports a heavy module at import time: the path with a cached index stays well under a second.
"""

from __future__ import annotations

from imagesmith.pick.evidence import verify_cluster
from imagesmith.pick.fetching import (
    DEFAULT_TTL_S,
    allowed_copies,
    cache_dir,
    check_index_scheme,
    check_index_signature,
    fetch_index,
    parse_oci_source,
)
from imagesmith.pick.fetching import (
    _cache_path as _cache_path,
)
from imagesmith.pick.fetching import (
    _trust_key as _trust_key,
)
from imagesmith.pick.flavors import (
    Access,
    image_flavor,
    interactive_access,
)
from imagesmith.pick.hosts import (
    Constraints,
    Host,
    host_from_flags,
    host_from_text,
    read_host,
    read_smi_text,
    version_matches,
)
from imagesmith.pick.platforms import (
    KNOWN_REGION_FORMS,
    PLATFORMS_RESOURCE,
    Detected,
    Platform,
    choose_registry,
    detect_platform,
    load_platforms,
    platform_for,
    rank_registries,
    registry_region,
)
from imagesmith.pick.pulling import (
    _pull_one as _pull_one,
)
from imagesmith.pick.pulling import (
    pull_image,
)
from imagesmith.pick.ranking import (
    MODE,
    ULIMITS,
    Assessment,
    Level,
    Pick,
    Rejected,
    assess,
    choose,
    host_warnings,
    mig_warnings,
    run_flags,
)
from imagesmith.pick.request import PickRequest, PickResult, of_flavor, pick_for, platform_of

# the names other modules and tests use (private ones above: tests read them here; a test swaps the
# downloads through fetching.DOWNLOADS)
__all__ = [
    "DEFAULT_TTL_S",
    "KNOWN_REGION_FORMS",
    "MODE",
    "PLATFORMS_RESOURCE",
    "ULIMITS",
    "Access",
    "Assessment",
    "Constraints",
    "Detected",
    "Host",
    "Level",
    "Pick",
    "PickRequest",
    "PickResult",
    "Platform",
    "Rejected",
    "allowed_copies",
    "assess",
    "cache_dir",
    "check_index_scheme",
    "check_index_signature",
    "choose",
    "choose_registry",
    "detect_platform",
    "fetch_index",
    "host_from_flags",
    "host_from_text",
    "host_warnings",
    "image_flavor",
    "interactive_access",
    "load_platforms",
    "mig_warnings",
    "of_flavor",
    "parse_oci_source",
    "pick_for",
    "platform_for",
    "platform_of",
    "pull_image",
    "rank_registries",
    "read_host",
    "read_smi_text",
    "registry_region",
    "run_flags",
    "verify_cluster",
    "version_matches",
]
