"""Issue 12: every subcommand with hostile arguments (missing files, folders for files, binary files, absurd
numbers, unknown enums, empty, very long and control-character strings) ends in one `error:` line and one
`fix:` line on stderr, an exit status other than 0 and 1 (1 = imagesmith crashed, a bug), no traceback.

Every row fails before a Docker engine, a registry or the network would be needed.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.repo import REPO

Run = Callable[..., Any]

LONG = "x" * 5000
CTRL = "\x1b[2J\x07\x08evil\r\n"
SMOKE = str(REPO / "matrices" / "smoke.toml")
SMI = str(REPO / "tests" / "data" / "nvsmi" / "real_580.159.04_h200_default.txt")
MISSING = "{tmp}/missing.toml"
DIR = "{tmp}/dir"
BIN = "{tmp}/binary.toml"
BINF = "{tmp}/binary.bin"

# (id, argv); {tmp}: a folder holding dir/ (an empty folder), binary.toml and binary.bin (every byte value)
ROWS: list[tuple[str, list[str]]] = [
    # init
    ("init-unknown-gpu", ["init", "{tmp}/p", "--gpu", "nosuchgpu"]),
    ("init-empty-gpu", ["init", "{tmp}/p", "--gpu", ""]),
    ("init-file-as-folder", ["init", BINF]),
    ("init-unknown-base", ["init", "{tmp}/p", "--base", "windows:11"]),
    ("init-absurd-driver", ["init", "{tmp}/p", "--driver", "9" * 40]),
    ("init-control-name", ["init", "{tmp}/p", "--name", CTRL]),
    ("init-long-registry", ["init", "{tmp}/p", "--registry", LONG]),
    # compat
    ("compat-empty-torch", ["compat", "--torch", "", "--driver", "535.104.05", "--gpu", "a100"]),
    ("compat-long-torch", ["compat", "--torch", LONG, "--driver", "535.104.05", "--gpu", "a100"]),
    ("compat-absurd-driver", ["compat", "--torch", "2.1.2", "--driver", "9" * 400, "--gpu", "a100"]),
    (
        "compat-absurd-cuda",
        ["compat", "--torch", "2.1.2", "--cuda", "cu99999999999", "--driver", "535.104.05", "--gpu", "a100"],
    ),
    ("compat-control-gpu", ["compat", "--torch", "2.1.2", "--driver", "535.104.05", "--gpu", CTRL]),
    ("compat-smi-missing", ["compat", "--torch", "2.1.2", "--nvidia-smi", MISSING]),
    ("compat-smi-dir", ["compat", "--torch", "2.1.2", "--nvidia-smi", DIR]),
    ("compat-smi-binary", ["compat", "--torch", "2.1.2", "--nvidia-smi", BINF]),
    # plan / render / lock
    ("plan-missing", ["plan", "--matrix", MISSING]),
    ("plan-dir", ["plan", "--matrix", DIR]),
    ("plan-binary", ["plan", "--matrix", BIN]),
    ("plan-empty", ["plan", "--matrix", ""]),
    ("plan-control", ["plan", "--matrix", CTRL]),
    ("plan-long", ["plan", "--matrix", LONG]),
    ("plan-only-nothing", ["plan", "--matrix", SMOKE, "--only", CTRL]),
    ("plan-json-github", ["plan", "--json", "--github"]),
    ("plan-unknown-flag", ["plan", "--colour"]),
    ("render-missing", ["render", "--matrix", MISSING]),
    ("render-dir", ["render", "--check", "--matrix", DIR]),
    ("render-binary", ["render", "--matrix", BIN]),
    ("lock-missing", ["lock", "--matrix", MISSING]),
    ("lock-binary", ["lock", "--matrix", BIN]),
    # build / fetch-sources
    ("build-unknown-backend", ["build", "--matrix", SMOKE, "--backend", "podman"]),
    ("build-jobs-zero", ["build", "--matrix", SMOKE, "--jobs", "0"]),
    ("build-jobs-absurd", ["build", "--matrix", SMOKE, "--jobs", "9" * 30]),
    ("build-jobs-text", ["build", "--matrix", SMOKE, "--jobs", "many"]),
    ("build-extra-ca-binary", ["build", "--matrix", SMOKE, "--extra-ca", BINF]),
    ("build-extra-ca-dir", ["build", "--matrix", SMOKE, "--extra-ca", DIR]),
    ("build-mirror-junk", ["build", "--matrix", SMOKE, "--registry-mirror", CTRL]),
    ("build-wheels-binary", ["build", "--matrix", SMOKE, "--wheels", BINF]),
    ("build-missing-matrix", ["build", "--matrix", MISSING]),
    # re-check: a --summary that cannot be written failed only after every cell was built and pushed
    ("build-summary-is-dir", ["build", "--matrix", SMOKE, "--summary", DIR]),
    ("build-summary-under-file", ["build", "--matrix", SMOKE, "--summary", BINF + "/s.json"]),
    ("build-summary-proc", ["build", "--matrix", SMOKE, "--summary", "/proc/imagesmith-summary.json"]),
    ("fetch-both-sources", ["fetch-sources", "--from-git", DIR, "--from", DIR]),
    ("fetch-bad-mirror", ["fetch-sources", "--mirror", "{nope}"]),
    ("fetch-from-missing", ["fetch-sources", "--matrix", SMOKE, "--from", MISSING]),
    ("fetch-from-binary", ["fetch-sources", "--matrix", SMOKE, "--from", BINF]),
    ("fetch-missing-matrix", ["fetch-sources", "--matrix", MISSING]),
    # validate (local:// would run the suite: every row fails on its flags first)
    ("validate-gpus-enum", ["validate", "img:latest", "--gpus", "all-of-them"]),
    ("validate-shm-size-local", ["validate", "--shm-size", "1g"]),
    ("validate-listing-missing", ["validate", "--listing", MISSING]),
    ("validate-listing-binary", ["validate", "--listing", BINF]),
    ("validate-listing-dir", ["validate", "--listing", DIR]),
    ("validate-checkpoint-size-tiny", ["validate", "--checkpoint-size", "1k"]),
    ("validate-checkpoint-size-junk", ["validate", "--checkpoint-size", CTRL]),
    ("validate-dcgm-level-absurd", ["validate", "--dcgm-level", "9"]),
    ("validate-report-is-file", ["validate", "--report", BINF]),
    ("validate-shm-absurd", ["validate", "--shm-min", "9" * 30 + "g"]),
    ("validate-shm-exponent", ["validate", "--shm-min", "1e400g"]),
    ("validate-shm-junk", ["validate", "--shm-min", CTRL]),
    ("validate-nccl-bytes-junk", ["validate", "--nccl-max-bytes", LONG]),
    ("validate-nccl-rounds-absurd", ["validate", "--nccl-rounds", "9" * 30]),
    ("validate-ratio-absurd", ["validate", "--perf-fail-ratio", "1e308"]),
    ("validate-ratio-nan", ["validate", "--perf-fail-ratio", "nan"]),
    ("validate-baseline-binary", ["validate", "--baseline", BINF]),
    ("validate-baseline-dir", ["validate", "--baseline", DIR]),
    ("validate-baseline-missing", ["validate", "--baseline", MISSING]),
    ("validate-baseline-from-binary", ["validate", "--baseline-from", BINF]),
    ("validate-ssh-config-missing", ["validate", "ssh://me@host", "--ssh-config", MISSING]),
    ("validate-empty-target", ["validate", ""]),
    ("validate-control-target", ["validate", CTRL]),
    ("validate-bad-ssh-target", ["validate", "ssh://"]),
    ("validate-expect-count-zero", ["validate", "--expect-count", "0"]),
    # pick
    ("pick-no-index", ["pick", "--driver", "535.104.05", "--gpu", "a100"]),
    ("pick-index-missing", ["pick", "--index", MISSING, "--driver", "535.104.05", "--gpu", "a100"]),
    ("pick-index-dir", ["pick", "--index", DIR, "--driver", "535.104.05", "--gpu", "a100"]),
    ("pick-index-binary", ["pick", "--index", BINF, "--driver", "535.104.05", "--gpu", "a100"]),
    ("pick-smi-binary", ["pick", "--index", BINF, "--nvidia-smi", BINF]),
    ("pick-smi-dir", ["pick", "--index", BINF, "--nvidia-smi", DIR]),
    ("pick-unknown-gpu", ["pick", "--index", BINF, "--driver", "535.104.05", "--gpu", CTRL]),
    ("pick-driver-junk", ["pick", "--index", BINF, "--driver", LONG, "--gpu", "a100"]),
    ("pick-driver-alone", ["pick", "--index", BINF, "--driver", "535.104.05"]),
    # release / candidates / index
    ("release-no-reports", ["release", "--matrix", SMOKE]),
    ("release-reports-missing", ["release", "--matrix", SMOKE, "--reports", MISSING, "--dry-run"]),
    ("release-reports-binary", ["release", "--matrix", SMOKE, "--reports", BINF, "--dry-run"]),
    ("release-matrix-missing", ["release", "--matrix", MISSING, "--reports", DIR]),
    ("release-registries-binary", ["release", "--matrix", SMOKE, "--reports", DIR, "--registries", BIN]),
    ("candidates-matrix-missing", ["candidates", "--matrix", MISSING]),
    ("candidates-registries-binary", ["candidates", "--matrix", SMOKE, "--registries", BIN]),
    ("candidates-registries-dir", ["candidates", "--matrix", SMOKE, "--registries", DIR]),
    ("index-missing", ["index", MISSING]),
    ("index-dir", ["index", DIR]),
    ("index-binary", ["index", BINF]),
    ("index-empty", ["index", ""]),
    ("index-control", ["index", CTRL]),
    ("index-bad-oci", ["index", "oci://"]),
    ("index-bad-scheme", ["index", "gopher://x/y"]),
    # schema
    ("schema-out-is-file", ["schema", "--out", BINF]),
    ("refresh-bad-releases", ["refresh-compat", "--releases", "x.y-", "--offline", "{tmp}"]),
    ("refresh-offline-missing", ["refresh-compat", "--offline", "{tmp}/none", "--no-arch"]),
    ("refresh-offline-is-file", ["refresh-compat", "--offline", BINF, "--no-arch"]),
    ("refresh-data-file-binary", ["refresh-compat", "--offline", "{tmp}", "--data-file", BINF, "--no-arch"]),
    ("schema-check-missing", ["schema", "--check", "--out", "{tmp}/none"]),
    # paths longer than the file system allows
    ("init-long-folder", ["init", "{tmp}/" + LONG]),
    ("compat-smi-long", ["compat", "--torch", "2.1.2", "--nvidia-smi", "{tmp}/" + LONG]),
    ("build-extra-ca-long", ["build", "--matrix", SMOKE, "--extra-ca", "{tmp}/" + LONG]),
    ("validate-report-long", ["validate", "--report", "{tmp}/" + LONG]),
    ("validate-baseline-long", ["validate", "--baseline", "{tmp}/" + LONG]),
    ("release-reports-long", ["release", "--matrix", SMOKE, "--reports", "{tmp}/" + LONG, "--dry-run"]),
    (
        "release-scan-reports-missing",
        ["release", "--matrix", SMOKE, "--reports", DIR, "--scan-reports", MISSING, "--dry-run"],
    ),
    ("release-scan-reports-binary", ["release", "--matrix", SMOKE, "--reports", DIR, "--scan-reports", BINF]),
    # sbom: refused before syft runs
    ("sbom-tag-not-digest", ["sbom", "127.0.0.1:5000/team/torch:latest", "--out", "{tmp}/o"]),
    ("sbom-control", ["sbom", CTRL, "--out", "{tmp}/o"]),
    ("sbom-long", ["sbom", LONG, "--out", "{tmp}/o"]),
    ("sbom-lock-binary", ["sbom", "h/r@sha256:" + "a" * 64, "--out", "{tmp}/o", "--lock", BINF]),
    ("sbom-lock-dir", ["sbom", "h/r@sha256:" + "a" * 64, "--out", "{tmp}/o", "--lock", DIR]),
    ("index-long", ["index", "{tmp}/" + LONG]),
    ("schema-out-long", ["schema", "--out", "{tmp}/" + LONG]),
    ("plan-matrix-long-path", ["plan", "--matrix", "{tmp}/" + LONG + ".toml"]),
    # keygen
    ("keygen-existing-file", ["keygen", BINF]),
    ("keygen-existing-dir", ["keygen", DIR]),
    ("keygen-bad-type", ["keygen", "{tmp}/k.key", "--type", CTRL]),
    ("keygen-long", ["keygen", "{tmp}/" + LONG]),
    ("keygen-same-public", ["keygen", "{tmp}/k.key", "--public", "{tmp}/k.key"]),
    # the root
    ("root-unknown-command", ["frobnicate"]),
    ("root-project-missing", ["-C", "{tmp}/nowhere", "plan"]),
    ("root-project-binary", ["-C", BINF, "plan"]),
    # re-check: an empty -C (an unset "$VAR") is an error, never "the project found from here"
    ("root-project-empty", ["-C", "", "plan"]),
    ("root-project-blank", ["--project", "  ", "render", "--check"]),
]


@pytest.fixture
def hostile_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "dir").mkdir()
    junk = bytes(range(256)) * 4
    (tmp_path / "binary.toml").write_bytes(junk)
    (tmp_path / "binary.bin").write_bytes(junk)
    monkeypatch.chdir(REPO)  # the project is this repository's
    monkeypatch.delenv("IMAGESMITH_INDEX", raising=False)
    monkeypatch.delenv("IMAGESMITH_PROJECT", raising=False)
    monkeypatch.setenv("IMAGESMITH_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_the_table_covers_every_subcommand(run_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    listed = run_cli("--help").stdout.split("Commands", 1)[1]
    commands = set(re.findall(r"^│ (\S+)\s", listed, re.MULTILINE))
    assert commands, listed
    assert commands <= {argv[0] for _, argv in ROWS}, commands - {argv[0] for _, argv in ROWS}


@pytest.mark.parametrize(("argv"), [argv for _, argv in ROWS], ids=[name for name, _ in ROWS])
def test_hostile_arguments_are_one_clear_error(run_cli: Run, hostile_tmp: Path, argv: list[str]) -> None:
    args = [a.replace("{tmp}", str(hostile_tmp)) for a in argv]
    try:
        result = run_cli(*args)
    except Exception:  # the point: report the crash as this row's failure
        pytest.fail(f"imagesmith crashed:\n{traceback.format_exc()}")
    err = result.stderr
    assert result.exit_code not in (0, 1), f"exit {result.exit_code}\n{err}\n{result.stdout[:2000]}"
    assert "Traceback" not in err + result.stdout
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1, err
    assert len([line for line in err.splitlines() if re.match(r"^\s+fix: \S", line)]) == 1, err
