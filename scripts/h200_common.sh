# Sourced by scripts/h200_validate_host.sh and scripts/h200_validate_image.sh (run on a lent H200 machine from the
# repository root, as root) once N (the GPU count) is set: the carried wheels on PYTHONPATH, and nccl-tests built on
# the host against torch's NCCL.
# shellcheck shell=bash

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# the suite's arguments (imagesmith.validate.nccl), for the plain runs it is compared with
PLAIN_ARGS=(-b 8 -e 1G -f 2 -g "$N" -c 1 -n 20 -w 5)
HOST_NCCL_TESTS=/tmp/nccl-tests/build

# the offline bundle made by `python scripts/gpu_host_bundle.py [--engine]` on a machine with network
(cd .carry && sha256sum -c --quiet SHA256SUMS) || {
    echo "the carried bundle (.carry/) is missing or damaged: run python scripts/gpu_host_bundle.py" >&2
    exit 1
}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl
export PYTHONPATH="/tmp/site"
NCCL_PKG="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')"

# build_host_nccl_tests JOBS LOG: nccl-tests from .carry/nccl-tests.tar (the pinned archive, `git archive` of the
# commit with prefix nccl-tests-<commit>/) for sm_90, against the host torch's NCCL, CUDA runtime static, into
# $HOST_NCCL_TESTS
build_host_nccl_tests() {
    local jobs=$1 log=$2
    mkdir -p /tmp/nccl-home/lib
    ln -sfn "$NCCL_PKG/include" /tmp/nccl-home/include
    ln -sf "$NCCL_PKG/lib/libnccl.so.2" /tmp/nccl-home/lib/libnccl.so
    rm -rf /tmp/nccl-tests /tmp/nccl-tests-* && tar -xf .carry/nccl-tests.tar -C /tmp && mv /tmp/nccl-tests-* /tmp/nccl-tests
    make -C /tmp/nccl-tests/src -j"$jobs" CUDA_HOME=/usr/local/cuda NCCL_HOME=/tmp/nccl-home \
        CUDARTLIB=cudart_static NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$HOST_NCCL_TESTS" \
        >"$log" 2>&1
}

# plain_host_allreduce PREFIX: plain all_reduce_perf on the host's N GPUs, three rounds → PREFIX-{1,2,3}.log
plain_host_allreduce() {
    local prefix=$1 i
    for i in 1 2 3; do
        LD_LIBRARY_PATH="$NCCL_PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_DEBUG=WARN \
            "$HOST_NCCL_TESTS/all_reduce_perf" "${PLAIN_ARGS[@]}" >"$prefix-$i.log" 2>&1
    done
}
