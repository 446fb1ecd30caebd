#!/usr/bin/env bash
# Start (idempotently) the local services imagesmith's tests and builds use on this machine:
#   - dockerd (Debian's docker.io, overlay2, log in $STATE/dockerd.log)
#   - a plain registry on 127.0.0.1:5000 and an htpasswd + TLS registry on 127.0.0.1:5443 (Debian's docker-registry),
#     delete enabled, data under $STATE/registry-{plain,auth}
# Test credentials and the registries' CA are generated into $STATE (never committed); $STATE/test-env holds the
# variables the tests read.
#
# usage: scripts/services.sh start|stop|status
set -euo pipefail

STATE="${IMAGESMITH_STATE:-/var/lib/imagesmith-ci}"
PLAIN_ADDR=127.0.0.1:5000
AUTH_ADDR=127.0.0.1:5443
REGISTRY_BIN="${REGISTRY_BIN:-/usr/bin/docker-registry}"

log() { printf '[services] %s\n' "$*" >&2; }

wait_for() { # wait_for SECONDS DESCRIPTION CMD...
    local limit=$1 what=$2; shift 2
    local i
    for ((i = 0; i < limit * 4; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.25
    done
    log "timed out after ${limit}s waiting for ${what}"
    return 1
}

engine_up() { /usr/bin/docker info >/dev/null 2>&1; }

# A container network namespace that outlived its dockerd (killed, or stopped before it cleaned up) stays
# bind-mounted under /run/docker/netns with its veth still on docker0 and its address (172.17.0.2 …): the next
# dockerd hands that address out again, and every container given it is unreachable through its published
# ports (seen on a machine whose dockerd was stopped mid-run). With no dockerd running none of them is in use.
clear_stale_netns() {
    local ns
    for ns in /run/docker/netns/*; do
        [[ -e $ns ]] || continue
        log "removing the network namespace a dead dockerd left: $ns"
        umount -l "$ns" 2>/dev/null || true
        rm -f "$ns"
    done
}

start_dockerd() {
    if engine_up; then log "dockerd already running"; return 0; fi
    if pgrep -x dockerd >/dev/null; then
        # a dockerd that does not answer (still starting, or stopping): wait for it rather than start another
        if wait_for 30 "the running dockerd" engine_up; then return 0; fi
        log "a dockerd process runs but does not answer: stop it (scripts/services.sh stop) and run again"
        return 1
    fi
    clear_stale_netns
    mkdir -p "$STATE"
    log "starting dockerd (log: $STATE/dockerd.log)"
    setsid dockerd --storage-driver overlay2 >>"$STATE/dockerd.log" 2>&1 < /dev/null &
    echo $! >"$STATE/dockerd.pid"
    if ! wait_for 60 dockerd engine_up; then
        tail -n 30 "$STATE/dockerd.log" >&2
        return 1
    fi
}

make_certs() {
    local d="$STATE/tls"
    if [[ -s "$d/ca.crt" && -s "$d/server.crt" && -s "$d/server.key" ]]; then return 0; fi
    mkdir -p "$d"
    log "generating a test CA and a server certificate for $AUTH_ADDR"
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/CN=imagesmith test CA" \
        -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=127.0.0.1" \
        -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
        >"$d/server.ext"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
        -sha256 -extfile "$d/server.ext" -out "$d/server.crt" 2>/dev/null
    chmod 600 "$d"/*.key
}

make_credentials() {
    if [[ -s "$STATE/htpasswd" && -s "$STATE/test-env" ]]; then return 0; fi
    local user=imagesmith-test pass
    pass="$(openssl rand -hex 16)"
    # -i: the password comes from stdin, not argv
    printf '%s' "$pass" | htpasswd -iBc "$STATE/htpasswd" "$user" 2>/dev/null
    umask 077
    cat >"$STATE/test-env" <<ENV
IMAGESMITH_TEST_STATE=$STATE
IMAGESMITH_TEST_PLAIN_REGISTRY=$PLAIN_ADDR
IMAGESMITH_TEST_AUTH_REGISTRY=$AUTH_ADDR
IMAGESMITH_TEST_AUTH_USER=$user
IMAGESMITH_TEST_AUTH_PASSWORD=$pass
IMAGESMITH_TEST_CA=$STATE/tls/ca.crt
IMAGESMITH_TEST_REGISTRY_BIN=$REGISTRY_BIN
ENV
    umask 022
}

write_registry_config() { # name addr extra-yaml
    local name=$1 addr=$2 extra=$3
    mkdir -p "$STATE/registry-$name"
    cat >"$STATE/registry-$name.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $STATE/registry-$name
  delete:
    enabled: true
http:
  addr: $addr
  secret: imagesmith-local-$name
$extra
YAML
}

registry_up() { # url [curl args]
    local code
    code="$(curl -s -o /dev/null -w '%{http_code}' "$@")" || return 1
    [[ "$code" == 200 || "$code" == 401 ]]
}

start_registry() { # name addr url [curl args]
    local name=$1 addr=$2 url=$3; shift 3
    if registry_up "$url" "$@"; then log "registry $name already answers at $addr"; return 0; fi
    log "starting registry $name on $addr (log: $STATE/registry-$name.log)"
    setsid "$REGISTRY_BIN" serve "$STATE/registry-$name.yml" >>"$STATE/registry-$name.log" 2>&1 < /dev/null &
    echo $! >"$STATE/registry-$name.pid"
    if ! wait_for 30 "registry $name" registry_up "$url" "$@"; then
        tail -n 20 "$STATE/registry-$name.log" >&2
        return 1
    fi
}

trust_ca_in_dockerd() {
    mkdir -p "/etc/docker/certs.d/$AUTH_ADDR"
    if ! cmp -s "$STATE/tls/ca.crt" "/etc/docker/certs.d/$AUTH_ADDR/ca.crt"; then
        cp "$STATE/tls/ca.crt" "/etc/docker/certs.d/$AUTH_ADDR/ca.crt"
    fi
}

start_all() {
    mkdir -p "$STATE"
    start_dockerd
    make_certs
    make_credentials
    trust_ca_in_dockerd
    write_registry_config plain "$PLAIN_ADDR" ""
    write_registry_config auth "$AUTH_ADDR" "  tls:
    certificate: $STATE/tls/server.crt
    key: $STATE/tls/server.key
auth:
  htpasswd:
    realm: imagesmith-test
    path: $STATE/htpasswd"
    start_registry plain "$PLAIN_ADDR" "http://$PLAIN_ADDR/v2/"
    start_registry auth "$AUTH_ADDR" "https://$AUTH_ADDR/v2/" --cacert "$STATE/tls/ca.crt"
}

stop_pid() { # name
    local f="$STATE/$1.pid"
    if [[ -s "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null; then
        log "stopping $1 (pid $(cat "$f"))"
        kill "$(cat "$f")"
        # until it is gone: dockerd stops its containers and removes their network namespaces first
        wait_for 60 "$1 to exit" sh -c "! kill -0 $(cat "$f")" || true
    fi
    rm -f "$f"
}

case "${1:-start}" in
start) start_all ;;
stop)
    stop_pid registry-plain
    stop_pid registry-auth
    stop_pid dockerd
    ;;
status)
    engine_up && echo "dockerd: up" || echo "dockerd: down"
    registry_up "http://$PLAIN_ADDR/v2/" && echo "registry plain $PLAIN_ADDR: up" || echo "registry plain: down"
    registry_up "https://$AUTH_ADDR/v2/" --cacert "$STATE/tls/ca.crt" && echo "registry auth $AUTH_ADDR: up" \
        || echo "registry auth: down"
    ;;
*) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
