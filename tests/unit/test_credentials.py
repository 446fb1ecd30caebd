"""The credential chain (imagesmith.credentials) with real subprocesses: small fake ``aws``, ``az`` and
``docker-credential-*`` programs written to tmp_path and put first on PATH. No cloud, no registry."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagesmith.credentials import (
    CredentialChain,
    Credentials,
    DockerConfigProvider,
    EnvironmentProvider,
    auth_hint,
    clear_token_cache,
    credential_chain,
    lookup_credentials,
    token_kind,
)
from imagesmith.errors import RegistryError
from imagesmith.kinds import host_part

ECR = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"
ACR = "myreg.azurecr.io"


@pytest.fixture(autouse=True)
def _no_cached_tokens() -> Iterator[None]:
    clear_token_cache()
    yield
    clear_token_cache()


class FakeCli:
    """A program on PATH that counts its runs, records its arguments and prints ``<prefix>-<run>``."""

    def __init__(self, bin_dir: Path, name: str, body: str | None = None, prefix: str = "secret") -> None:
        self.dir = bin_dir / f".{name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        default = f"printf '%s-%s\\n' {prefix} \"$n\""
        script = bin_dir / name
        script.write_text(
            "#!/bin/sh\n"
            "n=0\n"
            f'[ -f "{self.dir}/count" ] && read n < "{self.dir}/count"\n'
            "n=$((n+1))\n"
            f'echo "$n" > "{self.dir}/count"\n'
            f'echo "$*" >> "{self.dir}/args"\n' + (body if body is not None else default) + "\n"
        )
        script.chmod(0o755)

    @property
    def runs(self) -> int:
        count = self.dir / "count"
        return int(count.read_text()) if count.is_file() else 0

    @property
    def args(self) -> list[str]:
        path = self.dir / "args"
        return path.read_text().splitlines() if path.is_file() else []


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", f"{path}{os.pathsep}{os.environ.get('PATH', '')}")
    return path


@pytest.fixture
def no_config(tmp_path: Path) -> dict[str, str]:
    """An environment with no credential variables and an empty docker config folder."""
    folder = tmp_path / "docker-config"
    folder.mkdir()
    return {"DOCKER_CONFIG": str(folder)}


def _jwt(exp: float) -> str:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part({'exp': int(exp), 'aud': ACR})}.c2lnbmF0dXJl"


# -- which chain for which registry --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "region"),
    [
        (ECR, "eu-west-1"),
        ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn", "cn-north-1"),
        ("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com", "us-gov-west-1"),
        ("123456789012.DKR.ECR.US-EAST-2.AMAZONAWS.COM", "us-east-2"),
        ("ecr.example.com", None),
        ("12345.dkr.ecr.eu-west-1.amazonaws.com", None),  # not a 12-digit account
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com.evil.example", None),
    ],
)
def test_ecr_region_is_read_from_the_host(host: str, region: str | None) -> None:
    assert host_part("ecr", host, "region") == region


def test_the_token_kind_is_the_registry_kind_or_what_a_generic_host_reveals() -> None:
    assert token_kind(ECR, "generic") == "ecr"
    assert token_kind("public.ecr.aws", "generic") == "ecr"
    assert token_kind(ACR, "generic") == "azure-acr"
    assert token_kind(ACR, "ghcr") == "ghcr"  # a declared kind is never second-guessed
    assert token_kind("ghcr.io", "generic") == "generic"
    assert host_part("azure-acr", ACR, "name") == "myreg"
    assert host_part("aliyun-acr", "registry.cn-hangzhou.aliyuncs.com", "name") is None
    names = [p.name for p in credential_chain(ECR, "ecr").providers]
    assert names == ["environment", "docker config", "token command"]
    assert [p.name for p in credential_chain("ghcr.io", "ghcr").providers] == ["environment", "docker config"]
    # kind aliyun-acr: no Azure token command, and the hint speaks of Aliyun
    aliyun = "registry.cn-hangzhou.aliyuncs.com"
    assert [p.name for p in credential_chain(aliyun, "aliyun-acr").providers] == [
        "environment",
        "docker config",
    ]
    assert "Aliyun" in auth_hint(aliyun, "aliyun-acr")


# -- token commands ------------------------------------------------------------------------------------------
def test_ecr_runs_aws_with_the_hosts_region_once_and_caches_for_12_hours(
    bin_dir: Path, no_config: dict[str, str]
) -> None:
    aws = FakeCli(bin_dir, "aws")
    chain = credential_chain(ECR, "ecr", name="prod", env=no_config)
    before = time.time()
    creds = chain.resolve()
    assert creds is not None
    assert (creds.username, creds.password) == ("AWS", "secret-1")
    assert aws.args == ["ecr get-login-password --region eu-west-1"]
    assert creds.expires_at is not None
    assert before + 12 * 3600 - 5 <= creds.expires_at <= time.time() + 12 * 3600
    assert not creds.expired()
    assert "secret-1" not in repr(creds)
    assert "aws ecr get-login-password --region eu-west-1" in creds.origin
    again = credential_chain(ECR, "ecr", name="prod", env=no_config).resolve()  # another client, same process
    assert again is not None
    assert again.password == "secret-1"
    assert aws.runs == 1


def test_ecr_public_uses_ecr_public_in_us_east_1(bin_dir: Path, no_config: dict[str, str]) -> None:
    aws = FakeCli(bin_dir, "aws")
    creds = credential_chain("public.ecr.aws", "ecr", env=no_config).resolve()
    assert creds is not None
    assert creds.username == "AWS"
    assert aws.args == ["ecr-public get-login-password --region us-east-1"]


def test_acr_runs_az_and_takes_the_tokens_own_expiry(bin_dir: Path, no_config: dict[str, str]) -> None:
    exp = time.time() + 3 * 3600 - 60
    az = FakeCli(bin_dir, "az", body=f"echo {_jwt(exp)}")
    creds = credential_chain(ACR, "azure-acr", name="azure", env=no_config).resolve()
    assert creds is not None
    assert creds.username == "00000000-0000-0000-0000-000000000000"
    assert creds.password == _jwt(exp)
    assert az.args == ["acr login --name myreg --expose-token --output tsv --query accessToken"]
    assert creds.expires_at == int(exp)


def test_acr_token_without_an_expiry_is_taken_as_3_hours(bin_dir: Path, no_config: dict[str, str]) -> None:
    FakeCli(bin_dir, "az", prefix="opaque")
    creds = credential_chain(ACR, "generic", env=no_config).resolve()  # a generic *.azurecr.io is ACR
    assert creds is not None
    assert creds.expires_at is not None
    assert abs(creds.expires_at - (time.time() + 3 * 3600)) < 60


def test_an_expiring_token_is_fetched_again(bin_dir: Path, no_config: dict[str, str]) -> None:
    """A cached token within the margin of its expiry is not handed out: the command runs again."""
    az = FakeCli(bin_dir, "az", body=f"echo {_jwt(time.time() + 30)}")
    chain = credential_chain(ACR, "azure-acr", env=no_config)
    first = chain.resolve()
    assert first is not None
    assert first.expired()
    chain.resolve()
    assert az.runs == 2


def test_a_missing_program_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    env = {"DOCKER_CONFIG": str(tmp_path)}
    with pytest.raises(RegistryError) as info:
        credential_chain(ECR, "ecr", name="prod", env=env).resolve()
    err = info.value
    assert f"registry prod ({ECR})" in err.message
    assert "`aws ecr get-login-password --region eu-west-1`" in err.message
    assert "aws is not installed" in err.message
    assert err.hint is not None
    assert "install the AWS CLI" in err.hint
    assert "IMAGESMITH_REGISTRY_123456789012_DKR_ECR_EU__WEST__1_AMAZONAWS_COM_USERNAME" in err.hint
    with pytest.raises(RegistryError, match=r"`az acr login --name myreg .*` cannot run") as acr:
        credential_chain(ACR, "azure-acr", env=env).resolve()
    assert acr.value.hint is not None
    assert "install the Azure CLI" in acr.value.hint


def test_a_failing_program_names_the_command_and_its_message_never_its_stdout(
    bin_dir: Path, no_config: dict[str, str]
) -> None:
    FakeCli(
        bin_dir,
        "aws",
        body="echo leaked-looking-stdout\n"
        'echo "Unable to locate credentials. Run aws configure." >&2\n'
        "exit 255",
    )
    with pytest.raises(RegistryError) as info:
        credential_chain(ECR, "ecr", name="prod", env=no_config).resolve()
    text = str(info.value)
    assert f"registry prod ({ECR})" in text
    assert "`aws ecr get-login-password --region eu-west-1` failed (exit 255)" in text
    assert "Unable to locate credentials" in text
    assert "leaked-looking-stdout" not in text
    assert info.value.hint is not None
    assert "aws sso login" in info.value.hint


def test_a_program_that_prints_nothing_is_an_error(bin_dir: Path, no_config: dict[str, str]) -> None:
    FakeCli(bin_dir, "az", body="true")
    with pytest.raises(RegistryError, match=r"failed \(exit 0\): no password on stdout"):
        credential_chain(ACR, "azure-acr", env=no_config).resolve()


def test_kind_ecr_on_a_host_without_a_region_fails_only_when_nothing_else_is_set(
    bin_dir: Path, no_config: dict[str, str]
) -> None:
    aws = FakeCli(bin_dir, "aws")
    with pytest.raises(RegistryError, match="the region for `aws ecr get-login-password` cannot be read"):
        credential_chain("ecr.example.com", "ecr", env=no_config).resolve()
    env = {
        **no_config,
        "IMAGESMITH_REGISTRY_ECR_EXAMPLE_COM_USERNAME": "AWS",
        "IMAGESMITH_REGISTRY_ECR_EXAMPLE_COM_PASSWORD": "pw",
    }
    creds = credential_chain("ecr.example.com", "ecr", env=env).resolve()
    assert creds is not None
    assert creds.password == "pw"
    assert aws.runs == 0


# -- order: explicit credentials win -------------------------------------------------------------------------
def test_environment_wins_over_the_token_command_and_is_never_refreshed(
    bin_dir: Path, no_config: dict[str, str]
) -> None:
    aws = FakeCli(bin_dir, "aws")
    key = "IMAGESMITH_REGISTRY_123456789012_DKR_ECR_EU__WEST__1_AMAZONAWS_COM"
    env = {**no_config, f"{key}_USERNAME": "AWS", f"{key}_PASSWORD": "from-env"}
    chain = credential_chain(ECR, "ecr", env=env)
    creds = chain.resolve()
    assert creds is not None
    assert (creds.password, creds.origin) == ("from-env", f"${key}_USERNAME")
    assert chain.refresh(creds) is None  # explicit: a refusal is reported, not papered over
    assert aws.runs == 0


def test_docker_config_wins_and_a_refused_entry_falls_to_the_token_command(
    bin_dir: Path, no_config: dict[str, str]
) -> None:
    """A stale `docker login` of an ECR host (12 h passwords) is replaced by `aws` after the refusal."""
    aws = FakeCli(bin_dir, "aws")
    auth = base64.b64encode(b"AWS:stale-login").decode()
    (Path(no_config["DOCKER_CONFIG"]) / "config.json").write_text(
        json.dumps({"auths": {ECR: {"auth": auth}}})
    )
    chain = credential_chain(ECR, "ecr", env=no_config)
    creds = chain.resolve()
    assert creds is not None
    assert creds.password == "stale-login"
    assert aws.runs == 0
    fresh = chain.refresh(creds)
    assert fresh is not None
    assert (fresh.username, fresh.password) == ("AWS", "secret-1")
    assert aws.runs == 1


def test_a_refused_docker_config_entry_without_the_program_stays_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_config: dict[str, str]
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    auth = base64.b64encode(b"AWS:stale-login").decode()
    (Path(no_config["DOCKER_CONFIG"]) / "config.json").write_text(
        json.dumps({"auths": {ECR: {"auth": auth}}})
    )
    chain = credential_chain(ECR, "ecr", env=no_config)
    creds = chain.resolve()
    assert creds is not None
    assert chain.refresh(creds) is None  # the registry's refusal is the error, not a missing `aws`


def test_a_refreshed_token_is_a_new_run_not_the_cache(bin_dir: Path, no_config: dict[str, str]) -> None:
    aws = FakeCli(bin_dir, "aws")
    chain = credential_chain(ECR, "ecr", env=no_config)
    first = chain.resolve()
    assert first is not None
    fresh = chain.refresh(first)
    assert fresh is not None
    assert fresh.password == "secret-2"
    assert aws.runs == 2
    assert chain.resolve() == fresh  # the cache holds the fresh one
    given = Credentials("u", "p")  # handed over directly (no provider): never refreshed
    assert chain.refresh(given) is None


def test_a_credential_helper_is_run_as_a_real_program(bin_dir: Path, no_config: dict[str, str]) -> None:
    helper = FakeCli(
        bin_dir,
        "docker-credential-fake",
        body="read server\n"
        'printf \'{"ServerURL":"%s","Username":"robot","Secret":"helper-%s"}\' "$server" "$n"',
    )
    FakeCli(bin_dir, "docker-credential-empty", body="echo credentials not found >&2\nexit 1")
    config = Path(no_config["DOCKER_CONFIG"]) / "config.json"
    config.write_text(json.dumps({"credHelpers": {"ghcr.io": "fake"}, "credsStore": "empty"}))
    chain = credential_chain("ghcr.io", "ghcr", env=no_config)
    creds = chain.resolve()
    assert creds is not None
    assert (creds.username, creds.password, creds.origin) == ("robot", "helper-1", "docker-credential-fake")
    assert helper.args == ["get"]
    fresh = chain.refresh(creds)  # a helper (say ecr-login) answers afresh when asked again
    assert fresh is not None
    assert fresh.password == "helper-2"
    assert lookup_credentials("quay.io", no_config) is None  # the store's "not found" is no credentials


def test_a_helper_that_is_not_installed_names_it(tmp_path: Path, no_config: dict[str, str]) -> None:
    config = Path(no_config["DOCKER_CONFIG"]) / "config.json"
    config.write_text(json.dumps({"credsStore": "imagesmith-test-nonexistent"}))
    with pytest.raises(RegistryError, match="docker-credential-imagesmith-test-nonexistent is not installed"):
        lookup_credentials("ghcr.io", no_config)


# -- moved from tests/integration/test_registry.py (they need no service) ------------------------------------
def test_credentials_from_env_win_and_never_show_the_secret(tmp_path: Path) -> None:
    env = {
        "IMAGESMITH_REGISTRY_GHCR_IO_USERNAME": "bot",
        "IMAGESMITH_REGISTRY_GHCR_IO_PASSWORD": "s3cr3t",
        "DOCKER_CONFIG": str(tmp_path),
    }
    creds = lookup_credentials("ghcr.io", env)
    assert creds is not None
    assert (creds.username, creds.password) == ("bot", "s3cr3t")
    assert "s3cr3t" not in repr(creds)


def test_credentials_from_docker_config_auths(tmp_path: Path) -> None:
    auth = base64.b64encode(b"alice:pw:with:colons").decode()
    (tmp_path / "config.json").write_text(
        json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": auth}}})
    )
    creds = lookup_credentials("docker.io", {"DOCKER_CONFIG": str(tmp_path)})
    assert creds is not None
    assert (creds.username, creds.password) == ("alice", "pw:with:colons")


def test_half_set_credentials_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="only one of IMAGESMITH_REGISTRY_GHCR_IO_USERNAME"):
        lookup_credentials(
            "ghcr.io", {"IMAGESMITH_REGISTRY_GHCR_IO_USERNAME": "x", "DOCKER_CONFIG": str(tmp_path)}
        )


def test_broken_docker_config_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(RegistryError, match=r"config\.json is not valid JSON"):
        lookup_credentials("ghcr.io", {"DOCKER_CONFIG": str(tmp_path)})


def test_the_chain_is_a_value_built_of_providers(no_config: dict[str, str]) -> None:
    """A chain of one's own (the seam tests and other tools use): the first answer wins."""
    env = {
        **no_config,
        "IMAGESMITH_REGISTRY_R_EXAMPLE_USERNAME": "u",
        "IMAGESMITH_REGISTRY_R_EXAMPLE_PASSWORD": "p",
    }
    chain = CredentialChain("r.example", "generic", (DockerConfigProvider(env), EnvironmentProvider(env)))
    creds = chain.resolve()
    assert creds is not None
    assert creds.provider == "environment"
