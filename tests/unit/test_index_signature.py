"""The release index signed by release --sign-key and checked by pick/index --verify-key (file sources;
tests/integration/test_release.py covers the registry artifact; tests/unit/test_index_trust.py the key
sources, serial and expiry of issue 25)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imagesmith import signing
from imagesmith.cli import main
from imagesmith.errors import ConfigError, IndexTrustError
from imagesmith.indextrust import IndexKey, Trust
from imagesmith.pick import fetch_index
from tests.repo import REPO

EXAMPLE = REPO / "docs" / "examples" / "release-index.json"
KEY = signing.generate_key()


def _trust(key: signing.PublicKey) -> Trust:
    return Trust(key=IndexKey.of(key, "--verify-key test.pub"))


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def signed(tmp_path: Path) -> Path:
    index = tmp_path / "index.json"
    shutil.copy(EXAMPLE, index)
    sig = index.with_name("index.json.sig")
    sig.write_bytes(signing.sign_envelope(index.read_bytes(), signing.INDEX_PAYLOAD_TYPE, KEY))
    return index


def test_a_signed_index_verifies(signed: Path) -> None:
    assert fetch_index(str(signed), trust=_trust(KEY.public)).images


def test_without_a_key_an_unsigned_index_is_refused_unless_no_verify(signed: Path) -> None:
    """Issue 25: verification is the default; main took an unsigned index without a word."""
    signed.with_name("index.json.sig").unlink()
    with pytest.raises(IndexTrustError, match="no key to verify the release index with") as info:
        fetch_index(str(signed))
    assert "--verify-key" in (info.value.hint or "")
    assert fetch_index(str(signed), trust=Trust(verify=False)).images


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("drop-signature", "the index is not signed"),
        ("edit-index", "signs another index"),
        ("edit-signature", "bad index signature"),
        ("other-key", "unknown key"),
    ],
)
def test_a_missing_or_bad_signature_is_refused(signed: Path, damage: str, why: str) -> None:
    sig = signed.with_name("index.json.sig")
    if damage == "drop-signature":
        sig.unlink()
    elif damage == "edit-index":
        signed.write_bytes(signed.read_bytes() + b"\n")  # what the signature covers changed
    elif damage == "edit-signature":
        env = json.loads(sig.read_bytes())
        env["payload"] = env["payload"][:-8] + ("A" * 8 if not env["payload"].endswith("A" * 8) else "B" * 8)
        sig.write_text(json.dumps(env))
    else:
        sig.write_bytes(
            signing.sign_envelope(signed.read_bytes(), signing.INDEX_PAYLOAD_TYPE, signing.generate_key())
        )
    with pytest.raises(ConfigError, match=why) as info:
        fetch_index(str(signed), trust=_trust(KEY.public))
    assert str(signed) in str(info.value)


def test_pick_and_index_take_the_key_from_flag_env_or_config(
    signed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pub = tmp_path / "release.pub"
    pub.write_bytes(KEY.public.pem)
    stranger = tmp_path / "stranger.pub"
    stranger.write_bytes(signing.generate_key("ed25519").public.pem)
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.delenv("IMAGESMITH_INDEX_KEY", raising=False)
    pick = ["pick", "--index", str(signed), "--driver", "580.159.04", "--gpu", "h100"]
    assert main([*pick, "--verify-key", str(pub)]) == 0
    assert main([*pick, "--verify-key", str(stranger)]) == 2
    assert "bad index signature" in capsys.readouterr().err
    assert main(["index", str(signed), "--verify-key", str(stranger)]) == 2
    monkeypatch.setenv("IMAGESMITH_INDEX_KEY", str(stranger))
    assert main(["index", str(signed)]) == 2
    monkeypatch.delenv("IMAGESMITH_INDEX_KEY")
    (tmp_path / "config.toml").write_text(f'[pick]\nverify_key = "{stranger}"\n')
    assert main(pick) == 2
    (tmp_path / "config.toml").write_text(f'[pick]\nverify_key = "{pub}"\n')
    assert main(pick) == 0


def test_a_missing_index_file_is_named_as_such_even_with_a_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        fetch_index(str(tmp_path / "absent.json"), trust=_trust(KEY.public))
    assert "not signed" not in str(info.value)
    assert "absent.json" in str(info.value)
