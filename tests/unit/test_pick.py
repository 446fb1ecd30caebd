"""``imagesmith pick``: cases built from NVIDIA's driver table and PyTorch's wheel/arch tables (via
imagesmith's compat data), hosts read from nvidia-smi captures (R610 header, truncated R470/R525 names,
--query-gpu csv).

The release index of these tests is generated from imagesmith.compat (min drivers, arch lists), exactly as
``imagesmith release`` fills it, so the expected picks follow from the published tables, not from this file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith import compat
from imagesmith.commands.output import pick_text
from imagesmith.errors import ConfigError, NoImageFitsError, NothingToDoError, ParseError
from imagesmith.index import SCHEMA, ReleaseIndex, parse_index
from imagesmith.indextrust import Trust
from imagesmith.pick import (
    Constraints,
    Host,
    choose,
    fetch_index,
    load_platforms,
    platform_for,
    read_host,
    registry_region,
    version_matches,
)
from imagesmith.pick.fetching import DOWNLOADS
from tests.localhttp import QuietHTTPServer
from tests.repo import REPO

DATA = REPO / "tests" / "data" / "pick"
#: the caching tests below are about the cache, not about trust (tests/unit/test_index_trust.py is)
NO_VERIFY = Trust(verify=False)


@pytest.fixture(autouse=True)
def _own_cache_and_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys pinned and the newest index seen stay in this test's folder (issue 25); the tests' index key is
    the trust root, by its fingerprint (issue 34: no first use without --trust-first-use)."""
    from tests.indexkey import KEY

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("IMAGESMITH_INDEX_KEY", KEY.public.fingerprint)


REGISTRIES = [
    ("dockerhub", "dockerhub", "docker.io/imagesmith/torch"),
    ("ghcr", "ghcr", "ghcr.io/imagesmith/torch"),
    ("acr-hangzhou", "aliyun-acr", "registry.cn-hangzhou.aliyuncs.com/imagesmith/torch"),
]
#: (torch, cuda, python): the released images of these tests
RELEASED = [
    ("2.0.1", "11.7", "3.10"),
    ("2.1.2", "11.8", "3.10"),
    ("2.1.2", "12.1", "3.10"),
    ("2.4.1", "12.1", "3.11"),
    ("2.5.1", "12.4", "3.11"),
    ("2.7.1", "12.6", "3.11"),
    ("2.7.1", "12.8", "3.12"),
    ("2.11.0", "13.0", "3.11"),
]


def tag_of(torch: str, cuda: str, python: str) -> str:
    return f"{torch}-cu{cuda.replace('.', '')}-py{python}"


def image_doc(torch: str, cuda: str, python: str, *, registries: Any = None, n: int = 0) -> dict[str, Any]:
    variant = compat.torch_variant(torch, cuda)
    md = compat.min_driver(cuda)
    digest = "sha256:" + hashlib.sha256(f"{torch}-{cuda}-{python}".encode()).hexdigest()
    tag = tag_of(torch, cuda, python)
    regs = registries if registries is not None else REGISTRIES
    return {
        "tag": tag,
        "matrix": "test",
        "cell": f"{torch}-cu{cuda.replace('.', '')}-py{python}-runtime-ubuntu22.04",
        "digest": digest,
        "registries": [
            {"name": n_, "kind": k, "reference": f"{r}:{tag}", "digest": digest} for n_, k, r in regs
        ],
        "torch": torch,
        "torchvision": compat.torch_release(torch).torchvision,
        "cuda": cuda,
        "python": python,
        "min_driver": {"full": str(md.full), "minor": str(md.minor_version)},
        "arch": list(variant.arch_list),
        "shm": {"size": "16g", "ipc_host": False},
        "validated_on": [
            {
                "gpu": "NVIDIA H100 80GB HBM3",
                "count": 8,
                "driver": "580.95.05",
                "date": "2026-11-28",
                "report_digest": "sha256:" + "c" * 64,
            }
        ],
        "fingerprint": f"fp{n}",
        "released": "2026-11-28",
    }


def make_index(rows: list[tuple[str, str, str]] = RELEASED, **kw: Any) -> ReleaseIndex:
    doc = {
        "schema": SCHEMA,
        "generated": "2026-11-28T00:00:00Z",
        "images": [image_doc(*row, n=i, **kw) for i, row in enumerate(rows)],
    }
    return parse_index(json.dumps(doc), source="test-index")


GENERIC = platform_for(load_platforms(), None, None)


def host(driver: str, *gpus: str) -> Host:
    return read_host(driver=driver, gpus=list(gpus))


def smi(name: str) -> Host:
    return read_host(nvidia_smi_file=DATA / name)


# -- hosts ------------------------------------------------------------------------------------------------


def test_r610_header_is_read() -> None:
    h = smi("smi_r610_h100x2.txt")
    assert h.driver == "610.43.02"
    assert h.cuda_umd == "13.3"
    assert [g.name for g in h.gpus] == ["NVIDIA H100 80GB HBM3"] * 2


def test_r610_host_gets_the_newest_torch_fully() -> None:
    pick = choose(make_index(), smi("smi_r610_h100x2.txt"), Constraints(), platform=GENERIC)
    assert pick.image.tag == "2.11.0-cu130-py3.11"
    assert pick.level == "full"


def test_truncated_a100_name_on_r525_prefers_full_cu118_over_minor_cu121() -> None:
    # 525.85.12 < 530.30.02 (CUDA 12.1 toolkit driver) but >= 525.60.13 (12.x minor-version floor);
    # 520.61.05 (CUDA 11.8) is met: full beats minor-version even with an older torch.
    h = smi("smi_525_a100_narrow.txt")
    assert h.gpus[0].name == "NVIDIA A100-SXM..."
    pick = choose(make_index(), h, Constraints(), platform=GENERIC)
    assert pick.image.tag == "2.1.2-cu118-py3.10"
    assert pick.level == "full"
    # the newest torch that runs only under minor-version compatibility is named with the driver it needs
    assert any("2.7.1-cu128-py3.12" in w and ">= 570.26 it would be picked" in w for w in pick.warnings)
    reasons = {r.tag: r.reason for r in pick.rejected}
    assert "580.65.06" in reasons["2.11.0-cu130-py3.11"]  # CUDA 13 floor


def test_535_driver_chooses_cu121_over_cu124() -> None:
    pick = choose(make_index(), host("535.104.05", "a100-80gb-sxm4"), Constraints(), platform=GENERIC)
    assert pick.image.tag == "2.4.1-cu121-py3.11"
    assert pick.level == "full"
    warning = next(w for w in pick.warnings if "2.7.1-cu12" in w or "2.5.1-cu124" in w)
    assert "minor-version" in warning


def test_535_with_torch_constraint_takes_minor_version_match_with_warning() -> None:
    pick = choose(
        make_index(), host("535.104.05", "a100-80gb-sxm4"), Constraints(torch="2.5"), platform=GENERIC
    )
    assert pick.image.tag == "2.5.1-cu124-py3.11"
    assert pick.level == "minor"
    assert "minor-version compatibility only" in pick.warnings[0]
    assert ">= 550.54.14" in pick.warnings[0]


def test_470_runs_only_cu11x_images_under_minor_version() -> None:
    h = smi("smi_470_a100_narrow.txt")
    pick = choose(make_index(), h, Constraints(), platform=GENERIC)
    assert pick.image.cuda.startswith("11.")
    assert pick.image.tag == "2.1.2-cu118-py3.10"
    assert pick.level == "minor"
    reasons = {r.tag: r.reason for r in pick.rejected}
    assert "525.60.13" in reasons["2.4.1-cu121-py3.11"]


def test_470_with_only_cuda12_images_says_which_driver_is_needed() -> None:
    index = make_index([r for r in RELEASED if not r[1].startswith("11.")])
    with pytest.raises(NoImageFitsError) as err:
        choose(index, smi("smi_470_a100_narrow.txt"), Constraints(), platform=GENERIC)
    msg = str(err.value)
    assert "driver 470.82.01" in msg
    assert "a driver >= 525.60.13 would run at least one of them" in msg
    for torch, cuda, python in RELEASED[2:]:
        assert f"  {tag_of(torch, cuda, python)}: " in msg


def test_rtx5090_rejects_pre_cu128_images() -> None:
    h = read_host(nvidia_smi_file=DATA / "query_570_rtx5090.csv")
    assert h.gpus[0].compute_cap == "12.0"
    pick = choose(make_index(), h, Constraints(), platform=GENERIC)
    assert pick.image.tag == "2.7.1-cu128-py3.12"
    reasons = {r.tag: r.reason for r in pick.rejected}
    for tag in ("2.4.1-cu121-py3.11", "2.5.1-cu124-py3.11", "2.7.1-cu126-py3.11"):
        assert "sm_120 is not compatible with the current PyTorch installation" in reasons[tag], reasons[tag]
    assert "580.65.06" in reasons["2.11.0-cu130-py3.11"]  # 570 < CUDA 13 floor


def test_rtx5090_with_only_old_images_names_no_driver_fix() -> None:
    index = make_index([r for r in RELEASED if r[1] in ("12.1", "12.4", "12.6")])
    with pytest.raises(NoImageFitsError) as err:
        choose(index, host("570.133.07", "rtx5090"), Constraints(), platform=GENERIC)
    assert "sm_120" in str(err.value)
    assert "a driver >=" not in str(err.value)  # no driver makes an sm_90 wheel run on sm_120


@pytest.mark.parametrize(
    ("constraints", "expected"),
    [
        (Constraints(torch="2.1"), "2.1.2-cu121-py3.10"),
        (Constraints(torch="2.1", cuda="11.8"), "2.1.2-cu118-py3.10"),
        (Constraints(python="3.12"), "2.7.1-cu128-py3.12"),
        (Constraints(cuda="12.6"), "2.7.1-cu126-py3.11"),
        (Constraints(torch="2.11"), "2.11.0-cu130-py3.11"),
    ],
)
def test_constraints_on_a_new_driver(constraints: Constraints, expected: str) -> None:
    pick = choose(make_index(), host("580.95.05", "h100-sxm"), constraints, platform=GENERIC)
    assert pick.image.tag == expected
    assert pick.level == "full"


def test_constraint_that_nothing_meets() -> None:
    # issue 12, item 8: a filter that matches no image of the index is said as such (it was "no released
    # image runs on this host", exit 10, naming each image "torch 2.11.0 does not match --torch 2.3")
    with pytest.raises(NothingToDoError, match=r"--torch 2\.3 matches no image of the release index"):
        choose(make_index(), host("580.95.05", "h100-sxm"), Constraints(torch="2.3"), platform=GENERIC)


@pytest.mark.parametrize(
    ("flag", "value", "listed", "fix"),
    [
        ("--torch", "9.9", "torch versions are 2.0.1, 2.1.2, 2.4.1, 2.5.1, 2.7.1, 2.11.0", "--torch 2.11.0"),
        ("--python", "3.99", "Python versions are 3.10, 3.11, 3.12", "--python 3.12"),
        ("--cuda", "12.1.1", "CUDA versions are 11.7, 11.8, 12.1, 12.4, 12.6, 12.8, 13.0", "--cuda 12.1"),
        ("--cuda", "99.9", "CUDA versions are 11.7, 11.8, 12.1", "--cuda 13.0"),
    ],
)
def test_cli_filter_that_matches_no_image_names_it_and_lists_the_index(
    run_cli: Callable[..., Any], tmp_path: Path, flag: str, value: str, listed: str, fix: str
) -> None:
    from tests.indexkey import save_signed_index as save_index

    path = tmp_path / "index.json"
    save_index(make_index(), path)
    res = run_cli("pick", "--index", str(path), "--driver", "580.95.05", "--gpu", "h100", flag, value)
    assert res.exit_code == NothingToDoError.exit_code == 3, res.stderr
    key_line, first, fix_line = res.stderr.strip().splitlines()
    assert key_line.startswith(
        "index key: "
    )  # issue 25: the key it trusted (the root, issue 34), then the error
    assert (
        first
        == f"error: {flag} {value} matches no image of the release index: its " + first.split("its ", 1)[1]
    )
    assert listed in first
    assert fix_line.startswith("  fix: ")
    assert fix in fix_line
    assert "runs on this host" not in res.stderr
    assert "Traceback" not in res.stderr


def test_filters_that_match_only_apart_say_so() -> None:
    with pytest.raises(NothingToDoError) as err:
        choose(
            make_index(),
            host("580.95.05", "h100-sxm"),
            Constraints(torch="2.1", cuda="12.4"),
            platform=GENERIC,
        )
    assert err.value.message.startswith("--torch 2.1 --cuda 12.4: each matches some image, but no image")
    assert "torch 2.1.2 with CUDA 12.1, Python 3.10" in err.value.message
    assert err.value.hint == "drop one of --torch, --cuda or pick a combination above"


def test_no_fit_fix_line_has_no_dangling_or() -> None:
    # a filter that matches images none of which runs here: the fix is a whole sentence (was "or relax ...")
    with pytest.raises(NoImageFitsError) as err:
        choose(make_index(), host("570.133.07", "rtx5090"), Constraints(torch="2.4"), platform=GENERIC)
    assert err.value.hint is not None
    assert not err.value.hint.startswith("or ")
    assert "drop or change --torch" in err.value.hint


def test_constraint_flags_are_checked_and_cuda_tags_accepted() -> None:
    assert Constraints.parse(torch=" 2.1 ", cuda="cu121", python="3.10") == Constraints(
        torch="2.1", cuda="12.1", python="3.10"
    )
    for flags in ({"torch": "latest"}, {"cuda": "12.x"}, {"python": "py3.10"}):
        args = {"torch": None, "cuda": None, "python": None, **flags}
        with pytest.raises(ConfigError, match=f"--{next(iter(flags))} .* is not a version"):
            Constraints.parse(**args)


def test_version_prefix_does_not_confuse_2_1_and_2_11() -> None:
    assert version_matches("2.1.2", "2.1")
    assert not version_matches("2.11.0", "2.1")
    assert version_matches("12.1", "12.1")
    assert not version_matches("12.1", "12.1.1")


def test_mixed_gpus_need_every_gpu_covered() -> None:
    pick = choose(make_index(), host("575.51.03", "h100-sxm", "rtx5090"), Constraints(), platform=GENERIC)
    assert pick.image.tag == "2.7.1-cu128-py3.12"


def test_unknown_gpu_with_compute_cap_from_nvidia_smi(tmp_path: Path) -> None:
    f = tmp_path / "q.csv"
    f.write_text(
        "index, name, memory.total [MiB], compute_cap, driver_version\n"
        "0, NVIDIA Future GPU X1, 99999 MiB, 12.0, 580.95.05\n"
    )
    pick = choose(make_index(), read_host(nvidia_smi_file=f), Constraints(), platform=GENERIC)
    assert pick.image.tag == "2.11.0-cu130-py3.11"


# -- registries and commands --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "region", "kind"),
    [
        ("autodl", None, "aliyun-acr"),
        ("aliyun", None, "aliyun-acr"),
        ("tencent", None, "aliyun-acr"),  # no TCR copy: the next preferred kind
        ("runpod", None, "dockerhub"),
        ("vast", None, "dockerhub"),
        ("lambda", None, "dockerhub"),
        (None, "cn-hangzhou", "aliyun-acr"),
        (None, "us-east-1", "dockerhub"),
    ],
)
def test_platform_chooses_the_registry(platform: str | None, region: str | None, kind: str) -> None:
    plat = platform_for(load_platforms(), platform, region)
    pick = choose(make_index(), host("580.95.05", "h100-sxm"), Constraints(), platform=plat, region=region)
    assert pick.registry.kind == kind


AZURE = ("azure", "azure-acr", "myreg.azurecr.io/imagesmith/torch")


@pytest.mark.parametrize(
    ("platform", "region"),
    [("autodl", None), ("aliyun", None), ("tencent", None), ("huawei", None), (None, "cn-hangzhou")],
)
def test_a_china_host_gets_aliyun_acr_before_azure_acr(platform: str | None, region: str | None) -> None:
    """Issue 31: one kind ``acr`` covered Aliyun's registry (in China) and Azure's (not), so an Azure copy
    listed first was a China host's first choice; now Aliyun's is, and Azure's ranks before the avoided
    global kinds only."""
    plat = platform_for(load_platforms(), platform, region)
    regs = [AZURE, *REGISTRIES]
    pick = choose(make_index(registries=regs), host("580.95.05", "h100-sxm"), Constraints(), platform=plat)
    assert pick.registry.kind == "aliyun-acr"
    no_aliyun = [AZURE, *(r for r in REGISTRIES if r[1] != "aliyun-acr")]
    pick = choose(
        make_index(registries=no_aliyun), host("580.95.05", "h100-sxm"), Constraints(), platform=plat
    )
    assert [c.kind for c in [pick.registry, *pick.alternatives]] == ["azure-acr", "dockerhub", "ghcr"]


def test_azure_acr_is_no_china_registry_elsewhere() -> None:
    plat = platform_for(load_platforms(), "runpod", None)
    regs = [AZURE, REGISTRIES[2]]
    pick = choose(make_index(registries=regs), host("580.95.05", "h100-sxm"), Constraints(), platform=plat)
    assert pick.registry.kind == "azure-acr"


def test_a_platform_row_naming_no_registry_kind_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "platforms.toml"
    row = 'name = "x"\nregion = "cn"\nprefer = ["acr"]\nrationale = "r"\nsource = "s"\nverified = false\n'
    path.write_text("schema = 1\n[[platform]]\n" + row)
    with pytest.raises(ConfigError, match="platform x: 'acr' is no registry kind") as info:
        load_platforms(path)
    assert "aliyun-acr" in (info.value.hint or "")


def test_china_platform_with_only_global_registries_warns() -> None:
    only_global = [r for r in REGISTRIES if r[1] != "aliyun-acr"]
    plat = platform_for(load_platforms(), "autodl", None)
    pick = choose(
        make_index(registries=only_global), host("580.95.05", "h100-sxm"), Constraints(), platform=plat
    )
    assert pick.registry.kind in ("dockerhub", "ghcr")
    assert any("poor fit for autodl" in w and "unreachable" in w for w in pick.warnings)


def test_unknown_platform() -> None:
    with pytest.raises(ConfigError, match="--platform 'colab' is not a known platform"):
        platform_for(load_platforms(), "colab", None)


def test_region_in_registry_hosts() -> None:
    assert registry_region("registry.cn-hangzhou.aliyuncs.com") == "cn-hangzhou"
    assert registry_region("123456789012.dkr.ecr.us-east-1.amazonaws.com") == "us-east-1"
    assert registry_region("swr.cn-north-4.myhuaweicloud.com") == "cn-north-4"
    assert registry_region("ghcr.io") is None


def test_docker_commands_carry_gpus_shm_and_ulimits() -> None:
    pick = choose(make_index(), host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC)
    ref = f"docker.io/imagesmith/torch:2.11.0-cu130-py3.11@{pick.image.digest}"
    assert pick.pull_argv() == ["docker", "pull", ref]
    assert pick.run_argv() == [
        "docker",
        "run",
        "--gpus",
        "all",
        "--shm-size=16g",
        "--ulimit",
        "memlock=-1",
        "--ulimit",
        "stack=67108864",
        "-it",
        "--rm",
        ref,
    ]
    text = pick_text(pick)
    assert text.splitlines()[-1] == " ".join(pick.run_argv())
    assert "not picked:" in text


def test_ipc_host_image() -> None:
    doc = image_doc("2.11.0", "13.0", "3.11")
    doc["shm"] = {"ipc_host": True}
    index = parse_index(
        json.dumps({"schema": SCHEMA, "generated": "2026-11-28", "images": [doc]}), source="x"
    )
    pick = choose(index, host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC)
    assert "--ipc=host" in pick.run_argv()
    assert not any(a.startswith("--shm-size") for a in pick.run_argv())


def test_arm_host_rejects_amd64_images() -> None:
    with pytest.raises(NoImageFitsError, match="built for linux/amd64, this host is linux/arm64"):
        choose(
            make_index(), host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC, machine="aarch64"
        )


# -- bad input --------------------------------------------------------------------------------------------


def test_driver_without_gpu() -> None:
    with pytest.raises(ConfigError, match="--driver and --gpu go together"):
        read_host(driver="535.104.05")


def test_junk_driver() -> None:
    with pytest.raises(ConfigError, match="is not an NVIDIA driver version"):
        host("latest", "h100-sxm")


def test_nvidia_smi_file_that_is_not_nvidia_smi(tmp_path: Path) -> None:
    f = tmp_path / "smi.txt"
    f.write_text("hello\n")
    with pytest.raises(ParseError, match=r"smi\.txt"):
        read_host(nvidia_smi_file=f)


def test_nvidia_smi_L_has_no_driver(tmp_path: Path) -> None:
    f = tmp_path / "L.txt"
    f.write_text("GPU 0: NVIDIA H200 (UUID: GPU-8d5d1b1c-0000-0000-0000-000000000000)\n")
    with pytest.raises(ConfigError, match="does not show the driver version"):
        read_host(nvidia_smi_file=f)


# -- index sources and cache --------------------------------------------------------------------------------


@contextlib.contextmanager
def _served(body: bytes, hits: list[str]) -> Iterator[str]:
    """*body* served on 127.0.0.1 at the URL yielded, each GET's path appended to *hits*."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.json"
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_index_from_file_and_http_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from imagesmith.index import dump_index

    body = dump_index(make_index()).encode()
    hits: list[str] = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with _served(body, hits) as url:
        first = fetch_index(url, insecure=True, trust=NO_VERIFY)
        second = fetch_index(url, insecure=True, trust=NO_VERIFY)
        assert hits == ["/index.json"]  # the second came from the cache
        assert first == second
        fetch_index(url, insecure=True, refresh=True, trust=NO_VERIFY)
        assert len(hits) == 2
    # source gone: the (stale) cache still answers
    again = fetch_index(url, insecure=True, ttl_s=0, trust=NO_VERIFY)
    assert again == first
    path = tmp_path / "index.json"
    path.write_bytes(body)
    assert fetch_index(str(path), trust=NO_VERIFY) == first


def test_a_copy_read_from_the_cache_removes_the_temp_files_a_killed_run_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `pick` answered from the cache downloads and writes nothing; the temp file of a run killed
    mid-write (its pid gone) is removed all the same, one of a live run is not (CI: a `.sig` temp outlived a
    plain pick)."""
    import subprocess
    import sys

    from imagesmith import atomicio
    from imagesmith import pick as picking
    from imagesmith.index import dump_index

    body = dump_index(make_index()).encode()
    hits: list[str] = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with _served(body, hits) as url:
        fetch_index(url, insecure=True, trust=NO_VERIFY)
        cached = picking._cache_path(url)
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
        dead = cached.parent / f".{cached.stem}.sig.{int(gone.stdout)}{atomicio.TMP_SUFFIX}"
        live = cached.parent / f".{cached.stem}.sig.{os.getppid()}{atomicio.TMP_SUFFIX}"
        for temp in (dead, live):
            temp.write_bytes(b"cut")
        fetch_index(url, insecure=True, trust=NO_VERIFY)
        assert hits == ["/index.json"]  # the second came from the cache
    assert not dead.exists()
    assert live.exists()


def test_fetch_index_unreachable_without_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="cannot download"):
        fetch_index("http://127.0.0.1:9/index.json", insecure=True, trust=NO_VERIFY)


# -- CLI --------------------------------------------------------------------------------------------------


def test_cli_pick_offline(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    from tests.indexkey import save_signed_index as save_index

    path = tmp_path / "index.json"
    save_index(make_index(), path)
    res = run_cli(
        "pick",
        "--index",
        str(path),
        "--nvidia-smi",
        str(DATA / "smi_525_a100_narrow.txt"),
        "--platform",
        "autodl",
    )
    assert res.exit_code == 0, res.stderr
    assert "picked: 2.1.2-cu118-py3.10" in res.stdout
    assert (
        "docker pull registry.cn-hangzhou.aliyuncs.com/imagesmith/torch:2.1.2-cu118-py3.10@sha256:"
        in res.stdout
    )
    res = run_cli("pick", "--index", str(path), "--driver", "535.104.05", "--gpu", "a100", "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["tag"] == "2.4.1-cu121-py3.11"
    assert out["compatibility"] == "full"
    assert out["run"].startswith("docker run --gpus all --shm-size=16g --ulimit memlock=-1")


def test_cli_pick_nothing_fits(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    from tests.indexkey import save_signed_index as save_index

    path = tmp_path / "index.json"
    save_index(make_index([r for r in RELEASED if r[1].startswith("13.")]), path)
    res = run_cli("pick", "--index", str(path), "--driver", "535.104.05", "--gpu", "h100-sxm")
    assert res.exit_code == NoImageFitsError.exit_code
    assert "a driver >= 580.65.06 would run at least one of them" in res.stderr
    assert "Traceback" not in res.stderr


def test_cli_pick_bad_index(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    path.write_text('{"schema": "imagesmith.release-index/v1", "generated": "2026-01-01", "images": [{}]}')
    res = run_cli("pick", "--index", str(path), "--driver", "535.104.05", "--gpu", "h100-sxm", "--no-verify")
    assert res.exit_code == ConfigError.exit_code
    assert f"release index {path}: images[0]." in res.stderr


# -- the live path: pick runs nvidia-smi itself ------------------------------------------------------------


def _fake_nvidia_smi(folder: Path, script: str) -> None:
    exe = folder / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)


def test_runs_nvidia_smi_query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # replays the --query-gpu answer captured on a real H200 host, and records the arguments it was given
    real = REPO / "tests" / "data" / "nvsmi" / "real_580.159.04_h200_query.csv"
    _fake_nvidia_smi(tmp_path, f'echo "$@" > {tmp_path}/args\ncat {real}\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    h = read_host()
    assert (h.driver, h.gpus[0].name, h.gpus[0].compute_cap, h.source) == (
        "580.159.04",
        "NVIDIA H200",
        "9.0",
        "nvidia-smi",
    )
    assert "--query-gpu=index,name,memory.total,compute_cap,driver_version" in (tmp_path / "args").read_text()
    assert choose(make_index(), h, Constraints(), platform=GENERIC).image.tag == "2.11.0-cu130-py3.11"


def test_failing_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    msg = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    _fake_nvidia_smi(tmp_path, f'echo "{msg}"\nexit 9\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(ParseError, match="nvidia-smi failed \\(exit 9\\): NVIDIA-SMI has failed"):
        read_host()


def test_no_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="nvidia-smi not found"):
        read_host()


# -- issue 13: host warnings (end-of-life driver branch, a GPU's last branch) ------------------------------

NOV_30 = __import__("datetime").date(2026, 11, 30)


def test_eol_branch_is_a_host_warning_after_the_image_warnings() -> None:
    pick = choose(
        make_index(),
        host("535.104.05", "a100-80gb-sxm4"),
        Constraints(torch="2.5"),
        platform=GENERIC,
        today=NOV_30,
    )
    assert pick.image.tag == "2.5.1-cu124-py3.11"  # the verdict and ranking are unchanged
    assert "minor-version compatibility only" in pick.warnings[0]
    assert len(pick.host_warnings) == 1
    assert pick.host_warnings[0].startswith(
        "driver 535.104.05 is on branch R535, a long-term support branch that reached end of life in June"
    )
    assert pick.host_warnings[0] in pick.warnings
    assert pick.to_json()["host_warnings"] == list(pick.host_warnings)
    assert f"warning: {pick.host_warnings[0]}" in pick_text(pick)


def test_a_supported_branch_has_no_host_warning() -> None:
    pick = choose(make_index(), smi("smi_r610_h100x2.txt"), Constraints(), platform=GENERIC, today=NOV_30)
    assert any("R610" in w for w in pick.host_warnings)  # R610 ended August 2026
    ok = choose(make_index(), host("580.159.04", "h200"), Constraints(), platform=GENERIC, today=NOV_30)
    assert ok.host_warnings == ()
    before = choose(
        make_index(),
        smi("smi_r610_h100x2.txt"),
        Constraints(),
        platform=GENERIC,
        today=NOV_30.replace(month=8),
    )
    assert before.host_warnings == ()  # today is injectable: still in its last month


def test_v100_host_gets_an_sm70_image_and_the_cuda_12_x_cap_warning() -> None:
    pick = choose(make_index(), host("580.159.04", "v100"), Constraints(), platform=GENERIC, today=NOV_30)
    assert pick.image.tag == "2.7.1-cu126-py3.11"
    assert pick.host_warnings == (
        "Tesla V100-SXM2-32GB (Volta, sm_70): R580 is NVIDIA's last driver branch for Volta GPUs and CUDA "
        "12.x their last CUDA toolkit: no newer driver or CUDA toolkit will run on it",
    )
    reasons = {r.tag: r.reason for r in pick.rejected}
    assert "cu130 wheels of torch 2.11.0 carry no sm_70 kernels" in reasons["2.11.0-cu130-py3.11"]


def test_nothing_fits_still_says_the_host_warnings() -> None:
    only_cu130 = make_index([r for r in RELEASED if r[1].startswith("13.")])
    with pytest.raises(NoImageFitsError) as err:
        choose(only_cu130, host("580.159.04", "v100"), Constraints(), platform=GENERIC, today=NOV_30)
    assert "carry no sm_70 kernels" in err.value.message
    assert (
        "warning: Tesla V100-SXM2-32GB (Volta, sm_70): R580 is NVIDIA's last driver branch"
        in err.value.message
    )


def test_cli_pick_warns_about_an_eol_branch(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.indexkey import save_signed_index as save_index

    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-11-30")
    path = tmp_path / "index.json"
    save_index(make_index(), path)
    res = run_cli("pick", "--index", str(path), "--driver", "570.124.06", "--gpu", "h100-sxm")
    assert res.exit_code == 0, res.stderr
    assert (
        "warning: driver 570.124.06 is on branch R570, a production branch that reached end of life in "
        in (res.stdout)
    )
    res = run_cli("pick", "--index", str(path), "--driver", "570.124.06", "--gpu", "h100-sxm", "--json")
    assert res.exit_code == 0
    assert json.loads(res.stdout)["host_warnings"][0].startswith("driver 570.124.06 is on branch R570")


# -- issue 12, item 9: nvidia-smi -L with --driver, stdin, unreadable files ----------------------------------

NVSMI = REPO / "tests" / "data" / "nvsmi"


def test_cli_pick_nvidia_smi_L_with_driver(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    from tests.indexkey import save_signed_index as save_index

    path = tmp_path / "index.json"
    save_index(make_index(), path)
    smi_l = str(NVSMI / "real_580.159.04_h200_L.txt")
    res = run_cli("pick", "--index", str(path), "--nvidia-smi", smi_l)
    assert res.exit_code == ConfigError.exit_code  # the same file in compat: exit 2 as well
    assert "fix: add --driver" in res.stderr  # the fix it names ...
    res = run_cli("pick", "--index", str(path), "--nvidia-smi", smi_l, "--driver", "580.159.04")
    assert res.exit_code == 0, res.stderr  # ... works (it was "--driver and --gpu go together")
    assert "host: driver 580.159.04, 1 GPU(s): NVIDIA H200" in res.stdout
    res = run_cli(
        "pick", "--index", str(path), "--nvidia-smi", smi_l, "--driver", "535.104.05", "--gpu", "a100"
    )
    assert res.exit_code == 2
    assert "--gpu and --nvidia-smi both name the GPU" in res.stderr
    table = str(NVSMI / "real_580.159.04_h200_default.txt")
    res = run_cli("pick", "--index", str(path), "--nvidia-smi", table, "--driver", "535.104.05")
    assert res.exit_code == 2
    assert "--driver 535.104.05 contradicts" in res.stderr
    assert "fix: drop --driver" in res.stderr


def test_cli_pick_nvidia_smi_from_stdin(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from tests.indexkey import save_signed_index as save_index

    path = tmp_path / "index.json"
    save_index(make_index(), path)
    text = (NVSMI / "real_580.159.04_h200_default.txt").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    res = run_cli("pick", "--index", str(path), "--nvidia-smi", "-")
    assert res.exit_code == 0, res.stderr
    assert "[<stdin>]" in res.stdout
    assert "picked: 2.11.0-cu130-py3.11" in res.stdout


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_cli_pick_unreadable_nvidia_smi_file(run_cli: Callable[..., Any], tmp_path: Path, what: str) -> None:
    target = tmp_path / ("nope.txt" if what == "missing" else "")
    res = run_cli("pick", "--index", str(tmp_path / "i.json"), "--nvidia-smi", str(target))
    assert res.exit_code == ConfigError.exit_code
    first, fix = res.stderr.strip().splitlines()
    why = "no such file" if what == "missing" else "is a folder"
    assert first.startswith(f"error: --nvidia-smi {target}: {why}")
    assert fix.startswith("  fix: give the file the output was saved to")
    assert "Usage:" not in res.stderr


# -- issue 12, item 10: a stale cached index is said, never used with --refresh or when the index is gone ----


@pytest.fixture
def index_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An http index source whose answer the test switches: 200 with the index, another status, or down."""
    import http.server
    import threading

    from tests.indexkey import KEY, signed_bytes

    body, envelope = signed_bytes(make_index())  # issue 25: signed, the key published beside it
    files = {"/index.json": body, "/index.json.sig": envelope, "/index.json.pub": KEY.public.pem}
    state = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(state["status"])
            payload = files.get(self.path, b"") if state["status"] == 200 else b"{}"
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    url = f"http://127.0.0.1:{server.server_address[1]}/index.json"
    first = fetch_index(f"{url}#{KEY.public.fingerprint}", insecure=True)  # fills the cache (and pins) ...
    from imagesmith import pick as picking

    os.utime(picking._cache_path(url), (0, 0))  # ... which is stale now

    def stop() -> None:
        server.shutdown()
        server.server_close()

    yield url, state, stop, first
    stop()


def test_unreachable_source_falls_back_to_the_cache_with_a_warning(index_server: Any) -> None:
    url, _, stop, first = index_server
    stop()
    said: list[str] = []
    index = fetch_index(url, insecure=True, warn=said.append)
    assert index == first
    assert len(said) == 1
    assert said[0].startswith(f"--index {url} cannot be reached (--index {url}: cannot download")
    assert "using the cached copy from " in said[0]
    assert "pass --refresh to fail instead" in said[0]


def test_cli_refresh_fails_when_the_source_is_down(index_server: Any, run_cli: Callable[..., Any]) -> None:
    url, _, stop, _ = index_server
    stop()
    args = ("pick", "--index", url, "--insecure", "--driver", "580.95.05", "--gpu", "h100")
    res = run_cli(*args)
    assert res.exit_code == 0, res.stderr
    assert res.stderr.startswith(f"warning: --index {url} cannot be reached")  # said, on stderr
    assert "picked: " in res.stdout
    res = run_cli(*args, "--refresh")
    assert res.exit_code == ConfigError.exit_code
    assert "(--refresh: the cached copy from " in res.stderr
    assert "drop --refresh to use the cached copy" in res.stderr
    assert "picked" not in res.stdout


@pytest.mark.parametrize("status", [404, 410])
def test_a_withdrawn_http_index_is_not_replaced_by_the_cache(index_server: Any, status: int) -> None:
    url, state, _, first = index_server
    state["status"] = status
    with pytest.raises(
        ConfigError, match=f"HTTP {status} \\(a cached copy from .* exists, but the source says"
    ):
        fetch_index(url, insecure=True, warn=lambda m: pytest.fail(m))
    state["status"] = 503  # a failing server is "cannot be reached": the cache, said
    said: list[str] = []
    assert fetch_index(url, insecure=True, warn=said.append) == first
    assert "HTTP 503" in said[0]


def test_oci_manifest_unknown_is_not_replaced_by_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagesmith import pick as picking
    from imagesmith.errors import ManifestUnknownError, RegistryError
    from imagesmith.index import dump_index

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = "oci://registry.example/acme/torch:release-index"
    cached = picking._cache_path(source)
    cached.parent.mkdir(parents=True)
    cached.write_text(dump_index(make_index()))
    os.utime(cached, (0, 0))  # stale

    def unknown(src: str, **_: Any) -> bytes:
        raise ManifestUnknownError("registry registry.example: manifest unknown", hint="check the tag")

    monkeypatch.setattr(DOWNLOADS, "oci", unknown)
    with pytest.raises(ManifestUnknownError, match="source says the index is not there"):
        fetch_index(source, warn=lambda m: pytest.fail(m), trust=NO_VERIFY)

    def down(src: str, **_: Any) -> bytes:
        raise RegistryError("registry registry.example: unreachable or failing", hint="check the network")

    monkeypatch.setattr(DOWNLOADS, "oci", down)
    said: list[str] = []
    assert (
        fetch_index(source, warn=said.append, trust=NO_VERIFY).images
        == parse_index(cached.read_bytes(), source="x").images
    )
    assert "1970-01-01 00:00 UTC" in said[0]
    with pytest.raises(RegistryError, match="--refresh: the cached copy"):
        fetch_index(source, refresh=True, warn=said.append, trust=NO_VERIFY)


# -- issue 12, item 12: exit codes as documented -------------------------------------------------------------


def test_cli_unreachable_oci_index_is_9_with_a_fix_and_fast(
    run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    import time

    os.environ.setdefault("XDG_CACHE_HOME", str(tmp_path))
    started = time.monotonic()
    res = run_cli("pick", "--index", "oci://127.0.0.1:9/x/y", "--driver", "580.95.05", "--gpu", "h100")
    assert time.monotonic() - started < 3  # was 4 attempts, ~4 s
    assert res.exit_code == 9
    first, fix = res.stderr.strip().splitlines()
    assert first.startswith("error: --index oci://127.0.0.1:9/x/y: registry 127.0.0.1:9")
    assert fix.startswith("  fix: check that 127.0.0.1:9 is up and reachable")


def test_pick_help_and_docs_list_the_exit_codes(run_cli: Callable[..., Any]) -> None:
    from imagesmith import errors

    text = " ".join(run_cli("pick", "--help").stdout.split())
    doc = " ".join((REPO / "docs" / "release.md").read_text().split())
    for err in (
        errors.ConfigError,
        errors.NothingToDoError,
        errors.EngineError,
        errors.ParseError,
        errors.RegistryError,
        errors.NoImageFitsError,
    ):
        assert f"{err.exit_code} = " in text, err
        assert f"; {err.exit_code} " in doc or f"): {err.exit_code} " in doc, err


# -- issue 12, item 15 (pick part): help lists every platform, unknown regions refused, one term ------------


def test_pick_help_lists_every_platform(run_cli: Callable[..., Any]) -> None:
    text = " ".join(run_cli("pick", "--help").stdout.replace("│", " ").split())
    for name in load_platforms():
        assert f" {name}," in text or f" {name} (" in text, name  # generic was missing


@pytest.mark.parametrize("region", ["xx", "mars-1", "global!", "hangzhou"])
def test_unknown_region_is_refused_naming_the_known_ones(run_cli: Callable[..., Any], region: str) -> None:
    with pytest.raises(
        ConfigError, match=f"--region '{region}' is not a cloud region imagesmith knows"
    ) as err:
        platform_for(load_platforms(), None, region)
    assert err.value.hint is not None
    assert "cn-hangzhou (Aliyun)" in err.value.hint
    assert "us-east-1 (AWS)" in err.value.hint
    assert "--platform aliyun|autodl|aws|gcp|generic|huawei|lambda|runpod|tencent|vast" in err.value.hint
    res = run_cli("pick", "--index", "x.json", "--driver", "580.95.05", "--gpu", "h100", "--region", region)
    assert res.exit_code == 2


@pytest.mark.parametrize(
    "region", ["cn", "cn-hangzhou", "cn-north-4", "cn-northwest-1", "ap-shanghai", "na-siliconvalley",
               "us-east-1", "eu-west-1", "europe-west4", "us-central1", "asia-east1", "la-south-2"],
)  # fmt: skip
def test_cloud_regions_are_accepted(region: str) -> None:
    assert platform_for(load_platforms(), None, region).region in ("cn", "global")


def test_one_term_for_minor_version_compatibility(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    from tests.indexkey import save_signed_index as save_index

    path = tmp_path / "index.json"
    save_index(make_index(), path)
    args = ("pick", "--index", str(path), "--driver", "535.104.05", "--gpu", "a100", "--torch", "2.5")
    res = run_cli(*args)
    assert res.exit_code == 0, res.stderr
    assert "(minor-version compatibility)" in res.stdout
    assert "minor compatibility" not in res.stdout
    assert json.loads(run_cli(*args, "--json").stdout)["compatibility"] == "minor-version"
    res = run_cli("pick", "--index", str(path), "--driver", "580.95.05", "--gpu", "h100")
    assert "ranked lower (full compatibility" in res.stdout


# -- issue 12, item 16: MIG is said, in text and JSON ------------------------------------------------------


def test_pick_on_a_mig_host_warns(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    from tests.indexkey import save_signed_index as save_index

    path = tmp_path / "index.json"
    save_index(make_index(), path)
    args = ("pick", "--index", str(path), "--nvidia-smi", str(NVSMI / "r570_a100_mig_enabled.txt"))
    res = run_cli(*args)
    assert res.exit_code == 0, res.stderr
    assert "warning: MIG is enabled on GPU 0 (NVIDIA A100-SXM4-80GB): " in res.stdout
    assert "no NVLink/P2P" in res.stdout
    out = json.loads(run_cli(*args, "--json").stdout)
    assert out["host_warnings"][0].startswith("MIG is enabled on GPU 0")
    assert out["host_warnings"][0] in out["warnings"]
    h = read_host(nvidia_smi_file=NVSMI / "list_a100_mig.txt", driver="570.124.06")
    pick = choose(make_index(), h, Constraints(), platform=GENERIC)
    assert "2 MIG slice(s): 3g.40gb, 3g.40gb" in pick.host_warnings[0]
    whole = choose(make_index(), smi("smi_r610_h100x2.txt"), Constraints(), platform=GENERIC, today=NOV_30)
    assert not any("MIG" in w for w in whole.warnings)


# -- issue 12, item 11: --pull tries every registry of the image, with its credentials; platform detection --


class FakeEngine:
    """What pull_image asks of a ContainerEngine: pull (fails for hosts in ``down``) and inspect."""

    def __init__(
        self, digest: str, down: Iterable[str] = frozenset(), moved: Iterable[str] = frozenset()
    ) -> None:
        self.digest, self.down, self.moved = digest, set(down), set(moved)
        self.pulls: list[tuple[str, Any]] = []

    def pull(self, reference: str, *, credentials: Any = None, progress: Any = None) -> str:
        from imagesmith.errors import EngineError

        self.pulls.append((reference, credentials))
        host = reference.split("/", 1)[0]
        if host in self.down:
            raise EngineError(f"pull of {reference} failed: dial tcp {host}:443: i/o timeout")
        return "sha256:" + "e" * 64

    def inspect(self, reference: str) -> dict[str, Any]:
        repo = reference.split("@", 1)[0] if "@" in reference else reference.rsplit(":", 1)[0]
        host = reference.split("/", 1)[0]
        # a "moved" registry serves other content than the released digest
        digest = "sha256:" + "0" * 64 if host in self.moved else self.digest
        return {"RepoDigests": [f"{repo}@{digest}"]}


def _pick_generic() -> Any:
    return choose(make_index(), host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC)


def test_pull_falls_back_to_the_images_other_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    from imagesmith.pick import pull_image

    monkeypatch.setenv("DOCKER_CONFIG", "/nonexistent")
    pick = _pick_generic()
    assert [c.name for c in pick.alternatives] == ["ghcr", "acr-hangzhou"]
    engine = FakeEngine(pick.image.digest, down={"docker.io", "ghcr.io"})
    said: list[str] = []
    image_id = pull_image(pick, echo=said.append, engine=engine)  # type: ignore[arg-type]  # pull, inspect
    assert image_id.startswith("sha256:e")
    assert [r.split("/")[0] for r, _ in engine.pulls] == [
        "docker.io",
        "ghcr.io",
        "registry.cn-hangzhou.aliyuncs.com",
    ]
    # issue 17: every pull names the released digest, never the tag (a moved tag never reaches the host)
    assert all(r.endswith(f"/imagesmith/torch@{pick.image.digest}") for r, _ in engine.pulls)
    assert any(
        line.startswith("pull from dockerhub (docker.io) failed: ")
        and "trying ghcr (ghcr.io), same digest" in line
        for line in said
    )
    assert said[-1].startswith(
        f"pulled registry.cn-hangzhou.aliyuncs.com/imagesmith/torch@{pick.image.digest}"
    )


def test_pull_that_fails_everywhere_names_every_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from imagesmith.errors import RegistryError
    from imagesmith.pick import pull_image

    monkeypatch.setenv("DOCKER_CONFIG", "/nonexistent")
    pick = _pick_generic()
    engine = FakeEngine(
        pick.image.digest, down={"docker.io", "ghcr.io"}, moved={"registry.cn-hangzhou.aliyuncs.com"}
    )
    with pytest.raises(RegistryError) as err:
        pull_image(pick, echo=lambda _: None, engine=engine)  # type: ignore[arg-type]  # pull, inspect
    msg = err.value.message
    assert msg.startswith("--pull: no registry holding 2.11.0-cu130-py3.11")
    for part in (
        "dockerhub (docker.io): ",
        "ghcr (ghcr.io): ",
        "acr-hangzhou (registry.cn-hangzhou.aliyuncs.com): ",
    ):
        assert part in msg
    assert f"not the released {pick.image.digest}" in msg
    assert err.value.hint is not None
    assert "served other content for the digest" in err.value.hint


def test_pull_passes_each_registrys_credential_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Environment credentials for one registry, an ECR token command for another (was: no credentials)."""
    from imagesmith.credentials import clear_token_cache, credential_env_names
    from imagesmith.pick import pull_image

    ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com/imagesmith/torch"
    regs = [("dockerhub", "dockerhub", "docker.io/imagesmith/torch"), ("ecr-use1", "ecr", ecr)]
    pick = choose(make_index(registries=regs), host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC)
    user, password = credential_env_names("docker.io")
    monkeypatch.setenv(user, "hubuser")
    monkeypatch.setenv(password, "hubsecret")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    aws = tmp_path / "aws"
    aws.write_text('#!/bin/sh\necho "$@" > ' + str(tmp_path / "aws.args") + "\necho ecr-token-123\n")
    aws.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    clear_token_cache()
    engine = FakeEngine(pick.image.digest, down={"docker.io"})
    pull_image(pick, echo=lambda _: None, engine=engine)  # type: ignore[arg-type]  # pull, inspect
    (_, hub_creds), (ecr_ref, ecr_creds) = engine.pulls
    assert (hub_creds.username, hub_creds.password) == ("hubuser", "hubsecret")
    assert ecr_ref.startswith("123456789012.dkr.ecr.us-east-1.amazonaws.com/")
    assert (ecr_creds.username, ecr_creds.password) == ("AWS", "ecr-token-123")
    assert "ecr get-login-password --region us-east-1" in (tmp_path / "aws.args").read_text()
    clear_token_cache()


def test_cli_pull_exit_9_names_the_registries(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import imagesmith.engine
    from imagesmith import pick as picking
    from tests.indexkey import save_signed_index as save_index

    path = tmp_path / "index.json"
    save_index(make_index(), path)
    digest = choose(make_index(), host("580.95.05", "h100"), Constraints(), platform=GENERIC).image.digest
    engine = FakeEngine(digest, down={"docker.io", "ghcr.io", "registry.cn-hangzhou.aliyuncs.com"})
    monkeypatch.setattr(imagesmith.engine, "Engine", lambda: engine)
    monkeypatch.setattr(picking, "detect_platform", lambda: None)
    monkeypatch.setenv("DOCKER_CONFIG", "/nonexistent")
    res = run_cli("pick", "--index", str(path), "--driver", "580.95.05", "--gpu", "h100", "--pull")
    assert res.exit_code == 9
    assert "trying ghcr (ghcr.io), same digest" in res.stderr
    assert "error: --pull: no registry holding 2.11.0-cu130-py3.11" in res.stderr
    assert "Traceback" not in res.stderr


def test_detect_platform_from_documented_signals(tmp_path: Path) -> None:
    from imagesmith.pick import detect_platform

    assert detect_platform(root=tmp_path, env={}) is None
    assert detect_platform(root=tmp_path, env={"RUNPOD_POD_ID": "abc"}).platform == "runpod"  # type: ignore[union-attr]
    dmi = tmp_path / "sys" / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    (dmi / "sys_vendor").write_text("Amazon EC2\n")
    assert detect_platform(root=tmp_path, env={}).platform == "aws"  # type: ignore[union-attr]
    (tmp_path / "root" / "autodl-tmp").mkdir(parents=True)
    found = detect_platform(root=tmp_path, env={})
    assert found is not None
    assert (found.platform, found.signal) == ("autodl", "/root/autodl-tmp exists")
    for name in ("autodl", "runpod", "vast", "aws", "gcp", "aliyun", "tencent", "huawei"):
        assert name in load_platforms()


def test_cli_pull_on_a_detected_autodl_host_starts_with_acr(
    run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import functools

    import imagesmith.engine
    from imagesmith import pick as picking
    from tests.indexkey import save_signed_index as save_index

    path = tmp_path / "index.json"
    save_index(make_index(), path)
    (tmp_path / "root" / "autodl-tmp").mkdir(parents=True)
    monkeypatch.setattr(
        picking, "detect_platform", functools.partial(picking.detect_platform, root=tmp_path, env={})
    )
    digest = choose(make_index(), host("580.95.05", "h100"), Constraints(), platform=GENERIC).image.digest
    engine = FakeEngine(digest, down={"docker.io", "ghcr.io"})
    monkeypatch.setattr(imagesmith.engine, "Engine", lambda: engine)
    monkeypatch.setenv("DOCKER_CONFIG", "/nonexistent")
    res = run_cli("pick", "--index", str(path), "--driver", "580.95.05", "--gpu", "h100", "--pull")
    assert res.exit_code == 0, res.stderr
    assert "note: platform autodl detected (/root/autodl-tmp exists); --platform overrides" in res.stderr
    assert engine.pulls[0][0].startswith("registry.cn-hangzhou.aliyuncs.com/")
    # not detected: Docker Hub first, and the output says which flag a China host needs
    monkeypatch.setattr(picking, "detect_platform", lambda: None)
    res = run_cli("pick", "--index", str(path), "--driver", "580.95.05", "--gpu", "h100")
    assert (
        "pass --platform autodl (or aliyun, tencent, huawei) or --region cn to get acr-hangzhou" in res.stdout
    )
    assert (
        "also in (same digest; --pull tries them in this order): ghcr (ghcr.io), acr-hangzhou" in res.stdout
    )


# -- issue 17: https only unless --insecure; registry hosts limited to the publisher's list ------------------


@pytest.mark.parametrize(
    ("source", "secure"),
    [
        ("http://index.example/index.json", "https://index.example/index.json"),
        ("oci+http://registry.example/acme/torch", "oci://registry.example/acme/torch"),
    ],
)
def test_plain_http_index_is_refused_without_insecure(
    source: str, secure: str, run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fetched: list[str] = []

    def download_http(url: str) -> tuple[int, bytes]:
        fetched.append(url)
        return 200, b"{}"

    def download_oci(url: str, **_: object) -> tuple[bytes, None, None]:
        fetched.append(url)
        return b"{}", None, None

    monkeypatch.setattr(DOWNLOADS, "http", download_http)
    monkeypatch.setattr(DOWNLOADS, "oci", download_oci)
    with pytest.raises(ConfigError, match="plain HTTP") as err:
        fetch_index(source)
    assert f"use {secure}, or pass --insecure" in (err.value.hint or "")
    res = run_cli("pick", "--index", source, "--driver", "580.95.05", "--gpu", "h100")
    assert res.exit_code == ConfigError.exit_code
    assert f"error: --index {source}: plain HTTP" in res.stderr
    assert "fix: use " in res.stderr
    assert fetched == []  # refused before a byte was asked for
    with pytest.raises(ConfigError, match="release index"):  # --insecure: fetched (and this body is no index)
        fetch_index(source, insecure=True, trust=NO_VERIFY)
    assert fetched == [source]


def _index_listing(hosts: list[str], regs: Any = None) -> ReleaseIndex:
    doc = {
        "schema": SCHEMA,
        "generated": "2026-11-28T00:00:00Z",
        "registries": hosts,
        "images": [image_doc(*row, n=i, registries=regs) for i, row in enumerate(RELEASED)],
    }
    return parse_index(json.dumps(doc), source="test-index")


def test_a_copy_on_a_host_the_publisher_does_not_list_is_skipped() -> None:
    regs = [*REGISTRIES, ("mirror", "generic", "evil.example/imagesmith/torch")]
    index = _index_listing(["docker.io", "ghcr.io", "registry.cn-hangzhou.aliyuncs.com"], regs)
    pick = choose(index, host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC)
    hosts = {pick.registry.host, *(c.host for c in pick.alternatives)}
    assert "evil.example" not in hosts
    assert any(
        w.endswith(
            "registry mirror (evil.example) is not one the index's publisher lists (docker.io, ghcr.io, "
            "registry.cn-hangzhou.aliyuncs.com); skipped"
        )
        for w in pick.warnings
    )
    assert not any("lists no publisher registries" in w for w in pick.warnings)


def test_an_image_only_on_unlisted_hosts_is_rejected_with_the_reason() -> None:
    index = _index_listing(["ghcr.io"], [("mirror", "generic", "evil.example/imagesmith/torch")])
    with pytest.raises(NoImageFitsError) as err:
        choose(index, host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC)
    assert "registry mirror (evil.example) is not one the index's publisher lists (ghcr.io); skipped" in str(
        err.value
    )


def test_an_index_without_the_list_is_read_with_a_warning() -> None:
    pick = choose(make_index(), host("580.95.05", "h100-sxm"), Constraints(), platform=GENERIC)
    assert any("lists no publisher registries" in w for w in pick.warnings)
    assert not any("lists no publisher registries" in w for w in pick.host_warnings)


def test_index_registries_are_written_and_checked() -> None:
    from imagesmith.index import dump_index

    index = _index_listing(["ghcr.io", "docker.io", "registry.cn-hangzhou.aliyuncs.com"])
    again = parse_index(dump_index(index), source="again")
    assert again.registries == ("docker.io", "ghcr.io", "registry.cn-hangzhou.aliyuncs.com")  # sorted
    for bad, why in (
        (["https://ghcr.io"], "is not a registry host[:port]"),
        (["ghcr.io", "ghcr.io"], "hosts repeat"),
    ):
        doc = json.loads(dump_index(index))
        doc["registries"] = bad
        with pytest.raises(ConfigError, match=re.escape(why)):
            parse_index(json.dumps(doc), source="bad")


def test_validate_baseline_from_plain_http_is_refused(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    src = "http://index.example/index.json"
    res = run_cli("validate", "--baseline-from", src, "--report", str(tmp_path / "r"))
    assert res.exit_code == ConfigError.exit_code
    assert "--baseline-from http://index.example/index.json: plain HTTP" in res.stderr
    assert "fix: use an https:// or oci:// source" in res.stderr
