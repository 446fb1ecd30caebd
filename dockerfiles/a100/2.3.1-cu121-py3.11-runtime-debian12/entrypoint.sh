#!/bin/sh
# GENERATED — do not edit; run `imagesmith render`
# imagesmith entrypoint (2.3.1-cu121-py3.11-runtime-debian12): checks /dev/shm against what this image needs (8g), warns
# loudly with the exact `docker run` flags that fix it, then runs the command unchanged. Silent when enough.
need_bytes="${IMAGESMITH_SHM_MIN_BYTES:-8589934592}"
need_human="${IMAGESMITH_SHM_MIN:-8g}"
have_kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $2 }')
if [ -z "$have_kib" ]; then
    have_kib=0
fi
need_kib=$((need_bytes / 1024))
if [ "$have_kib" -lt "$need_kib" ]; then
    have_mib=$((have_kib / 1024))
    {
        echo "################################################################################"
        echo "imagesmith: WARNING: /dev/shm is ${have_mib}M, this image needs at least ${need_human}."
        echo "imagesmith: DataLoader workers die with 'Bus error' and NCCL fails to create its"
        echo "imagesmith: shared-memory segments when /dev/shm is too small. Restart the container with:"
        echo "imagesmith:   docker run --shm-size=${need_human} --ulimit memlock=-1 --ulimit stack=67108864 ..."
        echo "imagesmith: or share the host's IPC namespace:"
        echo "imagesmith:   docker run --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 ..."
        echo "################################################################################"
    } >&2
fi
exec "$@"
