"""``imagesmith lock`` behind a TLS-intercepting proxy: uv trusts the extra CA of the user config
(``IMAGESMITH_EXTRA_CA``, ``[build] extra_ca``) on top of the roots it trusts anyway, as pip inside a build
does (docs/build.md). Found when a clean-clone run without ``SSL_CERT_FILE`` in its environment failed both
real-uv lock tests with ``invalid peer certificate: UnknownIssuer`` although ``IMAGESMITH_EXTRA_CA`` was set.

uv here is :mod:`tests.fakeuv` as a real process on ``PATH``: it records the ``SSL_CERT_FILE`` each call ran
with and the bundle that file held."""

from __future__ import annotations

import shutil
import ssl
from collections.abc import Callable
from pathlib import Path

import certifi
import pytest

from imagesmith.lock import LockKey
from imagesmith.project import PROJECT_FILE
from tests import fakeuv
from tests.conftest import CliResult
from tests.repo import PROJECT

KEY = LockKey(torch="2.11.0", variant="cu130", python="3.11")
REF = PROJECT.locks_dir / KEY.filename
PEM = "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n"


def _pem(path: Path, probe: str) -> Path:
    path.write_text(PEM.format(probe))
    return path


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "p"
    (root / "matrices").mkdir(parents=True)
    (root / PROJECT_FILE).write_text('schema = 1\ndefault_matrix = "smoke"\n')
    shutil.copy(PROJECT.matrices_dir / "smoke.toml", root / "matrices" / "smoke.toml")
    shutil.copy(PROJECT.registries_file, root / "matrices" / "registries.toml")
    (root / "locks").mkdir()
    for name, value in fakeuv.install(tmp_path / "bin", REF).items():
        monkeypatch.setenv(name, value)
    (tmp_path / "seen").mkdir()
    monkeypatch.setenv("FAKE_UV_CERTS", str(tmp_path / "seen"))
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "no-config.toml"))  # flags and environment only
    for name in ("IMAGESMITH_EXTRA_CA", "SSL_CERT_FILE", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS"):
        monkeypatch.delenv(name, raising=False)
    return root


def _seen(tmp_path: Path) -> list[tuple[str, str | None]]:
    """(SSL_CERT_FILE, the bundle it held) of each uv call, in order."""
    seen = tmp_path / "seen"
    calls = sorted(seen.glob("*.path"), key=lambda p: int(p.stem))
    assert calls, "uv never ran"
    out = []
    for c in calls:
        pem = seen / f"{c.stem}.pem"
        out.append((c.read_text(), pem.read_text() if pem.exists() else None))
    return out


def _lock(run_cli: Callable[..., CliResult], root: Path) -> CliResult:
    return run_cli("-C", str(root), "lock", "--matrix", "smoke", "--no-sizes")


def test_uv_trusts_the_extra_ca_on_top_of_its_ssl_cert_file(
    proj: Path, tmp_path: Path, run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _pem(tmp_path / "base.pem", "BASE-ROOTS")
    ca = _pem(tmp_path / "proxy-ca.pem", "PROXY-CA")
    monkeypatch.setenv("SSL_CERT_FILE", str(base))
    monkeypatch.setenv("IMAGESMITH_EXTRA_CA", str(ca))
    r = _lock(run_cli, proj)
    assert r.exit_code == 0, r.stderr
    calls = _seen(tmp_path)
    assert len(calls) >= 2  # the runtime and the builder resolution
    for path, held in calls:
        assert held is not None
        assert held.index("BASE-ROOTS") < held.index("PROXY-CA"), held
        assert path not in (str(base), str(ca))
        assert not Path(path).exists(), "the scratch bundle outlives uv's run"
    text = (proj / "locks" / KEY.filename).read_text()
    for machine in (str(ca), str(base), calls[0][0], "PROXY-CA"):
        assert machine not in text  # no path of this machine, no certificate, in a committed lock


def test_without_ssl_cert_file_the_base_is_the_mozilla_roots_uv_bundles(
    proj: Path, tmp_path: Path, run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGESMITH_EXTRA_CA", str(_pem(tmp_path / "proxy-ca.pem", "PROXY-CA")))
    r = _lock(run_cli, proj)
    assert r.exit_code == 0, r.stderr
    mozilla = Path(certifi.where()).read_text().rstrip("\n")
    for _, held in _seen(tmp_path):
        assert held is not None
        assert held.startswith(mozilla)
        assert held.endswith(PEM.format("PROXY-CA"))


@pytest.mark.parametrize("flag", ["UV_NATIVE_TLS", "UV_SYSTEM_CERTS"])
def test_with_system_certs_asked_for_the_base_is_the_system_bundle(
    proj: Path,
    tmp_path: Path,
    run_cli: Callable[..., CliResult],
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
) -> None:
    system = _pem(tmp_path / "system.pem", "SYSTEM-STORE")
    paths = ssl.DefaultVerifyPaths(
        str(system), str(tmp_path), "SSL_CERT_FILE", str(system), "SSL_CERT_DIR", ""
    )
    monkeypatch.setattr(ssl, "get_default_verify_paths", lambda: paths)
    monkeypatch.setenv(flag, "true")
    monkeypatch.setenv("IMAGESMITH_EXTRA_CA", str(_pem(tmp_path / "proxy-ca.pem", "PROXY-CA")))
    r = _lock(run_cli, proj)
    assert r.exit_code == 0, r.stderr
    for _, held in _seen(tmp_path):
        assert held == PEM.format("SYSTEM-STORE") + PEM.format("PROXY-CA")


def test_without_an_extra_ca_uv_gets_the_environment_as_it_is(
    proj: Path, tmp_path: Path, run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    r = _lock(run_cli, proj)
    assert r.exit_code == 0, r.stderr
    assert {path for path, _ in _seen(tmp_path)} == {""}
    shutil.rmtree(tmp_path / "seen")
    (tmp_path / "seen").mkdir()
    base = _pem(tmp_path / "base.pem", "BASE-ROOTS")
    monkeypatch.setenv("SSL_CERT_FILE", str(base))
    r = run_cli("-C", str(proj), "lock", "--matrix", "smoke", "--no-sizes", "--force")
    assert r.exit_code == 0, r.stderr
    assert {(p, h) for p, h in _seen(tmp_path)} == {(str(base), PEM.format("BASE-ROOTS"))}


def test_an_ssl_cert_file_that_cannot_be_read_is_one_error_naming_it_and_no_lock_is_written(
    proj: Path, tmp_path: Path, run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "gone.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    monkeypatch.setenv("IMAGESMITH_EXTRA_CA", str(_pem(tmp_path / "proxy-ca.pem", "PROXY-CA")))
    r = _lock(run_cli, proj)
    assert r.exit_code == 2, r.stderr
    assert str(missing) in r.stderr
    assert "SSL_CERT_FILE" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (proj / "locks" / KEY.filename).exists()
    assert not list((tmp_path / "seen").glob("*.path"))  # uv never ran
