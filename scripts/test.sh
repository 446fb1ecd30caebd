#!/usr/bin/env bash
# The whole test suite, one command (what CI runs through .ci/run): setup, lint, types, import contracts,
# render drift, pytest (unit + docker + registry + e2e). As root on Debian bookworm. Extra pytest arguments are
# passed through.
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRA_CA="${IMAGESMITH_TEST_EXTRA_CA:-${PIP_CERT:-}}"
if [[ -z $EXTRA_CA ]] && command -v pip3 >/dev/null; then
    EXTRA_CA="$(pip3 config get global.cert 2>/dev/null || true)"
fi
# debian:trixie too: tests/integration/e2e/test_trixie_builder_stage.py builds the trixie toolkit row's builder
# stage (debootstrap once, ~1 min, ~120 MB)
setup_args=(--debian trixie)
[[ -n $EXTRA_CA ]] && setup_args+=(--extra-ca "$EXTRA_CA")

step() { printf '\n=== %s\n' "$*"; }

step "setup"
bash scripts/setup.sh "${setup_args[@]}"

set -a
# shellcheck disable=SC1091
source "${IMAGESMITH_STATE:-/var/lib/imagesmith-ci}/test-env"
set +a
# the extra CA certificate this machine needs for pip inside builds: a run-time flag, never a committed file
[[ -n $EXTRA_CA ]] && export IMAGESMITH_TEST_EXTRA_CA="$EXTRA_CA"

status=0
step "ruff check"
.venv/bin/ruff check . || status=1
step "ruff format --check"
.venv/bin/ruff format --check . || status=1
step "mypy imagesmith"
.venv/bin/mypy imagesmith || status=1
step "lint-imports (stages depend one way)"
.venv/bin/lint-imports --no-cache || status=1
step "imagesmith render --check"
.venv/bin/imagesmith render --check || status=1

step "pytest: tests/unit (no services) + tests/integration (dockerd, registries, sshd, e2e builds)"
set +e
.venv/bin/python -m pytest -p no:cacheprovider --durations=15 "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
    echo "pytest collected no tests (exit 5): that is a failure here" >&2
    rc=1
fi
[[ $rc -ne 0 ]] && status=1

step "result"
if [[ $status -eq 0 ]]; then echo "ALL PASSED"; else echo "FAILED (see the steps above)"; fi
exit $status
