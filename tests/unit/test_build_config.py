"""User config for builds: registry-mirror map (file < env < flags), extra CA, image reference parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesmith.config import ImageRef, load_config
from imagesmith.errors import ConfigError

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize(
    ("ref", "registry", "path", "tag"),
    [
        ("debian:bookworm", "docker.io", "library/debian", "bookworm"),
        ("nvidia/cuda:12.1.1-devel-ubuntu22.04", "docker.io", "nvidia/cuda", "12.1.1-devel-ubuntu22.04"),
        ("ubuntu", "docker.io", "library/ubuntu", "latest"),
        ("index.docker.io/library/python:3.11", "docker.io", "library/python", "3.11"),
        ("127.0.0.1:5000/hub/library/debian:bookworm", "127.0.0.1:5000", "hub/library/debian", "bookworm"),
        ("ghcr.io/org/img", "ghcr.io", "org/img", "latest"),
        ("localhost/img:1", "localhost", "img", "1"),
    ],
)
def test_image_ref_parse(ref: str, registry: str, path: str, tag: str) -> None:
    parsed = ImageRef.parse(ref)
    assert (parsed.registry, parsed.path, parsed.tag) == (registry, path, tag)


def test_mirror_map_from_file_env_and_flags(tmp_path: Path) -> None:
    cfg_file = tmp_path / "config.toml"
    cfg_file.write_text(
        '[registry_mirrors]\n"docker.io" = "mirror.file/hub"\n"ghcr.io" = "mirror.file/ghcr"\n'
    )
    env = {"IMAGESMITH_CONFIG": str(cfg_file), "IMAGESMITH_REGISTRY_MIRRORS": "ghcr.io=mirror.env/ghcr"}
    cfg = load_config(env)
    assert cfg.apply_mirror("debian:bookworm") == "mirror.file/hub/library/debian:bookworm"
    assert cfg.apply_mirror("ghcr.io/a/b:1") == "mirror.env/ghcr/a/b:1"
    assert cfg.apply_mirror("quay.io/a/b:1") == "quay.io/a/b:1"
    flagged = cfg.with_overrides(mirrors=["docker.io=127.0.0.1:5000/hub/"])
    assert flagged.apply_mirror("nvidia/cuda:12.1.1-devel-ubuntu22.04") == (
        "127.0.0.1:5000/hub/nvidia/cuda:12.1.1-devel-ubuntu22.04"
    )


def test_extra_ca_must_be_a_pem_file(tmp_path: Path) -> None:
    good = tmp_path / "ca.crt"
    good.write_text(PEM)
    env = {"IMAGESMITH_CONFIG": str(tmp_path / "none.toml"), "IMAGESMITH_EXTRA_CA": str(good)}
    assert load_config(env).extra_ca == good.resolve()
    bad = tmp_path / "bad.crt"
    bad.write_text("hello")
    with pytest.raises(ConfigError, match="holds no PEM certificate"):
        load_config({**env, "IMAGESMITH_EXTRA_CA": str(bad)})
    with pytest.raises(ConfigError, match=r"--extra-ca: CA certificate file .*: no such file"):
        load_config(env).with_overrides(extra_ca=tmp_path / "missing.crt")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[registry_mirrors\n", "not valid TOML"),
        ("[mirrors]\n", "unknown key 'mirrors'"),
        ('[registry_mirrors]\n"docker.io" = 5\n', "must map host"),
        ('[registry_mirrors]\n"docker.io" = ""\n', "is not HOST=PREFIX"),
        ('[build]\nextra_cert = "x"\n', r"\[build\] knows only extra_ca"),
    ],
)
def test_bad_config_file_is_one_clear_error_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    cfg_file = tmp_path / "config.toml"
    cfg_file.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config({"IMAGESMITH_CONFIG": str(cfg_file)})
    assert str(cfg_file) in str(info.value)


def test_bad_mirror_flag(tmp_path: Path) -> None:
    cfg = load_config({"IMAGESMITH_CONFIG": str(tmp_path / "none.toml")})
    with pytest.raises(ConfigError, match=r"--registry-mirror: .docker\.io. is not HOST=PREFIX"):
        cfg.with_overrides(mirrors=["docker.io"])
