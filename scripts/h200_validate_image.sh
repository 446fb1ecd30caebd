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
#   6. plain all_reduce_perf (the suite's arguments, three rounds) in a container of the same image with the same
#      flags, and on the host itself (nccl-tests built there in the background from .carry/nccl-tests.tar,
#      sm_90, against the host torch's NCCL); comparison.txt: suite busbw / plain busbw, suite wall time
#
#   bash scripts/h200_validate_image.sh OUTDIR [EXPECT_COUNT]
set -uo pipefail
OUT="${1:?usage: $0 OUTDIR [EXPECT_COUNT]}"
N="${2:-$(nvidia-smi -L | grep -c '^GPU ')}"
mkdir -p "$OUT"
export IMAGESMITH_CACHE="$PWD/.carry/cache"
CELL=2.11.0-cu130-py3.12-runtime-ubuntu24.04
BASE=imagesmith/h200-host-base:torch2.11.0-cu130
IMAGE=imagesmith/h200-host:$CELL
log() { printf '[%s] %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }

# shellcheck source=scripts/h200_common.sh
source "$(dirname "$0")/h200_common.sh"
py() { python3 - "$@"; }

# 0. host nccl-tests for the plain comparison, in the background (16 jobs; the import below is I/O bound) -----
if [[ ! -x $HOST_NCCL_TESTS/all_reduce_perf ]]; then
    build_host_nccl_tests 16 "$OUT/host-nccl-tests-build.log" &
    HOST_MAKE=$!
fi

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
    # from a copy: setuptools leaves imagesmith.egg-info in the source folder, and with the checkout on PYTHONPATH
    # the host-level suite's `pip check` would then judge that metadata (typer>=0.29 against the host's typer)
    if ! ls "$IMAGESMITH_CACHE/wheels/$digest"/imagesmith-*.whl >/dev/null 2>&1; then
        rm -rf /tmp/imagesmith-src && mkdir /tmp/imagesmith-src && cp -r pyproject.toml README.md imagesmith /tmp/imagesmith-src/
        SOURCE_DATE_EPOCH=315532800 python3 -m pip wheel -q --no-deps --no-build-isolation \
            -w "$IMAGESMITH_CACHE/wheels/$digest" /tmp/imagesmith-src >"$OUT/wheel.log" 2>&1
    fi
    # the suite's pinned wheels (requirements.txt of the cell; no index there): --wheels puts them in the context
    log "imagesmith build --matrix h200-host --backend sdk --wheels .carry/ctxwheels"
    t0=$(date +%s)
    python3 -m imagesmith build --matrix h200-host --backend sdk --wheels .carry/ctxwheels \
        --summary "$OUT/build-summary.json" >"$OUT/build.log" 2>&1
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
# 6. plain all_reduce_perf: in the image (same container flags as validate) and on the host ------------------
ARGS=("${PLAIN_ARGS[@]}")
if [[ ! -f $OUT/plain-image-allreduce-3.log ]]; then
    log "plain all_reduce_perf ${ARGS[*]} in $IMAGE, three rounds"
    py "$IMAGE" "$OUT" "${ARGS[@]}" <<'EOF'
import shlex, sys
from pathlib import Path
from imagesmith.engine import Engine
from imagesmith.validate.container import plan_image_run, run_with_plan
image, out, args = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
engine = Engine()
plan = plan_image_run(engine.inspect(image) or {}, shm_override=None, shm_min_override=None)
inner = (
    'lib="$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")/lib"; '
    'LD_LIBRARY_PATH="$lib:$LD_LIBRARY_PATH" NCCL_DEBUG=WARN exec all_reduce_perf ' + shlex.join(args)
)
for i in (1, 2, 3):  # the container flags `imagesmith validate IMAGE` uses
    r, note = run_with_plan(engine, image, ["sh", "-c", inner], plan, gpus="all", timeout_s=300)
    if note:
        print(note)
    (out / f"plain-image-allreduce-{i}.log").write_text(r.output)
    print(f"round {i}: exit {r.exit_code} in {r.duration_s:.1f} s")
EOF
fi
if [[ -n ${HOST_MAKE:-} ]]; then
    wait "$HOST_MAKE" || { log "host nccl-tests build failed"; tail -20 "$OUT/host-nccl-tests-build.log"; }
fi
if [[ ! -f $OUT/plain-host-allreduce-3.log && -x $HOST_NCCL_TESTS/all_reduce_perf ]]; then
    log "plain all_reduce_perf ${ARGS[*]} on the host, three rounds"
    plain_host_allreduce "$OUT/plain-host-allreduce"
fi
py "$OUT" <<'EOF' | tee "$OUT/comparison.txt"
import json, sys
from pathlib import Path
from imagesmith.validate.parsers import parse_nccl_log
out = Path(sys.argv[1])
rep = json.loads((out / "image/report.json").read_text())
nccl = next(c for c in rep["checks"] if c["name"] == "test_nccl_allreduce")
suite = [r["max_size_busbw"] for r in nccl["figures"]["rounds"]]
ss = sum(suite) / len(suite)
print(f"suite in the image, busbw at 1 GiB per round: {suite} mean {ss:.2f} GB/s")
for where in ("image", "host"):
    logs = [out / f"plain-{where}-allreduce-{i}.log" for i in (1, 2, 3)]
    if not all(p.exists() for p in logs):
        print(f"plain all_reduce_perf in the {where}: not run")
        continue
    plain = [parse_nccl_log(p.read_text()).max_size_busbw for p in logs]
    ps = sum(plain) / len(plain)
    print(f"plain all_reduce_perf in the {where}, busbw at 1 GiB per round: {plain} mean {ps:.2f} GB/s")
    print(f"  ratio suite-in-image / plain-in-{where} = {ss / ps:.4f} (goal >= 0.97)")
print(f"suite wall time inside the image (report.json duration_s) = {rep['duration_s']} s (goal < 120 s)")
print(f"verdict {rep['verdict']}; {sum(c['status'] == 'passed' for c in rep['checks'])} of {len(rep['checks'])} passed")
EOF
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
