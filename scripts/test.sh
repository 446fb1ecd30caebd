#!/usr/bin/env bash
# The whole test suite, one command (what CI runs through .ci/run): setup, lint, types, import contracts,
# render drift, pytest (tests/unit on every core, then tests/integration serially: docker + registry + e2e). As
# root on Debian bookworm. Extra pytest arguments are passed through.
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
step "mypy (imagesmith and tests: [tool.mypy] files)"
.venv/bin/mypy || status=1
step "lint-imports (stages depend one way)"
.venv/bin/lint-imports --no-cache || status=1
step "imagesmith render --check"
.venv/bin/imagesmith render --check || status=1

# Two pytest runs: tests/unit on every core (pytest-xdist: fakes and tmp folders only, nothing shared between
# tests), then tests/integration serially (one dockerd, the shared registries, one sshd). A tests/unit… path
# goes to the first run, any other tests/… path to the serial one, every other argument to both. A run whose
# selection is empty exits 5: that is a failure only when neither run collected a test.
unit=() serial=() common=()
for arg in "$@"; do
    case $arg in
        tests/unit | tests/unit/* | ./tests/unit | ./tests/unit/*) unit+=("$arg") ;;
        tests | tests/* | ./tests | ./tests/*) serial+=("$arg") ;;
        *) common+=("$arg") ;;
    esac
done
if [[ ${#unit[@]} -eq 0 && ${#serial[@]} -eq 0 ]]; then
    unit=(tests/unit)
    serial=(tests/integration)
fi
ran=0 empty=0
run_pytest() {
    set +e
    .venv/bin/python -m pytest -p no:cacheprovider --durations=15 "$@"
    local rc=$?
    set -e
    if [[ $rc -eq 5 ]]; then
        empty=$((empty + 1))
    elif [[ $rc -ne 0 ]]; then
        status=1
    fi
    ran=$((ran + 1))
}
if [[ ${#unit[@]} -gt 0 ]]; then
    step "pytest: ${unit[*]} (no services; -n auto: one worker per core)"
    run_pytest -n auto "${unit[@]}" "${common[@]}"
fi
if [[ ${#serial[@]} -gt 0 ]]; then
    step "pytest: ${serial[*]} (dockerd, registries, sshd, e2e builds; serial)"
    run_pytest "${serial[@]}" "${common[@]}"
fi
if [[ $empty -eq $ran ]]; then
    echo "pytest collected no tests (exit 5): that is a failure here" >&2
    status=1
fi

step "result"
if [[ $status -eq 0 ]]; then echo "ALL PASSED"; else echo "FAILED (see the steps above)"; fi
exit $status
