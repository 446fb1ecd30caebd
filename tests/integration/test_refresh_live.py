"""`imagesmith refresh-compat` against the real package index (network): one release's metadata, no wheel
streaming (the arch lists are checked from recordings in tests/unit/test_refresh.py)."""

from __future__ import annotations

from imagesmith import compat, refresh
from imagesmith.refresh import drafts


def test_torch_2_15_0_metadata_matches_the_data() -> None:
    http = refresh.Http(verify=refresh.ca_bundle())
    source = refresh.LiveSource(refresh.default_index_url(), http)
    wheels = drafts._final(source.files("torch"))["2.15.0"]
    draft = refresh.draft(source, "2.15.0", wheels, arch=False, data=compat.torch_release("2.15.0"))
    rows = refresh.compare(compat.torch_release("2.15.0"), draft, "2.15.0")
    checked = {r.field: r.status for r in rows if r.status != "not-checked"}
    assert checked == {
        "python": "match",
        "pypi_default": "match",
        "cuda": "match",
        "nccl": "match",
        "cudnn": "match",
        "torchvision": "match",
        "torchvision_python": "match",
        "torchaudio": "match",
    }
    assert http.bytes < 30_000_000  # listings and three METADATA members, never a whole wheel
