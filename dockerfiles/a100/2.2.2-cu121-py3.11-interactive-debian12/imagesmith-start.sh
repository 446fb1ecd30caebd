#!/bin/sh
# GENERATED — do not edit; run `imagesmith render`
# imagesmith-start (2.2.2-cu121-py3.11-interactive-debian12): the interactive flavor's start command, run under tini (PID 1) after the
# entrypoint's /dev/shm guard. It follows the convention of RunPod-style base images (docs/interactive.md):
#   PUBLIC_KEY          → the key(s) in /root/.ssh/authorized_keys (mode 600) and sshd on $SSH_PORT
#                         (22): root by key only, host keys made at the container's first start
#   JUPYTER_PASSWORD    → JupyterLab on $JUPYTER_PORT (8888) with that token, its root
#                         $IMAGESMITH_WORKSPACE (/workspace, the persistent volume)
#   TENSORBOARD_LOGDIR  → TensorBoard on $TENSORBOARD_PORT (6006) over that folder
# then idles, so the container stays up; SIGTERM (docker stop) stops the services and exits at once.
# JupyterLab never starts without a token unless IMAGESMITH_JUPYTER_NO_TOKEN=1 says so. Nothing secret is printed.
set -u
workspace="${IMAGESMITH_WORKSPACE:-/workspace}"
ssh_port="${SSH_PORT:-22}"
jupyter_port="${JUPYTER_PORT:-8888}"
tensorboard_port="${TENSORBOARD_PORT:-6006}"
pids=""

log() {
    echo "imagesmith-start: $*" >&2
}

stop() {
    trap - TERM INT HUP
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -TERM $pids 2>/dev/null
    exit 0
}
trap stop TERM INT HUP

# What ssh sessions see: the container's environment (PATH with the venv, CUDA and NCCL settings, the -e variables
# of `docker run`) without the secrets. sshd reads /root/.ssh/environment (PermitUserEnvironment); login shells
# read it again through /etc/profile.d/imagesmith-env.sh (Debian's /etc/profile resets PATH).
session_env() (
    umask 077
    out=/root/.ssh/environment
    : >"$out"
    for name in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' | sort -u); do
        case "$name" in
            PUBLIC_KEY | JUPYTER_PASSWORD | JUPYTER_TOKEN | HOME | HOSTNAME | PWD | OLDPWD | SHLVL | TERM | _) continue ;;
        esac
        eval "isset=\${$name+x}"
        [ -n "$isset" ] || continue
        eval "value=\${$name}"
        case "$value" in
            *'
'*) continue ;;
        esac
        printf '%s=%s\n' "$name" "$value" >>"$out"
    done
)

mkdir -p "$workspace"

# a service started in the background: its name, pid and port, watched until docker stop (see the end)
started() { # started NAME PORT-VARIABLE PORT
    pids="$pids $!"
    services="$services $1:$!:$2:$3"
}
services=""

# the keys of PUBLIC_KEY that ssh-keygen reads as public keys (one per line; CRLF pasted from Windows is fine)
valid_keys() {
    printf '%s\n' "$PUBLIC_KEY" | tr -d '\r' | {
        n=0
        while IFS= read -r key; do
            n=$((n + 1))
            [ -n "$key" ] || continue
            if printf '%s\n' "$key" | ssh-keygen -lf - >/dev/null 2>&1; then
                printf '%s\n' "$key"
            else
                log "ERROR: PUBLIC_KEY line $n is not an SSH public key (ssh-keygen cannot read it): skipped;" \
                    "give the one line of your key's .pub file (ssh-ed25519 AAAA… or ssh-rsa AAAA…)"
            fi
        done
    }
}

if [ -n "${PUBLIC_KEY:-}" ]; then
    case "$PUBLIC_KEY" in
        *"PRIVATE KEY"*)
            log "ERROR: PUBLIC_KEY holds a PRIVATE key: not used, sshd not started; give the .pub file's line" \
                "(and treat that private key as exposed to whoever set this variable)"
            keys_ok=""
            ;;
        *) keys_ok=$(valid_keys) ;;
    esac
else
    keys_ok=""
fi
if [ -n "$keys_ok" ]; then
    ssh-keygen -A >/dev/null # only the missing host keys: this container's own, made at its first start
    install -d -m 0700 /root/.ssh
    keys=/root/.ssh/authorized_keys
    touch "$keys"
    chmod 0600 "$keys"
    printf '%s\n' "$keys_ok" | while IFS= read -r key; do
        grep -qxF -- "$key" "$keys" || printf '%s\n' "$key" >>"$keys"
    done
    session_env
    install -d -m 0755 /run/sshd
    env -u PUBLIC_KEY -u JUPYTER_PASSWORD /usr/sbin/sshd -D -e -p "$ssh_port" &
    started sshd SSH_PORT "$ssh_port"
    fingerprint=$(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub | cut -d ' ' -f 2)
    log "sshd on port $ssh_port: root by key only; host key $fingerprint (ED25519)"
elif [ -n "${PUBLIC_KEY:-}" ]; then
    log "ERROR: sshd not started: PUBLIC_KEY holds no usable SSH public key"
else
    log "sshd not started: set PUBLIC_KEY to an SSH public key to log in as root"
fi

if [ -n "${JUPYTER_PASSWORD:-}" ] || [ "${IMAGESMITH_JUPYTER_NO_TOKEN:-}" = 1 ]; then
    if [ -n "${JUPYTER_PASSWORD:-}" ]; then
        # the token goes through the environment, never the command line (ps, docker top) nor the log
        env -u PUBLIC_KEY -u JUPYTER_PASSWORD JUPYTER_TOKEN="$JUPYTER_PASSWORD" \
            jupyter lab --allow-root --no-browser --ip=0.0.0.0 --port="$jupyter_port" \
            --ServerApp.root_dir="$workspace" --ServerApp.allow_remote_access=True --ServerApp.port_retries=0 &
        started JupyterLab JUPYTER_PORT "$jupyter_port"
        log "JupyterLab on port $jupyter_port, root $workspace, token: \$JUPYTER_PASSWORD"
    else
        env -u PUBLIC_KEY -u JUPYTER_PASSWORD -u JUPYTER_TOKEN \
            jupyter lab --allow-root --no-browser --ip=0.0.0.0 --port="$jupyter_port" \
            --ServerApp.root_dir="$workspace" --ServerApp.allow_remote_access=True --ServerApp.port_retries=0 \
            --IdentityProvider.token= --ServerApp.password= &
        started JupyterLab JUPYTER_PORT "$jupyter_port"
        log "WARNING: JupyterLab on port $jupyter_port WITHOUT a token (IMAGESMITH_JUPYTER_NO_TOKEN=1):" \
            "whoever reaches that port runs code as root"
    fi
else
    log "JupyterLab not started: set JUPYTER_PASSWORD (its token)"
fi

if [ -n "${TENSORBOARD_LOGDIR:-}" ]; then
    mkdir -p "$TENSORBOARD_LOGDIR"
    env -u PUBLIC_KEY -u JUPYTER_PASSWORD \
        tensorboard --logdir "$TENSORBOARD_LOGDIR" --bind_all --port "$tensorboard_port" &
    started TensorBoard TENSORBOARD_PORT "$tensorboard_port"
    log "TensorBoard on port $tensorboard_port over $TENSORBOARD_LOGDIR (no login: publish the port with care)"
fi

# idle until docker stop, watching the services: one that exits (its port taken, a crash) is named once with
# its status and the fix; the container stays up for the others. `wait` returns on the signal, and the trap
# stops the services (and the current sleep, in $pids).
watched="$services"
base_pids="$pids"
while :; do
    sleep 2 &
    pids="$base_pids $!"
    wait $!
    still=""
    for entry in $watched; do
        name=${entry%%:*}
        rest=${entry#*:}
        pid=${rest%%:*}
        rest=${rest#*:}
        var=${rest%%:*}
        port=${rest#*:}
        # alive = its /proc entry is there and not a zombie (kill -0 also succeeds on a zombie)
        state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)
        if [ -n "$state" ] && [ "$state" != Z ]; then
            still="$still $entry"
        else
            wait "$pid"
            status=$?
            log "ERROR: $name (port $port) exited with status $status: see its lines above; if the port is" \
                "taken (another server, --network host), set $var to a free one"
        fi
    done
    watched="$still"
done
