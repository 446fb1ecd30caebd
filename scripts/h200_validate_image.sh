#!/usr/bin/env bash
# Image-level proof of the validation suite on a lent H200 machine (repo root there, as root; no network, no
# registry, no docker CLI). Idempotent steps, so a second call on the same (still warm) machine continues:
#   1. dockerd from Debian's binaries carried in .carry/docker-bin.tar.xz (setsid: it outlives the call)
#   2. the base image imagesmith/h200-host-base:torch2.11.0-cu130 = the host's own OS + CUDA 13.0 + torch tree,
#      imported through imagesmith.engine.Engine.import_rootfs
#   3. `imagesmith build --matrix h200-host --backend sdk` (Engine API builder): imagesmith's layers on that base
#      (suite + its wheels, entrypoint, nccl-tests compiled with the base's nvcc against torch's NCCL)
#   4. `imagesmith validate IMAGE --expect-count N --expect-gpu H200 --expect-nvlink` (timed): the container gets
#      the GPUs through /dev/nvidia* + the read-only driver tree (no NVIDIA container toolkit there)
#   5. negative control: the same image with --shm-size 64m, shm checks only
#
#   bash scripts/h200_validate_image.sh OUTDIR [EXPECT_COUNT]
set -uo pipefail
OUT="${1:?usage: $0 OUTDIR [EXPECT_COUNT]}"
N="${2:-$(nvidia-smi -L | grep -c '^GPU ')}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export IMAGESMITH_CACHE="$PWD/.carry/cache"
CELL=2.11.0-cu130-py3.12-runtime-ubuntu24.04
BASE=imagesmith/h200-host-base:torch2.11.0-cu130
IMAGE=imagesmith/h200-host:$CELL
log() { printf '[%s] %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl
export PYTHONPATH="/tmp/site:$PWD"
py() { python3 - "$@"; }

# 1. engine ---------------------------------------------------------------------------------------------------
if ! py <<'EOF' 2>/dev/null; then
import docker; docker.from_env(timeout=5).ping()
EOF
    log "starting dockerd"
    mkdir -p /tmp/dk && tar -xJf .carry/docker-bin.tar.xz -C /tmp/dk
    PATH="/tmp/dk/bin:$PATH" LD_LIBRARY_PATH=/tmp/dk/lib setsid nohup dockerd --iptables=false --ip-masq=false \
        --bridge=none --data-root /tmp/docker-data --storage-driver overlay2 >/tmp/dockerd.log 2>&1 </dev/null &
    for _ in $(seq 60); do
        py <<'EOF' 2>/dev/null && break
import docker; docker.from_env(timeout=5).ping()
EOF
        sleep 1
    done
    log "dockerd: $(py <<'EOF'
import docker; v = docker.from_env().version(); print(v["Version"], v["ApiVersion"])
EOF
)"
fi
export PATH="/tmp/dk/bin:$PATH"

# 2. base image from the host tree ----------------------------------------------------------------------------
if ! py "$BASE" <<'EOF'; then
import sys
from imagesmith.engine import Engine
sys.exit(0 if Engine().inspect(sys.argv[1]) else 1)
EOF
    log "tar of the host tree ($(du -sh /opt/torch 2>/dev/null | cut -f1) in /opt/torch)"
    tar -C / -cf /tmp/host-root.tar bin sbin lib lib64 usr/bin usr/sbin usr/lib usr/lib64 usr/libexec usr/include \
        usr/share/zoneinfo etc \
        opt/torch usr/local/cuda-13.0 usr/local/cuda 2>/tmp/tar.err
    log "importing $(du -h /tmp/host-root.tar | cut -f1) as $BASE"
    py "$BASE" <<'EOF' || { log "import failed"; exit 1; }
import sys
from pathlib import Path
from imagesmith.engine import Engine
print(Engine(timeout=1800).import_rootfs(Path("/tmp/host-root.tar"), sys.argv[1], ["CMD [\"/bin/bash\"]"]))
EOF
    rm -f /tmp/host-root.tar
    log "base imported"
fi

# 3. imagesmith build -----------------------------------------------------------------------------------------
if ! py "$IMAGE" <<'EOF'; then
import sys
from imagesmith.engine import Engine
sys.exit(0 if Engine().inspect(sys.argv[1]) else 1)
EOF
    # imagesmith's own wheel, built offline (no build isolation: setuptools/wheel are on the host)
    digest="$(py <<'EOF'
from imagesmith.build import REPO_ROOT, _source_digest
print(_source_digest(REPO_ROOT))
EOF
)"
    mkdir -p "$IMAGESMITH_CACHE/wheels/$digest"
    ls "$IMAGESMITH_CACHE/wheels/$digest"/imagesmith-*.whl >/dev/null 2>&1 ||
        SOURCE_DATE_EPOCH=315532800 python3 -m pip wheel -q --no-deps --no-build-isolation \
            -w "$IMAGESMITH_CACHE/wheels/$digest" . >"$OUT/wheel.log" 2>&1
    # the suite's pinned wheels (requirements.txt of the cell): build.py does not fill them for base cells yet
    cp .carry/ctxwheels/*.whl "dockerfiles/h200-host/$CELL/wheels/"
    log "imagesmith build --matrix h200-host --backend sdk"
    t0=$(date +%s)
    python3 -m imagesmith build --matrix h200-host --backend sdk --summary "$OUT/build-summary.json" \
        >"$OUT/build.log" 2>&1
    rc=$?
    log "build exit $rc in $(($(date +%s) - t0)) s"
    tail -20 "$OUT/build.log"
    [[ $rc -eq 0 ]] || exit 1
fi

# 4. validate the image ---------------------------------------------------------------------------------------
if [[ ! -f $OUT/image/report.json ]]; then
    CMD=(python3 -m imagesmith validate "$IMAGE" --expect-count "$N" --expect-gpu H200 --expect-nvlink
        --report "$OUT/image")
    log "+ ${CMD[*]}"
    t0=$(date +%s%N)
    "${CMD[@]}" >"$OUT/image-validate.txt" 2>&1
    rc=$?
    t1=$(date +%s%N)
    log "validate IMAGE exit $rc, wall time $(((t1 - t0) / 1000000)) ms (container start to removal included)"
    tail -30 "$OUT/image-validate.txt"
fi

# 5. negative control: 64 MB of /dev/shm ----------------------------------------------------------------------
if [[ ! -f $OUT/image-shm64m/report.json ]]; then
    CMD=(python3 -m imagesmith validate "$IMAGE" --shm-size 64m -k "shm" --report "$OUT/image-shm64m")
    log "+ ${CMD[*]}"
    "${CMD[@]}" >"$OUT/image-shm64m.txt" 2>&1
    log "validate IMAGE --shm-size 64m exit $?"
    grep -E "FAILED|PASSED|verdict" "$OUT/image-shm64m.txt" | tail -6
fi
py "$IMAGE" "$BASE" >"$OUT/images.txt" <<'EOF'
import sys
from imagesmith.engine import Engine
e = Engine()
for ref in sys.argv[1:]:
    d = e.inspect(ref) or {}
    print(ref, d.get("Id"), round(d.get("Size", 0) / 1e9, 2), "GB", len((d.get("RootFS") or {}).get("Layers", [])), "layers")
EOF
cat "$OUT/images.txt"
exit 0
