#!/usr/bin/env bash
# Host-level proof of the validation suite on a lent H200 machine (run from the repo root there, as root).
#
#   bash scripts/h200_validate_host.sh OUTDIR [EXPECT_COUNT]
#
# Needs .carry/ = the offline bundle of `python scripts/gpu_host_bundle.py` (imagesmith and its dependencies as
# wheels for the host's Python, the pinned nccl-tests archive, SHA256SUMS). The host's own python3 (torch + NCCL).
# Steps: build nccl-tests for sm_90 against torch's NCCL; capture nvidia-smi / topo outputs; run
# `imagesmith validate local://` (timed; --expect-nvlink from 2 GPUs on); negative controls (--expect-count 8
# where there are fewer; on one GPU also --expect-nvlink); with 2+ GPUs plain all_reduce_perf three times with the
# suite's arguments; comparison.txt.
set -uo pipefail
OUT="${1:?usage: $0 OUTDIR [EXPECT_COUNT]}"
N="${2:-$(nvidia-smi -L | grep -c '^GPU ')}"
mkdir -p "$OUT/raw"
PY=python3
# shellcheck source=scripts/h200_common.sh
source "$(dirname "$0")/h200_common.sh"

# nccl-tests against torch's own NCCL ------------------------------------------------------------------------
t0=$(date +%s)
build_host_nccl_tests "$(nproc)" "$OUT/raw/nccl-tests-build.log" || { tail -30 "$OUT/raw/nccl-tests-build.log"; exit 1; }
echo "nccl-tests built in $(($(date +%s) - t0)) s"

# raw captures (test data for the parsers) -------------------------------------------------------------------
nvidia-smi >"$OUT/raw/nvidia-smi.txt" 2>&1
nvidia-smi -L >"$OUT/raw/nvidia-smi-L.txt" 2>&1
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,compute_cap,mig.mode.current,ecc.mode.current,ecc.errors.uncorrected.volatile.total,power.limit,power.default_limit,power.max_limit \
    --format=csv >"$OUT/raw/nvidia-smi-query.csv" 2>&1
nvidia-smi topo -m >"$OUT/raw/topo-m.txt" 2>&1
nvidia-smi topo -p2p n >"$OUT/raw/topo-p2p-n.txt" 2>&1
nvidia-smi topo -p2p r >"$OUT/raw/topo-p2p-r.txt" 2>&1
{ uname -a; cat /etc/os-release; ls -la /usr/local/nvidia /usr/local/nvidia/bin /dev/nvidia* 2>&1; } >"$OUT/raw/host.txt" 2>&1

# the suite --------------------------------------------------------------------------------------------------
NVLINK=()
[[ $N -ge 2 ]] && NVLINK=(--expect-nvlink)
CMD=($PY -m imagesmith validate local:// --expect-count "$N" --expect-gpu H200 "${NVLINK[@]}"
    --nccl-tests "$HOST_NCCL_TESTS" --report "$OUT/report")
echo "+ ${CMD[*]}" | tee "$OUT/command.txt"
t0=$(date +%s%N)
"${CMD[@]}" >"$OUT/suite-output.txt" 2>&1
rc=$?
t1=$(date +%s%N)
echo "suite exit code $rc, wall time $(( (t1 - t0) / 1000000 )) ms" | tee -a "$OUT/command.txt"
tail -25 "$OUT/suite-output.txt"

# negative controls: more GPUs than there are; NVLink on a single GPU -----------------------------------------
negative() { # negative NAME ARGS...: the suite must fail (exit 7)
    local name=$1; shift
    $PY -m imagesmith validate local:// "$@" --report "$OUT/negative-$name" >"$OUT/negative-$name.txt" 2>&1
    echo "negative control $name ($*): exit $? (7 expected)" | tee -a "$OUT/command.txt"
    grep -E "^verdict" "$OUT/negative-$name.txt" | tail -1
}
[[ $N -lt 8 ]] && negative expect-count-8 --expect-count 8 -k test_gpu_inventory
[[ $N -eq 1 ]] && negative expect-nvlink-1gpu --expect-nvlink -k "test_gpu_inventory or test_topology"

if [[ $N -lt 2 ]]; then
    $PY - "$OUT" <<'EOF' | tee "$OUT/comparison.txt"
import json, sys
from pathlib import Path
rep = json.loads((Path(sys.argv[1]) / "report/report.json").read_text())
print("one GPU: no all_reduce comparison (the suite's multi-GPU checks are skipped with their reason)")
print(f"suite wall time (report) = {rep['duration_s']} s (goal < 120 s); verdict {rep['verdict']}: {rep['verdict_reason']}")
EOF
    exit 0
fi

# plain all_reduce_perf, same arguments, three rounds ----------------------------------------------------------
plain_host_allreduce "$OUT/raw/plain-allreduce"
$PY - "$OUT" <<'EOF' | tee "$OUT/comparison.txt"
import json, sys
from pathlib import Path
from imagesmith.validate.parsers import parse_nccl_log
out = Path(sys.argv[1])
plain = [parse_nccl_log((out / f"raw/plain-allreduce-{i}.log").read_text()).max_size_busbw for i in (1, 2, 3)]
rep = json.loads((out / "report/report.json").read_text())
nccl = next(c for c in rep["checks"] if c["name"] == "test_nccl_allreduce")
suite = [r["max_size_busbw"] for r in nccl["figures"]["rounds"]]
ps, ss = sum(plain) / len(plain), sum(suite) / len(suite)
print(f"plain all_reduce_perf busbw at 1 GiB per round: {plain} mean {ps:.2f} GB/s")
print(f"suite busbw at 1 GiB per round: {suite} mean {ss:.2f} GB/s")
print(f"ratio suite/plain = {ss / ps:.4f} (goal >= 0.97)")
print(f"suite wall time (report) = {rep['duration_s']} s (goal < 120 s); verdict {rep['verdict']}")
EOF
exit 0
