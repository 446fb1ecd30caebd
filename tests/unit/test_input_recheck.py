"""Re-check of every user input (hostile shapes a new user's editor or shell produces): each is one
imagesmith error naming the file, the field and the fix — never a traceback, never silently taken."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from imagesmith.config import load_config
from imagesmith.errors import ConfigError, ImagesmithError
from imagesmith.matrix import load_matrix, load_registries
from imagesmith.project import PROJECT_FILE, load_project
from tests.conftest import CliResult
from tests.repo import PROJECT

BOM = b"\xef\xbb\xbf"


def _copy_project(root: Path) -> Path:
    (root / "matrices").mkdir(parents=True)
    (root / PROJECT_FILE).write_text('schema = 1\ndefault_matrix = "smoke"\n')
    shutil.copy(PROJECT.matrices_dir / "smoke.toml", root / "matrices" / "smoke.toml")
    shutil.copy(PROJECT.registries_file, root / "matrices" / "registries.toml")
    shutil.copytree(PROJECT.locks_dir, root / "locks")
    return root


def _load_all(root: Path) -> None:
    project = load_project(root / PROJECT_FILE)
    load_registries(project.registries_file)
    load_matrix("smoke", project=project)


@pytest.mark.parametrize("rel", [PROJECT_FILE, "matrices/smoke.toml", "matrices/registries.toml"])
@pytest.mark.parametrize(
    ("encode", "expected"),
    [
        (lambda text: BOM + text.encode(), "starts with a byte-order mark (U+FEFF)"),
        (lambda text: text.encode("utf-16-le"), "saved as UTF-16"),
    ],
    ids=["utf8-bom", "utf16"],
)
def test_a_file_saved_with_a_bom_or_as_utf16_says_so(
    tmp_path: Path, rel: str, encode: Callable[[str], bytes], expected: str
) -> None:
    root = _copy_project(tmp_path / "p")
    path = root / rel
    path.write_bytes(encode(path.read_text()))
    with pytest.raises(ConfigError) as info:
        _load_all(root)
    assert expected in info.value.message
    assert str(path.resolve()) in info.value.message or str(path) in info.value.message
    assert info.value.hint
    assert "UTF-8" in info.value.hint


def test_crlf_line_ends_load_as_the_same_matrix(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "p")
    project = load_project(root / PROJECT_FILE)
    plain = load_matrix("smoke", project=project)
    for rel in (PROJECT_FILE, "matrices/smoke.toml", "matrices/registries.toml"):
        (root / rel).write_bytes((root / rel).read_bytes().replace(b"\n", b"\r\n"))
    project = load_project(root / PROJECT_FILE)
    assert load_matrix("smoke", project=project) == plain


def test_the_user_config_with_a_bom_or_as_a_folder_is_one_error(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(BOM + b"[sources]\nmirrors = []\n")
    with pytest.raises(ConfigError, match="byte-order mark"):
        load_config({"IMAGESMITH_CONFIG": str(config)})
    config.write_bytes(b"[sources]\nmirrors = []\n")
    assert load_config({"IMAGESMITH_CONFIG": str(config)}).source_mirrors == ()
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(ImagesmithError) as info:
        load_config({"IMAGESMITH_CONFIG": str(folder)})
    assert "is not a file (IMAGESMITH_CONFIG)" in info.value.message
    assert info.value.hint


LOCK = "2.11.0-cu130-py3.11.txt"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        # a byte that is not UTF-8 crashed the plan with a UnicodeDecodeError traceback
        (lambda b: b.replace(b"annotated-doc", b"annot\xe9ted-doc", 1), "not UTF-8 text (byte "),
        (lambda b: BOM + b, "starts with a byte-order mark"),
        # a lock renamed or edited by hand: the cell said torch 2.11.0 and installed 2.10.0
        (lambda b: b.replace(b"torch==2.11.0", b"torch==2.10.0"), "pins torch==2.10.0, but its name says"),
        (lambda b: b.replace(b"torch==2.11.0", b"torch==2.11.0+cu128"), "pins torch==2.11.0+cu128, but"),
        (
            lambda b: b.replace(
                b"lock: torch 2.11.0 cu130 python 3.11", b"lock: torch 2.10.0 cu128 python 3.12"
            ),
            "its header says `imagesmith lock: torch 2.10.0 cu128 python 3.12`",
        ),
    ],
    ids=["latin1", "bom", "other-torch", "other-variant", "other-header"],
)
def test_a_hostile_lock_file_is_one_error_naming_it(
    tmp_path: Path, edit: Callable[[bytes], bytes], expected: str
) -> None:
    from imagesmith.plan import build_plan

    root = _copy_project(tmp_path / "p")
    lock = root / "locks" / LOCK
    lock.write_bytes(edit(lock.read_bytes()))
    project = load_project(root / PROJECT_FILE)
    with pytest.raises(ImagesmithError) as info:
        build_plan(load_matrix("smoke", project=project), project=project)
    assert expected in info.value.message
    assert str(lock) in info.value.message
    assert info.value.hint
    assert "imagesmith lock" in info.value.hint


def test_every_reference_lock_names_what_it_pins() -> None:
    from imagesmith.lock import lock_keys_in, read_lock

    keys = lock_keys_in(PROJECT.locks_dir)
    assert len(keys) > 10
    for key in keys:
        assert read_lock(key, PROJECT.locks_dir) is not None


def _edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("rel", "old", "new", "expected"),
    [
        # a port out of range was taken, and only the first push found out
        ("matrices/registries.toml", "127.0.0.1:5000", "127.0.0.1:99999", "is not a registry host[:port]"),
        ("matrices/registries.toml", "127.0.0.1:5000", "127.0.0.1:0", "is not a registry host[:port]"),
        # an image name longer than registries take
        ("matrices/registries.toml", 'repository = "torch"', f'repository = "{"x" * 300}"', "at most 255"),
        # an OS tag that makes every cell's tag longer than 128 characters
        ("matrices/smoke.toml", 'os = "debian12"', f'os = "debian{"x" * 120}"', "is not a tag component"),
        # a known base image with another OS tag or another Python than its own
        ("matrices/smoke.toml", 'os = "debian12"', 'os = "ubuntu22.04"', "is not debian:bookworm's OS tag"),
        ("matrices/smoke.toml", 'python = "3.11"', 'python = "3.12"', "is not debian:bookworm's python3"),
        # a ulimits label that only `imagesmith validate IMAGE` (after build and push) found wrong
        ("matrices/smoke.toml", "memlock=-1,stack=67108864", "memlock=-1;x", "NAME=SOFT[:HARD]"),
        ("matrices/smoke.toml", "memlock=-1,stack=67108864", "memlok=-1", "nearest valid value: 'memlock'"),
        # a bidirectional control (Trojan Source) went into the generated Dockerfile's LABEL
        ("matrices/smoke.toml", "[labels]", '[labels]\n"com.example.x" = "a\\u202eb"', "contains '\\u202e'"),
    ],
)
def test_a_hostile_value_is_refused_when_the_file_is_read(
    tmp_path: Path, rel: str, old: str, new: str, expected: str
) -> None:
    root = _copy_project(tmp_path / "p")
    _edit(root, rel, old, new)
    with pytest.raises(ConfigError) as info:
        _load_all(root)
    assert expected in info.value.message
    assert str(root / rel) in info.value.message
    assert info.value.hint


def test_the_highest_port_and_a_mirrored_debian_are_still_taken(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "p")
    _edit(root, "matrices/registries.toml", "127.0.0.1:5000", "127.0.0.1:65535")
    _edit(
        root,
        "matrices/smoke.toml",
        'image = "debian:bookworm"',
        'image = "docker.io/library/debian:bookworm"',
    )
    _load_all(root)


@pytest.mark.parametrize(
    ("registry", "expected"),
    [
        ("http://127.0.0.1:99999", "is not [http://]HOST[/NAMESPACE]"),
        # these named the scratch copy (/tmp/imagesmith-init-…/matrices/registries.toml), not the flag
        ("ghcr.io/Acme", "--registry 'ghcr.io/Acme': namespace 'Acme' is not a repository path"),
        ("ghcr.io//x", "namespace '/x' is not a repository path"),
    ],
)
def test_init_registry_flag_errors_name_the_flag(
    tmp_path: Path, run_cli: Callable[..., CliResult], registry: str, expected: str
) -> None:
    out = run_cli("init", str(tmp_path / "p"), "--registry", registry, "--no-render")
    assert out.exit_code == 2
    assert expected in out.stderr
    assert "imagesmith-init-" not in out.stderr
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    ("name", "cc"),
    [("Tesla P100-PCIE-16GB", "6.0"), ("Tesla P40", "6.1"), ("Tesla P4", "6.1"), ("p100", "6.0")],
)
def test_pascal_gpus_are_known_and_capped_at_r580(name: str, cc: str) -> None:
    """The Pascal ``[[arch]]`` row (last branch R580) matched no GPU of the table: a P100 (Kaggle's GPU) was
    an unknown GPU for compat, pick and init."""
    from imagesmith import compat

    gpu = compat.gpu(name)
    assert gpu.cc == cc
    verdict = compat.verdict("580.95.05", name, "2.7.1", "cu126")
    assert verdict.mode == "full"
    assert any("R580 is NVIDIA's last driver branch for Pascal" in w for w in verdict.warnings)
    assert compat.verdict("580.95.05", name, "2.11.0", "cu130").mode == "none"  # CUDA 13 wheels: no sm_6x


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        # -1 became 1 attempt, nan a 1 s deadline, "abc" an error only at the first push (exit 9, not 2)
        ("IMAGESMITH_REGISTRY_ATTEMPTS", "-1", "is not a number of attempts"),
        ("IMAGESMITH_REGISTRY_ATTEMPTS", "abc", "is not a number of attempts"),
        ("IMAGESMITH_REGISTRY_DEADLINE", "nan", "is not a number of seconds"),
        ("IMAGESMITH_REGISTRY_DEADLINE", "inf", "is not a number of seconds"),
        ("IMAGESMITH_REGISTRY_DEADLINE", "0", "is not a number of seconds"),
    ],
)
def test_registry_retry_settings_out_of_range_are_one_error(name: str, value: str, expected: str) -> None:
    from imagesmith.registry import RetryPolicy

    with pytest.raises(ConfigError) as info:
        RetryPolicy.from_env({name: value})
    assert f"{name}={value!r} {expected}" in info.value.message
    assert info.value.hint
    assert info.value.exit_code == 2


def test_registry_retry_settings_in_range_are_taken() -> None:
    from imagesmith.registry import RetryPolicy

    policy = RetryPolicy.from_env(
        {"IMAGESMITH_REGISTRY_ATTEMPTS": "3", "IMAGESMITH_REGISTRY_DEADLINE": "2.5"}
    )
    assert (policy.attempts, policy.deadline) == (3, 2.5)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        # a port out of range reached BuildKit ("dial tcp: address 99999: invalid port") after the build began
        ("docker.io=127.0.0.1:99999/hub", "'127.0.0.1:99999' is not a registry host[:port]"),
        ("docker.io=https://mirror.example/hub", "is not a registry host[:port]"),
        ("docker.io=mirror.example/Hub", "'Hub' is not a repository path"),
        ("dock er.io=mirror.example", "'dock er.io' is not a registry host[:port]"),
    ],
)
def test_registry_mirror_items_are_checked_when_read(item: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"IMAGESMITH_CONFIG": "/nonexistent/config.toml", "IMAGESMITH_REGISTRY_MIRRORS": item})
    assert expected in info.value.message
    assert info.value.message.startswith("IMAGESMITH_REGISTRY_MIRRORS: ")
    assert info.value.hint


def test_an_index_key_that_cannot_be_read_names_where_it_came_from(
    tmp_path: Path, run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fix line said "check [release] trusted_keys in imagesmith.toml" for a key named by
    $IMAGESMITH_INDEX_KEY (pick and index read no imagesmith.toml)."""
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("IMAGESMITH_INDEX_KEY", str(tmp_path / "missing.pub"))
    index = PROJECT.root / "docs" / "examples" / "release-index.json"
    out = run_cli("index", str(index))
    assert out.exit_code == 2
    assert "($IMAGESMITH_INDEX_KEY)" in out.stderr
    assert "fix: point $IMAGESMITH_INDEX_KEY at the PEM public key" in out.stderr
    out = run_cli("index", str(index), "--verify-key", str(tmp_path / "missing.pub"))
    assert "fix: point --verify-key at the PEM public key" in out.stderr


@pytest.mark.parametrize("named", ["/nonexistent/docker", "/bin/true"])
def test_a_docker_cli_named_by_the_environment_that_is_none_is_an_error(
    named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IMAGESMITH_DOCKER_CLI naming a missing program fell back to the sdk backend silently (whose error then
    blamed the Dockerfile's RUN --mount), and /bin/true passed for a BuildKit CLI (a build "failed" with
    exit 0). The engine is faked: only the CLI lookup is under test."""
    import docker

    import imagesmith.engine as engine

    class _Client:
        def ping(self) -> bool:
            return True

    monkeypatch.setattr(docker, "from_env", lambda **_: _Client())
    monkeypatch.setenv("IMAGESMITH_DOCKER_CLI", named)
    assert engine.buildkit_cli() is None
    with pytest.raises(ConfigError) as info:
        engine.Engine(backend="auto")
    assert f"IMAGESMITH_DOCKER_CLI={named!r}" in info.value.message
    assert info.value.hint
    monkeypatch.setenv("IMAGESMITH_DOCKER_CLI", "")  # empty: the sdk backend, on purpose
    assert engine.Engine(backend="auto").backend == "sdk"


@pytest.mark.parametrize("gpu", ["gb200", "gh200", "gb10", "gb300", "NVIDIA GB200"])
def test_gpus_of_aarch64_hosts_get_no_amd64_project(
    tmp_path: Path, run_cli: Callable[..., CliResult], gpu: str
) -> None:
    """`init --gpu gb200` wrote a project of linux/amd64 images (x86_64 locks) "for gb200", whose Grace host
    is aarch64: none of its images would start there."""
    out = run_cli("init", str(tmp_path / "p"), "--gpu", gpu, "--no-render")
    assert out.exit_code == 2
    assert f"--gpu {gpu}: " in out.stderr
    assert "aarch64" in out.stderr
    assert not (tmp_path / "p").exists()


def test_a_family_keeps_only_its_x86_hosted_skus(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    out = run_cli("init", str(tmp_path / "p"), "--gpu", "b300", "--no-render")
    assert out.exit_code == 0, out.stderr
    matrix = (tmp_path / "p" / "matrices" / "b300.toml").read_text()
    assert 'gpus = ["b300"]' in matrix  # GB300 (family b300, Grace host) left out


def test_a_matrix_listing_an_aarch64_hosted_gpu_is_one_error(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "p")
    _edit(root, "matrices/smoke.toml", "gpus = [", 'gpus = ["gb200", ')
    with pytest.raises(ConfigError) as info:
        _load_all(root)
    assert "gpus[0]: NVIDIA GB200 hosts are aarch64" in info.value.message
    assert info.value.hint


def test_a_build_summary_that_cannot_be_written_fails_before_any_build(
    tmp_path: Path, run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`build --summary DIR` built (and pushed) every cell, then failed writing the summary (exit 2)."""
    import imagesmith.buildrequest as buildrequest

    def no_plan(*_: object, **__: object) -> None:
        raise AssertionError("the matrix was planned before --summary was checked")

    monkeypatch.setattr(buildrequest, "load_plan", no_plan)
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "file").write_text("x")
    for summary, why in (
        (tmp_path, "is a folder"),
        (tmp_path / "file" / "s.json", "is not a folder"),
        (Path("/proc/imagesmith-summary.json"), "cannot write there"),
    ):
        out = run_cli("-C", str(PROJECT.root), "build", "--matrix", "smoke", "--summary", str(summary))
        assert out.exit_code == 2, out.stderr
        assert f"--summary {summary}: " in out.stderr
        assert why in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the probe left nothing


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("https://m.example:99999/{url}", "optional port 1-65535"),
        ("https://user@m.example/{url}", "host 'user@m.example'"),
        ("https://m.example/{url}{url", "an unmatched { or }"),
        ("https://m.example/a b{url}", "a space or a control character"),
    ],
)
def test_a_source_mirror_template_that_is_no_url_is_refused_when_read(template: str, expected: str) -> None:
    from imagesmith.project import check_mirror_template

    with pytest.raises(ConfigError) as info:
        check_mirror_template(template, "--mirror")
    assert expected in info.value.message
    assert info.value.hint
    assert check_mirror_template("https://m.example:8443/gh{path}", "--mirror")  # a port in range is fine


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("ÜÜÜ", "--name imagesmith-project"),  # became "imagesmith-project" without a word
        ("My-Proj", "--name my-proj"),  # was lowercased without a word
        ("a" * 300, "--name " + "a" * 64),  # the error named init's scratch copy of registries.toml
    ],
)
def test_init_name_that_is_no_project_name_is_refused(
    tmp_path: Path, run_cli: Callable[..., CliResult], name: str, fix: str
) -> None:
    out = run_cli("init", str(tmp_path / "p"), "--name", name, "--no-render")
    assert out.exit_code == 2
    assert "--name " in out.stderr
    assert f"fix: {fix}" in out.stderr
    assert "imagesmith-init-" not in out.stderr
    assert not (tmp_path / "p").exists()


def test_a_long_folder_name_makes_a_project_name_that_fits(
    tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    root = tmp_path / ("b" * 200)
    out = run_cli("init", str(root), "--no-render")
    assert out.exit_code == 0, out.stderr
    assert f'name = "{"b" * 64}"' in (root / PROJECT_FILE).read_text()


BRACES = "{a,b}" * 22  # 4 million patterns: `plan --only` spun for minutes


def test_a_glob_of_too_many_brace_groups_is_one_error_at_once(
    run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from imagesmith.refs import expand_braces

    assert expand_braces("2.{1,{2,3}}*") == ["2.1*", "2.2*", "2.3*"]  # order and nesting as before
    started = time.monotonic()
    out = run_cli("-C", str(PROJECT.root), "plan", "--matrix", "smoke", "--only", BRACES)
    assert time.monotonic() - started < 10
    assert out.exit_code == 2
    assert "expands to more than 4096 patterns" in out.stderr
    assert "fix: use fewer {a,b} groups" in out.stderr


@pytest.mark.parametrize(
    ("rel", "old", "new", "key"),
    [
        (
            "matrices/smoke.toml",
            "[labels]",
            f'[[exclude]]\ntorch = "{BRACES}"\nreason = "x"\n\n[labels]',
            "exclude[0]",
        ),
        (
            "matrices/registries.toml",
            'repository = "torch"',
            f'repository = "torch"\ncells = ["{BRACES}"]',
            "cells[0]",
        ),
    ],
)
def test_a_brace_bomb_in_a_file_names_the_file_and_key(
    tmp_path: Path, rel: str, old: str, new: str, key: str
) -> None:
    root = _copy_project(tmp_path / "p")
    _edit(root, rel, old, new)
    with pytest.raises(ConfigError) as info:
        _load_all(root)
    assert str(root / rel) in info.value.message
    assert key in info.value.message
    assert "expands to more than 4096 patterns" in info.value.message


def test_lock_failures_keep_their_reason_and_fix(
    tmp_path: Path, run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`imagesmith lock` kept only the first line of a failure ("uv pip compile failed"), dropping uv's reason
    (an index that does not resolve, a conflict), and always said "where the index is reachable" — also for a
    lock file that is there but wrong, whose fix is another."""
    import imagesmith.lock as lockmod
    from imagesmith.lock import LockError

    root = _copy_project(tmp_path / "p")
    (root / "locks" / LOCK).unlink()

    def unreachable(key: object, **_: object) -> None:
        raise LockError(
            f"cannot resolve {key}: uv pip compile failed:\ncause: dns error\ncause: no such host",
            hint="run `imagesmith lock` where the variant's wheel index is reachable",
        )

    monkeypatch.setattr(lockmod, "compile_lock", unreachable)
    out = run_cli("-C", str(root), "lock", "--matrix", "smoke", "--no-sizes")
    assert out.exit_code == 2
    assert "cause: dns error" in out.stderr
    assert "cause: no such host" in out.stderr
    assert "fix: run `imagesmith lock` where the variant's wheel index is reachable" in out.stderr
    lock = root / "locks" / LOCK
    lock.write_text(PROJECT.locks_dir.joinpath(LOCK).read_text().replace("torch==2.11.0", "torch==2.10.0"))
    out = run_cli("-C", str(root), "lock", "--matrix", "smoke", "--keep-versions", "--no-sizes")
    assert out.exit_code == 2
    assert "pins torch==2.10.0, but its name says" in out.stderr
    assert "fix: regenerate it: imagesmith lock --force" in out.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # B200 needs 570.133.20 (gpus.toml): init wrote a project for a host whose driver knows no B200
        (["--gpu", "b200", "--driver", "570.124.06"], "NVIDIA B200 (sm_100) needs driver >= 570.133.20"),
        # R590 has no Volta support (R580 is the last): init wrote a V100 project for a driver V100s never run
        (["--gpu", "v100", "--driver", "590.44.01"], "R590 does not support Volta GPUs"),
    ],
)
def test_init_driver_the_gpu_cannot_run_is_refused(
    tmp_path: Path, run_cli: Callable[..., CliResult], args: list[str], expected: str
) -> None:
    out = run_cli("init", str(tmp_path / "p"), *args, "--no-render")
    assert out.exit_code == 2, out.stdout
    assert expected in out.stderr
    assert not (tmp_path / "p").exists()


def test_init_says_the_gpus_own_minimum_driver(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    out = run_cli("init", str(tmp_path / "p"), "--gpu", "b200", "--driver", "570.133.20", "--no-render")
    assert out.exit_code == 0, out.stderr
    assert "(CUDA 12.8, driver >= 570.133.20)" in out.stdout  # not CUDA 12.8's 570.26: B200 needs more
    assert "# Host driver needed: >= 570.133.20" in (tmp_path / "p" / "matrices" / "b200.toml").read_text()
