#!/usr/bin/env bash
# Issue 33, second call on a lent 1×H200 machine (repository root there, as root, .carry/ from
# `python scripts/gpu_host_bundle.py`): whether dcgmi/fio are there (test_dcgm_diag says so), and a neighbour
# who arrives while the suite runs and only holds memory (no compute: nothing a throughput band can see) —
# test_gpus_free passes at the start, test_gpus_still_free must fail at the end naming it.
#
#   bash scripts/h200_listing_end.sh OUTDIR LISTING
set -uo pipefail
OUT="${1:?usage: $0 OUTDIR LISTING}"
LISTING="${2:?usage: $0 OUTDIR LISTING}"
mkdir -p "$OUT/raw" /var/tmp/imagesmith-data /var/tmp/imagesmith-ckpt
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
(cd .carry && sha256sum -c --quiet SHA256SUMS) || { echo "the carried bundle (.carry/) is missing or damaged" >&2; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl
export PYTHONPATH=/tmp/site
{ command -v dcgmi nv-hostengine fio || true; ls -d /usr/bin/*dcgm* /usr/local/bin/*dcgm* 2>/dev/null || true; } >"$OUT/raw/tools.txt" 2>&1
V=(python3 -m imagesmith validate local://)
run() { # run NAME CMD...: console in OUT/NAME.txt, exit code and wall time in OUT/commands.txt
    local name=$1 t0 rc; shift
    t0=$(date +%s%N)
    timeout -k 10 200 "$@" >"$OUT/$name.txt" 2>&1
    rc=$?
    echo "$name: exit $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms: $*" | tee -a "$OUT/commands.txt"
    grep -E "^(verdict|error):" "$OUT/$name.txt" | cut -c1-1500
}
python3 scripts/gpu_load.py hold 0 120 --gib 4.5 --delay 10 >"$OUT/raw/holder.txt" 2>&1 &
HOLDER=$!
run arrives "${V[@]}" --listing "$LISTING" --checkpoint-size 4g \
    -k "test_gpus_free or test_dcgm_diag or test_storage or test_listing or test_gpus_still_free" --report "$OUT/arrives"
kill "$HOLDER" 2>/dev/null; wait "$HOLDER" 2>/dev/null
exit 0
